/* v1_token_vec16: one block per token, Q and K heads together, cos/sin row loaded once, 16-byte accesses.
 *
 * What changed from v0: a block owns a token. It reads the position once and stages the token's
 * cos/sin row (rotary_dim floats, 512 B for 128) in shared memory with coalesced loads; every
 * q and kv head of the token then rotates against that copy, so the row comes from DRAM once per
 * token and from shared memory for every head. Each work item is W pairs of one head moved with
 * 16-byte accesses: neox reads 8 bf16 from the first half and the 8 partners from the second
 * half (two 16-byte loads); interleaved reads 8 bf16 = 4 neighbouring pairs (one load). Each
 * thread loads kItems items before it computes and stores any: up to 4 x 16 B in flight.
 * Work mapping: items = (q_heads + kv_heads) x (rotary_dim/2 / W); threads = items / kItems
 * rounded up to whole warps, at most 256 (Llama 32 + 8 heads x 128: 320 items, 160 threads).
 * Shapes that are not whole vectors (rotary_dim/2 not a multiple of W, odd head_dim, misaligned
 * pointers) take W = 1 with scalar accesses through the same template.
 * Bound: DRAM bandwidth (q and k read and written once, one cos/sin row per token).
 * Run alone: build/kernlab bench rope --variant v1_token_vec16 */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/rope/rope.h"
#include "kernels/variant.h"

constexpr int kItems = 2;         /* work items a thread loads before computing: 2-4 loads in flight */
constexpr int kMaxThreads = 256;

/* N consecutive elements of a head as floats: one access of N * sizeof(T) bytes when VEC. */
template <typename T, int N, bool VEC>
__device__ __forceinline__ void load_n(const T *p, float (&out)[N])
{
    if constexpr (VEC) {
        const kl::vec<T, N> v = *reinterpret_cast<const kl::vec<T, N> *>(p);
#pragma unroll
        for (int r = 0; r < N; r++) out[r] = kl::to_f32(v.v[r]);
    } else {
#pragma unroll
        for (int r = 0; r < N; r++) out[r] = kl::to_f32(p[r]);
    }
}

template <typename T, int N, bool VEC>
__device__ __forceinline__ void store_n(T *p, const float (&in)[N])
{
    if constexpr (VEC) {
        kl::vec<T, N> v;
#pragma unroll
        for (int r = 0; r < N; r++) v.v[r] = kl::from_f32<T>(in[r]);
        *reinterpret_cast<kl::vec<T, N> *>(p) = v;
    } else {
#pragma unroll
        for (int r = 0; r < N; r++) p[r] = kl::from_f32<T>(in[r]);
    }
}

/* W pairs per item. NEOX: a = x[j*W ..], b = x[half + j*W ..]. Interleaved: one run of 2W
 * elements x[2jW ..] holding pairs (a_r, b_r) = (x[2r], x[2r+1]). */
