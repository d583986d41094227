/* v29_device_plan: v26's CTA, made persistent over a work list that every CTA plans on the device from
 * the batch's own lengths.
 *
 * What changed from v26, and why: v26's split is planned on the host from max_kv_len, as if every
 * request were that long. On a ragged batch (ragged-b64-p16: 1 to 16384 keys) that plan keeps one chunk
 * a request, so the CTAs of the longest requests read on alone after the others are done: the launch
 * timelines show the ends of the key loops spread over most of the call. Here the grid is one wave (as
 * many CTAs as the SMs hold, G), and each CTA first makes the same plan from kv_indptr and
 * kv_last_page_len. The candidates are the chunks C_s = the longest request's keys / s, rounded up to 64
 * tokens, for s = 1 .. 32 (lane s - 1 of each warp takes one; no more splits than the workspace files).
 * A request of n keys is ceil(n / C) chunks (one when n is 0), and each chunk is an item for each block of
 * up to 8 qo heads of each kv head (HB items). The plan takes the chunk whose items, G at a time, finish
 * in the fewest rounds times work a round (C + KL_DECODE_CTA_TOKENS): the host planner's cost, counted on
 * the real lengths. Items are numbered request by request, chunk by chunk, head block by head block, and
 * CTA c takes items c, c + G, c + 2 G, ...: the HB items of a chunk run side by side on neighbouring CTAs,
 * so memory sees the kv heads' rows of the same slots asked for together, as in v26's grid. Each warp
 * finds an item's request by walking the lengths 32 requests a step from its previous item's. An item is
 * v26's key loop and finish over its chunk: the last CTA to count a request's chunk merges its partials.
 * Between items the ring is the merge area, so a CTA starts its next item after its finish, and the
 * ring's barriers carry on from item to item: each item starts at stage 0, and `flips` holds, a bit a
 * stage, whether the stage has taken an odd number of rounds since the launch, which every wait XORs
 * into its parity (page_ring.cuh). The plan reads the lengths on the device, and G comes from the SMs and
 * the occupancy alone, so a CUDA graph replays the call with any lengths.
 * Why faster (the prediction): on a ragged batch the long requests are cut into chunks that every CTA
 * shares, so the key loops end together; on a uniform batch the cost is v26's plan, so it runs as v26.
 * KL_DECODE_V29_MAX_SPLITS=s (1 to 32) limits the candidates to s splits: how the guide's sweep of the
 * plan was measured.
 * Records its launch's timeline (params.trace): a CTA's first tile is its first item's, its key loop's
 * end its last item's.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v29_device_plan --workload ragged-b64-p16 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

namespace
{

constexpr int kConsumers = 3; /* consumer warps a CTA: warps 0 .. 2 */
constexpr int kGatherers = 3; /* producer warps a CTA: warps 3 .. 5, taking turns by group */
constexpr int kWarps = kConsumers + kGatherers;
constexpr int kCtasPerSm = 4; /* v26's: what the ring's size allows at head_dim 64 and 128 */
constexpr int kThreads = 32 * kWarps;
constexpr int kCandidates = 32; /* chunk sizes the plan weighs: one a lane */
constexpr unsigned kAll = 0xffffffffu;

/* Chunks of request b: one when it has no keys (its item writes the empty output). */
__device__ __forceinline__ int chunks_of(int n, int chunk)
{
    return n > 0 ? (n + chunk - 1) / chunk : 1;
}

__device__ __forceinline__ int warp_max(int v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = max(v, __shfl_sync(kAll, v, (int)(threadIdx.x % 32) ^ off));
    return v;
}

/* The work list's state in shared memory, so that the item loop carries no more than the ring's flips:
 * walk = {the plan's chunk, its items, the request at warp 0's cursor, that request's first item}. */
enum { kChunk, kItems, kCursorB, kCursorFirst, kWalk };

