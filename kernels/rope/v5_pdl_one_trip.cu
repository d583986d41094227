/* v5_pdl_one_trip: a decode batch's positions and cos/sin rows read before the PDL wait; one item per thread.
 *
 * What changed from v4, for few tokens: v4's persistent groups walk 2 heads a trip and start cold every
 * launch (launch, position, cos/sin, q/k in series). Here a thread owns one item, a 16-byte column group of
 * one head of one token (Llama: 8 a head x 40 heads = 320 a token, 2 blocks of 160), no loop, and, launched
 * with Programmatic Dependent Launch (sm_90), loads the position and its cos/sin row BEFORE
 * griddepcontrol.wait (scheduler metadata and a constant table), so both dependent trips overlap the previous
 * kernel; q and k are its output: after the wait, one DRAM round trip, the rotation and the store.
 * Many tokens: v4's own launcher. Predicted decode-64: ~1.85 us on H200, ~2.0 us on H100, under a plain copy.
 * Run alone: build/kernlab bench rope --variant v5_pdl_one_trip --workload decode-64 */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/rope/rope.h"
#include "kernels/variant.h"

constexpr int kThreads = 256;       /* at most, per block; a token takes ceil(items / 256) blocks */
constexpr int kThreadsPerSm = 1024; /* few tokens: the grid fits beside the previous kernel's blocks */

/* Plain loads and stores, not v4's evict-first ones: at decode size q is read next by attention and k
 * by the KV store, so both should stay in L2. */
__device__ __forceinline__ uint4 load16(const void *p) { return *reinterpret_cast<const uint4 *>(p); }
__device__ __forceinline__ void store16(void *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }

/* Item i of token blockIdx.x: head i / groups, column group i % groups (W pairs). */
template <typename T, bool NEOX, int W, bool VEC>
static __global__ void __launch_bounds__(kThreads)
    rope_v5(T *q, T *k, const int64_t *__restrict__ positions, const float *__restrict__ cos_sin, int q_heads,
            int kv_heads, int head_dim, int rotary_dim, int64_t max_pos, int groups)
{
    constexpr int V = 16 / sizeof(T);
    static_assert(!VEC || (NEOX ? W == V : 2 * W == V), "a vector item is one 16-byte word per half");
    const int64_t t = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x, h = i / groups, j = i - h * groups;
    const int half = rotary_dim / 2;

    /* Before the wait: the position (the scheduler's, copied in before the forward pass), then its
     * cos/sin (a table built at start-up): nothing the kernels of this step write. */
    const int64_t pos = __ldg(positions + t);
    const bool ok = pos >= 0 && pos < max_pos && h < q_heads + kv_heads; /* else: left unrotated */
    float c[W], sn[W];
    if (ok) { /* with W % 4 == 0 the launcher checked the cache is 16-byte aligned */
        const float *row = cos_sin + pos * rotary_dim + j * W;
        kl::load_f32(row, c);
        kl::load_f32(row + half, sn);
    }
    kl::pdl_release();
    kl::pdl_wait(); /* q and k come from the kernel before us */
    if (!ok) return;

    T *x = (h < q_heads ? q + (t * q_heads + h) * head_dim : k + (t * kv_heads + h - q_heads) * head_dim) +
           (NEOX ? j * W : 2 * j * W);
    if constexpr (VEC && NEOX) { /* x1 = W elements of the first half, x2 the matching ones of the second */
        const uint4 a = load16(x), b = load16(x + half);
        float o1[V], o2[V];
#pragma unroll
        for (int r = 0; r < W; r++) {
            const float x1 = kl::elem_f32<T>(a, r), x2 = kl::elem_f32<T>(b, r);
            o1[r] = x1 * c[r] - x2 * sn[r], o2[r] = x2 * c[r] + x1 * sn[r];
        }
        store16(x, kl::pack<T>(o1));
        store16(x + half, kl::pack<T>(o2));
    } else if constexpr (VEC) { /* W interleaved pairs in one 16-byte word */
        const uint4 a = load16(x);
        float o[V];
#pragma unroll
        for (int r = 0; r < W; r++) {
            const float x1 = kl::elem_f32<T>(a, 2 * r), x2 = kl::elem_f32<T>(a, 2 * r + 1);
            o[2 * r] = x1 * c[r] - x2 * sn[r], o[2 * r + 1] = x2 * c[r] + x1 * sn[r];
        }
        store16(x, kl::pack<T>(o));
    } else { /* one pair, element by element (odd shapes, unaligned tensors) */
        T *p1 = x, *p2 = NEOX ? x + half : x + 1;
        const float x1 = kl::to_f32(*p1), x2 = kl::to_f32(*p2);
        *p1 = kl::from_f32<T>(x1 * c[0] - x2 * sn[0]);
        *p2 = kl::from_f32<T>(x2 * c[0] + x1 * sn[0]);
    }
}

