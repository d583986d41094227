/* v8_tma_pages: v5's producer/consumer ring, fed by bulk tensor copies (TMA) of whole pages: a tile
 * of 16 tokens of one kv head is one copy of K and one of V per 64 columns, 128-byte swizzled on the
 * way in, where v5 issued 32 row copies.
 *
 * What changed from v5, and why: v5's producer issues one cp.async.bulk per 256-byte row, 32 per
 * tile, and pads each row by 16 bytes (a 1-D bulk copy cannot permute what it writes) so that the
 * consumers' ldmatrix rows fall in different banks. Each copy is an instruction the producer warp
 * issues and the copy engine tracks, and small copies reach less of what HBM delivers than large
 * ones. Here the cache is a 3-D tensor (head_dim, kv heads, slots; slot = page * page_size + position
 * in the page), described on the host by two tensor maps per cache (cuTensorMapEncodeTiled through the
 * runtime's driver entry point, per call: a host-only call, so a CUDA graph may capture the launch;
 * the maps travel as __grid_constant__ parameters). Where the page size is a multiple of 16 a tile
 * is 16 consecutive slots of one page, and the producer issues head_dim / 64 boxes of 64 columns x
 * 16 rows for K and as many for V (2 KB each): 4 copies a tile at head_dim 128. The 128-byte swizzle
 * needs a box row of at most 128 bytes, hence the 64-column blocks: a tile is [block][row][64] in
 * shared memory, dense, with 16-byte chunk c of a row stored at chunk c ^ (row % 8) (the swizzle
 * XORs address bits 4-6 with bits 7-9, and each tile starts 1024-byte aligned); the ldmatrix
 * addresses apply the same XOR (bf16_ring_tile.cuh's chunk_at), so the 8 rows one ldmatrix phase reads sit in 8
 * different bank groups with no padding. Other pages (page 1, or any size not a multiple of 16),
 * and a request's last partial tile, gather: the 32 producer lanes copy each row of K and V as
 * head_dim / 64 boxes of 64 columns x 1 row, through a second map per cache, landing at the row's
 * place in the same swizzled layout; rows past the chunk copy its last token again (finite data
 * whose score is masked), so every tile carries the same bytes on its full barrier. The producer's
 * loop and the maps are page_ring.cuh's (v9 and v10 share them). The rest is
 * v5's: warp 4 produces, consumer warp i % 4 computes tile i with mma.sync and hands its stage
 * back on the empty barrier (all 32 lanes arrive), pages looked up 4 x 32 tokens ahead, the split
 * plan from the shape alone, the last CTA of a request merges, PDL.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v8_tma_pages */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

/* The tests' mutant (lab/attention_decode/mutants.cu) builds this file with KL_DECODE_V8_BUG 1: the
 * reads without the swizzle. 0 here. */
#ifndef KL_DECODE_V8_BUG
#define KL_DECODE_V8_BUG 0
#endif

/* k_box / v_box: boxes of 64 columns x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row: 64 columns x 1 head x 1 slot. */
template <typename T, int HD, int CW, int STAGES>
static __global__ void __launch_bounds__(32 * (CW + 1))
    decode_v8(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
              const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
              const kl_attention_decode_params p, int chunk, int boxes)
{
#if KL_SM90A
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw)); /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
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

    float o[S::KSTEPS][4] = {}; /* the online softmax: O^T, m, l (bf16_ring_tile.cuh) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */

    if (warp == S::PRODUCER) {
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64>(&k_box, &v_box, &k_row, &v_row, boxes, p, b, g, t0, t1,
                                                              ring_at, full, empty);
    } else {
        /* Q^T as the B operand of every k-step, loaded once; scores in log2 units. */
        uint32_t qf[S::KSTEPS][2];
        kl::decode::bf16_ring::q_operand<T, HD>(p, b, h0, nh, qf);
        const float scale = p.sm_scale * 1.44269504089f;
        for (int i = warp; i < tiles; i += CW) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1); /* round i / STAGES of the stage has landed */
            const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
            kl::decode::bf16_ring::tile_update<T, HD, KL_DECODE_V8_BUG != 1>(ks, vs, qf, scale, t0 + 16 * i, t1,
                                                                              o, m, l);
            /* This lane's reads of the stage are done (ldmatrix wrote registers the mmas read).
             * Every lane arrives: an arrival releases only the arriving thread's own reads, so
             * the 32nd arrival, which lets the producer overwrite the stage, comes after all of
             * them. */
            kl::ptx::mbar_arrive(&empty[st]);
        }
    }
    /* Every tile issued was waited for by its consumer, so no copy is in flight: the ring becomes
     * the merge area (plain floats: the swizzle only concerned the tiles). The one block-wide
     * barrier of the key loop's lifetime. */
    __syncthreads();

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < CW) kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l); /* each consumer's state */
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
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v8<T, HD, CW, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
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
    return cudaLaunchKernelEx(&cfg, decode_v8<T, HD, CW, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
                              (int)plan.chunk, m.boxes);
}

/* Eight stages of 16 tokens (two per consumer warp); head_dim 256 tiles are twice as large, so four
 * keep the ring near the same bytes and three CTAs per SM. */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                             const kl::decode::page_maps &m, cudaStream_t stream)
{
    if constexpr (HD == 256) return launch_shape<T, HD, 4, 4>(p, plan, m, stream);
    else return launch_shape<T, HD, 4, 8>(p, plan, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v8_tma_pages");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    /* About three CTAs fit per SM (a ring of 64 KB each): the plan asks for that many. Chunks are
     * multiples of 64 tokens, so every tile starts at a multiple of 16. */
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 3, 64, 128, 2048);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v8_tma_pages: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v8_tma_pages", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v8_tma_pages, launch, .min_cc = 90,
           .summary = "v5's producer/consumer mbarrier ring fed by TMA: one 128B-swizzled box per page and 64 columns "
                      "(row boxes for other page sizes), no row padding, PDL");
