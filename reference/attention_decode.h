#ifndef KL_REFERENCE_ATTENTION_DECODE_H
#define KL_REFERENCE_ATTENTION_DECODE_H
#include <stdint.h>
/* Paged decode attention in float64 (kernels/attention_decode/attention_decode.h has the
 * semantics): q [batch, qo_heads, head_dim], caches [num_pages, page_size, kv_heads, head_dim]
 * -> out [batch, qo_heads, head_dim], lse [batch, qo_heads] (natural log, -inf for kv_len 0).
 * The page table must be valid (the module checks it first). */
void kl_attention_decode_reference(const double *q, const double *k_cache, const double *v_cache,
                                   const int32_t *kv_indptr, const int32_t *kv_indices,
                                   const int32_t *kv_last_page_len, int64_t batch, int64_t qo_heads,
                                   int64_t kv_heads, int64_t head_dim, int64_t page_size, double sm_scale,
                                   double *out, double *lse);
#endif
