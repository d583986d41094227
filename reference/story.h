#ifndef KL_REFERENCE_STORY_H
#define KL_REFERENCE_STORY_H
/* The story's decoder on the CPU, one request at a time (lab/story/model.c is the GPU one):
 *   embedding; per layer  [add +] rmsnorm -> q, k, v projections -> rope -> append K/V ->
 *   causal attention over the request's keys -> o projection -> add + rmsnorm -> gate/up
 *   projection -> silu(gate) * up -> down projection;  final add + rmsnorm, LM head (logits of
 *   the last token).
 * Three ways to run it:
 *   KL_STORY_REF_EXACT   float64, from the lab's references (rmsnorm, rope, attention_prefill,
 *                        attention_decode) and plain float64 matrix products. Alongside every
 *                        value it carries the VARIANCE of the error the GPU's pipeline is expected
 *                        to have there (bf16 storage of every activation between kernels, float32
 *                        accumulation, P rounded to bf16 in attention), propagated to first order
 *                        through each operation: the tolerance of the end-to-end check (story.c
 *                        derives it).
 *   KL_STORY_REF_BF16    an emulation of the GPU pipeline on the CPU: float32 arithmetic, every
 *                        stored activation rounded to bf16, P rounded before P.V. Its distance to
 *                        EXACT tests the error model without a GPU.
 *   faults               deliberately wrong emulations (a dropped key, a shifted position, ...):
 *                        what the end-to-end check must catch, or is known to let through. */
#include <stdbool.h>
#include <stdint.h>

#define KL_STORY_MAX_LAYERS 64

struct kl_story_dims {
    int layers, hidden, qo_heads, kv_heads, head_dim, mlp, vocab;
    double eps;  /* rmsnorm */
    int max_pos; /* rows of cos_sin */
};

/* Weights as float64 (each an exact bf16 value), in the GPU's layouts: a linear layer is
 * [out_features, in_features] (y = W x); gate_up is [2 * mlp, hidden] (gate rows first). */
struct kl_story_ref_layer {
    const double *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate_up, *w_down;
};
struct kl_story_ref_weights {
    const double *embed;   /* [vocab, hidden] */
    const double *lm_head; /* [vocab, hidden] */
    const double *final_norm;
    struct kl_story_ref_layer layer[KL_STORY_MAX_LAYERS];
    const double *cos_sin; /* [max_pos, head_dim]: the float32 table the GPU uses, NeoX halves */
};

enum kl_story_ref_mode { KL_STORY_REF_EXACT, KL_STORY_REF_BF16 };

/* Faults of the BF16 emulation (a bit mask). */
enum {
    KL_STORY_FAULT_DROP_NEWEST_KEY = 1, /* attention misses the newest key (kv_len off by one) */
    KL_STORY_FAULT_ROPE_SHIFT = 2,      /* every position one too high: invisible (RoPE is relative) */
    KL_STORY_FAULT_DECODE_POS = 32,     /* decode steps rotate at kv_len, not kv_len - 1 */
    KL_STORY_FAULT_WRONG_PAGE = 4,      /* keys 16..31 read from page 0 (a page-table slip) */
    KL_STORY_FAULT_EPS_X10 = 8,         /* rmsnorm eps ten times too large */
    KL_STORY_FAULT_NO_P_ROUNDING = 16,  /* P kept in float32: a legitimate kernel, not a bug */
    KL_STORY_FAULT_NO_SCALE = 64,       /* FP8 cache: a code read without its scale (value = code) */
    KL_STORY_FAULT_NO_QUANT = 128,      /* FP8 cache: decode reads K/V as never quantized */
};

/* One request's cache: per layer the K and V of its tokens (values, and their error variances in
 * EXACT mode), [capacity, kv_heads, head_dim] = pages of 16 in order. */
struct kl_story_ref_seq {
    int len, capacity;
    double *k[KL_STORY_MAX_LAYERS], *v[KL_STORY_MAX_LAYERS];
    double *kvar[KL_STORY_MAX_LAYERS], *vvar[KL_STORY_MAX_LAYERS];
    /* An FP8 cache (kl_story_ref_seq_fp8): scales [layers * kv_heads] for K and for V, and the
     * values its e4m3 codes stand for (code * scale) with their error variances. */
    const float *k_scale, *v_scale;
    double *kq[KL_STORY_MAX_LAYERS], *vq[KL_STORY_MAX_LAYERS];
    double *kqvar[KL_STORY_MAX_LAYERS], *vqvar[KL_STORY_MAX_LAYERS];
};
struct kl_story_ref_seq *kl_story_ref_seq_new(const struct kl_story_dims *d, int capacity);
void kl_story_ref_seq_free(struct kl_story_ref_seq *s, const struct kl_story_dims *d);

/* The request's decode steps read an FP8 (e4m3) cache, as `kernlab story --kv fp8` runs: every
 * pass also quantizes its new K and V as store's fused kernel does (RoPE on the projection's k in
 * float, the division by the kv head's scale rounded to float32, e4m3 rounding to nearest even,
 * saturating), and a pass of ONE token (a decode step) attends over those values; a pass of several
 * (prefill, extend) attends over the bf16 K/V as before (no FP8 prefill kernel). In EXACT mode the
 * quantized value carries the variance of the GPU's code differing from the float64 one (story.c).
 * The scales are kept by pointer. Call before the first pass; 0, or -1 when out of memory. */
int kl_story_ref_seq_fp8(struct kl_story_ref_seq *s, const struct kl_story_dims *d, const float *k_scale,
                         const float *v_scale);

/* One layer's FP8 scales from its weights: attn_norm [hidden], wk and wv [kv_heads * head_dim,
 * hidden] -> k_scale, v_scale [kv_heads]. The bound a K or V element cannot exceed, over 448 (e4m3's
 * largest value), so no code saturates (story.c says why this bound). */
void kl_story_kv_scales(const struct kl_story_dims *d, const double *attn_norm, const double *wk, const double *wv,
                        float *k_scale, float *v_scale);

/* Variance of e4m3(y + e) - e4m3(y) for an error e ~ N(0, var), y and var in code units: the two
 * codes differ only where e carries y past the midpoint to a neighbouring code (story.c). */
double kl_story_e4m3_flip_var(double y, double var);

/* Runs n new tokens of the request (positions s->len .. s->len + n - 1; their K/V are appended)
 * and writes the logits of the last one to logits[vocab]; in EXACT mode also their expected
 * error variance to logits_var (may be NULL). Returns 0, or -1 when out of capacity or memory. */
int kl_story_ref_forward(const struct kl_story_dims *d, const struct kl_story_ref_weights *w,
                         struct kl_story_ref_seq *s, const int32_t *tokens, int n, enum kl_story_ref_mode mode,
                         int faults, double *logits, double *logits_var);

/* The two kernels written only for the story, in float64. */
/* out[t, i] = silu(gu[t, i]) * gu[t, mlp + i], silu(g) = g / (1 + exp(-g)); gu [n, 2 * mlp]. */
void kl_story_silu_mul_reference(const double *gu, int64_t n, int64_t mlp, double *out);
/* ids[b] = the index of the largest of logits[b, :] (the first one on ties; NaN is never largest
 * unless every value is NaN, then 0). */
void kl_story_argmax_reference(const double *logits, int64_t batch, int64_t vocab, int32_t *ids);

/* Variance of the error of storing v in bf16 (round to nearest: uniform in half an ulp each way). */
double kl_story_bf16_rounding_var(double v);

#endif
