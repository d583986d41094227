/* The story's decoder on the GPU (model.h). A forward pass, as SGLang and mini-sglang run a Llama:
 *
 *   embed (index)                          ids -> x
 *   layer l:  rms_norm (l = 0) or add_rms_norm (mlp_out + residual)   -> hn, residual
 *             qkv_gemm    hn -> q [T, 32, 128], k, v [T, 8, 128]
 *             rope        q, k rotated in place at their positions
 *             kv_store    k, v -> the paged cache at the batch's slots
 *             attention   prefill/extend (attention_prefill) or decode (attention_decode) -> attn
 *             o_gemm      attn -> o
 *             add_rms_norm  o + residual -> hn, residual
 *             gate_up_gemm  hn -> [gate | up]      silu_mul -> act      down_gemm -> mlp_out
 *   add_rms_norm (final), lm_head (last token of each request, float32 logits), argmax
 *
 * The residual stream is never added on its own: each add_rms_norm adds the previous block's output
 * and writes the sum (the new residual) beside the normalised rows, alternating between two buffers
 * so no kernel reads what it writes. The q/k/v projection is two cuBLAS calls, Q and then K and V
 * as a strided batch of two: the lab's rope, store and attention take q, k and v as contiguous
 * tensors, where engines write one [T, 6144] GEMM output and pass strided views. */
#include "lab/story/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/story/kernels.h"
#include "lab/story/weights.h"
#include "perf/bench.h"
#include "reference/rope.h"
#include "reference/story.h"

const struct kl_story_config kl_story_llama8b = {.name = "Llama-3.1-8B-shaped",
                                                 .layers = 32,
                                                 .hidden = 4096,
                                                 .qo_heads = 32,
                                                 .kv_heads = 8,
                                                 .head_dim = 128,
                                                 .mlp = 14336,
                                                 .vocab = 128256,
                                                 .rope_theta = 500000,
                                                 .eps = 1e-5f};
const struct kl_story_config kl_story_tiny = {.name = "tiny",
                                              .layers = 2,
                                              .hidden = 256,
                                              .qo_heads = 4,
                                              .kv_heads = 2,
                                              .head_dim = 64,
                                              .mlp = 512,
                                              .vocab = 512,
                                              .rope_theta = 10000,
                                              .eps = 1e-5f};

const char *const kl_story_op_names[KL_OP_COUNT] = {"embed",     "rms_norm", "qkv_gemm",     "rope",         "kv_store",
                                                    "attention", "o_gemm",   "add_rms_norm", "gate_up_gemm", "silu_mul",
                                                    "down_gemm", "lm_head",  "argmax"};
const char *const kl_story_kind_names[KL_KIND_COUNT] = {"embed",    "norm",      "gemm",       "rope",
                                                        "kv_store", "attention", "activation", "sampling"};
const int kl_story_op_kind[KL_OP_COUNT] = {
    KL_KIND_EMBED, KL_KIND_NORM, KL_KIND_GEMM,       KL_KIND_ROPE, KL_KIND_KV_STORE, KL_KIND_ATTENTION, KL_KIND_GEMM,
    KL_KIND_NORM,  KL_KIND_GEMM, KL_KIND_ACTIVATION, KL_KIND_GEMM, KL_KIND_GEMM,     KL_KIND_SAMPLING};

/* ---- sizes ---- */

static double layer_params(const struct kl_story_config *c)
{
    const double h = c->hidden, q = (double)c->qo_heads * c->head_dim, kv = (double)c->kv_heads * c->head_dim;
    return 2 * h + q * h + 2 * kv * h + h * q + 2.0 * c->mlp * h + h * c->mlp;
}

static double activation_bytes(const struct kl_story_config *c, double tokens, double batch)
{
    const double h = c->hidden, q = (double)c->qo_heads * c->head_dim, kv = (double)c->kv_heads * c->head_dim;
    return 2 * tokens * (6 * h + 2 * q + 2 * kv + 3.0 * c->mlp) + 4 * tokens * c->qo_heads + 4 * batch * c->vocab;
}

#define KL_BLAS_WORKSPACE (32u << 20) /* cuBLAS's own advice for Hopper; fixed, so graphs can capture it */
#define KL_PREFILL_WORKSPACE (1u << 20)

void kl_story_memory_plan(const struct kl_story_options *o, double free_bytes, struct kl_story_memory *m)
{
    const struct kl_story_config *c = &o->model;
    const int ps = KL_STORY_PAGE_SIZE;
    /* pages: request 1 (prompt + steps), request 2's own (its suffix + steps, plus the page the
     * shared prefix may end inside), the control prefill, and one spare per request */
    m->kv_pages = (o->prompt + o->steps + ps - 1) / ps + (o->prompt - o->shared + o->steps + ps - 1) / ps + 1 +
                  (o->prompt + ps - 1) / ps + 4;
    /* bf16 K and V, and with an FP8 cache its e4m3 copy besides (one byte an element) */
    const double kv_per_layer = 2.0 * m->kv_pages * ps * c->kv_heads * c->head_dim * (o->kv_fp8 ? 3 : 2);
    const double fixed = 2.0 * c->vocab * c->hidden * 2 + 2.0 * c->hidden;
    m->activation_bytes = activation_bytes(c, o->prompt, 2) + 4.0 * o->prompt * c->head_dim * 2;
    if (o->kv_fp8) /* the projection's one-row-per-token copy */
        m->activation_bytes += 2.0 * o->prompt * ((double)c->qo_heads + 2.0 * c->kv_heads) * c->head_dim;
    m->workspace_bytes = KL_BLAS_WORKSPACE + KL_PREFILL_WORKSPACE + (64u << 20); /* + decode's, generously */
    /* what the run needs besides the layers, with 2 GB for the context, CUPTI's buffers and cuBLAS */
    const double reserve = fixed + m->activation_bytes + m->workspace_bytes + 2e9;
    const double per_layer = layer_params(c) * 2 + kv_per_layer;
    m->layers_fit = free_bytes > reserve ? (int)((free_bytes - reserve) / per_layer) : 0;
    if (m->layers_fit > c->layers) m->layers_fit = c->layers;
    m->weights_bytes = fixed + layer_params(c) * 2 * c->layers;
    m->kv_bytes = kv_per_layer * c->layers;
    m->total_bytes = m->weights_bytes + m->kv_bytes + m->activation_bytes + m->workspace_bytes;
}

