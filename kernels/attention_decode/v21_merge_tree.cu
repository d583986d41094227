/* v21_merge_tree: v19 (and v20's timeline) whose split requests are merged as a tree: the split that
 * completes each of up to 4 groups of splits merges the group while other groups still stream, and
 * the group that completes the request merges the groups' partials.
 *
 * What changed from v20, and why: v20's launch timelines put b1-kv32k-p16's distance from its read
 * time in the last CTA's tail, after every key loop has ended: the last CTA merges all 64 splits of a
 * kv head, and v20's bulk copies read them no faster than v19's loads did. What makes the tail long
 * is how many partials the last CTA reads, so here it reads fewer. A request of 9 splits or more is
 * cut into at most 4 groups of consecutive splits (16 each at 64 splits); each split counts itself in
 * its group's 7-bit field of the request's merge counter, and the split that completes its group
 * merges the group's partials with v19's merge (decode.cuh's merge_split_rows, 8 loads a thread in
 * flight) into one partial of the same form, written over the group's first split's rows. A group that
 * completes while other CTAs still read keys merges off the call's tail. Each group's
 * merger then counts the group in the counter's top bits; the one that completes the count merges the
 * groups' partials (4 rows a head, one batch of loads) into the output and resets the counter. On
 * the tail are the last group's merge and that final one, where v19 and v20 merge every split at once.
 * Fewer than 9 splits are merged at once, as in v19. It records its launch's timeline as v20 does.
 * Why faster (the prediction): b1-kv32k-p16's tail shrinks from one merge of 64 splits to one of 16
 * and one of 4, with one more fence and atomic between them; requests of fewer than 9 splits (b8, the
 * large batches) should not move.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v21_merge_tree --workload b1-kv32k-p16 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

constexpr int kConsumers = 3; /* consumer warps a CTA: warps 0 .. 2 */
constexpr int kGatherers = 1; /* producer warps a CTA: warp 3 */
constexpr int kCtasPerSm = 4; /* what the ring's size allows at head_dim 64 and 128, and what the split plans for */
constexpr int kThreads = 32 * (kConsumers + kGatherers);

/* The merge tree. A request of kTreeFrom splits or more is cut into at most kTreeGroups groups of
 * `size` consecutive splits; each split counts itself in its group's field of the request's merge
 * counter (bits kGroupBits k .. of group k), the split that completes a group merges the group's
 * partials into one, written over the group's first split's rows, and counts the group in the
 * counter's top bits; the group that completes the count merges the groups' partials into the
 * output and resets the counter for the next launch. Fewer splits are merged at once, as in v19. */
constexpr int kTreeFrom = 9;   /* below, one merge reads at most 8 splits: one batch of loads a thread */
constexpr int kTreeGroups = 4; /* 4 fields of 7 bits and a count of merged groups fill the 32-bit counter */
constexpr int kGroupBits = 7;  /* up to 127 splits a group; a request has at most KL_DECODE_MAX_SPLITS */
constexpr unsigned kGroupMerged = 1u << (kTreeGroups * kGroupBits);
static_assert((KL_DECODE_MAX_SPLITS + kTreeGroups - 1) / kTreeGroups < (1 << kGroupBits), "a group's count fits");

struct tree_shape {
    int size, groups; /* splits a group (the last may have fewer), groups */
};
static __device__ __forceinline__ tree_shape tree_of(int splits)
{
    const int size = (splits + kTreeGroups - 1) / kTreeGroups;
    return {size, (splits + size - 1) / size};
}

/* A split's count in its group's field; true in the split that completes the group. */
struct count_in_group {
    int group, members;
    __device__ __forceinline__ bool operator()(unsigned *counter) const
    {
        const unsigned old = atomicAdd(counter, 1u << (kGroupBits * group));
        return (old >> (kGroupBits * group) & ((1u << kGroupBits) - 1)) == (unsigned)members - 1;
    }
};

/* After the key loop, the whole block: file this split's partials and, where it completes a group,
 * merge the group and, where that completes the request, the groups. `w`: the merge area. */
