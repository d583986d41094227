/* The epilogue of attention_prefill's tensor-core variants: the row sums completed over the threads of
 * a row, out = O / l rounded to the output type, and the log-sum-exp; by rows of a query tile
 * (FlashAttention-2, v2 and up) or of a packed tile (v7 and up). Inline device code only. */
#pragma once

#include <stdint.h>

#include "kernels/attention_prefill/paged.cuh"
#include "kernels/attention_prefill/tile_scheduler.cuh"
#include "kernels/ptx_sm80.cuh"

namespace kl {
namespace mma {

using namespace ::kl::ptx; /* the sm_80 PTX wrappers (kernels/ptx_sm80.cuh) */

/* The epilogue: the row sums are completed over the 4 threads of each group, out = o / l rounded
 * to T (a 4-byte store of 2 elements per n-tile: columns 8 dt + 2t, +1), lse = (m c + log2 l) ln 2.
 * row_of(mt, h, out, lse) points out / lse at the output of this thread's row g + 8h of block mt,
 * or returns false for a row past the request (nothing written). */
template <typename T, int MT, int DT, class RowOf>
__device__ __forceinline__ void store_rows(const float (&o)[MT][DT][4], const float (&m)[MT][2],
                                           const float (&l)[MT][2], float scale_log2, int lane, RowOf row_of)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sum = l[mt][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            T *out;
            float *lse;
            if (!row_of(mt, h, out, lse)) continue;
            const float inv = sum > 0.f ? 1.f / sum : 0.f; /* a row that saw no key: out 0, lse -inf */
#pragma unroll
            for (int dt = 0; dt < DT; dt++)
                *reinterpret_cast<uint32_t *>(out + 8 * dt + 2 * (lane % 4)) =
                    pack2<T>(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
            if (lane % 4 == 0) *lse = sum > 0.f ? (m[mt][h] * scale_log2 + log2f(sum)) * prefill::kLn2 : -INFINITY;
        }
}

} // namespace mma
} // namespace kl

namespace kl {
namespace hopper {

/* The epilogue of a warpgroup's rows (store_rows above): this thread's rows row + 8h, h = 0, 1. */
template <typename T, int DT>
__device__ __forceinline__ void store_packed_rows(const float (&o)[1][DT][4], const float (&m)[1][2],
                                                  const float (&l)[1][2], float scale_log2, int lane,
                                                  const kl_attention_prefill_params &p, const packed_tile &t, int row)
{
    mma::store_rows<T, 1, DT>(o, m, l, scale_log2, lane, [&](int, int h, T *&out, float *&lse) {
        const int pr = row + 8 * h;
        if (pr >= t.rows) return false;
        const int64_t at = t.row_offset(p, pr);
        out = (T *)p.out + at;
        lse = p.lse + at / p.head_dim;
        return true;
    });
}

} // namespace hopper
} // namespace kl
