/* v31_shrinking_items: v30's queue whose last items are smaller than its first: a request's first chunk is
 * cut in pieces that halve towards split 0, the split the queue hands out last.
 *
 * What changed from v30, and why: v30's items are all one size, so on a uniform batch the CTAs' key loops
 * end over about one item's reading time (each CTA finishes the item it took last, and those were taken at
 * different times), while finer items everywhere would cost every item its page lookups and a merge. Here
 * the queue keeps v30's order (last chunks first) and plans the chunk as v30 does, but split 0 .. kTail of
 * each request are the pieces of its first chunk (with kTail 2: a quarter, a quarter and a half of it;
 * struct cut), so the items that are left when CTAs start running dry are a fraction of a chunk long. Only
 * the queue's arithmetic changes: a split's keys come from cut::first, a request's split count from
 * cut::splits_of, and the merge takes the pieces as it takes any splits (a partial's keys need not be
 * equal in number). Everything else (the item slots, the pipelined merge, the ring's flips) is v30's.
 * Why faster (the prediction): the end spread of the key loops on b64-kv8k-p16 shrinks from about one
 * item to about one piece, for kTail more items a request; ragged-b64-p16 keeps v30's balance, whose last
 * items were already the short requests' single chunks. Every item costs its CTA a start and a merge, so
 * the plan asks for fewer items a CTA than v30's (kItemsPerCta), and a plan that keeps every request in
 * one chunk gets no pieces. KL_DECODE_V31_TAIL=t (0 to 4; 0 is v30's cut),
 * KL_DECODE_V31_ITEMS_PER_CTA=k (1 to 16) and KL_DECODE_V31_MIN_CHUNK=n (64 to 65536 tokens) plan the
 * split otherwise. Records its launch's timeline (params.trace), as v30.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v31_shrinking_items --workload b64-kv8k-p16 */
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
constexpr int kCtasPerSm = 3; /* what the ring and the merge area allow at head_dim 64 and 128 */
constexpr int kThreads = 32 * (kConsumers + kGatherers);
constexpr int kItemsPerCta = 8;  /* what the split plans for, the pieces not counted */
constexpr int kMinChunk = 512;   /* below it, v26's split: a chunk still pays its page lookups and a merge */
constexpr int kTail = 2;         /* a request's first chunk cut in kTail + 1 pieces (the queue's last items) */
constexpr int kMinPiece = 128;   /* the smallest piece: fewer tail pieces where the chunk is short */
constexpr int kSlots = 4;        /* items taken and not yet read by every warp */
constexpr int kMergeBarrier = 1; /* the consumer warps' named barrier */
static_assert(kSlots >= 2, "the item being merged stays in its slot while the next one is taken");

/* The consumer warps, the team that merges (decode.cuh's finish): warps 0 .. kConsumers - 1. */
struct consumer_warps {
    __device__ __forceinline__ unsigned rank() const { return threadIdx.x; }
    __device__ __forceinline__ unsigned size() const { return 32 * kConsumers; }
    __device__ __forceinline__ void sync() const
    {
#if KL_SM90A /* the named barriers' wrappers are sm_90a's; the sm_80 pass compiles the kernel empty */
        kl::ptx::named_sync(kMergeBarrier, 32 * kConsumers);
#endif
    }
};

/* How a request's keys are split: chunks of `chunk` keys, except the first chunk, which is cut in
 * `tail` + 1 pieces that halve towards split 0 (with tail 2: a quarter, a quarter, a half). Split s holds
 * keys [first(s), first(s + 1)); the queue hands out low splits last, so its last items are the smallest.
 * Tail 0 is v30's cut. The pieces' bounds are 16-key multiples (a tile's), and the launcher keeps the
 * smallest piece at kMinPiece keys or more, so no piece is empty. */
struct cut {
    int chunk, tail;
    __host__ __device__ __forceinline__ int first(int s) const
    {
        return s == 0 ? 0 : s <= tail ? (chunk >> (tail + 1 - s)) & ~15 : chunk * (s - tail);
    }
    /* Splits of a request of n keys: one when it has no keys (its items write the empty output). */
    __host__ __device__ __forceinline__ int splits_of(int n) const
    {
        if (n <= 0) return 1;
        int s = (n - 1) / chunk + 1; /* the chunks, the first counted as one piece */
        for (int t = 1; t <= tail; t++) s += first(t) < n;
        return s;
    }
};

