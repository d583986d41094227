/* The TMA side of the decode variants that feed a ring of shared-memory stages from the paged cache
 * with bulk tensor copies (v8_tma_pages, v12_cp_async_gather and v13_cluster_merge: 16-bit K/V;
 * v9_fp8_tma_pages, v10_fp8_page_heads and v14_fp8_early_release: e4m3 codes): the cache's tensor maps
 * on the host; on the device the ring's barrier setup before the PDL wait, and the producer warp's loop
 * (v17_two_gather_warps: two producer warps sharing it).
 *
 * A stage holds one tile of 16 tokens of HEADS consecutive kv heads (1 for v8 and v9): its K half,
 * then its V half; a half is HEADS head tiles, each BLOCKS blocks of 16 rows x 128 bytes (64 16-bit
 * columns or 128 codes), 128-byte swizzled by the copies (16-byte chunk c of a row stored at chunk
 * c ^ (row % 8); each stage starts 1024-byte aligned). Where the page size is a multiple of 16 a
 * whole tile is 16 consecutive slots of one page and comes in 2 x HEADS x BLOCKS boxes of 16 rows,
 * issued together, so the heads' rows of a slot (adjacent in the cache) are asked of memory at once.
 * Other pages (page 1, or any size not a multiple of 16), and a request's last partial tile, gather:
 * each of the 16 rows of every head tile and block is a box of 1 row (v12: cp.async, 16 bytes a lane),
 * landing at the row's place in the same layout; rows past the chunk copy its last token again
 * (finite data the consumers mask), so every tile brings the same bytes to its full barrier. After
 * the key loop the CTA finishes with decode.cuh's finish_cta (v10 and v14, over their HEADS:
 * finish_cta_heads). */
#pragma once

#include <cudaTypedefs.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention_decode/attention_decode.h"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/tma_map.cuh"

namespace kl::decode {

/* ---- host ---- */

/* The tensor maps of one launch: both caches as 16-slot boxes (boxes 1) and as single slots. */
struct page_maps {
    CUtensorMap k_box, v_box, k_row, v_row;
    int boxes;
};

/* Both caches' maps; the 16-slot boxes only where a page is whole 16-slot runs. No slots (every
 * request empty): zeroed maps, no copy is issued. */
inline cudaError_t make_page_maps(const struct kl_attention_decode_params *p, kl::cache_elem elem, const char *who,
                                  page_maps *m)
{
    memset(m, 0, sizeof *m);
    const int64_t slots = p->num_pages * p->page_size;
    if (slots == 0) return cudaSuccess;
    m->boxes = p->page_size % 16 == 0;
    const int64_t hd = p->head_dim, kvh = p->num_kv_heads;
    cudaError_t rc = kl::encode_cache_map(&m->k_row, p->k_cache, elem, hd, kvh, slots, 1, who);
    if (rc == cudaSuccess) rc = kl::encode_cache_map(&m->v_row, p->v_cache, elem, hd, kvh, slots, 1, who);
    if (rc == cudaSuccess && m->boxes) rc = kl::encode_cache_map(&m->k_box, p->k_cache, elem, hd, kvh, slots, 16, who);
    if (rc == cudaSuccess && m->boxes) rc = kl::encode_cache_map(&m->v_box, p->v_cache, elem, hd, kvh, slots, 16, who);
    return rc;
}

/* How many clusters of `cluster` CTAs (along z, 1 to 8) of KERNEL, launched with THREADS threads and SMEM
 * bytes of dynamic shared memory, the GPU runs at once: at least 1, asked once a size. A cluster waits
 * until all of its CTAs fit one GPC together, so the cluster rungs (v13, v23, v32) keep their plans to
 * what one wave of clusters holds. */
template <auto KERNEL, int THREADS, int SMEM> int max_active_clusters(int cluster)
{
    static int fit[9] = {0};
    if (!fit[cluster]) {
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 1, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = (unsigned)cluster;
        cudaLaunchConfig_t cfg = {dim3(1, 1, (unsigned)cluster), dim3(THREADS), (size_t)SMEM, 0, attr, 1};
        if (cudaOccupancyMaxActiveClusters(&fit[cluster], KERNEL, &cfg) != cudaSuccess || fit[cluster] < 1)
            fit[cluster] = 1;
    }
    return fit[cluster];
}

/* ---- device ---- */

/* The ring's barriers, then the wait on the previous kernel: thread 0 sets up full[s] counting
 * full_arrivals (the producer's) and empty[s] counting empty_arrivals (the consumers') for each of the
 * STAGES stages, the block meets, and only then does it wait for the previous grid, so the setup
 * overlaps that grid's tail. After it q, the page table and the workspace (any of them possibly the
 * previous kernel's output) may be read. */
template <int STAGES>
__device__ __forceinline__ void init_ring_then_wait(uint64_t *full, uint64_t *empty, int full_arrivals,
                                                    int empty_arrivals)
{
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++)
            kl::ptx::mbar_init(&full[s], full_arrivals), kl::ptx::mbar_init(&empty[s], empty_arrivals);
        kl::ptx::mbar_init_fence();
    }
    __syncthreads(); /* the barriers are initialised before any thread or copy uses them */
    kl::ptx::pdl_release(); /* the next kernel may launch; its pdl_wait waits for this grid to end */
    kl::ptx::pdl_wait();
}

