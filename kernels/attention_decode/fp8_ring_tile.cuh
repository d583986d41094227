/* The consumer warp's arithmetic of the decode variants that read e4m3 pages from a TMA ring
 * (v9_fp8_tma_pages, v10_fp8_page_heads, v14_fp8_early_release): q as the fp16 B operand, one
 * online-softmax update over a 16-token tile of codes in a ring stage (the lane's codes read out of the
 * stage, then the arithmetic on them: v14 hands the stage back between the two), and the warp's state
 * written for finish_cta. It is v7's arithmetic (v7_fp8_f16_mma says why fp16: e4m3 codes become fp16
 * exactly, one cvt a pair) on page_ring.cuh's layout: a K or V head tile is BLOCKS blocks of 16 rows x
 * 128 codes, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the copies' 128-byte swizzle; each
 * tile 1024-byte aligned). Lane (gq, tq) = (lane / 4, lane % 4) of the mma fragments: the scores'
 * columns 2 tq, 2 tq + 1 are qo heads 2 tq, 2 tq + 1 of the kv head's group, its rows gq and gq + 8 the
 * tile's tokens. */
#pragma once

#include <stdint.h>
#include <type_traits>

#include "kernels/attention_decode/attention_decode.h"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/common.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"

namespace kl::decode::fp8_ring {

/* Codes o .. o + 3 (o a multiple of 4) of row r of a head tile at `tile`: block o / 128, row r,
 * 16-byte chunk (o / 16) % 8 where the swizzle moved it (SWIZZLED false: where it was in the cache,
 * a planted bug of the tests). */
template <bool SWIZZLED> __device__ __forceinline__ uint32_t codes4(const unsigned char *tile, int r, int o)
{
    const int c = o / 16 % 8, moved = SWIZZLED ? c ^ (r % 8) : c;
    return *reinterpret_cast<const uint32_t *>(tile + (o / 128) * 16 * 128 + r * 128 + moved * 16 + o % 16);
}

/* The low (h = 0) or high (h = 1) pair of codes of a 32-bit word as f16x2, exact. */
__device__ __forceinline__ uint32_t f16x2(uint32_t codes, int h)
{
    return kl::ptx::cvt_e4m3x2_f16x2((uint16_t)(codes >> (16 * h)));
}

/* [x.b(2h), y.b(2h), x.b(2h+1), y.b(2h+1)]: the e4m3 pairs of two dims across two tokens, one prmt. */
__device__ __forceinline__ uint32_t interleave(uint32_t x, uint32_t y, int h)
{
    return __byte_perm(x, y, h ? 0x7362u : 0x5140u);
}

/* v7's power of two 2^(141 - e) for a head whose largest |q| has exponent field e, as (up, 1 / up). */
__device__ __forceinline__ float2 q_scales(float q_abs_max)
{
    const int f = (int)(__float_as_uint(q_abs_max) >> 23), e = f == 255 ? 141 : max(f, 15);
    return make_float2(__uint_as_float((uint32_t)(268 - e) << 23), __uint_as_float((uint32_t)(e - 14) << 23));
}

/* Q^T as the B operand in fp16, in K's dim order (v7's): k-step ks, lane (gq, tq) holds qo head
 * h0 + gq's dims 16 ks + 4 tq .. + 3 of request b (0 for gq >= nh); a bf16 q is scaled by its head's
 * power of two. dq0, dq1: 1 / up of the heads of the lane's score columns 2 tq, 2 tq + 1. */
template <typename T, int HD>
__device__ __forceinline__ void q_operand(const kl_attention_decode_params &p, int b, int h0, int nh,
                                          uint32_t (&qf)[HD / 16][2], float &dq0, float &dq1)
{
    const int lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    float q_down = 1.f; /* head gq's 1 / up */
    const T *q = static_cast<const T *>(p.q) + ((int64_t)b * p.num_qo_heads + h0 + min(gq, nh - 1)) * HD;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        const uint2 w = *reinterpret_cast<const uint2 *>(q + 16 * ks + 4 * tq);
        qf[ks][0] = gq < nh ? w.x : 0u, qf[ks][1] = gq < nh ? w.y : 0u; /* a head past nh: q = 0, never written */
    }
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        float mx = 0.f; /* fmaxf passes NaN by: a NaN element stays NaN below */
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
            for (int i = 0; i < 2; i++)
                mx = fmaxf(mx, fmaxf(fabsf(__uint_as_float(qf[ks][i] << 16)),
                                     fabsf(__uint_as_float(qf[ks][i] & 0xFFFF0000u))));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float2 sc = q_scales(mx);
        q_down = sc.y;
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
            for (int i = 0; i < 2; i++)
                qf[ks][i] = kl::ptx::pack2<__half>(__uint_as_float(qf[ks][i] << 16) * sc.x,
                                                   __uint_as_float(qf[ks][i] & 0xFFFF0000u) * sc.x);
    }
    dq0 = __shfl_sync(0xffffffffu, q_down, 8 * tq), dq1 = __shfl_sync(0xffffffffu, q_down, 8 * tq + 4);
}