/* A work item, as v29's: split `split` (its keys [c.first(split), c.first(split + 1))) of request b, head
 * block y (kv head y / blocks); item u of the queue is split S - 1 - u / (batch x HB), request
 * u % (batch x HB) / HB, head block u % HB. */
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
__device__ __forceinline__ int take_item(const kl_attention_decode_params &p, cut c, int splits, int hb_items)
{
    unsigned *queue = kl::decode::scheduler(p), *ended = queue + 1;
    const int items = splits * (int)p.batch * hb_items;
    for (;;) {
        const int u = (int)atomicAdd(queue, 1u);
        if (u >= items) break;
        const work w = work_at(p, u, splits, hb_items);
        if (w.split < c.splits_of(kl::decode::kv_len(p, w.b))) return u;
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

/* The CTA's shared memory past the tile ring: the ring's barriers, the item slots' barriers, then the
 * merge area: the consumer warps' 8 rows each and their merged rows (finish_cta), which also holds the
 * final merge's weights (8 heads x (splits + 2) floats). */
template <typename T, int HD, int STAGES> struct pipeline_shape {
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    static constexpr int MERGE_FLOATS = (kConsumers + 1) * 8 * S::ROW;
    static constexpr int MERGE_AT = S::RING + 2 * STAGES * 8 + 2 * kSlots * 8; /* from the ring's start */
    static constexpr int SMEM = S::SMEM + 2 * kSlots * 8 + 4 * MERGE_FLOATS;
    static_assert(MERGE_AT % 16 == 0, "the merge area is 16-byte aligned");
    static_assert(8 * (KL_DECODE_MAX_SPLITS + 2) <= MERGE_FLOATS, "the final merge's weights fit the merge area");
};

/* The tensor maps are not read: every tile is gathered by cp.async, as in v26. */
template <typename T, int HD, int STAGES>
__global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v31(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, cut c, int splits)
{
#if KL_SM90A
    constexpr int CW = kConsumers;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    using P = pipeline_shape<T, HD, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw));                     /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    uint64_t *item_full = empty + STAGES, *item_empty = item_full + kSlots;
    float *mrg = reinterpret_cast<float *>(reinterpret_cast<unsigned char *>(ring) + P::MERGE_AT);
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last;        /* this CTA merges the request's partials */
    __shared__ int items[kSlots]; /* the CTA's k-th item in items[k % kSlots], taken by thread 0 */
    auto stamp = [&](kl_decode_event e) { /* the launch's timeline, where the caller asks for one */
        if (p.trace && threadIdx.x == 0 && blockIdx.x < KL_DECODE_TRACE_CTAS)
            p.trace->at[blockIdx.x][e] = kl::ptx::globaltimer();
    };
    stamp(KL_DECODE_START);
    if (threadIdx.x == 0) { /* the item slots: one arrival fills one (thread 0's), every warp's empties it */
        for (int s = 0; s < kSlots; s++)
            kl::ptx::mbar_init(&item_full[s], 1), kl::ptx::mbar_init(&item_empty[s], kThreads / 32);
    }
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32); /* overlaps the previous kernel's tail */
    stamp(KL_DECODE_RELEASED);

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int hb_items = (int)p.num_kv_heads * blocks, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    /* Thread 0: the CTA's k-th item into its slot, once every warp has read the slot's previous item. */
    auto take_into = [&](int k) {
        const int s = k % kSlots;
        kl::ptx::mbar_wait(&item_empty[s], (k / kSlots & 1) ^ 1);
        items[s] = take_item(p, c, splits, hb_items);
        kl::ptx::mbar_arrive(&item_full[s]);
    };
    if (threadIdx.x == 0) take_into(0);
    uint32_t flips = 0; /* stages that have taken an odd number of rounds */
    for (int k = 0;; k++) {
        kl::ptx::mbar_wait(&item_full[k % kSlots], k / kSlots & 1);
        const int u = items[k % kSlots];
        __syncwarp();
        if (lane == 0) kl::ptx::mbar_arrive(&item_empty[k % kSlots]); /* this warp has read it */
        if (u < 0) break;
        const work w = work_at(p, u, splits, hb_items);
        const int g = w.y / blocks, h0 = g * group + w.y % blocks * 8, nh = min(8, g * group + group - h0);
        const int n = kl::decode::kv_len(p, w.b), t0 = c.first(w.split), t1 = min(n, c.first(w.split + 1));
        const int tiles = n > 0 ? (t1 - t0 + 15) / 16 : 0;
        if (warp >= CW) {
            /* groups warp - CW, warp - CW + kGatherers, ... of the chunk, whole (v26's call), then straight
             * on to the next item */
            if (tiles > 0)
                kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true, true, 1, 0, true, 0, kGatherers>(
                    &k_box, &v_box, &k_row, &v_row, false, p, w.b, g, t0, t1, ring_at, full, empty, 0, warp - CW,
                    flips);
        } else {
            /* The next item, taken now: its atomic's round trip overlaps this item's copies. */
            if (threadIdx.x == 0) take_into(k + 1);
            __syncwarp();
            if (tiles == 0) {
                for (int h = 0; h < nh; h++)
                    kl::decode::write_empty<T>(p, w.b, h0 + h, threadIdx.x, 32 * CW);
            } else {
                /* the online softmax: O^T, m, l (bf16_ring_tile.cuh), for heads 2 tq and 2 tq + 1 */
                float o[S::KSTEPS][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
                uint32_t qf[S::KSTEPS][2];
                kl::decode::bf16_ring::q_operand<T, HD>(p, w.b, h0, nh, qf);
                const float scale = p.sm_scale * 1.44269504089f;
                /* Tile i in stage i % STAGES, consumed by warp i % CW, its round's parity flipped by the
                 * stage's past. */
                for (int i = warp; i < tiles; i += CW) {
                    const int st = i % STAGES;
                    kl::ptx::mbar_wait(&full[st], (i / STAGES & 1) ^ (flips >> st & 1));
                    if (k == 0 && i == warp) stamp(KL_DECODE_FIRST_TILE); /* the CTA's first tile */
                    const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
                    kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, t0 + 16 * i, t1, o, m, l);
                    kl::ptx::mbar_arrive(&empty[st]); /* every lane: see v8 */
                }
                stamp(KL_DECODE_LOOP_DONE);
                /* The merge, by the consumer warps alone (finish_cta begins with their barrier); the item
                 * again from its slot, which holds it until thread 0, which is in this merge, takes item
                 * k + kSlots. */
                kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l);
                const work v = work_at(p, items[k % kSlots], splits, hb_items);
                const int vg = v.y / blocks, vh0 = vg * group + v.y % blocks * 8;
                kl::decode::finish_cta<T, HD, CW>(p, mrg, last, v.b, vg, v.y % blocks, vh0,
                                                  min(8, vg * group + group - vh0), v.split,
                                                  c.splits_of(kl::decode::kv_len(p, v.b)), consumer_warps{});
                consumer_warps{}.sync(); /* the merge area is read: the next item's states may go in */
            }
        }
        flips ^= odd_rounds<STAGES>(tiles);
    }
    stamp(KL_DECODE_END);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

