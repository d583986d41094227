/* v16_head_clusters: v8's TMA page ring, with the copies marked evict-first in L2, four smaller CTAs an
 * SM, and the CTAs of one request's kv heads launched as a thread-block cluster.
 *
 * What changed from v8, and why: v8 reads each page of a request as eight separate streams, one per kv
 * head: CTA (b, g) asks for the 256-byte rows of kv head g of the page's 16 slots, 2 KB apart in the
 * cache, and the other seven heads' rows of the same slots are asked for by seven other CTAs whenever
 * the scheduler happened to start them. Three changes, all on the bytes' path; the arithmetic is v8's
 * (bf16_ring_tile.cuh) and so are the split plan, the finish and the merge (decode.cuh):
 * - Every TMA copy brings its lines into L2 under an evict-first policy (page_ring.cuh's EVICT_FIRST,
 *   as v14 does for e4m3 pages): each K/V byte is read once, so its lines are the first L2 gives up.
 * - The grid's kv-head axis is launched in clusters of up to four CTAs (4, 2 or 1, whichever divides
 *   it): a cluster's CTAs start together on one GPC, so neighbouring 256-byte pieces of each slot's
 *   row are asked of memory at about the same time instead of whenever each CTA was scheduled. The
 *   CTAs never touch each other's shared memory.
 * - Three consumer warps and a ring of six stages (48 KB at head_dim 128; three at 256, 48 KB too),
 *   so four CTAs fit an SM where v8's 64 KB rings fit three: the same bytes of ring an SM, and 528
 *   CTA slots on 132 SMs where v8 has 396, so a batch whose (request, kv head) pairs run in a few
 *   waves (b128-kv1k-p16: 1024 CTAs) leaves less of its last wave empty.
 * The module's tables put v16 beside v8 on the same shapes.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v16_head_clusters */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

/* The tests' mutant (lab/attention_decode/emulate/mutants.py) edits the consumers' stride; see there. */
constexpr int kConsumers = 3;  /* consumer warps a CTA; the producer is warp kConsumers */
constexpr int kCtasPerSm = 4;  /* what the ring's size allows, and what the split plans for */
constexpr int kMaxCluster = 4; /* CTAs of one request's kv heads started together */

/* k_box / v_box: boxes of 64 columns x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row: 64 columns x 1 head x 1 slot. */
template <typename T, int HD, int STAGES>
static __global__ void __launch_bounds__(32 * (kConsumers + 1))
    decode_v16(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk, int boxes)
{
#if KL_SM90A
    constexpr int CW = kConsumers;
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
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, false, true>(
            &k_box, &v_box, &k_row, &v_row, boxes, p, b, g, t0, t1, ring_at, full, empty);
    } else {
        uint32_t qf[S::KSTEPS][2];
        kl::decode::bf16_ring::q_operand<T, HD>(p, b, h0, nh, qf);
        const float scale = p.sm_scale * 1.44269504089f;
        /* Tile i in stage i % STAGES, consumed by warp i % CW (STAGES is a multiple of CW). */
        for (int i = warp; i < tiles; i += CW) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1);
            const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
            kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, t0 + 16 * i, t1, o, m, l);
            kl::ptx::mbar_arrive(&empty[st]); /* every lane: see v8 */
        }
    }
    __syncthreads(); /* no copy in flight: the ring becomes the merge area */

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < CW) kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l);
    kl::decode::finish_cta<T, HD, CW>(p, mrg, last, b, g, blockIdx.y % blocks, h0, nh, split, splits);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

template <typename T, int HD, int STAGES>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                                const kl::decode::page_maps &m, cudaStream_t stream)
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    static_assert(kCtasPerSm * (S::SMEM + 1024) <= 228 * 1024, "four CTAs' rings fit an SM");
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v16<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t blocks = (p->num_qo_heads / p->num_kv_heads + 7) / 8;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    unsigned cluster = kMaxCluster;
    while (grid.y % cluster) cluster /= 2;
    /* kl::launch_pdl with the ring's dynamic shared memory and a cluster along the kv-head axis. */
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1, attr[1].val.clusterDim.y = cluster, attr[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(S::THREADS), (size_t)S::SMEM, stream, attr, 2};
    return cudaLaunchKernelEx(&cfg, decode_v16<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
                              (int)plan.chunk, m.boxes);
}

/* Six stages of 16 tokens (two per consumer warp) at head_dim 64 and 128; head_dim 256 tiles are
 * twice as large, so three keep the ring at 48 KB. */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                             const kl::decode::page_maps &m, cudaStream_t stream)
{
    if constexpr (HD == 256) return launch_shape<T, HD, 3>(p, plan, m, stream);
    else return launch_shape<T, HD, 6>(p, plan, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v16_head_clusters");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    /* v8's plan for four CTAs an SM: chunks of 64-token multiples, so every tile starts at a multiple of 16. */
    const struct kl_decode_split plan =
        kl_attention_decode_split(p, kl_attention_decode_sms(), kCtasPerSm, 64, 128, 2048);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v16_head_clusters: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v16_head_clusters", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v16_head_clusters, launch, .min_cc = 90,
           .summary = "v8's TMA page ring with evict-first copies, four CTAs an SM (3 consumer warps, 48 KB ring) and "
                      "a request's kv heads launched as clusters of up to four");
