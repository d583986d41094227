/* v27_fp8_tile_gatherers: v25 whose gathering warps each gather whole tiles of their own, as v26 does
 * for 16-bit caches.
 *
 * What changed from v25, and why: v25's four gatherers share every tile, gatherer G issuing copies G,
 * G + 4, ... of it, so G is a template parameter and the CTA holds four instantiations of the producer
 * loop. Its counters show what v24's did, warps waiting for their next instruction (no_instruction)
 * among its top stalls, and v26 took that stall away from the 16-bit ladder by letting three warps take
 * turns by group of two tiles (page_ring.cuh's INTERLEAVE): every gathering warp runs the same loop, a
 * tile is one warp's copies, and a full barrier counts that warp's 32 arrivals. Here the same change on
 * v25: warps HB .. HB + 2 gather groups w, w + 3, ... whole. Each warp owns two of every six stages,
 * which the empty barriers' parity needs, so the ring's stage count is a multiple of six (six stages of
 * four heads, twelve of two, twenty-four of one, in v25's 96 KB). The consumers, the two CTAs an SM, the
 * split, the finish and the clusters of two along y are v25's.
 * Why faster (the prediction): if v25 loses to v14 on its instruction stream, b64-kv8k-p16-fp8 moves
 * toward the read ceiling as v26 moved b64-kv8k-p16; if it loses on its eight consumer warps an SM
 * (v14 has twelve), v27 stays behind v14.
 * Bound: the read bandwidth on K/V at one byte an element, plus q, out and the page table.
 * bf16/fp16 q and out, head_dim 128 (else cudaErrorNotSupported), a GQA group of at most 8 qo heads, one
 * query token per request, sm_90a.
 * Run alone: build/kernlab bench attention_decode --variant v27_fp8_tile_gatherers --workload b64-kv8k-p16-fp8 */
#include <stdint.h>
#include <stdio.h>

#include <type_traits>

#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/fp8_ring_tile.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

namespace
{

constexpr int kGatherers = 3; /* producer warps a CTA: warps HB .. HB + 2, taking turns by group */
constexpr int kCtasPerSm = 2;

/* A CTA: HB consumer warps (warp w computes kv head w of the CTA) and three gathering warps; a ring of
 * STAGES tiles of 16 tokens, each the K tiles of the HB heads then their V tiles, a head tile one
 * block of 16 rows x 128 codes (head_dim 128). */
template <int HB> struct gather_ring_shape {
    static constexpr int HD = 128, CW = HB, THREADS = 32 * (CW + kGatherers);
    static constexpr uint32_t HEAD_TILE = 16 * 128;        /* one head's K (or V) of a tile */
    static constexpr uint32_t TILE_HALF = HB * HEAD_TILE;  /* the heads' K (or V) */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_HALF; /* a stage: K then V */
    static constexpr int STAGES =
        96 * 1024 / STAGE_BYTES / (2 * kGatherers) * (2 * kGatherers); /* each warp two of six */
    static constexpr int ROW = HD + 2;                                 /* merged rows: acc, m, l */
    static constexpr int MERGE_ROWS = 8 + 8;                           /* a head's: its warp's 8 rows, then res */
    static constexpr int RING = STAGES * STAGE_BYTES;
    static constexpr int SMEM = 1024 + RING + 2 * STAGES * 8; /* alignment slack, the ring, its barriers */
    static_assert(HB * MERGE_ROWS * ROW * 4 <= RING, "the merge reuses the ring");
    /* merge_partials's weights (8 heads x (splits + 2) floats) fit a head's merge rows */
    static_assert(8 * (KL_DECODE_MAX_SPLITS + 2) <= MERGE_ROWS * ROW, "the partials' weights fit");
};

} // namespace

