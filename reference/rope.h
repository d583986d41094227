#ifndef KL_REFERENCE_ROPE_H
#define KL_REFERENCE_ROPE_H
#include <stdbool.h>
#include <stdint.h>
/* Rotates x [num_tokens, heads, head_dim] in place (float64): pair i < rotary_dim/2 of each head
 * by the angle whose cos and sin are cos_sin_cache[positions[t], i] and
 * cos_sin_cache[positions[t], rotary_dim/2 + i]; is_neox pairs (i, i + rotary_dim/2), else
 * (2i, 2i + 1). Dims past rotary_dim untouched. Tokens with a position outside [0, max_pos) are
 * left as they are; returns how many there were. */
int64_t kl_rope_reference(double *x, const int64_t *positions, const double *cos_sin_cache, int64_t num_tokens,
                          int64_t heads, int64_t head_dim, int64_t rotary_dim, int64_t max_pos, bool is_neox);
/* The usual table: inv_freq_i = base^(-2i/rotary_dim), angle = pos * inv_freq_i, as f32 values
 * computed in float64. cache [max_pos, rotary_dim]. */
void kl_rope_cos_sin_cache(float *cache, int64_t max_pos, int64_t rotary_dim, double base);
#endif