template <typename T, int HD, int CW>
static __device__ __forceinline__ void finish_tree(const kl_attention_decode_params &p, float *w, bool &last, int b,
                                                   int g, int hb, int h0, int nh, int split, int splits)
{
    if (splits < kTreeFrom) {
        kl::decode::finish_cta<T, HD, CW>(p, w, last, b, g, hb, h0, nh, split, splits); /* v19's */
        return;
    }
    const auto at = [=](int h) { return kl::decode::out_row{b, h0, h}; };
    const tree_shape t = tree_of(splits);
    const int group = split / t.size, s0 = group * t.size, members = min(t.size, splits - s0);
    if (!kl::decode::file_cta_heads<T, HD, CW, 1>(p, w, 0, last, b, g, hb, h0, nh, split, splits,
                                                  count_in_group{group, members}))
        return;
    kl::decode::merge_split_rows<T, true>(p, nh, s0, members, 1, w, 1, at); /* over split s0's rows */
    /* Publish the group's partial as file_cta_heads publishes a split's, then count the group. */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *counter = kl::decode::counter_of(p, b, g, hb);
        last = atomicAdd(counter, kGroupMerged) / kGroupMerged == (unsigned)t.groups - 1;
        if (last) *counter = 0; /* every split and every group has counted: reset for the next launch */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    kl::decode::merge_split_rows<T, false>(p, nh, 0, t.groups, t.size, w, 1, at);
}

/* k_box / v_box: boxes of 64 columns x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row are not read (the gathers are cp.async). Every full barrier
 * counts the gatherer's 32 lanes. Head_dim 256 holds O and Q in more registers than four CTAs an SM
 * leave a thread, so its launch bounds ask for one. */
template <typename T, int HD, int STAGES>
static __global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v21(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
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
    /* The launch's timeline, where the caller asks for one (params.trace): thread 0 of each CTA stamps. */
    const unsigned cta = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    auto stamp = [&](kl_decode_event e) {
        if (p.trace && threadIdx.x == 0 && cta < KL_DECODE_TRACE_CTAS) p.trace->at[cta][e] = kl::ptx::globaltimer();
    };
    stamp(KL_DECODE_START);
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32 * kGatherers, 32); /* overlaps the previous kernel's tail */
    stamp(KL_DECODE_RELEASED);

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

    if (warp == CW) {
        kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true, true, kGatherers, 0, true>(
            &k_box, &v_box, &k_row, &v_row, boxes, p, b, g, t0, t1, ring_at, full, empty);
    } else {
        uint32_t qf[S::KSTEPS][2];
        kl::decode::bf16_ring::q_operand<T, HD>(p, b, h0, nh, qf);
        const float scale = p.sm_scale * 1.44269504089f;
        /* Tile i in stage i % STAGES, consumed by warp i % CW (STAGES is a multiple of CW). */
        for (int i = warp; i < tiles; i += CW) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1);
            if (i == 0) stamp(KL_DECODE_FIRST_TILE);
            const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
            kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, t0 + 16 * i, t1, o, m, l);
            kl::ptx::mbar_arrive(&empty[st]); /* every lane: see v8 */
        }
    }
    __syncthreads(); /* no copy in flight: the ring becomes the merge area */
    stamp(KL_DECODE_LOOP_DONE);

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < CW) kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l);
    finish_tree<T, HD, CW>(p, mrg, last, b, g, blockIdx.y % blocks, h0, nh, split, splits);
    stamp(KL_DECODE_END);
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
            cudaFuncSetAttribute(decode_v21<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
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
    return cudaLaunchKernelEx(&cfg, decode_v21<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
                              (int)plan.chunk, m.boxes);
}

/* v16's ring: six stages of 16 tokens (two per consumer warp) at head_dim 64 and 128; head_dim 256
 * tiles are twice as large, so three keep the ring at 48 KB. */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                             const kl::decode::page_maps &m, cudaStream_t stream)
{
    if constexpr (HD == 256) return launch_shape<T, HD, 3>(p, plan, m, stream);
    else return launch_shape<T, HD, 6>(p, plan, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v21_merge_tree");
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
        fprintf(stderr, "attention_decode v21_merge_tree: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v21_merge_tree", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v21_merge_tree, launch, .min_cc = 90,
           .summary = "v19 whose split requests are merged as a tree: the last split of each of up to 4 groups merges "
                      "its group while other groups still stream, the last group the groups' partials");
