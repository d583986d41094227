/* v4_tensor_cores: the GQA group's scores and P.V on tensor cores, K/V streamed through a
 * multi-stage cp.async pipeline, split-KV partials merged by the last block of each request.
 *
 * What changed from v3, and why: v3's CUDA cores do head_dim multiply-adds per key per qo head
 * plus a shuffle reduction per key; for a group of 4 that is several instructions per byte
 * read, close to what the SM can issue at the bandwidth of an H200. Here a warp takes 16 tokens
 * at a time and computes S^T (16 tokens x 8 heads) = K_tile Q^T with mma.sync m16n8k16 (the GQA
 * group's <= 8 qo heads are the n dimension), then O^T (head_dim x 8) += V_tile^T P^T, with P
 * rounded to bf16/fp16 and transposed in registers (movmatrix) into the B operand: about 0.3
 * warp instructions per 256 bytes instead of ~10. The K/V tiles (16 tokens per warp) come into
 * shared memory with cp.async, two stages deep, in a swizzled layout (16-byte chunk c of row r
 * stored at c ^ (r % 8)) so ldmatrix reads 8 rows without bank conflicts; tokens past the end
 * are zero-filled and masked. The page numbers are loaded a stage ahead of the copies that need
 * them, so no copy waits on a page lookup issued after the barrier. The keys are split as in v3 (chunks of 128..2048 tokens, a multiple of 64,
 * about 4 blocks per SM), but the merge runs in the same kernel: each block adds one to a
 * counter per (request, kv head, head block) after its partial is written; the block that
 * arrives last merges all of them and resets the counter, so there is no second launch and the
 * workspace stays zeroed.
 * Bound: the read bandwidth (b64-kv8k-p16 reads 2.1 GB); predicted 0.95 of the read ceiling on
 * the big batches (the guide shows what was measured and where the rest goes).
 * bf16/fp16 and head_dim 64/128/256 (fp32 is left to v0-v3).
 * Several query tokens per request (qo_indptr, speculative verify of up to 8 draft tokens): the
 * n dimension becomes the rows (token i, head j) of the kv head's group, row i * group + j, tiled
 * by 8 columns; a block takes NT tiles (NT mma per k-step on the same K and V fragments, so the
 * keys are read once for 8 NT rows) and the grid covers the group x max_q_len rows in blocks of
 * 8 NT. Each column keeps its own causal limit, kv_len - q_len + 1 + i keys, applied where the
 * score tile is masked. One query token per request runs the same code with NT = 1 and the limit
 * at the chunk's end, compiled as its own kernel (decode_v4).
 * Run alone: build/kernlab bench attention_decode --variant v4_tensor_cores */
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>

#include "kernels/attention_decode/decode.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/variant.h"

/* Keys a draft token sees past its causal limit: 0. The module's test suite compiles this file a
 * second time with 1 (a token that sees its successor) and expects the checks to flag it. */
#ifndef KL_DECODE_V4_CAUSAL_SHIFT
#define KL_DECODE_V4_CAUSAL_SHIFT 0
#endif

/* A block of WARPS warps, STAGES stages of 16 tokens per warp (launch_hd picks the shape). */
template <int HD, int WARPS_, int STAGES_, int NT_ = 1> struct tc_shape {
    static constexpr int WARPS = WARPS_, THREADS = 32 * WARPS, STAGES = STAGES_;
    static constexpr int TOK = 16 * WARPS;                         /* tokens per stage: 16 per warp */
    static constexpr int CHUNKS = HD / 8;                          /* 16-byte chunks per row */
    static constexpr int KSTEPS = HD / 16;                         /* k-steps of Q.K, m-tiles of V^T */
    static constexpr int STAGE_CHUNKS = 2 * TOK * CHUNKS;          /* K then V */
    static constexpr int ROW = HD + 2;                             /* merged rows: acc, m, l */
    static constexpr int SMEM = STAGES * STAGE_CHUNKS * 16;
    static constexpr int NT = NT_, COLS = 8 * NT;                  /* n-tiles of 8 rows per block */
    static_assert((WARPS + 1) * COLS * ROW * 4 <= SMEM, "the merge reuses the stage buffers");
    static_assert(COLS * (KL_DECODE_MAX_SPLITS + 2) * 4 <= SMEM, "so do the split weights of merge_partials");
};

