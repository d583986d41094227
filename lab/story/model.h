/* The story's decoder on the GPU: weights, buffers, and one forward pass made of "ops".
 *
 * An op is one step of the forward pass as the timeline names it (embed, rms_norm, qkv_gemm, ...)
 * with everything needed to launch it again: the registry variant or cuBLAS call and a copy of its
 * parameters. The forward pass hands each op to a hook before and after launching it (the
 * timeline stamps host times there and keeps the first op of each kind for the profiler, which
 * replays it alone later), so the model knows nothing of CUPTI. */
#ifndef KL_STORY_MODEL_H
#define KL_STORY_MODEL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/attention_decode/attention_decode.h"
#include "kernels/attention_prefill/attention_prefill.h"
#include "kernels/index/index.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/store/store.h"
#include "lab/core/check.h"
#include "lab/core/registry.h"
#include "lab/story/story.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The steps of a forward pass, in order. add_rms_norm is the fused residual add + RMSNorm: after
 * attention, at the start of every layer but the first (adding the previous layer's MLP output,
 * so no separate residual-add kernel is needed), and as the final norm (layer -1). */
enum kl_story_op_name {
    KL_OP_EMBED,
    KL_OP_RMS_NORM,
    KL_OP_QKV_GEMM,
    KL_OP_ROPE,
    KL_OP_KV_STORE,
    KL_OP_ATTENTION,
    KL_OP_O_GEMM,
    KL_OP_ADD_RMS_NORM,
    KL_OP_GATE_UP_GEMM,
    KL_OP_SILU_MUL,
    KL_OP_DOWN_GEMM,
    KL_OP_LM_HEAD,
    KL_OP_ARGMAX,
    KL_OP_COUNT
};
extern const char *const kl_story_op_names[KL_OP_COUNT];

/* What kind of work an op is, for the per-phase shares. */
enum kl_story_kind {
    KL_KIND_EMBED,
    KL_KIND_NORM,
    KL_KIND_GEMM,
    KL_KIND_ROPE,
    KL_KIND_KV_STORE,
    KL_KIND_ATTENTION,
    KL_KIND_ACTIVATION,
    KL_KIND_SAMPLING,
    KL_KIND_COUNT
};
extern const char *const kl_story_kind_names[KL_KIND_COUNT];
extern const int kl_story_op_kind[KL_OP_COUNT];

/* y[batch][m, n] = x[m, k] W[batch][n, k]^T: row-major activations times a PyTorch-layout weight
 * (cuBLAS's column-major "TN" GEMM), bf16 in, float32 accumulation, bf16 or float32 out. */
struct kl_story_gemm {
    const void *w, *x;
    void *y;
    int64_t m, n, k;
    int batch;                  /* 1, or K and V as two matrices of one strided batch */
    int64_t stride_w, stride_y; /* elements between the batch's matrices */
    int64_t ldy;                /* elements between y's rows; 0: n (rows packed) */
    bool f32_out;
};

enum kl_story_launch {
    KL_LAUNCH_INDEX,
    KL_LAUNCH_RMSNORM,
    KL_LAUNCH_GEMM,
    KL_LAUNCH_ROPE,
    KL_LAUNCH_STORE,
    KL_LAUNCH_PREFILL,
    KL_LAUNCH_DECODE,
    KL_LAUNCH_SILU_MUL,
    KL_LAUNCH_ARGMAX
};

struct kl_story_op {
    enum kl_story_op_name name;
    int layer; /* -1 outside the layers */
    enum kl_story_launch how;
    union {
        struct kl_index_params index;
        struct kl_rmsnorm_params norm;
        struct {
            struct kl_story_gemm g[3];
            int count;
        } gemm;
        struct kl_rope_params rope;
        struct kl_store_params store;
        struct kl_attention_prefill_params prefill;
        struct kl_attention_decode_params decode;
        struct {
            const void *gu;
            void *out;
            int64_t n, mlp;
        } silu;
        struct {
            const float *logits;
            int64_t batch, vocab;
            int32_t *ids;
        } argmax;
    } u;
    double flops, bytes; /* the fewest a correct launch must do and move */
    char shape[96];      /* "2048 x 4096 -> 6144" */
};

/* One forward pass's metadata on the device, built by the scheduler before the pass (so the PDL
 * variants may read ids, positions and slots before their wait: the design note of kernels/common.cuh).
 * Either one request's prefill or extend (tokens = its new tokens, batch 1) or a decode step
 * (tokens = batch, one new token per request). */