/* The plan every CTA makes into walk[] (every thread calls it; it synchronises twice). */
__device__ __forceinline__ void make_plan(const kl_attention_decode_params &p, int hb_items, int max_splits, int *walk)
{
    __shared__ int longest[kWarps], chunks[kWarps][kCandidates];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, batch = (int)p.batch;
    int n_max = 0;
    for (int b = threadIdx.x; b < batch; b += blockDim.x)
        n_max = max(n_max, kl::decode::kv_len(p, b));
    n_max = warp_max(n_max);
    if (lane == 0) longest[warp] = n_max;
    __syncthreads();
    for (int w = 0; w < kWarps; w++)
        n_max = max(n_max, longest[w]);
    /* Lane s - 1 weighs C_s; warp w counts the chunks of requests 32 w .. 32 w + 31, 32 kWarps on, ... */
    const int s = lane + 1, chunk = max(64, ((n_max + s - 1) / s + 63) / 64 * 64);
    int count = 0;
    for (int b0 = 32 * warp; b0 < batch; b0 += 32 * kWarps) {
        const int mine = b0 + lane < batch ? kl::decode::kv_len(p, b0 + lane) : -1;
        for (int j = 0; j < 32; j++) {
            const int n = __shfl_sync(kAll, mine, j);
            if (n >= 0) count += chunks_of(n, chunk);
        }
    }
    chunks[warp][lane] = count;
    __syncthreads();
    if (warp > 0) return;
    int64_t items = 0;
    for (int w = 0; w < kWarps; w++)
        items += chunks[w][lane];
    items *= hb_items;
    const int64_t rounds = (items + gridDim.x - 1) / gridDim.x;
    int64_t cost = s <= max_splits ? rounds * (chunk + KL_DECODE_CTA_TOKENS) : INT64_MAX;
    int best = lane; /* the cheapest candidate, the fewer splits on a tie */
    for (int off = 16; off > 0; off >>= 1) {
        const int64_t other_cost = __shfl_sync(kAll, (long)cost, lane ^ off);
        const int other = __shfl_sync(kAll, best, lane ^ off);
        if (other_cost < cost || (other_cost == cost && other < best)) cost = other_cost, best = other;
    }
    if (lane == best) walk[kChunk] = chunk, walk[kItems] = (int)items, walk[kCursorB] = 0, walk[kCursorFirst] = 0;
    __syncwarp();
}

/* Warp 0 (every lane): item u's request, chunk and head block into job = {b, split, y, kv_len(b)}, b -1
 * past the work list. The cursor moves on from the previous item's request (u grows), 32 requests a step:
 * lane j counts request b + j's items, and the first lane whose running total passes u names it. */
__device__ __forceinline__ void publish(const kl_attention_decode_params &p, int hb_items, int u, int *walk, int *job)
{
    const int lane = threadIdx.x % 32, chunk = walk[kChunk];
    if (u >= walk[kItems]) {
        if (lane == 0) job[0] = -1;
        return;
    }
    int b = walk[kCursorB], first = walk[kCursorFirst];
    for (;;) {
        const int items = b + lane < p.batch ? hb_items * chunks_of(kl::decode::kv_len(p, b + lane), chunk) : 0;
        int end = items; /* items of requests b .. b + lane */
        for (int off = 1; off < 32; off <<= 1) {
            const int before = __shfl_sync(kAll, end, max(lane - off, 0));
            if (lane >= off) end += before;
        }
        int hit = first + end > u ? lane : 32;
        for (int off = 16; off > 0; off >>= 1)
            hit = min(hit, __shfl_sync(kAll, hit, lane ^ off));
        if (hit < 32) {
            first += __shfl_sync(kAll, end - items, hit);
            b += hit;
            break;
        }
        first += __shfl_sync(kAll, end, 31);
        b += 32;
    }
    __syncwarp(); /* every lane has read walk[] */
    if (lane == 0) {
        const int r = u - first;
        walk[kCursorB] = b, walk[kCursorFirst] = first;
        job[0] = b, job[1] = r / hb_items, job[2] = r % hb_items, job[3] = kl::decode::kv_len(p, b);
    }
}

/* A published item, read from shared memory where it is used: the kernel reads it before its key loop and
 * again after it, so that none of it stays in registers through the loop. */
