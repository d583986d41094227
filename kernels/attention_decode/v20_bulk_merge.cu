/* v20_bulk_merge: v19 whose last CTA of a split request merges the partials from shared memory, each
 * split's partial rows brought there by one bulk copy.
 *
 * What changed from v19, and why: where a request's keys are split (one long request: b1-kv32k-p16 is
 * cut into 64 chunks a kv head), the CTA that counts last merges every split's partial rows, and until
 * it is done the call is not. In v19 each thread loads its dims of every split's row from L2 into
 * registers, 8 splits before it sums them (decode.cuh's merge_partials): 64 splits are 8 dependent L2
 * round trips for each pair of dims a thread owns, 32 in all for a thread of v19's 128 at head_dim
 * 128, while the rest of the GPU is idle. Loading more splits at once does not help: 32 loads of 8
 * bytes a thread and their 64-bit addresses outgrow the registers a CTA of four an SM may use, and the
 * compiler then issues each load after the previous sum. Here thread 0 copies each split's rows of the
 * block's 8 heads, 4160 contiguous bytes at head_dim 128, into a slot in the CTA's key ring, free once
 * the loop is done: two halves of up to 8 slots (5 at head_dim 128, where a slot is 4160 bytes of the
 * 48 KB ring), the copy engine filling one half while the threads merge the batch of splits in the
 * other (merge_in_shared, below). No register holds a load in flight, but a batch waits for its copies
 * from L2, and there are only two batches in flight.
 * It also records its launch's timeline where params.trace asks for one (attention_decode.h): each
 * CTA's start, release from the PDL wait, first tile, end of the key loop and end, which `kernlab
 * bench` summarizes in a row's timeline.
 * Why faster (the prediction): b1-kv32k-p16's and b8-kv512-p16's tails shrink to about one L2 round
 * trip plus the time to copy the partials; workloads whose requests are one chunk merge nothing and
 * should not move.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v20_bulk_merge --workload b1-kv32k-p16 */
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

/* The final merge, from shared memory. Thread 0 copies each split's rows of the block's nh heads
 * (nh * (HD + 2) floats, contiguous in the workspace) into a slot in the freed key ring, one bulk copy
 * a split, counted on the slot's barrier; the copy engine holds them in flight, no register does. The
 * slots form two halves of `batch` slots: while the block merges the splits in one half, the next
 * batch's copies land in the other. A batch is merged in two steps between block barriers: one
 * thread per (head, split) computes the split's weight 2^(m_s - M) against the running max M of its
 * head, raised to the batch's max (each of the head's threads finds that max itself, from the
 * batch's m_s); then every thread rescales its dims' sums by 2^(M_old - M) and adds the batch's
 * splits, each weighed. The sums run in split order. */
constexpr int kMergeSlots = 16; /* the slots' barriers take the area's first 128 bytes */
constexpr int kMergeHead = 1024; /* bytes before the first slot: barriers, then weights and maxima */

/* The output rows and lse of heads h0 .. h0 + nh - 1 of request b (one query a request) from their
 * `splits` partials, by the whole block (every thread calls it, after file_cta_heads returned true).
 * `area`: `area_bytes` of shared memory, 1024-byte aligned, that no thread reads or writes any more.
 * Where the rows cannot be copied in 16-byte units (an odd head count, or a head count whose dims do
 * not share out evenly over the block's threads), it merges with merge_partials instead. */