/* One tile's rows by cp.async (produce_page_tiles with CP_ASYNC_ROWS): lane j of the warp holds in
 * `slots` the slot of its group's token j, and the tile is the group's half `half` (tokens 16 half ..
 * 16 half + 15). The tile's 2 x HEADS x 16 rows (K
 * then V, head, row) of BLOCKS x 128 bytes go in order, 32 16-byte chunks a warp instruction: chunk c
 * of a row to block c / 8, chunk c % 8 ^ r % 8, as the boxes' swizzle places it. GATHERERS warps share
 * the tile (v17): gatherer G issues instructions G, G + GATHERERS, ...; EVICT_FIRST copies under
 * `policy`. */
template <int BLOCKS, int HEADS, int GATHERERS = 1, int G = 0, bool EVICT_FIRST = false>
__device__ __forceinline__ void gather_rows_cp_async(const kl_attention_decode_params &p, int g0, int slots, int half,
                                                     uint32_t stage, uint64_t policy = 0)
{
    constexpr int CHUNKS = 8 * BLOCKS, ROW_BYTES = 128 * BLOCKS; /* of one head's row */
    constexpr int STEPS = 2 * HEADS * 16 * CHUNKS / 32;
    constexpr uint32_t HEAD_TILE = 16 * ROW_BYTES, TILE_HALF = HEADS * HEAD_TILE;
    static_assert(STEPS % GATHERERS == 0 && G < GATHERERS, "the gatherers share a tile's instructions evenly");
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < STEPS / GATHERERS; k++) {
        const int step = GATHERERS * k + G; /* a constant: the unrolled loop's addressing folds */
        const int f = 32 * step + lane, row = f / CHUNKS, c = f % CHUNKS; /* row: (K or V, head, r) */
        const int kv = row / (16 * HEADS), head = row / 16 % HEADS, r = row % 16;
        const int slot = __shfl_sync(0xffffffffu, slots, 16 * half + r);
        const unsigned char *cache = static_cast<const unsigned char *>(kv ? p.v_cache : p.k_cache);
        const unsigned char *src = cache + ((int64_t)slot * p.num_kv_heads + g0 + head) * ROW_BYTES + 16 * c;
        const uint32_t dst = stage + kv * TILE_HALF + head * HEAD_TILE + (c / 8) * 16 * 128 + r * 128 +
                             ((c % 8) ^ (r % 8)) * 16;
        if constexpr (EVICT_FIRST) kl::ptx::cp_async_16_hint(dst, src, policy);
        else kl::ptx::cp_async_16(dst, src, true);
    }
}

/* gather_rows_cp_async's copies with fewer instructions (v18): a lane copies chunk lane % CHUNKS of
 * its rows in every tile, so its sources are k_lane / v_lane (the cache at kv head g0 and that chunk)
 * plus the row's slot times row_stride, one IMAD.WIDE each, and a row's slot, shuffled once, serves its
 * K copy and its V copy. With r = ROWS x step % 16 + lane / CHUNKS, r % 8 is (ROWS x step % 8) XOR
 * lane / CHUNKS, so the swizzle is a lane's constant XOR the step's. */
