/* v5_tile_inflight: the fused RoPE + e4m3 quantize + store with four 16-byte qkv loads in flight a thread.
 * From v4: a v4 thread loads one 16-byte chunk (and, neox, its partner again), then its position, then 2-4
 * cos/sin loads for 16 bytes of data, computes and exits: few bytes in flight per SM, so it stalls on
 * long_scoreboard well under the DRAM bandwidth. Here a thread owns a PAIR of chunks of one head (neox
 * rotary: both halves of its pairs, chunks i and i + m, so no chunk is loaded twice; elsewhere chunks j and
 * j + ceil(n/2), lanes on consecutive chunks so every access instruction stays coalesced) for a TILE of
 * kTile consecutive tokens, and issues all 2 x kTile qkv loads first; the block loads the tile's cos/sin
 * rows once into shared memory under them, so no thread holds the table in registers.
 * Grid: token tiles x (heads x pairs a head, in blocks of <= 96): a quarter of v4's threads; small blocks,
 * so the barrier after the table holds few warps.
 * The arithmetic is v4's, operation for operation: RoPE in float32 as fmaf(x, c, -+(p * s)), K/V times
 * __frcp_rn(scale), cvt.rn.satfinite e4m3x2; q_out one 16-byte store a chunk, a cache row 8 bytes.
 * A small grid (a decode batch) on sm_90: v4's own launcher, a programmatic dependent launch with one chunk
 * a thread: there the time is a chain of dependent trips, which a tile of two tokens a thread only
 * lengthens. Shapes v4 runs one element a thread, and rotary spans past the table (> 256): v4's launcher
 * too.
 * Bound: DRAM bandwidth on qkv read + q written + K/V bytes written (lab/store/perf.c's fused model).
 * Run alone: build/kernlab bench store --variant v5_tile_inflight --workload fused-prefill-8k */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/store/fused_pairs.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kThreads = 96;        /* at most, per block; a token tile's pairs take ceil(pairs / 96) blocks */
constexpr int kThreadsPerSm = 1024; /* few tokens (the grid fits beside the previous kernel's blocks): v4 */
constexpr int kTile = 2;            /* tokens a thread carries: 4 x 16 B of qkv in flight */
constexpr int kRegisters = 64;      /* a thread's at most: ten blocks an SM, 64 B in flight a thread */
constexpr int kMaxRotary = 256;     /* the shared cos/sin table's row; a longer rotary span: v4 */

static __device__ unsigned bad_slot; /* see store.h: set when a slot >= num_slots is skipped */

/* qkv is read once: at many tokens an evict-first load keeps it from pushing the cache rows attention reads
 * next out of L2. */
__device__ __forceinline__ uint4 load16(const void *p) { return __ldcs(reinterpret_cast<const uint4 *>(p)); }

/* Chunks a and b (b where has_b) of one head for each token of the tile inside num_tokens: x is the head's
 * row of token t0, rows `width` elements apart. */
template <typename T>
__device__ __forceinline__ void load_tile(const T *x, int width, int64_t t0, int64_t num_tokens, int a, int b,
                                          bool has_b, uint4 (&xa)[kTile], uint4 (&xb)[kTile])
{
#pragma unroll
    for (int u = 0; u < kTile; u++) {
        if (t0 + u >= num_tokens) break;
        xa[u] = load16(x + (int64_t)u * width + 8 * a);
        if (has_b) xb[u] = load16(x + (int64_t)u * width + 8 * b);
    }
}

/* Pair j (blockIdx.y * blockDim.x + threadIdx.x) of tokens kTile * blockIdx.x .. + kTile - 1: pair j %
 * pairs of head j / pairs (fused_pairs.cuh's cut of a head: m, rest, pairs a head). */
