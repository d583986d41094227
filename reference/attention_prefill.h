#ifndef KL_REFERENCE_ATTENTION_PREFILL_H
#define KL_REFERENCE_ATTENTION_PREFILL_H
#include <stdbool.h>
#include <stdint.h>

/* The shape of one prefill-attention problem, with its index arrays on the host (int32, the
 * layout of kernels/attention_prefill/attention_prefill.h). The caller has validated them:
 * indptrs non-decreasing, page numbers inside the cache, kv_len >= q_len. */
struct kl_attention_prefill_shape {
    int64_t batch, total_q, num_qo_heads, num_kv_heads, head_dim, page_size, num_pages;
    const int32_t *qo_indptr;        /* [batch + 1] */
    const int32_t *kv_indptr;        /* [batch + 1] */
    const int32_t *kv_indices;       /* [kv_indptr[batch]] */
    const int32_t *kv_last_page_len; /* [batch] */
    double sm_scale;
    bool causal;
};

/* Keys of request b: (pages - 1) * page_size + last_page_len, 0 without pages. */
int64_t kl_attention_prefill_kv_len(const struct kl_attention_prefill_shape *s, int64_t b);
/* How many keys query i (0-based in a request of q_len queries over kv_len keys) sees. */
int64_t kl_attention_prefill_visible(bool causal, int64_t q_len, int64_t kv_len, int64_t i);

/* q [total_q, qo_heads, d]; k_cache, v_cache [num_pages, page_size, kv_heads, d] -> out [total_q,
 * qo_heads, d], lse [total_q, qo_heads] (natural log; -inf and out 0 for a row that sees no key).
 * float64 throughout, the two products through OpenBLAS dgemm per (request, kv head) and block of
 * queries. Returns 0, or -1 when its scratch cannot be allocated. */
int kl_attention_prefill_reference(const struct kl_attention_prefill_shape *s, const double *q, const double *k_cache,
                                   const double *v_cache, double *out, double *lse);

/* The same function for chosen rows only, with plain loops (no BLAS): row r of `rows` is
 * token * num_qo_heads + head; its head_dim outputs go to out[r * head_dim ..], its lse to lse[r].
 * An independent second implementation (the tests compare the two), and cheap enough to re-check a
 * sample of an 8k-token problem. */
void kl_attention_prefill_reference_rows(const struct kl_attention_prefill_shape *s, const double *q,
                                         const double *k_cache, const double *v_cache, const int64_t *rows, int64_t n,
                                         double *out, double *lse);
#endif