struct kl_story_batch {
    bool decode;
    int64_t tokens, batch, max_q_len, max_kv_len;
    int32_t *ids;                   /* [tokens] */
    int64_t *positions, *slots;     /* [tokens] */
    int32_t *qo_indptr, *kv_indptr; /* [batch + 1] */
    int32_t *kv_indices;            /* [pages of the batch] */
    int32_t *kv_last_page_len;      /* [batch] */
};

struct kl_story_model {
    struct kl_story_config cfg;
    int64_t max_tokens, max_batch, kv_pages, max_pos, decode_kv_bound;
    /* the variants the forward pass uses: each module's latest for this device; with an FP8 cache,
     * decode is KL_STORY_FP8_DECODE and v_fused (KL_STORY_FP8_STORE) writes the cache */
    const struct kl_variant *v_index, *v_rmsnorm, *v_rope, *v_store, *v_prefill, *v_decode, *v_fused;
    cublasHandle_t blas;
    cudaStream_t stream;
    /* weights, bf16 */
    void *embed, *lm_head, *final_norm;
    struct kl_story_layer_weights {
        void *attn_norm, *wq, *wkv, *wo, *mlp_norm, *w_gate_up, *w_down; /* wkv: K's [kv_dim, hidden] then V's */
    } * layer;
    /* the paged KV cache: per layer [kv_pages, page_size, kv_heads, head_dim] */
    void **k_cache, **v_cache;
    /* kv_fp8 (`--kv fp8`): decode reads a second cache of e4m3 codes, per layer [kv_pages, page_size,
     * kv_heads, head_dim] bytes, with float32 scales kv_scale [layers][2][kv_heads] (K's, then V's;
     * kv_scale_host the same on the host, kl_story_kv_scales). Prefill and extend keep reading the
     * bf16 cache above (there is no FP8 prefill kernel): every pass writes both caches, the decode
     * steps the FP8 one only. qkv [max_tokens, (qo_heads + 2 kv_heads) head_dim] is the projection
     * in the fused store's one-row-per-token layout. */
    bool kv_fp8;
    void **k_fp8, **v_fp8;
    float *kv_scale, *kv_scale_host;
    void *qkv;
    float *cos_sin; /* [max_pos, head_dim] */
    /* activations, sized for max_tokens rows */
    void *x, *res[2], *hn, *q, *k, *v, *attn, *o, *gu, *act, *mo;
    float *lse, *logits; /* [max_tokens, qo_heads], [max_batch, vocab] */
    int32_t *next_ids;   /* [max_batch]: greedy tokens of the last pass */
    void *decode_ws, *prefill_ws, *blas_ws;
    size_t decode_ws_bytes, prefill_ws_bytes;
    double weights_bytes;
    /* called with begin = 1 before and 0 after each op's launch; NULL for none */
    void (*hook)(void *ctx, const struct kl_story_op *op, int begin);
    void *hook_ctx;
    bool dry; /* the tests: ops go to the hook, nothing is launched (no device needed) */
};

/* Allocates everything and generates the weights on the device. decode_kv_bound: the longest
 * kv_len any decode step will see (sizes the split-KV workspace; the same bound for eager and
 * graph replays, so both launch the same grids). Returns NULL with err. */
struct kl_story_model *kl_story_model_new(const struct kl_story_config *cfg, int64_t max_tokens, int64_t max_batch,
                                          int64_t kv_pages, int64_t max_pos, int64_t decode_kv_bound, uint64_t seed,
                                          bool kv_fp8, struct kl_err *err);

void kl_story_model_free(struct kl_story_model *m);

/* One forward pass on m->stream: logits of each request's last token into m->logits, their argmax
 * into m->next_ids. Returns the first launch error. */
cudaError_t kl_story_forward(struct kl_story_model *m, const struct kl_story_batch *b);
/* Launches one op on m->stream (the forward pass and the profiler's replays). */
cudaError_t kl_story_op_launch(struct kl_story_model *m, const struct kl_story_op *op);

/* The seeded half-widths the weights are drawn with (lab/story/weights.h). */
float kl_story_weight_half_width(const struct kl_story_config *cfg, int tensor);
float kl_story_weight_offset(int tensor);

#ifdef __cplusplus
}
#endif
#endif
