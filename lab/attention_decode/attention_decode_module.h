/* What the attention_decode module shares with its tests and perf workloads. */
#ifndef KL_ATTENTION_DECODE_MODULE_H
#define KL_ATTENTION_DECODE_MODULE_H

#include <stdbool.h>

#include "kernels/attention_decode/attention_decode.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"

/* Cache rows no request attends hold this value (goldens and random problems alike), so a kernel
 * that reads past a request's last token, or a wrong page, gets a visibly wrong answer. */
#define KL_DECODE_POISON 1000.0

struct kl_attention_decode_problem {
    int64_t batch, num_qo_heads, num_kv_heads, head_dim, page_size, num_pages, max_kv_len;
    double sm_scale;
    enum kl_dtype dtype;
    struct kl_tensor q;                                      /* host, [batch, qo_heads, head_dim] in dtype */
    struct kl_tensor k_cache, v_cache;                       /* host, [pages, page_size, kv_heads, head_dim] */
    struct kl_tensor kv_indptr, kv_indices, kv_last_page_len; /* host, KL_I32 */
    double logit_bound, v_abs_max;                           /* what the tolerance needs (compare.h) */
};

/* A random problem: kv_lens[b] tokens for request b in scattered pages (a shuffled pool with
 * spare pages), q and the attended K/V rows N(0,1) (q times q_scale), every other row poison. */
struct kl_attention_decode_problem *kl_attention_decode_problem_random(int64_t batch, int64_t num_qo_heads,
                                                                       int64_t num_kv_heads, int64_t head_dim,
                                                                       int64_t page_size, const int64_t *kv_lens,
                                                                       enum kl_dtype dtype, double q_scale,
                                                                       uint64_t seed);
void kl_attention_decode_problem_free(struct kl_attention_decode_problem *p);
/* 0, or a message naming `what` and the array at fault: kv_indptr must start at 0, never
 * decrease and end at the number of indices; indices must be < num_pages; kv_last_page_len must
 * be 1..page_size for a request with pages and 0 for one without. Sets max_kv_len. */
int kl_attention_decode_check_table(struct kl_attention_decode_problem *p, const char *what, struct kl_err *err);
/* logit_bound and v_abs_max over the attended rows. */
void kl_attention_decode_bounds(struct kl_attention_decode_problem *p);

/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_attention_decode_ops;
/* Runs the float64 reference: out and lse, policies set. */
int kl_attention_decode_run_reference(const struct kl_attention_decode_problem *p, struct kl_outputs *o,
                                      struct kl_err *err);

extern const struct kl_perf_ops kl_attention_decode_perf;

#endif