/* The CTAs an SM hold (once per instantiation, with its shared memory set past 48 KB), or 0. */
template <typename T, int HD, int STAGES> int ctas_per_sm()
{
    using P = pipeline_shape<T, HD, STAGES>;
    static_assert((HD == 256 ? 1 : kCtasPerSm) * (P::SMEM + 1024) <= 228 * 1024, "the CTAs' rings fit an SM");
    static int per_sm = -1;
    if (per_sm < 0) {
        per_sm = 0;
        if (cudaFuncSetAttribute(decode_v31<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, P::SMEM) !=
                cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_v31<T, HD, STAGES>, kThreads, P::SMEM) !=
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
    using P = pipeline_shape<T, HD, STAGES>;
    static const int items_per_cta = kl_attention_decode_knob("KL_DECODE_V31_ITEMS_PER_CTA", 1, 16, kItemsPerCta);
    static const int min_chunk = kl_attention_decode_knob("KL_DECODE_V31_MIN_CHUNK", 64, 65536, kMinChunk);
    static const int tail = kl_attention_decode_knob("KL_DECODE_V31_TAIL", 0, 4, kTail);
    const int per_sm = ctas_per_sm<T, HD, STAGES>();
    if (per_sm < 1) return cudaErrorNotSupported;
    const int64_t ctas = (int64_t)per_sm * kl_attention_decode_sms(); /* one wave */
    const int64_t hb_items = p->num_kv_heads * ((p->num_qo_heads / p->num_kv_heads + 7) / 8);
    struct kl_decode_split plan = kl_attention_decode_split_waves(p, p->batch * hb_items, items_per_cta * ctas);
    if (plan.chunk < min_chunk && plan.splits > 1) plan = kl_attention_decode_split_waves(p, p->batch * hb_items, ctas);
    /* The first chunk's pieces: none where the plan keeps every request in one chunk (pieces would add a
     * merge through the workspace to every request), else as many as asked for where the smallest keeps
     * kMinPiece keys and the splits fit the merge and the workspace (the workspace's words come after the
     * merge counters, so every plan needs it). */
    auto fits = [&](cut x) {
        const int s = x.splits_of((int)p->max_kv_len);
        return s <= KL_DECODE_MAX_SPLITS && p->workspace_bytes >= kl_attention_decode_workspace_for(p, s);
    };
    cut c = {(int)plan.chunk, plan.splits > 1 ? tail : 0}; /* a request in one chunk merges nothing: no pieces */
    while (c.tail > 0 && (c.chunk >> c.tail < kMinPiece || !fits(c))) c.tail--;
    const int splits = c.splits_of((int)p->max_kv_len);
    if (splits * p->batch * hb_items > INT32_MAX) return cudaErrorNotSupported; /* items are ints */
    if (p->workspace_bytes < kl_attention_decode_workspace_for(p, splits)) {
        fprintf(stderr, "attention_decode v31_shrinking_items: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, splits));
        return cudaErrorInvalidValue;
    }
    cudaLaunchAttribute attr[1]; /* a programmatic dependent launch, as v26's */
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {dim3((unsigned)ctas), dim3(kThreads), (size_t)P::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v31<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p, c, splits);
}

cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v31_shrinking_items");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (p->max_kv_len > INT32_MAX) return cudaErrorNotSupported;                  /* the cut's keys are ints */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v31_shrinking_items", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, maps, stream));
    }
    return cudaErrorNotSupported;
}

} // namespace

KL_VARIANT(attention_decode, v31_shrinking_items, launch, .min_cc = 90,
           .summary = "v30's queue with shrinking items: a request's first chunk is cut in pieces that halve towards "
                      "the split handed out last, so the key loops end closer together");
