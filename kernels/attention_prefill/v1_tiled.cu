/* v1_tiled: FlashAttention's tiling on CUDA cores. A block holds a tile of 32 queries of one qo
 * head in shared memory and streams the request's keys through it 32 at a time, keeping a running
 * max m, a running sum l and the output accumulator per query (the online softmax):
 *   s = q k^T (scaled), m' = max(m, rowmax s), p = exp(s - m'), l = l e^(m - m') + sum p,
 *   acc = acc e^(m - m') + p v
 * so each K/V tile is read from global memory once per 32 queries instead of once per query (v0),
 * and no score row is ever stored whole. Tiles of keys that no query of the tile sees (above the
 * causal diagonal) are never loaded: the loop ends at the last key the tile's last query sees.
 * Work mapping: grid (query tiles, qo heads, requests), 128 threads; thread t owns query row t / 4
 * of the tile and, with the 3 lanes beside it (a quad), that row's 32 scores (8 each) and its head_dim
 * outputs (columns t % 4 + 4k), so row max and row sum are two shuffles inside the quad.
 * Bound: shared memory, not the FMA pipe: every FMA reads two shared words (q and k, or p and v), and
 * the SM's shared-memory pipe serves one warp-wide load per clock, so at most half the FMA issue rate
 * and ~1/8 of the float32 peak; expected ~5-10 TFLOP/s on an H100.
 * Run alone: build/kernlab bench attention_prefill --variant v1_tiled */
#include <math.h>
#include <stdio.h>

#include "kernels/attention_prefill/paged.cuh"
#include "kernels/variant.h"

namespace {

constexpr int kThreads = 128, kTileQ = 32, kTileK = 32;
constexpr int kKeysPerThread = kTileK / 4; /* a quad shares a row: 4 threads x 8 keys */

/* Shared memory, float32, rows padded by one word so the quad's four columns and the eight rows a
 * warp touches fall in different banks. */
template <int D> struct smem_layout {
    float q[kTileQ][D + 1];
    float k[kTileK][D + 1];
    float v[kTileK][D + 1];
    float p[kTileQ][kTileK + 1];
    int64_t key_offset[kTileK]; /* element offset of each key row of the tile in k_cache / v_cache */
};

/* Max and sum over the 4 lanes of a quad (lanes 4i..4i+3 hold one row). */
__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) prefill_v1(const kl_attention_prefill_params p, kl::prefill::fast_div page)
{
    using namespace kl::prefill;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    smem_layout<D> &sm = *reinterpret_cast<smem_layout<D> *>(smem_raw);
    const request r = load_request(p, blockIdx.z);
    const int tile_q0 = blockIdx.x * kTileQ; /* first query of the tile, within the request */
    if (tile_q0 >= r.q_len) return;          /* the grid covers the longest request */
    const int head = blockIdx.y, kv_head = head / (int)(p.num_qo_heads / p.num_kv_heads);
    const int row = threadIdx.x / 4, quad_lane = threadIdx.x % 4;
    const int i = tile_q0 + row; /* this thread's query, within the request */
    const int n_seen = i < r.q_len ? visible_keys(p.causal, r.q_len, r.kv_len, i) : 0;
    /* The keys any query of the tile sees: its last query sees the most. */
    const int n_tile = visible_keys(p.causal, r.q_len, r.kv_len, min(tile_q0 + kTileQ, r.q_len) - 1);
    const T *q = (const T *)p.q, *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    const float scale = p.sm_scale * kLog2e; /* base-2 softmax: exp2(s * log2e) = e^s */

    /* The query tile, as float32; rows past the request's end are zeros (computed, never written). */
    for (int e = threadIdx.x; e < kTileQ * D; e += kThreads) {
        const int rr = e / D, c = e % D, qi = tile_q0 + rr;
        sm.q[rr][c] = qi < r.q_len ? kl::to_f32(q[((int64_t)(r.q0 + qi) * p.num_qo_heads + head) * D + c]) : 0.f;
    }

    float m = -INFINITY, l = 0.f; /* running max (base 2, scaled) and sum of this row */
    float acc[D / 4];             /* this row's outputs at columns quad_lane + 4k */
#pragma unroll
    for (int c = 0; c < D / 4; c++) acc[c] = 0.f;

    for (int k0 = 0; k0 < n_tile; k0 += kTileK) {
        /* Page lookups once per key row, then the rows: a gather from wherever the pages are. */
        if (threadIdx.x < kTileK)
            sm.key_offset[threadIdx.x] = k0 + (int)threadIdx.x < r.kv_len
                                             ? cache_offset(p, p.kv_indices, r, page, k0 + threadIdx.x, kv_head)
                                             : -1;
        __syncthreads(); /* offsets visible; also: the previous tile's k, v, p are no longer read */
        for (int e = threadIdx.x; e < kTileK * D; e += kThreads) {
            const int kk = e / D, c = e % D;
            const int64_t off = sm.key_offset[kk];
            sm.k[kk][c] = off >= 0 ? kl::to_f32(kc[off + c]) : 0.f;
            sm.v[kk][c] = off >= 0 ? kl::to_f32(vc[off + c]) : 0.f;
        }
        __syncthreads(); /* the tile is loaded */

        /* Scores of this row for keys quad_lane + 4t, masked to -inf where the query does not see them. */
        float s[kKeysPerThread];
#pragma unroll
        for (int t = 0; t < kKeysPerThread; t++) {
            const int kk = quad_lane + 4 * t;
            float dot = 0.f;
#pragma unroll 8
            for (int c = 0; c < D; c++) dot += sm.q[row][c] * sm.k[kk][c];
            s[t] = k0 + kk < n_seen ? dot * scale : -INFINITY;
        }
        float tile_max = s[0];
#pragma unroll
        for (int t = 1; t < kKeysPerThread; t++) tile_max = fmaxf(tile_max, s[t]);
        const float m_new = fmaxf(m, quad_max(tile_max));
        /* A row that has seen no key yet keeps m = -inf; subtracting 0 instead keeps exp2(-inf) = 0
         * and avoids (-inf) - (-inf) = NaN. */
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f(m - m_ref); /* rescales what was accumulated under the old max */
        float tile_sum = 0.f;
#pragma unroll
        for (int t = 0; t < kKeysPerThread; t++) {
            const float pt = exp2f(s[t] - m_ref);
            sm.p[row][quad_lane + 4 * t] = pt;
            tile_sum += pt;
        }
        l = l * alpha + quad_sum(tile_sum);
        m = m_new;
        __syncwarp(); /* the quad's weights (written by its 4 lanes) are read by all 4 below */
#pragma unroll
        for (int c = 0; c < D / 4; c++) {
            float o = acc[c] * alpha;
            for (int kk = 0; kk < kTileK; kk++) o += sm.p[row][kk] * sm.v[kk][quad_lane + 4 * c];
            acc[c] = o;
        }
    }

    if (i < r.q_len) {
        T *out = (T *)p.out + ((int64_t)(r.q0 + i) * p.num_qo_heads + head) * D;
        const float inv_l = l > 0.f ? 1.f / l : 0.f; /* a row that saw no key writes zeros */
#pragma unroll
        for (int c = 0; c < D / 4; c++) out[quad_lane + 4 * c] = kl::from_f32<T>(acc[c] * inv_l);
        if (quad_lane == 0)
            p.lse[(int64_t)(r.q0 + i) * p.num_qo_heads + head] = l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
    }
}