/* ---- weights ---- */

/* Linear layers: uniform with variance 1 / fan_in (unit outputs for unit inputs); norm weights
 * 1 +- 0.2; the embedding unit variance; the LM head 1 / hidden, so logits are ~N(0, 1). */
float kl_story_weight_half_width(const struct kl_story_config *c, int tensor)
{
    const float q = (float)(c->qo_heads * c->head_dim);
    switch (tensor) {
    case KL_W_ATTN_NORM:
    case KL_W_MLP_NORM:
    case KL_W_FINAL_NORM:
        return 0.2f;
    case KL_W_O:
        return sqrtf(3.f / q);
    case KL_W_DOWN:
        return sqrtf(3.f / (float)c->mlp);
    case KL_W_EMBED:
        return 1.7320508f;
    default:
        return sqrtf(3.f / (float)c->hidden); /* q, k, v, gate/up, LM head: fan_in = hidden */
    }
}

float kl_story_weight_offset(int tensor)
{
    return tensor == KL_W_ATTN_NORM || tensor == KL_W_MLP_NORM || tensor == KL_W_FINAL_NORM ? 1.f : 0.f;
}

static int alloc_dev(void **p, size_t bytes, struct kl_err *err, const char *what)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return kl_fail(err, "cudaMalloc of %.2f GB for %s: %s", (double)bytes / 1e9, what, cudaGetErrorString(e));
    }
    return 0;
}

/* Allocates and fills one weight tensor of n elements. */
static int weight(struct kl_story_model *m, void **p, size_t n, uint64_t seed, int tensor_base, int tensor,
                  struct kl_err *err)
{
    if (alloc_dev(p, n * 2, err, "weights")) return -1;
    m->weights_bytes += (double)n * 2;
    cudaError_t e = kl_story_fill_weights(*p, n, seed, (uint32_t)(tensor_base + tensor), kl_story_weight_offset(tensor),
                                          kl_story_weight_half_width(&m->cfg, tensor), m->stream);
    return e == cudaSuccess ? 0 : kl_fail(err, "filling weights: %s", cudaGetErrorString(e));
}

/* ---- the model ---- */

/* The module's gated variant (perf/targets names it per architecture): the lab's best. */
static const struct kl_variant *latest(const char *module, int cc, struct kl_err *err)
{
    const struct kl_variant *v = kl_gated_variant(module, cc, err);
    if (v && v->min_cc > cc) return kl_fail(err, "%s's gated variant %s needs sm_%d", module, v->name, v->min_cc), NULL;
    return v;
}

const char *kl_story_fp8_missing(int cc, char *why, size_t len)
{
    static const char *const need[2][2] = {{"store", KL_STORY_FP8_STORE}, {"attention_decode", KL_STORY_FP8_DECODE}};
    for (int i = 0; i < 2; i++) {
        const struct kl_variant *v = kl_variant_find(need[i][0], need[i][1]);
        if (!v)
            snprintf(why, len, "--kv fp8 needs %s's variant %s, which this build does not have", need[i][0],
                     need[i][1]);
        else if (v->min_cc > cc)
            snprintf(why, len, "--kv fp8 needs %s's variant %s, which needs sm_%d (this device is sm_%d)", need[i][0],
                     need[i][1], v->min_cc, cc);
        else
            continue;
        return why;
    }
    return NULL;
}

/* The FP8 cache's scales, from the weights (kl_story_kv_scales, reference/story.c, says how and
 * why): each layer's attention norm and K/V projection copied back and widened to float64, so the
 * float64 forward pass, which makes the same weights on the host, computes the same floats. */