template <typename T, bool NEOX>
static __global__ void __launch_bounds__(kThreads, 65536 / (kThreads * kRegisters))
    rope_quant_store_v5(const T *__restrict__ qkv, T *q_out, const int64_t *__restrict__ positions,
                        const int64_t *__restrict__ slots, const float *__restrict__ cos_sin,
                        const float *__restrict__ k_scale, const float *__restrict__ v_scale, uint8_t *k_cache,
                        uint8_t *v_cache, int64_t num_tokens, int q_heads, int kv_heads, int head_dim,
                        int rotary_dim, int64_t max_pos, int64_t num_slots, int m, int rest, int pairs)
{
    static_assert(sizeof(T) == 2, "a chunk is 8 elements of 16 bits: one 16-byte word");
    /* The tile's cos/sin rows, loaded once a block: a thread would otherwise hold 16 floats a token in
     * registers across the DRAM wait, and issue more cos/sin loads than qkv loads. */
    __shared__ __align__(16) float table[kTile][kMaxRotary];
    const int heads = q_heads + 2 * kv_heads, chunks = head_dim / 8, half = rotary_dim / 2;
    const int j = blockIdx.y * blockDim.x + threadIdx.x, h = j / pairs, i = j - h * pairs;
    const bool is_q = h < q_heads, is_v = h >= q_heads + kv_heads, live = h < heads;
    const int kh = is_v ? h - q_heads - kv_heads : h - q_heads; /* the kv head of a k or v pair */
    const kl::store_fused::pair_chunks pc =
        kl::store_fused::chunks_of<NEOX>(i, m, rest, chunks, rotary_dim, live && !is_v); /* chunks a, b */
    const int64_t t0 = (int64_t)blockIdx.x * kTile;
    const T *x0 = qkv + (t0 * heads + h) * (int64_t)head_dim; /* head h of token t0 */

    uint4 xa[kTile], xb[kTile];
    /* The qkv loads go out first, all 2 x kTile of them, and overlap the position -> cos/sin chain below
     * (two dependent trips). */
    if (live) load_tile<T>(x0, heads * head_dim, t0, num_tokens, pc.a, pc.b, pc.has_b, xa, xb);

    int64_t slot[kTile];
    bool rotate_u[kTile];
#pragma unroll
    for (int u = 0; u < kTile; u++) {
        const bool in = t0 + u < num_tokens;
        const int64_t pos = in ? __ldg(positions + t0 + u) : -1;
        slot[u] = in && !is_q ? __ldg(slots + t0 + u) : -1;
        rotate_u[u] = pc.rot_a && pos >= 0 && pos < max_pos; /* else left as it is */
    }
    /* Row u of the table: cos_sin's row of token t0 + u, 16 bytes a thread (rotary_dim % 8 == 0 and the
     * table 16-byte aligned: the launcher checked); rows no thread rotates with are left unset. */
    const int quads = rotary_dim / 4;
    for (int e = threadIdx.x; e < kTile * quads; e += blockDim.x) {
        const int u = e / quads, q4 = e - u * quads;
        const int64_t pos = t0 + u < num_tokens ? __ldg(positions + t0 + u) : -1;
        if (pos >= 0 && pos < max_pos)
            *reinterpret_cast<float4 *>(&table[u][4 * q4]) =
                __ldg(reinterpret_cast<const float4 *>(cos_sin + pos * rotary_dim) + q4);
    }
    const float inv_scale = is_q || !live ? 1.0f : __frcp_rn(__ldg((is_v ? v_scale : k_scale) + kh));
    __syncthreads(); /* the table is whole before any thread reads another's quads */
    if (!live) return;

#pragma unroll
    for (int u = 0; u < kTile; u++) {
        const int64_t t = t0 + u;
        if (t >= num_tokens) break; /* the last tile's tail */
        if (!is_q && slot[u] < 0) continue; /* a skipped token's q is still rotated and written */
        if (!is_q && slot[u] >= num_slots) {
            if (pc.a == 0) bad_slot = 1;
            continue;
        }
        float c[8], s[8];
        if (rotate_u[u]) kl::store_fused::cos_sin_of<NEOX>(table[u], half, pc, c, s);
        const uint4 wa = xa[u], wb = pc.has_b ? xb[u] : wa; /* wb unused where the pair has no b */
        /* q to q_out; k and v to their cache rows, plain stores (attention reads them back soon) */
        T *q_row = is_q ? q_out + (t * q_heads + h) * (int64_t)head_dim : nullptr;
        uint8_t *cache_row =
            is_q ? nullptr : (is_v ? v_cache : k_cache) + (slot[u] * kv_heads + kh) * (int64_t)head_dim;
        kl::store_fused::write_pair<T, NEOX>(wa, wb, pc, rotate_u[u], c, s, q_row, cache_row, inv_scale);
    }
}

