/* `kernlab ceilings` and `kernlab bench`: every (variant, workload) of a module is set up with
 * rotated input sets, timed, re-checked, optionally profiled (CUPTI counters and kernel
 * records), placed on the roofline, compared with its target, and written as one results line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lab/core/args.h"
#include "lab/core/device.h"
#include "perf/activity.h"
#include "perf/bench.h"
#include "perf/counters.h"
#include "perf/peer.h"

/* Below this many microseconds of modelled DRAM time a workload is "small" (more repetitions
 * of the per-launch event timing). */
#define KL_SMALL_US 20.0
/* Rotated input sets must span at least this multiple of the L2, so each launch finds its
 * inputs cold (lab/CONTRACTS.md section 6), capped by device memory we are willing to take. */
#define KL_L2_MULTIPLE 4
/* A launch longer than this is "slow": timed with events only, within about KL_SLOW_BUDGET_US. */
#define KL_SLOW_US 2000.0
#define KL_SLOW_BUDGET_US 2e6
#define KL_ROTATION_BYTES_MAX (4ull << 30)

struct launch_ctx {
    const struct kl_perf_ops *ops;
    const struct kl_variant *v;
    void *state;
};

static int launch_set(void *p, int set, cudaStream_t s)
{
    struct launch_ctx *c = p;
    return c->ops->launch(c->v, c->state, set, s);
}

static void launch_once(void *p)
{
    struct launch_ctx *c = p;
    c->ops->launch(c->v, c->state, 0, 0);
}

/* Roofline position: arithmetic intensity from the models, the ridge from the measured
 * ceilings, the bound that applies and the fraction of it reached. */
static cJSON *roofline(const struct kl_ceilings *c, const struct kl_result *r)
{
    cJSON *o = cJSON_CreateObject();
    double intensity = r->bytes > 0 ? r->flops / r->bytes : INFINITY;
    double ridge = c->dev.gemm_tflops * 1e12 / (c->dev.copy_gbs * 1e9);
    double attainable = fmin(c->dev.gemm_tflops, intensity * c->dev.copy_gbs * 1e9 / 1e12); /* TFLOP/s */
    bool memory = intensity < ridge;
    cJSON_AddNumberToObject(o, "intensity", isfinite(intensity) ? intensity : 0);
    cJSON_AddNumberToObject(o, "ridge", ridge);
    cJSON_AddStringToObject(o, "bound", memory ? "memory" : "compute");
    cJSON_AddNumberToObject(o, "attainable_tflops", attainable);
    cJSON_AddNumberToObject(o, "frac_of_bound", memory ? r->bw_frac : r->tc_frac);
    return o;
}

static void add_counters(cJSON *counters, const struct kl_counters *k, double model_bytes)
{
    cJSON *j = kl_counters_json(k);
    for (cJSON *e = j ? j->child : NULL; e; e = e->next) cJSON_AddItemToObject(counters, e->string, cJSON_Duplicate(e, 1));
    cJSON_Delete(j);
    if (k->valid && isfinite(k->dram_read_bytes) && isfinite(k->dram_write_bytes) && model_bytes > 0) {
        double ratio = (k->dram_read_bytes + k->dram_write_bytes) / model_bytes;
        cJSON_AddNumberToObject(counters, "bytes_ratio", ratio);
        /* Far above 1: re-reads or uncoalesced access. Far below: the cache served part of the
         * traffic, so the time is not a DRAM measurement. */
        cJSON_AddStringToObject(counters, "bytes_flag",
                                ratio > 1.15 ? "extra traffic" : ratio < 0.85 ? "under the model" : "as modelled");
    }
}

static int poison_set0(void *p, cudaStream_t s)
{
    struct launch_ctx *c = p;
    return c->ops->poison(c->state, s);
}

bool kl_bench_wants(const struct kl_bench_args *a, const char *name)
{
    if (!a->workload) return true;
    for (const char *p = a->workload;; p++) {
        const size_t len = strcspn(p, ",");
        if (len == strlen(name) && strncmp(p, name, len) == 0) return true;
        p += len;
        if (!*p) return false;
    }
}

const char *kl_bench_unknown_workload(const char *list, const char *const *names, int n)
{
    for (const char *p = list;; p++) {
        const size_t len = strcspn(p, ",");
        bool found = false;
        for (int i = 0; i < n; i++) found |= strlen(names[i]) == len && strncmp(p, names[i], len) == 0;
        if (!found) return p;
        p += len;
        if (!*p) return NULL;
    }
}