template <int BLOCKS, int HEADS, int GATHERERS = 1, int G = 0, bool EVICT_FIRST = false>
__device__ __forceinline__ void gather_rows_lean(const unsigned char *k_lane, const unsigned char *v_lane,
                                                 uint32_t row_stride, int slots, int half, uint32_t stage,
                                                 uint64_t policy = 0)
{
    constexpr int CHUNKS = 8 * BLOCKS, ROW_BYTES = 128 * BLOCKS, ROWS = 32 / CHUNKS; /* rows a warp instruction */
    constexpr int STEPS = HEADS * 16 / ROWS; /* instructions of a tile's K, and as many of its V */
    constexpr uint32_t HEAD_TILE = 16 * ROW_BYTES, TILE_HALF = HEADS * HEAD_TILE;
    static_assert(STEPS % GATHERERS == 0 && G < GATHERERS, "the gatherers share a tile's instructions evenly");
    const int lane = threadIdx.x % 32, c = lane % CHUNKS, sub = lane / CHUNKS;
    const uint32_t lane_at = stage + (c / 8) * 16 * 128 + sub * 128;
    const int swizzle = (c % 8) ^ sub;
#pragma unroll
    for (int k = 0; k < STEPS / GATHERERS; k++) {
        const int step = GATHERERS * k + G, head = ROWS * step / 16, r0 = ROWS * step % 16; /* constants */
        const uint32_t slot = (uint32_t)__shfl_sync(0xffffffffu, slots, 16 * half + r0 + sub);
        const unsigned char *ks = k_lane + (uint64_t)slot * row_stride + head * ROW_BYTES;
        const unsigned char *vs = v_lane + (uint64_t)slot * row_stride + head * ROW_BYTES;
        const uint32_t dst = lane_at + head * HEAD_TILE + r0 * 128 + ((swizzle ^ (r0 % 8)) << 4);
        if constexpr (EVICT_FIRST) {
            kl::ptx::cp_async_16_hint(dst, ks, policy);
            kl::ptx::cp_async_16_hint(dst + TILE_HALF, vs, policy);
        } else {
            kl::ptx::cp_async_16(dst, ks, true);
            kl::ptx::cp_async_16(dst + TILE_HALF, vs, true);
        }
    }
}

/* The producer warp: tiles 0 .. tiles - 1 of tokens t0 .. t1 - 1 of request b, kv heads g0 .. g0 +
 * HEADS - 1, into stage i % STAGES of the ring at ring_at (tile i's round i / STAGES; but see ring_pos),
 * each after its consumers handed the stage back on empty[st] and with its bytes counted on full[st]. COLS: the
 * elements a 128-byte box row holds. Lane j looks up the slot of token t0 + 32 k + j (group k: tiles
 * 2k and 2k + 1); a token past t1 takes t1 - 1's slot. ahead[k % AHEAD] holds group k's slots from
 * AHEAD groups before its copies, so the page-table loads overlap the ring's waits.
 * CP_ASYNC_ROWS (v12): the gathered tiles come by cp.async instead of row boxes, 16 bytes a lane, a
 * warp instruction covering 512 contiguous bytes of the cache (whole rows, so each 32-byte sector is
 * asked for once), each lane's copies counted by its cp.async.mbarrier.arrive; the full barriers then
 * count 32 arrivals, a box tile's too (lane 0 announcing the bytes, the others plain arrivals).
 * EVICT_FIRST (v14): every bulk tensor copy (and cp.async) brings its lines into L2 under an evict-first
 * policy (K and V are read once). ring_pos (v15, which runs this loop once for each piece of its slice):
 * the tiles the ring has already taken, so tile i goes to stage (ring_pos + i) % STAGES in that round.
 * GATHERERS (v17): that many producer warps run this loop side by side, this one being gatherer G; each
 * waits for every stage, issues its share of each gathered tile and arrives with all its lanes, so the
 * full barriers count 32 x GATHERERS arrivals. Whole 16-slot tiles come as boxes from gatherer 0 alone,
 * the others arriving plainly. LEAN (v18): the gathered tiles by gather_rows_lean, the same copies.
 * PREFETCH (v22, even, 2 to 2 (AHEAD - 1)): with each whole tile's boxes, the same boxes of tile i + PREFETCH,
 * when that tile is whole too, asked into L2 (tma_prefetch_3d); its slots are group k + PREFETCH / 2's, in
 * ahead[] since an earlier group, so the prefetch waits on no page-table load. Its copies then find their
 * lines in L2, and the memory has the ring's bytes plus PREFETCH tiles asked for at once.
 * INTERLEAVE (v26): that many producer warps run this loop side by side on whole groups, this one taking
 * groups group0, group0 + INTERLEAVE, ...: each of its tiles is all its own (one warp's copies, 32
 * arrivals a full barrier), and every warp runs the same instructions, where GATHERERS needs one
 * instantiation a warp. STAGES is a multiple of 2 x INTERLEAVE (and ring_pos 0), so that each stage's
 * tiles are always the same warp's: a warp waits for every round of its stages in turn. A warp that
 * skipped a round could wait on a stage two rounds ahead of its consumers, and the empty barrier's
 * parity would read that round's phase as done. flips (v29, whose CTAs run this loop once a work item, each
 * from stage 0): bit st set when stage st has taken an odd number of rounds before this call, so round
 * r / STAGES of it waits on the parity of its round counted from the launch. */