/* The tensor maps are not read: every tile is gathered by cp.async. Grid: (request, kv heads / HB, split). */
template <typename T, int HB>
static __global__ void __launch_bounds__(gather_ring_shape<HB>::THREADS, kCtasPerSm)
    decode_v27(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk)
{
#if KL_SM90A
    using S = gather_ring_shape<HB>;
    constexpr int HD = S::HD, STAGES = S::STAGES;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *ring = kl::ptx::align_1024(smem_raw);                                   /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last; /* this CTA merges the request's partials */
    /* overlaps the previous kernel's tail */
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32 * HB); /* a tile: one warp's 32 lanes */

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), g0 = blockIdx.y * HB;
    const int b = blockIdx.x, n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk;
    if (n == 0) {
        if (split == 0)
            for (int h = 0; h < HB * group; h++)
                kl::decode::write_empty<T>(p, b, g0 * group + h, threadIdx.x, blockDim.x);
        return;
    }
    if (split >= splits) return;
    const int t0 = split * chunk, t1 = min(n, t0 + chunk), tiles = (t1 - t0 + 15) / 16;
    const int warp = threadIdx.x / 32, g = g0 + warp, h0 = g * group; /* a consumer's kv head */

    float o[HD / 16][4] = {};                           /* the online softmax: O^T, m, l (fp8_ring_tile.cuh) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */

    if (warp >= S::CW) {
        /* groups warp - HB, warp - HB + kGatherers, ... of the chunk, whole: <..., HB heads, cp.async rows,
         * evict-first copies, one warp a tile, lean copies, no prefetch, kGatherers taking turns>; boxes false:
         * whole tiles are gathered too */
        kl::decode::produce_page_tiles<STAGES, 1, 128, HB, true, true, 1, 0, true, 0, kGatherers>(
            &k_box, &v_box, &k_row, &v_row, false, p, b, g0, t0, t1, ring_at, full, empty, 0, warp - S::CW);
    } else {
        /* q as the fp16 B operand, and the scores in log2 units with this head's k_scale folded in. */
        uint32_t qf[HD / 16][2];
        float dq0, dq1;
        kl::decode::fp8_ring::q_operand<T, HD>(p, b, h0, group, qf, dq0, dq1);
        const float scale = p.sm_scale * p.k_scale[g] * 1.44269504089f;

        for (int i = 0; i < tiles; i++) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1); /* round i / STAGES of the stage has landed */
            const unsigned char *ks = ring + st * S::STAGE_BYTES + warp * S::HEAD_TILE, *vs = ks + S::TILE_HALF;
            kl::decode::fp8_ring::tile_codes<HD> c;
            kl::decode::fp8_ring::load_codes<HD, true>(ks, vs, c);
            /* The lane's codes are in registers (the arrive's release orders the reads before it): the
             * stage goes back while the arithmetic runs. */
            kl::ptx::mbar_arrive(&empty[st]);
            kl::decode::fp8_ring::tile_math<HD>(c, qf, dq0, dq1, scale, t0 + 16 * i, t1, o, m, l);
        }
    }
    /* Every tile issued was waited for by its consumer, so no copy is in flight: the ring becomes the
     * merge area, MERGE_ROWS rows a head. */
    __syncthreads();

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < S::CW) /* each consumer's state, v_scale applied */
        kl::decode::fp8_ring::write_state<HD>(mrg + warp * S::MERGE_ROWS * S::ROW, o, m, l, p.v_scale[g]);
    /* finish_cta_heads begins with a block barrier: the rows above are written */
    kl::decode::finish_cta_heads<T, HD, 1, HB>(p, mrg, S::MERGE_ROWS * S::ROW, last, b, g0, 0, g0 * group, group, split,
                                               splits);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

template <typename T, int HB>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                                cudaStream_t stream)
{
    using S = gather_ring_shape<HB>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc = cudaFuncSetAttribute(decode_v27<T, HB>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    static_assert(kCtasPerSm * (S::SMEM + 1024) <= 228 * 1024, "two CTAs' rings fit an SM");
    const struct kl_decode_split plan =
        kl_attention_decode_split_waves(p, p->batch * (p->num_kv_heads / HB), kCtasPerSm * kl_attention_decode_sms());
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v27_fp8_tile_gatherers: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads / HB), (unsigned)plan.splits);
    /* kl::launch_pdl with the ring's dynamic shared memory: a programmatic dependent launch; where the
     * head groups pair up, a cluster of 2 along y. */
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1, attr[1].val.clusterDim.y = 2, attr[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(S::THREADS), (size_t)S::SMEM, stream, attr, grid.y % 2 == 0 ? 2u : 1u};
    return cudaLaunchKernelEx(&cfg, decode_v27<T, HB>, m.k_box, m.v_box, m.k_row, m.v_row, *p, (int)plan.chunk);
}

/* HB: the most kv heads, of 4, 2, 1, that divide the head count. */
template <typename T>
static cudaError_t launch_heads(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                                cudaStream_t stream)
{
    if (p->num_kv_heads % 4 == 0) return launch_shape<T, 4>(p, m, stream);
    if (p->num_kv_heads % 2 == 0) return launch_shape<T, 2>(p, m, stream);
    return launch_shape<T, 1>(p, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_fp8(p, "v27_fp8_tile_gatherers");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->head_dim != 128) return cudaErrorNotSupported;
    if (p->num_qo_heads / p->num_kv_heads > 8) return cudaErrorNotSupported;   /* a warp's 8 columns of heads */
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, kl::cache_elem::e4m3, "attention_decode v27_fp8_tile_gatherers", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) return launch_heads<__nv_bfloat16>(p, maps, stream);
    return launch_heads<__half>(p, maps, stream);
}

KL_VARIANT(attention_decode, v27_fp8_tile_gatherers, launch, .min_cc = 90,
           .summary = "v25 whose three gathering warps take turns by group of two tiles, each tile one warp's "
                      "copies: one producer loop for all three, 32 arrivals a full barrier (v26's change, on e4m3)");