template <typename T, bool NEOX, int W, bool VEC>
static __global__ void __launch_bounds__(kMaxThreads)
    rope_v1(T *q, T *k, const int64_t *__restrict__ positions, const float *__restrict__ cos_sin, int q_heads,
            int kv_heads, int64_t head_dim, int rotary_dim, int64_t max_pos)
{
    extern __shared__ float row[]; /* [rotary_dim]: cos then sin of this token's position */
    const int64_t t = blockIdx.x;
    const int64_t pos = positions[t];
    if (pos < 0 || pos >= max_pos) return; /* uniform over the block: no barrier is skipped by some only */
    for (int i = threadIdx.x; i < rotary_dim; i += blockDim.x) row[i] = cos_sin[pos * rotary_dim + i];
    __syncthreads(); /* the whole row is in shared memory before any head uses it */

    const int half = rotary_dim / 2, groups = half / W, items = (q_heads + kv_heads) * groups;
    for (int base = threadIdx.x; base < items; base += kItems * blockDim.x) {
        float a[kItems][W], b[kItems][W];
        T *x[kItems];
        /* Phase 1: all loads of this thread's items, so they are in flight together. */
#pragma unroll
        for (int it = 0; it < kItems; it++) {
            const int item = base + it * blockDim.x;
            x[it] = nullptr;
            if (item >= items) continue;
            const int h = item / groups, j = item % groups;
            T *head = h < q_heads ? q + (t * q_heads + h) * head_dim : k + (t * kv_heads + (h - q_heads)) * head_dim;
            if constexpr (NEOX) {
                x[it] = head + j * W;
                load_n<T, W, VEC>(x[it], a[it]);
                load_n<T, W, VEC>(x[it] + half, b[it]);
            } else {
                x[it] = head + 2 * j * W;
                float ab[2 * W];
                load_n<T, 2 * W, VEC>(x[it], ab);
#pragma unroll
                for (int r = 0; r < W; r++) a[it][r] = ab[2 * r], b[it][r] = ab[2 * r + 1];
            }
        }
        /* Phase 2: rotate in float32 and store. */
#pragma unroll
        for (int it = 0; it < kItems; it++) {
            if (!x[it]) continue;
            const int j = (base + it * blockDim.x) % groups;
            float o1[W], o2[W];
#pragma unroll
            for (int r = 0; r < W; r++) {
                const float c = row[j * W + r], s = row[half + j * W + r];
                o1[r] = a[it][r] * c - b[it][r] * s;
                o2[r] = b[it][r] * c + a[it][r] * s;
            }
            if constexpr (NEOX) {
                store_n<T, W, VEC>(x[it], o1);
                store_n<T, W, VEC>(x[it] + half, o2);
            } else {
                float ab[2 * W];
#pragma unroll
                for (int r = 0; r < W; r++) ab[2 * r] = o1[r], ab[2 * r + 1] = o2[r];
                store_n<T, 2 * W, VEC>(x[it], ab);
            }
        }
    }
}

template <typename T, bool NEOX, int W, bool VEC>
static void launch_k(const struct kl_rope_params *p, cudaStream_t stream)
{
    const int64_t items = (p->num_q_heads + p->num_kv_heads) * (p->rotary_dim / 2 / W);
    const int64_t want = (items + kItems - 1) / kItems;
    const int threads = (int)(want >= kMaxThreads ? kMaxThreads : (want + 31) / 32 * 32);
    rope_v1<T, NEOX, W, VEC><<<(unsigned)p->num_tokens, threads, (size_t)p->rotary_dim * sizeof(float), stream>>>(
        (T *)p->q, (T *)p->k, p->positions, p->cos_sin_cache, (int)p->num_q_heads, (int)p->num_kv_heads, p->head_dim,
        (int)p->rotary_dim, p->max_pos);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T>
static void launch_t(const struct kl_rope_params *p, cudaStream_t stream)
{
    constexpr int V = 16 / sizeof(T); /* elements per 16-byte access */
    /* Vector accesses need every access start on a 16-byte boundary: heads (head_dim), the
     * second half (rotary_dim/2, neox) or each run of 2W (interleaved), and the base pointers. */
    const bool vec = p->head_dim % V == 0 && aligned16(p->q) && (p->num_kv_heads == 0 || aligned16(p->k)) &&
                     (p->is_neox ? (p->rotary_dim / 2) % V == 0 : p->rotary_dim % V == 0);
    if (p->is_neox) vec ? launch_k<T, true, V, true>(p, stream) : launch_k<T, true, 1, false>(p, stream);
    else vec ? launch_k<T, false, V / 2, true>(p, stream) : launch_k<T, false, 1, false>(p, stream);
}

static cudaError_t launch(const struct kl_rope_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rope_check_params(p, "v1_token_vec16");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    if (p->rotary_dim * sizeof(float) > 48 * 1024) {
        fprintf(stderr, "rope v1_token_vec16: rotary_dim %lld does not fit shared memory\n", (long long)p->rotary_dim);
        return cudaErrorInvalidValue;
    }
    KL_DISPATCH_FLOAT(p->dtype, T, launch_t<T>(p, stream));
    return cudaGetLastError();
}

KL_VARIANT(rope, v1_token_vec16, launch, .min_cc = 70,
           .summary = "block per token, Q and K heads together, cos/sin row staged once in shared memory, 16-byte accesses");