template <int STAGES, int BLOCKS, int COLS, int HEADS = 1, bool CP_ASYNC_ROWS = false, bool EVICT_FIRST = false,
          int GATHERERS = 1, int G = 0, bool LEAN = false, int PREFETCH = 0, int INTERLEAVE = 1>
__device__ __forceinline__ void produce_page_tiles(const CUtensorMap *k_box, const CUtensorMap *v_box,
                                                   const CUtensorMap *k_row, const CUtensorMap *v_row, bool boxes,
                                                   const kl_attention_decode_params &p, int b, int g0, int t0, int t1,
                                                   uint32_t ring_at, uint64_t *full, uint64_t *empty,
                                                   uint32_t ring_pos = 0, int group0 = 0, uint32_t flips = 0)
{
#if KL_SM90A
    constexpr int AHEAD = 4, COPIES = 2 * HEADS * BLOCKS; /* boxes of a whole tile: (K or V, head, block) */
    constexpr uint32_t BLOCK_BYTES = 16 * 128, HEAD_TILE = BLOCKS * BLOCK_BYTES, TILE_HALF = HEADS * HEAD_TILE;
    constexpr uint32_t STAGE_BYTES = 2 * TILE_HALF;
    static_assert(COPIES <= 32, "one box a lane");
    static_assert(PREFETCH % 2 == 0 && PREFETCH / 2 < AHEAD, "a prefetched tile's slots are in ahead[]");
    static_assert(INTERLEAVE == 1 || (PREFETCH == 0 && GATHERERS == 1),
                  "a group's tiles are one warp's, prefetch none");
    static_assert(INTERLEAVE == 1 || STAGES % (2 * INTERLEAVE) == 0,
                  "a stage's rounds all one warp's: their parity is waited in turn");
    const int lane = threadIdx.x % 32, tiles = (t1 - t0 + 15) / 16, groups = (tiles + 1) / 2;
    /* this warp's n-th group, and how many it takes (all of them unless INTERLEAVE > 1) */
    auto group_of = [&](int n) { return INTERLEAVE > 1 ? group0 + INTERLEAVE * n : n; };
    const int my_groups = INTERLEAVE > 1 ? (groups - group0 + INTERLEAVE - 1) / INTERLEAVE : groups;
    const int32_t *pages = p.kv_indices + p.kv_indptr[b];
    const int ps = (int)p.page_size;
    auto slot_of = [&](int k) {
        if (32 * k >= t1 - t0) return 0; /* past the chunk: never copied */
        const int t = min(t0 + 32 * k + lane, t1 - 1);
        return pages[t / ps] * ps + t % ps;
    };
    /* Copy c of a tile (c < COPIES): K (c < HEADS * BLOCKS) or V, head c / BLOCKS % HEADS, block c % BLOCKS. */
    auto copy_map = [](int c, const CUtensorMap *kmap, const CUtensorMap *vmap) {
        return c < HEADS * BLOCKS ? kmap : vmap;
    };
    auto copy_dst = [&](int c) {
        return (uint32_t)(c / (HEADS * BLOCKS)) * TILE_HALF + (uint32_t)(c / BLOCKS % HEADS) * HEAD_TILE +
               (uint32_t)(c % BLOCKS) * BLOCK_BYTES;
    };
    const uint64_t policy = EVICT_FIRST ? kl::ptx::l2_evict_first_policy() : 0;
    /* LEAN: this lane's chunk of kv head g0's row in each cache, and the bytes from one slot's row to the next */
    const uint32_t row_stride = (uint32_t)(p.num_kv_heads * 128 * BLOCKS);
    const int64_t lane_offset = (int64_t)g0 * 128 * BLOCKS + 16 * (lane % (8 * BLOCKS));
    const unsigned char *k_lane = static_cast<const unsigned char *>(p.k_cache) + lane_offset;
    const unsigned char *v_lane = static_cast<const unsigned char *>(p.v_cache) + lane_offset;
    auto copy = [&](uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint64_t *bar) {
        if constexpr (EVICT_FIRST) kl::ptx::tma_load_3d_hint(dst, map, c0, c1, c2, bar, policy);
        else kl::ptx::tma_load_3d(dst, map, c0, c1, c2, bar);
    };
    int ahead[AHEAD];
#pragma unroll
    for (int k = 0; k < AHEAD; k++)
        ahead[k] = slot_of(group_of(k));
    for (int n0 = 0; n0 < my_groups; n0 += AHEAD) {
#pragma unroll
        for (int kk = 0; kk < AHEAD; kk++) {
            const int n = n0 + kk, k = group_of(n);
            if (n >= my_groups) break;
            const int slots = ahead[kk];
            ahead[kk] = slot_of(group_of(n + AHEAD));
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int i = 2 * k + half, r = (int)ring_pos + i, st = r % STAGES; /* r: the ring's tile */
                if (i >= tiles) break;
                const int slot = __shfl_sync(0xffffffffu, slots, 16 * half + lane % 16);
                const int first = __shfl_sync(0xffffffffu, slots, 16 * half); /* the tile's token 0 */
                /* Round r / STAGES of stage st: wait until its consumers handed back round r / STAGES
                 * - 1 (round 0 passes: a fresh barrier's parity-1 phase counts as done). */
                kl::ptx::mbar_wait(&empty[st], (r / STAGES & 1) ^ 1 ^ (flips >> st & 1));
                const bool whole = boxes && 16 * i + 16 <= t1 - t0;
                const uint32_t stage = ring_at + st * STAGE_BYTES;
                if (CP_ASYNC_ROWS && !whole) {
                    if constexpr (LEAN)
                        gather_rows_lean<BLOCKS, HEADS, GATHERERS, G, EVICT_FIRST>(k_lane, v_lane, row_stride, slots,
                                                                                   half, stage, policy);
                    else
                        gather_rows_cp_async<BLOCKS, HEADS, GATHERERS, G, EVICT_FIRST>(p, g0, slots, half, stage, policy);
                    kl::ptx::cp_async_mbar_arrive(&full[st]);
                    continue;
                }
                if (G == 0 && lane == 0) kl::ptx::mbar_arrive_expect(&full[st], STAGE_BYTES);
                else if (CP_ASYNC_ROWS) kl::ptx::mbar_arrive(&full[st]);
                if (G > 0) continue; /* the boxes are gatherer 0's */
                __syncwarp();
                if (whole) {
                    /* 16 whole slots of one page (t0 + 16 i is a multiple of 16, and so is the page
                     * size): lane c < COPIES copies box c. */
                    if (lane < COPIES)
                        copy(stage + copy_dst(lane), copy_map(lane, k_box, v_box), COLS * (lane % BLOCKS),
                             g0 + lane / BLOCKS % HEADS, first, &full[st]);
                    if constexpr (PREFETCH > 0) {
                        const int ip = i + PREFETCH; /* group k + PREFETCH / 2, the same half */
                        const int pfirst = __shfl_sync(0xffffffffu, ahead[(kk + PREFETCH / 2) % AHEAD], 16 * half);
                        if (lane < COPIES && ip < tiles && 16 * ip + 16 <= t1 - t0)
                            kl::ptx::tma_prefetch_3d(copy_map(lane, k_box, v_box), COLS * (lane % BLOCKS),
                                                     g0 + lane / BLOCKS % HEADS, pfirst);
                    }
                } else {
                    /* Row lane % 16 of copies lane / 16, lane / 16 + 2, ...: every lane gathers the
                     * token whose slot it was handed. */
#pragma unroll
                    for (int c = lane / 16; c < COPIES; c += 2)
                        copy(stage + copy_dst(c) + (lane % 16) * 128, copy_map(c, k_row, v_row), COLS * (c % BLOCKS),
                             g0 + c / BLOCKS % HEADS, slot, &full[st]);
                }
            }
        }
    }
#endif
}

} // namespace kl::decode
