/* `kernlab bench allreduce`: every variant on bf16 buffers of 8 KB .. 256 MB per rank, for every
 * world from 2 to this machine's GPU count, NCCL (v0) always among them as the yardstick.
 *
 * Method, as nccl-tests measures (lab/CONTRACTS.md section 6): each rank times its own calls; the row's
 * time is the slowest rank's median. Every workload is timed as CUDA-graph replays (per_graph
 * calls a graph, 20 replays queued back to back after one host barrier, so the ranks run in the
 * lockstep the barrier imposes, as a serving engine's decode step replays them) and, beside it,
 * as single eager calls between events. Inputs rotate over up to 20 sets so the working set
 * exceeds the L2 where the size allows. algbw = bytes of one rank's buffer / time; busbw = algbw
 * x 2(world-1)/world. Gated: latency_vs_nccl (our time / NCCL's, same run) at decode sizes,
 * busbw_frac (our busbw / NCCL's) at 256 MB, for the variant the targets file names (or the one
 * --variant names), never NCCL: it is the yardstick of both metrics.
 * Re-check: the last graph replay is the checked one. Every rank's out is poisoned between two
 * host barriers before it (no rank's earlier replay still writing, every out poisoned before any
 * rank starts), its last call is input set 0's (kl_time_set), and after it each rank compares its
 * own share of the elements (1/world of them) with the float64 sums and hashes its whole out: with
 * the ranks' hashes equal, every element of every rank's output was checked.
 *
 * Processes: a "measure" child (one process, two GPUs) takes the device ceilings when the caller
 * has none and the peer copy bandwidth; then one rank group per world runs the program
 * "allreduce_bench": a timing pass over every (size, variant), then, with --counters, a pass
 * collecting CUPTI kernel records and counters in lockstep on every rank (a collective must run
 * on every rank each time the profiler replays it). Rows are assembled here from what every
 * rank left in the shared mapping.
 *
 * The fused all-reduce + residual add + RMSNorm has workloads of its own (add-rmsnorm-tT-hH-worldW:
 * T tokens of hidden H in bf16, decode sizes), timed the same way in the same run for three things:
 * each fused variant, the composite a decoder runs without one (our plain all-reduce, then our
 * fused add + RMSNorm from kernels/rmsnorm on its output: COMPOSITE_ALLREDUCE, COMPOSITE_RMSNORM),
 * and that plain all-reduce alone. Two rows a workload, the fused variant's and the composite's;
 * both carry the plain all-reduce's time (plain_allreduce_us) and over_allreduce_us, their time
 * minus it, which the gate judges for the fused variant's rows. Residual and weight are one set;
 * x rotates as above. Each rank re-checks its share of the tokens of the checked replay against
 * the float64 reference, under the fused bounds. The sizes the catalogue names for the stories
 * (kl_ar_size_traced: the plain story's, every fused shape and the plain size of its bytes) are traced:
 * block 0's stamps, the last block's exit, and a traced graph. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kernels/rmsnorm/rmsnorm.h"
#include "lab/allreduce/allreduce_module.h"
#include "lab/allreduce/gen.h"
#include "lab/allreduce/timeline.h"
#include "lab/allreduce/workloads.h"
#include "perf/activity.h"
#include "perf/bench.h"
#include "perf/counters.h"
#include "perf/peer.h"

#define N_PLAIN_SIZES KL_AR_PLAIN_SIZES /* the catalogue: lab/allreduce/workloads.c */
#define N_SIZES KL_AR_SIZES
#define COMPOSITE_ALLREDUCE "v6_switch" /* the plain all-reduce the fused rows are compared with: the gated one */
#define COMPOSITE_RMSNORM "v3_pdl_residual_early" /* rmsnorm's fused add + RMSNorm (its gated variant) */
#define COMPOSITE_NAME COMPOSITE_ALLREDUCE "+rmsnorm." COMPOSITE_RMSNORM
#define MAX_VARIANTS KL_AR_BENCH_MAX_VARIANTS
#define SEED 20240601u

struct cell {
    int ran, ok;
    struct kl_clocks before, after; /* this rank's GPU around the timing */
    double med_us, min_us, max_us, eager_us; /* per call */
    int per_graph, sets;
    int64_t n_bad;
    double max_abs;
    uint64_t hash;
    char note[160];
    unsigned long long trace[KL_AR_TRACE_STAMPS]; /* the story's stamps (ns of %globaltimer), 0 when not traced */
    double trace_eager_us;
    double graph_ns[KL_AR_GRAPH_PHASES]; /* the story's call inside a graph: median ns of each phase (NAN: not stamped) */
    double graph_mean_ns[KL_AR_GRAPH_PHASES]; /* and its mean ns over the same calls */
    int graph_calls;               /* how many calls those medians are over (0: not traced) */
    int profiled;
    char json[3072]; /* rank 0: {"launch":{...},"kernels_per_launch":k,...counters} */
};

struct bench_payload {
    int n_variants, n_sizes, counters;
    char variants[MAX_VARIANTS][64];
    bool traced[N_SIZES]; /* a size whose calls get a story: stamps and a traced graph */
    int64_t bytes[N_SIZES];
    int64_t hidden[N_SIZES]; /* a fused workload's hidden (tokens = bytes / 2 / hidden), 0 for a plain size */
    long long l2_bytes;
    double spin_timeout_s;
    struct kl_ar_exchange ex;
    struct cell cell[MAX_VARIANTS][N_SIZES][KL_AR_MAX_RANKS];
};

struct measure_payload {
    int want_ceilings, ceil_ok, bw_ok;
    struct kl_ceilings ceil;
    struct kl_peer_bw bw;
    char why[512];
};

/* ---- in the ranks ---- */

static int measure_main(struct kl_rank *r)
{
    struct measure_payload *m = r->payload;
    struct kl_err err = {{0}};
    if (m->want_ceilings) {
        kl_rank_step(r, "device ceilings (copy, GEMM, launch floor) on GPU 0");
        m->ceil_ok = kl_ceilings_measure(&m->ceil, stderr, &err) == 0;
        if (!m->ceil_ok) return kl_rank_fail(r, "ceilings: %s", err.msg);
    }
    kl_rank_step(r, "peer copy bandwidth between GPUs 0 and 1");
    m->bw_ok = kl_peer_bw_measure(0, 1, &m->bw, &err) == 0;
    if (!m->bw_ok) snprintf(m->why, sizeof m->why, "%s", err.msg);
    return 0;
}

KL_RANK_PROGRAM("allreduce_measure", measure_main);