/* One (variant, workload): timed, its last timed repetition re-checked, profiled, placed on the
 * roofline, judged when v is the variant the gate judges (judge), written as a results line. */
static int bench_one(const struct kl_bench_args *a, const struct kl_variant *v, const struct kl_workload *w,
                     double copy_us, bool judge)
{
    const struct kl_perf_ops *ops = a->module->perf;
    const struct kl_ceilings *c = a->ceil;
    struct kl_err err = {{0}};
    size_t set_bytes = ops->set_bytes(w);
    size_t want = (size_t)KL_L2_MULTIPLE * (size_t)c->dev.l2_bytes;
    int sets = set_bytes >= want ? 1 : (int)((want + set_bytes - 1) / set_bytes);
    if ((size_t)sets * set_bytes > KL_ROTATION_BYTES_MAX) sets = (int)(KL_ROTATION_BYTES_MAX / set_bytes);
    if (sets < 1) sets = 1;
    /* In place: set 0 must be launched once in the checked replay (kl_time_set), which takes a
     * second set to rotate the graph's other launches over. */
    if (ops->in_place && sets < 2) sets = 2;

    void *state = ops->setup(w, sets, a->seed, &err);
    if (!state) {
        fprintf(stderr, "bench %s %s %s: setup failed: %s\n", a->module->name, v->name, w->name, err.msg);
        return -1;
    }
    struct launch_ctx lc = {ops, v, state};
    /* A variant that declines the workload (cudaErrorNotSupported: a dtype, a head_dim, draft
     * tokens, the other family of store's variants) has no row, as the checkers SKIP it; it is
     * not a failure. */
    if (launch_set(&lc, 0, 0) == cudaErrorNotSupported) {
        (void)cudaGetLastError();
        fprintf(stderr, "bench %s %s %s: skipped: the variant does not take this workload\n", a->module->name, v->name,
                w->name);
        ops->teardown(state);
        return 0;
    }
    struct kl_result r = {.module = a->module->name, .variant = v->name, .workload = w->name};
    r.device = c->dev;
    r.device.read_gbs = c->read_gbs;
    r.bytes = ops->bytes(w);
    r.flops = ops->flops(w);
    bool small = r.bytes / (c->dev.copy_gbs * 1e3) < KL_SMALL_US;

    /* Two timings of the same launches. Graph replays are what the gate judges: back-to-back
     * kernels with their launch processing pipelined, as in a serving engine's stream or graph.
     * Events around every single launch are kept beside it: they add the GPU front-end's
     * launch processing between the events (about 1-3 us here), visible on short kernels.
     * The judged timing runs last, and its last repetition is the one re-checked: set 0's
     * outputs are poisoned just before it (kl_time_checked), so a kernel that writes nothing
     * after its first launch (per-launch state left dirty) fails here. */
    struct kl_clocks before, after;
    struct kl_timing t, te, probe;
    kl_clocks_read(&before);
    /* A slow launch (a teaching variant on a big workload: tens of ms) is timed with events
     * alone, fewer times: graph replays of 20 launches x 30 would take minutes, and at that
     * length the launch processing the graph hides is a few parts per million. */
    int rc = kl_time(launch_set, &lc, sets, 3, false, &probe, &err);
    const bool slow = !rc && probe.median_us > KL_SLOW_US;
    if (!rc) {
        int reps = slow ? (int)(KL_SLOW_BUDGET_US / probe.median_us) : small ? 30 : 50;
        rc = kl_time_checked(launch_set, slow ? poison_set0 : NULL, &lc, sets, reps < 5 ? 5 : reps > 50 ? 50 : reps,
                             false, &te, &err);
        if (slow) t = te;
    }
    if (!rc && !slow) rc = kl_time_checked(launch_set, poison_set0, &lc, sets, 30, true, &t, &err);
    kl_clocks_read(&after);
    if (rc) {
        fprintf(stderr, "bench %s %s %s: %s\n", a->module->name, v->name, w->name, err.msg);
        ops->teardown(state);
        return -1;
    }
    char throttle_why[160];
    r.throttled = kl_throttled(&before, &after, throttle_why, sizeof throttle_why);
    r.time_us_min = t.min_us, r.time_us_median = t.median_us, r.time_us_max = t.max_us;
    double s = t.median_us * 1e-6;
    r.gbs = r.bytes / s / 1e9;
    r.bw_frac = r.gbs / c->dev.copy_gbs;
    r.tflops = r.flops / s / 1e12;
    r.tc_frac = r.tflops / c->dev.gemm_tflops;
    double floor_frac = c->launch_us_graph / t.median_us;

    /* The output of the last timed repetition is checked: a fast wrong kernel is no result. */
    struct kl_cmp cmp;
    struct kl_recheck what = {0};
    r.checked = ops->check(v, state, &cmp, &what, &err) == 0;
    if (!r.checked) fprintf(stderr, "bench %s %s %s: re-check failed to run: %s\n", a->module->name, v->name, w->name, err.msg);
    r.rel_l2 = r.checked ? cmp.rel_l2 : NAN, r.max_abs = r.checked ? cmp.max_abs : NAN;
    r.check_pass = r.checked && cmp.pass;
    if (r.checked && !cmp.pass) {
        fprintf(stderr, "bench %s %s %s: the last timed %s replay's output is wrong: %lld elements out of bounds\n",
                a->module->name, v->name, w->name, t.graph ? "graph" : "events", (long long)cmp.n_bad);
        kl_cmp_print(stderr, "  out", &cmp);
    }

    r.counters = cJSON_CreateObject();
    struct kl_kernel_records kr;
    if (kl_activity_record(launch_once, &lc, &kr) == 0) {
        cJSON_AddItemToObject(r.counters, "launch", kl_kernel_record_json(&kr.k[0]));
        cJSON_AddNumberToObject(r.counters, "kernels_per_launch", kr.count);
    }
    if (a->counters) {
        struct kl_counters k;
        if (kl_counters_collect(launch_once, &lc, &k, &err) == 0) add_counters(r.counters, &k, r.bytes);
        else fprintf(stderr, "bench %s %s %s: counters: %s\n", a->module->name, v->name, w->name, err.msg);
    }

    r.params = ops->params ? ops->params(w) : NULL;
    r.extra = cJSON_CreateObject();
    cJSON_AddStringToObject(r.extra, "timing", slow ? "events" : "graph");
    cJSON *ev = cJSON_AddObjectToObject(r.extra, "time_us_events");
    cJSON_AddNumberToObject(ev, "min", te.min_us);
    cJSON_AddNumberToObject(ev, "median", te.median_us);
    cJSON_AddNumberToObject(ev, "max", te.max_us);
    cJSON_AddNumberToObject(r.extra, "input_sets", sets);
    cJSON_AddNumberToObject(r.extra, "floor_frac", floor_frac);
    if (c->read_gbs > 0) cJSON_AddNumberToObject(r.extra, "read_frac", r.gbs / c->read_gbs);
    if (r.checked) kl_recheck_json(r.extra, &what, &t);
    if (ops->extra) ops->extra(state, r.extra);
    if (copy_us > 0) { /* the same bytes as a plain copy: what this size allows */
        cJSON_AddNumberToObject(r.extra, "copy_same_bytes_us", copy_us);
        cJSON_AddNumberToObject(r.extra, "copy_same_bytes_frac", copy_us / t.median_us);
    }
    cJSON_AddItemToObject(r.extra, "roofline", roofline(c, &r));
    cJSON_AddItemToObject(r.extra, "ceilings", kl_ceilings_json(c));
    kl_clocks_json(r.extra, &before, &after);
    kl_bench_relations(a->json_path, a->targets, &r);
    /* Judged after every field it may read is in place (copy_same_bytes_frac, read_frac, time_vs_peer). */
    if (judge) kl_gate_judge(a->targets, &r);
    if (a->json) kl_result_write(a->json, &r), fflush(a->json);

    const cJSON *ratio = cJSON_GetObjectItem(r.counters, "bytes_ratio");
    char ratio_s[16] = "-", gate[96];
    if (ratio) snprintf(ratio_s, sizeof ratio_s, "%.3f", ratio->valuedouble);
    fprintf(a->table, "%-14s %-20s %9.2f %8.0f %7.3f %5.2f %6s %5s %s\n", v->name, w->name, t.median_us, r.gbs,
            r.bw_frac, floor_frac, ratio_s, r.check_pass ? "ok" : "FAIL", kl_gate_cell(gate, sizeof gate, &r));
    if (r.throttled)
        fprintf(stderr, "bench %s %s %s: throttled: %s\n", a->module->name, v->name, w->name, throttle_why);
    if (judge && a->gate_log) kl_gate_record(a->gate_log, a->targets, &r, stderr);
    if (!r.check_pass && a->failures) ++*a->failures;
    cJSON_Delete(r.counters);
    cJSON_Delete(r.params);
    cJSON_Delete(r.extra);
    ops->teardown(state);
    return 0;
}

