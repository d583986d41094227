/* The rank program "allreduce_batch": one process per GPU runs the jobs of a batch
 * (allreduce_module.h) with one variant, on one communicator set up once for all of them.
 *
 * ONCE jobs take their inputs from the parent and hand every rank's output back; the parent
 * compares. The multi-call jobs (REPEAT, GRAPH, PDL) make each call's inputs on the device (a
 * hash of seed, call, rank and index: lab/allreduce/gen.h), keep each call's output on the device,
 * and check everything after one synchronisation: the rank recomputes every input on the host,
 * compares with the float64 sums under the module's bound, and leaves a hash of each output for
 * the parent, which checks that all ranks hold the same bits call by call. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "lab/allreduce/allreduce_module.h"
#include "lab/allreduce/gen.h"

struct ctx {
    struct kl_rank *r;
    struct kl_ar_batch *b;
    unsigned char *data;
    struct kl_allreduce_comm *c;
    const struct kl_allreduce_ops *ops;
};

#define CK(expr, what)                                                                                        \
    do {                                                                                                      \
        int rc_ = (int)(expr);                                                                                \
        if (rc_ != 0) {                                                                                       \
            ret = kl_ar_cuda_fail(x->r, x->c, rc_, what);                                                     \
            goto out;                                                                                         \
        }                                                                                                     \
    } while (0)

/* x and out of a job: one element past a 16-byte boundary when the job asks for it; in a
 * symmetric window when the variant needs one (kl_ar_buffer_alloc). A fused job (hidden > 0) also
 * has residual, weight and residual_out; its out and residual_out sit in one allocation,
 * residual_out a fixed pad after out (in place: x and residual so; a misaligned out makes a
 * misaligned residual_out), so one record of n_rec elements from rec keeps both, and the ranks'
 * records have the same length. A plain job records out (n elements). */
struct bufs {
    struct kl_ar_buffer x_alloc, out_alloc;
    void *x, *out;
    void *res_alloc, *w_alloc, *res, *w, *ro;
    void *rec;
    int64_t n_rec;
};

static int alloc_bufs(struct ctx *x, const struct kl_ar_job *j, struct bufs *B)
{
    int ret = 0;
    const size_t es = kl_dtype_size((enum kl_dtype)j->dtype), bytes = (size_t)j->n * es + 16;
    const size_t off = j->misaligned == 1 || (j->misaligned == 2 && x->r->rank == x->b->world - 1) ? es : 0;
    const unsigned needs = x->ops->needs;
    memset(B, 0, sizeof *B);
    if (j->hidden) { /* [x or out | pad | residual or residual_out], the pad the same on every rank */
        const size_t gap = ((size_t)j->n * es + 15) / 16 * 16 + 16; /* from out to residual_out */
        B->n_rec = (int64_t)(gap / es) + j->n; /* so the ranks' records, pad included, compare equal */
        if (kl_ar_buffer_alloc(x->r, x->c, needs, gap + bytes, &B->out_alloc)) return -1;
        CK(cudaMemset(B->out_alloc.ptr, 0xff, gap + bytes), "poisoning out and residual_out");
        CK(cudaMalloc(&B->w_alloc, (size_t)j->hidden * es), "cudaMalloc of the weight");
        B->w = B->w_alloc;
        B->out = (char *)B->out_alloc.ptr + off, B->ro = (char *)B->out + gap, B->rec = B->out;
        if (j->in_place) {
            B->x = B->out, B->res = B->ro;
        } else {
            if (kl_ar_buffer_alloc(x->r, x->c, needs, bytes, &B->x_alloc)) return -1;
            CK(cudaMalloc(&B->res_alloc, bytes), "cudaMalloc of the residual");
            B->x = (char *)B->x_alloc.ptr + off, B->res = B->res_alloc;
        }
        CK(cudaDeviceSynchronize(), "poisoning out");
        goto out;
    }
    B->n_rec = j->n;
    if (kl_ar_buffer_alloc(x->r, x->c, needs, bytes, &B->x_alloc)) return -1;
    B->x = (char *)B->x_alloc.ptr + off;
    if (j->in_place) {
        B->out = B->x;
    } else {
        if (kl_ar_buffer_alloc(x->r, x->c, needs, bytes, &B->out_alloc)) return -1;
        B->out = (char *)B->out_alloc.ptr + off;
        CK(cudaMemset(B->out_alloc.ptr, 0xff, bytes), "poisoning out"); /* NaN in every float type */
    }
    B->rec = B->out;
    /* The memset runs on the legacy stream; the calls on the communicator's non-blocking stream
     * would not wait for it (and could see out poisoned after writing it). */
    CK(cudaDeviceSynchronize(), "poisoning out");
out:
    return ret;
}

