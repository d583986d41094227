/* v29_work_queue: v26's CTA made persistent: one wave of CTAs takes the chunks of every request from a
 * queue, each CTA the next chunk as soon as it is done with its last.
 *
 * What changed from v26, and why: v26 launches a CTA for each (request, head block, chunk), one chunk a
 * request on the large batches, and each CTA reads its chunk at the rate its SM gets. The launch timelines
 * of v20 (v26's split) show the key loops ending at different times even on a uniform batch (b64-kv8k-p16:
 * every CTA the same bytes), and far apart on a ragged one (ragged-b64-p16): the SMs do not read at one
 * rate, and towards the end fewer and fewer CTAs are left to keep the memory busy. Here the grid is one
 * wave (as many CTAs as the SMs hold, G). The keys are cut in chunks about kItemsPerCta times finer than
 * v26's whole-wave split (the host planner's cost with kItemsPerCta x G slots, from the shape alone), or in
 * v26's own chunks where that would make them shorter than kMinChunk tokens, since each item starts with a
 * refill of the ring and ends with a merge. The work items (a chunk of a request for one block of up to 8 qo
 * heads of one kv head) are handed out by a counter in the workspace: thread 0 takes the next item with an
 * atomic add, so a CTA on a fast SM takes more of them and the key loops end together, to about an item.
 * Thread 0 takes a CTA's next item as the current one starts, so the atomic's round trip overlaps its first
 * copies. Items go out last chunks first (split S - 1 of every request that has one, then S - 2, ...; a
 * request's head blocks side by side, so memory sees the kv heads' rows of the same slots asked for
 * together, as in v26's grid), so the short requests' only chunks come last; an item past its request's keys
 * is skipped by taking the next. An item is v26's key loop and finish over its chunk: the last CTA to count
 * a request's chunk merges its partials. Between items the ring is the merge area, so a CTA starts its next
 * item after its finish, and the ring's barriers carry on from item to item: each item starts at stage 0,
 * and `flips` holds, a bit a stage, whether the stage has taken an odd number of rounds since the launch,
 * which every wait XORs into its parity (page_ring.cuh). The CTA that takes the queue's end last resets the
 * counter for the next launch, so a CUDA graph replays the call with any lengths.
 * Why faster (the prediction): the key loops end within about an item of one another, on uniform and ragged
 * batches alike, for the price of a few more chunk starts and merges a request.
 * KL_DECODE_V29_ITEMS_PER_CTA=k (1 to 8) plans for k items a CTA instead, so the choice can be measured
 * again on any GPU. Records its launch's timeline (params.trace): a CTA's first tile is its first item's,
 * its key loop's end its last item's.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v29_work_queue --workload ragged-b64-p16 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

namespace {

constexpr int kConsumers = 3; /* consumer warps a CTA: warps 0 .. 2 */
constexpr int kGatherers = 3; /* producer warps a CTA: warps 3 .. 5, taking turns by group */
constexpr int kCtasPerSm = 4; /* v26's: what the ring's size allows at head_dim 64 and 128 */
constexpr int kThreads = 32 * (kConsumers + kGatherers);
constexpr int kItemsPerCta = 4; /* what the split plans for: enough items that fast CTAs take the slow ones' */
constexpr int kMinChunk = 2048; /* a finer chunk pays its start (the ring's refill, a merge) too often */

/* Chunks of a request of n keys: one when it has no keys (its items write the empty output). */
__device__ __forceinline__ int chunks_of(int n, int chunk) { return n > 0 ? (n + chunk - 1) / chunk : 1; }

/* A work item: split `split` (its keys [split x chunk, ...)) of request b, head block y (kv head y /
 * blocks); item u of the queue is split S - 1 - u / (batch x HB), request u % (batch x HB) / HB, head block
 * u % HB. */
struct work {
    int b, split, y;
};
__device__ __forceinline__ work work_at(const kl_attention_decode_params &p, int u, int splits, int hb_items)
{
    const int per_split = (int)p.batch * hb_items, r = u % per_split;
    return {r / hb_items, splits - 1 - u / per_split, r % hb_items};
}

/* Thread 0: the queue's next item that holds keys (or writes an empty request's output), or -1 when the
 * queue is done; the CTA that takes the end last resets the queue for the next launch (every other CTA
 * has taken its last item by then). */
