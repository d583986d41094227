/* v9_fp8_tma_pages: v7_fp8_f16_mma's arithmetic fed by v8_tma_pages's ring: e4m3 pages come in by
 * bulk tensor copies (TMA) into a ring of stages a producer warp fills and the consumer warps hand
 * back one by one, instead of every thread's cp.async and a block-wide barrier per stage.
 *
 * What changed from v7, and why: at one byte an element a stage of v7 is half the bytes of v4's,
 * and v7 still waits for each stage with the whole block (cp.async groups, then __syncthreads), so
 * the block moves at the pace of its slowest warp and the copies of the next stages are issued by
 * the same threads that compute. v8 showed on the 16-bit cache what the TMA ring gains over that;
 * here the same producer (page_ring.cuh: a whole 16-token page of one kv head is one box of 128
 * codes x 16 slots, page 1 and partial tiles gather row boxes) fills stages of 16 tokens: K's 16
 * rows of HD codes then V's, in blocks of 128 codes x 16 rows (2 KB), 128-byte swizzled (16-byte
 * chunk c of row r at chunk c ^ (r % 8); codes4 applies the same XOR). One 128-code row is one
 * swizzle row, so a tile at head_dim 128 is one box of K and one of V. Consumer warp i % 4
 * computes tile i exactly as v7 computes its warp's 16 tokens: K's codes read as 32-bit words
 * (four dims) and turned into the fp16 A operand by one cvt per pair, in a dim order q shares (q
 * fp16, a bf16 q scaled per head by v7's power of two), the online softmax on scores with k_scale
 * folded into the score scale, P in fp16, V's codes paired across two tokens by one prmt, v_scale
 * applied as the accumulators leave (fp8_ring_tile.cuh, which v10 shares).
 * Bound: the read bandwidth on K/V at one byte an element, plus q, out and the page table.
 * bf16/fp16 q and out, head_dim 128/256 (a 64-code row is half a swizzle row: cudaErrorNotSupported),
 * one query token per request, sm_90a.
 * Run alone: build/kernlab bench attention_decode --variant v9_fp8_tma_pages --workload b64-kv8k-p16-fp8 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/fp8_ring_tile.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

namespace {

/* A CTA: CW consumer warps and one producer warp; a ring of STAGES tiles of 16 tokens, each the K
 * tile then the V tile, each BLOCKS blocks of 16 rows x 128 codes. */
template <int HD, int CW, int STAGES_> struct f8_ring_shape {
    static constexpr int STAGES = STAGES_, THREADS = 32 * (CW + 1), PRODUCER = CW;
    static constexpr int KSTEPS = HD / 16;            /* k-steps of Q.K, m-tiles of V^T */
    static constexpr int BLOCKS = HD / 128;           /* 128-code blocks of a row */
    static constexpr uint32_t TILE_HALF = BLOCKS * 16 * 128; /* K (or V) of a tile */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_HALF;   /* a stage: K then V */
    static constexpr int ROW = HD + 2;                /* merged rows: acc, m, l */
    static constexpr int RING = STAGES * STAGE_BYTES; /* bytes of the ring */
    static constexpr int SMEM = 1024 + RING + 2 * STAGES * 8; /* alignment slack, the ring, its barriers */
    static_assert(HD % 128 == 0, "rows of whole 128-code blocks");
    /* Stage s is always consumed by warp s % CW, so its empty barrier counts that warp's 32 lanes. */
    static_assert(STAGES % CW == 0, "each stage belongs to one consumer warp");
    static_assert((CW + 1) * 8 * ROW * 4 <= RING, "the merge reuses the ring");
};

} // namespace

/* The tests' mutants build this file with KL_DECODE_V9_BUG 1: the codes read without the swizzle.
 * 0 here. */
#ifndef KL_DECODE_V9_BUG
#define KL_DECODE_V9_BUG 0
#endif