/* Chunk c of row r of a [rows][CHUNKS] tile, swizzled: the 8 rows an ldmatrix reads land in 8
 * different 16-byte bank groups. */
template <int HD> __device__ __forceinline__ int swz(int r, int c) { return r * (HD / 8) + (c ^ (r & 7)); }

/* The kernel's body. MULTI: the rows come from qo_indptr (max_q_len per request at most);
 * otherwise column c of the one tile is qo head h0 + c of request b's one query. */
template <typename T, int HD, int WARPS, int STAGES, int NT, bool MULTI>
static __device__ __forceinline__ void attend_v4(const kl_attention_decode_params &p, int chunk)
{
    using S = tc_shape<HD, WARPS, STAGES, NT>;
    extern __shared__ uint4 smem[];
    /* One token: the expressions of the one-token kernel as they were, so its code is unchanged. */
    const int64_t q_rows = MULTI ? p.max_q_len : 1; /* query slots per request, as the workspace counts them */
    const int group = (int)(p.num_qo_heads / p.num_kv_heads);
    const int blocks = MULTI ? (group * (int)q_rows + S::COLS - 1) / S::COLS : (group + 7) / 8;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * S::COLS;
    /* nh: the columns (rows of out) this block owns; rb: the group's row of its first. */
    const int nh = MULTI ? min(S::COLS, group * (p.qo_indptr[b + 1] - p.qo_indptr[b]) - (h0 - g * group))
                         : min(8, g * group + group - h0),
              n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int rb = h0 - g * group, row0 = MULTI ? p.qo_indptr[b] : b, q_len = MULTI ? p.qo_indptr[b + 1] - row0 : 1;
    /* Column c is row rb + c of the group's rows: token i = (rb + c) / group, qo head g group + (rb + c) % group. */
    auto at = [&](int c) {
        return MULTI ? kl::decode::out_row{row0 + (rb + c) / group, g * group, (rb + c) % group}
                     : kl::decode::out_row{b, h0, c};
    };
    if (MULTI && nh <= 0) return; /* past this request's rows (it has fewer tokens than max_q_len) */
    const int splits = (n + chunk - 1) / chunk;
    if (!MULTI && n == 0) {
        if (split == 0)
            for (int h = 0; h < nh; h++) kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    if (split >= splits) return;
    const int t0 = split * chunk, t1 = min(n, t0 + chunk), n_stages = (t1 - t0 + S::TOK - 1) / S::TOK;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const float scale = p.sm_scale * 1.44269504089f; /* scores in log2 units */

    /* Q^T as the B operand of every k-step (d = 16 ks + 2 tq .. , column gq of tile nt), loaded once. */
    uint32_t qf[NT][S::KSTEPS][2];
    /* The keys each of this thread's score columns (2 tq, 2 tq + 1 of tile nt) sees end at end[nt][0..1]:
     * the chunk's end, and for token i of q_len the causal limit kv_len - q_len + 1 + i. */
    int end[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int col = 8 * nt + gq;
        const kl::decode::out_row qr = at(min(col, nh - 1));
        const T *q = static_cast<const T *>(p.q) + ((int64_t)qr.row * p.num_qo_heads + qr.h0 + qr.h) * HD;
#pragma unroll
        for (int ks = 0; ks < S::KSTEPS; ks++) {
            qf[nt][ks][0] = col < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 2 * tq) : 0u;
            qf[nt][ks][1] = col < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 8 + 2 * tq) : 0u;
        }
#pragma unroll
        for (int e = 0; e < 2; e++) /* a column past nh: its q is 0 and it is never written */
            end[nt][e] = MULTI ? min(t1, n - q_len + 1 + (rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V4_CAUSAL_SHIFT)
                               : t1;
    }

    /* Stage st holds tokens t0 + TOK st .. in buffer st % STAGES; thread i copies 16-byte chunk
     * i % CHUNKS of rows i / CHUNKS, + THREADS / CHUNKS, ... (RPT rows), of K and of V (same slot,
     * same offset). Where a row lives takes a load of its page number; those loads are issued one
     * stage ahead (fetch_slots), so their latency, long under a saturated memory system, is
     * hidden behind a stage of compute instead of sitting between a barrier and the copies. */
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
    /* Past t1 a copy reads nothing and writes zeros. Every thread commits a group even when
     * there is nothing left, so the wait counts below stay uniform. */
    const T *kc = static_cast<const T *>(p.k_cache), *vc = static_cast<const T *>(p.v_cache);
    auto issue_stage = [&](int st, const int (&slot)[RPT]) {
        if (st < n_stages) {
            uint4 *ks = smem + (st % S::STAGES) * S::STAGE_CHUNKS, *vs = ks + S::TOK * S::CHUNKS;
#pragma unroll
            for (int i = 0; i < RPT; i++) {
                const int r = r0 + i * (S::THREADS / S::CHUNKS);
                const int64_t at = slot[i] < 0 ? 0 : ((int64_t)slot[i] * p.num_kv_heads + g) * HD + 8 * c;
                kl::ptx::cp_async_16(kl::ptx::smem_addr(ks + swz<HD>(r, c)), kc + at, slot[i] >= 0);
                kl::ptx::cp_async_16(kl::ptx::smem_addr(vs + swz<HD>(r, c)), vc + at, slot[i] >= 0);
            }
        }
        kl::ptx::cp_async_commit();
    };

    float o[NT][S::KSTEPS][4] = {}; /* O^T: m-tile mt holds (d 16 mt + gq (+8), columns 2 tq, 2 tq + 1) */
    float m[NT][2], l[NT][2];       /* columns 2 tq and 2 tq + 1 */
#pragma unroll
    for (int nt = 0; nt < NT; nt++) m[nt][0] = m[nt][1] = -INFINITY, l[nt][0] = l[nt][1] = 0;
    int slot[RPT];
    for (int st = 0; st < S::STAGES - 1; st++) fetch_slots(st, slot), issue_stage(st, slot);
    fetch_slots(S::STAGES - 1, slot);
    for (int st = 0; st < n_stages; st++) {
        kl::ptx::cp_async_wait<S::STAGES - 2>(); /* this thread's copies of stage st have landed */
        __syncthreads(); /* ...everyone's too; and every warp is done with the buffer refilled next */
        issue_stage(st + S::STAGES - 1, slot);
        fetch_slots(st + S::STAGES, slot); /* lands during this stage's compute */
        const uint4 *ks = smem + (st % S::STAGES) * S::STAGE_CHUNKS, *vs = ks + S::TOK * S::CHUNKS;
        const int i8 = lane % 8, mat = lane / 8;

        /* S^T = K Q^T over this warp's 16 tokens: A = K rows (matrices: tokens 0-7 / 8-15 x dims
         * 0-7 / 8-15 of the k-step, in a0..a3 order), one fragment for every n-tile. */
        float s[NT][4], s_odd[NT][4]; /* two chains: half the dependent mma latency */
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] = s_odd[nt][e] = 0;
#pragma unroll
        for (int kk = 0; kk < S::KSTEPS; kk++) {
            uint32_t a[4];
            kl::ptx::ldmatrix_x4(a,
                                 kl::ptx::smem_addr(ks + swz<HD>(warp * 16 + i8 + 8 * (mat & 1), 2 * kk + (mat >> 1))));
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                kl::ptx::mma_16816<T>(kk % 2 ? s_odd[nt] : s[nt], a, qf[nt][kk][0], qf[nt][kk][1]);
        }
        uint32_t pb[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] += s_odd[nt][e];

            /* Online softmax per column. s[0], s[1]: token gq, columns 2tq, 2tq+1; s[2], s[3]:
             * token gq + 8. The column max over 16 tokens: own pair, then the lanes sharing tq. */
            const int tok = t0 + st * S::TOK + warp * 16 + gq;
            const int e0 = end[nt][0], e1 = end[nt][1];
            const float x0 = tok < e0 ? s[nt][0] * scale : -INFINITY, x1 = tok < e1 ? s[nt][1] * scale : -INFINITY;
            const float x2 = tok + 8 < e0 ? s[nt][2] * scale : -INFINITY;
            const float x3 = tok + 8 < e1 ? s[nt][3] * scale : -INFINITY;
            float mx0 = fmaxf(x0, x2), mx1 = fmaxf(x1, x3);
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) {
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
            }
            const float mn0 = fmaxf(m[nt][0], mx0), mn1 = fmaxf(m[nt][1], mx1);
            const float base0 = mn0 == -INFINITY ? 0.f : mn0, base1 = mn1 == -INFINITY ? 0.f : mn1; /* no -inf - -inf */
            const float al0 = exp2f(m[nt][0] - base0), al1 = exp2f(m[nt][1] - base1);
            const float p0 = exp2f(x0 - base0), p1 = exp2f(x1 - base1), p2 = exp2f(x2 - base0), p3 = exp2f(x3 - base1);
            l[nt][0] = l[nt][0] * al0 + p0 + p2, l[nt][1] = l[nt][1] * al1 + p1 + p3; /* from the unrounded p */
            m[nt][0] = mn0, m[nt][1] = mn1;
