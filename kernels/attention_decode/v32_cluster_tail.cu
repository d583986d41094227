/* v32_cluster_tail: v26's gathering warps and ring, with a split request's end made short: its splits
 * meet in thread-block clusters (distributed shared memory, as in v13), and the clusters' partials are
 * merged with one batch of loads.
 *
 * What changed from v26, and why: the launch timelines of v20 and v21 (v26's key loop is theirs, with
 * more gatherers) put most of what separates b1-kv32k-p16 and b8-kv512-p16 from their read time after
 * the last key loop: every split files its partial (stores, a fence, an atomic round trip), and the last
 * one reads the partials back in a chain of L2 round trips, the maxima first, then the sums, then the
 * rows, eight splits at a time. Here the CTAs of up to eight consecutive splits of one (request, kv head)
 * form a cluster, launched along z. After the key loop each CTA merges its warps' states in its own
 * shared memory, a cluster barrier makes the merged rows visible to the cluster, and CTA `rank` merges
 * its share of the heads' dims from every CTA of the cluster (ld.shared::cluster): into the output where
 * the request's splits fit one cluster (b8-kv512-p16: no workspace, fence or counter at all), else into
 * the cluster's partial, after which each CTA counts itself as v13's do and the last one merges the
 * clusters' partials. Both merges are merge_states below: a thread takes four adjacent dims and loads
 * the max, the sum and the four dims of up to kBatch states at once, so up to eight clusters' partials
 * cost one round trip, where v19's merge of 64 splits takes about ten (the maxima,
 * the sums, then eight batches of rows). A CTA whose chunk lies past its request's keys (the grid is
 * padded to whole clusters) attends nothing, weighs 0 and still meets its cluster at both barriers.
 * v26's one-wave split, unless its clusters would not all run at once (cudaOccupancyMaxActiveClusters);
 * then longer chunks, or smaller clusters (cluster_plan). It records its launch's timeline as v20 does.
 * Why faster (the prediction): on b1-kv32k-p16 and b8-kv512-p16 the time after the last key loop falls
 * to a cluster barrier and a merge (b8), or that plus one fence, one atomic and one round trip of loads
 * (b1); b32-kv4k-p1 (two splits) loses its merge through the workspace; the batches that fill the SMs
 * without splitting run as v26.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v32_cluster_tail --workload b8-kv512-p16 */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

constexpr int kConsumers = 3;  /* consumer warps a CTA: warps 0 .. 2 */
constexpr int kGatherers = 3;  /* producer warps a CTA: warps 3 .. 5, taking turns by group (v26) */
constexpr int kCtasPerSm = 4;  /* what the ring's size allows at head_dim 64 and 128, and what the split plans for */
constexpr int kThreads = 32 * (kConsumers + kGatherers);
constexpr int kMaxCluster = 8; /* the portable cluster size */

#if KL_SM90A
constexpr int kBatch = 8; /* states whose loads a thread issues together in merge_states */

/* Four adjacent dims of one output row merged from `count` states: load(j, m, l, a) gives state j's
 * running max m (log2 units, -inf for a state with no keys), its sum l and its unnormalised acc at the
 * four dims. Every state is put on the common max M: acc = sum a_j 2^(m_j - M), L = sum l_j 2^(m_j - M). */
