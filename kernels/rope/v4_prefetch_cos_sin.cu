/* v4_prefetch_cos_sin: persistent thread groups load the NEXT token's cos/sin under this token's q/k loads.
 * From v3: a v3 thread lives one token and waits two dependent DRAM trips (position -> cos/sin row),
 * its q/k in flight only in the first, and holds 4 heads of registers. Here a group walks tokens t, t+G, ...;
 * token n+1's cos/sin row goes out right after token n's stores (its position one token earlier), so a
 * token costs one DRAM trip. kItems = 2; q/k use ld/st.global.cs.
 * Mapping: a group = rotary_dim/2/8 column groups x ceil(heads/2) threads (Llama 8 x 20 = 160); the grid
 * holds the groups resident at once, trimmed so each walks the same token count. Bound: DRAM (343 MB).
 * Run alone: build/kernlab bench rope --variant v4_prefetch_cos_sin */
#include "kernels/common.cuh"
#include "kernels/rope/rope.h"
#include "kernels/variant.h"

constexpr int kMaxThreads = 256;
constexpr int kItems = 2; /* heads per thread per trip: 4 x 16 B q/k + 4 x 16 B cos/sin in flight */

/* q/k are read once and written once: evict-first hints on both, so they do not push the
 * cos/sin rows (shared by the group's threads) out of L1. */
__device__ __forceinline__ uint4 load16(const void *p) { return __ldcs(reinterpret_cast<const uint4 *>(p)); }
__device__ __forceinline__ void store16(void *p, uint4 v) { __stcs(reinterpret_cast<uint4 *>(p), v); }

/* W cos and W sin of column group j of a cache row, as floats in registers. */
template <int W, bool VEC>
__device__ __forceinline__ void load_cos_sin(const float *__restrict__ row, int half, float (&c)[W], float (&sn)[W])
{
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
}

