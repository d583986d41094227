/* `kernlab bench`: workloads, timing, ceilings, counters, roofline and the gate
 * (lab/CONTRACTS.md section 6). A module describes its workloads with kl_perf_ops; perf/bench.c
 * does the rest the same way for every module. */
#ifndef KL_BENCH_H
#define KL_BENCH_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lab/core/args.h"
#include "lab/core/check.h"
#include "lab/core/registry.h"
#include "lab/core/results.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;
struct kl_recheck;
struct kl_gate_log;

/* ---- ceilings, measured at the start of a run (perf/ceilings.cu) ---- */
struct kl_ceilings {
    struct kl_device_info dev; /* name, cc, sms, l2, copy_gbs, gemm_tflops */
    double copy_bytes;         /* size of the copy measured (read + write) */
    int copy_shape;            /* which copy kernel shape was fastest (perf/ceilings.cu) */
    double read_gbs;           /* a pure streaming read: the bound of read-dominated kernels (decode) */
    double read_bytes;         /* size of the read measured */
    int read_shape;            /* which read kernel shape was fastest (perf/ceilings.cu) */
    double launch_us_stream;   /* empty kernel, back to back on a stream, per launch */
    double launch_us_graph;    /* empty kernel inside a CUDA graph, per launch */
    int sm_clock_mhz, mem_clock_mhz, max_sm_clock_mhz; /* NVML when available, else 0 */
    double dram_peak_gbs;      /* from the memory clock and bus width (theoretical) */
    char driver[32], runtime[32];
};
/* Measures everything; prints progress to `progress` (may be NULL). -1 without a GPU. */
int kl_ceilings_measure(struct kl_ceilings *c, FILE *progress, struct kl_err *err);
void kl_ceilings_print(FILE *f, const struct kl_ceilings *c);

struct cJSON *kl_ceilings_json(const struct kl_ceilings *c);

/* ---- clocks through NVML, dlopen'ed (never linked: CI has no libnvidia-ml) ---- */
struct kl_clocks {
    bool valid;
    int sm_mhz, mem_mhz, max_sm_mhz;
    unsigned long long throttle_reasons;
};
void kl_clocks_read(struct kl_clocks *c);

/* ---- timing (perf/timing.cu) ---- */
typedef int (*kl_launch_set_fn)(void *ctx, int set, cudaStream_t stream); /* returns a cudaError_t */
/* Enqueues on `stream` what the re-check of the last timed repetition needs before it runs:
 * input set 0's outputs poisoned, in-place inputs restored. Returns a cudaError_t. */
typedef int (*kl_before_last_fn)(void *ctx, cudaStream_t stream);
struct kl_timing {
    double min_us, median_us, max_us;
    int reps;
    bool graph;   /* per-launch time from graph replays (small workloads) */
    int launches; /* launches in one repetition: the graph's, or 1 (events) */
};
/* Times launch over `reps` repetitions, rotating over `sets` input sets, after a warm-up.
 * use_graph: captures `per_graph` launches in a CUDA graph and times replays, reporting the
 * time per launch; otherwise events around every single launch. */
int kl_time(kl_launch_set_fn launch, void *ctx, int sets, int reps, bool use_graph, struct kl_timing *t,
            struct kl_err *err);
/* kl_time whose last repetition is the one the re-check reads: before_last (NULL: nothing) is
 * enqueued between the last two repetitions, before the last one's start event, so it is not
 * timed; the last repetition's last launch is input set 0's, and its only launch of set 0 when
 * sets >= 2 (kl_time_set). */
int kl_time_checked(kl_launch_set_fn launch, kl_before_last_fn before_last, void *ctx, int sets, int reps,
                    bool use_graph, struct kl_timing *t, struct kl_err *err);
/* The input set of launch i of n (the launches of one graph, or the repetitions timed with
 * events): the last is set 0, the others rotate over sets 1..sets-1 (all are set 0 when sets is
 * 1). So set 0 runs once in a graph replay and last: an in-place kernel's checked set is rotated
 * once, and no other set's launch overwrites a shared output after it (store's cache). */
int kl_time_set(int i, int n, int sets);
/* Fills with 0xFF (NaN in bf16, fp16 and fp32) the rows[k]-th row of row_bytes bytes at base,
 * for k < n (rows in device memory; a negative row is skipped), on stream: poisons outputs that
 * are scattered rows of a shared buffer (store's cache). Returns a cudaError_t. */
int kl_dev_poison_rows(void *base, size_t row_bytes, const int64_t *rows, int64_t n, cudaStream_t stream);
/* Times a copy of `bytes` (half read, half written) as a workload is timed: the ceiling for
 * that size, launch ramp-up and tail included (perf/ceilings.cu). */