#pragma unroll
            for (int mt = 0; mt < S::KSTEPS; mt++)
                o[nt][mt][0] *= al0, o[nt][mt][1] *= al1, o[nt][mt][2] *= al0, o[nt][mt][3] *= al1;

            /* P^T as the B operand: (p0, p1) is row gq, cols 2tq.. of the 8x8 block [token][column];
             * its transpose is (tokens 2tq.., column gq): b0. (p2, p3) gives b1 (tokens 8 + 2tq..). */
            pb[nt][0] = kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(p0, p1));
            pb[nt][1] = kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(p2, p3));
        }
        /* O^T += V^T P^T: A = V^T (16 dims x 16 tokens) by ldmatrix.trans of V rows (matrices:
         * tokens 0-7 / 8-15 x dims 0-7 / 8-15, in a0..a3 order of the transpose), one fragment for
         * every n-tile. */
#pragma unroll
        for (int mt = 0; mt < S::KSTEPS; mt++) {
            uint32_t a[4];
            kl::ptx::ldmatrix_x4_trans(
                a, kl::ptx::smem_addr(vs + swz<HD>(warp * 16 + i8 + 8 * (mat >> 1), 2 * mt + (mat & 1))));
#pragma unroll
            for (int nt = 0; nt < NT; nt++) kl::ptx::mma_16816<T>(o[nt][mt], a, pb[nt][0], pb[nt][1]);
        }
    }
    kl::ptx::cp_async_wait<0>();
    __syncthreads(); /* the stage buffers become the merge area */

    /* Each warp's state to shared memory (COLS rows per warp): l summed over the lanes sharing a
     * column first. */
    float *mrg = reinterpret_cast<float *>(smem);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
            l[nt][0] += __shfl_xor_sync(0xffffffffu, l[nt][0], off);
            l[nt][1] += __shfl_xor_sync(0xffffffffu, l[nt][1], off);
        }
        float *w0 = mrg + (warp * S::COLS + 8 * nt + 2 * tq) * S::ROW, *w1 = w0 + S::ROW;
