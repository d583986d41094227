/* `kernlab bench`: workloads, timing, ceilings, counters, roofline and the gate
 * (DESIGN.md section 6). A module describes its workloads with kl_perf_ops; perf/bench.c
 * does the rest the same way for every module. */
#ifndef KL_BENCH_H
#define KL_BENCH_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lab/core/check.h"
#include "lab/core/registry.h"
#include "lab/core/results.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* ---- ceilings, measured at the start of a run (perf/ceilings.cu) ---- */
struct kl_ceilings {
    struct kl_device_info dev; /* name, cc, sms, l2, copy_gbs, gemm_tflops */
    double copy_bytes;         /* size of the copy measured (read + write) */
    int copy_shape;            /* which copy kernel shape was fastest (perf/ceilings.cu) */
    double read_gbs;           /* a pure streaming read: the bound of read-dominated kernels (decode) */
    double read_bytes;         /* size of the read measured */
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
struct kl_timing {
    double min_us, median_us, max_us;
    int reps;
    bool graph; /* per-launch time from graph replays (small workloads) */
};
/* Times launch over `reps` repetitions, rotating over `sets` input sets, after a warm-up.
 * use_graph: captures `per_graph` launches in a CUDA graph and times replays, reporting the
 * time per launch; otherwise events around every single launch. */
int kl_time(kl_launch_set_fn launch, void *ctx, int sets, int reps, bool use_graph, struct kl_timing *t,
            struct kl_err *err);
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
    /* Re-checks the output of set 0 (left by the last timed launch of it) against the reference. */
    int (*check)(const struct kl_variant *v, void *state, struct kl_cmp *out, struct kl_err *err);
    void (*teardown)(void *state);
    struct cJSON *(*params)(const struct kl_workload *w);
    /* Optional: module fields for the results line (top level), added after the re-check
     * (attention_prefill: "recheck", whether the whole output or a sample of rows was checked). */
    void (*extra)(void *state, struct cJSON *extra);
};

/* What one `kernlab bench` invocation asks of a module. */
struct kl_bench_args {
    const struct kl_module *module;
    const char *variant;  /* NULL: every variant this machine runs */
    const char *workload; /* NULL: every workload of the module */
    FILE *json;           /* results lines go here, or NULL */
    bool gate;            /* compare with perf/targets/<arch>.csv */
    bool counters;        /* collect CUPTI counters (GPU modules) */
    bool peers;           /* --peers: a module's own bench runs its peers itself (allreduce) */
    const struct kl_ceilings *ceil; /* measured ceilings; NULL when no GPU */
    const struct kl_targets *targets; /* NULL when not gating */
    int *gate_misses;     /* incremented, with a line on stderr, per missed target */
    int *failures;        /* incremented per row that failed its re-check or could not run */
    FILE *table;          /* human-readable table (stdout) */
    uint64_t seed;
};

/* Targets file perf/targets/<arch>.csv: module,workload,metric,target,source. A row whose metric
 * is `gated_variant` names, in its target column, the variant the gate judges for that module
 * (its workload column is `*`): the gated variant is chosen, never "the highest number". */
struct kl_target {
    char module[32], workload[64], metric[32];
    double target;
    char source[256];
};
struct kl_gated {
    char module[32], variant[64];
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
/* The variant the targets file names as module's gated one, or NULL when it names none. */
const char *kl_targets_gated(const struct kl_targets *t, const char *module);
/* The gated variant of module on a device of compute capability cc (0: the CPU), from
 * KL_SOURCE_DIR/perf/targets: NULL (err says why) when that architecture has no targets file, the
 * file names no variant for the module, or names one that is not registered. */
const struct kl_variant *kl_gated_variant(const char *module, int cc, struct kl_err *err);
/* The row for (module, workload); a row's workload may end in '*' (a prefix: "8KB-world*"). */
const struct kl_target *kl_target_find(const struct kl_targets *t, const char *module, const char *workload);
/* Metrics where smaller passes (latency_us, latency_vs_nccl); the others pass at >= target. */
bool kl_metric_lower_is_better(const char *metric);
void kl_targets_free(struct kl_targets *t);

/* The generic GPU bench of a module with perf ops (perf/bench.c). */
int kl_bench_module(const struct kl_bench_args *a);

#ifdef __cplusplus
}
#endif
#endif
