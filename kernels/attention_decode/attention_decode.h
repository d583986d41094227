/* Decode attention over a paged KV cache (attention_decode): the C ABI every variant implements.
 *
 * Each request b brings q_len(b) new query tokens, already appended to its cache: one for plain
 * decode (qo_indptr NULL), several when a speculative draft of q_len tokens is verified at once.
 * Query rows are numbered across the batch: request b owns rows qo_indptr[b] .. qo_indptr[b+1]-1
 * (row b alone when qo_indptr is NULL), so q_len(b) = qo_indptr[b+1] - qo_indptr[b].
 * Its keys and values live in pages of page_size tokens: request b owns pages
 * kv_indices[kv_indptr[b] .. kv_indptr[b+1]-1] (in token order), all full but the last, which
 * holds kv_last_page_len[b] tokens (FlashInfer's CSR layout). So
 *   kv_len(b) = (pages - 1) * page_size + kv_last_page_len[b]     (0 when b has no pages)
 *   token t of b = page kv_indices[kv_indptr[b] + t / page_size], row t % page_size
 * The new tokens are the last q_len(b) of the kv_len(b) keys, and each sees the keys before it
 * and itself (causal, aligned to the end of the keys): query i (0-based) of request b sees keys
 *   t < n_i = kv_len(b) - q_len(b) + 1 + i        (n_i = kv_len(b) for q_len 1: every key)
 * GQA: qo head h reads kv head h / (num_qo_heads / num_kv_heads). For each query row r = the
 * i-th of request b, and each qo head h:
 *   s_t   = sm_scale * q[r, h, :] . k[t, kv_head(h), :]            for t < n_i
 *   out[r, h] = sum_{t < n_i} softmax(s)_t * v[t, kv_head(h), :]   lse[r, h] = log(sum_{t < n_i} exp(s_t))
 * q_len(b) <= kv_len(b), so a query row always sees at least one key; a request with kv_len 0
 * has no query rows when qo_indptr is set, and with qo_indptr NULL its row has out = 0 and
 * lse = -inf. Variants compute in float32 (scores, softmax, accumulation); fast ones round the
 * probabilities to the input dtype before P.V, as every fast attention kernel does
 * (lab/core/compare.c holds the tolerance this implies).
 * An FP8 cache (k_scale and v_scale set): both caches hold FP8 E4M3 codes (kernels/dtype.h, one
 * byte an element) with one float32 scale per kv head for each, and the same attention runs on
 * k[t, g, :] = e4m3(kcode[t, g, :]) * k_scale[g], v[t, g, :] = e4m3(vcode[t, g, :]) * v_scale[g]:
 *   s_t = sm_scale * k_scale[g] * q[r, h, :] . e4m3(kcode[t, g, :])
 *   out[r, h] = v_scale[g] * sum_{t < n_i} softmax(s)_t * e4m3(vcode[t, g, :])
 * with g = kv_head(h); q and out stay in dtype (bf16 or fp16).
 *
 * Several query tokens are an opt-in: kl_attention_decode_check_params, which every launcher
 * starts with, answers cudaErrorNotSupported when qo_indptr is set (a SKIP for the checkers,
 * never a wrong answer from a variant that reads row b as request b); a variant that handles
 * qo_indptr starts with kl_attention_decode_check_params_multi instead, and that call is its
 * declaration of support. An FP8 cache is an opt-in the same way: kl_attention_decode_check_params
 * answers cudaErrorNotSupported when k_scale is set (no variant reads codes as 16-bit values), and
 * a variant that reads e4m3 pages starts with kl_attention_decode_check_params_fp8. */
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
    const void *q;                    /* [rows, num_qo_heads, head_dim]: rows = qo_indptr[batch], or batch */
    const void *k_cache;              /* [num_pages, page_size, num_kv_heads, head_dim] */
    const void *v_cache;              /* [num_pages, page_size, num_kv_heads, head_dim] */
    const int32_t *kv_indptr;         /* [batch + 1], non-decreasing, kv_indptr[0] = 0 */
    const int32_t *kv_indices;        /* [kv_indptr[batch]]: page numbers < num_pages */
    const int32_t *kv_last_page_len;  /* [batch]: 1..page_size for a request with pages */
    void *out;                        /* [rows, num_qo_heads, head_dim] */
    float *lse;                       /* [rows, num_qo_heads]: natural log; -inf when kv_len is 0 */
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
    const int32_t *qo_indptr;         /* [batch + 1] or NULL (one query row per request): qo_indptr[0] = 0,
                                       * non-decreasing, q_len(b) <= kv_len(b) and <= max_q_len */
    int64_t max_q_len;                /* host-side bound on every q_len when qo_indptr is set (1..
                                       * KL_DECODE_MAX_Q_LEN): sizes grids and the workspace; unread when NULL */
    const float *k_scale;             /* [num_kv_heads] or NULL. Set (with v_scale): both caches hold e4m3
                                       * codes and a code's value is code * scale[kv head]; q and out stay in dtype */
    const float *v_scale;             /* [num_kv_heads]: set exactly when k_scale is */
    struct kl_decode_trace *trace;    /* NULL, or where a variant that records one writes its CTAs'
                                       * timeline (below); the others never read it */
};