struct merged {
    float m, l, a[4];
};
template <typename Load> __device__ __forceinline__ merged merge_states(int count, Load load)
{
    merged r{-INFINITY, 0.f, {0.f, 0.f, 0.f, 0.f}};
    for (int j0 = 0; j0 < count; j0 += kBatch) {
        float m[kBatch], l[kBatch], a[kBatch][4];
#pragma unroll
        for (int j = 0; j < kBatch; j++) {
            m[j] = -INFINITY, l[j] = a[j][0] = a[j][1] = a[j][2] = a[j][3] = 0.f;
            if (j0 + j < count) load(j0 + j, m[j], l[j], a[j]);
        }
        float mx = r.m;
#pragma unroll
        for (int j = 0; j < kBatch; j++) mx = fmaxf(mx, m[j]);
        const float base = mx == -INFINITY ? 0.f : mx, keep = exp2f(r.m - base); /* exp2(-inf) = 0 */
        r.l *= keep, r.a[0] *= keep, r.a[1] *= keep, r.a[2] *= keep, r.a[3] *= keep;
#pragma unroll
        for (int j = 0; j < kBatch; j++) {
            const float w = exp2f(m[j] - base);
            r.l += l[j] * w;
#pragma unroll
            for (int e = 0; e < 4; e++) r.a[e] += a[j][e] * w;
        }
        r.m = mx;
    }
    return r;
}

/* Writes a merged quad of dims d .. d + 3: the output (and lse, at dim 0) of (request b, qo head h)
 * where `whole`, else the unnormalised dims (and m, l at dim 0) into partial row `k` of that head. */
template <typename T, int HD>
__device__ __forceinline__ void store_quad(const kl_attention_decode_params &p, const merged &r, int b, int h, int d,
                                           bool whole, int k)
{
    if (whole) {
        const int64_t row = (int64_t)b * p.num_qo_heads + h;
        T *out = static_cast<T *>(p.out) + row * HD + d;
#pragma unroll
        for (int e = 0; e < 4; e++) out[e] = kl::from_f32<T>(r.a[e] / r.l);
        if (d == 0) p.lse[row] = (r.m + log2f(r.l)) * 0.69314718056f;
    } else {
        float *part = kl::decode::partial(p, k, b, h);
#pragma unroll
        for (int e = 0; e < 4; e++) part[d + e] = r.a[e];
        if (d == 0) part[HD] = r.m, part[HD + 1] = r.l;
    }
}
#endif

/* k_box / v_box, k_row / v_row: the cache's tensor maps, not read (every tile is gathered by cp.async,
 * as in v26). The grid's z is the splits padded to whole clusters of `cluster` CTAs along z. Head_dim
 * 256 holds O and Q in more registers than four CTAs an SM leave a thread, so its launch bounds ask for
 * one. */