__device__ __forceinline__ int take_item(const kl_attention_decode_params &p, int chunk, int splits, int hb_items)
{
    unsigned *queue = kl::decode::scheduler(p), *ended = queue + 1;
    const int items = splits * (int)p.batch * hb_items;
    for (;;) {
        const int u = (int)atomicAdd(queue, 1u);
        if (u >= items) break;
        const work w = work_at(p, u, splits, hb_items);
        if (w.split < chunks_of(kl::decode::kv_len(p, w.b), chunk)) return u;
    }
    __threadfence(); /* this CTA's last take before its count of the end */
    if (atomicAdd(ended, 1u) == gridDim.x - 1) *queue = 0, *ended = 0;
    return -1;
}

/* Bit st set: stage st takes an odd number of rounds from `tiles` tiles placed from stage 0. */
template <int STAGES> __device__ __forceinline__ uint32_t odd_rounds(int tiles)
{
    uint32_t bits = 0;
    for (int st = 0; st < STAGES; st++)
        bits |= (uint32_t)((tiles > st ? (tiles - 1 - st) / STAGES + 1 : 0) & 1) << st;
    return bits;
}

/* The tensor maps are not read: every tile is gathered by cp.async, as in v26. */
template <typename T, int HD, int STAGES>
__global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v29(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk, int splits)
{
#if KL_SM90A
    constexpr int CW = kConsumers;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw));                     /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last;     /* this CTA merges the request's partials */
    __shared__ int taken[2];  /* the CTA's k-th item in taken[k % 2], taken by thread 0 */
    auto stamp = [&](kl_decode_event e) { /* the launch's timeline, where the caller asks for one */
        if (p.trace && threadIdx.x == 0 && blockIdx.x < KL_DECODE_TRACE_CTAS)
            p.trace->at[blockIdx.x][e] = kl::ptx::globaltimer();
    };
    stamp(KL_DECODE_START);
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32); /* overlaps the previous kernel's tail */
    stamp(KL_DECODE_RELEASED);

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int hb_items = (int)p.num_kv_heads * blocks, warp = threadIdx.x / 32;
    if (threadIdx.x == 0) taken[0] = take_item(p, chunk, splits, hb_items);
    __syncthreads();
    uint32_t flips = 0; /* stages that have taken an odd number of rounds */
    for (int k = 0; taken[k % 2] >= 0; k++) {
        /* The next item, taken now: its atomic's round trip overlaps this item's first copies. */
        if (threadIdx.x == 0) taken[(k + 1) % 2] = take_item(p, chunk, splits, hb_items);
        const work w = work_at(p, taken[k % 2], splits, hb_items);
        const int g = w.y / blocks, h0 = g * group + w.y % blocks * 8, nh = min(8, g * group + group - h0);
        const int n = kl::decode::kv_len(p, w.b), t0 = w.split * chunk, t1 = min(n, t0 + chunk);
        if (n == 0) {
            for (int h = 0; h < nh; h++)
                kl::decode::write_empty<T>(p, w.b, h0 + h, threadIdx.x, blockDim.x);
        } else {
            const int tiles = (t1 - t0 + 15) / 16;
            float o[S::KSTEPS][4] = {};                         /* the online softmax: O^T, m, l (bf16_ring_tile.cuh) */
            float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */
            if (warp >= CW) {
                /* groups warp - CW, warp - CW + kGatherers, ... of the chunk, whole (v26's call) */
                kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true, true, 1, 0, true, 0, kGatherers>(
                    &k_box, &v_box, &k_row, &v_row, false, p, w.b, g, t0, t1, ring_at, full, empty, 0, warp - CW,
                    flips);
            } else {
                uint32_t qf[S::KSTEPS][2];
                kl::decode::bf16_ring::q_operand<T, HD>(p, w.b, h0, nh, qf);
                const float scale = p.sm_scale * 1.44269504089f;
                /* Tile i in stage i % STAGES, consumed by warp i % CW, its round's parity flipped by the stage's past. */
                for (int i = warp; i < tiles; i += CW) {
                    const int st = i % STAGES;
                    kl::ptx::mbar_wait(&full[st], (i / STAGES & 1) ^ (flips >> st & 1));
                    if (k == 0 && i == warp) stamp(KL_DECODE_FIRST_TILE); /* the CTA's first tile */
                    const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
                    kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, t0 + 16 * i, t1, o, m, l);
                    kl::ptx::mbar_arrive(&empty[st]); /* every lane: see v8 */
                }
            }
            __syncthreads(); /* no copy in flight: the ring becomes the merge area */
            stamp(KL_DECODE_LOOP_DONE);

            /* The item again, from shared memory: none of it kept in registers through the key loop. */
            const work v = work_at(p, taken[k % 2], splits, hb_items);
            const int vg = v.y / blocks, vh0 = vg * group + v.y % blocks * 8, vn = kl::decode::kv_len(p, v.b);
            float *mrg = reinterpret_cast<float *>(ring);
            if (warp < CW) kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l);
            kl::decode::finish_cta<T, HD, CW>(p, mrg, last, v.b, vg, v.y % blocks, vh0,
                                              min(8, vg * group + group - vh0), v.split, chunks_of(vn, chunk));
            flips ^= odd_rounds<STAGES>((min(vn, v.split * chunk + chunk) - v.split * chunk + 15) / 16);
        }
        /* The merge area is the ring again: this thread's accesses ordered before the next item's copies
         * write the same bytes, then every thread's. */
        kl::ptx::fence_async_smem();
        __syncthreads();
    }
    stamp(KL_DECODE_END);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

