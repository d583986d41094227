/* v23_cluster_prefetch: v22's CTA (three consumer warps, one lean gatherer, L2 prefetch past a six-stage
 * ring, four CTAs an SM) with v13's merge: the splits of a request meet in a thread-block cluster.
 *
 * What changed from v22, and why: v22 streams with v19's key loop, and the split requests (b1-kv32k-p16,
 * b8-kv512-p16) end with v19's merge, where the last CTA of a (request, kv head) reads every split's
 * partial from the workspace after a fence and an atomic. On both devices v13 is the fastest rung on
 * those two workloads: the CTAs of up to 8 consecutive splits form a cluster, merge in each other's shared
 * memory right after their key loops (ld.shared::cluster, each CTA a slice of the heads' dims), and only
 * the cluster partials go through the workspace; b8-kv512-p16's requests fit one cluster and never touch
 * it. But v13 streams with v8's CTA (five warps, an eight-stage ring, three CTAs an SM), behind v19's on
 * the large batches. Here v13's merge (its merge_cluster, and the same count of every CTA of every
 * cluster, the last merging the clusters' partials) follows v22's key loop. The split is v19's whole-wave
 * plan for four CTAs an SM, in clusters of consecutive splits along the grid's z (padded to whole
 * clusters: a CTA past its request's keys attends nothing and weighs 0), the largest, up to 8 splits,
 * with which every cluster runs at once (cudaOccupancyMaxActiveClusters: a cluster waits for room for
 * all its CTAs), so the grid stays one wave where v13 lengthens its chunks instead.
 * Why faster (the prediction): on b1-kv32k-p16 and b8-kv512-p16, v13's merge at the end of a key loop as
 * fast as v22's, so v13's time less the difference of their loops; on the unsplit batches v22's time, the
 * two cluster barriers aside (where a request is one split, the cluster is one CTA).
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v23_cluster_prefetch --workload b1-kv32k-p16 */
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
constexpr int kPrefetchTiles = 6; /* how far past the tile it copies the producer prefetches (v22's) */

constexpr int MAX_CLUSTER = 8; /* the portable cluster size */

#if KL_SM90A
/* v13's cluster merge of nh heads, every thread of every CTA of the cluster calling it with the same
 * arguments: res (in this CTA's shared memory, at the same offset in every CTA) holds this CTA's
 * merged row per head (acc[HD], m, l). CTA `rank` takes dims [rank * per, rank * per + per) of the
 * nh * HD and writes them (and, for dim 0 of a head, its lse or its m and l) to out where `whole`,
 * else to the partial of cluster `k`. */
template <typename T, int HD>
__device__ __forceinline__ void merge_cluster(const kl_attention_decode_params &p, const float *res, int b, int h0,
                                              int nh, int cluster, bool whole, int k)
{
    constexpr int ROW = HD + 2;
    const uint32_t res_at = kl::ptx::smem_addr(res), rank = kl::ptx::cluster_rank();
    const int items = nh * HD, per = (items + cluster - 1) / cluster, end = min(items, (int)rank * per + per);
    for (int i = (int)rank * per + threadIdx.x; i < end; i += blockDim.x) {
        const int h = i / HD, d = i % HD;
        float m[MAX_CLUSTER], l[MAX_CLUSTER], a[MAX_CLUSTER], mx = -INFINITY;
#pragma unroll
        for (int r = 0; r < MAX_CLUSTER; r++) {
            if (r >= cluster) break;
            const uint32_t row = res_at + (uint32_t)(h * ROW) * 4;
            m[r] = kl::ptx::ld_cluster_f32(row + HD * 4, r);
            l[r] = kl::ptx::ld_cluster_f32(row + (HD + 1) * 4, r);
            a[r] = kl::ptx::ld_cluster_f32(row + d * 4, r);
        }
#pragma unroll
        for (int r = 0; r < MAX_CLUSTER; r++)
            if (r < cluster) mx = fmaxf(mx, m[r]);
        float sum = 0, acc = 0; /* rank 0's chunk holds keys, so mx is finite */
#pragma unroll
        for (int r = 0; r < MAX_CLUSTER; r++) {
            if (r >= cluster) break;
            const float w = m[r] == -INFINITY ? 0.f : exp2f(m[r] - mx);
            sum += l[r] * w, acc += a[r] * w;
        }
        if (whole) {
            const int64_t row = (int64_t)b * p.num_qo_heads + h0 + h;
            static_cast<T *>(p.out)[row * HD + d] = kl::from_f32<T>(acc / sum);
            if (d == 0) p.lse[row] = (mx + log2f(sum)) * 0.69314718056f;
        } else {
            float *part = kl::decode::partial(p, k, b, h0 + h);
            part[d] = acc;
            if (d == 0) part[HD] = mx, part[HD + 1] = sum;
        }
    }
}
#endif

/* k_box / v_box: boxes of 64 columns x 1 head x 16 slots (zeros, and boxes 0, where the page size is
 * not a multiple of 16); k_row / v_row are not read (the gathers are cp.async). The grid's z is the
 * splits padded to whole clusters of `cluster` CTAs along z. */