static void free_bufs(struct ctx *x, struct bufs *B)
{
    kl_ar_buffer_free(x->c, &B->x_alloc);
    kl_ar_buffer_free(x->c, &B->out_alloc);
    cudaFree(B->res_alloc);
    cudaFree(B->w_alloc);
    memset(B, 0, sizeof *B);
}

/* One call of the variant on stream s: the plain all-reduce, or the fused one for a fused job. */
static cudaError_t launch_on(struct ctx *x, const struct kl_ar_job *j, const struct bufs *B, cudaStream_t s)
{
    const struct kl_allreduce_params p = {B->x, B->out, j->n, (enum kl_dtype)j->dtype, x->c, NULL};
    if (!j->hidden) return x->ops->launch ? x->ops->launch(&p, s) : cudaErrorInvalidValue;
    const struct kl_allreduce_add_rmsnorm_params f = {p, B->res, B->w, B->ro, j->n / j->hidden, j->hidden, (float)j->eps};
    return x->ops->add_rmsnorm ? x->ops->add_rmsnorm(&f, s) : cudaErrorInvalidValue;
}

static int call(struct ctx *x, const struct kl_ar_job *j, const struct bufs *B, const char *what)
{
    cudaError_t rc = launch_on(x, j, B, x->c->stream);
    return rc == cudaSuccess ? 0 : kl_ar_cuda_fail(x->r, x->c, rc, what);
}

/* A multi-call job's inputs of call c (from *ctr in a graph): x, and a fused job's residual. */
static int generate(struct ctx *x, const struct kl_ar_job *j, const struct bufs *B, uint32_t c, const uint32_t *ctr)
{
    const enum kl_dtype t = (enum kl_dtype)j->dtype;
    cudaStream_t s = x->c->stream;
    int rc = kl_ar_dev_generate(B->x, t, j->n, j->seed, c, ctr, (uint32_t)x->r->rank, s);
    if (!rc && j->hidden) rc = kl_ar_dev_generate(B->res, t, j->n, j->seed, c, ctr, KL_AR_GEN_RESIDUAL, s);
    return rc;
}

/* A fused job's call c, on the host: the problem whose reference its outputs are checked against. */
static struct kl_ar_problem *fused_problem_of(const struct kl_ar_job *j, int world, uint32_t c)
{
    const enum kl_dtype t = (enum kl_dtype)j->dtype;
    struct kl_ar_problem *p = kl_ar_fused_problem_new(world, j->n / j->hidden, j->hidden, t);
    p->eps = j->eps;
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < j->n; i++) kl_store_elem(t, p->x.data, (size_t)(r * j->n + i), kl_ar_gen(j->seed, c, (uint32_t)r, (uint64_t)i));
    for (int64_t i = 0; i < j->n; i++) kl_store_elem(t, p->residual.data, (size_t)i, kl_ar_gen(j->seed, c, KL_AR_GEN_RESIDUAL, (uint64_t)i));
    for (int64_t i = 0; i < j->hidden; i++) kl_store_elem(t, p->weight.data, (size_t)i, kl_ar_gen(j->seed, 0, KL_AR_GEN_WEIGHT, (uint64_t)i));
    return p;
}

