/* The story's random weights: one formula, compiled for the device (where the gigabytes are made)
 * and for the host (where the tiny model's float64 check makes the same values without a GPU).
 *
 * Element i of tensor `tensor` is  offset + half_width * (2u - 1),  u = a 24-bit hash of
 * (seed, tensor, i) / 2^24, rounded once to bf16. Every step is an exact or a single IEEE
 * rounding in float32 (the device spells them __fmul_rn/__fadd_rn so nvcc cannot fuse them into
 * an FMA; the host goes through exact double operations), so host and device agree bit for bit.
 * Uniform values, not normal ones: what the story needs is the right scale (linear layers have
 * half_width sqrt(3 / fan_in): unit output variance for unit input variance) and no zeros, which
 * run faster than real data. */
#ifndef KL_STORY_WEIGHTS_H
#define KL_STORY_WEIGHTS_H

#include <stdint.h>

#ifdef __CUDACC__
#define KL_STORY_HD __host__ __device__
#else
#define KL_STORY_HD
#endif

/* splitmix64's finaliser over (seed, tensor, index). */
static inline KL_STORY_HD uint64_t kl_story_hash(uint64_t seed, uint32_t tensor, uint64_t i)
{
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (seed + 0x632BE59BD9B4E019ull * (tensor + 1));
    h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29, h *= 0x94D049BB133111EBull, h ^= h >> 32;
    return h;
}

/* The float32 value before the bf16 rounding. */
static inline KL_STORY_HD float kl_story_weight_f32(uint64_t seed, uint32_t tensor, uint64_t i, float offset,
                                                    float half_width)
{
    const float u = (float)(kl_story_hash(seed, tensor, i) & 0xffffff) * (1.f / 16777216.f); /* [0, 1), exact */
    const float t = 2.f * u - 1.f;                                                           /* exact */
#ifdef __CUDA_ARCH__
    return __fadd_rn(__fmul_rn(t, half_width), offset);
#else
    /* The same two roundings whatever the compiler contracts: each double operation is exact (24-bit
     * operands), so each cast to float is the one IEEE rounding of the float operation. */
    const float p = (float)((double)t * (double)half_width);
    return (float)((double)p + (double)offset);
#endif
}

/* Which tensor of the model an id names: layer l's tensors are l * KL_STORY_TENSORS_PER_LAYER + k. */
enum kl_story_tensor {
    KL_W_ATTN_NORM,
    KL_W_Q,
    KL_W_K,
    KL_W_V,
    KL_W_O,
    KL_W_MLP_NORM,
    KL_W_GATE_UP,
    KL_W_DOWN,
    KL_STORY_TENSORS_PER_LAYER,
    /* outside the layers: ids past every layer's */
    KL_W_EMBED = 1000000,
    KL_W_LM_HEAD,
    KL_W_FINAL_NORM
};

#endif