struct work {
    int b, split, y, n, g, h0, nh, t0, t1;
};
__device__ __forceinline__ work work_of(const kl_attention_decode_params &p, const int *job, const int *walk)
{
    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    work w;
    w.b = job[0], w.split = job[1], w.y = job[2], w.n = job[3];
    w.g = w.y / blocks, w.h0 = w.g * group + w.y % blocks * 8, w.nh = min(8, w.g * group + group - w.h0);
    w.t0 = w.split * walk[kChunk], w.t1 = min(w.n, w.t0 + walk[kChunk]);
    return w;
}

/* Bit st set: stage st takes an odd number of rounds from `tiles` tiles placed from stage 0. */
template <int STAGES> __device__ __forceinline__ uint32_t odd_rounds(int tiles)
{
    uint32_t bits = 0;
    for (int st = 0; st < STAGES; st++)
        bits |= (uint32_t)((tiles > st ? (tiles - 1 - st) / STAGES + 1 : 0) & 1) << st;
    return bits;
}

/* The tensor maps are not read: every tile is gathered by cp.async, as in v26. */
template <typename T, int HD, int STAGES>
__global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v29(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int max_splits)
{
#if KL_SM90A
    constexpr int CW = kConsumers;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw));                     /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last;                 /* this CTA merges the request's partials */
    auto stamp = [&](kl_decode_event e) { /* the launch's timeline, where the caller asks for one */
                                          if (p.trace && threadIdx.x == 0 && blockIdx.x < KL_DECODE_TRACE_CTAS)
                                              p.trace->at[blockIdx.x][e] = kl::ptx::globaltimer();
    };
    stamp(KL_DECODE_START);
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32); /* overlaps the previous kernel's tail */
    stamp(KL_DECODE_RELEASED);

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int hb_items = (int)p.num_kv_heads * blocks, warp = threadIdx.x / 32;
    __shared__ int walk[kWalk], job[2][4]; /* the CTA's k-th item in job[k % 2], published by warp 0 */
    make_plan(p, hb_items, max_splits, walk);
    if (warp == 0) publish(p, hb_items, blockIdx.x, walk, job[0]);
    __syncthreads();
    uint32_t flips = 0; /* stages that have taken an odd number of rounds */
    for (int k = 0; job[k % 2][0] >= 0; k++) {
        const work w = work_of(p, job[k % 2], walk);
        if (w.n == 0) {
            for (int h = 0; h < w.nh; h++)
                kl::decode::write_empty<T>(p, w.b, w.h0 + h, threadIdx.x, blockDim.x);
        } else {
            const int tiles = (w.t1 - w.t0 + 15) / 16;
            float o[S::KSTEPS][4] = {};                         /* the online softmax: O^T, m, l (bf16_ring_tile.cuh) */
            float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */
            if (warp >= CW) {
                /* groups warp - CW, warp - CW + kGatherers, ... of the chunk, whole (v26's call) */
                kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true, true, 1, 0, true, 0, kGatherers>(
                    &k_box, &v_box, &k_row, &v_row, false, p, w.b, w.g, w.t0, w.t1, ring_at, full, empty, 0, warp - CW,
                    flips);
            } else {
                uint32_t qf[S::KSTEPS][2];
                kl::decode::bf16_ring::q_operand<T, HD>(p, w.b, w.h0, w.nh, qf);
                const float scale = p.sm_scale * 1.44269504089f;
                /* Tile i in stage i % STAGES, consumed by warp i % CW, its round's parity flipped by the stage's past.
                 */
                for (int i = warp; i < tiles; i += CW) {
                    const int st = i % STAGES;
                    kl::ptx::mbar_wait(&full[st], (i / STAGES & 1) ^ (flips >> st & 1));
                    if (k == 0 && i == warp) stamp(KL_DECODE_FIRST_TILE); /* the CTA's first tile */
                    const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
                    kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, w.t0 + 16 * i, w.t1, o, m, l);
                    kl::ptx::mbar_arrive(&empty[st]); /* every lane: see v8 */
                }
            }
            __syncthreads(); /* no copy in flight: the ring becomes the merge area */
            stamp(KL_DECODE_LOOP_DONE);

            const work v = work_of(p, job[k % 2], walk); /* read again: the item, not registers kept through the loop */
            float *mrg = reinterpret_cast<float *>(ring);
            if (warp < CW) kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l);
            kl::decode::finish_cta<T, HD, CW>(p, mrg, last, v.b, v.g, v.y % blocks, v.h0, v.nh, v.split,
                                              chunks_of(v.n, walk[kChunk]));
            flips ^= odd_rounds<STAGES>((v.t1 - v.t0 + 15) / 16);
        }
        if (warp == 0) publish(p, hb_items, blockIdx.x + (k + 1) * gridDim.x, walk, job[(k + 1) % 2]);
        /* The merge area is the ring again: this thread's accesses ordered before the next item's copies
         * write the same bytes, then every thread's; the next item is published. */
        kl::ptx::fence_async_smem();
        __syncthreads();
    }
    stamp(KL_DECODE_END);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