/* The timeline of one launch, for `kernlab bench` (an untimed launch of its own): thread 0 of CTA c
 * (c = (blockIdx.z x gridDim.y + blockIdx.y) x gridDim.x + blockIdx.x, the first KL_DECODE_TRACE_CTAS)
 * writes %globaltimer (ns) at each event: its start, the end of its wait for the previous kernel (PDL),
 * the first K/V tile ready for its consumers, the end of its key loop, and its end (its merge done,
 * where it is the CTA that merges a split request). 0: not recorded (a CTA with no keys, or a variant
 * that records none). */
enum { KL_DECODE_TRACE_CTAS = 4096 };
enum kl_decode_event { KL_DECODE_START, KL_DECODE_RELEASED, KL_DECODE_FIRST_TILE, KL_DECODE_LOOP_DONE, KL_DECODE_END,
                       KL_DECODE_EVENTS };
struct kl_decode_trace {
    unsigned long long at[KL_DECODE_TRACE_CTAS][KL_DECODE_EVENTS];
};

typedef cudaError_t (*kl_attention_decode_launch_fn)(const struct kl_attention_decode_params *p,
                                                     cudaStream_t stream);

/* The most query tokens per request the ABI takes (draft lengths of speculative decoding). */
#define KL_DECODE_MAX_Q_LEN 8

/* Shape and pointer checks every launcher starts with: cudaErrorInvalidValue with the argument
 * at fault printed to stderr, or cudaSuccess. A variant that does not handle this dtype or
 * head_dim returns cudaErrorNotSupported (the checkers report a SKIP, not a FAIL); so does this
 * check when qo_indptr or k_scale is set. */
cudaError_t kl_attention_decode_check_params(const struct kl_attention_decode_params *p, const char *variant);
/* The same checks for a variant that handles several query tokens per request: with qo_indptr
 * set, max_q_len must be 1..KL_DECODE_MAX_Q_LEN (a bound, like max_kv_len). The launcher cannot read
 * qo_indptr itself (device memory, and the call must stay capturable in a CUDA graph); the host
 * that builds it checks it with kl_attention_decode_check_qo below. */
cudaError_t kl_attention_decode_check_params_multi(const struct kl_attention_decode_params *p, const char *variant);
/* The same checks for a variant that reads an FP8 cache: k_scale and v_scale both set (one
 * without the other: cudaErrorInvalidValue naming the one missing), dtype (q and out) bf16 or
 * fp16, one query token per request (qo_indptr set: cudaErrorNotSupported). Neither scale set,
 * the shape otherwise right: cudaErrorNotSupported (16-bit caches; the variant reads codes only). */
