/* v6_fp8_tensor_cores: v4_tensor_cores on an FP8 (e4m3) KV cache: K and V pages read as one byte an
 * element, dequantized in registers, the scores and P.V on tensor cores as in v4.
 *
 * What changed from v4, and why: decode reads every byte of K and V once and does little with it
 * (v4 runs at the read bandwidth), so halving those bytes is the one large gain left, and an e4m3
 * cache with a float32 scale per kv head does that (value = code x scale[kv head]). The K/V tiles
 * come into shared memory with cp.async as they are, codes, half the bytes of a bf16 tile for the
 * same 16 tokens per warp; each warp reads its fragments from there with plain 32-bit loads and
 * converts them to the mma's 16-bit type in registers (cvt.rn.f16x2.e4m3x2, and fp16 -> bf16
 * through float32 for a bf16 q: every e4m3 value is exact in both, so the conversion adds no
 * error). No ldmatrix: a fragment of codes is 8-bit pairs, not the 16-bit rows ldmatrix moves.
 * - K Q^T: the sum over d does not care in which order the dims come, so Q and K share a
 *   permutation: in k-step kk the lane's four A columns 2t, 2t+1, 2t+8, 2t+9 are dims
 *   16 kk + 4t .. + 3, four contiguous bytes of a K row, one 32-bit load per row and k-step; q is
 *   loaded once in the same order.
 * - V^T P^T: the tokens are the reduction dim and P's layout (from movmatrix, as in v4) fixes
 *   which tokens a lane holds (2t, 2t+1, 2t+8, 2t+9 of the warp's 16); the output dims are free,
 *   so the lane's A rows g, g+8 of m-tiles 2j and 2j+1 are dims 32 j + 4g .. + 3: four
 *   contiguous bytes of each of its four token rows, then byte shuffles into the e4m3 pairs.
 *   The epilogue writes each accumulator to the dim it stands for.
 * - The scales: k_scale[g] x sm_scale x log2(e) is the score scale (one float per block);
 *   v_scale[g] multiplies the accumulators when they leave the registers (the merge and the
 *   partials see true values, so the split-KV merge is v4's).
 * Shared memory is 16-byte chunks swizzled as in v4 (chunk c of row r at c ^ (r % 8); at head_dim
 * 64, four chunks a row, c ^ (r / 2 % 4)), so the eight rows a load instruction touches fall in
 * different banks. A stage of 64 tokens is half v4's bytes, so four stages keep as many bytes in
 * flight per block as v4's two.
 * Bound: the read bandwidth on K/V at 1 byte an element (b64-kv8k-p16-fp8 reads 1.07 GB of K/V, half
 * of b64-kv8k-p16's), plus q, out and the page table; the conversions are ~4 instructions per pair
 * of elements (bf16), which the issue rate carries at that bandwidth.
 * bf16/fp16 q and out, head_dim 64/128/256, one query token per request (qo_indptr: NotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v6_fp8_tensor_cores --workload b64-kv8k-p16-fp8 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#include "kernels/attention_decode/decode.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

/* 0. The module's GPU tests compile this file again with 1 (k_scale left out of the score scale),
 * 2 (kv head 0's k_scale for every head) or 3 (v_scale left out) and expect the checks to flag it. */
#ifndef KL_DECODE_V6_BUG
#define KL_DECODE_V6_BUG 0
#endif

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

/* Chunk c of row r of a [rows][HD / 16] tile of codes, swizzled: the 8 rows one load instruction
 * reads land in 8 different 16-byte bank groups (two rows share 128 bytes at head_dim 64). */
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

/* Two e4m3 codes (the low byte first) as two T, exact, packed the low one first. */
template <typename T> __device__ __forceinline__ uint32_t dequant2(uint32_t codes)
{
    const uint32_t h = kl::ptx::cvt_e4m3x2_f16x2((uint16_t)codes);
    if constexpr (std::is_same<T, __half>::value) {
        return h;
    } else {
        __half2 x;
        memcpy(&x, &h, 4);
        const float2 f = __half22float2(x);
        return kl::ptx::pack2<T>(f.x, f.y); /* exact: an e4m3 value has 4 significant bits */
    }
}

