/* v26_tile_gatherers: v24 with gathering warps that each gather whole tiles of their own.
 *
 * What changed from v24, and why: v24's four gatherers share every tile, gatherer G issuing copies G,
 * G + 4, ... of it, so G is a template parameter (its copies' addresses fold to constants) and the CTA
 * holds four instantiations of the producer loop, one a warp. Here the warps take turns by group of two
 * tiles instead (page_ring.cuh's INTERLEAVE): warp 3 + w gathers groups w, w + 3, ... whole, with v19's
 * one-warp copies, so every gathering warp runs the same instructions, and a full barrier counts one
 * warp's 32 arrivals. Three warps, not four: with six stages each warp then owns two of them, every
 * round of them, which the empty barriers' parity needs (page_ring.cuh; four warps taking turns over six
 * stages was this rung's first draft, and the emulator caught a warp refilling a stage its consumers
 * were still reading). Head_dim 256 gets six stages too, for the same reason (one CTA an SM has room).
 * Each warp looks up only its own groups' slots, and three tiles' copies are issued at once by three
 * warps where v24 issued one tile's by four. A CTA has 192 threads, so four CTAs an SM leave a thread
 * more registers than v24's CTAs of 224 do. The consumers and the split are v24's.
 * Why faster (the prediction): if v24's instruction-fetch stalls come from its four copies of the
 * producer loop, one copy removes them and the page-16 batches keep v24's bytes in flight with fewer
 * stalls; if they do not, v26 runs as v24 does.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v26_tile_gatherers --workload b64-kv8k-p16 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

constexpr int kConsumers = 3; /* consumer warps a CTA: warps 0 .. 2 */
constexpr int kGatherers = 3; /* producer warps a CTA: warps 3 .. 5, taking turns by group */
constexpr int kCtasPerSm = 4; /* what the ring's size allows at head_dim 64 and 128, and what the split plans for */
constexpr int kThreads = 32 * (kConsumers + kGatherers);

/* The tensor maps are not read: every tile is gathered by cp.async. Every full barrier counts the 32
 * lanes of the one warp that gathers its tile. Head_dim 256 holds O and Q in more registers than four
 * CTAs an SM leave a thread, so its launch bounds ask for one. */
template <typename T, int HD, int STAGES>
static __global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v26(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk)
{
#if KL_SM90A
    constexpr int CW = kConsumers;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw));                     /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last;                                         /* this CTA merges the request's partials */
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32); /* overlaps the previous kernel's tail */

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * 8;
    const int nh = min(8, g * group + group - h0), n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk;
    if (n == 0) {
        if (split == 0)
            for (int h = 0; h < nh; h++)
                kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    if (split >= splits) return;
    const int t0 = split * chunk, t1 = min(n, t0 + chunk), tiles = (t1 - t0 + 15) / 16;
    const int warp = threadIdx.x / 32;

    float o[S::KSTEPS][4] = {};                         /* the online softmax: O^T, m, l (bf16_ring_tile.cuh) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */

    if (warp >= CW) {
        /* groups warp - CW, warp - CW + kGatherers, ... of the chunk, whole (boxes false: page 16 gathered too) */
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true, true, 1, 0, true, 0, kGatherers>(
            &k_box, &v_box, &k_row, &v_row, false, p, b, g, t0, t1, ring_at, full, empty, 0, warp - CW);
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
    static_assert((HD == 256 ? 1 : kCtasPerSm) * (S::SMEM + 1024) <= 228 * 1024, "the CTAs' rings fit an SM");
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v26<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t blocks = (p->num_qo_heads / p->num_kv_heads + 7) / 8;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    /* kl::launch_pdl with the ring's dynamic shared memory: a programmatic dependent launch. */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(kThreads), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v26<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p, (int)plan.chunk);
}

/* v16's ring of six stages of 16 tokens (two per consumer warp), at every head_dim: each gathering warp
 * owns two stages (head_dim 256, whose CTA has an SM to itself, gets six where v24 keeps three). */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                             const kl::decode::page_maps &m, cudaStream_t stream)
{
    return launch_shape<T, HD, 2 * kGatherers>(p, plan, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v26_tile_gatherers");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    /* The whole-wave split for four CTAs an SM; chunks are multiples of 64 tokens, so every tile starts
     * at a multiple of 16. */
    const int64_t ctas_per_split = p->batch * p->num_kv_heads * ((p->num_qo_heads / p->num_kv_heads + 7) / 8);
    const struct kl_decode_split plan =
        kl_attention_decode_split_waves(p, ctas_per_split, kCtasPerSm * (int64_t)kl_attention_decode_sms());
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v26_tile_gatherers: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v26_tile_gatherers", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v26_tile_gatherers, launch, .min_cc = 90,
           .summary = "v24 with three gathering warps that take turns by group of two tiles, each tile one warp's "
                      "copies: one producer loop for all three, 32 arrivals a full barrier");
