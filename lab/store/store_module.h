/* What the store module shares with its tests and perf workloads. */
#ifndef KL_STORE_MODULE_H
#define KL_STORE_MODULE_H

#include <stdbool.h>

#include "kernels/store/store.h"
#include "lab/core/registry.h"
#include "lab/core/golden.h"
#include "lab/core/tensor.h"

enum kl_store_slot_pattern { KL_SLOTS_RANDOM, KL_SLOTS_SEQUENTIAL };

struct kl_store_problem {
    int64_t num_tokens, num_kv_heads, head_dim, num_slots;
    enum kl_dtype dtype;
    struct kl_tensor k, v;             /* host, [num_tokens, num_kv_heads, head_dim] in dtype */
    struct kl_tensor slots;            /* host, [num_tokens] KL_I64 */
    struct kl_tensor k_cache, v_cache; /* host, [num_slots, num_kv_heads, head_dim]: before the store */

    /* The fused RoPE + quantize + store (kernels/store/store.h): k and v unused, the caches e4m3. */
    bool fused;
    int64_t num_qo_heads, rotary_dim, max_pos;
    bool is_neox;
    struct kl_tensor qkv;              /* host, [num_tokens, (num_qo_heads + 2 num_kv_heads) * head_dim] in dtype */
    struct kl_tensor positions;        /* host, [num_tokens] KL_I64, each in [0, max_pos) */
    struct kl_tensor cos_sin_cache;    /* host, [max_pos, rotary_dim] KL_F32 */
    struct kl_tensor k_scale, v_scale; /* host, [num_kv_heads] KL_F32 */
    /* [num_slots * num_kv_heads * head_dim] each, for kl_policy_e4m3: the reference's value before
     * its rounding (an untouched element's: its old code's) and the float32 kernel's slack on it. */
    double *k_pre, *v_pre, *k_slack, *v_slack;
};

/* A random fused problem: qkv ~ N(0, 1) in dtype, per-head scales (head h of K: k_scale_base x
 * (1 + h / 4), of V: 1.5x that), positions across [0, max_pos) with both ends, slots as
 * kl_store_problem_random's, e4m3 caches of random old codes. */
struct kl_store_fused_shape {
    int64_t num_tokens, num_qo_heads, num_kv_heads, head_dim, rotary_dim, max_pos, num_slots;
    bool is_neox;
    enum kl_dtype dtype;
    enum kl_store_slot_pattern pattern;
    int skipped; /* of every 8 tokens */
    double k_scale_base;
};
struct kl_store_problem *kl_store_fused_random(const struct kl_store_fused_shape *s, uint64_t seed);
/* The fused half of the module's hooks (lab/store/fused.c); module.c hands a fused problem or case
 * to them. */
void *kl_store_fused_load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err);
void kl_store_fused_outputs(const struct kl_store_problem *p, struct kl_outputs *o);
int kl_store_fused_reference(const struct kl_store_problem *p, struct kl_outputs *out, struct kl_err *err);
/* The reference's struct for p (its float64 arrays malloc'ed: kl_store_fused_args_free). */
struct kl_store_rope_quant;
void kl_store_fused_args(const struct kl_store_problem *p, struct kl_store_rope_quant *a);
void kl_store_fused_args_free(struct kl_store_rope_quant *a);
/* The fused problems of the check catalogue: problem i (NULL past the end), its label written. */
struct kl_store_problem *kl_store_fused_make(int i, uint64_t seed, char *label, size_t len);

/* Random k, v and caches; distinct slots, random or consecutive from a random start; `skipped`
 * of every 8 tokens get slot -1; with last_slot, token 0 goes to slot num_slots - 1. */
struct kl_store_problem *kl_store_problem_random(int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                                                 int64_t num_slots, enum kl_dtype dtype,
                                                 enum kl_store_slot_pattern pattern, int skipped, bool last_slot,
                                                 uint64_t seed);
void kl_store_problem_free(struct kl_store_problem *p);
/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_store_ops;

extern const struct kl_perf_ops kl_store_perf;

#endif