/* The grid for p: the pairs of a head (m = rotary_dim / 16 neox pairs, 0 interleaved, then the rest of
 * the chunks in pairs), a token tile's pairs in per_tile blocks of `threads`, and the tiles. */
struct tile_grid {
    int m, rest, pairs;
    unsigned per_tile, threads;
    int64_t tiles;
};
static tile_grid grid_of(const struct kl_store_params *p)
{
    tile_grid g;
    const int chunks = (int)(p->head_dim / 8);
    g.m = p->is_neox ? (int)(p->rotary_dim / 16) : 0;
    g.rest = (chunks - 2 * g.m + 1) / 2, g.pairs = g.m + g.rest;
    kl::split_even((p->num_qo_heads + 2 * p->num_kv_heads) * g.pairs, kThreads, &g.per_tile, &g.threads);
    g.tiles = (p->num_tokens + kTile - 1) / kTile;
    return g;
}

template <typename T, bool NEOX>
static cudaError_t launch_k(const struct kl_store_params *p, const tile_grid &g, cudaStream_t stream)
{
    rope_quant_store_v5<T, NEOX><<<dim3((unsigned)g.tiles, g.per_tile), g.threads, 0, stream>>>(
        (const T *)p->qkv, (T *)p->q_out, p->positions, p->slots, p->cos_sin_cache, p->k_scale, p->v_scale,
        (uint8_t *)p->k_cache, (uint8_t *)p->v_cache, p->num_tokens, (int)p->num_qo_heads, (int)p->num_kv_heads,
        (int)p->head_dim, (int)p->rotary_dim, p->max_pos, p->num_slots, g.m, g.rest, g.pairs);
    return cudaGetLastError();
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_fused_params(p, "v5_tile_inflight");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    /* v4's vector condition (store.h), and a rotary span that fits the shared table */
    const bool vec = kl_store_fused_chunks(p) && p->rotary_dim <= kMaxRotary;
    /* small: a grid that would start beside the previous kernel's blocks (a decode batch), on sm_90 */
    const tile_grid g = vec ? grid_of(p) : tile_grid{}; /* a head of whole chunks only where vec */
    const kl::device_caps dev = kl::this_device();
    const bool small = vec && dev.cc >= 90 && g.tiles * g.per_tile * g.threads <= (int64_t)dev.sms * kThreadsPerSm;
    if (!vec || small) { /* v4's own launcher: a decode batch, its scalar path, or a long rotary span */
        const auto v4 = (kl_store_launch_fn)kl_variant_launcher("store", "v4_rope_quant_store", "v5_tile_inflight");
        return v4 ? v4(p, stream) : cudaErrorInvalidValue;
    }
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    if (p->dtype == KL_BF16)
        rc = p->is_neox ? launch_k<__nv_bfloat16, true>(p, g, stream) : launch_k<__nv_bfloat16, false>(p, g, stream);
    else rc = p->is_neox ? launch_k<__half, true>(p, g, stream) : launch_k<__half, false>(p, g, stream);
    if (rc != cudaSuccess) return rc;
    return kl_store_validate_end(p, flag, stream, "v5_tile_inflight");
}

KL_VARIANT(store, v5_tile_inflight, launch, .min_cc = 80,
           .summary = "fused: a thread owns both chunks of a pair for 2 tokens, 4 x 16 B qkv loads before any use; "
                      "a decode batch: v4");