/* Every recorded call against the float64 sums of the regenerated inputs; hashes to the payload. */
static void check_calls(struct ctx *x, struct kl_ar_job *j, const unsigned char *hist, int made, int64_t n_rec)
{
    const enum kl_dtype t = (enum kl_dtype)j->dtype;
    const int world = x->b->world, rank = x->r->rank;
    const int64_t n = j->n;
    const size_t row = (size_t)n * kl_dtype_size(t), rec = (size_t)n_rec * kl_dtype_size(t);
    double *xs = malloc(sizeof(double) * (size_t)(world * n)), *got = malloc(sizeof(double) * (size_t)n);
    uint64_t *hashes = (uint64_t *)(x->data + j->out_off);
    for (int c = 0; c < made; c++) {
        const unsigned char *o = hist + (size_t)c * rec;
        if (c < j->calls) hashes[(size_t)c * world + rank] = kl_ar_hash(o, rec);
        if (j->hidden) { /* out and residual_out (after the pad) against the reference of call c */
            struct kl_ar_problem *p = fused_problem_of(j, world, (uint32_t)c);
            struct kl_outputs want = {0}, gotf = {0};
            kl_ar_reference(p, &want);
            kl_ar_reference(p, &gotf); /* the shapes; the values are the kernel's */
            for (int64_t i = 0; i < n; i++)
                gotf.o[0].v[i] = kl_load_elem(t, o, (size_t)i), gotf.o[1].v[i] = kl_load_elem(t, o + (rec - row), (size_t)i);
            struct kl_cmp co, cr;
            kl_ar_fused_compare(p, &gotf, &want, false, &co, &cr);
            const struct kl_cmp *bad = !co.pass ? &co : &cr;
            if (!co.pass || !cr.pass) {
                if (!j->n_bad[rank] && bad->n_reported)
                    snprintf(j->note[rank], sizeof j->note[rank], "call %d: %s[%lld] = %.9g, expected %.9g (%lld bad)", c,
                             bad == &co ? "out" : "residual_out", (long long)bad->first[0].index, bad->first[0].got,
                             bad->first[0].want, (long long)(co.n_bad + cr.n_bad));
                j->n_bad[rank] += co.n_bad + cr.n_bad ? co.n_bad + cr.n_bad : 1;
            }
            kl_outputs_free(&want), kl_outputs_free(&gotf), kl_ar_problem_free(p);
            continue;
        }
        for (int r = 0; r < world; r++)
            for (int64_t i = 0; i < n; i++) xs[r * n + i] = kl_round_to(t, kl_ar_gen(j->seed, (uint32_t)c, (uint32_t)r, (uint64_t)i));
        for (int64_t i = 0; i < n; i++) got[i] = kl_load_elem(t, o, (size_t)i);
        struct kl_cmp cmp;
        kl_ar_compare(got, NULL, xs, world, n, t, false, &cmp);
        if (cmp.pass) continue;
        if (!j->n_bad[rank] && cmp.n_reported)
            snprintf(j->note[rank], sizeof j->note[rank], "call %d: out[%lld] = %.9g, expected %.9g (%lld bad)", c,
                     (long long)cmp.first[0].index, cmp.first[0].got, cmp.first[0].want, (long long)cmp.n_bad);
        j->n_bad[rank] += cmp.n_bad ? cmp.n_bad : 1;
    }
    free(xs);
    free(got);
}

static int job_once(struct ctx *x, struct kl_ar_job *j)
{
    int ret = 0;
    const size_t row = (size_t)j->n * kl_dtype_size((enum kl_dtype)j->dtype);
    struct bufs B;
    if (alloc_bufs(x, j, &B)) return -1;
    CK(cudaMemcpy(B.x, x->data + j->x_off + (size_t)x->r->rank * row, row, cudaMemcpyHostToDevice), "uploading x");
    if (j->hidden) {
        CK(cudaMemcpy(B.res, x->data + j->res_off, row, cudaMemcpyHostToDevice), "uploading the residual");
        CK(cudaMemcpy(B.w, x->data + j->w_off, (size_t)j->hidden * kl_dtype_size((enum kl_dtype)j->dtype),
                      cudaMemcpyHostToDevice),
           "uploading the weight");
    }
    /* The all-reduce runs on the communicator's non-blocking stream, which does not wait for the
     * legacy stream: a pageable cudaMemcpy returns once its bytes are staged, not landed, and the
     * poisoning memset of out is asynchronous. Without this the kernel read the tail of a 600 KB
     * x before its copy had arrived (seen on 2 x H200: wrong sums past element ~150k). */
    CK(cudaDeviceSynchronize(), "uploading x");
    if (call(x, j, &B, "launch")) {
        ret = -1;
        goto out;
    }
    CK(cudaStreamSynchronize(x->c->stream), "the all-reduce");
    CK(cudaMemcpy(x->data + j->out_off + (size_t)x->r->rank * row, B.out, row, cudaMemcpyDeviceToHost), "downloading out");
    if (j->hidden)
        CK(cudaMemcpy(x->data + j->ro_off + (size_t)x->r->rank * row, B.ro, row, cudaMemcpyDeviceToHost),
           "downloading residual_out");
out:
    free_bufs(x, &B);
    return ret;
}

