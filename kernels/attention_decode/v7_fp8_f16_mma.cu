/* v7_fp8_f16_mma: v6_fp8_tensor_cores with the mma in fp16 whatever q's type, so that an e4m3 pair
 * becomes an mma operand in one instruction (cvt.rn.f16x2.e4m3x2), and V's byte pairing in one
 * byte permute per two pairs.
 *
 * What changed from v6, and why: v6 feeds a bf16 q's mma bf16 operands, so each pair of codes went
 * e4m3 -> f16x2 -> two float32 -> bf16x2, about four instructions, on the issue path of a kernel
 * that must keep up with the read bandwidth at one byte an element. fp16 holds every e4m3 value
 * exactly (they are fp16 normals or zeros), so the single cvt is the whole dequantization if the
 * other operands are fp16 too:
 * - q (B operand of K Q^T) is converted once per block to fp16, scaled per qo head by a power of
 *   two 2^(141 - e) that puts the head's largest |q| (exponent field e of its float32 bits) in
 *   [2^14, 2^15): inside fp16's range, and every element within 2^-28 of that largest one an fp16
 *   normal, so bf16's 8 significant bits convert exactly; smaller ones round on fp16's subnormal
 *   grid, an absolute error of 2^-39 of the largest |q| at most. e is taken at least 15 (a head of
 *   zeros or with every |q| below 2^-112: scale 2^126, a float32 normal); a head holding an infinity
 *   (e = 255) is not scaled (its finite elements past 65504 become infinite: its scores are
 *   non-finite either way); NaN stays NaN. The scores are multiplied back by 2^(e - 141) (exact,
 *   a power of two) before the score scale: the logits are v6's, rounding for rounding. A fp16 q
 *   goes in as it is (scale 1).
 * - P (B operand of V^T P^T) is rounded to fp16 instead of bf16: finer (unit roundoff 2^-11, not
 *   2^-8) for p >= 2^-14; below that fp16's subnormals (the mma takes them as they are) round to
 *   2^-25 absolute. With l >= 1 (the running max's own p is 1) the error on out is at most
 *   (2^-11 + n 2^-25) max|v| over n keys, below bf16's 2^-8 max|v| up to n = 2^17 - 2^14 keys:
 *   lab/core/compare.c's FP8 bound for a bf16 q, which charges P at bf16's roundoff, holds.
 * - V's pairs of one dim across two tokens are one prmt (__byte_perm) per two pairs instead of
 *   v6's shifts and masks; the pairing itself stays: the tokens are the reduction dim, so an
 *   operand register always holds two tokens of one dim, two rows of the tile of codes.
 * Rejected: moving the code's bits into a bf16 (sign << 15 | (code & 0x7f) << 4, the value times
 * 2^-120 exactly): the operands then sit at 2^-129 .. 2^-111, bf16 subnormals and products below
 * float32's normal range in the mma's accumulation; adding a constant to the exponent field to lift
 * them turns the subnormal codes (exponent field 0) into wrong normals. The same move into fp16
 * (times 2^-8, exact for subnormals too) takes a prmt and a shift and a lop3 per two pairs and
 * turns the NaN codes into finite values; the cvt is one instruction a pair and keeps NaN.
 * Everything else (grid, split, cp.async stages of codes, swizzle, K's dim permutation shared with
 * q, movmatrix for P, the merge) is v6's.
 * Bound: the read bandwidth on K/V at 1 byte an element (b64-kv8k-p16-fp8 reads 1.07 GB of K/V),
 * plus q, out and the page table; the dequantization is one cvt per pair of K and one cvt plus half
 * a prmt per pair of V.
 * bf16/fp16 q and out, head_dim 64/128/256, one query token per request (qo_indptr: NotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v7_fp8_f16_mma --workload b64-kv8k-p16-fp8 */
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>

#include "kernels/attention_decode/decode.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