/* KL_DECODE_V29_ITEMS_PER_CTA=k (1 .. 8): the split planned for k items a CTA. */
int items_per_cta()
{
    static const int k = kl_attention_decode_knob("KL_DECODE_V29_ITEMS_PER_CTA", 1, 8, kItemsPerCta);
    return k;
}

/* The CTAs an SM hold (once per instantiation, with its shared memory set past 48 KB), or 0. */
template <typename T, int HD, int STAGES> int ctas_per_sm()
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    static_assert((HD == 256 ? 1 : kCtasPerSm) * (S::SMEM + 1024) <= 228 * 1024, "the CTAs' rings fit an SM");
    static int per_sm = -1;
    if (per_sm < 0) {
        per_sm = 0;
        if (cudaFuncSetAttribute(decode_v29<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM) !=
                cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_v29<T, HD, STAGES>, kThreads, S::SMEM) !=
                cudaSuccess)
            per_sm = 0;
    }
    return per_sm;
}

/* v26's ring: six stages of 16 tokens, two for each gathering warp. */
template <typename T, int HD>
cudaError_t launch_hd(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m, cudaStream_t stream)
{
    constexpr int STAGES = 2 * kGatherers;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    const int per_sm = ctas_per_sm<T, HD, STAGES>();
    if (per_sm < 1) return cudaErrorNotSupported;
    const int64_t ctas = (int64_t)per_sm * kl_attention_decode_sms(); /* one wave */
    const int64_t hb_items = p->num_kv_heads * ((p->num_qo_heads / p->num_kv_heads + 7) / 8);
    struct kl_decode_split plan = kl_attention_decode_split_waves(p, p->batch * hb_items, items_per_cta() * ctas);
    if (plan.chunk < kMinChunk && plan.splits > 1) plan = kl_attention_decode_split_waves(p, p->batch * hb_items, ctas);
    if (plan.splits * p->batch * hb_items > INT32_MAX) return cudaErrorNotSupported; /* items are ints */
    /* The queue's words come after the merge counters, so every plan needs the workspace. */
    if (p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v29_work_queue: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    cudaLaunchAttribute attr[1]; /* a programmatic dependent launch, as v26's */
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {dim3((unsigned)ctas), dim3(kThreads), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v29<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
                              (int)plan.chunk, plan.splits);
}

cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v29_work_queue");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v29_work_queue", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, maps, stream));
    }
    return cudaErrorNotSupported;
}

} // namespace

KL_VARIANT(attention_decode, v29_work_queue, launch, .min_cc = 90,
           .summary = "v26's CTA made persistent: one wave of CTAs takes chunks about four times finer than v26's "
                      "from a queue in the workspace (an atomic counter), so the key loops end together");
