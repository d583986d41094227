/* The row state of the FlashAttention-2 loop (attention_prefill v2 and up), on the m16n8 C fragments of
 * S and O (kernels/ptx_sm80.cuh has the layout): the causal mask of a key tile, the online softmax in
 * base 2 (the running max m, the running sum l, the rescaling of O) and the initial state of the rows.
 * A wgmma accumulator holds, per warp, the same fragments, so the Hopper variants use these too.
 * Inline device code only. */
#pragma once

#include "kernels/ptx_sm80.cuh"

namespace kl {
namespace mma {

using namespace ::kl::ptx; /* the sm_80 PTX wrappers (kernels/ptx_sm80.cuh) */

/* Keys a row does not see become -inf. Element e of n-tile nt of row block mt is row
 * 16 mt + g + 8 (e / 2) of the warp, key k0 + 8 nt + 2 t + e % 2; limit(mt, h) is how many keys (a
 * prefix) this thread's row g + 8 h of block mt sees. Called only on the tiles that need it. */
template <int MT, int NT, class Limit>
__device__ __forceinline__ void mask_tile(float (&s)[MT][NT][4], int k0, int lane, Limit limit)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = limit(mt, h);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; e++)
                    if (k0 + 8 * nt + 2 * (lane % 4) + e % 2 >= n) s[mt][nt][e] = -INFINITY;
        }
}

/* The online softmax for one key tile, in place, for this thread's row g + 8h of block mt: s (raw
 * logits) becomes p = 2^(s c - m c) with c = sm_scale log2(e) folded into one FFMA; m (raw running
 * max) and l (this thread's share of the running sum) are updated, and the return value alpha =
 * 2^((m_old - m) c) is what the row's output must be scaled by before this tile's P V is added. The
 * row max is over the 4 threads of a group (two shuffles); l stays a per-thread partial sum until
 * the epilogue, since all 4 threads of a row rescale alike. Requires sm_scale > 0 (the max of raw
 * logits is then the max of scaled ones). A row that has seen no key yet has m = -inf; it subtracts
 * 0 instead, so 2^(-inf) = 0 and never -inf - -inf. kWhole: the row sees every key of this tile (an
 * unmasked tile of finite logits), so its max is finite and that guard is left out. */
template <bool kWhole = false, int MT, int NT>
__device__ __forceinline__ float softmax_row(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2], int mt,
                                             int h, float scale_log2)
{
    float mx = m[mt][h];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float ref = !kWhole && mx == -INFINITY ? 0.f : mx * scale_log2;
    const float alpha = exp2_fast(fmaf(m[mt][h], scale_log2, -ref));
    m[mt][h] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; e++) {
            const float pe = exp2_fast(fmaf(s[mt][nt][e], scale_log2, -ref));
            s[mt][nt][e] = pe;
            sum += pe;
        }
    l[mt][h] = l[mt][h] * alpha + sum;
    return alpha;
}

/* Every row of the tile, the output rescaled at once (the FlashAttention-2 step). */
template <int MT, int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&o)[MT][DT][4], float scale_log2)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float alpha = softmax_row(s, m, l, mt, h, scale_log2);
#pragma unroll
            for (int dt = 0; dt < DT; dt++)
                o[mt][dt][2 * h] *= alpha, o[mt][dt][2 * h + 1] *= alpha;
        }
}

/* Every row of the tile, the output's scale factors returned for later (rescale_rows): a kernel
 * whose previous P V is still running may not touch o yet. kWhole as in softmax_row. */
template <bool kWhole = false, int MT, int NT>
__device__ __forceinline__ void softmax_rows(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                             float (&alpha)[MT][2], float scale_log2)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) alpha[mt][h] = softmax_row<kWhole>(s, m, l, mt, h, scale_log2);
}

/* o *= alpha, row by row (alpha from softmax_rows). */
template <int MT, int DT>
__device__ __forceinline__ void rescale_rows(float (&o)[MT][DT][4], const float (&alpha)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            o[mt][dt][0] *= alpha[mt][0], o[mt][dt][1] *= alpha[mt][0], o[mt][dt][2] *= alpha[mt][1],
                o[mt][dt][3] *= alpha[mt][1];
}

/* The running state of a warp's rows: o = 0, m = -inf (no key seen), l = 0. */
template <int MT, int DT>
__device__ __forceinline__ void init_rows(float (&o)[MT][DT][4], float (&m)[MT][2], float (&l)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
        m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
    }
}

} // namespace mma
} // namespace kl
