/* The per-pair arithmetic of the fused RoPE + e4m3 quantize + store rungs that give a thread a PAIR of
 * 16-byte chunks of one head (v5_tile_inflight, v6_bulk_ring): which two chunks a pair is, their cos/sin
 * columns in a table row, RoPE in float32 and the conversion to e4m3 (v4_rope_quant_store's chunks take the
 * same quant8). Inline device code only.
 *
 * A head of C = head_dim / 8 chunks has m = rotary_dim / 16 neox pairs (i, i + m) (m = 0 interleaved),
 * then the n = C - 2m chunks left as pairs (2m + i', 2m + i' + ceil(n / 2)), the second absent when n is
 * odd; q, k and v heads are cut the same way, so a head has m + ceil(n / 2) pairs. Neox: a pair is both
 * halves of its rotations (no chunk is loaded twice); elsewhere consecutive pairs take consecutive chunks,
 * so every access instruction of a warp stays coalesced. */
#pragma once

#include <cuda_fp8.h>

#include "kernels/common.cuh"

namespace kl::store_fused
{

/* Two floats to two e4m3 codes, round to nearest even, saturating at +-448 (NaN stays NaN); the first in
 * the low byte, as the cache row holds them. */
__device__ __forceinline__ uint32_t e4m3x2(float a, float b)
{
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}

/* A chunk's 8 values times inv_scale as 8 codes: one 8-byte store of a cache row. */
__device__ __forceinline__ uint2 quant8(const float (&o)[8], float inv_scale)
{
    uint32_t w[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
        w[r] = e4m3x2(o[4 * r] * inv_scale, o[4 * r + 1] * inv_scale) |
               e4m3x2(o[4 * r + 2] * inv_scale, o[4 * r + 3] * inv_scale) << 16;
    return make_uint2(w[0], w[1]);
}

/* Pair i of a head (m, rest: the launcher's cut, above): its chunks a and b (b >= C where absent) and
 * which of them are rotated in a q or k head (rot_a: neox, a neox pair; interleaved, a chunk inside
 * rotary_dim; b rotated implies a rotated). */
struct pair_chunks {
    int a, b;
    bool has_b, rot_a, rot_b;
};
template <bool NEOX>
__device__ __forceinline__ pair_chunks chunks_of(int i, int m, int rest, int chunks, int rotary_dim, bool rotary_head)
{
    pair_chunks c;
    c.a = i < m ? i : m + i;
    c.b = i < m ? i + m : m + i + rest;
    c.has_b = c.b < chunks;
    c.rot_a = rotary_head && (NEOX ? i < m : 8 * c.a < rotary_dim);
    c.rot_b = c.rot_a && c.has_b && (NEOX || 8 * c.b < rotary_dim);
    return c;
}

/* Four floats at p (16-byte aligned, shared or global memory) into out[0..3]. */
__device__ __forceinline__ void lds4(const float *p, float *out)
{
    const float4 v = *reinterpret_cast<const float4 *>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}

/* A pair's cos and sin from its token's table row (rotary_dim floats: cos, then sin, half each; shared
 * memory, or global where v7 loads a token ahead): neox, columns 8a..8a+7 for both chunks; interleaved,
 * 4a..4a+3, then 4b..4b+3 where b is rotated. */
template <bool NEOX>
__device__ __forceinline__ void cos_sin_of(const float *row, int half, const pair_chunks &pc, float (&c)[8],
                                           float (&s)[8])
{
    if constexpr (NEOX) {
        lds4(row + 8 * pc.a, c), lds4(row + 8 * pc.a + 4, c + 4);
        lds4(row + half + 8 * pc.a, s), lds4(row + half + 8 * pc.a + 4, s + 4);
    } else {
        lds4(row + 4 * pc.a, c), lds4(row + half + 4 * pc.a, s);
        if (pc.rot_b) lds4(row + 4 * pc.b, c + 4), lds4(row + half + 4 * pc.b, s + 4);
    }
}

/* One chunk out, packed x in, as v4 computes it: unrotated, the value itself; rotated,
 * x1' = x1 c - x2 s and x2' = x2 c + x1 s, the first of a pair subtracting its partner's share. Neox: the
 * partner is the same element of the other half's chunk p (first: this chunk is in the first half),
 * column r; interleaved: the neighbour r ^ 1 in this chunk, column koff + r / 2, even r first. Elements
 * are unpacked as used, so only the packed words stay live (registers). */
template <typename T, bool NEOX>
__device__ __forceinline__ void chunk_out(const uint4 &x, const uint4 &p, bool rot, const float (&c)[8],
                                          const float (&s)[8], int koff, bool first, float (&o)[8])
{
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const float xr = kl::elem_f32<T>(x, r);
        if (!rot) {
            o[r] = xr;
            continue;
        }
        const int k = NEOX ? r : koff + r / 2;
        const float pr = NEOX ? kl::elem_f32<T>(p, r) : kl::elem_f32<T>(x, r ^ 1);
        const bool sub = NEOX ? first : (r & 1) == 0;
        o[r] = fmaf(xr, c[k], sub ? -(pr * s[k]) : pr * s[k]);
    }
}

/* A pair's outputs for one token: q (rotated where rot) to q_row, 16 bytes a chunk; k or v (k rotated where
 * rot) times inv_scale as e4m3 into cache_row, 8 bytes a chunk. wa, wb: the packed chunks a and b (wb
 * unread where the pair has no b). */
template <typename T, bool NEOX>
__device__ __forceinline__ void write_pair(const uint4 &wa, const uint4 &wb, const pair_chunks &pc, bool rot,
                                           const float (&c)[8], const float (&s)[8], T *q_row, uint8_t *cache_row,
                                           float inv_scale)
{
    float o[8];
    chunk_out<T, NEOX>(wa, wb, rot, c, s, 0, true, o);
    if (q_row)
        *reinterpret_cast<uint4 *>(q_row + 8 * pc.a) = kl::pack<T>(o);
    else
        *reinterpret_cast<uint2 *>(cache_row + 8 * pc.a) = quant8(o, inv_scale);
    if (!pc.has_b) return;
    chunk_out<T, NEOX>(wb, wa, rot && pc.rot_b, c, s, 4, false, o);
    if (q_row)
        *reinterpret_cast<uint4 *>(q_row + 8 * pc.b) = kl::pack<T>(o);
    else
        *reinterpret_cast<uint2 *>(cache_row + 8 * pc.b) = quant8(o, inv_scale);
}

} // namespace kl::store_fused
