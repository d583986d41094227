/* The mainloop of the FlashAttention-2 variants of attention_prefill (v2 and up), by warp and key
 * tile on mma.sync: S = Q K^T from the tiles in shared memory, the mask and online softmax
 * (softmax.cuh), O += P V. The C fragment of S for keys 16kk..16kk+15 (n-tiles 2kk, 2kk+1) has
 * exactly the elements the A fragment of P needs for the k-step kk of P V (kernels/ptx_sm80.cuh has
 * the layouts): P never leaves the registers. A variant includes this file and composes these steps
 * with its own loads, pipeline and schedule; the tiles, the epilogue and the launch come with it. */
#pragma once

#include "kernels/attention_prefill/epilogue.cuh"
#include "kernels/attention_prefill/launch.cuh"
#include "kernels/attention_prefill/smem_tiles.cuh"
#include "kernels/attention_prefill/softmax.cuh"
#include "kernels/ptx_sm80.cuh"

namespace kl {
namespace mma {

using namespace ::kl::ptx; /* the sm_80 PTX wrappers (kernels/ptx_sm80.cuh) */

/* ---- warp-level steps of one key tile ---- */

/* s = Q K^T for this warp's rows warp_row0 .. warp_row0 + 16 MT - 1 of the query tile and the
 * tile's NT * 8 keys (L the layout of the query tile, LK that of the key tile where it differs). Per
 * 16-wide slice kd of head_dim: MT ldmatrix.x4 for the A fragments of Q, then per pair of key n-tiles
 * one ldmatrix.x4 of K giving both B fragments, each used by MT MMAs. */
template <typename T, class L, int D, int MT, int NT, class LK = L>
__device__ __forceinline__ void qk_tile(float (&s)[MT][NT][4], uint32_t q_tile, uint32_t k_tile, int warp_row0,
                                        int lane)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[mt][nt][e] = 0.f;
    /* Q: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15,
     * cols 8-15) of the 16 x 16 block = a0..a3. K: (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15,
     * d 0-7), (keys 8-15, d 8-15) = b0, b1 of n-tile 2np and b0, b1 of n-tile 2np + 1. */
    const int q_row = lane % 8 + 8 * ((lane / 8) % 2), q_half = lane / 16;
    const int k_row = lane % 8 + 8 * (lane / 16), k_half = (lane / 8) % 2;
    /* kd only moves shared-memory addresses (no register array is indexed by it), so the loop stays
     * rolled: unrolled, the compiler hoists the fragments of later slices and, beside the 128 + 64
     * accumulator registers of head_dim 128, spills. Other warps cover the ldmatrix latency. */
#pragma unroll 1
    for (int kd = 0; kd < D / 16; kd++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            ldmatrix_x4(a[mt], q_tile + 2 * L::offset(warp_row0 + 16 * mt + q_row, 2 * kd + q_half));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldmatrix_x4(b, k_tile + 2 * LK::offset(16 * np + k_row, 2 * kd + k_half));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16816<T>(s[mt][2 * np], a[mt], b[0], b[1]);
                mma_16816<T>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

/* o += P V with P from the registers of s (after online_softmax) rounded to T, and V's B fragments
 * by ldmatrix.trans: per k-step kk of 16 keys (the C fragments of S's n-tiles 2kk and 2kk + 1,
 * whose elements sit exactly where P's A fragment wants them), per pair of head_dim n-tiles one
 * ldmatrix.x4.trans (keys 0-7 / 8-15 x d 0-7 / 8-15: b0, b1 of n-tile 2dp, then of 2dp + 1), each
 * used by MT MMAs. */
template <typename T, class L, int D, int MT, int NT>
__device__ __forceinline__ void pv_tile(float (&o)[MT][D / 8][4], const float (&p)[MT][NT][4], uint32_t v_tile,
                                        int lane)
{
    const int v_row = lane % 8 + 8 * ((lane / 8) % 2), v_half = lane / 16;
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[mt][0] = pack2<T>(p[mt][2 * kk][0], p[mt][2 * kk][1]);         /* row g,     keys 2t, 2t+1 */
            a[mt][1] = pack2<T>(p[mt][2 * kk][2], p[mt][2 * kk][3]);         /* row g + 8, keys 2t, 2t+1 */
            a[mt][2] = pack2<T>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]); /* row g,     keys 2t+8, 2t+9 */
            a[mt][3] = pack2<T>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]); /* row g + 8, keys 2t+8, 2t+9 */
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_tile + 2 * L::offset(16 * kk + v_row, 2 * dp + v_half));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16816<T>(o[mt][2 * dp], a[mt], b[0], b[1]);
                mma_16816<T>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

/* One key tile for a warp's rows, once K and V are in shared memory: S = Q K^T, the mask where
 * some row does not see every key of the tile (limit as in mask_tile), the online-softmax step,
 * O += P V. k0 is the tile's first key. */
template <typename T, class L, int D, int MT, int NT, class Limit>
__device__ __forceinline__ void attend_tile(float (&o)[MT][D / 8][4], float (&m)[MT][2], float (&l)[MT][2],
                                            uint32_t q_tile, uint32_t k_tile, uint32_t v_tile, int k0, bool masked,
                                            Limit limit, int warp_row0, int lane, float scale_log2)
{
    float s[MT][NT][4];
    qk_tile<T, L, D, MT, NT>(s, q_tile, k_tile, warp_row0, lane);
    if (masked) mask_tile(s, k0, lane, limit);
    online_softmax(s, m, l, o, scale_log2);
    pv_tile<T, L, D, MT, NT>(o, s, v_tile, lane);
}

} // namespace mma
} // namespace kl