void kl_bench_progress(const char *fmt, ...)
{
    static struct timespec t0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!t0.tv_sec && !t0.tv_nsec) t0 = now;
    fprintf(stderr, "bench [%5.0f s] ", (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec));
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Whether variant v runs, ungated, on workload w beyond what --variant selects: a target row of
 * a workload this run includes measures the --variant against v's row of w (time_vs:w@v), which
 * must come from the same run (the FP8 decode against the bf16 one). */
static bool yardstick(const struct kl_bench_args *a, const char *v, const char *w)
{
    if (!a->variant || !a->targets || strcmp(a->variant, v) == 0) return false;
    for (int i = 0; i < a->targets->count; i++) {
        const struct kl_target *x = &a->targets->rows[i];
        char other[128];
        const char *by = kl_metric_relation_parts(x->metric, other, sizeof other);
        if (by && strcmp(x->module, a->module->name) == 0 && strcmp(by, v) == 0 && strcmp(other, w) == 0 &&
            kl_bench_wants(a, x->workload))
            return true;
    }
    return false;
}

/* Workloads outer, variants inner: every variant of a workload runs on the same inputs, so a
 * module can compute the reference of a workload once (attention) and reuse it for each. */
int kl_bench_module(const struct kl_bench_args *a)
{
    const struct kl_perf_ops *ops = a->module->perf;
    const char *judged = NULL;
    if (a->gate) {
        char why[640];
        judged = kl_gate_variant(a->targets, a->module->name, a->variant, why, sizeof why);
        if (!judged) fprintf(stderr, "gate: %s: nothing judged: %s\n", a->module->name, why);
    }
    /* Mutants (test binaries only) run when named, never in a sweep. */
    const bool mutants = a->variant != NULL;
    for (int j = 0; j < kl_variant_count(a->module->name, mutants); j++) {
        const struct kl_variant *v = kl_variant_at(a->module->name, j, mutants);
        if ((!a->variant || strcmp(a->variant, v->name) == 0) && v->min_cc > a->ceil->dev.cc)
            fprintf(stderr, "bench %s %s: skipped, needs sm_%d\n", a->module->name, v->name, v->min_cc);
    }
    int ran = 0;
    for (int i = 0; i < ops->n_workloads; i++) {
        const struct kl_workload *w = &ops->workloads[i];
        const bool selected = kl_bench_wants(a, w->name);
        bool yard = false; /* some variant runs here only as another row's yardstick */
        for (int j = 0; j < kl_variant_count(a->module->name, false) && !selected; j++)
            yard |= yardstick(a, kl_variant_at(a->module->name, j, false)->name, w->name);
        if (!selected && !yard) continue;
        struct kl_timing t;
        struct kl_err err = {{0}};
        double copy_us = 0;
        kl_bench_progress("%s %s: the same bytes as a plain copy", a->module->name, w->name);
        if (kl_copy_same_bytes(a->ceil, ops->bytes(w), &t, &err) == 0) copy_us = t.median_us;
        else fprintf(stderr, "bench %s: same-size copy for %s: %s\n", a->module->name, w->name, err.msg);
        for (int j = 0; j < kl_variant_count(a->module->name, mutants); j++) {
            const struct kl_variant *v = kl_variant_at(a->module->name, j, mutants);
            const bool as_yardstick = yardstick(a, v->name, w->name);
            if ((!as_yardstick && ((a->variant && strcmp(a->variant, v->name) != 0) || !selected)) ||
                v->min_cc > a->ceil->dev.cc)
                continue;
            kl_bench_progress("%s %s %s", a->module->name, v->name, w->name);
            const char *judged_here = kl_gate_variant_on(a->targets, a->module->name, judged, a->variant, w->name);
            const bool judge = judged_here && strcmp(judged_here, v->name) == 0;
            if (bench_one(a, v, w, copy_us, judge) && a->failures) ++*a->failures;
            ran++;
        }
    }
    return ran;
}

