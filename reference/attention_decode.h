#ifndef KL_REFERENCE_ATTENTION_DECODE_H
#define KL_REFERENCE_ATTENTION_DECODE_H
#include <stdint.h>
/* Paged decode attention in float64 (kernels/attention_decode/attention_decode.h has the
 * semantics): q [batch, qo_heads, head_dim], caches [num_pages, page_size, kv_heads, head_dim]
 * -> out [batch, qo_heads, head_dim], lse [batch, qo_heads] (natural log, -inf for kv_len 0).
 * The page table must be valid (the module checks it first). One query row per request. */
void kl_attention_decode_reference(const double *q, const double *k_cache, const double *v_cache,
                                   const int32_t *kv_indptr, const int32_t *kv_indices,
                                   const int32_t *kv_last_page_len, int64_t batch, int64_t qo_heads,
                                   int64_t kv_heads, int64_t head_dim, int64_t page_size, double sm_scale,
                                   double *out, double *lse);
/* The same with several query tokens per request: request b's queries are rows qo_indptr[b] ..
 * qo_indptr[b+1] - 1 of q [rows, qo_heads, head_dim], out and lse, and query i of q_len sees keys
 * t < kv_len - q_len + 1 + i (q_len <= kv_len). qo_indptr NULL: row b is request b's one query. */
void kl_attention_decode_reference_multi(const double *q, const double *k_cache, const double *v_cache,
                                         const int32_t *qo_indptr, const int32_t *kv_indptr,
                                         const int32_t *kv_indices, const int32_t *kv_last_page_len, int64_t batch,
                                         int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t page_size,
                                         double sm_scale, double *out, double *lse);
/* The same on an FP8 cache (one query row per request): k_codes, v_codes [num_pages, page_size,
 * kv_heads, head_dim] hold E4M3 codes (kernels/dtype.h) whose value is the code's times its kv
 * head's scale: k = e4m3(code) * k_scale[g], v = e4m3(code) * v_scale[g], exactly, in float64. */
void kl_attention_decode_reference_fp8(const double *q, const uint8_t *k_codes, const uint8_t *v_codes,
                                       const float *k_scale, const float *v_scale, int64_t num_pages,
                                       const int32_t *kv_indptr, const int32_t *kv_indices,
                                       const int32_t *kv_last_page_len, int64_t batch, int64_t qo_heads,
                                       int64_t kv_heads, int64_t head_dim, int64_t page_size, double sm_scale,
                                       double *out, double *lse);
#endif
