/* The consumer warp's arithmetic of the decode variants that read 16-bit pages from a ring of
 * shared-memory stages (v8_tma_pages, v12_cp_async_gather, v13_cluster_merge and the 16-bit rungs
 * after them): q as the B operand, one online-softmax update over a 16-token tile in a stage, and the
 * warp's state written for finish_cta. The layout is page_ring.cuh's: a K or V tile is HD / 64 blocks
 * of 16 rows x 64 columns, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the 128-byte swizzle;
 * each tile 1024-byte aligned), so the 8 rows one ldmatrix phase reads sit in 8 different bank groups
 * with no padding. Lane (gq, tq) = (lane / 4, lane % 4) of the mma fragments: the scores' columns 2
 * tq, 2 tq + 1 are qo heads 2 tq, 2 tq + 1 of the kv head's group, its rows gq and gq + 8 the tile's
 * tokens (v4_tensor_cores says why the GQA group is the mma's N dimension). With draft tokens
 * (v28_draft_tile_gatherers) the columns are rows of the group x q_len, in n-tiles of 8, as in v4. */
#pragma once

#include <stdint.h>

#include "kernels/attention_decode/attention_decode.h"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/common.cuh"
#include "kernels/ptx_sm80.cuh"

namespace kl::decode::bf16_ring {

/* The CTA of the ring variants (v8, v12, v13): CW consumer warps and one producer warp; a ring of
 * STAGES tiles of 16 tokens, each the K tile then the V tile, each BLOCKS blocks of 16 rows x 64
 * columns (128 bytes a row). */
template <typename T, int HD, int CW, int STAGES_> struct ring_shape {
    static constexpr int STAGES = STAGES_, THREADS = 32 * (CW + 1), PRODUCER = CW;
    static constexpr int KSTEPS = HD / 16;           /* k-steps of Q.K, m-tiles of V^T */
    static constexpr int BLOCKS = HD / 64;           /* 64-column blocks of a row */
    static constexpr uint32_t BLOCK_BYTES = 16 * 128; /* one block of a tile: one 16-row box */
    static constexpr uint32_t TILE_HALF = BLOCKS * BLOCK_BYTES;   /* K (or V) of a tile */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_HALF;        /* a stage: K then V */
    static constexpr int ROW = HD + 2;               /* merged rows: acc, m, l */
    static constexpr int RING = STAGES * STAGE_BYTES;             /* bytes of the ring */
    static constexpr int SMEM = 1024 + RING + 2 * STAGES * 8;     /* alignment slack, the ring, its barriers */
    static_assert(sizeof(T) == 2 && HD % 64 == 0, "16-bit rows of whole 64-column blocks");
    /* Stage s is always consumed by warp s % CW, so its empty barrier counts that warp's 32 lanes. */
    static_assert(STAGES % CW == 0, "each stage belongs to one consumer warp");
    static_assert((CW + 1) * 8 * ROW * 4 <= RING, "the merge reuses the ring");
};

/* The shared address of 16-byte chunk c (of HD / 8) of row r of a tile at `tile`: block c / 8, row r,
 * chunk c % 8 moved as the swizzle moved it (address bits 4-6 XOR bits 7-9: c % 8 ^ r % 8).
 * SWIZZLED false reads where the chunk was in the cache: a planted bug of the tests. */
template <bool SWIZZLED> __device__ __forceinline__ uint32_t chunk_at(uint32_t tile, int r, int c)
{
    const uint32_t a = tile + (uint32_t)(c / 8) * 16 * 128 + (uint32_t)r * 128 + (uint32_t)(c % 8) * 16;
    return SWIZZLED ? a ^ (((a >> 7) & 7) << 4) : a;
}

/* Q^T as the B operand of every k-step: k-step ks, lane (gq, tq) holds qo head h0 + gq's dims
 * 16 ks + 2 tq, + 1 and 16 ks + 8 + 2 tq, + 1 of request b (0 for gq >= nh). */
template <typename T, int HD>
__device__ __forceinline__ void q_operand(const kl_attention_decode_params &p, int b, int h0, int nh,
                                          uint32_t (&qf)[HD / 16][2])
{
    const int lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const T *q = static_cast<const T *>(p.q) + ((int64_t)b * p.num_qo_heads + h0 + min(gq, nh - 1)) * HD;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        qf[ks][0] = gq < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 2 * tq) : 0u;
        qf[ks][1] = gq < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 8 + 2 * tq) : 0u;
    }
}

/* q_operand for NT n-tiles of 8 columns of any rows (v28_draft_tile_gatherers): column c < nh is query
 * row at(c).row, qo head at(c).h0 + at(c).h (kl::decode::out_row); the columns past nh hold 0. */
template <typename T, int HD, int NT, typename At>
__device__ __forceinline__ void q_operand_cols(const kl_attention_decode_params &p, At at, int nh,
                                               uint32_t (&qf)[NT][HD / 16][2])
{
    const int lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int col = 8 * nt + gq;
        const kl::decode::out_row r = at(min(col, nh - 1));
        const T *q = static_cast<const T *>(p.q) + ((int64_t)r.row * p.num_qo_heads + r.h0 + r.h) * HD;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            qf[nt][ks][0] = col < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 2 * tq) : 0u;
            qf[nt][ks][1] = col < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 8 + 2 * tq) : 0u;
        }
    }
}

