/* v10_fp8_page_heads: v9_fp8_tma_pages with a CTA over every kv head of a page at once (up to 8): the
 * 16-slot tile of each head is still one box of 128 codes x 16 rows, but the producer issues the boxes
 * of all the CTA's heads together, so memory is asked for whole runs of a slot's row (the kv heads of a
 * slot are adjacent in the cache) instead of 128-byte pieces at scattered times.
 *
 * What changed from v9, and why: at one byte an element a head's row of a slot is 128 bytes, and v9's
 * CTA, one kv head, reads 16 such rows 1 KB apart (8 kv heads x 128) per tile; the seven other heads'
 * rows of the same slots are read by seven other CTAs, whenever they get there. The question this rung
 * asks: does HBM serve those scattered 128-byte reads less well than whole runs (v8's 256-byte rows of
 * the 16-bit cache reach more of the read bandwidth on the same ring)? The guide tells what the run
 * answered. Here a CTA takes HB consecutive kv heads (8 where the head count allows, at most 8 x 128
 * codes of row, so a stage is at most 32 KB) and one chunk of a request; a stage is the tile of 16
 * tokens for all HB heads, K's HB head tiles then V's, each head tile laid out and swizzled as v9's
 * (page_ring.cuh's producer with HEADS = HB). The page table is read once for all the heads. Consumer
 * warp w (of 8) computes head w % HB on the tiles i with i % (8 / HB) == w / HB, with v9's arithmetic
 * (fp8_ring_tile.cuh; its q, k_scale and v_scale are its own head's); a stage goes back to the
 * producer when its HB warps have arrived. At the end each head's warps merge and the CTA finishes
 * its HB heads together with decode.cuh's finish_cta_heads (one fence publishes every head's
 * partial). The ring is at least three stages and about 96 KB (two CTAs an SM; 128 KB and one CTA
 * at head_dim 256 with four heads). The split comes from the params alone
 * (max_kv_len, never the lengths on the device, so graph replays are safe): the number of splits whose
 * CTAs fill the SMs' slots in the fewest waves of the least work each.
 * Bound: the read bandwidth on K/V at one byte an element, plus q, out and the page table.
 * bf16/fp16 q and out, head_dim 128/256, a GQA group of at most 8 qo heads (else
 * cudaErrorNotSupported), one query token per request, sm_90a.
 * Run alone: build/kernlab bench attention_decode --variant v10_fp8_page_heads --workload b64-kv8k-p16-fp8 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/fp8_ring_tile.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

namespace {

/* A CTA: 8 consumer warps and one producer warp over HB kv heads; a ring of STAGES tiles of 16 tokens,
 * each the K tiles of the HB heads then their V tiles, each head tile BLOCKS blocks of 16 rows x 128
 * codes. WPH warps share a head, taking its tiles in turn. */
template <int HD, int HB> struct heads_ring_shape {
    static constexpr int CW = 8, WPH = CW / HB, THREADS = 32 * (CW + 1), PRODUCER = CW;
    static constexpr int KSTEPS = HD / 16;                  /* k-steps of Q.K, m-tiles of V^T */
    static constexpr int BLOCKS = HD / 128;                 /* 128-code blocks of a row */
    static constexpr uint32_t HEAD_TILE = BLOCKS * 16 * 128; /* one head's K (or V) of a tile */
    static constexpr uint32_t TILE_HALF = HB * HEAD_TILE;    /* the heads' K (or V) */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_HALF;   /* a stage: K then V */
    /* At least 3 stages and about 96 KB, a multiple of WPH (stage s is always consumed by the same
     * warps: those with w / HB == s % WPH, HB of them). */
    static constexpr int MIN_STAGES = (96 * 1024 / STAGE_BYTES > 3 ? 96 * 1024 / STAGE_BYTES : 3);
    static constexpr int STAGES = (MIN_STAGES + WPH - 1) / WPH * WPH;
    static constexpr int ROW = HD + 2;                      /* merged rows: acc, m, l */
    static constexpr int MERGE_ROWS = WPH * 8 + 8;          /* a head's: its warps' 8 rows each, then res */
    static constexpr int RING = STAGES * STAGE_BYTES;        /* bytes of the ring */
    static constexpr int SMEM = 1024 + RING + 2 * STAGES * 8; /* alignment slack, the ring, its barriers */
    static_assert(HD % 128 == 0 && HB * BLOCKS <= 8 && CW % HB == 0, "rows of whole 128-code blocks, <= 8 a slot");
    static_assert(HB * MERGE_ROWS * ROW * 4 <= RING, "the merge reuses the ring");
    /* merge_partials's weights (8 heads x (splits + 2) floats) fit a head's merge rows */
    static_assert(8 * (KL_DECODE_MAX_SPLITS + 2) <= MERGE_ROWS * ROW, "the partials' weights fit");
};

} // namespace

/* k_box / v_box: boxes of 128 codes x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row: 128 codes x 1 head x 1 slot. Grid: (request, kv heads / HB,
 * split). */
