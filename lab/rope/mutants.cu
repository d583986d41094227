/* Deliberately wrong rope variants, linked into the tests only: the checker must flag every
 * one. Each is v0's one-thread-per-pair structure with one realistic bug:
 *   sin_sign_flipped     rotates by -angle (x1 c + x2 s, x2 c - x1 s): the transposed matrix
 *   neox_ignored         always pairs interleaved neighbours (2i, 2i+1), whatever is_neox says
 *   partner_at_head_half neox partner at i + head_dim/2 instead of i + rotary_dim/2: right
 *                        only when rotary_dim == head_dim (partial rotary broken)
 *   k_not_rotated        the grid covers the q heads only */
#include "kernels/common.cuh"
#include "kernels/rope/rope.h"
#include "lab/core/registry.h"

enum bug { SIN_SIGN_FLIPPED, NEOX_IGNORED, PARTNER_AT_HEAD_HALF, K_NOT_ROTATED };

template <typename T, int BUG>
static __global__ void rope_mutant(T *q, T *k, const int64_t *__restrict__ positions,
                                   const float *__restrict__ cos_sin, int64_t num_tokens, int64_t q_heads,
                                   int64_t kv_heads, int64_t head_dim, int64_t rotary_dim, int64_t max_pos,
                                   bool is_neox)
{
    const int64_t half = rotary_dim / 2, heads = BUG == K_NOT_ROTATED ? q_heads : q_heads + kv_heads;
    const int64_t total = num_tokens * heads * half;
    if (BUG == NEOX_IGNORED) is_neox = false;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % half, h = (e / half) % heads, t = e / (half * heads);
        const int64_t pos = positions[t];
        if (pos < 0 || pos >= max_pos) continue;
        T *x = h < q_heads ? q + (t * q_heads + h) * head_dim : k + (t * kv_heads + (h - q_heads)) * head_dim;
        const float c = cos_sin[pos * rotary_dim + i];
        float s = cos_sin[pos * rotary_dim + half + i];
        if (BUG == SIN_SIGN_FLIPPED) s = -s;
        const int64_t partner = BUG == PARTNER_AT_HEAD_HALF ? i + head_dim / 2 : i + half;
        const int64_t i1 = is_neox ? i : 2 * i, i2 = is_neox ? partner : 2 * i + 1;
        const float x1 = kl::to_f32(x[i1]), x2 = kl::to_f32(x[i2]);
        x[i1] = kl::from_f32<T>(x1 * c - x2 * s);
        x[i2] = kl::from_f32<T>(x2 * c + x1 * s);
    }
}

template <int BUG>
static cudaError_t launch(const struct kl_rope_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rope_check_params(p, "mutant");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t total = p->num_tokens * (p->num_q_heads + p->num_kv_heads) * (p->rotary_dim / 2);
    const unsigned blocks = (unsigned)(total / 256 + 1 < 65536 * 16 ? total / 256 + 1 : 65536 * 16);
    KL_DISPATCH_FLOAT(p->dtype, T,
                      rope_mutant<T, BUG><<<blocks, 256, 0, stream>>>((T *)p->q, (T *)p->k, p->positions,
                                                                      p->cos_sin_cache, p->num_tokens, p->num_q_heads,
                                                                      p->num_kv_heads, p->head_dim, p->rotary_dim,
                                                                      p->max_pos, p->is_neox));
    return cudaGetLastError();
}

KL_VARIANT(rope, mutant_sin_sign_flipped, launch<SIN_SIGN_FLIPPED>, .min_cc = 70,
           .summary = "rotates by minus the angle (sin sign flipped)", .mutant = 1);
KL_VARIANT(rope, mutant_neox_ignored, launch<NEOX_IGNORED>, .min_cc = 70,
           .summary = "always interleaved pairs, is_neox ignored", .mutant = 1);
KL_VARIANT(rope, mutant_partner_at_head_half, launch<PARTNER_AT_HEAD_HALF>, .min_cc = 70,
           .summary = "neox partner at i + head_dim/2: rotary_dim ignored in the pairing", .mutant = 1);
KL_VARIANT(rope, mutant_k_not_rotated, launch<K_NOT_ROTATED>, .min_cc = 70,
           .summary = "only the q heads are rotated", .mutant = 1);