int kl_copy_same_bytes(const struct kl_ceilings *c, double bytes, struct kl_timing *t, struct kl_err *err);

/* The copy ceiling's grid-stride copy (shape 0 of perf/ceilings.cu) of n16 16-byte elements,
 * `blocks` blocks of 512 threads on stream s; src or dst may be a peer GPU's memory (perf/peer.cu).
 * Returns a cudaError_t. */
int kl_copy_stride4(const void *src, void *dst, size_t n16, int blocks, cudaStream_t s);

/* Fills n elements of dtype at p (device memory) with seeded random values of variance scale^2
 * (perf/fill.cu). Returns a cudaError_t. */
int kl_dev_fill_random(void *p, enum kl_dtype dtype, size_t n, uint64_t seed, float scale);

/* ---- one module's workloads ---- */
struct kl_workload {
    const char *name;    /* "prefill-16k" */
    const char *summary; /* "16384 x 4096 bf16" */
    int64_t shape[6];    /* module-specific */
    int flags;           /* module-specific */
};

enum kl_bound_metric { KL_METRIC_BW, KL_METRIC_TC };

struct kl_perf_ops {
    int n_workloads;
    const struct kl_workload *workloads;
    enum kl_bound_metric metric; /* which ceiling the module is judged against */
    double (*bytes)(const struct kl_workload *w); /* fewest bytes: inputs read once, outputs written once */
    double (*flops)(const struct kl_workload *w);
    size_t (*set_bytes)(const struct kl_workload *w); /* device bytes one input set occupies */
    /* Device state with `sets` independent input sets (rotated to defeat the L2). */
    void *(*setup)(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err);
    int (*launch)(const struct kl_variant *v, void *state, int set, cudaStream_t stream);
    /* Enqueues on stream the poisoning of input set 0's outputs (0xFF bytes), and for an in-place
     * kernel the restoring of set 0's inputs from pristine copies: run before the last timed
     * repetition, so that check() reads what that repetition wrote. Returns a cudaError_t. */
    int (*poison)(void *state, cudaStream_t stream);
    /* Compares set 0's outputs, written by the last launch of the last timed repetition (set 0's
     * only launch in it), with the reference, and says in `what` what it compared. */
    int (*check)(const struct kl_variant *v, void *state, struct kl_cmp *out, struct kl_recheck *what,
                 struct kl_err *err);
    void (*teardown)(void *state);
    struct cJSON *(*params)(const struct kl_workload *w);
    /* Optional: module fields for the results line (top level), added after the re-check
     * (attention_prefill: the work counted and CTA 0's timeline). */
    void (*extra)(void *state, struct cJSON *extra);
    /* The kernel overwrites its inputs (rope rotates q and k in place): the bench gives it at
     * least two input sets, so set 0 is launched once in the checked graph replay and its output
     * is exactly one application of the kernel to the restored inputs. */
    bool in_place;
};

/* What a bench re-check compared: the results line's "recheck" object (kl_recheck_json). */
struct kl_recheck {
    bool sample;        /* false: every output element the checked launch writes */
    double checked, of; /* output elements compared, of the output elements of the checked launch */
    char reason[384];   /* what was compared with what; for a sample, why and how it covers every work tile */
};
/* Adds "recheck": {"replay": "graph"|"events", "outputs": "all"|"sample", "checked", "of", "reason",
 * "launches_in_replay"} to a results line's extra fields: t is the timing whose last repetition
 * was checked. */
void kl_recheck_json(struct cJSON *extra, const struct kl_recheck *what, const struct kl_timing *t);

/* Modules with a bench of their own (radix, allreduce) register the names of their workloads,
 * so a targets file can be checked against them: KL_BENCH_WORKLOADS(radix, fn), fn(i) giving
 * the i-th name and NULL past the last. */
struct kl_bench_workloads {
    const char *module;
    const char *(*name)(int i);
};
#define KL_BENCH_WORKLOADS(mod, fn)                                                                  \
    static const struct kl_bench_workloads kl_bench_workloads_##mod = {#mod, fn};                   \
    __attribute__((used, section("kl_bench_workloads"))) const struct kl_bench_workloads            \
        *kl_bench_workloads_ptr_##mod = &kl_bench_workloads_##mod
/* The i-th workload name of module m (its perf ops' or its registered list), NULL past the last. */
const char *kl_bench_workload(const struct kl_module *m, int i);

/* A line on stderr as each module, variant and workload starts, with the seconds since the
 * first: a long gated run is never silent. */