/* A fused workload's buffers (NULL in a plain one): the call is fused when add_rmsnorm is set, the
 * composite when rmsnorm is set (the all-reduce into sum, then rmsnorm), else the plain all-reduce. */
struct fused_io {
    int64_t hidden;
    const void *residual, *weight;
    void *residual_out, *sum;
    kl_allreduce_add_rmsnorm_fn add_rmsnorm;
    kl_rmsnorm_launch_fn rmsnorm;
};

struct call_ctx {
    struct kl_allreduce_comm *c;
    kl_allreduce_launch_fn launch;
    const void *x;
    void *out;
    int64_t n;
    unsigned long long *trace;
    cudaError_t rc;
    int calls; /* launch_once calls so far: every rank must make the same number */
    const struct fused_io *f;
};

static cudaError_t one_call(struct call_ctx *k, const void *x, cudaStream_t s)
{
    struct kl_allreduce_params p = {x, k->out, k->n, KL_BF16, k->c, k->trace};
    const struct fused_io *f = k->f;
    if (f && f->add_rmsnorm) {
        const struct kl_allreduce_add_rmsnorm_params fp = {p, f->residual, f->weight, f->residual_out, k->n / f->hidden,
                                                           f->hidden, 1e-6f};
        return f->add_rmsnorm(&fp, s);
    }
    if (!f || !f->rmsnorm) return k->launch(&p, s);
    p.out = f->sum;
    cudaError_t rc = k->launch(&p, s);
    const struct kl_rmsnorm_params rp = {f->sum, f->residual, f->weight, k->out, f->residual_out, k->n / f->hidden,
                                         f->hidden, 1e-6f, KL_BF16};
    return rc != cudaSuccess ? rc : f->rmsnorm(&rp, s);
}

