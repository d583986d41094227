/* The mainloop of the Hopper (sm_90a) variants of attention_prefill (v7 and up), by warpgroup and key
 * tile on wgmma (kernels/ptx_sm90.cuh): the CTA's tiles, P packed from S's accumulators into A
 * fragments, and the two products of a key tile. The FlashAttention-2 steps that do not change on
 * Hopper (mask, online softmax, epilogue) come from mainloop_sm80.cuh: a wgmma accumulator holds, per
 * warp, the same m16n8 fragments as mma.sync. A variant includes this file (or kv_ring.cuh); the tile
 * scheduler, the trace and the launches come with it. */
#pragma once

#include "kernels/attention_prefill/mainloop_sm80.cuh"
#include "kernels/attention_prefill/tile_scheduler.cuh"
#include "kernels/attention_prefill/trace.cuh"
#include "kernels/ptx_sm90.cuh"

namespace kl {
namespace hopper {

using namespace ::kl::ptx; /* the sm_80 and sm_90 PTX wrappers (kernels/ptx_*.cuh) */

/* The tiles of a Hopper variant's CTA: 128 packed rows, 64 per (consumer) warpgroup, and key tiles
 * of kBN (64 for head_dim 256, where O alone takes 128 registers a thread). */
template <int D> struct wg_tiles {
    static constexpr int kBM = 128;
    static constexpr int kBN = D <= 128 ? 128 : 64;
    using QTile = swizzled_tile<kBM, D>;
    using KvTile = swizzled_tile<kBN, D>;
};

using mma::copy_kv_rows; /* cp.async row copies by a given thread of a group (smem_tiles.cuh) */
using mma::copy_rows;

#if KL_SM90A

/* P (the probabilities in S's accumulators, NT n-tiles of 8 keys) rounded to T as the A fragments of
 * O += P V: k-step kk (keys 16kk ..) takes n-tiles 2kk and 2kk + 1, whose C fragments hold exactly
 * the elements an A fragment wants (kernels/ptx_sm80.cuh's tables), so P never leaves the registers. */
template <typename T, int NT> __device__ __forceinline__ void pack_p(uint32_t (&a)[NT / 2][4], const float (&s)[NT][4])
{
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        a[kk][0] = mma::pack2<T>(s[2 * kk][0], s[2 * kk][1]);         /* row g,     keys 2t, 2t+1 */
        a[kk][1] = mma::pack2<T>(s[2 * kk][2], s[2 * kk][3]);         /* row g + 8, keys 2t, 2t+1 */
        a[kk][2] = mma::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]); /* row g,     keys 2t+8, 2t+9 */
        a[kk][3] = mma::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]); /* row g + 8, keys 2t+8, 2t+9 */
    }
}

/* The two products of a key tile for a warpgroup's 64 rows, each committed as one group (the caller
 * opens with wgmma_begin and waits). S = Q K^T: D / 16 products of 64 x 8NT x 16 from the Q rows' and
 * the K tile's descriptors, the first overwriting s. */
template <typename T, int D, class QL, class KL, int NT>
__device__ __forceinline__ void issue_qk(float (&s)[NT][4], uint32_t q_rows, uint32_t k_tile)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wgmma_ss<T, 8 * NT>(s, kmajor_desc<QL>(q_rows, kk), kmajor_desc<KL>(k_tile, kk), kk > 0);
    wgmma_commit();
}
/* O += P V: one product of 64 x 8DT x 16 per 16 keys, P's A fragments from registers (pack_p). */
template <typename T, class KL, int DT, int KS>
__device__ __forceinline__ void issue_pv(float (&o)[DT][4], const uint32_t (&a)[KS][4], uint32_t v_tile)
{
#pragma unroll
    for (int kk = 0; kk < KS; kk++) wgmma_rs<T, 8 * DT>(o, a[kk], mnmajor_desc<KL>(v_tile, kk), 1);
    wgmma_commit();
}

/* issue_qk and issue_pv with each operand's descriptor built once and advanced by constants for its
 * k-steps (desc_advance): one uniform add a product where the others rebuild the address each time.
 * The products, their order and their operands are the same. */
template <typename T, int D, class QL, class KL, int NT>
__device__ __forceinline__ void issue_qk_advanced(float (&s)[NT][4], uint32_t q_rows, uint32_t k_tile)
{
    const uint64_t q = kmajor_desc<QL>(q_rows, 0), k = kmajor_desc<KL>(k_tile, 0);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint64_t q_kk = desc_advance(q, (kk / 4) * QL::kBlockBytes + (kk % 4) * 32);
        const uint64_t k_kk = desc_advance(k, (kk / 4) * KL::kBlockBytes + (kk % 4) * 32);
        wgmma_ss<T, 8 * NT>(s, q_kk, k_kk, kk > 0);
    }
    wgmma_commit();
}
template <typename T, class KL, int DT, int KS>
__device__ __forceinline__ void issue_pv_advanced(float (&o)[DT][4], const uint32_t (&a)[KS][4], uint32_t v_tile)
{
    const uint64_t v = mnmajor_desc<KL>(v_tile, 0);
#pragma unroll
    for (int kk = 0; kk < KS; kk++) wgmma_rs<T, 8 * DT>(o, a[kk], desc_advance(v, kk * 2048), 1);
    wgmma_commit();
}

#endif /* KL_SM90A */

} // namespace hopper
} // namespace kl
