/* The story document (lab/story/story.h gives its format) as the story's guide (story.c) and
 * trace (story_trace.c) read it: what they look up once, and the lookups both make. */
#ifndef KL_REPORT_STORY_DOC_H
#define KL_REPORT_STORY_DOC_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

/* What the report reads once. */
struct kl_story_doc {
    const cJSON *root, *ops, *kinds, *op_kind, *kernels, *profiles, *phases;
    int n_ops, n_kinds, layers;
    double copy_gbs; /* the device's measured copy bandwidth, NAN when the results have none */
    const char *copy_from; /* where copy_gbs comes from, in words ("the `store` results of the story's commit") */
};

/* element i of a number array, or NAN */
double kl_sd_at(const cJSON *arr, int i);
const cJSON *kl_sd_phase(const struct kl_story_doc *d, const char *name);
const char *kl_sd_op_name(const struct kl_story_doc *d, int op);
int kl_sd_op_kind(const struct kl_story_doc *d, int op);
int kl_sd_op_index(const struct kl_story_doc *d, const char *name);
/* The profile that describes an op of a phase: control runs prefill's shapes, the graph decode's. */
const cJSON *kl_sd_profile(const struct kl_story_doc *d, const char *ph, int op);
double kl_sd_counter(const struct kl_story_doc *d, const char *ph, int op, const char *name);
/* kernel k's short name: "void kl::foo_v2<...>(...)" -> "foo_v2" */
const char *kl_sd_kernel_name(const struct kl_story_doc *d, int k, char *buf, size_t len);
/* An op's profiled instance: its DRAM traffic in GB/s, and as a percent of the copy bandwidth. */
double kl_sd_dram_gbs(const struct kl_story_doc *d, const char *ph, int op);
double kl_sd_dram_pct(const struct kl_story_doc *d, const char *ph, int op);

/* One op's kernels in a detail entry [op, layer, [[kernel, start, dur, ...], ...]]. */
struct kl_sd_span {
    double t0, t1, us; /* first start, last end, sum of kernel time */
    int kernels;
};
struct kl_sd_span kl_sd_op_span(const cJSON *e);

int kl_sd_write_md(const struct kl_story_doc *d, const char *path);
/* story.md's FP8 KV cache section: the decode step beside a --kv fp8 run's, or "not measured"
 * (story_fp8.c). */
void kl_sd_section_fp8(FILE *f, const struct kl_story_doc *d);
int kl_sd_write_trace(const struct kl_story_doc *d, const char *path);

#endif