/* ---- commands ---- */

enum { CEIL_JSON };
static const struct kl_opt ceilings_opts[] = {
    [CEIL_JSON] = {"--json", KL_OPT_VALUE, "FILE", "also write the ceilings as one JSON object to FILE"},
    {0},
};
const struct kl_command kl_ceilings_command = {
    .name = "ceilings",
    .summary = "measure this GPU's ceilings: copy and read bandwidth, GEMM rate, launch floor, clocks",
    .details = "The method: lab/CONTRACTS.md section 6. exit: 0, 1 no GPU or a failed measurement, 2 usage\n",
    .opts = ceilings_opts,
    .run = kl_cmd_ceilings,
};

int kl_cmd_ceilings(int argc, char **argv)
{
    struct kl_optval opt[1];
    int n, rc = kl_args_parse(&kl_ceilings_command, argc, argv, opt, NULL, &n);
    if (rc >= 0) return rc;
    const char *json = opt[CEIL_JSON].value;
    struct kl_ceilings c;
    struct kl_err err = {{0}};
    if (kl_ceilings_measure(&c, stderr, &err)) return fprintf(stderr, "kernlab ceilings: %s\n", err.msg), 1;
    kl_ceilings_print(stdout, &c);
    cJSON *peer = cJSON_CreateObject(); /* two GPUs or more: the peer copy ceiling too */
    if (kl_peer_ceilings(stdout, peer, &err)) fprintf(stderr, "kernlab ceilings: peer copy: %s\n", err.msg);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) return fprintf(stderr, "kernlab ceilings: cannot write %s: %s\n", json, strerror(errno)), 1;
        cJSON *o = kl_ceilings_json(&c);
        if (cJSON_GetObjectItem(peer, "peer")) cJSON_AddItemToObject(o, "peer", cJSON_DetachItemFromObject(peer, "peer"));
        char *s = cJSON_Print(o);
        fprintf(f, "%s\n", s);
        free(s);
        cJSON_Delete(o);
        fclose(f);
    }
    cJSON_Delete(peer);
    return 0;
}