static void launch_once(void *p) /* for the profilers: one call, waited for */
{
    struct call_ctx *k = p;
    k->calls++;
    cudaError_t rc = one_call(k, k->x, k->c->stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(k->c->stream);
    if (rc != cudaSuccess && k->rc == cudaSuccess) k->rc = rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define CK(expr, what)                                                                                        \
    do {                                                                                                      \
        int rc_ = (int)(expr);                                                                                \
        if (rc_ != 0) {                                                                                       \
            ret = kl_ar_cuda_fail(r, c, rc_, what);                                                           \
            goto out;                                                                                         \
        }                                                                                                     \
    } while (0)

enum { EAGER_REPS = 20, REPLAYS = 20 };

/* Element i of set 0's output against the float64 sum of the ranks' inputs kl_ar_gen(SEED, 0, q, i). */
static void check_elem(const unsigned char *host, int64_t i, int world, struct cell *out)
{
    double ref = 0, s = 0;
    for (int q = 0; q < world; q++) {
        const double v = kl_round_to(KL_BF16, kl_ar_gen(SEED, 0, (uint32_t)q, (uint64_t)i));
        ref = q ? ref + v : v, s += fabs(v);
    }
    const double got = kl_load_elem(KL_BF16, host, (size_t)i), d = fabs(got - ref);
    if (!(d <= kl_allreduce_bound(world, KL_BF16, s, 0))) {
        if (!out->n_bad) snprintf(out->note, sizeof out->note, "out[%lld] = %.9g, expected %.9g", (long long)i, got, ref);
        out->n_bad++;
    }
    if (d > out->max_abs || isnan(d)) out->max_abs = d;
}

/* Tokens [lo, hi) of set 0's fused output (out, residual_out: host copies) against the float64
 * reference of the inputs kl_ar_gen(SEED, 0, q, i), residual and weight of ranks KL_AR_GEN_*. */
static void check_fused(const unsigned char *out, const unsigned char *ro, int64_t hidden, int64_t lo, int64_t hi,
                        int world, struct cell *cell)
{
    if (hi <= lo) return;
    struct kl_ar_problem *p = kl_ar_fused_problem_new(world, hi - lo, hidden, KL_BF16);
    const int64_t n = p->n, first = lo * hidden;
    for (int q = 0; q < world; q++)
        for (int64_t i = 0; i < n; i++)
            kl_store_elem(KL_BF16, p->x.data, (size_t)(q * n + i), kl_ar_gen(SEED, 0, (uint32_t)q, (uint64_t)(first + i)));
    for (int64_t i = 0; i < n; i++)
        kl_store_elem(KL_BF16, p->residual.data, (size_t)i, kl_ar_gen(SEED, 0, KL_AR_GEN_RESIDUAL, (uint64_t)(first + i)));
    for (int64_t i = 0; i < hidden; i++)
        kl_store_elem(KL_BF16, p->weight.data, (size_t)i, kl_ar_gen(SEED, 0, KL_AR_GEN_WEIGHT, (uint64_t)i));
    struct kl_outputs want = {0}, got = {0};
    kl_ar_reference(p, &want);
    kl_ar_reference(p, &got); /* the shapes; the values are the kernel's */
    for (int64_t i = 0; i < n; i++)
        got.o[0].v[i] = kl_load_elem(KL_BF16, out, (size_t)(first + i)), got.o[1].v[i] = kl_load_elem(KL_BF16, ro, (size_t)(first + i));
    struct kl_cmp co, cr;
    kl_ar_fused_compare(p, &got, &want, false, &co, &cr);
    for (int k = 0; k < 2; k++) {
        const struct kl_cmp *c = k ? &cr : &co;
        if (c->n_bad && !cell->n_bad && c->n_reported)
            snprintf(cell->note, sizeof cell->note, "%s[%lld] = %.9g, expected %.9g", k ? "residual_out" : "out",
                     (long long)(first + c->first[0].index), c->first[0].got, c->first[0].want);
        cell->n_bad += c->n_bad;
        if (c->max_abs > cell->max_abs || isnan(c->max_abs)) cell->max_abs = c->max_abs;
    }
    kl_outputs_free(&want), kl_outputs_free(&got), kl_ar_problem_free(p);
}

/* The story's call inside a graph: the same per_graph calls captured again, each with its own row of
 * stamps, replayed GRAPH_REPLAYS times after a rank barrier; the last replay's rows give each phase's
 * median and mean over calls 1 .. per_graph - 1 (out->graph_ns, out->graph_mean_ns, out->graph_calls).
 * A stamp costs block 0's thread 0 a timer read and a store, so these calls are not the timed ones. */
#define GRAPH_REPLAYS 3
static int graph_story(struct kl_rank *r, struct kl_allreduce_comm *c, struct call_ctx *k, char *xs, size_t bytes,
                       int sets, int per_graph, struct cell *out)
{
    enum { NT = KL_AR_TRACE_STAMPS };
    const size_t words = (size_t)per_graph * NT;
    unsigned long long *trace = NULL, *h = calloc(words, sizeof *h);
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    int ret = -1;
    for (int q = 0; q < KL_AR_GRAPH_PHASES; q++)
        out->graph_ns[q] = out->graph_mean_ns[q] = NAN;
    out->graph_calls = 0;
    if (per_graph < 2) return free(h), 0; /* no call has a previous one to be measured from */
    if (!h) goto out;
    if (cudaMalloc((void **)&trace, words * sizeof *trace) != cudaSuccess ||
        cudaMemset(trace, 0, words * sizeof *trace) != cudaSuccess)
        goto out;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) goto out;
    cudaError_t rc = cudaSuccess;
    for (int i = 0; i < per_graph && rc == cudaSuccess; i++) {
        k->trace = trace + (size_t)i * NT;
        rc = one_call(k, xs + (size_t)kl_time_set(i, per_graph, sets) * bytes, c->stream);
    }
    k->trace = NULL;
    if (cudaStreamEndCapture(c->stream, &g) != cudaSuccess || rc != cudaSuccess) goto out;
    if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) goto out;
    if (kl_rank_barrier(r, "the story's traced graph")) goto out;
    for (int i = 0; i < GRAPH_REPLAYS; i++)
        if (cudaGraphLaunch(ge, c->stream) != cudaSuccess) goto out;
    if (cudaStreamSynchronize(c->stream) != cudaSuccess) goto out;
    if (cudaMemcpy(h, trace, words * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) goto out;
    out->graph_calls = kl_ar_graph_phases(h, per_graph, out->graph_ns, out->graph_mean_ns);
    ret = 0;
out:
    k->trace = NULL;
    if (ret)
        fprintf(stderr, "rank %d: the story's traced graph failed: %s\n", r->rank,
                cudaGetErrorString(cudaGetLastError()));
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    cudaFree(trace);
    free(h);
    return ret;
}

/* Times one (variant, size) on this rank: eager calls, then graph replays, the last of them on
 * poisoned outputs; then re-checks this rank's share of that replay's output against the
 * host-computed sums and hashes it whole; then, at the story's size, one traced call. */
static int time_cell(struct kl_rank *r, struct kl_allreduce_comm *c, struct call_ctx *k, char *xs, size_t bytes,
                     int sets, int per_graph, bool story, struct cell *out)
{
    int ret = 0;
    cudaEvent_t ev[2 * (EAGER_REPS > REPLAYS ? EAGER_REPS : REPLAYS)] = {0};
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    unsigned char *host = NULL;
    double t[EAGER_REPS > REPLAYS ? EAGER_REPS : REPLAYS];
    const int world = c->world;
    for (int i = 0; i < 2 * (EAGER_REPS > REPLAYS ? EAGER_REPS : REPLAYS); i++) CK(cudaEventCreate(&ev[i]), "cudaEventCreate");
    kl_clocks_read(&out->before);
    for (int i = 0; i < 3; i++) CK(one_call(k, xs + (size_t)(i % sets) * bytes, c->stream), "warm-up call");
    CK(cudaStreamSynchronize(c->stream), "warm-up");
    if (kl_rank_barrier(r, "eager timing")) {
        ret = -1;
        goto out;
    }
    for (int i = 0; i < EAGER_REPS; i++) {
        CK(cudaEventRecord(ev[2 * i], c->stream), "cudaEventRecord");
        CK(one_call(k, xs + (size_t)(i % sets) * bytes, c->stream), "eager call");
        CK(cudaEventRecord(ev[2 * i + 1], c->stream), "cudaEventRecord");
    }
    CK(cudaStreamSynchronize(c->stream), "eager calls");
    for (int i = 0; i < EAGER_REPS; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
        t[i] = 1e3 * ms;
    }
    qsort(t, EAGER_REPS, sizeof *t, cmp_double);
    out->eager_us = t[EAGER_REPS / 2];

    CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (int i = 0; i < per_graph; i++) {
        cudaError_t rc = one_call(k, xs + (size_t)kl_time_set(i, per_graph, sets) * bytes, c->stream);
        if (rc != cudaSuccess) {
            cudaStreamEndCapture(c->stream, &g);
            CK(rc, "a call during graph capture");
        }
    }
    CK(cudaStreamEndCapture(c->stream, &g), "cudaStreamEndCapture");
    CK(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
    CK(cudaGraphLaunch(ge, c->stream), "graph warm-up");
    CK(cudaStreamSynchronize(c->stream), "graph warm-up");
    /* One barrier, then every replay queued back to back: the ranks start within a host barrier
     * of each other once, then the device barrier keeps them together. */
    if (kl_rank_barrier(r, "graph timing")) {
        ret = -1;
        goto out;
    }
    for (int i = 0; i < REPLAYS; i++) {
        if (i == REPLAYS - 1) { /* the checked replay: every rank's out poisoned first */
            CK(cudaStreamSynchronize(c->stream), "graph replays");
            if (kl_rank_barrier(r, "replays done, poisoning out")) {
                ret = -1;
                goto out;
            }
            CK(cudaMemsetAsync(k->out, 0xff, bytes, c->stream), "poisoning out");
            if (k->f) CK(cudaMemsetAsync(k->f->residual_out, 0xff, bytes, c->stream), "poisoning residual_out");
            CK(cudaStreamSynchronize(c->stream), "poisoning out");
            if (kl_rank_barrier(r, "out poisoned, the checked replay")) {
                ret = -1;
                goto out;
            }
        }
        CK(cudaEventRecord(ev[2 * i], c->stream), "cudaEventRecord");
        CK(cudaGraphLaunch(ge, c->stream), "cudaGraphLaunch");
        CK(cudaEventRecord(ev[2 * i + 1], c->stream), "cudaEventRecord");
    }
    CK(cudaStreamSynchronize(c->stream), "graph replays");
    kl_clocks_read(&out->after);
    for (int i = 0; i < REPLAYS; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
        t[i] = 1e3 * ms / per_graph;
    }
    qsort(t, REPLAYS, sizeof *t, cmp_double);
    out->min_us = t[0], out->med_us = t[REPLAYS / 2], out->max_us = t[REPLAYS - 1];
    out->per_graph = per_graph, out->sets = sets;

    /* Re-check of the last replay: its last call summed set 0 (inputs kl_ar_gen(SEED, 0, rank, i)). */
    host = malloc(2 * bytes);
    CK(cudaMemcpy(host, k->out, bytes, cudaMemcpyDeviceToHost), "downloading out");
    if (k->f && (k->f->add_rmsnorm || k->f->rmsnorm)) { /* a fused result: out and residual_out, by token */
        CK(cudaMemcpy(host + bytes, k->f->residual_out, bytes, cudaMemcpyDeviceToHost), "downloading residual_out");
        const int64_t tokens = k->n / k->f->hidden;
        out->hash = kl_ar_hash(host, 2 * bytes);
        check_fused(host, host + bytes, k->f->hidden, tokens * r->rank / world, tokens * (r->rank + 1) / world, world, out);
    } else {
        out->hash = kl_ar_hash(host, bytes);
        const int64_t n = k->n, lo = n * r->rank / world, hi = n * (r->rank + 1) / world;
        for (int64_t i = lo; i < hi; i++) check_elem(host, i, world, out);
    }
    out->ok = out->n_bad == 0;

    if (story) { /* one traced call: block 0's stamps, and the same call's eager time */
        unsigned long long *trace = NULL;
        CK(cudaMalloc((void **)&trace, sizeof out->trace), "cudaMalloc of the trace");
        CK(cudaMemset(trace, 0, sizeof out->trace), "clearing the trace");
        if (kl_rank_barrier(r, "traced call")) return cudaFree(trace), -1;
        k->trace = trace;
        CK(cudaEventRecord(ev[0], c->stream), "cudaEventRecord");
        cudaError_t rc = one_call(k, xs, c->stream);
        k->trace = NULL;
        CK(rc, "traced call");
        CK(cudaEventRecord(ev[1], c->stream), "cudaEventRecord");
        CK(cudaStreamSynchronize(c->stream), "traced call");
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
        out->trace_eager_us = 1e3 * ms;
        CK(cudaMemcpy(out->trace, trace, sizeof out->trace, cudaMemcpyDeviceToHost), "downloading the trace");
        cudaFree(trace);
        if (graph_story(r, c, k, xs, bytes, sets, per_graph, out)) return -1;
    }
    out->ran = 1;
out:
    free(host);
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    for (int i = 0; i < 2 * (EAGER_REPS > REPLAYS ? EAGER_REPS : REPLAYS); i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    return ret;
}

/* Kernel records and counters of one call, on every rank in lockstep (rank 0's are kept). */
static int profile_cell(struct kl_rank *r, struct call_ctx *k, bool counters, struct cell *out)
{
    struct kl_kernel_records kr;
    cJSON *o = cJSON_CreateObject();
    if (kl_rank_barrier(r, "kernel records")) return cJSON_Delete(o), -1;
    k->rc = cudaSuccess, k->calls = 0;
    if (kl_activity_record(launch_once, k, &kr) == 0 && kr.count > 0) {
        cJSON_AddItemToObject(o, "launch", kl_kernel_record_json(&kr.k[0]));
        cJSON_AddNumberToObject(o, "kernels_per_launch", kr.count);
    }
    /* Where CUPTI refused before launching, call anyway: the peers' call waits for this one. */
    if (k->calls == 0) launch_once(k);
    if (counters) {
        if (kl_rank_barrier(r, "counters")) return cJSON_Delete(o), -1;
        struct kl_counters kc;
        struct kl_err err = {{0}};
        if (kl_counters_collect(launch_once, k, &kc, &err) == 0) {
            cJSON *j = kl_counters_json(&kc);
            for (cJSON *e = j ? j->child : NULL; e; e = e->next) cJSON_AddItemToObject(o, e->string, cJSON_Duplicate(e, 1));
            cJSON_Delete(j);
        } else {
            cJSON_AddStringToObject(o, "why", err.msg);
        }
    }
    if (k->rc != cudaSuccess) {
        cJSON_Delete(o);
        return kl_rank_fail(r, "a profiled call failed: %s", cudaGetErrorString(k->rc));
    }
    char *s = cJSON_PrintUnformatted(o);
    if (s && strlen(s) < sizeof out->json) snprintf(out->json, sizeof out->json, "%s", s);
    free(s);
    cJSON_Delete(o);
    out->profiled = 1;
    return 0;
}

static int bench_main(struct kl_rank *r)
{
    struct bench_payload *B = r->payload;
    const struct kl_variant *vs[MAX_VARIANTS];
    bool composite[MAX_VARIANTS];
    unsigned needs = 0;
    int64_t most = 16;
    const struct kl_variant *norm = kl_variant_find("rmsnorm", COMPOSITE_RMSNORM);
    for (int v = 0; v < B->n_variants; v++) {
        composite[v] = strcmp(B->variants[v], COMPOSITE_NAME) == 0;
        if (!(vs[v] = kl_variant_find("allreduce", composite[v] ? COMPOSITE_ALLREDUCE : B->variants[v])))
            return kl_rank_fail(r, "no variant %s in this binary", B->variants[v]);
        if (composite[v] && !norm) return kl_rank_fail(r, "no rmsnorm variant %s in this binary", COMPOSITE_RMSNORM);
        needs |= kl_ar_ops(vs[v])->needs;
    }
    for (int s = 0; s < B->n_sizes; s++) most = B->bytes[s] > most ? B->bytes[s] : most;
    struct kl_allreduce_comm comm, *c = &comm;
    if (kl_ar_comm_init(r, &B->ex, needs, (size_t)most, B->spin_timeout_s, c)) return -1;
    int ret = 0;
    /* [0]: cudaMalloc buffers; [1]: symmetric-window buffers, for the variants that need them
     * (NCCL would pick its symmetric kernels on registered memory, so the others keep plain memory). */
    struct kl_ar_buffer xs[2] = {{0}}, outs[2] = {{0}};
    const int kinds = (needs & KL_AR_NEEDS_NCCL_WINDOW) ? 2 : 1;
    void *fbuf = NULL;
    for (int pass = 0; pass < 2 && !ret; pass++) { /* timing, then kernel records (and counters) */
        for (int s = 0; s < B->n_sizes && !ret; s++) {
            const size_t bytes = (size_t)B->bytes[s];
            const int64_t want = (4 * B->l2_bytes + (int64_t)bytes - 1) / (int64_t)bytes;
            const int per_graph = bytes <= (1u << 20) ? 20 : bytes <= (16u << 20) ? 10 : 3;
            const int sets = want < 1 ? 1 : want > per_graph ? per_graph : (int)want;
            for (int w = 0; w < kinds; w++) {
                const unsigned kind = w ? KL_AR_NEEDS_NCCL_WINDOW : 0;
                if (kl_ar_buffer_alloc(r, c, kind, bytes * (size_t)sets, &xs[w]) ||
                    kl_ar_buffer_alloc(r, c, kind, bytes, &outs[w])) {
                    ret = -1;
                    goto out;
                }
                for (int k = 0; k < sets; k++)
                    CK(kl_ar_dev_generate((char *)xs[w].ptr + (size_t)k * bytes, KL_BF16, (int64_t)bytes / 2, SEED,
                                          (uint32_t)k, NULL, (uint32_t)r->rank, c->stream),
                       "generating the inputs");
            }
            const int64_t hidden = B->hidden[s];
            struct fused_io fio = {hidden, NULL, NULL, NULL, NULL, NULL, NULL};
            if (hidden) { /* residual, residual_out, the composite's sum: bytes each; the weight */
                CK(cudaMalloc(&fbuf, 3 * bytes + (size_t)hidden * 2), "cudaMalloc of the fused buffers");
                fio.residual = fbuf, fio.residual_out = (char *)fbuf + bytes, fio.sum = (char *)fbuf + 2 * bytes;
                fio.weight = (char *)fbuf + 3 * bytes;
                CK(kl_ar_dev_generate((void *)fio.residual, KL_BF16, (int64_t)bytes / 2, SEED, 0, NULL, KL_AR_GEN_RESIDUAL, c->stream),
                   "generating the residual");
                CK(kl_ar_dev_generate((void *)fio.weight, KL_BF16, hidden, SEED, 0, NULL, KL_AR_GEN_WEIGHT, c->stream),
                   "generating the weight");
            }
            CK(cudaStreamSynchronize(c->stream), "generating the inputs");
            for (int v = 0; v < B->n_variants && !ret; v++) {
                /* A plain size runs the plain variants; a fused one the fused variants, the composite
                 * and the composite's all-reduce alone. */
                const bool fused = kl_ar_is_fused(vs[v]);
                if (hidden ? !(fused || composite[v] || strcmp(B->variants[v], COMPOSITE_ALLREDUCE) == 0)
                           : fused || composite[v])
                    continue;
                struct fused_io f = fio;
                f.add_rmsnorm = fused ? kl_ar_ops(vs[v])->add_rmsnorm : NULL;
                f.rmsnorm = composite[v] ? (kl_rmsnorm_launch_fn)norm->launch : NULL;
                struct cell *cell = &B->cell[v][s][r->rank];
                const int w = (kl_ar_ops(vs[v])->needs & KL_AR_NEEDS_NCCL_WINDOW) ? 1 : 0;
                char *x = xs[w].ptr;
                struct call_ctx k = {c, kl_ar_ops(vs[v])->launch, x, outs[w].ptr, (int64_t)bytes / 2, NULL, cudaSuccess, 0,
                                     hidden ? &f : NULL};
                kl_rank_step(r, "%s %s %s, %lld bytes", pass ? "profile" : "time", B->variants[v], "allreduce",
                             (long long)bytes);
                if (r->rank == 0)
                    kl_bench_progress("allreduce %s %lld bytes, world %d: %s", B->variants[v], (long long)bytes,
                                      r->world, pass ? "kernel records and counters" : "timing");
                if (pass == 0)
                    ret = time_cell(r, c, &k, x, bytes, sets, per_graph,
                                    B->traced[s] && !composite[v] && (fused || !hidden) &&
                                        (kl_ar_ops(vs[v])->needs & KL_AR_NEEDS_PEERS),
                                    cell);
                else ret = profile_cell(r, &k, B->counters > 0, cell);
            }
            for (int w = 0; w < kinds; w++) kl_ar_buffer_free(c, &xs[w]), kl_ar_buffer_free(c, &outs[w]);
            cudaFree(fbuf);
            fbuf = NULL;
        }
    }
out:
    /* A failed rank leaves its buffers to the process's exit: freeing a window is a collective
     * that peers which stopped would never join. */
    if (!ret) kl_ar_comm_destroy(r, c);
    return ret;
}

KL_RANK_PROGRAM("allreduce_bench", bench_main);

/* ---- in the parent ---- */

/* The slowest rank of a cell (largest median), or -1 when a rank did not run it. */
static int slowest(const struct bench_payload *B, int v, int s, int world)
{
    int worst = 0;
    for (int q = 0; q < world; q++) {
        if (!B->cell[v][s][q].ran) return -1;
        if (B->cell[v][s][q].med_us > B->cell[v][s][worst].med_us) worst = q;
    }
    return worst;
}

struct parent_ctx {
    const struct kl_bench_args *a;
    const struct kl_ceilings *ceil;
    const struct kl_peer_bw *bw; /* NULL when not measured */
    const struct kl_ar_topology *topo;
    const char *judged; /* the variant the gate judges; NULL: none */
    int rows;
};

static void story_json(cJSON *x, const struct cell *c0, const struct cell *slow)
{
    static const char *knames[KL_AR_TRACE_STAMPS] = {"entry",    "copied",  "started",  "reduced", "mid",
                                                     "gathered", "exit",    "released", "last_exit"};
    cJSON *st = cJSON_AddObjectToObject(x, "story");
    cJSON *ns = cJSON_AddObjectToObject(st, "stamps_ns");
    for (int k = 0; k < KL_AR_TRACE_STAMPS; k++)
        if (c0->trace[k]) cJSON_AddNumberToObject(ns, knames[k], (double)(c0->trace[k] - c0->trace[KL_AR_T_ENTRY]));
    cJSON_AddNumberToObject(st, "eager_us", c0->trace_eager_us);
    cJSON_AddNumberToObject(st, "kernel_us", (double)(c0->trace[KL_AR_T_EXIT] - c0->trace[KL_AR_T_ENTRY]) * 1e-3);
    cJSON_AddNumberToObject(st, "graph_us", slow->med_us);
    cJSON_AddStringToObject(st, "rank", "0");
    if (c0->graph_calls) { /* rank 0's call inside a graph, phase by phase (a phase not stamped is left out) */
        cJSON *g = cJSON_AddObjectToObject(st, "graph");
        cJSON_AddNumberToObject(g, "calls", c0->graph_calls);
        cJSON *m = cJSON_AddObjectToObject(g, "mean");
        for (int q = 0; q < KL_AR_GRAPH_PHASES; q++) {
            if (isfinite(c0->graph_ns[q])) cJSON_AddNumberToObject(g, kl_ar_graph_names[q], c0->graph_ns[q]);
            if (isfinite(c0->graph_mean_ns[q])) cJSON_AddNumberToObject(m, kl_ar_graph_names[q], c0->graph_mean_ns[q]);
        }
    }
}

static void emit_world(struct parent_ctx *P, const struct bench_payload *B, int world, bool first_world)
{
    const struct kl_bench_args *a = P->a;
    /* The yardstick at each size: the faster of plain NCCL and NCCL on symmetric windows. */
    int ncclv[2] = {-1, -1};
    for (int v = 0; v < B->n_variants; v++)
        if (strcmp(B->variants[v], "v0_nccl") == 0) ncclv[0] = v;
        else if (strcmp(B->variants[v], "v0_nccl_symmetric") == 0) ncclv[1] = v;
    int plain = -1;
    for (int v = 0; v < B->n_variants; v++)
        if (strcmp(B->variants[v], COMPOSITE_ALLREDUCE) == 0) plain = v;
    fprintf(a->table, "\nallreduce, world %d: variant            workload          time_us    eager    algbw    busbw "
                      "vs_nccl busbw_frac check gate\n", world);
    for (int v = 0; v < B->n_variants; v++)
        for (int s = 0; s < B->n_sizes; s++) {
            const int q = slowest(B, v, s, world), hidden = (int)B->hidden[s];
            if (q < 0 || (hidden && v == plain)) continue; /* the plain all-reduce's time goes into the fused rows */
            const struct cell *c = &B->cell[v][s][q];
            double t_each[2] = {NAN, NAN}, t_nccl = NAN;
            const char *nccl_name = NULL;
            for (int k = 0; k < 2; k++) {
                const int qn = ncclv[k] >= 0 ? slowest(B, ncclv[k], s, world) : -1;
                if (qn < 0) continue;
                t_each[k] = B->cell[ncclv[k]][s][qn].med_us;
                if (!(t_each[k] >= t_nccl)) t_nccl = t_each[k], nccl_name = B->variants[ncclv[k]];
            }
            const double t = c->med_us, bytes = (double)B->bytes[s];
            const double algbw = bytes / (t * 1e-6) / 1e9, busbw = algbw * 2.0 * (world - 1) / world;
            const double busbw_nccl = bytes / (t_nccl * 1e-6) / 1e9 * 2.0 * (world - 1) / world;
            const double vs_nccl = t / t_nccl, busbw_frac = busbw / busbw_nccl;
            bool ok = true, same = true;
            int64_t n_bad = 0;
            double max_abs = 0;
            for (int k = 0; k < world; k++) {
                ok &= B->cell[v][s][k].ok != 0;
                same &= B->cell[v][s][k].hash == B->cell[v][s][0].hash;
                n_bad += B->cell[v][s][k].n_bad;
                if (B->cell[v][s][k].max_abs > max_abs) max_abs = B->cell[v][s][k].max_abs;
            }
            char wl[48], date[32];
            kl_ar_workload_name(wl, sizeof wl, s, world);
            struct kl_result res = {.module = "allreduce", .variant = B->variants[v], .workload = wl};
            res.device = P->ceil->dev;
            res.time_us_min = c->min_us, res.time_us_median = t, res.time_us_max = c->max_us;
            res.bytes = bytes, res.flops = (double)(world - 1) * bytes / 2;
            res.gbs = algbw;
            res.bw_frac = P->bw ? busbw / P->bw->read_both_gbs : NAN;
            res.tflops = res.flops / (t * 1e-6) / 1e12, res.tc_frac = res.tflops / P->ceil->dev.gemm_tflops;
            res.checked = true, res.rel_l2 = NAN, res.max_abs = max_abs, res.check_pass = ok && same;
            res.commit = kl_build_commit(), res.date = kl_today(date, sizeof date);
            cJSON *params = cJSON_CreateObject();
            cJSON_AddNumberToObject(params, "world", world);
            cJSON_AddNumberToObject(params, "bytes", bytes);
            cJSON_AddNumberToObject(params, "n", bytes / 2);
            cJSON_AddStringToObject(params, "dtype", "bf16");
            if (hidden) {
                cJSON_AddStringToObject(params, "op", "add_rmsnorm");
                cJSON_AddNumberToObject(params, "tokens", bytes / 2 / hidden);
                cJSON_AddNumberToObject(params, "hidden", hidden);
            }
            res.params = params;
            res.counters = c->profiled && B->cell[v][s][0].json[0] ? cJSON_Parse(B->cell[v][s][0].json) : NULL;
            cJSON *x = res.extra = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "world", world);
            cJSON_AddNumberToObject(x, "algbw_gbs", algbw);
            cJSON_AddNumberToObject(x, "busbw_gbs", busbw);
            cJSON *rt = cJSON_AddArrayToObject(x, "rank_time_us");
            for (int k = 0; k < world; k++) cJSON_AddItemToArray(rt, cJSON_CreateNumber(B->cell[v][s][k].med_us));
            cJSON_AddNumberToObject(x, "slowest_rank", q);
            cJSON_AddNumberToObject(x, "time_us_eager", c->eager_us);
            if (isfinite(t_nccl)) {
                cJSON_AddNumberToObject(x, "nccl_time_us", t_nccl);
                cJSON_AddStringToObject(x, "nccl_variant", nccl_name);
                if (isfinite(t_each[1])) cJSON_AddNumberToObject(x, "nccl_symmetric_time_us", t_each[1]);
                cJSON_AddNumberToObject(x, "latency_vs_nccl", vs_nccl);
                cJSON_AddNumberToObject(x, "busbw_frac", busbw_frac);
            }
            const int qp = hidden && plain >= 0 ? slowest(B, plain, s, world) : -1;
            if (qp >= 0) { /* the fused target: this row's time over the plain all-reduce's, same bytes, same run */
                cJSON_AddNumberToObject(x, "plain_allreduce_us", B->cell[plain][s][qp].med_us);
                cJSON_AddNumberToObject(x, "over_allreduce_us", t - B->cell[plain][s][qp].med_us);
            }
            if (hidden && strcmp(B->variants[v], COMPOSITE_NAME) == 0)
                cJSON_AddStringToObject(x, "composite", "allreduce " COMPOSITE_ALLREDUCE ", then rmsnorm " COMPOSITE_RMSNORM);
            cJSON_AddStringToObject(x, "timing", "graph");
            cJSON_AddNumberToObject(x, "per_graph", c->per_graph);
            cJSON_AddNumberToObject(x, "input_sets", c->sets);
            cJSON_AddBoolToObject(x, "ranks_identical", same);
            if (n_bad) cJSON_AddStringToObject(x, "check_note", B->cell[v][s][0].n_bad ? B->cell[v][s][0].note : c->note);
            struct kl_recheck what = {.checked = bytes / 2, .of = bytes / 2};
            snprintf(what.reason, sizeof what.reason, "%s",
                     hidden ? "out and residual_out of every rank, poisoned before the replay (between two barriers): "
                                   "each rank compared 1/world of the tokens with the float64 reference of input set 0 "
                                   "under the fused bounds, and the ranks' hashes of both outputs agree"
                                 : "out of every rank, poisoned before the replay (between two barriers): each rank compared "
                                   "1/world of the elements with the float64 sums of input set 0, and the ranks' hashes of "
                                   "their whole out agree");
            const struct kl_timing replay = {.graph = true, .launches = c->per_graph};
            kl_recheck_json(x, &what, &replay);
            /* Throttled when any rank's GPU was; the clocks shown are the slowest rank's. */
            for (int k = 0; k < world; k++)
                res.throttled |= kl_throttled(&B->cell[v][s][k].before, &B->cell[v][s][k].after, NULL, 0);
            kl_clocks_json(x, &c->before, &c->after);
            if (B->cell[v][s][0].trace[KL_AR_T_ENTRY]) story_json(x, &B->cell[v][s][0], c);
            cJSON_AddItemToObject(x, "ceilings", kl_ceilings_json(P->ceil));
            if (P->bw) cJSON_AddItemToObject(x, "peer_copy", kl_peer_bw_json(P->bw));
            if (first_world && P->rows == 0) cJSON_AddItemToObject(x, "topology", kl_ar_topology_json(P->topo));
            /* Judged once every field a metric reads (latency_vs_nccl, busbw_frac) is in place. */
            /* A fused workload judges the fused variant the targets name for it (a plain variant
             * cannot run it), or the one --variant asked for; the composite is its yardstick. */
            const char *judged = kl_gate_variant_on(a->targets, "allreduce", P->judged, a->variant, wl);
            const bool judge = judged && strcmp(judged, B->variants[v]) == 0 &&
                               (!hidden || kl_ar_is_fused(kl_variant_find("allreduce", B->variants[v])));
            if (judge) kl_gate_judge(a->targets, &res);
            if (a->json) kl_result_write(a->json, &res), fflush(a->json);
            P->rows++;

            char gate[96];
            fprintf(a->table, "%-26s %-14s %9.2f %8.2f %8.1f %8.1f %7.2f %10.3f %5s %s\n", B->variants[v], wl, t,
                    c->eager_us, algbw, busbw, vs_nccl, busbw_frac, res.check_pass ? "ok" : "FAIL",
                    kl_gate_cell(gate, sizeof gate, &res));
            if (!res.check_pass) {
                fprintf(stderr, "bench allreduce %s %s: re-check failed: %s\n", B->variants[v], wl,
                        !same ? "the ranks' outputs differ" : c->note[0] ? c->note : B->cell[v][s][0].note);
                if (a->failures) ++*a->failures;
            }
            if (judge && a->gate_log) kl_gate_record(a->gate_log, a->targets, &res, stderr);
            cJSON_Delete(params), cJSON_Delete(res.counters), cJSON_Delete(x);
        }
}

/* torch.distributed (NCCL) on the same sizes, written as the same rows (perf/peers/allreduce.py). */
static void run_peers(const struct kl_bench_args *a, const struct kl_ceilings *ceil)
{
    char dir[] = "/tmp/kernlab-allreduce-peers-XXXXXX", rows[96], cpath[96], cmd[2048];
    if (!mkdtemp(dir)) return;
    snprintf(rows, sizeof rows, "%s/rows.jsonl", dir);
    snprintf(cpath, sizeof cpath, "%s/ceilings.json", dir);
    FILE *f = fopen(cpath, "w");
    if (!f) return;
    cJSON *o = kl_ceilings_json(ceil);
    char *s = cJSON_PrintUnformatted(o);
    fprintf(f, "%s\n", s);
    free(s), cJSON_Delete(o), fclose(f);
    snprintf(cmd, sizeof cmd,
             "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 python3 '%s/perf/peers/run.py' --module allreduce "
             "%s%s --json '%s' --ceilings '%s' --commit '%s'",
             KL_SOURCE_DIR, a->workload ? "--workload " : "", a->workload ? a->workload : "", rows, cpath,
             kl_build_commit());
    fflush(a->table);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "bench allreduce: peers exited with status %d\n", rc);
    FILE *in = fopen(rows, "r");
    char line[1 << 16];
    while (in && a->json && fgets(line, sizeof line, in)) fputs(line, a->json);
    if (in) fclose(in);
    remove(rows), remove(cpath), rmdir(dir);
}

int kl_ar_bench(const struct kl_bench_args *a)
{
    struct kl_err err = {{0}};
    struct kl_ar_topology topo;
    char unknown[64];
    if (kl_ar_unknown_workload(a, unknown, sizeof unknown)) {
        fprintf(stderr,
                "bench allreduce: no workload named '%s' (8KB .. 256MB, add-rmsnorm-tT-hH, or e.g. 8KB-world2)\n",
                unknown);
        return -2; /* a usage error */
    }
    if (kl_ar_shared_device()) {
        fprintf(stderr, "bench allreduce: KL_AR_SHARED_DEVICE=1 puts every rank on one GPU, for correctness only: "
                        "unset it to measure\n");
        return -1;
    }
    if (kl_ar_topology_probe(&topo, &err)) {
        fprintf(stderr, "bench allreduce: the GPU probe failed: %s\n", err.msg);
        return -1;
    }
    if (topo.count < 2) {
        fprintf(stderr, "bench allreduce: needs at least 2 GPUs, this machine has %d%s%s%s: an all-reduce across one GPU "
                        "is a copy (run it on a machine with two or more, e.g. the device tool's 2 x H200)\n",
                topo.count, topo.count ? "" : " (", topo.count ? "" : topo.why, topo.count ? "" : ")");
        return 1; /* a skip: `bench all` goes on, `bench allreduce` exits nonzero */
    }
    /* The variants: the one asked for (and NCCL, the yardstick), or every one. */
    char names[MAX_VARIANTS][64];
    int nv = 0;
    bool fused_asked = false;
    if (kl_variant_count("allreduce", false) + 1 > MAX_VARIANTS) { /* every variant and the composite */
        fprintf(stderr,
                "bench allreduce: %d variants and the composite are more than the %d the bench holds "
                "(KL_AR_BENCH_MAX_VARIANTS)\n",
                kl_variant_count("allreduce", false), MAX_VARIANTS);
        return -1;
    }
    for (int i = 0; i < kl_variant_count("allreduce", false); i++) {
        const struct kl_variant *v = kl_variant_at("allreduce", i, false);
        if (!a->variant || strcmp(a->variant, v->name) == 0 || strncmp(v->name, "v0_nccl", 7) == 0 ||
            (a->variant && strcmp(v->name, COMPOSITE_ALLREDUCE) == 0 && kl_ar_is_fused(kl_variant_find("allreduce", a->variant))))
            snprintf(names[nv++], 64, "%s", v->name);
        if (kl_ar_is_fused(v) && (!a->variant || strcmp(a->variant, v->name) == 0))
            fused_asked = true;
    }
    /* The fused workloads' yardstick: the composite (and its all-reduce, in the list above). */
    if (fused_asked && kl_variant_find("rmsnorm", COMPOSITE_RMSNORM)) snprintf(names[nv++], 64, "%s", COMPOSITE_NAME);
    if (a->variant && !kl_variant_find("allreduce", a->variant)) {
        fprintf(stderr, "bench allreduce: no variant named '%s' (kernlab list shows them)\n", a->variant);
        return -1;
    }
    /* Ceilings: the caller's when it measured them (bench all), else a child measures. */
    struct kl_ranks g;
    if (kl_ranks_create(&g, 1, sizeof(struct measure_payload), &err)) return fprintf(stderr, "bench allreduce: %s\n", err.msg), -1;
    struct measure_payload *m = g.payload;
    m->want_ceilings = a->ceil == NULL;
    if (kl_ranks_run(&g, "allreduce_measure", 600, &err)) {
        fprintf(stderr, "bench allreduce: measuring the ceilings failed: %s\n", err.msg);
        kl_ranks_destroy(&g);
        return -1;
    }
    struct kl_ceilings ceil = a->ceil ? *a->ceil : m->ceil;
    struct kl_peer_bw bw = m->bw;
    const bool have_bw = m->bw_ok;
    if (!have_bw) fprintf(stderr, "bench allreduce: peer copy bandwidth not measured: %s\n", m->why);
    kl_ranks_destroy(&g);
    if (!a->ceil) kl_ceilings_print(a->table, &ceil);
    if (have_bw) kl_peer_bw_print(a->table, &bw);

    /* The gate's targets: `kernlab bench` loads them once it has measured ceilings, which it leaves
     * to this module (its parent process must not touch CUDA), so they are loaded here. */
    struct kl_bench_args gated = *a;
    struct kl_targets targets = {0};
    if (a->gate && !a->targets) {
        if (kl_targets_load(&targets, KL_SOURCE_DIR "/perf/targets", ceil.dev.cc, &err) ||
            kl_targets_check(&targets, &err)) {
            fprintf(stderr, "bench allreduce --gate: %s\n", err.msg);
            kl_targets_free(&targets);
            return -1;
        }
        gated.targets = &targets;
    }
    a = &gated;
    struct parent_ctx P = {a, &ceil, have_bw ? &bw : NULL, &topo, NULL, 0};
    if (a->gate) {
        char why[640];
        if (!(P.judged = kl_gate_variant(a->targets, "allreduce", a->variant, why, sizeof why)))
            fprintf(stderr, "gate: allreduce: nothing judged: %s\n", why);
    }
    int status = 0, worlds = 0;
    for (int world = 2; world <= topo.count; world++) {
        if (kl_ranks_create(&g, world, sizeof(struct bench_payload), &err)) {
            fprintf(stderr, "bench allreduce: %s\n", err.msg);
            kl_targets_free(&targets);
            return -1;
        }
        struct bench_payload *B = g.payload;
        memcpy(B->variants, names, sizeof names);
        B->n_variants = nv, B->counters = a->counters;
        B->l2_bytes = ceil.dev.l2_bytes, B->spin_timeout_s = 30;
        int index[N_SIZES]; /* the catalogue size of each of the group's sizes */
        for (int s = 0; s < N_SIZES; s++)
            if (kl_ar_wanted(a, s, world) && (s < N_PLAIN_SIZES || fused_asked)) {
                B->traced[B->n_sizes] = kl_ar_size_traced(s);
                B->hidden[B->n_sizes] = kl_ar_size_hidden(s), index[B->n_sizes] = s;
                B->bytes[B->n_sizes++] = kl_ar_size_bytes(s);
            }
        if (!B->n_sizes) {
            kl_ranks_destroy(&g);
            continue;
        }
        worlds++;
        fprintf(a->table, "\nallreduce: world %d, %d variants x %d sizes ...\n", world, B->n_variants, B->n_sizes);
        kl_bench_progress("allreduce world %d: %d variants x %d sizes", world, B->n_variants, B->n_sizes);
        fflush(a->table);
        const int rc = kl_ranks_run(&g, "allreduce_bench", 900, &err);
        if (rc) {
            fprintf(stderr, "bench allreduce: world %d: %s\n", world, err.msg);
            if (a->failures) ++*a->failures;
            status = -1;
        }
        /* Sizes map back to the catalogue for the names: the group's size k is the catalogue's index[k]. */
        struct bench_payload *view = malloc(sizeof *view);
        *view = *B;
        memset(view->cell, 0, sizeof view->cell);
        view->n_sizes = N_SIZES;
        for (int s = 0; s < N_SIZES; s++)
            view->bytes[s] = kl_ar_size_bytes(s), view->hidden[s] = kl_ar_size_hidden(s);
        for (int k = 0; k < B->n_sizes; k++)
            for (int v = 0; v < B->n_variants; v++) memcpy(view->cell[v][index[k]], B->cell[v][k], sizeof B->cell[v][k]);
        emit_world(&P, view, world, worlds == 1);
        free(view);
        kl_ranks_destroy(&g);
    }
    if (!worlds) {
        /* Every name is known (checked above): the worlds asked for are past this machine's GPUs. */
        fprintf(stderr, "bench allreduce: --workload %s: no world of it runs on %d GPUs\n",
                a->workload ? a->workload : "", topo.count);
        kl_targets_free(&targets);
        return -1;
    }
    if (a->peers) run_peers(a, &ceil);
    kl_targets_free(&targets);
    return status;
}