/* Bytes hi of x and y, then byte hi + 1 of each: [x.b(2h), y.b(2h), x.b(2h+1), y.b(2h+1)] for
 * hi = 2h, the e4m3 pairs of one dim across two tokens. */
__device__ __forceinline__ uint32_t interleave(uint32_t x, uint32_t y, int h)
{
    const uint32_t xs = (x >> (16 * h)) & 0xFFFFu, ys = (y >> (16 * h)) & 0xFFFFu;
    return (xs & 0xFFu) | ((ys & 0xFFu) << 8) | ((xs & 0xFF00u) << 8) | ((ys & 0xFF00u) << 16);
}

template <typename T, int HD, int WARPS, int STAGES>
static __global__ void __launch_bounds__(32 * WARPS) decode_v6(const kl_attention_decode_params p, int chunk)
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
    const float k_sc = KL_DECODE_V6_BUG == 1 ? 1.f : p.k_scale[KL_DECODE_V6_BUG == 2 ? 0 : g];
    const float v_sc = KL_DECODE_V6_BUG == 3 ? 1.f : p.v_scale[g];
    const float scale = p.sm_scale * k_sc * 1.44269504089f;

    /* Q^T as the B operand, in K's dim order: k-step ks, lane (gq, tq) holds qo head h0 + gq's dims
     * 16 ks + 4 tq .. + 3 (b0: the first two, b1: the last two). */
    uint32_t qf[S::KSTEPS][2];
    {
        const T *q = static_cast<const T *>(p.q) + ((int64_t)b * p.num_qo_heads + h0 + min(gq, nh - 1)) * HD;
#pragma unroll
        for (int ks = 0; ks < S::KSTEPS; ks++) {
            const uint2 w = *reinterpret_cast<const uint2 *>(q + 16 * ks + 4 * tq);
            qf[ks][0] = gq < nh ? w.x : 0u, qf[ks][1] = gq < nh ? w.y : 0u; /* a head past nh: q = 0, never written */
        }
    }

    /* Stage st holds tokens t0 + TOK st .. in buffer st % STAGES; thread i copies 16-byte chunk
     * i % CHUNKS of rows i / CHUNKS, + THREADS / CHUNKS, ... (RPT rows), of K and of V. The page
     * numbers are loaded a stage ahead of the copies (fetch_slots), as in v4. */
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
    /* Past t1 a copy reads nothing and writes zeros (codes of +0: the masked scores and their
     * zero probabilities meet zeros, never a NaN code of an unwritten row). */
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

        /* S^T = K Q^T over this warp's 16 tokens: A rows gq and gq + 8 are tokens warp 16 + gq (+ 8);
         * the lane's columns in k-step kk are the four bytes at 16 kk + 4 tq (a0/a2: the row gq's
         * first/last pair, a1/a3: row gq + 8's). */
        float s[4] = {0, 0, 0, 0}, s_odd[4] = {0, 0, 0, 0}; /* two chains: half the dependent mma latency */
        const int rk = warp * 16 + gq;