static int fp8_scales(struct kl_story_model *m, struct kl_err *err)
{
    const struct kl_story_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden, KV = (size_t)c->kv_heads * c->head_dim;
    const struct kl_story_dims d = {.hidden = c->hidden, .kv_heads = c->kv_heads, .head_dim = c->head_dim};
    uint16_t *raw = malloc(2 * (2 * KV * H + H));
    double *w = malloc(sizeof(double) * (2 * KV * H + H));
    int rc = raw && w ? 0 : kl_fail(err, "out of host memory");
    for (int l = 0; !rc && l < c->layers; l++) {
        if (cudaMemcpy(raw, m->layer[l].wkv, 2 * 2 * KV * H, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(raw + 2 * KV * H, m->layer[l].attn_norm, 2 * H, cudaMemcpyDeviceToHost) != cudaSuccess) {
            rc = kl_fail(err, "copying weights back for the FP8 scales: %s", cudaGetErrorString(cudaGetLastError()));
            break;
        }
        for (size_t i = 0; i < 2 * KV * H + H; i++)
            w[i] = kl_bf16_to_f32(raw[i]);
        float *ks = m->kv_scale_host + (size_t)l * 2 * c->kv_heads;
        kl_story_kv_scales(&d, w + 2 * KV * H, w, w + KV * H, ks, ks + c->kv_heads);
    }
    free(raw), free(w);
    if (!rc && cudaMemcpy(m->kv_scale, m->kv_scale_host, sizeof(float) * 2 * c->layers * c->kv_heads,
                          cudaMemcpyHostToDevice) != cudaSuccess)
        rc = kl_fail(err, "uploading the FP8 scales: %s", cudaGetErrorString(cudaGetLastError()));
    return rc;
}

struct kl_story_model *kl_story_model_new(const struct kl_story_config *cfg, int64_t max_tokens, int64_t max_batch,
                                          int64_t kv_pages, int64_t max_pos, int64_t decode_kv_bound, uint64_t seed,
                                          bool kv_fp8, struct kl_err *err)
{
    struct kl_story_model *m = calloc(1, sizeof *m);
    if (!m) return kl_fail(err, "out of host memory"), NULL;
    m->cfg = *cfg;
    m->max_tokens = max_tokens, m->max_batch = max_batch, m->kv_pages = kv_pages, m->max_pos = max_pos;
    m->decode_kv_bound = decode_kv_bound;
    m->kv_fp8 = kv_fp8;
    m->layer = calloc((size_t)cfg->layers, sizeof *m->layer);
    m->k_cache = calloc((size_t)cfg->layers, sizeof *m->k_cache);
    m->v_cache = calloc((size_t)cfg->layers, sizeof *m->v_cache);
    m->k_fp8 = calloc((size_t)cfg->layers, sizeof *m->k_fp8);
    m->v_fp8 = calloc((size_t)cfg->layers, sizeof *m->v_fp8);
    m->kv_scale_host = calloc((size_t)cfg->layers * 2 * cfg->kv_heads, sizeof(float));
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    const int cc = major * 10 + minor;
    char why[200];
    if (kv_fp8 && kl_story_fp8_missing(cc, why, sizeof why)) {
        kl_fail(err, "%s", why);
        goto fail;
    }
    if (!m->layer || !m->k_cache || !m->v_cache || !m->k_fp8 || !m->v_fp8 || !m->kv_scale_host) goto fail_memory;
    if (!(m->v_index = latest("index", cc, err)) || !(m->v_rmsnorm = latest("rmsnorm", cc, err)) ||
        !(m->v_rope = latest("rope", cc, err)) || !(m->v_store = latest("store", cc, err)) ||
        !(m->v_prefill = latest("attention_prefill", cc, err)) || !(m->v_decode = latest("attention_decode", cc, err)))
        goto fail;
    if (kv_fp8) /* by name: kl_story_fp8_missing found both */
        m->v_decode = kl_variant_find("attention_decode", KL_STORY_FP8_DECODE),
        m->v_fused = kl_variant_find("store", KL_STORY_FP8_STORE);
    cudaError_t e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        kl_fail(err, "cudaStreamCreate: %s", cudaGetErrorString(e));
        goto fail;
    }
    if (cublasCreate(&m->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(m->blas, m->stream) != CUBLAS_STATUS_SUCCESS) {
        kl_fail(err, "cuBLAS could not be initialised");
        goto fail;
    }

    const struct kl_story_config *c = cfg;
    const size_t H = (size_t)c->hidden, Q = (size_t)c->qo_heads * c->head_dim, KV = (size_t)c->kv_heads * c->head_dim;
    const size_t M = (size_t)c->mlp, V = (size_t)c->vocab, T = (size_t)max_tokens;
    if (weight(m, &m->embed, V * H, seed, 0, KL_W_EMBED, err) ||
        weight(m, &m->lm_head, V * H, seed, 0, KL_W_LM_HEAD, err) ||
        weight(m, &m->final_norm, H, seed, 0, KL_W_FINAL_NORM, err))
        goto fail;
    for (int l = 0; l < c->layers; l++) {
        struct kl_story_layer_weights *L = &m->layer[l];
        const int base = l * KL_STORY_TENSORS_PER_LAYER;
        void *wk = NULL;
        if (weight(m, &L->attn_norm, H, seed, base, KL_W_ATTN_NORM, err) ||
            weight(m, &L->wq, Q * H, seed, base, KL_W_Q, err) || alloc_dev(&L->wkv, 2 * KV * H * 2, err, "weights") ||
            weight(m, &L->wo, H * Q, seed, base, KL_W_O, err) ||
            weight(m, &L->mlp_norm, H, seed, base, KL_W_MLP_NORM, err) ||
            weight(m, &L->w_gate_up, 2 * M * H, seed, base, KL_W_GATE_UP, err) ||
            weight(m, &L->w_down, H * M, seed, base, KL_W_DOWN, err))
            goto fail;
        /* K's and V's weights in one allocation: the strided batch reads them as two matrices */
        wk = L->wkv;
        m->weights_bytes += 2.0 * KV * H * 2;
        if (kl_story_fill_weights(wk, KV * H, seed, (uint32_t)(base + KL_W_K), 0, kl_story_weight_half_width(c, KL_W_K),
                                  m->stream) != cudaSuccess ||
            kl_story_fill_weights((char *)wk + KV * H * 2, KV * H, seed, (uint32_t)(base + KL_W_V), 0,
                                  kl_story_weight_half_width(c, KL_W_V), m->stream) != cudaSuccess) {
            kl_fail(err, "filling weights: %s", cudaGetErrorString(cudaGetLastError()));
            goto fail;
        }
        const size_t cache = (size_t)kv_pages * KL_STORY_PAGE_SIZE * KV * 2;
        if (alloc_dev(&m->k_cache[l], cache, err, "the KV cache") ||
            alloc_dev(&m->v_cache[l], cache, err, "the KV cache"))
            goto fail;
        if (kv_fp8 && (alloc_dev(&m->k_fp8[l], cache / 2, err, "the FP8 KV cache") ||
                       alloc_dev(&m->v_fp8[l], cache / 2, err, "the FP8 KV cache")))
            goto fail;
    }
    if (kv_fp8 && (alloc_dev((void **)&m->kv_scale, sizeof(float) * 2 * c->layers * c->kv_heads, err, "scales") ||
                   alloc_dev(&m->qkv, T * (Q + 2 * KV) * 2, err, "activations") ||
                   cudaStreamSynchronize(m->stream) != cudaSuccess || fp8_scales(m, err)))
        goto fail;

    /* activations; K and V share one allocation for the same reason as their weights */
    void *kv = NULL;
    if (alloc_dev(&m->x, T * H * 2, err, "activations") || alloc_dev(&m->res[0], T * H * 2, err, "activations") ||
        alloc_dev(&m->res[1], T * H * 2, err, "activations") || alloc_dev(&m->hn, T * H * 2, err, "activations") ||
        alloc_dev(&m->q, T * Q * 2, err, "activations") || alloc_dev(&kv, 2 * T * KV * 2, err, "activations") ||
        alloc_dev(&m->attn, T * Q * 2, err, "activations") || alloc_dev(&m->o, T * H * 2, err, "activations") ||
        alloc_dev(&m->gu, T * 2 * M * 2, err, "activations") || alloc_dev(&m->act, T * M * 2, err, "activations") ||
        alloc_dev(&m->mo, T * H * 2, err, "activations") ||
        alloc_dev((void **)&m->lse, T * (size_t)c->qo_heads * 4, err, "activations") ||
        alloc_dev((void **)&m->logits, (size_t)max_batch * V * 4, err, "logits") ||
        alloc_dev((void **)&m->next_ids, (size_t)max_batch * 4, err, "logits"))
        goto fail;
    m->k = kv, m->v = (char *)kv + T * KV * 2;

    /* RoPE's table, computed on the host (max_pos x head_dim floats: megabytes, not gigabytes) */
    float *table = malloc(sizeof(float) * (size_t)max_pos * c->head_dim);
    if (!table || alloc_dev((void **)&m->cos_sin, sizeof(float) * (size_t)max_pos * c->head_dim, err, "rope's table")) {
        free(table);
        if (!table) kl_fail(err, "out of host memory");
        goto fail;
    }
    kl_rope_cos_sin_cache(table, max_pos, c->head_dim, c->rope_theta);
    e = cudaMemcpy(m->cos_sin, table, sizeof(float) * (size_t)max_pos * c->head_dim, cudaMemcpyHostToDevice);
    free(table);

    /* workspaces: zeroed once; the attention variants leave them zeroed (their headers) */
    struct kl_attention_decode_params dp = {.batch = max_batch,
                                            .num_qo_heads = c->qo_heads,
                                            .num_kv_heads = c->kv_heads,
                                            .head_dim = c->head_dim,
                                            .page_size = KL_STORY_PAGE_SIZE,
                                            .num_pages = kv_pages,
                                            .max_kv_len = decode_kv_bound,
                                            .dtype = KL_BF16};
    m->decode_ws_bytes = kl_attention_decode_workspace_bytes(&dp, kl_attention_decode_sms());
    m->prefill_ws_bytes = KL_PREFILL_WORKSPACE;
    if (e != cudaSuccess) {
        kl_fail(err, "uploading rope's table: %s", cudaGetErrorString(e));
        goto fail;
    }
    if (alloc_dev(&m->decode_ws, m->decode_ws_bytes, err, "workspaces") ||
        alloc_dev(&m->prefill_ws, m->prefill_ws_bytes, err, "workspaces") ||
        alloc_dev(&m->blas_ws, KL_BLAS_WORKSPACE, err, "workspaces"))
        goto fail;
    cudaMemsetAsync(m->decode_ws, 0, m->decode_ws_bytes, m->stream);
    cudaMemsetAsync(m->prefill_ws, 0, m->prefill_ws_bytes, m->stream);
    /* cuBLAS gets a fixed workspace so that a captured graph never asks it to allocate */
    if (cublasSetWorkspace(m->blas, m->blas_ws, KL_BLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        kl_fail(err, "cublasSetWorkspace failed");
        goto fail;
    }
    if ((e = cudaStreamSynchronize(m->stream)) != cudaSuccess) {
        kl_fail(err, "setting up the model: %s", cudaGetErrorString(e));
        goto fail;
    }
    return m;
fail_memory:
    kl_fail(err, "out of host memory");
fail:
    kl_story_model_free(m);
    return NULL;
}

void kl_story_model_free(struct kl_story_model *m)
{
    if (!m) return;
    if (m->stream) cudaStreamSynchronize(m->stream);
    cudaFree(m->embed), cudaFree(m->lm_head), cudaFree(m->final_norm);
    for (int l = 0; m->layer && l < m->cfg.layers; l++) {
        struct kl_story_layer_weights *L = &m->layer[l];
        cudaFree(L->attn_norm), cudaFree(L->wq), cudaFree(L->wkv), cudaFree(L->wo), cudaFree(L->mlp_norm);
        cudaFree(L->w_gate_up), cudaFree(L->w_down);
        if (m->k_cache) cudaFree(m->k_cache[l]);
        if (m->v_cache) cudaFree(m->v_cache[l]);
        if (m->k_fp8) cudaFree(m->k_fp8[l]);
        if (m->v_fp8) cudaFree(m->v_fp8[l]);
    }
    cudaFree(m->kv_scale), cudaFree(m->qkv);
    void *bufs[] = {m->x,      m->res[0],   m->res[1],  m->hn,        m->q,          m->k,
                    m->attn,   m->o,        m->gu,      m->act,       m->mo,         m->lse,
                    m->logits, m->next_ids, m->cos_sin, m->decode_ws, m->prefill_ws, m->blas_ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cudaFree(bufs[i]);
    if (m->blas) cublasDestroy(m->blas);
    if (m->stream) cudaStreamDestroy(m->stream);
    free(m->layer), free(m->k_cache), free(m->v_cache), free(m->k_fp8), free(m->v_fp8), free(m->kv_scale_host);
    free(m);
}

/* ---- launching one op ---- */

static cudaError_t gemm_launch(struct kl_story_model *m, const struct kl_story_gemm *g)
{
    const float one = 1, zero = 0;
    const cudaDataType out = g->f32_out ? CUDA_R_32F : CUDA_R_16BF;
    const int ldy = (int)(g->ldy ? g->ldy : g->n);
    cublasStatus_t s;
    if (g->batch == 1)
        s = cublasGemmEx(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, &one, g->w, CUDA_R_16BF,
                         (int)g->k, g->x, CUDA_R_16BF, (int)g->k, &zero, g->y, out, ldy, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
    else /* the same x for every matrix of the batch: its stride is 0 */
        s = cublasGemmStridedBatchedEx(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, &one, g->w,
                                       CUDA_R_16BF, (int)g->k, g->stride_w, g->x, CUDA_R_16BF, (int)g->k, 0, &zero,
                                       g->y, out, ldy, g->stride_y, g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "kernlab story: cuBLAS GEMM %lldx%lldx%lld failed: %s\n", (long long)g->m, (long long)g->n,
                (long long)g->k, cublasGetStatusString(s));
        return cudaErrorUnknown;
    }
    return cudaGetLastError();
}

cudaError_t kl_story_op_launch(struct kl_story_model *m, const struct kl_story_op *op)
{
    cudaStream_t s = m->stream;
    switch (op->how) {
    case KL_LAUNCH_INDEX:
        return ((kl_index_launch_fn)m->v_index->launch)(&op->u.index, s);
    case KL_LAUNCH_RMSNORM:
        return ((kl_rmsnorm_launch_fn)m->v_rmsnorm->launch)(&op->u.norm, s);
    case KL_LAUNCH_ROPE:
        return ((kl_rope_launch_fn)m->v_rope->launch)(&op->u.rope, s);
    case KL_LAUNCH_STORE:
        return ((kl_store_launch_fn)(op->u.store.fused ? m->v_fused : m->v_store)->launch)(&op->u.store, s);
    case KL_LAUNCH_PREFILL:
        return ((kl_attention_prefill_launch_fn)m->v_prefill->launch)(&op->u.prefill, s);
    case KL_LAUNCH_DECODE:
        return ((kl_attention_decode_launch_fn)m->v_decode->launch)(&op->u.decode, s);
    case KL_LAUNCH_SILU_MUL:
        return kl_story_silu_mul(op->u.silu.gu, op->u.silu.out, op->u.silu.n, op->u.silu.mlp, s);
    case KL_LAUNCH_ARGMAX:
        return kl_story_argmax(op->u.argmax.logits, op->u.argmax.batch, op->u.argmax.vocab, op->u.argmax.ids, s);
    case KL_LAUNCH_GEMM:
        for (int i = 0; i < op->u.gemm.count; i++) {
            cudaError_t e = gemm_launch(m, &op->u.gemm.g[i]);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }
    return cudaErrorInvalidValue;
}

/* ---- the forward pass ---- */

static cudaError_t run(struct kl_story_model *m, struct kl_story_op *op)
{
    if (m->hook) m->hook(m->hook_ctx, op, 1);
    cudaError_t e = m->dry ? cudaSuccess : kl_story_op_launch(m, op);
    if (m->hook) m->hook(m->hook_ctx, op, 0);
    if (e != cudaSuccess)
        fprintf(stderr, "kernlab story: %s (layer %d): %s\n", kl_story_op_names[op->name], op->layer,
                cudaGetErrorString(e));
    return e;
}

static struct kl_story_op op_new(enum kl_story_op_name name, int layer, enum kl_story_launch how)
{
    struct kl_story_op op;
    memset(&op, 0, sizeof op);
    op.name = name, op.layer = layer, op.how = how;
    return op;
}

static struct kl_story_gemm gemm_of(const void *w, const void *x, void *y, int64_t m, int64_t n, int64_t k)
{
    return (struct kl_story_gemm){.w = w, .x = x, .y = y, .m = m, .n = n, .k = k, .batch = 1};
}

/* flops and bytes of a GEMM op: its weights, its input once, its outputs */
static void gemm_model(struct kl_story_op *op)
{
    for (int i = 0; i < op->u.gemm.count; i++) {
        const struct kl_story_gemm *g = &op->u.gemm.g[i];
        op->flops += 2.0 * g->m * g->n * g->k * g->batch;
        op->bytes += 2.0 * g->n * g->k * g->batch + (i == 0 ? 2.0 * g->m * g->k : 0) +
                     (g->f32_out ? 4.0 : 2.0) * g->m * g->n * g->batch;
    }
}

static struct kl_story_op norm_op(struct kl_story_model *m, int layer, const void *x, const void *residual,
                                  const void *weight, void *res_out, int64_t T)
{
    struct kl_story_op op = op_new(residual ? KL_OP_ADD_RMS_NORM : KL_OP_RMS_NORM, layer, KL_LAUNCH_RMSNORM);
    op.u.norm = (struct kl_rmsnorm_params){.x = x,
                                           .residual = residual,
                                           .weight = weight,
                                           .out = m->hn,
                                           .residual_out = residual ? res_out : NULL,
                                           .num_tokens = T,
                                           .hidden = m->cfg.hidden,
                                           .eps = m->cfg.eps,
                                           .dtype = KL_BF16};
    op.bytes = 2.0 * T * m->cfg.hidden * (residual ? 4 : 2) + 2.0 * m->cfg.hidden;
    op.flops = 4.0 * T * m->cfg.hidden;
    snprintf(op.shape, sizeof op.shape, "%lld x %d%s", (long long)T, m->cfg.hidden, residual ? " (+ residual)" : "");
    return op;
}

/* Each layer's attention: prefill/extend over the request's pages, or one decode step. */
static struct kl_story_op attention_op(struct kl_story_model *m, const struct kl_story_batch *b, int l)
{
    const struct kl_story_config *c = &m->cfg;
    struct kl_story_op op = op_new(KL_OP_ATTENTION, l, b->decode ? KL_LAUNCH_DECODE : KL_LAUNCH_PREFILL);
    const float sm_scale = 1.f / sqrtf((float)c->head_dim);
    const double kv_row = 2.0 * c->kv_heads * c->head_dim * 2; /* K and V of one token */
    if (b->decode) {
        const bool fp8 = m->kv_fp8; /* e4m3 pages: one byte an element, and the layer's scales */
        const float *scale = fp8 ? m->kv_scale + (size_t)l * 2 * c->kv_heads : NULL;
        op.u.decode = (struct kl_attention_decode_params){.q = m->q,
                                                          .k_cache = fp8 ? m->k_fp8[l] : m->k_cache[l],
                                                          .v_cache = fp8 ? m->v_fp8[l] : m->v_cache[l],
                                                          .kv_indptr = b->kv_indptr,
                                                          .kv_indices = b->kv_indices,
                                                          .kv_last_page_len = b->kv_last_page_len,
                                                          .out = m->attn,
                                                          .lse = m->lse,
                                                          .batch = b->batch,
                                                          .num_qo_heads = c->qo_heads,
                                                          .num_kv_heads = c->kv_heads,
                                                          .head_dim = c->head_dim,
                                                          .page_size = KL_STORY_PAGE_SIZE,
                                                          .num_pages = m->kv_pages,
                                                          .max_kv_len = m->decode_kv_bound,
                                                          .sm_scale = sm_scale,
                                                          .dtype = KL_BF16,
                                                          .workspace = m->decode_ws,
                                                          .workspace_bytes = m->decode_ws_bytes,
                                                          .k_scale = scale,
                                                          .v_scale = fp8 ? scale + c->kv_heads : NULL};
        /* every request attends max_kv_len keys at most: the model counts the bound's bytes */
        op.bytes = b->batch * (b->max_kv_len * kv_row / (fp8 ? 2 : 1) + 4.0 * c->qo_heads * c->head_dim);
        op.flops = 4.0 * c->head_dim * c->qo_heads * b->batch * b->max_kv_len;
        snprintf(op.shape, sizeof op.shape, "batch %lld, kv <= %lld", (long long)b->batch, (long long)b->max_kv_len);
    } else {
        op.u.prefill = (struct kl_attention_prefill_params){.q = m->q,
                                                            .k_cache = m->k_cache[l],
                                                            .v_cache = m->v_cache[l],
                                                            .qo_indptr = b->qo_indptr,
                                                            .kv_indptr = b->kv_indptr,
                                                            .kv_indices = b->kv_indices,
                                                            .kv_last_page_len = b->kv_last_page_len,
                                                            .out = m->attn,
                                                            .lse = m->lse,
                                                            .workspace = m->prefill_ws,
                                                            .workspace_bytes = m->prefill_ws_bytes,
                                                            .batch = b->batch,
                                                            .total_q = b->tokens,
                                                            .num_qo_heads = c->qo_heads,
                                                            .num_kv_heads = c->kv_heads,
                                                            .head_dim = c->head_dim,
                                                            .page_size = KL_STORY_PAGE_SIZE,
                                                            .num_pages = m->kv_pages,
                                                            .max_q_len = b->max_q_len,
                                                            .sm_scale = sm_scale,
                                                            .causal = true,
                                                            .dtype = KL_BF16};
        /* one request: q_len queries over kv_len keys, query i sees kv_len - q_len + i + 1 */
        const double q = (double)b->tokens, kv = (double)b->max_kv_len, pairs = q * (kv - q) + q * (q + 1) / 2;
        op.flops = 4.0 * c->head_dim * c->qo_heads * pairs;
        op.bytes = kv * kv_row + 2.0 * 2 * q * c->qo_heads * c->head_dim;
        snprintf(op.shape, sizeof op.shape, "q %lld, kv %lld, causal", (long long)b->tokens, (long long)b->max_kv_len);
    }
    return op;
}

/* The FP8 cache's writer (store.h's fused family): q and k rotated, q to m->q, K and V quantized
 * with the layer's scales into the e4m3 pages at the batch's slots; one kernel where the bf16
 * path runs rope, then store. */
static struct kl_story_op fused_store_op(struct kl_story_model *m, const struct kl_story_batch *b, int l)
{
    const struct kl_story_config *c = &m->cfg;
    const int64_t T = b->tokens, Q = (int64_t)c->qo_heads * c->head_dim, KV = (int64_t)c->kv_heads * c->head_dim;
    const float *scale = m->kv_scale + (size_t)l * 2 * c->kv_heads;
    struct kl_story_op op = op_new(KL_OP_KV_STORE, l, KL_LAUNCH_STORE);
    op.u.store = (struct kl_store_params){.slots = b->slots,
                                          .k_cache = m->k_fp8[l],
                                          .v_cache = m->v_fp8[l],
                                          .num_tokens = T,
                                          .num_kv_heads = c->kv_heads,
                                          .head_dim = c->head_dim,
                                          .num_slots = m->kv_pages * KL_STORY_PAGE_SIZE,
                                          .dtype = KL_BF16,
                                          .fused = true,
                                          .qkv = m->qkv,
                                          .q_out = m->q,
                                          .positions = b->positions,
                                          .cos_sin_cache = m->cos_sin,
                                          .k_scale = scale,
                                          .v_scale = scale + c->kv_heads,
                                          .num_qo_heads = c->qo_heads,
                                          .rotary_dim = c->head_dim,
                                          .max_pos = m->max_pos,
                                          .is_neox = true};
    /* qkv read, q written, one byte per K/V element, slots, positions and the cos/sin rows */
    op.bytes = 2.0 * T * (Q + 2 * KV) + 2.0 * T * Q + 2.0 * T * KV + 16.0 * T + 4.0 * T * c->head_dim;
    op.flops = 3.0 * T * (Q + KV) + 2.0 * T * KV;
    snprintf(op.shape, sizeof op.shape, "%lld tokens, %d + %d heads -> e4m3", (long long)T, c->qo_heads, c->kv_heads);
    return op;
}

cudaError_t kl_story_forward(struct kl_story_model *m, const struct kl_story_batch *b)
{
    const struct kl_story_config *c = &m->cfg;
    const int64_t T = b->tokens, H = c->hidden, Q = (int64_t)c->qo_heads * c->head_dim;
    const int64_t KV = (int64_t)c->kv_heads * c->head_dim, M = c->mlp;
    if (T < 1 || T > m->max_tokens || b->batch < 1 || b->batch > m->max_batch || (!b->decode && b->batch != 1) ||
        (b->decode && b->batch != T))
        return cudaErrorInvalidValue; /* one request's prefill, or a decode batch: the LM head's rows */
    cudaError_t e;
#define RUN(op_expr)                                                                                                   \
    do {                                                                                                               \
        struct kl_story_op op_ = (op_expr);                                                                            \
        if ((e = run(m, &op_)) != cudaSuccess) return e;                                                               \
    } while (0)

    struct kl_story_op op = op_new(KL_OP_EMBED, -1, KL_LAUNCH_INDEX);
    op.u.index = (struct kl_index_params){.table = m->embed,
                                          .ids = b->ids,
                                          .out = m->x,
                                          .num_tokens = T,
                                          .vocab = c->vocab,
                                          .hidden = H,
                                          .vocab_start = 0,
                                          .dtype = KL_BF16};
    op.bytes = 2.0 * 2 * T * H;
    snprintf(op.shape, sizeof op.shape, "%lld rows of %lld", (long long)T, (long long)H);
    RUN(op);

    const void *residual = m->x; /* layer 0's residual is the embedding itself */
    int next = 0;                /* which of res[0/1] the next add_rms_norm writes */
    for (int l = 0; l < c->layers; l++) {
        const struct kl_story_layer_weights *L = &m->layer[l];
        if (l == 0) {
            RUN(norm_op(m, l, m->x, NULL, L->attn_norm, NULL, T));
        } else {
            RUN(norm_op(m, l, m->mo, residual, L->attn_norm, m->res[next], T));
            residual = m->res[next], next ^= 1;
        }

        /* With an FP8 cache the fused store reads q, k and v in one row per token: Q, then K and V, write
         * into qkv with its row stride; a prefill or extend projects K and V once more, packed, for the
         * bf16 cache its attention reads (a third GEMM, where the decode steps need none). */
        const bool fp8 = m->kv_fp8, bf16_cache = !fp8 || !b->decode;
        op = op_new(KL_OP_QKV_GEMM, l, KL_LAUNCH_GEMM);
        op.u.gemm.count = fp8 ? 2 : 0;
        if (fp8) {
            const int64_t row = Q + 2 * KV;
            op.u.gemm.g[0] = gemm_of(L->wq, m->hn, m->qkv, T, Q, H);
            op.u.gemm.g[1] = gemm_of(L->wkv, m->hn, (char *)m->qkv + Q * 2, T, KV, H);
            op.u.gemm.g[1].batch = 2, op.u.gemm.g[1].stride_w = KV * H, op.u.gemm.g[1].stride_y = KV;
            op.u.gemm.g[0].ldy = op.u.gemm.g[1].ldy = row;
        } else {
            op.u.gemm.g[op.u.gemm.count++] = gemm_of(L->wq, m->hn, m->q, T, Q, H);
        }
        if (bf16_cache) {
            struct kl_story_gemm *g = &op.u.gemm.g[op.u.gemm.count++];
            *g = gemm_of(L->wkv, m->hn, m->k, T, KV, H);
            g->batch = 2, g->stride_w = KV * H, g->stride_y = (int64_t)((char *)m->v - (char *)m->k) / 2;
        }
        gemm_model(&op);
        snprintf(op.shape, sizeof op.shape, "%lld x %lld -> %lld + 2 x %lld", (long long)T, (long long)H, (long long)Q,
                 (long long)KV);
        RUN(op);

        if (fp8) RUN(fused_store_op(m, b, l));
        if (bf16_cache) {
            op = op_new(KL_OP_ROPE, l, KL_LAUNCH_ROPE);
            op.u.rope = (struct kl_rope_params){.q = m->q,
                                                .k = m->k,
                                                .positions = b->positions,
                                                .cos_sin_cache = m->cos_sin,
                                                .num_tokens = T,
                                                .num_q_heads = c->qo_heads,
                                                .num_kv_heads = c->kv_heads,
                                                .head_dim = c->head_dim,
                                                .rotary_dim = c->head_dim,
                                                .max_pos = m->max_pos,
                                                .is_neox = true,
                                                .dtype = KL_BF16};
            op.bytes = 2.0 * 2 * T * (Q + KV) + 4.0 * T * c->head_dim;
            op.flops = 3.0 * T * (Q + KV);
            snprintf(op.shape, sizeof op.shape, "%lld tokens, %d + %d heads", (long long)T, c->qo_heads, c->kv_heads);
            if (fp8) { /* q is rotated already (the fused store): K alone, as rope's q heads */
                op.u.rope.q = m->k, op.u.rope.k = NULL, op.u.rope.num_q_heads = c->kv_heads, op.u.rope.num_kv_heads = 0;
                op.bytes = 2.0 * 2 * T * KV + 4.0 * T * c->head_dim, op.flops = 3.0 * T * KV;
                snprintf(op.shape, sizeof op.shape, "%lld tokens, %d k heads", (long long)T, c->kv_heads);
            }
            RUN(op);

            op = op_new(KL_OP_KV_STORE, l, KL_LAUNCH_STORE);
            op.u.store = (struct kl_store_params){.k = m->k,
                                                  .v = m->v,
                                                  .slots = b->slots,
                                                  .k_cache = m->k_cache[l],
                                                  .v_cache = m->v_cache[l],
                                                  .num_tokens = T,
                                                  .num_kv_heads = c->kv_heads,
                                                  .head_dim = c->head_dim,
                                                  .num_slots = m->kv_pages * KL_STORY_PAGE_SIZE,
                                                  .dtype = KL_BF16};
            op.bytes = 2.0 * 2 * 2 * T * KV + 8.0 * T;
            snprintf(op.shape, sizeof op.shape, "%lld tokens x 2 x %lld", (long long)T, (long long)KV);
            RUN(op);
        }

        RUN(attention_op(m, b, l));

        op = op_new(KL_OP_O_GEMM, l, KL_LAUNCH_GEMM);
        op.u.gemm.count = 1, op.u.gemm.g[0] = gemm_of(L->wo, m->attn, m->o, T, H, Q);
        gemm_model(&op);
        snprintf(op.shape, sizeof op.shape, "%lld x %lld -> %lld", (long long)T, (long long)Q, (long long)H);
        RUN(op);

        RUN(norm_op(m, l, m->o, residual, L->mlp_norm, m->res[next], T));
        residual = m->res[next], next ^= 1;

        op = op_new(KL_OP_GATE_UP_GEMM, l, KL_LAUNCH_GEMM);
        op.u.gemm.count = 1, op.u.gemm.g[0] = gemm_of(L->w_gate_up, m->hn, m->gu, T, 2 * M, H);
        gemm_model(&op);
        snprintf(op.shape, sizeof op.shape, "%lld x %lld -> 2 x %lld", (long long)T, (long long)H, (long long)M);
        RUN(op);

        op = op_new(KL_OP_SILU_MUL, l, KL_LAUNCH_SILU_MUL);
        op.u.silu.gu = m->gu, op.u.silu.out = m->act, op.u.silu.n = T, op.u.silu.mlp = M;
        op.bytes = 2.0 * 3 * T * M;
        op.flops = 5.0 * T * M;
        snprintf(op.shape, sizeof op.shape, "%lld x %lld", (long long)T, (long long)M);
        RUN(op);

        op = op_new(KL_OP_DOWN_GEMM, l, KL_LAUNCH_GEMM);
        op.u.gemm.count = 1, op.u.gemm.g[0] = gemm_of(L->w_down, m->act, m->mo, T, H, M);
        gemm_model(&op);
        snprintf(op.shape, sizeof op.shape, "%lld x %lld -> %lld", (long long)T, (long long)M, (long long)H);
        RUN(op);
    }

    RUN(norm_op(m, -1, m->mo, residual, m->final_norm, m->res[next], T));

    /* The LM head on each request's last token only: the batch's last `batch` rows (all rows of a
     * decode step, the last row of a prefill). */
    op = op_new(KL_OP_LM_HEAD, -1, KL_LAUNCH_GEMM);
    op.u.gemm.count = 1;
    op.u.gemm.g[0] =
        gemm_of(m->lm_head, (const char *)m->hn + (T - b->batch) * H * 2, m->logits, b->batch, c->vocab, H);
    op.u.gemm.g[0].f32_out = true;
    gemm_model(&op);
    snprintf(op.shape, sizeof op.shape, "%lld x %lld -> %d (float32)", (long long)b->batch, (long long)H, c->vocab);
    RUN(op);

    op = op_new(KL_OP_ARGMAX, -1, KL_LAUNCH_ARGMAX);
    op.u.argmax.logits = m->logits, op.u.argmax.batch = b->batch, op.u.argmax.vocab = c->vocab;
    op.u.argmax.ids = m->next_ids;
    op.bytes = 4.0 * b->batch * c->vocab;
    snprintf(op.shape, sizeof op.shape, "%lld x %d", (long long)b->batch, c->vocab);
    RUN(op);
#undef RUN
    return cudaSuccess;
}
