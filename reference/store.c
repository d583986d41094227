/* K/V store into a paged cache, the obviously right way: one token at a time. The page
 * structure needs no code: [num_pages, page_size, ...] is [num_slots, ...] in memory. */
#include "store.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/dtype.h"
#include "rope.h"

int64_t kl_store_reference(const double *k, const double *v, const int64_t *slots, int64_t num_tokens, int64_t row,
                           int64_t num_slots, double *k_cache, double *v_cache)
{
    int64_t out_of_range = 0;
    for (int64_t t = 0; t < num_tokens; t++) {
        int64_t s = slots[t];
        if (s < 0) continue;
        if (s >= num_slots) {
            out_of_range++;
            continue;
        }
        for (int64_t i = 0; i < row; i++) {
            k_cache[s * row + i] = k[t * row + i];
            v_cache[s * row + i] = v[t * row + i];
        }
    }
    return out_of_range;
}

/* The fused store: rope(x) in float64 with reference/rope.c, one head at a time, then the division
 * by the head's scale in float64, rounded once to float32 (the encoder's input: kernels/dtype.h),
 * then to e4m3 with saturation. */
int64_t kl_store_rope_quant_reference(const struct kl_store_rope_quant *a, double *q_out, uint8_t *k_cache,
                                      uint8_t *v_cache, double *k_pre, double *v_pre, double *k_terms, double *v_terms)
{
    const int64_t d = a->head_dim, hq = a->num_qo_heads, hk = a->num_kv_heads, half = a->rotary_dim / 2;
    const int64_t width = (hq + 2 * hk) * d, row = hk * d;
    double *x = malloc(sizeof(double) * (size_t)(d > 0 ? d : 1));
    int64_t bad = 0;
    for (int64_t t = 0; t < a->num_tokens; t++) {
        const double *in = a->qkv + t * width;
        const int64_t pos = a->positions[t], slot = a->slots[t];
        const bool rotate = pos >= 0 && pos < a->max_pos;
        const bool store = slot >= 0 && slot < a->num_slots;
        bad += !rotate || slot >= a->num_slots;
        for (int64_t h = 0; h < hq; h++) {
            for (int64_t i = 0; i < d; i++) x[i] = in[h * d + i];
            kl_rope_reference(x, &pos, a->cos_sin_cache, 1, 1, d, a->rotary_dim, a->max_pos, a->is_neox);
            for (int64_t i = 0; i < d; i++) q_out[(t * hq + h) * d + i] = x[i];
        }
        if (!store) continue;
        for (int64_t h = 0; h < hk; h++) {
            const double *k = in + (hq + h) * d, *v = in + (hq + hk + h) * d;
            const double ks = a->k_scale[h], vs = a->v_scale[h];
            const int64_t at = slot * row + h * d;
            for (int64_t i = 0; i < d; i++) x[i] = k[i];
            kl_rope_reference(x, &pos, a->cos_sin_cache, 1, 1, d, a->rotary_dim, a->max_pos, a->is_neox);
            for (int64_t i = 0; i < d; i++) {
                k_cache[at + i] = kl_f32_to_e4m3((float)(x[i] / ks));
                v_cache[at + i] = kl_f32_to_e4m3((float)(v[i] / vs));
                if (k_pre) k_pre[at + i] = x[i] / ks;
                if (v_pre) v_pre[at + i] = v[i] / vs;
                if (k_terms) k_terms[at + i] = fabs(k[i]) / ks; /* overwritten below where rotated */
                if (v_terms) v_terms[at + i] = fabs(v[i]) / vs;
            }
            if (!k_terms || !rotate) continue;
            const double *cos = a->cos_sin_cache + pos * a->rotary_dim, *sin = cos + half;
            for (int64_t i = 0; i < half; i++) {
                const int64_t i1 = a->is_neox ? i : 2 * i, i2 = a->is_neox ? i + half : 2 * i + 1;
                k_terms[at + i1] = (fabs(k[i1] * cos[i]) + fabs(k[i2] * sin[i])) / ks;
                k_terms[at + i2] = (fabs(k[i2] * cos[i]) + fabs(k[i1] * sin[i])) / ks;
            }
        }
    }
    free(x);
    return bad;
}