template <typename T, int HD>
static __device__ __forceinline__ void merge_in_shared(const kl_attention_decode_params &p, int b, int h0, int nh,
                                                       int splits, unsigned char *area, int area_bytes)
{
    constexpr int ROW = HD + 2, PAIRS = HD / 2; /* a row: acc[HD], m, l; a thread sums pairs of dims */
    constexpr int JMAX = HD / 32;               /* pairs a thread: 8 heads' over 128 threads */
    constexpr int BMAX = kMergeSlots / 2;
    const int threads = (int)blockDim.x;
    const uint32_t bytes = (uint32_t)(nh * ROW * 4); /* one split's rows of the nh heads */
    const char *src = reinterpret_cast<const char *>(kl::decode::partial(p, 0, b, h0));
    const int64_t step = kl::decode::partial_split_stride(p) * 4; /* bytes from one split's rows to the next's */
    const int jn = nh * PAIRS / threads, per_head = jn ? PAIRS / jn : 0;
    const int batch = min(kMergeSlots, (area_bytes - kMergeHead) / (int)bytes) / 2;
    const bool copies = bytes % 16 == 0 && (uintptr_t)src % 16 == 0 && step % 16 == 0 && jn >= 1 && jn <= JMAX &&
                        jn * threads == nh * PAIRS && per_head * jn == PAIRS && batch >= 1 && nh * batch <= threads;
    if (!copies) {
        kl::decode::merge_partials<T>(p, b, h0, nh, splits, reinterpret_cast<float *>(area));
        return;
    }
    uint64_t *full = reinterpret_cast<uint64_t *>(area);            /* a barrier a slot */
    float *weight = reinterpret_cast<float *>(area + 128);          /* [head][BMAX]: split weights of a batch */
    float *big = weight + 8 * BMAX;                                 /* [2][head]: the running max, by batch parity */
    unsigned char *slot0 = area + kMergeHead;
    const int batches = (splits + batch - 1) / batch;
    auto issue = [&](int k) { /* batch k's splits into its half */
        for (int i = 0; i < batch && k * batch + i < splits; i++) {
            const int slot = k % 2 * batch + i;
            kl::ptx::mbar_arrive_expect(&full[slot], bytes);
            kl::ptx::bulk_load(kl::ptx::smem_addr(slot0 + slot * bytes), src + (k * batch + i) * step, bytes,
                               &full[slot]);
        }
    };
    /* The area was last written and read by plain stores and loads: fenced before the copies write it. */
    kl::ptx::fence_async_smem();
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2 * batch; i++) kl::ptx::mbar_init(&full[i], 1);
        kl::ptx::mbar_init_fence();
        kl::ptx::fence_async_global(); /* the other blocks' partial stores, before the copies read them */
        issue(0), issue(1);
    }
    if (threadIdx.x < nh) big[8 + threadIdx.x] = -INFINITY; /* before batch 0, the max of "batch -1" */
    __syncthreads();

    /* Thread t sums head h = t / per_head, pairs q, q + per_head, ... (q = t % per_head): a warp's reads
     * of one pair index are 32 consecutive 8-byte words. In the weight step thread t < nh * batch
     * weighs split t % batch of the batch for head t / batch. */
    const int h = threadIdx.x / per_head, q = threadIdx.x % per_head;
    float acc[JMAX][2] = {}, sum = 0;
    for (int k = 0; k < batches; k++) {
        const int n = min(batch, splits - k * batch), half = k % 2 * batch;
        for (int i = 0; i < n; i++) kl::ptx::mbar_wait(&full[half + i], k / 2 & 1);
        auto row = [&](int i, int head) {
            return reinterpret_cast<const float *>(slot0 + (half + i) * bytes) + head * ROW;
        };
        if (threadIdx.x < nh * batch) {
            const int wh = threadIdx.x / batch, wi = threadIdx.x % batch;
            float m = big[(k + 1) % 2 * 8 + wh];
            for (int i = 0; i < n; i++) m = fmaxf(m, row(i, wh)[HD]);
            if (wi == 0) big[k % 2 * 8 + wh] = m;
            if (wi < n) {
                const float ms = row(wi, wh)[HD];
                weight[wh * BMAX + wi] = ms == -INFINITY ? 0.f : exp2f(ms - m); /* a split with no keys: 0 */
            }
        }
        __syncthreads();
        const float before = big[(k + 1) % 2 * 8 + h], now = big[k % 2 * 8 + h];
        const float rescale = before == -INFINITY ? 0.f : exp2f(before - now);
        sum *= rescale;
#pragma unroll
        for (int j = 0; j < JMAX; j++) acc[j][0] *= rescale, acc[j][1] *= rescale;
        for (int i = 0; i < n; i++) {
            const float w = weight[h * BMAX + i];
            const float *r = row(i, h);
            sum += r[HD + 1] * w;
#pragma unroll
            for (int j = 0; j < JMAX; j++)
                if (j < jn) {
                    const float2 v = *reinterpret_cast<const float2 *>(r + 2 * (q + j * per_head));
                    acc[j][0] += v.x * w, acc[j][1] += v.y * w;
                }
        }
        __syncthreads(); /* every thread is done with this half and this batch's weights */
        if (threadIdx.x == 0 && k + 2 < batches) issue(k + 2);
    }
    const float m = big[(batches - 1) % 2 * 8 + h];
    const int64_t at = (int64_t)b * p.num_qo_heads + h0 + h;
    T *out = static_cast<T *>(p.out) + at * HD;
#pragma unroll
    for (int j = 0; j < JMAX; j++)
        if (j < jn) {
            const int d = 2 * (q + j * per_head);
            out[d] = kl::from_f32<T>(acc[j][0] / sum), out[d + 1] = kl::from_f32<T>(acc[j][1] / sum);
        }
    if (q == 0) p.lse[at] = (m + log2f(sum)) * 0.69314718056f;
}

/* k_box / v_box: boxes of 64 columns x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row are not read (the gathers are cp.async). Every full barrier
 * counts the gatherer's 32 lanes. Head_dim 256 holds O and Q in more registers than four CTAs an SM
 * leave a thread, so its launch bounds ask for one. */
template <typename T, int HD, int STAGES>
static __global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v20(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
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
    if (kl::decode::file_cta_heads<T, HD, CW, 1>(p, mrg, 0, last, b, g, blockIdx.y % blocks, h0, nh, split, splits,
                                                 kl::decode::count_last{splits}))
        merge_in_shared<T, HD>(p, b, h0, nh, splits, reinterpret_cast<unsigned char *>(ring), S::RING);
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
            cudaFuncSetAttribute(decode_v20<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
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
    return cudaLaunchKernelEx(&cfg, decode_v20<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
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
    cudaError_t rc = kl_attention_decode_check_params(p, "v20_bulk_merge");
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
        fprintf(stderr, "attention_decode v20_bulk_merge: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v20_bulk_merge", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v20_bulk_merge, launch, .min_cc = 90,
           .summary = "v19 whose last CTA of a split request merges the partials from shared memory, each split's "
                      "rows of its heads brought by one bulk copy into a ring of slots: no chain of L2 round trips");
