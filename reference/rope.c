/* RoPE, the obviously right way: float64, one token, head and pair at a time. */
#include "rope.h"

#include <math.h>

int64_t kl_rope_reference(double *x, const int64_t *positions, const double *cos_sin_cache, int64_t num_tokens,
                          int64_t heads, int64_t head_dim, int64_t rotary_dim, int64_t max_pos, bool is_neox)
{
    const int64_t half = rotary_dim / 2;
    int64_t skipped = 0;
    for (int64_t t = 0; t < num_tokens; t++) {
        const int64_t pos = positions[t];
        if (pos < 0 || pos >= max_pos) {
            skipped++;
            continue;
        }
        const double *cos = cos_sin_cache + pos * rotary_dim, *sin = cos + half;
        for (int64_t h = 0; h < heads; h++) {
            double *head = x + (t * heads + h) * head_dim;
            for (int64_t i = 0; i < half; i++) {
                const int64_t i1 = is_neox ? i : 2 * i, i2 = is_neox ? i + half : 2 * i + 1;
                const double x1 = head[i1], x2 = head[i2];
                head[i1] = x1 * cos[i] - x2 * sin[i];
                head[i2] = x2 * cos[i] + x1 * sin[i];
            }
        }
    }
    return skipped;
}

void kl_rope_cos_sin_cache(float *cache, int64_t max_pos, int64_t rotary_dim, double base)
{
    const int64_t half = rotary_dim / 2;
    for (int64_t p = 0; p < max_pos; p++)
        for (int64_t i = 0; i < half; i++) {
            const double angle = (double)p * pow(base, -2.0 * (double)i / (double)rotary_dim);
            cache[p * rotary_dim + i] = (float)cos(angle);
            cache[p * rotary_dim + half + i] = (float)sin(angle);
        }
}
