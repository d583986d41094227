#ifndef KL_REFERENCE_STORE_H
#define KL_REFERENCE_STORE_H
#include <stdbool.h>
#include <stdint.h>
/* k_cache[slots[t]] = k[t], v_cache[slots[t]] = v[t] for every token with 0 <= slot < num_slots
 * (slot < 0 skips the token). k, v [num_tokens, row]; caches [num_slots, row], updated in place;
 * row = num_kv_heads * head_dim. Returns the number of tokens whose slot was >= num_slots
 * (not stored). */
int64_t kl_store_reference(const double *k, const double *v, const int64_t *slots, int64_t num_tokens, int64_t row,
                           int64_t num_slots, double *k_cache, double *v_cache);

/* The fused RoPE + FP8 quantize + store (kernels/store/store.h says what it computes). */
struct kl_store_rope_quant {
    int64_t num_tokens, num_qo_heads, num_kv_heads, head_dim, rotary_dim, max_pos, num_slots;
    bool is_neox;
    const double *qkv;                /* [num_tokens, (num_qo_heads + 2 num_kv_heads) * head_dim] */
    const int64_t *positions, *slots; /* [num_tokens] */
    const double *cos_sin_cache;      /* [max_pos, rotary_dim] */
    const double *k_scale, *v_scale;  /* [num_kv_heads] */
};
/* q_out [num_tokens, num_qo_heads, head_dim] in float64 (every token); the caches
 * [num_slots, num_kv_heads, head_dim] of e4m3 codes updated in place at the slots of stored tokens.
 * k_pre, v_pre, k_terms, v_terms (each NULL or [num_slots, num_kv_heads, head_dim], written at the
 * same rows): the value before its rounding to e4m3 (rope(k) / scale, float64), and the sum of the
 * magnitudes of the terms that make it (|x1 c| + |x2 s|, over the scale; |x| / scale where nothing is
 * rotated), to which the error of a float32 computation of it is proportional. Returns the number of
 * tokens whose slot was >= num_slots or whose position was outside [0, max_pos) (neither stored
 * nor, for the position, rotated). */
int64_t kl_store_rope_quant_reference(const struct kl_store_rope_quant *a, double *q_out, uint8_t *k_cache,
                                      uint8_t *v_cache, double *k_pre, double *v_pre, double *k_terms, double *v_terms);
#endif
