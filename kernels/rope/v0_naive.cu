/* v0_naive: the textbook RoPE, one thread per rotated pair.
 *
 * Work mapping: a flat grid over num_tokens x (num_q_heads + num_kv_heads) x rotary_dim/2
 * pairs; Q and K heads are one index space, so one launch rotates both. A thread loads its
 * token's position, the cos and sin of its pair (two 4-byte loads from the f32 cache), the two
 * elements of the pair (2 bytes each in bf16), rotates in float32 and writes both back.
 * Neighbouring threads touch neighbouring pairs, so accesses coalesce, but every thread moves a
 * few bytes after a dependent position load, and the cos/sin row of a token is re-read by every
 * head (from L1/L2, but still instructions and latency). Dims past rotary_dim are not touched.
 * Run alone: build/kernlab bench rope --variant v0_naive */
#include "kernels/common.cuh"
#include "kernels/rope/rope.h"
#include "kernels/variant.h"

constexpr int kThreads = 256;

template <typename T>
static __global__ void rope_v0(T *q, T *k, const int64_t *__restrict__ positions, const float *__restrict__ cos_sin,
                               int64_t num_tokens, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                               int64_t rotary_dim, int64_t max_pos, bool is_neox)
{
    const int64_t half = rotary_dim / 2, heads = q_heads + kv_heads, total = num_tokens * heads * half;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % half, h = (e / half) % heads, t = e / (half * heads);
        const int64_t pos = positions[t];
        if (pos < 0 || pos >= max_pos) continue; /* never read past the cache (see rope.h) */
        T *x = h < q_heads ? q + (t * q_heads + h) * head_dim : k + (t * kv_heads + (h - q_heads)) * head_dim;
        const float c = cos_sin[pos * rotary_dim + i], s = cos_sin[pos * rotary_dim + half + i];
        const int64_t i1 = is_neox ? i : 2 * i, i2 = is_neox ? i + half : 2 * i + 1;
        const float x1 = kl::to_f32(x[i1]), x2 = kl::to_f32(x[i2]);
        x[i1] = kl::from_f32<T>(x1 * c - x2 * s);
        x[i2] = kl::from_f32<T>(x2 * c + x1 * s);
    }
}

static cudaError_t launch(const struct kl_rope_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rope_check_params(p, "v0_naive");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t total = p->num_tokens * (p->num_q_heads + p->num_kv_heads) * (p->rotary_dim / 2);
    const unsigned blocks = (unsigned)(total / kThreads + 1 < 65536 * 16 ? total / kThreads + 1 : 65536 * 16);
    KL_DISPATCH_FLOAT(p->dtype, T,
                      rope_v0<T><<<blocks, kThreads, 0, stream>>>((T *)p->q, (T *)p->k, p->positions,
                                                                  p->cos_sin_cache, p->num_tokens, p->num_q_heads,
                                                                  p->num_kv_heads, p->head_dim, p->rotary_dim,
                                                                  p->max_pos, p->is_neox));
    return cudaGetLastError();
}

KL_VARIANT(rope, v0_naive, launch, .min_cc = 70, .summary = "one thread per rotated pair, scalar loads");