#pragma unroll
        for (int mt = 0; mt < S::KSTEPS; mt++) {
            w0[16 * mt + gq] = o[nt][mt][0], w1[16 * mt + gq] = o[nt][mt][1];
            w0[16 * mt + gq + 8] = o[nt][mt][2], w1[16 * mt + gq + 8] = o[nt][mt][3];
        }
        if (gq == 0) w0[HD] = m[nt][0], w0[HD + 1] = l[nt][0], w1[HD] = m[nt][1], w1[HD + 1] = l[nt][1];
    }
    __shared__ bool last;
    unsigned *counter = kl::decode::counters(p) + ((int64_t)b * p.num_kv_heads + g) * blocks + blockIdx.y % blocks;
    kl::decode::finish_rows<T, HD, S::WARPS, S::COLS>(p, mrg, last, nh, at, counter, split, splits, q_rows);
}

/* One query token per request (qo_indptr NULL). */
template <typename T, int HD, int WARPS, int STAGES>
static __global__ void __launch_bounds__(32 * WARPS) decode_v4(const kl_attention_decode_params p, int chunk)
{
    attend_v4<T, HD, WARPS, STAGES, 1, false>(p, chunk);
}

/* Several query tokens per request: NT tiles of 8 of the group x max_q_len rows per block. */
template <typename T, int HD, int WARPS, int STAGES, int NT>
static __global__ void __launch_bounds__(32 * WARPS) decode_v4_multi(const kl_attention_decode_params p, int chunk)
{
    attend_v4<T, HD, WARPS, STAGES, NT, true>(p, chunk);
}