cudaError_t kl_attention_decode_check_params_fp8(const struct kl_attention_decode_params *p, const char *variant);
/* Host copies of qo_indptr [batch + 1] and the kv lengths [batch]: 0, or -1 with the argument at
 * fault and the request in why (qo_indptr[0] != 0, a decrease, q_len > kv_len, q_len > max_q_len). */
int kl_attention_decode_check_qo(const int32_t *qo_indptr, const int64_t *kv_len, int64_t batch, int64_t max_q_len,
                                 char *why, size_t len);
/* Query rows per request the grids and the workspace are sized for: max_q_len with qo_indptr
 * set, else 1. */
int64_t kl_attention_decode_q_rows(const struct kl_attention_decode_params *p);

/* v11_by_shape's rungs for a call on a GPU of `sms` SMs, in order of preference, NULL-terminated:
 * e4m3 caches (k_scale set) v27_fp8_tile_gatherers, v10_fp8_page_heads, then v7_fp8_f16_mma; draft
 * tokens (qo_indptr) v28_draft_tile_gatherers, then v4_tensor_cores; one query a request on pages of a multiple of 16
 * slots, where the (request, kv head) pairs are too few to fill three CTAs an SM, so the keys are split,
 * v13_cluster_merge when v8's plan splits a request 8 ways or fewer (one cluster), else v32_cluster_tail first, then
 * v8_tma_pages, then v4_tensor_cores; where the pairs fill the SMs v31_shrinking_items, then v8_tma_pages, then
 * v4_tensor_cores; other page sizes v32_cluster_tail, v19_one_gatherer, v12_cp_async_gather, then v4_tensor_cores.
 * From the params and the SM count alone, never the lengths on the device.
 */
const char *const *kl_attention_decode_by_shape(const struct kl_attention_decode_params *p, int sms);

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
/* The split that fills the SMs' CTA slots in whole waves: of the split counts with chunks of whole
 * 64-token multiples (at least KL_DECODE_MIN_CHUNK tokens, at most KL_DECODE_MAX_SPLITS chunks), the
 * one whose ctas_per_split x splits CTAs, `slots` at a time, finish in the fewest waves times work a
 * CTA; the fewer splits on a tie. A CTA's work is its chunk plus KL_DECODE_CTA_TOKENS, a charge for
 * its start (barriers, page lookups, the ring's first fill) and its partial, so that chunks of a few
 * tiles do not win on rounding alone. From the shape alone, as kl_attention_decode_split. */
#define KL_DECODE_CTA_TOKENS 64
struct kl_decode_split kl_attention_decode_split_waves(const struct kl_attention_decode_params *p,
                                                       int64_t ctas_per_split, int64_t slots);

/* Workspace for any split plan of this shape (the `sms` argument is kept for plans that depend
 * on the device): per (request, query slot < q_rows, qo head, split) a partial output of
 * head_dim floats plus its max and sum, one merge counter per (request, kv head, block of 8
 * of the group x q_rows rows), and after them KL_DECODE_SCHEDULER_WORDS words where a persistent
 * variant counts the work items its CTAs have taken. Zero it once: kernels leave the counters and
 * those words at zero (the partials hold what the last launch wrote). */
#define KL_DECODE_SCHEDULER_WORDS 2
size_t kl_attention_decode_workspace_bytes(const struct kl_attention_decode_params *p, int sms);
/* The workspace a plan of `splits` needs (launchers check workspace_bytes against it). */
size_t kl_attention_decode_workspace_for(const struct kl_attention_decode_params *p, int splits);

/* The multiprocessor count of the current device, read once per process (launchers run on
 * every decode step and must not query it each time). */
int kl_attention_decode_sms(void);

/* A launcher's plan knob: the environment variable `name` where it holds a whole number within [lo, hi],
 * else `fallback` (unset, empty, not a number or out of range). */
int kl_attention_decode_knob(const char *name, int lo, int hi, int fallback);

#ifdef __cplusplus
}
#endif
#endif
