/* Decode attention over a paged KV cache (attention_decode): the C ABI every variant implements.
 *
 * One new query token per request b. Its keys and values live in pages of page_size tokens:
 * request b owns pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]-1] (in token order), all full
 * but the last, which holds kv_last_page_len[b] tokens (FlashInfer's CSR layout). So
 *   kv_len(b) = (pages - 1) * page_size + kv_last_page_len[b]     (0 when b has no pages)
 *   token t of b = page kv_indices[kv_indptr[b] + t / page_size], row t % page_size
 * GQA: qo head h reads kv head h / (num_qo_heads / num_kv_heads). For each (b, h):
 *   s_t   = sm_scale * q[b, h, :] . k[t, kv_head(h), :]
 *   out   = sum_t softmax(s)_t * v[t, kv_head(h), :]          lse = log(sum_t exp(s_t))
 * A request with kv_len 0 has out = 0 and lse = -inf. Variants compute in float32 (scores,
 * softmax, accumulation); fast ones round the probabilities to the input dtype before P.V, as
 * every fast attention kernel does (lab/core/compare.c holds the tolerance this implies). */
#ifndef KL_KERNELS_ATTENTION_DECODE_H
#define KL_KERNELS_ATTENTION_DECODE_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_attention_decode_params {
    const void *q;                    /* [batch, num_qo_heads, head_dim] */
    const void *k_cache;              /* [num_pages, page_size, num_kv_heads, head_dim] */
    const void *v_cache;              /* [num_pages, page_size, num_kv_heads, head_dim] */
    const int32_t *kv_indptr;         /* [batch + 1], non-decreasing, kv_indptr[0] = 0 */
    const int32_t *kv_indices;        /* [kv_indptr[batch]]: page numbers < num_pages */
    const int32_t *kv_last_page_len;  /* [batch]: 1..page_size for a request with pages */
    void *out;                        /* [batch, num_qo_heads, head_dim] */
    float *lse;                       /* [batch, num_qo_heads]: natural log; -inf when kv_len is 0 */
    int64_t batch;
    int64_t num_qo_heads;             /* a multiple of num_kv_heads */
    int64_t num_kv_heads;
    int64_t head_dim;                 /* 64, 128 or 256 (v0-v2: any multiple of 8 up to 256) */
    int64_t page_size;
    int64_t num_pages;
    int64_t max_kv_len;               /* host-side bound on every kv_len: sizes split-KV grids */
    float sm_scale;
    enum kl_dtype dtype;              /* q, both caches and out: KL_F32, KL_F16 or KL_BF16 */
    void *workspace;                  /* split-KV partials and merge counters, zeroed once */
    size_t workspace_bytes;           /* kl_attention_decode_workspace_bytes() */
};

typedef cudaError_t (*kl_attention_decode_launch_fn)(const struct kl_attention_decode_params *p,
                                                     cudaStream_t stream);

/* Shape and pointer checks every launcher starts with: cudaErrorInvalidValue with the argument
 * at fault printed to stderr, or cudaSuccess. A variant that does not handle this dtype or
 * head_dim returns cudaErrorNotSupported (the checkers report a SKIP, not a FAIL). */
cudaError_t kl_attention_decode_check_params(const struct kl_attention_decode_params *p, const char *variant);

/* How split-KV variants cut the keys: every request's keys in chunks of `chunk` tokens (a
 * multiple of `granule`), so request b runs ceil(kv_len(b) / chunk) blocks per kv head, at most
 * `splits`. Chosen from the shape alone (the host knows max_kv_len, not each kv_len): about
 * blocks_per_sm x sms blocks, chunks kept within [min_chunk, max_chunk] tokens (short chunks
 * make the merge large next to the keys read; long ones leave a long tail on a ragged batch),
 * and never more than KL_DECODE_MAX_SPLITS splits. min_chunk must be >= KL_DECODE_MIN_CHUNK. */
#define KL_DECODE_MAX_SPLITS 256
#define KL_DECODE_MIN_CHUNK 64
struct kl_decode_split {
    int64_t chunk;
    int splits;
};
struct kl_decode_split kl_attention_decode_split(const struct kl_attention_decode_params *p, int sms,
                                                 int blocks_per_sm, int64_t granule, int64_t min_chunk,
                                                 int64_t max_chunk);

/* Workspace for any split plan of this shape (the `sms` argument is kept for plans that depend
 * on the device): per (request, qo head, split) a partial output of head_dim floats plus its
 * max and sum, and one merge counter per (request, kv head, head block). Zero it once; kernels
 * leave it zeroed. */
size_t kl_attention_decode_workspace_bytes(const struct kl_attention_decode_params *p, int sms);
/* The workspace a plan of `splits` needs (launchers check workspace_bytes against it). */
size_t kl_attention_decode_workspace_for(const struct kl_attention_decode_params *p, int splits);

/* The multiprocessor count of the current device, read once per process (launchers run on
 * every decode step and must not query it each time). */
int kl_attention_decode_sms(void);

#ifdef __cplusplus
}
#endif
#endif