/* Appends the peers' rows (perf/peers/run.py, PyTorch) to the same results file. */
static void run_peers(const char *module, const char *workload, const char *json, const struct kl_ceilings *c)
{
    char ceil_path[1100], cmd[4096];
    snprintf(ceil_path, sizeof ceil_path, "%s.ceilings.json", json);
    FILE *f = fopen(ceil_path, "w");
    if (!f) {
        fprintf(stderr, "bench %s: peers not run: cannot write %s: %s\n", module, ceil_path, strerror(errno));
        return;
    }
    cJSON *o = kl_ceilings_json(c);
    char *s = cJSON_PrintUnformatted(o);
    fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(o);
    fclose(f);
    snprintf(cmd, sizeof cmd, "python3 '%s/perf/peers/run.py' --module %s %s%s --json '%s' --ceilings '%s' --commit '%s'",
             KL_SOURCE_DIR, module, workload ? "--workload " : "", workload ? workload : "", json, ceil_path,
             kl_build_commit());
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "bench %s: peers exited with status %d\n", module, rc);
    remove(ceil_path);
}

/* Results go to a temporary file beside --json FILE, renamed onto FILE only when the run
 * completes: a run that fails or finds no GPU leaves an existing FILE as it was. */
static FILE *open_results(const char *json, char *tmp, size_t len)
{
    snprintf(tmp, len, "%s.XXXXXX", json);
    int fd = mkstemp(tmp);
    if (fd < 0) return fprintf(stderr, "kernlab bench: cannot write beside %s: %s\n", json, strerror(errno)), NULL;
    mode_t mask = umask(0); /* mkstemp makes 0600; results are as readable as any file written */
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    /* Append: --peers has perf/peers/run.py add its rows to the same file between ours. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND);
    FILE *f = fdopen(fd, "a");
    if (!f) {
        fprintf(stderr, "kernlab bench: %s: %s\n", tmp, strerror(errno));
        close(fd);
        remove(tmp);
    }
    return f;
}

/* Renames the results onto json when the run completed; else keeps what was written as
 * json.partial and says so. Returns the status to exit with. */
static int close_results(FILE *f, const char *tmp, const char *json, bool complete, int status)
{
    struct stat st;
    fflush(f);
    bool written = fstat(fileno(f), &st) == 0 && st.st_size > 0;
    if (fclose(f) != 0) {
        fprintf(stderr, "kernlab bench: writing %s failed: %s; %s left as it was\n", tmp, strerror(errno), json);
        remove(tmp);
        return 1;
    }
    if (complete) {
        if (rename(tmp, json) == 0) return status;
        fprintf(stderr, "kernlab bench: cannot rename %s to %s: %s\n", tmp, json, strerror(errno));
    }
    if (!written) {
        remove(tmp);
        fprintf(stderr, "kernlab bench: no results written; %s left as it was\n", json);
        return status ? status : 1;
    }
    char partial[1200];
    snprintf(partial, sizeof partial, "%s.partial", json);
    const char *kept = rename(tmp, partial) == 0 ? partial : tmp;
    fprintf(stderr, "kernlab bench: the run did not complete: its results so far are in %s; %s left as it was\n", kept,
            json);
    return status ? status : 1;
}

enum { BENCH_VARIANT, BENCH_WORKLOAD, BENCH_JSON, BENCH_GATE, BENCH_COUNTERS, BENCH_PEERS, BENCH_SEED };
static const struct kl_opt bench_opts[] = {
    [BENCH_VARIANT] = {"--variant", KL_OPT_VALUE, "NAME", "this variant only (default: every variant this GPU runs)"},
    [BENCH_WORKLOAD] = {"--workload", KL_OPT_VALUE, "NAME[,NAME]", "these workloads only (default: all of the module's)"},
    [BENCH_JSON] = {"--json", KL_OPT_VALUE, "FILE", "results, one JSON line per row; FILE is replaced when the run completes"},
    [BENCH_GATE] = {"--gate", KL_OPT_FLAG, NULL, "judge the gated variant's rows against perf/targets/<arch>.csv"},
    [BENCH_COUNTERS] = {"--counters", KL_OPT_FLAG, NULL, "CUPTI counters per row (DRAM bytes, throughput, stalls)"},
    [BENCH_PEERS] = {"--peers", KL_OPT_FLAG, NULL, "PyTorch's implementations on the same workloads (perf/peers/)"},
    [BENCH_SEED] = {"--seed", KL_OPT_NUMBER, "N", "the inputs' seed (default 1234)"},
    {0},
};
const struct kl_command kl_bench_command = {
    .name = "bench",
    .operands = "MODULE|all",
    .min_operands = 1,
    .max_operands = 1,
    .summary = "time variants on their workloads, re-check the timed outputs, optionally gate on the targets",
    .details = "Method and targets: lab/CONTRACTS.md section 6; the results line: section 7.\n"
               "exit: 0, 1 a failed re-check or a row that could not run, 2 usage, 3 a missed target (--gate),\n"
               "      77 nothing benched (no GPU for a GPU module, a variant this GPU cannot run, too few GPUs)\n",
    .opts = bench_opts,
    .run = kl_cmd_bench,
};

int kl_cmd_bench(int argc, char **argv)
{
    struct kl_bench_args a = {.table = stdout, .seed = 1234};
    struct kl_optval opt[7];
    const char *target;
    int n_operands, rc = kl_args_parse(&kl_bench_command, argc, argv, opt, &target, &n_operands);
    if (rc >= 0) return rc;
    a.variant = opt[BENCH_VARIANT].value, a.workload = opt[BENCH_WORKLOAD].value;
    a.gate = opt[BENCH_GATE].set, a.counters = opt[BENCH_COUNTERS].set, a.peers = opt[BENCH_PEERS].set;
    if (opt[BENCH_SEED].set) a.seed = opt[BENCH_SEED].number;
    const char *json = opt[BENCH_JSON].value;
    const bool peers = a.peers;
    bool all = strcmp(target, "all") == 0;
    const struct kl_module *one = all ? NULL : kl_module_find(target);
    if (!all && !one) return kl_usage_error(&kl_bench_command, "unknown module '%s' (kernlab list shows them)", target);
    if (all && a.variant) return kl_usage_error(&kl_bench_command, "--variant needs one MODULE, not all");
    /* Every argument is checked, and the GPU, before any output is opened. */
    const struct kl_variant *asked = one && a.variant ? kl_variant_find(one->name, a.variant) : NULL;
    if (one && a.variant && !asked)
        return kl_usage_error(&kl_bench_command, "--variant '%s': no such variant of %s", a.variant, one->name);
    if (one && a.workload && one->perf && !one->bench) {
        const char *names[KL_BENCH_MAX_WORKLOADS];
        int n = 0;
        for (int i = 0; i < one->perf->n_workloads && n < KL_BENCH_MAX_WORKLOADS; i++)
            names[n++] = one->perf->workloads[i].name;
        const char *unknown = kl_bench_unknown_workload(a.workload, names, n);
        if (unknown)
            return kl_usage_error(&kl_bench_command, "--workload '%.*s': no such workload of %s",
                                  (int)strcspn(unknown, ","), unknown, one->name);
    }
    char why[256], tmp[1024];
    const int cc = kl_device_cc(why, sizeof why);
    bool gpu = cc > 0;
    /* Nothing this machine can run: said in the last line, exit 77 as a check that ran nothing. */
    if (one && one->perf && !one->bench && !gpu)
        return fprintf(stderr, "bench %s: nothing benched: benchmarks need a GPU (%s)\n", one->name, why), KL_EXIT_NOTHING_RUN;
    if (asked && asked->min_cc > cc)
        return fprintf(stderr, "bench %s: nothing benched: %s needs sm_%d, this %s\n", one->name, asked->name,
                       asked->min_cc, gpu ? "GPU is older" : "machine has no GPU"),
               KL_EXIT_NOTHING_RUN;
    struct kl_ceilings ceil;
    struct kl_targets targets = {0};
    struct kl_err err = {{0}};
    static struct kl_gate_log gate_log; /* static: ungated names take a few tens of KB */
    int failures = 0, status = 0;
    a.failures = &failures;
    if (a.gate) memset(&gate_log, 0, sizeof gate_log), a.gate_log = &gate_log;
    bool need_gpu = false;
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        need_gpu |= (all || strcmp(m->name, target) == 0) && m->perf && !m->bench;
    }
    if (need_gpu && gpu) {
        if (kl_ceilings_measure(&ceil, stderr, &err)) {
            fprintf(stderr, "kernlab bench: ceilings: %s\n", err.msg);
            return 1;
        }
        kl_ceilings_print(stdout, &ceil);
        a.ceil = &ceil;
        if (a.gate) {
            if (kl_targets_load(&targets, KL_SOURCE_DIR "/perf/targets", ceil.dev.cc, &err) ||
                kl_targets_check(&targets, &err)) {
                fprintf(stderr, "kernlab bench --gate: %s\n", err.msg);
                kl_targets_free(&targets);
                return 1;
            }
            a.targets = &targets;
        }
    }
    if (json && !(a.json = open_results(json, tmp, sizeof tmp))) return kl_targets_free(&targets), 1;
    a.json_path = json ? tmp : NULL;
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        if (!all && strcmp(m->name, target) != 0) continue;
        a.module = m;
        kl_bench_progress("module %s", m->name);
        if (m->bench) {
            /* -2: a usage error; -1: a failure; 1: the module cannot run here (allreduce on one GPU),
             * a failure only when it was asked for alone. */
            const int rc = m->bench(&a);
            if (rc == -2) status = 2;
            else if (rc < 0) status = 1;
            else if (rc > 0 && !all) status = KL_EXIT_NOTHING_RUN;
        } else if (m->perf) {
            if (!gpu) {
                fprintf(stderr, "bench %s: skipped: benchmarks need a GPU (%s)\n", m->name, why);
                if (!all) status = 1;
                continue;
            }
            printf("\n%s: variant        workload              time_us     GB/s bw_frac floor  bytes  check gate\n",
                   m->name);
            /* The peers first: each of our rows is then written with its time against theirs. */
            if (peers && json) {
                fflush(a.json);
                run_peers(m->name, a.workload, tmp, &ceil);
            }
            if (kl_bench_module(&a) == 0) {
                fprintf(stderr, "bench %s: nothing matched --variant/--workload\n", m->name);
                status = 1;
            }
        }
    }
    kl_targets_free(&targets);
    kl_counters_shutdown();
    if (failures) fprintf(stderr, "bench: %d rows failed their output re-check or could not run\n", failures), status = 1;
    const bool complete = status == 0; /* a missed target is a result like any other: its rows say so */
    /* Errors win over the gate's verdict: 1 or 2 as they were, else what the gate asks for
     * (KL_EXIT_TARGET_MISSED when a row missed, so scripts can tell a miss from a failure). */
    if (a.gate) {
        const int gate = kl_gate_finish(&gate_log, stderr);
        if (status == 0) status = gate;
    }
    if (a.json) status = close_results(a.json, tmp, json, complete, status);
    return status;
}