/* A lane's codes of one tile, as the mma fragments below take them: k[kk] the four codes at 16 kk + 4 tq
 * of rows gq and gq + 8 (K), v[j] the four at 32 j + 4 gq of rows 2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9
 * (V): HD / 4 registers a lane, the tile's whole share of the stage. */
template <int HD> struct tile_codes {
    uint32_t k[HD / 16][2], v[HD / 32][4];
};

/* The lane's codes of K's head tile at ks and V's at vs, read out of the stage. */
template <int HD, bool SWIZZLED>
__device__ __forceinline__ void load_codes(const unsigned char *ks, const unsigned char *vs, tile_codes<HD> &c)
{
    const int lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        c.k[kk][0] = codes4<SWIZZLED>(ks, gq, 16 * kk + 4 * tq);
        c.k[kk][1] = codes4<SWIZZLED>(ks, gq + 8, 16 * kk + 4 * tq);
    }
#pragma unroll
    for (int j = 0; j < HD / 32; j++) {
        const int off = 32 * j + 4 * gq;
        c.v[j][0] = codes4<SWIZZLED>(vs, 2 * tq, off), c.v[j][1] = codes4<SWIZZLED>(vs, 2 * tq + 1, off);
        c.v[j][2] = codes4<SWIZZLED>(vs, 2 * tq + 8, off), c.v[j][3] = codes4<SWIZZLED>(vs, 2 * tq + 9, off);
    }
}

/* One tile from the lane's codes c: tokens tok0 .. tok0 + 15 (those at or past t1, copies of the last
 * one, score -inf); scores in log2 units times `scale` (k_scale folded in), q's power of two taken out
 * by dq0, dq1. The online softmax per head column: running max m, sum l, unnormalised O^T (m-tile mt:
 * rows gq, gq + 8 are dims 32 (mt / 2) + 4 gq + 2 (mt % 2) + 0, 1). */
