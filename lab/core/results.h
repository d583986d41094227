/* Results: one JSON object per line (lab/CONTRACTS.md section 7, a CONTRACT). Written by
 * `kernlab bench`, read by `kernlab report`.
 *
 * {"module","variant","workload","params":{},"device":{"name","cc","sms","l2_bytes","copy_gbs",
 *  "gemm_tflops"},"time_us":{"min","median","max"},"bytes","flops","gbs","bw_frac","tflops",
 *  "tc_frac","counters":{...},"check":{"rel_l2","max_abs","pass"},"gate":{"metric","target",
 *  "pass"},"throttled":false,"commit","date"}
 * Modules may add fields of their own (radix: "memcmp_frac", "ns_per_match", ...) through
 * `extra`; readers ignore keys they do not know. */
#ifndef KL_RESULTS_H
#define KL_RESULTS_H

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

struct kl_device_info {
    char name[256]; /* "NVIDIA H100 80GB HBM3", or the CPU model for CPU modules */
    int cc;         /* 90; 0 for a CPU */
    int sms;
    long long l2_bytes;
    double copy_gbs;    /* measured ceilings of this run (0 when not measured) */
    double gemm_tflops;
    double read_gbs;    /* the streaming-read ceiling (0 when not measured; written only when measured) */
};

struct kl_result {
    const char *module, *variant, *workload;
    struct cJSON *params;   /* workload params (owned by the caller; may be NULL) */
    struct kl_device_info device;
    double time_us_min, time_us_median, time_us_max;
    double bytes, flops;    /* the workload's model: fewest bytes / FLOPs a correct kernel needs */
    double gbs, bw_frac, tflops, tc_frac;
    struct cJSON *counters; /* may be NULL: written as {} */
    bool checked;           /* check.* present only when the output was re-checked */
    double rel_l2, max_abs;
    bool check_pass;
    const char *gate_metric; /* NULL: not judged, written as "gate": null (or ungated, below) */
    double gate_target;
    double gate_value;       /* the metric's value judged: "gate": {..., "value"} */
    bool gate_pass;
    bool gate_ungated;       /* judged variant, no target row: "gate": {"metric": null, "target": null,
                              * "pass": null, "ungated": true} */
    bool throttled;
    const char *commit, *date;
    struct cJSON *extra;    /* module fields merged at top level (may be NULL) */
};

/* Writes one line; returns 0 or -1 on a write error. */
int kl_result_write(FILE *f, const struct kl_result *r);
/* The build's git commit (configure time, "unknown" outside git) and today's UTC date. */
const char *kl_build_commit(void);
const char *kl_today(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