template <typename T, int HD, int STAGES>
static __global__ void __launch_bounds__(kThreads, HD == 256 ? 1 : kCtasPerSm)
    decode_v32(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int chunk, int cluster)
{
#if KL_SM90A
    constexpr int CW = kConsumers;
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw));                     /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last; /* this CTA merges the clusters' partials */
    /* The launch's timeline, where the caller asks for one (params.trace): thread 0 of each CTA stamps. */
    const unsigned cta = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    auto stamp = [&](kl_decode_event e) {
        if (p.trace && threadIdx.x == 0 && cta < KL_DECODE_TRACE_CTAS) p.trace->at[cta][e] = kl::ptx::globaltimer();
    };
    stamp(KL_DECODE_START);
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 32, 32); /* overlaps the previous kernel's tail */
    stamp(KL_DECODE_RELEASED);

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * 8;
    const int nh = min(8, g * group + group - h0), n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk, k = split / cluster, clusters = (splits + cluster - 1) / cluster;
    /* Both returns are taken by every CTA of a cluster (one request, one head block) or by none, so no
     * CTA waits at a cluster barrier for one that left. */
    if (n == 0) {
        if (split == 0)
            for (int h = 0; h < nh; h++) kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    if (k >= clusters) return;
    const int t0 = min(n, split * chunk), t1 = min(n, t0 + chunk), tiles = (t1 - t0 + 15) / 16;
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
            if (i == 0) stamp(KL_DECODE_FIRST_TILE);
            const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
            kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, t0 + 16 * i, t1, o, m, l);
            kl::ptx::mbar_arrive(&empty[st]); /* every lane: see v8 */
        }
    }
    __syncthreads(); /* no copy in flight: the ring becomes the merge area */
    if (tiles > 0) stamp(KL_DECODE_LOOP_DONE);

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < CW) kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l);
    kl::decode::merge_warp_states<HD, CW, 1>(mrg, 0, nh);
    const uint32_t res_at = kl::ptx::smem_addr(mrg + CW * 8 * S::ROW); /* this CTA's merged row a head */

    /* The cluster's merge: CTA `rank` takes quads [rank * per, rank * per + per) of the nh x HD / 4 and
     * reads them from every CTA of the cluster (rank 0's chunk holds keys, so every merged max is finite). */
    kl::ptx::cluster_sync(); /* every CTA's merged rows are written */
    const bool whole = clusters == 1;
    const int quads = nh * HD / 4, per = (quads + cluster - 1) / cluster, rank = (int)kl::ptx::cluster_rank();
    for (int i = rank * per + (int)threadIdx.x; i < min(quads, rank * per + per); i += kThreads) {
        const int h = i / (HD / 4), d = 4 * (i % (HD / 4));
        const uint32_t row = res_at + (uint32_t)(h * S::ROW) * 4;
        const merged r = merge_states(cluster, [&](int j, float &mj, float &lj, float (&a)[4]) {
            mj = kl::ptx::ld_cluster_f32(row + HD * 4, j), lj = kl::ptx::ld_cluster_f32(row + (HD + 1) * 4, j);
#pragma unroll
            for (int e = 0; e < 4; e++) a[e] = kl::ptx::ld_cluster_f32(row + (d + e) * 4, j);
        });
        store_quad<T, HD>(p, r, b, h0 + h, d, whole, k);
    }
    kl::ptx::cluster_sync(); /* every CTA has read the others' rows, and written its share */
    if (whole) {
        if (tiles > 0) stamp(KL_DECODE_END);
        return;
    }

    /* The clusters meet: each CTA counts itself once its cluster's partial is written (the barrier above
     * orders every CTA's stores of it before this thread's fence), and the CTA that brings the count to
     * every CTA of every cluster merges the clusters' partials. */
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned *counter = kl::decode::counter_of(p, b, g, blockIdx.y % blocks);
        last = atomicAdd(counter, 1u) == (unsigned)(clusters * cluster) - 1;
        if (last) *counter = 0; /* every other CTA of this request has counted: reset for the next launch */
    }
    __syncthreads();
    if (!last) {
        if (tiles > 0) stamp(KL_DECODE_END);
        return;
    }
    __threadfence();
    const int64_t step = kl::decode::partial_split_stride(p); /* from cluster j's partial row to j + 1's */
    for (int i = threadIdx.x; i < quads; i += kThreads) {
        const int h = i / (HD / 4), d = 4 * (i % (HD / 4));
        const float *first = kl::decode::partial(p, 0, b, h0 + h);
        const merged r = merge_states(clusters, [&](int j, float &mj, float &lj, float (&a)[4]) {
            const float *row = first + j * step; /* HD + 2 floats: 8-byte aligned */
            const float2 lo = __ldcg(reinterpret_cast<const float2 *>(row + d));
            const float2 hi = __ldcg(reinterpret_cast<const float2 *>(row + d + 2));
            mj = __ldcg(row + HD), lj = __ldcg(row + HD + 1), a[0] = lo.x, a[1] = lo.y, a[2] = hi.x, a[3] = hi.y;
        });
        store_quad<T, HD>(p, r, b, h0 + h, d, true, 0);
    }
    if (tiles > 0) stamp(KL_DECODE_END);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

/* v26's whole-wave split, in clusters of up to 8 splits, made to fit one wave of clusters: a cluster waits
 * until all of its CTAs fit together, so whole clusters can need a second wave where loose CTAs did not.
 * Where they would, longer chunks (whole tiles: the gathering warps copy any run of 16 tokens), first in as
 * many clusters a (request, head block) as one wave holds, else in one smaller cluster each. A batch of
 * more pairs than one wave holds at all runs unsplit, one CTA a cluster, as v26's does.
 * KL_DECODE_V32_CLUSTER=c (1 to 8) caps the cluster at c CTAs, and KL_DECODE_V32_SPLITS=s (1 to
 * KL_DECODE_MAX_SPLITS) asks for s splits a request in place of the whole-wave split: knobs to measure
 * the plan by (exercise 11). */