/* KL_DECODE_V29_MAX_SPLITS=s (1 .. 32): the plan weighs chunks of at most s splits a request. */
int max_splits_override()
{
    static int s = -1;
    if (s < 0) {
        const char *e = getenv("KL_DECODE_V29_MAX_SPLITS");
        s = e ? atoi(e) : 0;
        if (s < 1 || s > kCandidates) s = kCandidates;
    }
    return s;
}

template <typename T, int HD, int STAGES>
cudaError_t launch_shape(const struct kl_attention_decode_params *p, int max_splits, const kl::decode::page_maps &m,
                         cudaStream_t stream)
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    static_assert((HD == 256 ? 1 : kCtasPerSm) * (S::SMEM + 1024) <= 228 * 1024, "the CTAs' rings fit an SM");
    static int per_sm = 0; /* once per instantiation: more than 48 KB of shared memory, and the CTAs an SM */
    if (!per_sm) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v29<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc == cudaSuccess)
            rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_v29<T, HD, STAGES>, kThreads, S::SMEM);
        if (rc != cudaSuccess || per_sm < 1) {
            per_sm = 0;
            return rc != cudaSuccess ? rc : cudaErrorNotSupported;
        }
    }
    const dim3 grid((unsigned)(per_sm * kl_attention_decode_sms())); /* one wave */
    cudaLaunchAttribute attr[1];                                     /* a programmatic dependent launch, as v26's */
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(kThreads), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v29<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p, max_splits);
}

cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v29_device_plan");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    const int64_t hb_items = p->num_kv_heads * ((p->num_qo_heads / p->num_kv_heads + 7) / 8);
    if (hb_items * p->batch * kCandidates > INT32_MAX) return cudaErrorNotSupported; /* items are ints */
    /* The splits the workspace files (kl_attention_decode_workspace_for): a request's chunks never pass
     * it, since C_s leaves the longest request s chunks. One split needs no workspace. */
    int room = 1;
    while (room < KL_DECODE_MAX_SPLITS && kl_attention_decode_workspace_for(p, room + 1) <= p->workspace_bytes)
        room++;
    const int max_splits = room < max_splits_override() ? room : max_splits_override();
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v29_device_plan", &maps);
    if (rc != cudaSuccess) return rc;
    /* v26's ring: six stages of 16 tokens, two for each gathering warp */
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD,
                             return launch_shape<__nv_bfloat16, HD, 2 * kGatherers>(p, max_splits, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD,
                             return launch_shape<__half, HD, 2 * kGatherers>(p, max_splits, maps, stream));
    }
    return cudaErrorNotSupported;
}

} // namespace

KL_VARIANT(attention_decode, v29_device_plan, launch, .min_cc = 90,
           .summary =
               "v26's CTA made persistent: one wave of CTAs takes turns over chunk items that every CTA plans on "
               "the device from the batch's real lengths (the host planner's cost, counted on them)");
