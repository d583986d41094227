/* v28_draft_tile_gatherers: v26's ring for draft tokens: the group x q_len rows of a kv head as the
 * mma's N dimension, as in v4, fed by v26's three gathering warps.
 *
 * What changed from v26, and why: speculative decoding verifies q_len draft tokens a request at once,
 * and until this rung only v4_tensor_cores took them, with its block-wide barrier a stage and its two
 * stages. The keys are the same whatever q_len is, so a rung that reads them at the bandwidth of the
 * one-query calls should verify a draft in not much more than one query's time. Here the ring, its
 * gathering warps and the split are v26's; the consumers hold NT n-tiles of 8 columns, where column c
 * of block hb is row rb + c (rb = hb x 8 NT) of the kv head's group x q_len rows: draft token (rb + c)
 * / group, qo head (rb + c) % group (v4's numbering). Every K and V fragment a consumer loads serves
 * its NT n-tiles (bf16_ring_tile.cuh's tile_update_cols), and each column keeps its own causal limit,
 * kv_len - q_len + 1 + its token, where the tile's scores are masked. NT is 2 when the rows pass 8
 * (Llama's group of 4 with 3 or more draft tokens: 16 rows, the keys read once for 4 tokens); its
 * accumulators take twice v26's registers, so its CTAs are two an SM, each with twelve stages, where
 * v26 runs four of six: the same ring bytes an SM. Head_dim 256 keeps one n-tile. The end of a CTA
 * (its warps' states merged, out written or a split's partials filed and merged by the last CTA of
 * the request) is v4's, kl::decode::finish_rows. One query a request (qo_indptr NULL) runs the same
 * code with q_len 1, as v26 runs it (v11_by_shape sends those calls to v26).
 * Why faster (the prediction): the keys of b64-kv8k-p16-q4 stream at v26's rate, and the extra mma
 * and softmax of the second n-tile hide behind the copies, so 4 draft tokens cost little more than
 * one query.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v28_draft_tile_gatherers --workload b64-kv8k-p16-q4 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

/* Keys a draft token sees past its causal limit: 0. The module's test suite compiles this file a
 * second time with 1 (a token that sees its successor) and expects the checks to flag it. */
#ifndef KL_DECODE_V28_CAUSAL_SHIFT
#define KL_DECODE_V28_CAUSAL_SHIFT 0
#endif

constexpr int kConsumers = 3; /* consumer warps a CTA: warps 0 .. 2 */
constexpr int kGatherers = 3; /* producer warps a CTA: warps 3 .. 5, taking turns by group (v26) */
constexpr int kThreads = 32 * (kConsumers + kGatherers);

/* The CTA's shape for NT n-tiles: CTAS an SM and STAGES stages (a multiple of 2 x kGatherers, so each
 * gathering warp owns whole stages: page_ring.cuh's INTERLEAVE). */
template <int HD, int NT> struct draft_shape {
    static constexpr int CTAS = NT == 2 ? 2 : HD == 256 ? 1 : 4;
    static constexpr int STAGES = NT == 2 ? 4 * kGatherers : 2 * kGatherers;
};

