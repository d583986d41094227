/* The TMA side of the decode variants that feed a ring of shared-memory stages from the paged cache
 * with bulk tensor copies (v8_tma_pages: 16-bit K/V; v9_fp8_tma_pages: e4m3 codes): the cache's
 * tensor maps on the host, and the producer warp's loop on the device.
 *
 * A stage holds one tile of 16 tokens of one kv head: its K half, then its V half, each BLOCKS
 * blocks of 16 rows x 128 bytes (64 16-bit columns or 128 codes), 128-byte swizzled by the copies
 * (16-byte chunk c of a row stored at chunk c ^ (row % 8); each stage starts 1024-byte aligned).
 * Where the page size is a multiple of 16 a whole tile is 16 consecutive slots of one page and
 * comes in 2 BLOCKS boxes of 16 rows. Other pages (page 1, or any size not a multiple of 16), and a
 * request's last partial tile, gather: each of the 32 producer lanes copies one row (lanes 0-15 K,
 * 16-31 V) as BLOCKS boxes of 1 row, landing at the row's place in the same layout; rows past the
 * chunk copy its last token again (finite data the consumers mask), so every tile brings the same
 * bytes to its full barrier. After the key loop the CTA finishes with decode.cuh's finish_cta. */
#pragma once

#include <cudaTypedefs.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention_decode/attention_decode.h"
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

/* ---- device ---- */

/* The producer warp: tiles 0 .. tiles - 1 of tokens t0 .. t1 - 1 of request b, kv head g, into
 * stage i % STAGES of the ring at ring_at (tile i's round i / STAGES), each after its consumer
 * handed the stage back on empty[st] and with its bytes counted on full[st]. COLS: the elements a
 * 128-byte box row holds. Lane j looks up the slot of token t0 + 32 k + j (group k: tiles 2k and
 * 2k + 1); a token past t1 takes t1 - 1's slot. ahead[k % AHEAD] holds group k's slots from AHEAD
 * groups before its copies, so the page-table loads overlap the ring's waits. */
template <int STAGES, int BLOCKS, int COLS>
__device__ __forceinline__ void produce_page_tiles(const CUtensorMap *k_box, const CUtensorMap *v_box,
                                                   const CUtensorMap *k_row, const CUtensorMap *v_row, bool boxes,
                                                   const kl_attention_decode_params &p, int b, int g, int t0, int t1,
                                                   uint32_t ring_at, uint64_t *full, uint64_t *empty)
{
#if KL_SM90A
    constexpr int AHEAD = 4;
    constexpr uint32_t BLOCK_BYTES = 16 * 128, TILE_HALF = BLOCKS * BLOCK_BYTES, STAGE_BYTES = 2 * TILE_HALF;
    const int lane = threadIdx.x % 32, tiles = (t1 - t0 + 15) / 16, groups = (tiles + 1) / 2;
    const int32_t *pages = p.kv_indices + p.kv_indptr[b];
    const int ps = (int)p.page_size;
    auto slot_of = [&](int k) {
        if (32 * k >= t1 - t0) return 0; /* past the chunk: never copied */
        const int t = min(t0 + 32 * k + lane, t1 - 1);
        return pages[t / ps] * ps + t % ps;
    };
    int ahead[AHEAD];
#pragma unroll
    for (int k = 0; k < AHEAD; k++) ahead[k] = slot_of(k);
    /* A gathered tile: lanes 0-15 copy row lane % 16 of its K, lanes 16-31 the same row of its V. */
    const CUtensorMap *row_map = lane < 16 ? k_row : v_row;
    const uint32_t row_dst = (lane / 16) * TILE_HALF + (lane % 16) * 128;
    for (int k0 = 0; k0 < groups; k0 += AHEAD) {
#pragma unroll
        for (int kk = 0; kk < AHEAD; kk++) {
            const int k = k0 + kk;
            if (k >= groups) break;
            const int slots = ahead[kk];
            ahead[kk] = slot_of(k + AHEAD);
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int i = 2 * k + half, st = i % STAGES;
                if (i >= tiles) break;
                const int slot = __shfl_sync(0xffffffffu, slots, 16 * half + lane % 16);
                const int first = __shfl_sync(0xffffffffu, slots, 16 * half); /* the tile's token 0 */
                /* Round i / STAGES of stage st: wait until its consumer handed back round i / STAGES
                 * - 1 (round 0 passes: a fresh barrier's parity-1 phase counts as done). */
                kl::ptx::mbar_wait(&empty[st], (i / STAGES & 1) ^ 1);
                if (lane == 0) kl::ptx::mbar_arrive_expect(&full[st], STAGE_BYTES);
                __syncwarp();
                const uint32_t stage = ring_at + st * STAGE_BYTES;
                if (boxes && 16 * i + 16 <= t1 - t0) {
                    /* 16 whole slots of one page (t0 + 16 i is a multiple of 16, and so is the page
                     * size): lane j < 2 BLOCKS copies block j % BLOCKS of K (j < BLOCKS) or V. */
                    if (lane < 2 * BLOCKS) {
                        const int kv = lane / BLOCKS, blk = lane % BLOCKS;
                        kl::ptx::tma_load_3d(stage + kv * TILE_HALF + blk * BLOCK_BYTES, kv ? v_box : k_box, COLS * blk,
                                             g, first, &full[st]);
                    }
                } else {
#pragma unroll
                    for (int blk = 0; blk < BLOCKS; blk++)
                        kl::ptx::tma_load_3d(stage + row_dst + blk * BLOCK_BYTES, row_map, COLS * blk, g, slot,
                                             &full[st]);
                }
            }
        }
    }
#endif
}

} // namespace kl::decode