template <typename T, int D>
cudaError_t launch_d(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    const size_t smem = sizeof(smem_layout<D>);
    static bool opted_in = false; /* more than 48 KB of shared memory is an opt-in, once per kernel */
    if (!opted_in) {
        cudaError_t rc = cudaFuncSetAttribute(prefill_v1<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (rc != cudaSuccess) return rc;
        opted_in = true;
    }
    const dim3 grid((unsigned)((p->max_q_len + kTileQ - 1) / kTileQ), (unsigned)p->num_qo_heads, (unsigned)p->batch);
    prefill_v1<T, D><<<grid, kThreads, smem, stream>>>(*p, kl::prefill::make_fast_div((uint32_t)p->page_size));
    return cudaGetLastError();
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_prefill_check_params(p, "v1_tiled");
    if (rc != cudaSuccess || p->total_q == 0 || p->max_q_len == 0) return rc;
    if (p->batch > 65535) {
        fprintf(stderr, "attention_prefill v1_tiled: batch %lld > 65535 (grid z)\n", (long long)p->batch);
        return cudaErrorInvalidValue;
    }
    switch (p->head_dim) {
    case 64: KL_DISPATCH_FLOAT(p->dtype, T, return launch_d<T, 64>(p, stream)); break;
    case 128: KL_DISPATCH_FLOAT(p->dtype, T, return launch_d<T, 128>(p, stream)); break;
    case 256: KL_DISPATCH_FLOAT(p->dtype, T, return launch_d<T, 256>(p, stream)); break;
    }
    return cudaErrorNotSupported; /* head_dim 64, 128 or 256 only */
}

} // namespace

KL_VARIANT(attention_prefill, v1_tiled, launch, .min_cc = 80,
           .summary = "online softmax over 32x32 tiles in shared memory, float32 CUDA cores, causal tiles skipped");
