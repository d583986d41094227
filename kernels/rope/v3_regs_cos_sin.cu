/* v3_regs_cos_sin: no shared memory or barrier; each thread keeps its columns' cos/sin in registers.
 *
 * What changed from v1: v1 stages the token's cos/sin row in shared memory behind a barrier, so a
 * block waits position -> cos/sin -> barrier -> q/k loads: three dependent DRAM trips. Here a thread
 * owns one 16-byte column group j (8 pairs) of kItems = 4 heads of one token: it issues its 8 q/k
 * loads first (they do not depend on the position), then reads its 8 cos + 8 sin as float4s into
 * registers and rotates all 4 heads against them; items stay packed in uint4s (4 registers, not 8)
 * and stores carry st.global.cs. Work mapping: groups (= rotary_dim/2 / 8) x ceil(heads / 4) threads
 * per token (Llama 8 x 10 = 80), 3 tokens per 240-thread block; __launch_bounds__(256, 3) caps at 80
 * registers (the guide's execution model gives the count and any spills). Bound: DRAM (q, k read and
 * written in place, 343 MB).
 * Run alone: build/kernlab bench rope --variant v3_regs_cos_sin */
#include "kernels/common.cuh"
#include "kernels/rope/rope.h"
#include "kernels/variant.h"

constexpr int kMaxThreads = 256;
constexpr int kItems = 4; /* heads per thread per trip: 8 x 16 B loads in flight (KU) */
constexpr int kMinBlocks = 3; /* 256 x 3 = 768 threads per SM: caps registers at 80 */

template <bool STCS> __device__ __forceinline__ void store16(void *p, uint4 v)
{
    if constexpr (STCS) __stcs(reinterpret_cast<uint4 *>(p), v);
    else *reinterpret_cast<uint4 *>(p) = v;
}

template <typename T, bool NEOX, int W, bool VEC, int KU, bool STCS>
static __global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    rope_v3(T *q, T *k, const int64_t *__restrict__ positions, const float *__restrict__ cos_sin, int64_t num_tokens,
            int q_heads, int kv_heads, int head_dim, int rotary_dim, int64_t max_pos, int per_token, int jthreads,
            int slices)
{
    constexpr int V = 16 / sizeof(T); /* elements per 16-byte word */
    static_assert(!VEC || (NEOX ? W == V : 2 * W == V), "a vector item is one 16-byte word per half");
    const int tl = threadIdx.x / per_token, i = threadIdx.x % per_token;
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x / per_token) + tl;
    if (t >= num_tokens) return;
    const int half = rotary_dim / 2, groups = half / W, heads = q_heads + kv_heads;
    const int j0 = i % jthreads, s = i / jthreads;
    T *qt = q + t * q_heads * head_dim, *kt = k + t * kv_heads * head_dim;
    const int64_t pos = positions[t];
    const bool ok = pos >= 0 && pos < max_pos;
    for (int j = j0; j < groups; j += jthreads) {
        const int off = NEOX ? j * W : 2 * j * W; /* first element of this item in a head */
        float c[W], sn[W];
        bool have_cs = false;
        for (int h0 = s; h0 < heads; h0 += slices * KU) {
            /* Phase 1: this trip's KU items, all loads in flight before the cos/sin wait. */
            uint4 ra[KU], rb[KU];
            T xa[KU][VEC ? 1 : 2 * W]; /* scalar path only */
            T *x[KU];
#pragma unroll
            for (int u = 0; u < KU; u++) {
                const int h = h0 + u * slices;
                x[u] = h >= heads ? nullptr : (h < q_heads ? qt + h * head_dim : kt + (h - q_heads) * head_dim) + off;
                if (!x[u]) continue;
                if constexpr (VEC) {
                    ra[u] = *reinterpret_cast<const uint4 *>(x[u]);
                    if constexpr (NEOX) rb[u] = *reinterpret_cast<const uint4 *>(x[u] + half);
                } else {
#pragma unroll
                    for (int r = 0; r < W; r++) {
                        xa[u][2 * r] = NEOX ? x[u][r] : x[u][2 * r];
                        xa[u][2 * r + 1] = NEOX ? x[u][half + r] : x[u][2 * r + 1];
                    }
                }
            }
            if (!ok) return; /* left unrotated: never read past the cache */
            if (!have_cs) {
                const float *row = cos_sin + pos * rotary_dim + j * W;
                if constexpr (VEC && W % 4 == 0) { /* launcher checked cos_sin is 16-byte aligned */
#pragma unroll
                    for (int r = 0; r < W; r += 4) {
                        const float4 cv = __ldg(reinterpret_cast<const float4 *>(row + r));
                        const float4 sv = __ldg(reinterpret_cast<const float4 *>(row + half + r));
                        c[r] = cv.x, c[r + 1] = cv.y, c[r + 2] = cv.z, c[r + 3] = cv.w;
                        sn[r] = sv.x, sn[r + 1] = sv.y, sn[r + 2] = sv.z, sn[r + 3] = sv.w;
                    }
                } else {
#pragma unroll
                    for (int r = 0; r < W; r++) c[r] = __ldg(row + r), sn[r] = __ldg(row + half + r);
                }
                have_cs = true;
            }
            /* Phase 2: rotate in float32, round once, store. */
#pragma unroll
            for (int u = 0; u < KU; u++) {
                if (!x[u]) continue;
                if constexpr (VEC && NEOX) {
                    float o1[V], o2[V];
#pragma unroll
                    for (int r = 0; r < W; r++) {
                        const float x1 = kl::elem_f32<T>(ra[u], r), x2 = kl::elem_f32<T>(rb[u], r);
                        o1[r] = x1 * c[r] - x2 * sn[r], o2[r] = x2 * c[r] + x1 * sn[r];
                    }
                    store16<STCS>(x[u], kl::pack<T>(o1));
                    store16<STCS>(x[u] + half, kl::pack<T>(o2));
                } else if constexpr (VEC) {
                    float o[V];
#pragma unroll
                    for (int r = 0; r < W; r++) {
                        const float x1 = kl::elem_f32<T>(ra[u], 2 * r), x2 = kl::elem_f32<T>(ra[u], 2 * r + 1);
                        o[2 * r] = x1 * c[r] - x2 * sn[r], o[2 * r + 1] = x2 * c[r] + x1 * sn[r];
                    }
                    store16<STCS>(x[u], kl::pack<T>(o));
                } else {
#pragma unroll
                    for (int r = 0; r < W; r++) {
                        const float x1 = kl::to_f32(xa[u][2 * r]), x2 = kl::to_f32(xa[u][2 * r + 1]);
                        const T o1 = kl::from_f32<T>(x1 * c[r] - x2 * sn[r]), o2 = kl::from_f32<T>(x2 * c[r] + x1 * sn[r]);
                        if constexpr (NEOX) x[u][r] = o1, x[u][half + r] = o2;
                        else x[u][2 * r] = o1, x[u][2 * r + 1] = o2;
                    }
                }
            }
        }
    }
}