/* NT 0: decode_v4 (one query token per request); NT 1 or 2: decode_v4_multi with NT tiles. */
template <typename T, int HD, int WARPS, int STAGES, int NT = 0>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                                cudaStream_t stream)
{
    using S = tc_shape<HD, WARPS, STAGES, NT ? NT : 1>;
    void (*kernel)(const kl_attention_decode_params, int);
    if constexpr (NT == 0) kernel = decode_v4<T, HD, WARPS, STAGES>;
    else kernel = decode_v4_multi<T, HD, WARPS, STAGES, NT>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t rows = p->num_qo_heads / p->num_kv_heads * (NT ? p->max_q_len : 1);
    const int64_t blocks = (rows + S::COLS - 1) / S::COLS;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    kernel<<<grid, S::THREADS, S::SMEM, stream>>>(*p, (int)plan.chunk);
    return cudaGetLastError();
}

/* KL_DECODE_V4_SHAPE=warps,stages picks another block shape for bf16, head_dim 128 (the
 * shapes below are compiled for it): how the guide's shape sweep was measured. */
static int shape_override(void)
{
    static int shape = -1;
    if (shape < 0) {
        int w = 0, st = 0;
        const char *e = getenv("KL_DECODE_V4_SHAPE");
        shape = e && sscanf(e, "%d,%d", &w, &st) == 2 ? w * 10 + st : 0;
    }
    return shape;
}

/* Several query tokens: the block shapes of one token (below), and two n-tiles per block when
 * the group x max_q_len rows pass 8 and the shape holds them (the merge's shared memory; at
 * head_dim 256 the second tile's accumulators would not fit the registers). */
template <typename T, int HD>
static cudaError_t launch_multi(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                                cudaStream_t stream)
{
    const bool two = p->num_qo_heads / p->num_kv_heads * p->max_q_len > 8;
    if (p->page_size < 8 || HD == 256) {
        if constexpr (HD == 128)
            if (two) return launch_shape<T, HD, 2, 2, 2>(p, plan, stream);
        return launch_shape<T, HD, 2, 2, 1>(p, plan, stream);
    }
    if constexpr (HD != 256)
        if (two) return launch_shape<T, HD, 4, 2, 2>(p, plan, stream);
    return launch_shape<T, HD, 4, 2, 1>(p, plan, stream);
}

template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan, cudaStream_t stream)
{
    if (p->qo_indptr) return launch_multi<T, HD>(p, plan, stream);
    if (std::is_same<T, __nv_bfloat16>::value && HD == 128) switch (shape_override()) {
        case 22: return launch_shape<T, HD, 2, 2>(p, plan, stream);
        case 24: return launch_shape<T, HD, 2, 4>(p, plan, stream);
        case 26: return launch_shape<T, HD, 2, 6>(p, plan, stream);
        case 42: return launch_shape<T, HD, 4, 2>(p, plan, stream);
        case 44: return launch_shape<T, HD, 4, 4>(p, plan, stream);
        case 46: return launch_shape<T, HD, 4, 6>(p, plan, stream);
        case 82: return launch_shape<T, HD, 8, 2>(p, plan, stream);
        case 83: return launch_shape<T, HD, 8, 3>(p, plan, stream);
        }
    /* Two stages, and as many blocks per SM as fit: the shape sweep on an H100 (the guide) found
     * resident blocks worth more than pipeline depth: 4 warps x 2 stages (64 KB, 3 blocks per SM)
     * beat 4 x 3 (96 KB, 2 per SM) and 4 x 4 (1 per SM); page_size 1 gathers 256-byte rows one
     * by one and gains most from 2 warps x 2 stages (32 KB, 7 per SM). */
    if (p->page_size < 8 || HD == 256) return launch_shape<T, HD, 2, 2>(p, plan, stream);
    return launch_shape<T, HD, 4, 2>(p, plan, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_multi(p, "v4_tensor_cores");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 4, 64, 128, 2048);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v4_tensor_cores: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v4_tensor_cores, launch, .min_cc = 80,
           .summary = "GQA group on mma.sync tensor cores, cp.async K/V pipeline, split-KV merged by the last block");