/* REPEAT (graph = false) and PDL: calls back to back; GRAPH: captured and replayed with eager
 * calls between. The call number lives on the device for GRAPH (the graph advances it). */
static int job_calls(struct ctx *x, struct kl_ar_job *j)
{
    int ret = 0;
    const enum kl_dtype t = (enum kl_dtype)j->dtype;
    const int rank = x->r->rank, late = j->late && rank == x->b->world - 1;
    const bool graph = j->scenario == KL_AR_GRAPH, pdl = j->scenario == KL_AR_PDL;
    const int per_graph = j->per_graph > 0 ? j->per_graph : 10, room = j->calls + per_graph + 1;
    cudaStream_t s = x->c->stream;
    struct bufs B;
    void *hist = NULL, *copy = NULL;
    uint32_t *ctr = NULL;
    unsigned char *host = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    int made = 0;
    if (alloc_bufs(x, j, &B)) return -1;
    const size_t rec = (size_t)B.n_rec * kl_dtype_size(t); /* bytes recorded per call */
    CK(cudaMalloc(&hist, rec * (size_t)room + 16), "cudaMalloc of the output history");
    CK(cudaMalloc(&copy, rec + 16), "cudaMalloc of the consumer's copy");
    CK(cudaMalloc((void **)&ctr, 2 * sizeof(uint32_t)), "cudaMalloc of the call counter");
    CK(cudaMemset(ctr, 0, 2 * sizeof(uint32_t)), "zeroing the call counter");
    if (j->hidden) CK(kl_ar_dev_generate(B.w, t, j->hidden, j->seed, 0, NULL, KL_AR_GEN_WEIGHT, s), "generating the weight");
    CK(cudaDeviceSynchronize(), "set-up");
    if (kl_rank_barrier(x->r, "buffers of a multi-call job")) {
        ret = -1;
        goto out;
    }
    kl_rank_step(x->r, "job: %d calls of %lld %s%s%s", j->calls, (long long)j->n, kl_dtype_name(t),
                 graph ? " in CUDA graphs" : pdl ? " with a PDL consumer" : "", late ? ", this rank late" : "");
    if (!graph) {
        for (int c = 0; c < j->calls; c++) {
            CK(generate(x, j, &B, (uint32_t)c, NULL), "generating x");
            if (late) CK(kl_ar_dev_delay((uint32_t)c, NULL, s), "the late rank's delay");
            if (call(x, j, &B, "launch")) {
                ret = -1;
                goto out;
            }
            if (pdl) CK(kl_ar_dev_pdl_copy(B.rec, copy, t, B.n_rec, s), "the PDL consumer");
            CK(kl_ar_dev_record(pdl ? copy : B.rec, hist, t, B.n_rec, (uint32_t)c, NULL, s), "recording out");
        }
        made = j->calls;
    } else {
        /* The graph is captured (and first replayed) before this job's first eager call: the
         * launcher must not do host-side set-up that capture would skip. */
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        for (int k = 0; k < per_graph; k++) {
            int rc = generate(x, j, &B, 0, ctr);
            if (!rc && late) rc = kl_ar_dev_delay(0, ctr, s);
            if (!rc) rc = (int)launch_on(x, j, &B, s);
            if (!rc) rc = kl_ar_dev_record(B.rec, hist, t, B.n_rec, 0, ctr, s);
            if (rc) {
                cudaStreamEndCapture(s, &g);
                CK(rc, "launch during graph capture");
            }
        }
        CK(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
        CK(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
        while (made < j->calls) {
            CK(cudaGraphLaunch(ge, s), "cudaGraphLaunch");
            made += per_graph;
            if (made >= j->calls) break;
            /* An eager call between replays: it takes the next call number from the device too. */
            CK(generate(x, j, &B, 0, ctr), "generating x");
            if (late) CK(kl_ar_dev_delay(0, ctr, s), "the late rank's delay");
            if (call(x, j, &B, "eager launch between replays")) {
                ret = -1;
                goto out;
            }
            CK(kl_ar_dev_record(B.rec, hist, t, B.n_rec, 0, ctr, s), "recording out");
            made++;
        }
    }
    CK(cudaStreamSynchronize(s), "the calls");
    host = malloc(rec * (size_t)made + 1);
    CK(cudaMemcpy(host, hist, rec * (size_t)made, cudaMemcpyDeviceToHost), "downloading the outputs");
    kl_rank_step(x->r, "checking %d calls", made);
    check_calls(x, j, host, made, B.n_rec);
out:
    free(host);
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    cudaFree(hist), cudaFree(copy), cudaFree(ctr);
    free_bufs(x, &B);
    return ret;
}

/* The communicator serves one stream: a launch on another is refused without launching; the
 * bound stream works right after. */
static int job_streams(struct ctx *x, struct kl_ar_job *j)
{
    int ret = 0;
    const enum kl_dtype t = (enum kl_dtype)j->dtype;
    cudaStream_t other = NULL;
    void *hist = NULL;
    unsigned char *host = NULL;
    struct bufs B;
    if (alloc_bufs(x, j, &B)) return -1;
    const size_t rec = (size_t)B.n_rec * kl_dtype_size(t);
    host = malloc(rec + 1);
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "cudaStreamCreate");
    CK(cudaMalloc(&hist, rec + 16), "cudaMalloc");
    if (j->hidden) CK(kl_ar_dev_generate(B.w, t, j->hidden, j->seed, 0, NULL, KL_AR_GEN_WEIGHT, x->c->stream), "generating the weight");
    CK(generate(x, j, &B, 0, NULL), "generating x");
    CK(cudaStreamSynchronize(x->c->stream), "generating x");
    cudaError_t rc = launch_on(x, j, &B, other);
    if (rc != cudaErrorInvalidValue) {
        snprintf(j->note[x->r->rank], sizeof j->note[0], "a launch on a second stream returned '%s', not a refusal",
                 cudaGetErrorString(rc));
        j->n_bad[x->r->rank]++;
        CK(cudaStreamSynchronize(other), "the call on the second stream");
    }
    if (call(x, j, &B, "launch on the bound stream")) {
        ret = -1;
        goto out;
    }
    CK(kl_ar_dev_record(B.rec, hist, t, B.n_rec, 0, NULL, x->c->stream), "recording out");
    CK(cudaStreamSynchronize(x->c->stream), "the call on the bound stream");
    CK(cudaMemcpy(host, hist, rec, cudaMemcpyDeviceToHost), "downloading out");
    j->calls = 0; /* no hashes for this one: the parent checks n_bad */
    check_calls(x, j, host, 1, B.n_rec);
out:
    if (other) cudaStreamDestroy(other);
    cudaFree(hist);
    free(host);
    free_bufs(x, &B);
    return ret;
}

static int batch_main(struct kl_rank *r)
{
    struct kl_ar_batch *b = r->payload;
    struct ctx x = {r, b, (unsigned char *)r->payload + ((sizeof(struct kl_ar_batch) + 63) & ~(size_t)63), NULL, NULL};
    const struct kl_variant *v = kl_variant_find("allreduce", b->variant);
    if (!v) return kl_rank_fail(r, "no allreduce variant '%s' in this binary", b->variant);
    x.ops = kl_ar_ops(v);
    struct kl_allreduce_comm c;
    x.c = &c;
    int ret = kl_ar_comm_init(r, &b->ex, x.ops->needs, b->capacity, b->spin_timeout_s, &c);
    for (int j = 0; !ret && j < b->n_jobs; j++) {
        char what[64];
        snprintf(what, sizeof what, "before job %d", j);
        if ((ret = kl_rank_barrier(r, what))) break;
        struct kl_ar_job *job = &b->job[j];
        if (job->skipped) continue;
        kl_rank_step(r, "job %d: %s, n=%lld %s", j, b->variant, (long long)job->n, kl_dtype_name((enum kl_dtype)job->dtype));
        switch (job->scenario) {
        case KL_AR_ONCE: ret = job_once(&x, job); break;
        case KL_AR_STREAMS: ret = job_streams(&x, job); break;
        default: ret = job_calls(&x, job); break;
        }
        if (!ret) job->done[r->rank] = 1;
    }
    if (!ret) kl_ar_comm_destroy(r, &c);
    return ret;
}

KL_RANK_PROGRAM("allreduce_batch", batch_main);