/* 0. The module's GPU tests compile this file again with 1 (q's per-head power of two left in the
 * scores) and expect the checks to flag it. */
#ifndef KL_DECODE_V7_BUG
#define KL_DECODE_V7_BUG 0
#endif

namespace { /* v6 has helpers of the same names */

/* A block of WARPS warps, STAGES stages of 16 tokens per warp. */
template <int HD, int WARPS_, int STAGES_> struct f8_shape {
    static constexpr int WARPS = WARPS_, THREADS = 32 * WARPS, STAGES = STAGES_;
    static constexpr int TOK = 16 * WARPS;         /* tokens per stage: 16 per warp */
    static constexpr int CHUNKS = HD / 16;         /* 16-byte chunks per row of codes */
    static constexpr int KSTEPS = HD / 16;         /* k-steps of Q.K, m-tiles of V^T */
    static constexpr int STAGE_CHUNKS = 2 * TOK * CHUNKS; /* K then V */
    static constexpr int ROW = HD + 2;             /* merged rows: acc, m, l */
    static constexpr int STAGE_BYTES = STAGES * STAGE_CHUNKS * 16;
    static constexpr int MERGE_BYTES = (WARPS + 1) * 8 * ROW * 4;            /* the warps' states, then res */
    static constexpr int WEIGHT_BYTES = 8 * (KL_DECODE_MAX_SPLITS + 2) * 4; /* merge_partials' weights */
    static constexpr int SMEM = STAGE_BYTES > MERGE_BYTES ? (STAGE_BYTES > WEIGHT_BYTES ? STAGE_BYTES : WEIGHT_BYTES)
                                                          : (MERGE_BYTES > WEIGHT_BYTES ? MERGE_BYTES : WEIGHT_BYTES);
    static_assert(THREADS % CHUNKS == 0 && TOK * CHUNKS % THREADS == 0, "whole rows per copy pass");
};

/* Chunk c of row r of a [rows][HD / 16] tile of codes, swizzled as v6's. */
template <int HD> __device__ __forceinline__ int swz(int r, int c)
{
    constexpr int CHUNKS = HD / 16;
    return r * CHUNKS + (c ^ (CHUNKS >= 8 ? (r & 7) : ((r >> 1) & (CHUNKS - 1))));
}

/* Bytes o .. o + 3 of row r of a tile of codes (o a multiple of 4). */
template <int HD> __device__ __forceinline__ uint32_t codes4(const uint4 *tile, int r, int o)
{
    const unsigned char *at = reinterpret_cast<const unsigned char *>(tile + swz<HD>(r, o >> 4)) + (o & 15);
    return *reinterpret_cast<const uint32_t *>(at);
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

/* The power of two 2^(141 - e) that brings a head's largest |q| (exponent field e) into [2^14, 2^15),
 * as (up, down = 1 / up); e at least 15, and 255 (an infinity) not scaled. */
__device__ __forceinline__ float2 q_scales(float q_abs_max)
{
    const int f = (int)(__float_as_uint(q_abs_max) >> 23), e = f == 255 ? 141 : max(f, 15);
    return make_float2(__uint_as_float((uint32_t)(268 - e) << 23), __uint_as_float((uint32_t)(e - 14) << 23));
}

} // namespace

template <typename T, int HD, int WARPS, int STAGES>
static __global__ void __launch_bounds__(32 * WARPS) decode_v7(const kl_attention_decode_params p, int chunk)
{
    using S = f8_shape<HD, WARPS, STAGES>;
    extern __shared__ uint4 smem[];
    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * 8;
    const int nh = min(8, g * group + group - h0), n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk;
    if (n == 0) {
        if (split == 0)
            for (int h = 0; h < nh; h++) kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    if (split >= splits) return;
    const int t0 = split * chunk, t1 = min(n, t0 + chunk), n_stages = (t1 - t0 + S::TOK - 1) / S::TOK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    /* Scores in log2 units, k_scale folded in; v_scale applied where the accumulators leave. */
    const float scale = p.sm_scale * p.k_scale[g] * 1.44269504089f, v_sc = p.v_scale[g];

    /* Q^T as the B operand in fp16, in K's dim order: k-step ks, lane (gq, tq) holds qo head h0 + gq's
     * dims 16 ks + 4 tq .. + 3 (b0: the first two, b1: the last two). A bf16 q is scaled by its
     * head's power of two on the way (q_scales; the four lanes of a head hold all its dims). */
    uint32_t qf[S::KSTEPS][2];
    float q_down = 1.f; /* head gq's 1 / up */
    {
        const T *q = static_cast<const T *>(p.q) + ((int64_t)b * p.num_qo_heads + h0 + min(gq, nh - 1)) * HD;
#pragma unroll
        for (int ks = 0; ks < S::KSTEPS; ks++) {
            const uint2 w = *reinterpret_cast<const uint2 *>(q + 16 * ks + 4 * tq);
            qf[ks][0] = gq < nh ? w.x : 0u, qf[ks][1] = gq < nh ? w.y : 0u; /* a head past nh: q = 0, never written */
        }
        if constexpr (std::is_same<T, __nv_bfloat16>::value) {
            float mx = 0.f; /* fmaxf passes NaN by: a NaN element stays NaN below */
#pragma unroll
            for (int ks = 0; ks < S::KSTEPS; ks++)
#pragma unroll
                for (int i = 0; i < 2; i++)
                    mx = fmaxf(mx, fmaxf(fabsf(__uint_as_float(qf[ks][i] << 16)),
                                         fabsf(__uint_as_float(qf[ks][i] & 0xFFFF0000u))));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float2 sc = q_scales(mx);
            q_down = sc.y;
#pragma unroll
            for (int ks = 0; ks < S::KSTEPS; ks++)
#pragma unroll
                for (int i = 0; i < 2; i++)
                    qf[ks][i] = kl::ptx::pack2<__half>(__uint_as_float(qf[ks][i] << 16) * sc.x,
                                                       __uint_as_float(qf[ks][i] & 0xFFFF0000u) * sc.x);
        }
    }
    /* The scores' columns 2 tq and 2 tq + 1 are heads 2 tq and 2 tq + 1: their 1 / up. */
    const float dq0 = KL_DECODE_V7_BUG == 1 ? 1.f : __shfl_sync(0xffffffffu, q_down, 8 * tq);
    const float dq1 = KL_DECODE_V7_BUG == 1 ? 1.f : __shfl_sync(0xffffffffu, q_down, 8 * tq + 4);

    /* Stage st holds tokens t0 + TOK st .. in buffer st % STAGES; thread i copies 16-byte chunk
     * i % CHUNKS of rows i / CHUNKS, + THREADS / CHUNKS, ... (RPT rows), of K and of V; the page
     * numbers a stage ahead of the copies (v6's pipeline). */
    constexpr int RPT = S::TOK * S::CHUNKS / S::THREADS;
    const int32_t *pages = p.kv_indices + p.kv_indptr[b];
    const int ps = (int)p.page_size, c = threadIdx.x % S::CHUNKS, r0 = threadIdx.x / S::CHUNKS;
    auto fetch_slots = [&](int st, int (&slot)[RPT]) {
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            const int t = t0 + st * S::TOK + r0 + i * (S::THREADS / S::CHUNKS);
            slot[i] = t < t1 ? pages[t / ps] * ps + t % ps : -1; /* -1: past the chunk */
        }
    };
    /* Past t1 a copy reads nothing and writes zeros (codes of +0, never a NaN code). */
    const unsigned char *kc = static_cast<const unsigned char *>(p.k_cache);
    const unsigned char *vc = static_cast<const unsigned char *>(p.v_cache);
    auto issue_stage = [&](int st, const int (&slot)[RPT]) {
        if (st < n_stages) {
            uint4 *ks = smem + (st % S::STAGES) * S::STAGE_CHUNKS, *vs = ks + S::TOK * S::CHUNKS;
#pragma unroll
            for (int i = 0; i < RPT; i++) {
                const int r = r0 + i * (S::THREADS / S::CHUNKS);
                const int64_t at = slot[i] < 0 ? 0 : ((int64_t)slot[i] * p.num_kv_heads + g) * HD + 16 * c;
                kl::ptx::cp_async_16(kl::ptx::smem_addr(ks + swz<HD>(r, c)), kc + at, slot[i] >= 0);
                kl::ptx::cp_async_16(kl::ptx::smem_addr(vs + swz<HD>(r, c)), vc + at, slot[i] >= 0);
            }
        }
        kl::ptx::cp_async_commit();
    };

    float o[S::KSTEPS][4] = {}; /* O^T, m-tile mt: rows g, g + 8 are dims 32 (mt / 2) + 4 gq + 2 (mt % 2) + 0, 1 */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* columns 2 tq and 2 tq + 1 */
    int slot[RPT];
    for (int st = 0; st < S::STAGES - 1; st++) fetch_slots(st, slot), issue_stage(st, slot);
    fetch_slots(S::STAGES - 1, slot);
    for (int st = 0; st < n_stages; st++) {
        kl::ptx::cp_async_wait<S::STAGES - 2>(); /* this thread's copies of stage st have landed */
        __syncthreads(); /* ...everyone's too; and every warp is done with the buffer refilled next */
        issue_stage(st + S::STAGES - 1, slot);
        fetch_slots(st + S::STAGES, slot);
        const uint4 *ks = smem + (st % S::STAGES) * S::STAGE_CHUNKS, *vs = ks + S::TOK * S::CHUNKS;

        /* S^T = K Q^T over this warp's 16 tokens (v6's operand order): a0/a2 row gq's first/last
         * pair of the four bytes at 16 kk + 4 tq, a1/a3 row gq + 8's. */
        float s[4] = {0, 0, 0, 0}, s_odd[4] = {0, 0, 0, 0}; /* two chains: half the dependent mma latency */
        const int rk = warp * 16 + gq;
#pragma unroll
        for (int kk = 0; kk < S::KSTEPS; kk++) {
            const uint32_t w0 = codes4<HD>(ks, rk, 16 * kk + 4 * tq), w1 = codes4<HD>(ks, rk + 8, 16 * kk + 4 * tq);
            const uint32_t a[4] = {f16x2(w0, 0), f16x2(w1, 0), f16x2(w0, 1), f16x2(w1, 1)};
            kl::ptx::mma_16816<__half>(kk % 2 ? s_odd : s, a, qf[kk][0], qf[kk][1]);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) s[e] += s_odd[e];

        /* Online softmax per column, as v6's, on the scores with q's power of two taken out first
         * (exact): s[0], s[1] token gq, columns 2tq, 2tq+1; s[2], s[3] token gq + 8. */
        const int tok = t0 + st * S::TOK + warp * 16 + gq;
        const float x0 = tok < t1 ? s[0] * dq0 * scale : -INFINITY, x1 = tok < t1 ? s[1] * dq1 * scale : -INFINITY;
        const float x2 = tok + 8 < t1 ? s[2] * dq0 * scale : -INFINITY;
        const float x3 = tok + 8 < t1 ? s[3] * dq1 * scale : -INFINITY;
        float w[4]; /* the tile's weights p0..p3, from the unrounded scores (decode.cuh) */
        kl::decode::softmax_tile<S::KSTEPS>({x0, x1, x2, x3}, m, l, o, w);
        const float p0 = w[0], p1 = w[1], p2 = w[2], p3 = w[3];
        /* P^T as the B operand in fp16 (v6's transpose): b0 tokens 2tq, 2tq + 1, b1 tokens 8 + 2tq, +1. */
        const uint32_t pb0 = kl::ptx::movmatrix_trans(kl::ptx::pack2<__half>(p0, p1));
        const uint32_t pb1 = kl::ptx::movmatrix_trans(kl::ptx::pack2<__half>(p2, p3));

        /* O^T += V^T P^T: the lane's A columns are tokens 2tq, 2tq + 1 (a0, a1) and 8 + 2tq, +1 (a2,
         * a3) of the warp's 16; its rows gq / gq + 8 of m-tile 2j + h are dims 32 j + 4 gq + 2h / + 1:
         * one 32-bit load per token row and j, the bytes paired across two tokens by one prmt. */
        const int rv = warp * 16 + 2 * tq;
#pragma unroll
        for (int j = 0; j < HD / 32; j++) {
            const int off = 32 * j + 4 * gq;
            const uint32_t v0 = codes4<HD>(vs, rv, off), v1 = codes4<HD>(vs, rv + 1, off);
            const uint32_t v8 = codes4<HD>(vs, rv + 8, off), v9 = codes4<HD>(vs, rv + 9, off);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t lo = interleave(v0, v1, h), hi = interleave(v8, v9, h);
                const uint32_t a[4] = {f16x2(lo, 0), f16x2(lo, 1), f16x2(hi, 0), f16x2(hi, 1)};
                kl::ptx::mma_16816<__half>(o[2 * j + h], a, pb0, pb1);
            }
        }
    }
    kl::ptx::cp_async_wait<0>();
    __syncthreads(); /* the stage buffers become the merge area */