template <typename T, bool NEOX, int W, bool VEC, int KU, bool STCS>
static void launch_k(const struct kl_rope_params *p, cudaStream_t stream)
{
    const int groups = (int)(p->rotary_dim / 2 / W), heads = (int)(p->num_q_heads + p->num_kv_heads);
    const int jthreads = groups < 256 ? groups : 256;
    int slices = (heads + KU - 1) / KU;
    if (jthreads * slices > kMaxThreads) slices = kMaxThreads / jthreads;
    const int per_token = jthreads * slices;
    int tpb = kMaxThreads / per_token; /* whole tokens per block */
    if (tpb < 1) tpb = 1;
    const int64_t blocks = (p->num_tokens + tpb - 1) / tpb;
    rope_v3<T, NEOX, W, VEC, KU, STCS><<<(unsigned)blocks, tpb * per_token, 0, stream>>>(
        (T *)p->q, (T *)p->k, p->positions, p->cos_sin_cache, p->num_tokens, (int)p->num_q_heads,
        (int)p->num_kv_heads, (int)p->head_dim, (int)p->rotary_dim, p->max_pos, per_token, jthreads, slices);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T>
static void launch_t(const struct kl_rope_params *p, cudaStream_t stream)
{
    constexpr int V = 16 / sizeof(T);
    const bool vec = p->head_dim % V == 0 && aligned16(p->q) && aligned16(p->cos_sin_cache) && (p->num_kv_heads == 0 || aligned16(p->k)) &&
                     (p->is_neox ? (p->rotary_dim / 2) % V == 0 : p->rotary_dim % V == 0);
    if (p->is_neox) vec ? launch_k<T, true, V, true, kItems, true>(p, stream) : launch_k<T, true, 1, false, kItems, false>(p, stream);
    else vec ? launch_k<T, false, V / 2, true, kItems, false>(p, stream) : launch_k<T, false, 1, false, kItems, false>(p, stream);
}

static cudaError_t launch(const struct kl_rope_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rope_check_params(p, "v3_regs_cos_sin");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    KL_DISPATCH_FLOAT(p->dtype, T, launch_t<T>(p, stream));
    return cudaGetLastError();
}

KL_VARIANT(rope, v3_regs_cos_sin, launch, .min_cc = 70, 
           .summary = "thread per 16 B column group of 4 heads, cos/sin in registers, q/k loads before the position wait");