template <typename T, int HD, int STAGES>
static struct kl_decode_split cluster_plan(const struct kl_attention_decode_params *p, int64_t pairs, int *cluster)
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    static const int most = kl_attention_decode_knob("KL_DECODE_V32_CLUSTER", 1, kMaxCluster, kMaxCluster);
    static const int asked = kl_attention_decode_knob("KL_DECODE_V32_SPLITS", 1, KL_DECODE_MAX_SPLITS, 0);
    struct kl_decode_split plan =
        kl_attention_decode_split_waves(p, pairs, kCtasPerSm * (int64_t)kl_attention_decode_sms());
    const int64_t n = p->max_kv_len;
    auto split_into = [&](int64_t pieces) {
        plan.chunk = ((n + pieces - 1) / pieces + 15) / 16 * 16;
        plan.splits = n > 0 ? (int)((n + plan.chunk - 1) / plan.chunk) : 1;
    };
    if (asked) split_into(asked);
    for (int c = plan.splits < most ? plan.splits : most;; c--) {
        const int64_t fit = kl::decode::max_active_clusters<decode_v32<T, HD, STAGES>, kThreads, S::SMEM>(c);
        const int64_t per_pair = fit / pairs;
        if (pairs * ((plan.splits + c - 1) / c) <= fit || c == 1) {
            *cluster = plan.splits < c ? plan.splits : c;
            return plan;
        }
        if (per_pair >= 1) { /* per_pair clusters of c a pair: at most c x per_pair splits */
            split_into(per_pair * c);
            *cluster = plan.splits < c ? plan.splits : c;
            return plan;
        }
        split_into(c - 1); /* one cluster of c - 1 a pair, tried next */
    }
}

template <typename T, int HD, int STAGES>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, const kl::decode::page_maps &m,
                                cudaStream_t stream)
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, kConsumers, STAGES>;
    static_assert((HD == 256 ? 1 : kCtasPerSm) * (S::SMEM + 1024) <= 228 * 1024, "the CTAs' rings fit an SM");
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v32<T, HD, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t blocks = (p->num_qo_heads / p->num_kv_heads + 7) / 8, pairs = p->batch * p->num_kv_heads * blocks;
    int cluster = 1;
    const struct kl_decode_split plan = cluster_plan<T, HD, STAGES>(p, pairs, &cluster);
    const int clusters = (plan.splits + cluster - 1) / cluster; /* the workspace holds one partial per cluster */
    if (clusters > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, clusters)) {
        fprintf(stderr, "attention_decode v32_cluster_tail: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, clusters));
        return cudaErrorInvalidValue;
    }
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)(clusters * cluster));
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = (unsigned)cluster;
    cudaLaunchConfig_t cfg = {grid, dim3(kThreads), (size_t)S::SMEM, stream, attr, 2};
    return cudaLaunchKernelEx(&cfg, decode_v32<T, HD, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p,
                              (int)plan.chunk, cluster);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v32_cluster_tail");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* slots are 32-bit coordinates */
    if (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) return cudaErrorNotSupported; /* a tensor map's base */
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v32_cluster_tail", &maps);
    if (rc != cudaSuccess) return rc;
    /* v26's ring: six stages of 16 tokens, two a gathering warp, at every head_dim */
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_shape<__nv_bfloat16, HD, 2 * kGatherers>(p, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_shape<__half, HD, 2 * kGatherers>(p, maps, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v32_cluster_tail, launch, .min_cc = 90,
           .summary = "v26's gathering warps with a split request's splits merged in a thread-block cluster "
                      "(ld.shared::cluster), and the clusters' partials merged with one batch of loads");
