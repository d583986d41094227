/* `kernlab bench`: workloads, timing, ceilings, counters, roofline and the gate. */
#ifndef KL_BENCH_H
#define KL_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../lab/core/check.h"
#include "../lab/core/registry.h"
#include "../lab/core/results.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one `kernlab bench` invocation asks of a module. */
struct kl_bench_args {
    const struct kl_module *module;
    const char *variant;  /* NULL: every variant this machine runs */
    const char *workload; /* NULL: every workload of the module */
    FILE *json;           /* results lines go here, or NULL */
    bool gate;            /* compare with perf/targets/<arch>.csv */
    bool counters;        /* collect CUPTI counters (GPU modules) */
    const struct kl_device_info *device; /* GPU + measured ceilings; NULL when no GPU */
    const struct kl_targets *targets;    /* NULL when not gating */
    int *gate_misses;     /* incremented, with a line on stderr, per missed target */
    FILE *table;          /* human-readable table (stdout) */
};

/* Targets file perf/targets/<arch>.csv: module,workload,metric,target,source. */
struct kl_target {
    char module[32], workload[64], metric[32];
    double target;
    char source[256];
};
struct kl_targets {
    int count;
    struct kl_target *rows;
    char path[512];
};
const struct kl_target *kl_target_find(const struct kl_targets *t, const char *module,
                                       const char *workload);

#ifdef __cplusplus
}
#endif
#endif