template <typename T, int HD, int HB>
static __global__ void __launch_bounds__(heads_ring_shape<HD, HB>::THREADS)
    decode_v10(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk, int boxes)
{
#if KL_SM90A
    using S = heads_ring_shape<HD, HB>;
    constexpr int STAGES = S::STAGES;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *ring = kl::ptx::align_1024(smem_raw); /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last; /* this CTA merges the request's partials */
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 1, 32 * HB); /* overlaps the previous kernel's tail */

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
    const int warp = threadIdx.x / 32;
    const int hh = warp % HB, turn = warp / HB; /* a consumer's head in the CTA, and its turn among WPH */
    const int g = g0 + hh, h0 = g * group, nh = group;

    float o[S::KSTEPS][4] = {}; /* the online softmax: O^T, m, l (fp8_ring_tile.cuh) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */

    if (warp == S::PRODUCER) {
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 128, HB>(&k_box, &v_box, &k_row, &v_row, boxes, p, b, g0, t0,
                                                                   t1, ring_at, full, empty);
    } else {
        /* q as the fp16 B operand, and the scores in log2 units with this head's k_scale folded in. */
        uint32_t qf[S::KSTEPS][2];
        float dq0, dq1;
        kl::decode::fp8_ring::q_operand<T, HD>(p, b, h0, nh, qf, dq0, dq1);
        const float scale = p.sm_scale * p.k_scale[g] * 1.44269504089f;

        for (int i = turn; i < tiles; i += S::WPH) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1); /* round i / STAGES of the stage has landed */
            const unsigned char *ks = ring + st * S::STAGE_BYTES + hh * S::HEAD_TILE, *vs = ks + S::TILE_HALF;
            kl::decode::fp8_ring::tile_update<HD, true>(ks, vs, qf, dq0, dq1, scale, t0 + 16 * i, t1, o, m, l);
            /* This lane's reads of the stage are done; every lane of the stage's HB warps arrives. */
            kl::ptx::mbar_arrive(&empty[st]);
        }
    }
    /* Every tile issued was waited for by its consumers, so no copy is in flight: the ring becomes
     * the merge area, MERGE_ROWS rows a head. */
    __syncthreads();

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < S::CW) /* each consumer's state, v_scale applied */
        kl::decode::fp8_ring::write_state<HD>(mrg + (hh * S::MERGE_ROWS + turn * 8) * S::ROW, o, m, l, p.v_scale[g]);
    /* finish_cta_heads begins with a block barrier: the rows above are written */
    kl::decode::finish_cta_heads<T, HD, S::WPH, HB>(p, mrg, S::MERGE_ROWS * S::ROW, last, b, g0, 0, g0 * group, group,
                                                    split, splits);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

template <typename T, int HD, int HB>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                                cudaStream_t stream)
{
    using S = heads_ring_shape<HD, HB>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v10<T, HD, HB>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t per_sm = 228 * 1024 / (S::SMEM + 1024); /* the CTAs an SM's shared memory holds */
    const struct kl_decode_split plan =
        kl_attention_decode_split_waves(p, p->batch * (p->num_kv_heads / HB), per_sm * kl_attention_decode_sms());
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v10_fp8_page_heads: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads / HB), (unsigned)plan.splits);
    /* kl::launch_pdl with the ring's dynamic shared memory: a programmatic dependent launch. */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(S::THREADS), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v10<T, HD, HB>, m.k_box, m.v_box, m.k_row, m.v_row, *p, (int)plan.chunk,
                              m.boxes);
}

/* HB: the most kv heads, of 8, 4, 2, 1, that divide the head count with at most 8 x 128 codes of a slot's row. */
template <typename T, int HD>
static cudaError_t launch_heads(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                                cudaStream_t stream)
{
    const int64_t kvh = p->num_kv_heads;
    if constexpr (HD == 128)
        if (kvh % 8 == 0) return launch_shape<T, HD, 8>(p, m, stream);
    if (kvh % 4 == 0) return launch_shape<T, HD, 4>(p, m, stream);
    if (kvh % 2 == 0) return launch_shape<T, HD, 2>(p, m, stream);
    return launch_shape<T, HD, 1>(p, m, stream);
}

template <typename T>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                             cudaStream_t stream)
{
    if (p->head_dim == 128) return launch_heads<T, 128>(p, m, stream);
    return launch_heads<T, 256>(p, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_fp8(p, "v10_fp8_page_heads");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->head_dim != 128 && p->head_dim != 256) return cudaErrorNotSupported;
    if (p->num_qo_heads / p->num_kv_heads > 8) return cudaErrorNotSupported; /* a warp's 8 columns of heads */
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, kl::cache_elem::e4m3, "attention_decode v10_fp8_page_heads", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) return launch_hd<__nv_bfloat16>(p, maps, stream);
    return launch_hd<__half>(p, maps, stream);
}

KL_VARIANT(attention_decode, v10_fp8_page_heads, launch, .min_cc = 90,
           .summary = "v9 with a CTA over up to 8 kv heads: every head's box of a page issued together, "
                      "the page table read once, a split that fills the SMs in whole waves");