#pragma unroll
        for (int kk = 0; kk < S::KSTEPS; kk++) {
            const uint32_t w0 = codes4<HD>(ks, rk, 16 * kk + 4 * tq), w1 = codes4<HD>(ks, rk + 8, 16 * kk + 4 * tq);
            const uint32_t a[4] = {dequant2<T>(w0 & 0xFFFFu), dequant2<T>(w1 & 0xFFFFu), dequant2<T>(w0 >> 16),
                                   dequant2<T>(w1 >> 16)};
            kl::ptx::mma_16816<T>(kk % 2 ? s_odd : s, a, qf[kk][0], qf[kk][1]);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) s[e] += s_odd[e];

        /* Online softmax per column, as v4's: s[0], s[1] token gq, columns 2tq, 2tq+1; s[2], s[3]
         * token gq + 8. */
        const int tok = t0 + st * S::TOK + warp * 16 + gq;
        const float x0 = tok < t1 ? s[0] * scale : -INFINITY, x1 = tok < t1 ? s[1] * scale : -INFINITY;
        const float x2 = tok + 8 < t1 ? s[2] * scale : -INFINITY, x3 = tok + 8 < t1 ? s[3] * scale : -INFINITY;
        float w[4]; /* the tile's weights p0..p3, from the unrounded scores (decode.cuh) */
        kl::decode::softmax_tile<S::KSTEPS>({x0, x1, x2, x3}, m, l, o, w);
        const float p0 = w[0], p1 = w[1], p2 = w[2], p3 = w[3];
        /* P^T as the B operand (v4's transpose): b0 tokens 2tq, 2tq + 1, b1 tokens 8 + 2tq, +1; column gq. */
        const uint32_t pb0 = kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(p0, p1));
        const uint32_t pb1 = kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(p2, p3));

        /* O^T += V^T P^T: the lane's A columns are tokens 2tq, 2tq + 1 (a0, a1) and 8 + 2tq, +1 (a2,
         * a3) of the warp's 16; its rows gq / gq + 8 of m-tile 2j + h are dims 32 j + 4 gq + 2h / + 1:
         * one 32-bit load per token row and j, the bytes paired across two tokens. */
        const int rv = warp * 16 + 2 * tq;
#pragma unroll
        for (int j = 0; j < HD / 32; j++) {
            const int off = 32 * j + 4 * gq;
            const uint32_t v0 = codes4<HD>(vs, rv, off), v1 = codes4<HD>(vs, rv + 1, off);
            const uint32_t v8 = codes4<HD>(vs, rv + 8, off), v9 = codes4<HD>(vs, rv + 9, off);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t lo = interleave(v0, v1, h), hi = interleave(v8, v9, h);
                const uint32_t a[4] = {dequant2<T>(lo & 0xFFFFu), dequant2<T>(lo >> 16), dequant2<T>(hi & 0xFFFFu),
                                       dequant2<T>(hi >> 16)};
                kl::ptx::mma_16816<T>(o[2 * j + h], a, pb0, pb1);
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
    void (*kernel)(const kl_attention_decode_params, int) = decode_v6<T, HD, WARPS, STAGES>;
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

/* KL_DECODE_V6_SHAPE=warps,stages picks another block shape for bf16, head_dim 128 (the shapes
 * below are compiled for it), for a shape sweep as v4's. */
static int shape_override(void)
{
    static int shape = -1;
    if (shape < 0) {
        int w = 0, st = 0;
        const char *e = getenv("KL_DECODE_V6_SHAPE");
        shape = e && sscanf(e, "%d,%d", &w, &st) == 2 ? w * 10 + st : 0;
    }
    return shape;
}

template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan, cudaStream_t stream)
{
    if constexpr (std::is_same<T, __nv_bfloat16>::value && HD == 128) switch (shape_override()) {
        case 22: return launch_shape<T, HD, 2, 2>(p, plan, stream);
        case 24: return launch_shape<T, HD, 2, 4>(p, plan, stream);
        case 42: return launch_shape<T, HD, 4, 2>(p, plan, stream);
        case 43: return launch_shape<T, HD, 4, 3>(p, plan, stream);
        case 46: return launch_shape<T, HD, 4, 6>(p, plan, stream);
        case 84: return launch_shape<T, HD, 8, 4>(p, plan, stream);
        }
    /* Four stages of codes hold the bytes of v4's two stages of bf16; page_size 1 gathers rows one
     * by one and, like v4, takes two warps; head_dim 256 two warps for its accumulators. */
    if (p->page_size < 8 || HD == 256) return launch_shape<T, HD, 2, 4>(p, plan, stream);
    return launch_shape<T, HD, 4, 4>(p, plan, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_fp8(p, "v6_fp8_tensor_cores");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 4, 64, 128, 2048);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v6_fp8_tensor_cores: workspace of %zu bytes, %zu needed\n",
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

KL_VARIANT(attention_decode, v6_fp8_tensor_cores, launch, .min_cc = 89,
           .summary = "FP8 (e4m3) K/V pages, dequantized in registers, v4's tensor-core split-KV decode");