void kl_bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What one `kernlab bench` invocation asks of a module. */
struct kl_bench_args {
    const struct kl_module *module;
    const char *variant;  /* NULL: every variant this machine runs */
    const char *workload; /* NULL: every workload of the module; else names separated by commas */
    FILE *json;           /* results lines go here, or NULL */
    const char *json_path; /* the file json writes (the relation metrics read the run's rows back), or NULL */
    bool gate;            /* compare with perf/targets/<arch>.csv */
    bool counters;        /* collect CUPTI counters (GPU modules) */
    bool peers;           /* --peers: a module's own bench runs its peers itself (allreduce) */
    const struct kl_ceilings *ceil; /* measured ceilings; NULL when no GPU */
    const struct kl_targets *targets; /* the device's targets; NULL when not gating or no GPU */
    struct kl_gate_log *gate_log;     /* what the gate judged, missed and left ungated; NULL when not gating */
    int *failures;        /* incremented per row that failed its re-check or could not run */
    FILE *table;          /* human-readable table (stdout) */
    uint64_t seed;
};

/* Targets file perf/targets/<arch>.csv: module,workload,metric,target,source. A row whose metric
 * is `gated_variant` names, in its target column, the variant the gate judges for that module
 * (its workload column is `*`): the gated variant is chosen, never "the highest number". A module
 * whose gated variant cannot run some of its workloads (allreduce's plain switch and the fused
 * add + RMSNorm workloads) names another for them in a second row, the workload column a pattern. */
struct kl_target {
    char module[32], workload[64], metric[96];
    double target;
    char source[256];
};
struct kl_gated {
    char module[32], workload[64], variant[64]; /* workload: "*" or a pattern (kl_targets_for's) */
};
struct kl_targets {
    int count;
    struct kl_target *rows;
    int n_gated;
    struct kl_gated *gated;
    char path[512];
};
/* perf/targets/sm_80_a100.csv for cc 8.x, perf/targets/sm_90.csv for cc 9.x, perf/targets/cpu.csv
 * for cc 0 (modules whose work runs on the CPU: radix). */
int kl_targets_load(struct kl_targets *t, const char *dir, int cc, struct kl_err *err);
/* The variant the targets file names as module's gated one (its `*` row), or NULL when it names none. */
const char *kl_targets_gated(const struct kl_targets *t, const char *module);
/* The variant the gate judges on module's workload: the gated_variant row whose pattern matches it
 * (an exact name first), else the module's `*` row; NULL when neither exists. */
const char *kl_targets_gated_for(const struct kl_targets *t, const char *module, const char *workload);
/* The gated variant of module on a device of compute capability cc (0: the CPU), from
 * KL_SOURCE_DIR/perf/targets: NULL (err says why) when that architecture has no targets file, the
 * file names no variant for the module, or names one that is not registered. */
const struct kl_variant *kl_gated_variant(const char *module, int cc, struct kl_err *err);
/* The rows for (module, workload): those naming the workload exactly, then those whose pattern
 * matches (a row's workload may end in '*', a prefix: "8KB-world*") for a metric no exact row
 * names. A workload may have several rows, one per metric (a bandwidth and a time against the
 * peer): all must pass.
 * Returns how many, at most max, in rows[]. */
int kl_targets_for(const struct kl_targets *t, const char *module, const char *workload, const struct kl_target **rows,
                   int max);
#define KL_MAX_TARGETS_PER_WORKLOAD 4
/* The first of them, or NULL. */
const struct kl_target *kl_target_find(const struct kl_targets *t, const char *module, const char *workload);
/* Relation metrics, measured against other rows of the same run (perf/bench.c computes them):
 *   time_vs_peer        this row's median over the fastest peer row's (same module and workload)
 *   time_vs:<workload>  this row's median over the same variant's on <workload>
 *   time_vs:<workload>@<variant>  ... over <variant>'s on <workload> (an FP8 decode against the bf16
 *                       one: the other variant declines this row's workload)
 * kl_metric_relation_workload returns what follows "time_vs:" (<workload>, or <workload>@<variant>),
 * else NULL; kl_metric_relation_parts copies <workload> into buf and returns <variant> (NULL: the
 * row's own), or NULL with buf "" for any other metric. */
const char *kl_metric_relation_workload(const char *metric);
const char *kl_metric_relation_parts(const char *metric, char *buf, size_t len);
/* Adds to r->extra the relation metrics its run allows: time_vs_peer (with peer_time_us and
 * peer_fastest) when the results file at path holds a peer row of the same workload, and each
 * time_vs:<workload> a target row of t names for r's workload when the file holds the same
 * variant's row of <workload>. */
void kl_bench_relations(const char *path, const struct kl_targets *t, struct kl_result *r);
/* Metrics where smaller passes (latency_us, latency_vs_nccl, over_allreduce_us, time_vs_peer,
 * time_vs:*); the others pass at >= target. */
bool kl_metric_lower_is_better(const char *metric);
/* The metrics a targets row may name; kl_targets_load refuses any other. */
bool kl_metric_known(const char *metric);
void kl_targets_free(struct kl_targets *t);
/* Checks a loaded targets file against this binary's modules: every row's module is registered
 * and its workload (or pattern) matches one of the module's workloads, and every gated_variant
 * row names a registered variant. Returns the number of bad rows; err names the first. */