/* One tile for NT n-tiles of 8 score columns each (v28_draft_tile_gatherers: rows of several draft
 * tokens): K's tile at shared address ks, V's at vs, tokens tok0 .. tok0 + 15; scores in log2 units
 * times `scale`. Column 2 tq + e of n-tile nt sees the tokens before end[nt][e] (the chunk's end, or a
 * draft token's causal limit); the others score -inf (tokens past the chunk are copies of its last
 * one). Each K and V fragment serves every n-tile. The online softmax per column: running max m, sum
 * l, unnormalised O^T (m-tile mt: rows gq, gq + 8 are dims 16 mt + gq, + 8; columns 2 tq, 2 tq + 1). */
template <typename T, int HD, int NT, bool SWIZZLED>
__device__ __forceinline__ void tile_update_cols(uint32_t ks, uint32_t vs, const uint32_t (&qf)[NT][HD / 16][2],
                                                 float scale, int tok0, const int (&end)[NT][2],
                                                 float (&o)[NT][HD / 16][4], float (&m)[NT][2], float (&l)[NT][2])
{
    const int lane = threadIdx.x % 32, gq = lane / 4, i8 = lane % 8, mat = lane / 8;
    /* S^T = K Q^T over the tile's 16 tokens: A = K rows (matrices: tokens 0-7 / 8-15 x dims 0-7 /
     * 8-15 of the k-step, in a0..a3 order). */
    float s[NT][4] = {}, s_odd[NT][4] = {}; /* two chains: half the dependent mma latency */
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t a[4];
        kl::ptx::ldmatrix_x4(a, chunk_at<SWIZZLED>(ks, i8 + 8 * (mat & 1), 2 * kk + (mat >> 1)));
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            kl::ptx::mma_16816<T>(kk % 2 ? s_odd[nt] : s[nt], a, qf[nt][kk][0], qf[nt][kk][1]);
    }
    /* Online softmax per column, as v4: s[0], s[1] are token gq, columns 2tq, 2tq+1; s[2], s[3] token
     * gq + 8. Then P^T as the B operand (v4 says how movmatrix transposes it). */
    const int tok = tok0 + gq;
    uint32_t pb[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[nt][e] += s_odd[nt][e];
        const int e0 = end[nt][0], e1 = end[nt][1];
        const float x[4] = {tok < e0 ? s[nt][0] * scale : -INFINITY, tok < e1 ? s[nt][1] * scale : -INFINITY,
                            tok + 8 < e0 ? s[nt][2] * scale : -INFINITY, tok + 8 < e1 ? s[nt][3] * scale : -INFINITY};
        float w[4];
        kl::decode::softmax_tile<HD / 16>(x, m[nt], l[nt], o[nt], w);
        pb[nt][0] = kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(w[0], w[1]));
        pb[nt][1] = kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(w[2], w[3]));
    }
    /* O^T += V^T P^T with A = V^T by ldmatrix.trans of V rows. */
#pragma unroll
    for (int mt = 0; mt < HD / 16; mt++) {
        uint32_t a[4];
        kl::ptx::ldmatrix_x4_trans(a, chunk_at<SWIZZLED>(vs, i8 + 8 * (mat >> 1), 2 * mt + (mat & 1)));
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            kl::ptx::mma_16816<T>(o[nt][mt], a, pb[nt][0], pb[nt][1]);
    }
}

/* One tile of one query a request: tile_update_cols with one n-tile (heads 2 tq, 2 tq + 1 of the kv
 * head's group) whose columns all see the tokens before the chunk's end t1. */
template <typename T, int HD, bool SWIZZLED>
__device__ __forceinline__ void tile_update(uint32_t ks, uint32_t vs, const uint32_t (&qf)[HD / 16][2], float scale,
                                            int tok0, int t1, float (&o)[HD / 16][4], float (&m)[2], float (&l)[2])
{
    using Q = const uint32_t(&)[1][HD / 16][2];
    using O = float(&)[1][HD / 16][4];
    using ML = float(&)[1][2];
    const int end[1][2] = {{t1, t1}};
    tile_update_cols<T, HD, 1, SWIZZLED>(ks, vs, reinterpret_cast<Q>(qf), scale, tok0, end, reinterpret_cast<O>(o),
                                         reinterpret_cast<ML>(m), reinterpret_cast<ML>(l));
}

/* The warp's state as finish_cta reads it: its 8 rows at `rows` (heads 2 tq and 2 tq + 1 at rows
 * 2 tq, 2 tq + 1; HD + 2 floats a row: acc, m, l), l summed over the lanes sharing a head first. */
template <int HD>
__device__ __forceinline__ void write_state(float *rows, const float (&o)[HD / 16][4], const float (&m)[2],
                                            float (&l)[2])
{
    const int lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    kl::decode::sum_column_l(l);
    float *w0 = rows + 2 * tq * (HD + 2), *w1 = w0 + HD + 2;
#pragma unroll
    for (int mt = 0; mt < HD / 16; mt++) {
        w0[16 * mt + gq] = o[mt][0], w1[16 * mt + gq] = o[mt][1];
        w0[16 * mt + gq + 8] = o[mt][2], w1[16 * mt + gq + 8] = o[mt][3];
    }
    if (gq == 0) w0[HD] = m[0], w0[HD + 1] = l[0], w1[HD] = m[1], w1[HD + 1] = l[1];
}

/* write_state for NT n-tiles: n-tile nt's 8 rows after the 8 nt rows before them. */
template <int HD, int NT>
__device__ __forceinline__ void write_state_cols(float *rows, const float (&o)[NT][HD / 16][4], const float (&m)[NT][2],
                                                 float (&l)[NT][2])
{
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        write_state<HD>(rows + 8 * nt * (HD + 2), o[nt], m[nt], l[nt]);
}

} // namespace kl::decode::bf16_ring