template <int HD>
__device__ __forceinline__ void tile_math(const tile_codes<HD> &c, const uint32_t (&qf)[HD / 16][2], float dq0,
                                          float dq1, float scale, int tok0, int t1, float (&o)[HD / 16][4],
                                          float (&m)[2], float (&l)[2])
{
    const int lane = threadIdx.x % 32, gq = lane / 4;
    /* S^T = K Q^T over the tile's 16 tokens (v7's operand order): a0/a2 row gq's first/last pair of
     * the four codes at 16 kk + 4 tq, a1/a3 row gq + 8's. */
    float s[4] = {0, 0, 0, 0}, s_odd[4] = {0, 0, 0, 0}; /* two chains: half the dependent mma latency */
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        const uint32_t w0 = c.k[kk][0], w1 = c.k[kk][1];
        const uint32_t a[4] = {f16x2(w0, 0), f16x2(w1, 0), f16x2(w0, 1), f16x2(w1, 1)};
        kl::ptx::mma_16816<__half>(kk % 2 ? s_odd : s, a, qf[kk][0], qf[kk][1]);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) s[e] += s_odd[e];

    /* s[0], s[1]: token gq, heads 2tq, 2tq+1; s[2], s[3]: token gq + 8. */
    const int tok = tok0 + gq;
    const float x[4] = {tok < t1 ? s[0] * dq0 * scale : -INFINITY, tok < t1 ? s[1] * dq1 * scale : -INFINITY,
                        tok + 8 < t1 ? s[2] * dq0 * scale : -INFINITY, tok + 8 < t1 ? s[3] * dq1 * scale : -INFINITY};
    float w[4];
    kl::decode::softmax_tile<HD / 16>(x, m, l, o, w);
    /* P^T as the B operand in fp16: b0 tokens 2tq, 2tq + 1, b1 tokens 8 + 2tq, + 1. */
    const uint32_t pb0 = kl::ptx::movmatrix_trans(kl::ptx::pack2<__half>(w[0], w[1]));
    const uint32_t pb1 = kl::ptx::movmatrix_trans(kl::ptx::pack2<__half>(w[2], w[3]));

    /* O^T += V^T P^T (v7's): A columns are tokens 2tq, 2tq + 1 (a0, a1) and 8 + 2tq, + 1 (a2, a3);
     * rows gq / gq + 8 of m-tile 2j + h are dims 32 j + 4 gq + 2h / + 1. */
#pragma unroll
    for (int j = 0; j < HD / 32; j++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t lo = interleave(c.v[j][0], c.v[j][1], h), hi = interleave(c.v[j][2], c.v[j][3], h);
            const uint32_t a[4] = {f16x2(lo, 0), f16x2(lo, 1), f16x2(hi, 0), f16x2(hi, 1)};
            kl::ptx::mma_16816<__half>(o[2 * j + h], a, pb0, pb1);
        }
    }
}

/* One tile read straight out of the stage: K's head tile at ks, V's at vs (load_codes, then tile_math). */
template <int HD, bool SWIZZLED>
__device__ __forceinline__ void tile_update(const unsigned char *ks, const unsigned char *vs,
                                            const uint32_t (&qf)[HD / 16][2], float dq0, float dq1, float scale,
                                            int tok0, int t1, float (&o)[HD / 16][4], float (&m)[2], float (&l)[2])
{
    tile_codes<HD> c;
    load_codes<HD, SWIZZLED>(ks, vs, c);
    tile_math<HD>(c, qf, dq0, dq1, scale, tok0, t1, o, m, l);
}

/* The warp's state as finish_cta reads it, v_scale applied: its 8 rows at `rows` (head 2 tq and
 * 2 tq + 1 at rows 2 tq, 2 tq + 1; HD + 2 floats a row: acc, m, l), l summed over the lanes sharing
 * a head first. */
template <int HD>
__device__ __forceinline__ void write_state(float *rows, const float (&o)[HD / 16][4], const float (&m)[2],
                                            float (&l)[2], float v_scale)
{
    const int lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    kl::decode::sum_column_l(l);
    float *w0 = rows + 2 * tq * (HD + 2), *w1 = w0 + HD + 2;
#pragma unroll
    for (int mt = 0; mt < HD / 16; mt++) {
        const int d = 32 * (mt / 2) + 4 * gq + 2 * (mt % 2);
        w0[d] = o[mt][0] * v_scale, w1[d] = o[mt][1] * v_scale;
        w0[d + 1] = o[mt][2] * v_scale, w1[d + 1] = o[mt][3] * v_scale;
    }
    if (gq == 0) w0[HD] = m[0], w0[HD + 1] = l[0], w1[HD] = m[1], w1[HD + 1] = l[1];
}

} // namespace kl::decode::fp8_ring