template <typename T, bool NEOX, int W, bool VEC, int KU>
static __global__ void __launch_bounds__(kMaxThreads)
    rope_v4(T *q, T *k, const int64_t *__restrict__ positions, const float *__restrict__ cos_sin, int64_t num_tokens,
            int q_heads, int kv_heads, int head_dim, int rotary_dim, int64_t max_pos, int per_token, int jthreads,
            int slices, int64_t num_groups)
{
    constexpr int V = 16 / sizeof(T);
    static_assert(!VEC || (NEOX ? W == V : 2 * W == V), "a vector item is one 16-byte word per half");
    const int i = threadIdx.x % per_token;
    const int64_t g = (int64_t)blockIdx.x * (blockDim.x / per_token) + threadIdx.x / per_token;
    if (g >= num_groups) return;
    const int half = rotary_dim / 2, groups = half / W, heads = q_heads + kv_heads;
    const int j0 = i % jthreads, s = i / jthreads;

    /* Pipeline state: cos/sin of token t (column group j0) in flight or landed in c/sn, and the
     * position of token t + G in flight in pos_next. */
    int64_t t = g, pos = positions[t];
    bool ok = pos >= 0 && pos < max_pos; /* out of range: token left unrotated, cache never read */
    float c[W], sn[W];
    if (ok && j0 < groups) load_cos_sin<W, VEC>(cos_sin + pos * rotary_dim + j0 * W, half, c, sn);
    int64_t pos_next = t + num_groups < num_tokens ? positions[t + num_groups] : -1;

    for (; t < num_tokens; t += num_groups) {
        T *qt = q + t * q_heads * head_dim, *kt = k + t * kv_heads * head_dim;
        for (int j = j0; j < groups; j += jthreads) {
            const int off = NEOX ? j * W : 2 * j * W;
            if (j != j0 && ok) load_cos_sin<W, VEC>(cos_sin + pos * rotary_dim + j * W, half, c, sn); /* rare: > 256 groups */
            for (int h0 = s; h0 < heads; h0 += slices * KU) {
                /* Phase 1: this trip's KU items; the cos/sin loaded one token ago overlap them. */
                uint4 ra[KU], rb[KU];
                T xa[KU][VEC ? 1 : 2 * W]; /* scalar path only */
                T *x[KU];
#pragma unroll
                for (int u = 0; u < KU; u++) {
                    const int h = h0 + u * slices;
                    x[u] = !ok || h >= heads ? nullptr : (h < q_heads ? qt + h * head_dim : kt + (h - q_heads) * head_dim) + off;
                    if (!x[u]) continue;
                    if constexpr (VEC) {
                        ra[u] = load16(x[u]);
                        if constexpr (NEOX) rb[u] = load16(x[u] + half);
                    } else {
#pragma unroll
                        for (int r = 0; r < W; r++) {
                            xa[u][2 * r] = NEOX ? x[u][r] : x[u][2 * r];
                            xa[u][2 * r + 1] = NEOX ? x[u][half + r] : x[u][2 * r + 1];
                        }
                    }
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
                        store16(x[u], kl::pack<T>(o1));
                        store16(x[u] + half, kl::pack<T>(o2));
                    } else if constexpr (VEC) {
                        float o[V];
#pragma unroll
                        for (int r = 0; r < W; r++) {
                            const float x1 = kl::elem_f32<T>(ra[u], 2 * r), x2 = kl::elem_f32<T>(ra[u], 2 * r + 1);
                            o[2 * r] = x1 * c[r] - x2 * sn[r], o[2 * r + 1] = x2 * c[r] + x1 * sn[r];
                        }
                        store16(x[u], kl::pack<T>(o));
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
        /* Advance the pipeline: the next token's position landed during this token's loads, so its
         * cos/sin row goes out now and the position after it behind it; neither is waited on here. */
        pos = pos_next;
        ok = pos >= 0 && pos < max_pos;
        if (ok && j0 < groups) load_cos_sin<W, VEC>(cos_sin + pos * rotary_dim + j0 * W, half, c, sn);
        const int64_t t2 = t + 2 * num_groups;
        pos_next = t2 < num_tokens ? positions[t2] : -1;
    }
}

template <typename T, bool NEOX, int W, bool VEC, int KU>
static cudaError_t launch_k(const struct kl_rope_params *p, cudaStream_t stream)
{
    const int groups = (int)(p->rotary_dim / 2 / W), heads = (int)(p->num_q_heads + p->num_kv_heads);
    const int jthreads = groups < kMaxThreads ? groups : kMaxThreads;
    int slices = (heads + KU - 1) / KU;
    if (jthreads * slices > kMaxThreads) slices = kMaxThreads / jthreads;
    const int per_token = jthreads * slices;
    int tpb = kMaxThreads / per_token; /* thread groups per block */
    if (tpb < 1) tpb = 1;
    auto kernel = rope_v4<T, NEOX, W, VEC, KU>;
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t rc = cudaGetDevice(&dev);
    if (rc == cudaSuccess) rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (rc == cudaSuccess) rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, tpb * per_token, 0);
    if (rc != cudaSuccess) return rc;
    /* As many groups as are resident at once, then trimmed so every group walks the same number of
     * tokens (16384 tokens on 1056 resident groups: 16 each on 1024), which avoids a ragged tail. */
    int64_t resident = (int64_t)sms * (per_sm > 0 ? per_sm : 1) * tpb;
    const int64_t trips = (p->num_tokens + resident - 1) / resident;
    const int64_t num_groups = (p->num_tokens + trips - 1) / trips;
    const int64_t blocks = (num_groups + tpb - 1) / tpb;
    kernel<<<(unsigned)blocks, tpb * per_token, 0, stream>>>(
        (T *)p->q, (T *)p->k, p->positions, p->cos_sin_cache, p->num_tokens, (int)p->num_q_heads, (int)p->num_kv_heads,
        (int)p->head_dim, (int)p->rotary_dim, p->max_pos, per_token, jthreads, slices, num_groups);
    return cudaSuccess;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T>
static cudaError_t launch_t(const struct kl_rope_params *p, cudaStream_t stream)
{
    constexpr int V = 16 / sizeof(T);
    const bool vec = p->head_dim % V == 0 && aligned16(p->q) && aligned16(p->cos_sin_cache) && (p->num_kv_heads == 0 || aligned16(p->k)) &&
                     (p->is_neox ? (p->rotary_dim / 2) % V == 0 : p->rotary_dim % V == 0);
    if (p->is_neox) return vec ? launch_k<T, true, V, true, kItems>(p, stream) : launch_k<T, true, 1, false, kItems>(p, stream);
    return vec ? launch_k<T, false, V / 2, true, kItems>(p, stream) : launch_k<T, false, 1, false, kItems>(p, stream);
}

static cudaError_t launch(const struct kl_rope_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rope_check_params(p, "v4_prefetch_cos_sin");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    KL_DISPATCH_FLOAT(p->dtype, T, rc = launch_t<T>(p, stream));
    if (rc != cudaSuccess) return rc;
    return cudaGetLastError();
}

KL_VARIANT(rope, v4_prefetch_cos_sin, launch, .min_cc = 70,
           .summary = "persistent token groups, next token's cos/sin prefetched under this token's q/k loads, 2 heads a trip");