template <typename T, bool NEOX, int W, bool VEC>
static cudaError_t launch_k(const struct kl_rope_params *p, bool pdl, cudaStream_t stream)
{
    const int groups = (int)(p->rotary_dim / 2 / W);
    unsigned per_token, threads;
    kl::split_even((p->num_q_heads + p->num_kv_heads) * groups, kThreads, &per_token, &threads);
    return kl::launch_pdl(rope_v5<T, NEOX, W, VEC>, dim3((unsigned)p->num_tokens, per_token), dim3(threads), pdl,
                          stream, (T *)p->q, (T *)p->k, p->positions, p->cos_sin_cache, (int)p->num_q_heads,
                          (int)p->num_kv_heads, (int)p->head_dim, (int)p->rotary_dim, p->max_pos, groups);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T>
static cudaError_t launch_t(const struct kl_rope_params *p, bool vec, bool pdl, cudaStream_t stream)
{
    constexpr int V = 16 / sizeof(T);
    if (p->is_neox)
        return vec ? launch_k<T, true, V, true>(p, pdl, stream) : launch_k<T, true, 1, false>(p, pdl, stream);
    return vec ? launch_k<T, false, V / 2, true>(p, pdl, stream) : launch_k<T, false, 1, false>(p, pdl, stream);
}

static cudaError_t launch(const struct kl_rope_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rope_check_params(p, "v5_pdl_one_trip");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const kl::device_caps dev = kl::this_device();
    /* 16-byte items where shape and alignment allow (V elements: V pairs across the two halves, or
     * V / 2 interleaved pairs), else one pair per thread. */
    const int64_t V = 16 / (int64_t)kl_dtype_size(p->dtype);
    const bool vec = p->head_dim % V == 0 && aligned16(p->q) && aligned16(p->cos_sin_cache) &&
                     (p->num_kv_heads == 0 || aligned16(p->k)) &&
                     (p->is_neox ? (p->rotary_dim / 2) % V == 0 : p->rotary_dim % V == 0);
    const int64_t pairs = !vec ? 1 : p->is_neox ? V : V / 2;
    const int64_t items = (p->num_q_heads + p->num_kv_heads) * (p->rotary_dim / 2 / pairs);
    if (p->num_tokens * ((items + 31) / 32 * 32) > (int64_t)dev.sms * kThreadsPerSm) {
        /* Many tokens: bandwidth-bound, where v4's persistent prefetching groups are measured best. */
        const auto v4 = (kl_rope_launch_fn)kl_variant_launcher("rope", "v4_prefetch_cos_sin", "v5_pdl_one_trip");
        return v4 ? v4(p, stream) : cudaErrorInvalidValue;
    }
    KL_DISPATCH_FLOAT(p->dtype, T, rc = launch_t<T>(p, vec, dev.cc >= 90, stream));
    return rc != cudaSuccess ? rc : cudaGetLastError();
}

KL_VARIANT(rope, v5_pdl_one_trip, launch, .min_cc = 70,
           .summary = "few tokens: position and cos/sin loaded before a PDL wait, one 16 B item per thread; else v4");