template <typename T, int HD, int NT>
static __global__ void __launch_bounds__(kThreads, (draft_shape<HD, NT>::CTAS))
    decode_v28(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk)
{
#if KL_SM90A
    constexpr int CW = kConsumers, COLS = 8 * NT, STAGES = draft_shape<HD, NT>::STAGES;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    static_assert((CW + 1) * COLS * S::ROW * 4 <= S::RING, "the warps' states and their merge reuse the ring");
    static_assert(COLS * (KL_DECODE_MAX_SPLITS + 2) * 4 <= S::RING, "so do the split weights of merge_partials_at");
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw));                     /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last;                                         /* this CTA merges the request's partials */
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32); /* overlaps the previous kernel's tail */

    const bool draft = p.qo_indptr != nullptr; /* else one query a request: row b */
    const int group = (int)(p.num_qo_heads / p.num_kv_heads), q_rows = draft ? (int)p.max_q_len : 1;
    const int blocks = (group * q_rows + COLS - 1) / COLS;
    const int b = blockIdx.x, g = blockIdx.y / blocks, hb = blockIdx.y % blocks, rb = hb * COLS;
    const int row0 = draft ? p.qo_indptr[b] : b, q_len = draft ? p.qo_indptr[b + 1] - row0 : 1;
    const int nh = min(COLS, group * q_len - rb), n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk;
    if (nh <= 0) return; /* past the request's rows (it has fewer tokens than max_q_len) */
    if (n == 0) {        /* one query and no keys (a draft token always has one): out 0, lse -inf */
        if (split == 0)
            for (int c = 0; c < nh; c++)
                kl::decode::write_empty<T>(p, b, g * group + rb + c, threadIdx.x, blockDim.x);
        return;
    }
    if (split >= splits) return;
    /* Column c: draft token (rb + c) / group of request b, qo head g group + (rb + c) % group. */
    auto at = [&](int c) { return kl::decode::out_row{row0 + (rb + c) / group, g * group, (rb + c) % group}; };
    const int t0 = split * chunk, t1 = min(n, t0 + chunk), tiles = (t1 - t0 + 15) / 16;
    const int warp = threadIdx.x / 32, tq = threadIdx.x % 4;

    float o[NT][S::KSTEPS][4] = {}; /* the online softmax per n-tile: O^T, m, l (bf16_ring_tile.cuh) */
    float m[NT][2], l[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        m[nt][0] = m[nt][1] = -INFINITY, l[nt][0] = l[nt][1] = 0;

    if (warp >= CW) {
        /* groups warp - CW, warp - CW + kGatherers, ... of the chunk, whole (boxes false: page 16 gathered too) */
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true, true, 1, 0, true, 0, kGatherers>(
            &k_box, &v_box, &k_row, &v_row, false, p, b, g, t0, t1, ring_at, full, empty, 0, warp - CW);
    } else {
        uint32_t qf[NT][S::KSTEPS][2];
        kl::decode::bf16_ring::q_operand_cols<T, HD, NT>(p, at, nh, qf);
        /* The keys column 2 tq + e of n-tile nt sees end at the chunk's end or its token's causal limit (a
         * column past nh has q = 0 and is never written). */
        int end[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                end[nt][e] = min(t1, n - q_len + 1 + (rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V28_CAUSAL_SHIFT);
        const float scale = p.sm_scale * 1.44269504089f;
        /* Tile i in stage i % STAGES, consumed by warp i % CW (STAGES is a multiple of CW). */
        for (int i = warp; i < tiles; i += CW) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1);
            const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
            kl::decode::bf16_ring::tile_update_cols<T, HD, NT, true>(ks, vs, qf, scale, t0 + 16 * i, end, o, m, l);
            kl::ptx::mbar_arrive(&empty[st]); /* every lane: see v8 */
        }
    }
    __syncthreads(); /* no copy in flight: the ring becomes the merge area */

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < CW) kl::decode::bf16_ring::write_state_cols<HD, NT>(mrg + warp * COLS * S::ROW, o, m, l);
    unsigned *counter = kl::decode::counters(p) + ((int64_t)b * p.num_kv_heads + g) * blocks + hb;
    kl::decode::finish_rows<T, HD, CW, COLS>(p, mrg, last, nh, at, counter, split, splits, q_rows);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

template <typename T, int HD, int NT>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                                cudaStream_t stream)
{
    using D = draft_shape<HD, NT>;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, D::STAGES>;
    static_assert(D::CTAS * (S::SMEM + 1024) <= 228 * 1024, "the CTAs' rings fit an SM");
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v28<T, HD, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    /* v26's whole-wave split, for this shape's CTAs an SM; chunks are multiples of 64 tokens, so every
     * tile starts at a multiple of 16. */
    const int64_t rows = p->num_qo_heads / p->num_kv_heads * kl_attention_decode_q_rows(p);
    const int64_t blocks = (rows + 8 * NT - 1) / (8 * NT);
    const int64_t ctas_per_split = p->batch * p->num_kv_heads * blocks;
    const struct kl_decode_split plan =
        kl_attention_decode_split_waves(p, ctas_per_split, D::CTAS * (int64_t)kl_attention_decode_sms());
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v28_draft_tile_gatherers: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    /* kl::launch_pdl with the ring's dynamic shared memory: a programmatic dependent launch. */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(kThreads), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v28<T, HD, NT>, m.k_box, m.v_box, m.k_row, m.v_row, *p, (int)plan.chunk);
}

/* Two n-tiles where the group x max_q_len rows (the group alone with one query a request) pass 8, but
 * at head_dim 256 (one n-tile's accumulators already fill a thread's share of the registers). */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                             cudaStream_t stream)
{
    if constexpr (HD != 256)
        if (p->num_qo_heads / p->num_kv_heads * kl_attention_decode_q_rows(p) > 8)
            return launch_shape<T, HD, 2>(p, m, stream);
    return launch_shape<T, HD, 1>(p, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_multi(p, "v28_draft_tile_gatherers");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v28_draft_tile_gatherers", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v28_draft_tile_gatherers, launch, .min_cc = 90,
           .summary = "draft tokens on v26's ring: the group x q_len rows as the mma's N dimension (two n-tiles "
                      "past 8 rows, two CTAs an SM of twelve stages), a causal limit per column");