    /* Each warp's state to shared memory (8 rows per warp), v_scale applied: l summed over the lanes
     * sharing a column first. */
    float *mrg = reinterpret_cast<float *>(smem);
    kl::decode::sum_column_l(l);
    {
        float *w0 = mrg + (warp * 8 + 2 * tq) * S::ROW, *w1 = w0 + S::ROW;
#pragma unroll
        for (int mt = 0; mt < S::KSTEPS; mt++) {
            const int d = 32 * (mt / 2) + 4 * gq + 2 * (mt % 2);
            w0[d] = o[mt][0] * v_sc, w1[d] = o[mt][1] * v_sc, w0[d + 1] = o[mt][2] * v_sc, w1[d + 1] = o[mt][3] * v_sc;
        }
        if (gq == 0) w0[HD] = m[0], w0[HD + 1] = l[0], w1[HD] = m[1], w1[HD + 1] = l[1];
    }
    __shared__ bool last; /* this block merges the request's partials */
    kl::decode::finish_cta<T, HD, S::WARPS>(p, mrg, last, b, g, blockIdx.y % blocks, h0, nh, split, splits);
}

template <typename T, int HD, int WARPS, int STAGES>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                                cudaStream_t stream)
{
    using S = f8_shape<HD, WARPS, STAGES>;
    void (*kernel)(const kl_attention_decode_params, int) = decode_v7<T, HD, WARPS, STAGES>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t blocks = (p->num_qo_heads / p->num_kv_heads + 7) / 8;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    kernel<<<grid, S::THREADS, S::SMEM, stream>>>(*p, (int)plan.chunk);
    return cudaGetLastError();
}

/* v6's shapes: four stages of codes hold the bytes of v4's two stages of bf16; page_size 1 and
 * head_dim 256 take two warps. */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan, cudaStream_t stream)
{
    if (p->page_size < 8 || HD == 256) return launch_shape<T, HD, 2, 4>(p, plan, stream);
    return launch_shape<T, HD, 4, 4>(p, plan, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_fp8(p, "v7_fp8_f16_mma");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 4, 64, 128, 2048);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v7_fp8_f16_mma: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v7_fp8_f16_mma, launch, .min_cc = 89,
           .summary = "v6 with fp16 mma operands: one cvt per e4m3 pair, q scaled per head by a power of two");