template <typename T, int HD, int STAGES>
static __global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v23(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk, int boxes, int cluster)
{
#if KL_SM90A
    constexpr int CW = kConsumers;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw)); /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last; /* this CTA merges the clusters' partials */
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32 * kGatherers, 32); /* overlaps the previous kernel's tail */

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * 8;
    const int nh = min(8, g * group + group - h0), n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk, k = split / cluster, clusters = (splits + cluster - 1) / cluster;
    /* Both returns are taken by every CTA of a cluster (one request, one head block) or by none, so
     * no CTA waits at a cluster barrier for one that left. */
    if (n == 0) {
        if (split == 0)
            for (int h = 0; h < nh; h++) kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    if (k >= clusters) return;
    const int t0 = min(n, split * chunk), t1 = min(n, t0 + chunk), tiles = (t1 - t0 + 15) / 16;
    const int warp = threadIdx.x / 32;

    float o[S::KSTEPS][4] = {}; /* the online softmax: O^T, m, l (bf16_ring_tile.cuh) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */

    if (warp == CW) {
        if (tiles > 0)
            kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64, 1, true, true, kGatherers, 0, true, kPrefetchTiles>(
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
    kl::decode::merge_warp_states<HD, CW, 1>(mrg, 0, nh);
    const float *res = mrg + CW * 8 * S::ROW;

    kl::ptx::cluster_sync(); /* every CTA's res is written */
    const bool whole = clusters == 1;
    merge_cluster<T, HD>(p, res, b, h0, nh, cluster, whole, k);
    kl::ptx::cluster_sync(); /* every CTA has read the others' res: each may leave, or reuse its ring */
    if (whole) return;

    /* The clusters meet as v8's splits do: publish, count (every CTA of every cluster, one count each),
     * and the last merges the clusters' partials. */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = kl::decode::count_last{clusters * cluster}(kl::decode::counter_of(p, b, g, blockIdx.y % blocks));
    __syncthreads();
    if (!last) return;
    __threadfence();
    kl::decode::merge_partials<T>(p, b, h0, nh, clusters, mrg);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

/* v19's whole-wave split for four CTAs an SM, whose CTAs fit the SMs at once, in the largest clusters of up
 * to 8 splits that still all run at once (a cluster waits for room for all its CTAs together, and the
 * splits are padded to whole clusters); clusters of one CTA always do. */
template <typename T, int HD, int STAGES>
static struct kl_decode_split cluster_plan(const struct kl_attention_decode_params *p, int *cluster)
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    const int64_t pairs = p->batch * p->num_kv_heads * ((p->num_qo_heads / p->num_kv_heads + 7) / 8);
    const struct kl_decode_split plan =
        kl_attention_decode_split_waves(p, pairs, kCtasPerSm * (int64_t)kl_attention_decode_sms());
    *cluster = 1;
    for (int c = plan.splits < MAX_CLUSTER ? plan.splits : MAX_CLUSTER; c > 1; c--)
        if (pairs * ((plan.splits + c - 1) / c) <=
            kl::decode::max_active_clusters<decode_v23<T, HD, STAGES>, kThreads, S::SMEM>(c)) {
            *cluster = c;
            break;
        }
    return plan;
}

template <typename T, int HD, int STAGES>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                                cudaStream_t stream)
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    static_assert(kCtasPerSm * (S::SMEM + 1024) <= 228 * 1024, "four CTAs' rings fit an SM");
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v23<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    int cluster = 1;
    const struct kl_decode_split plan = cluster_plan<T, HD, STAGES>(p, &cluster);
    const int clusters = (plan.splits + cluster - 1) / cluster; /* the workspace holds one partial per cluster */
    if (clusters > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, clusters)) {
        fprintf(stderr, "attention_decode v23_cluster_prefetch: workspace of %zu bytes, %zu needed\n",
                p->workspace_bytes, kl_attention_decode_workspace_for(p, clusters));
        return cudaErrorInvalidValue;
    }
    const int64_t blocks = (p->num_qo_heads / p->num_kv_heads + 7) / 8;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)(clusters * cluster));
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = (unsigned)cluster;
    cudaLaunchConfig_t cfg = {grid, dim3(kThreads), (size_t)S::SMEM, stream, attr, 2};
    return cudaLaunchKernelEx(&cfg, decode_v23<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
                              (int)plan.chunk, m.boxes, cluster);
}

/* v19's ring: six stages of 16 tokens (two per consumer warp) at head_dim 64 and 128; head_dim 256
 * tiles are twice as large, so three keep the ring at 48 KB. */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                             cudaStream_t stream)
{
    if constexpr (HD == 256) return launch_shape<T, HD, 3>(p, m, stream);
    else return launch_shape<T, HD, 6>(p, m, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v23_cluster_prefetch");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v23_cluster_prefetch", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v23_cluster_prefetch, launch, .min_cc = 90,
           .summary = "v22's key loop (lean gatherer, L2 prefetch past the ring, four CTAs an SM) with v13's merge: "
                      "a request's splits meet in a thread-block cluster through distributed shared memory, PDL");
