/* Prefill attention over a paged K/V cache (ragged batch, causal or not, GQA): the C ABI every
 * variant implements.
 *
 * Request b owns the query rows qo_indptr[b] .. qo_indptr[b+1]-1 (q_len of them) and the pages
 * kv_indices[kv_indptr[b] .. kv_indptr[b+1]-1]; its keys are those pages' slots in order, all
 * of them full but the last, which holds kv_last_page_len[b]:
 *   kv_len = (pages - 1) * page_size + kv_last_page_len[b]   (0 when it has no pages).
 * Key j of request b lives at k_cache[kv_indices[kv_indptr[b] + j / page_size], j % page_size].
 * The new tokens' K/V are already in the cache, so kv_len >= q_len. For query i (0-based within
 * its request) and qo head h, with g = num_qo_heads / num_kv_heads and kv head h / g:
 *   s_j  = sm_scale * q[i, h] . k[j, h / g]      for the keys query i sees:
 *          every j < kv_len, or with causal only j <= kv_len - q_len + i (bottom-right aligned)
 *   out[i, h] = sum_j softmax(s)_j v[j, h / g];  lse[i, h] = log(sum_j exp(s_j))  (natural log)
 * A row that sees no key (impossible when kv_len >= q_len, kept defined anyway) has out 0 and
 * lse -inf. A request with q_len 0 writes nothing.
 *
 * The launch is a pure function of these device arrays plus the host-side shape fields below, so
 * it can be captured in a CUDA graph. A Hopper variant (wgmma, TMA) builds its tensor maps in its
 * launcher from the same pointers and shapes, and a persistent scheduler takes its tile counter
 * from `workspace`. */
#ifndef KL_KERNELS_ATTENTION_PREFILL_H
#define KL_KERNELS_ATTENTION_PREFILL_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The life of one CTA of a warp-specialized variant (v8 and up), for the guide's execution story:
 * SM clock cycles (clock64) when each event happened, per key tile j < KL_PREFILL_TRACE_TILES of the
 * CTA's first work tile, for the producer and for each of the two consumer warpgroups (its first
 * thread). Recorded by CTA 0 only, when params.trace is set (a separate launch from the timed ones).
 * Variants that also trace the CTA's second work tile put its key tiles' events in the slots after the
 * first's (slot tiles + j), as far as the slots go, and set next_tiles: the guide then shows the boundary
 * between the two. */
#define KL_PREFILL_TRACE_TILES 128 /* a long causal work tile and the next one */
struct kl_prefill_trace {
    unsigned long long start;                             /* the CTA began */
    unsigned long long issued[KL_PREFILL_TRACE_TILES];    /* producer: tile j's K and V copies issued */
    unsigned long long k_ready[2][KL_PREFILL_TRACE_TILES]; /* consumer c: its wait for K_j returned */
    unsigned long long s_done[2][KL_PREFILL_TRACE_TILES];  /* S_j = Q K_j^T complete */
    unsigned long long softmax_done[2][KL_PREFILL_TRACE_TILES];
    unsigned long long pv_done[2][KL_PREFILL_TRACE_TILES]; /* O += P_j V_j complete */
    unsigned long long end[2];                             /* the warpgroup's rows stored */
    int tiles;                                             /* key tiles of the work tile (0: not traced) */
    int next_tiles;                                        /* key tiles of the second work tile (0: not traced) */
    unsigned long long next_begin[2];                      /* consumer c took the second work tile up (before its Q) */
    unsigned long long next_end[2];                        /* and stored its rows of it */
};

struct kl_attention_prefill_params {
    const void *q;                   /* [total_q, num_qo_heads, head_dim] */
    const void *k_cache;             /* [num_pages, page_size, num_kv_heads, head_dim] */
    const void *v_cache;             /* [num_pages, page_size, num_kv_heads, head_dim] */
    const int32_t *qo_indptr;        /* [batch + 1] device: 0 = qo_indptr[0] <= ... <= qo_indptr[batch] = total_q */
    const int32_t *kv_indptr;        /* [batch + 1] device: 0 = kv_indptr[0] <= ... (pages per request) */
    const int32_t *kv_indices;       /* [kv_indptr[batch]] device: page numbers in [0, num_pages), any order */
    const int32_t *kv_last_page_len; /* [batch] device: 1..page_size for a request with pages */
    void *out;                       /* [total_q, num_qo_heads, head_dim], dtype */
    float *lse;                      /* [total_q, num_qo_heads] float32, natural log */
    void *workspace;                 /* device scratch for variants that need it (may be NULL) */
    size_t workspace_bytes;
    int64_t batch;
    int64_t total_q;
    int64_t num_qo_heads;            /* a multiple of num_kv_heads */
    int64_t num_kv_heads;
    int64_t head_dim;
    int64_t page_size;
    int64_t num_pages;
    int64_t max_q_len;               /* host-side: the largest q_len of any request (sizes the grid, like
                                        FlashAttention's max_seqlen_q); queries past it are not computed */
    float sm_scale;                  /* > 0, usually 1 / sqrt(head_dim) (kernels take the max of raw logits) */
    bool causal;
    enum kl_dtype dtype;             /* q, k_cache, v_cache and out: KL_F32, KL_F16 or KL_BF16 */
    struct kl_prefill_trace *trace;  /* device, optional: NULL except for the bench's one traced launch */
};

typedef cudaError_t (*kl_attention_prefill_launch_fn)(const struct kl_attention_prefill_params *p,
                                                      cudaStream_t stream);

/* Shape and pointer checks every launcher starts with: cudaErrorInvalidValue, with the argument
 * at fault printed to stderr, or cudaSuccess. A variant that is correct but does not take a
 * dtype or head_dim (tensor-core variants: fp16/bf16 only) returns cudaErrorNotSupported
 * without printing; the module reports that problem as a SKIP for that variant. */
cudaError_t kl_attention_prefill_check_params(const struct kl_attention_prefill_params *p, const char *variant);

#ifdef __cplusplus
}
#endif
#endif
