/* v12_cp_async_gather: v8's ring, with the rows of pages that are not whole 16-slot runs (page 1,
 * SGLang's default, or any size not a multiple of 16) gathered by cp.async instead of one row box per
 * 128 bytes.
 *
 * What changed from v8, and why: at page 1 v8's producer issues a bulk tensor copy of 1 row x 64
 * columns per 128 bytes, 64 of them a tile, and each is a request the copy engine walks through its
 * descriptor for; a tile of 8 KB in 64 small requests is far from what one 16-row box delivers, and
 * v8 reads page 1 at a fraction of its page-16 rate (reports/attention_decode.md has the figures). Here
 * the same producer warp gathers such a tile with cp.async (page_ring.cuh's gather_rows_cp_async): 16
 * bytes a lane, one warp instruction covering 512 contiguous bytes (two 256-byte rows at head_dim 128),
 * each chunk placed where the 128-byte swizzle would have placed it, so the consumers read the same
 * layout with the same arithmetic (bf16_ring_tile.cuh). The copies are counted by
 * cp.async.mbarrier.arrive.noinc, each lane's arrival made once its own copies landed, so a stage's
 * full barrier counts 32 arrivals; a whole 16-slot tile still comes as boxes, lane 0 announcing its
 * bytes and the other lanes arriving plainly. The slots come from the page table 4 x 32 tokens ahead
 * in registers, as in v8, so no copy waits on a page-table load. The second change is the split:
 * v8 asks for about three CTAs an SM and caps chunks at 2048 tokens, which can leave a last wave
 * mostly empty (b32-kv4k-p1: 512 CTAs for 396 slots); v12 takes v10's planner
 * (kl_attention_decode_split_waves: the split whose CTAs fill the slots in the fewest waves of the
 * least work each), from the shape alone as before. It sees max_kv_len only, so on a ragged batch
 * its chunks can be longer than v8's cap and the long requests finish last (v11_by_shape keeps whole
 * 16-slot pages on v8). Everything else is v8's: warp 4 produces,
 * consumer warp i % 4 computes tile i with mma.sync and hands its stage back on the empty barrier,
 * the last CTA of a request merges, PDL.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v12_cp_async_gather --workload b32-kv4k-p1 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

/* k_box / v_box: boxes of 64 columns x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row are not read (the gathers are cp.async). Every full barrier
 * counts the producer's 32 lanes. */
template <typename T, int HD, int CW, int STAGES>
static __global__ void __launch_bounds__(32 * (CW + 1))
    decode_v12(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
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
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32); /* overlaps the previous kernel's tail */

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
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true>(&k_box, &v_box, &k_row, &v_row, boxes, p, b, g,
                                                                        t0, t1, ring_at, full, empty);
    } else {
        /* Q^T as the B operand of every k-step, loaded once; scores in log2 units. */
        uint32_t qf[S::KSTEPS][2];
        kl::decode::bf16_ring::q_operand<T, HD>(p, b, h0, nh, qf);
        const float scale = p.sm_scale * 1.44269504089f;
        for (int i = warp; i < tiles; i += CW) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1); /* round i / STAGES of the stage has landed */
            const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
            kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, t0 + 16 * i, t1, o, m, l);
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
            cudaFuncSetAttribute(decode_v12<T, HD, CW, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
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
    return cudaLaunchKernelEx(&cfg, decode_v12<T, HD, CW, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
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
    cudaError_t rc = kl_attention_decode_check_params(p, "v12_cp_async_gather");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    /* Three CTAs fit an SM (a ring of 64 KB each); the split fills those slots in whole waves. Chunks
     * are multiples of 64 tokens, so every tile starts at a multiple of 16. */
    const int64_t ctas_per_split = p->batch * p->num_kv_heads * ((p->num_qo_heads / p->num_kv_heads + 7) / 8);
    const struct kl_decode_split plan =
        kl_attention_decode_split_waves(p, ctas_per_split, 3 * (int64_t)kl_attention_decode_sms());
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v12_cp_async_gather: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v12_cp_async_gather", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v12_cp_async_gather, launch, .min_cc = 90,
           .summary = "v8's TMA ring with pages that are not whole 16-slot runs (page 1) gathered by cp.async into "
                      "the swizzled stages (cp.async.mbarrier arrivals), a split that fills the SMs in whole waves");
