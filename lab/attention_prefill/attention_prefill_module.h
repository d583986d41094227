/* What the attention_prefill module shares with its tests and perf workloads. */
#ifndef KL_ATTENTION_PREFILL_MODULE_H
#define KL_ATTENTION_PREFILL_MODULE_H

#include <stdbool.h>

#include "kernels/attention_prefill/attention_prefill.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"
#include "reference/attention_prefill.h"

/* Device scratch every run hands to the variants (params.workspace), zeroed. */
#define KL_ATTENTION_PREFILL_WORKSPACE_BYTES (64 << 10)

struct kl_attention_prefill_problem {
    struct kl_attention_prefill_shape shape; /* index pointers point into the tensors below */
    enum kl_dtype dtype;
    struct kl_tensor q;                  /* [total_q, qo_heads, head_dim], dtype */
    struct kl_tensor k_cache, v_cache;   /* [num_pages, page_size, kv_heads, head_dim], dtype */
    struct kl_tensor qo_indptr, kv_indptr, kv_indices, kv_last_page_len; /* KL_I32 */
    int64_t max_q_len, max_kv_len;
};

/* A problem to draw: request b has q_lens[b] queries over kv_lens[b] keys (kv_len >= q_len).
 * Pages are handed out in a random order from a cache with `spare_pages` more than needed (a
 * fragmented cache); K and V are N(0, 1), q is N(0, q_scale^2): a large q_scale makes logits whose
 * exp overflows without the max subtracted. */
struct kl_attention_prefill_spec {
    int64_t batch;
    const int64_t *q_lens, *kv_lens;
    int64_t num_qo_heads, num_kv_heads, head_dim, page_size, spare_pages;
    bool causal;
    enum kl_dtype dtype;
    double q_scale;
};
struct kl_attention_prefill_problem *kl_attention_prefill_problem_random(const struct kl_attention_prefill_spec *s,
                                                                         uint64_t seed);
void kl_attention_prefill_problem_free(struct kl_attention_prefill_problem *p);
/* Checks indptrs, page numbers, last-page lengths and kv_len >= q_len; `what` names the source
 * (a file) in the message. Fills max_q_len / max_kv_len. */
int kl_attention_prefill_validate(struct kl_attention_prefill_problem *p, const char *what, struct kl_err *err);

/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_attention_prefill_ops;
/* The outputs (out, lse) with the attention policies of lab/core/compare.c for this problem. */
void kl_attention_prefill_set_outputs(const struct kl_attention_prefill_problem *p, struct kl_outputs *o);
/* The float64 reference of the whole problem into o (kl_attention_prefill_set_outputs' layout). */
int kl_attention_prefill_expected(const struct kl_attention_prefill_problem *p, struct kl_outputs *o,
                                  struct kl_err *err);
/* Unmasked (query, key) pairs summed over requests, for one head: the FLOP model's count. */
double kl_attention_prefill_pairs(const struct kl_attention_prefill_problem *p);

extern const struct kl_perf_ops kl_attention_prefill_perf;
/* Its compute-bound story and table in the guide (lab/attention_prefill/guide.c). */
extern const struct kl_guide_hooks kl_attention_prefill_guide;

#endif