/* k_box / v_box: boxes of 128 codes x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row: 128 codes x 1 head x 1 slot. */
template <typename T, int HD, int CW, int STAGES>
static __global__ void __launch_bounds__(32 * (CW + 1))
    decode_v9(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
              const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
              const kl_attention_decode_params p, int chunk, int boxes)
{
#if KL_SM90A
    using S = f8_ring_shape<HD, CW, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *ring = kl::ptx::align_1024(smem_raw); /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last; /* this CTA merges the request's partials */
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 1, 32); /* overlaps the previous kernel's tail */

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
    const int t0 = split * chunk, t1 = min(n, t0 + chunk), tiles = (t1 - t0 + 15) / 16;
    const int warp = threadIdx.x / 32;

    float o[S::KSTEPS][4] = {}; /* the online softmax: O^T, m, l (fp8_ring_tile.cuh) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */

    if (warp == S::PRODUCER) {
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 128>(&k_box, &v_box, &k_row, &v_row, boxes, p, b, g, t0, t1,
                                                               ring_at, full, empty);
    } else {
        /* q as the fp16 B operand, and the scores in log2 units with k_scale folded in. */
        uint32_t qf[S::KSTEPS][2];
        float dq0, dq1;
        kl::decode::fp8_ring::q_operand<T, HD>(p, b, h0, nh, qf, dq0, dq1);
        const float scale = p.sm_scale * p.k_scale[g] * 1.44269504089f;

        for (int i = warp; i < tiles; i += CW) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1); /* round i / STAGES of the stage has landed */
            const unsigned char *ks = ring + st * S::STAGE_BYTES, *vs = ks + S::TILE_HALF;
            kl::decode::fp8_ring::tile_update<HD, KL_DECODE_V9_BUG != 1>(ks, vs, qf, dq0, dq1, scale, t0 + 16 * i, t1,
                                                                          o, m, l);
            /* This lane's reads of the stage are done; every lane arrives (v8 says why). */
            kl::ptx::mbar_arrive(&empty[st]);
        }
    }
    /* Every tile issued was waited for by its consumer, so no copy is in flight: the ring becomes
     * the merge area. */
    __syncthreads();

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < CW) /* each consumer's state, v_scale applied */
        kl::decode::fp8_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l, p.v_scale[g]);
    kl::decode::finish_cta<T, HD, CW>(p, mrg, last, b, g, blockIdx.y % blocks, h0, nh, split, splits);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

template <typename T, int HD, int CW, int STAGES>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                                const kl::decode::page_maps &m, cudaStream_t stream)
{
    using S = f8_ring_shape<HD, CW, STAGES>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v9<T, HD, CW, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t blocks = (p->num_qo_heads / p->num_kv_heads + 7) / 8;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    /* kl::launch_pdl with the ring's dynamic shared memory: a programmatic dependent launch. */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(S::THREADS), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v9<T, HD, CW, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
                              (int)plan.chunk, m.boxes);
}

/* Twelve stages of 16 tokens at head_dim 128 (three per consumer warp, 48 KB): four CTAs per SM,
 * sixteen consumer warps, where v8's ring bytes (64 KB) would leave room for three; eight stages at
 * 256 (64 KB, three CTAs). */
template <typename T>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                             const kl::decode::page_maps &m, cudaStream_t stream)
{
    if (p->head_dim == 128) return launch_shape<T, 128, 4, 12>(p, plan, m, stream);
    if (p->head_dim == 256) return launch_shape<T, 256, 4, 8>(p, plan, m, stream);
    return cudaErrorNotSupported;
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_fp8(p, "v9_fp8_tma_pages");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->head_dim != 128 && p->head_dim != 256) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    /* v8's plan for four CTAs per SM: chunks of multiples of 64 tokens (every tile starts at a
     * multiple of 16). */
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 4, 64, 128, 2048);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v9_fp8_tma_pages: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, kl::cache_elem::e4m3, "attention_decode v9_fp8_tma_pages", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) return launch_hd<__nv_bfloat16>(p, plan, maps, stream);
    return launch_hd<__half>(p, plan, maps, stream);
}

KL_VARIANT(attention_decode, v9_fp8_tma_pages, launch, .min_cc = 90,
           .summary = "v7's fp16 arithmetic on e4m3 pages fed by v8's TMA ring: one 128-code box per page, "
                      "a producer warp, no block barrier per stage, PDL");