int kl_targets_check(const struct kl_targets *t, struct kl_err *err);

/* ---- the gate (perf/gate.c): what it judges and how, as functions of results alone ---- */

/* The value of metric in result r: bw_frac and tc_frac from r itself, latency_us its median
 * time, every other known metric (read_frac, copy_same_bytes_frac, floor_frac, latency_vs_nccl,
 * busbw_frac, memcmp_frac, over_allreduce_us) the number of that name among r's extra fields.
 * NaN when r has none. */
double kl_metric_value(const char *metric, const struct kl_result *r);
/* The variant a gated run judges in module: `asked` (--variant) when given, else the one the
 * targets name. NULL, with the reason in why, when the targets have no row for the module, name
 * no variant for it, or `asked` is the yardstick its metrics are measured against (allreduce's
 * v0_nccl: latency_vs_nccl and busbw_frac of NCCL against itself are 1 by construction). */
const char *kl_gate_variant(const struct kl_targets *t, const char *module, const char *asked, char *why,
                            size_t len);
/* The variant judged on one workload of a gated run whose kl_gate_variant gave `judged`: `judged`
 * when --variant asked for it (or nothing is judged), else the targets' choice for the workload
 * (kl_targets_gated_for: a fused family's workloads name their own). */
const char *kl_gate_variant_on(const struct kl_targets *t, const char *module, const char *judged, const char *asked,
                               const char *workload);
/* Judges r, a row of the judged variant, against t: sets r's gate fields (metric, target, value,
 * pass; or ungated when no row of t covers r's workload) and returns the target row, or NULL.
 * A row passes only when its output re-check passed and its value meets the target; a peer's row
 * (extra "peer": true) is never judged. */
const struct kl_target *kl_gate_judge(const struct kl_targets *t, struct kl_result *r);
/* The table's gate column for r: "pass bw_frac 0.951>=0.90", "MISS ...", "ungated" or "-",
 * followed by " throttled" for a throttled row. */
const char *kl_gate_cell(char *buf, size_t len, const struct kl_result *r);

/* What a gated run judged, for its closing lines. */
#define KL_GATE_MAX_UNGATED 128
struct kl_gate_log {
    int judged, missed, throttled, n_ungated;
    char ungated[KL_GATE_MAX_UNGATED][192]; /* "module workload (variant): no target row in FILE" */
};
/* Records row r after kl_gate_judge against t. Every target it missed is named on err at once,
 * with the re-check failure or the throttling that came with it. */
void kl_gate_record(struct kl_gate_log *log, const struct kl_targets *t, const struct kl_result *r, FILE *err);
/* A gated run's last lines on err: every ungated workload, then the verdict. Returns the exit
 * status the gate asks for: 0 when every judged row passed, KL_EXIT_TARGET_MISSED (args.h) when a
 * row missed, 1 when nothing was judged (a gate that judged nothing has passed nothing). */
int kl_gate_finish(const struct kl_gate_log *log, FILE *err);

/* Throttled: the SM clock fell by more than 5% between before and after, or the driver reports
 * a slowdown reason in after (power cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40,
 * power brake 0x80; perf/peers/clocks.py applies the same rule). why says which. False when
 * either reading is invalid (no NVML). */
#define KL_THROTTLE_REASONS 0xecull
bool kl_throttled(const struct kl_clocks *before, const struct kl_clocks *after, char *why, size_t len);
/* The clocks around a row's timing in its extra fields: sm_clock_mhz_before, sm_clock_mhz_after,
 * clock_event_reasons, and throttle_why when throttled. */
void kl_clocks_json(struct cJSON *extra, const struct kl_clocks *before, const struct kl_clocks *after);

/* The generic GPU bench of a module with perf ops (perf/bench.c). */
int kl_bench_module(const struct kl_bench_args *a);

/* `kernlab ceilings` and `kernlab bench` (perf/bench.c). */
extern const struct kl_command kl_ceilings_command;
extern const struct kl_command kl_bench_command;
int kl_cmd_ceilings(int argc, char **argv);
int kl_cmd_bench(int argc, char **argv);
/* Whether the run takes this workload: a->workload is NULL or names it in its comma list. */
bool kl_bench_wants(const struct kl_bench_args *a, const char *workload);
/* The first name of the comma list that is none of names[0..n) (an empty name counts), or NULL:
 * a module's own bench refuses it as the generic one does. */
#define KL_BENCH_MAX_WORKLOADS 64
const char *kl_bench_unknown_workload(const char *list, const char *const *names, int n);

#ifdef __cplusplus
}
#endif
#endif
