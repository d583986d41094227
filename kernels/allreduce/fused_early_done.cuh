/* The fused all-reduce + residual add + RMSNorm of v18_lamport_add_rmsnorm_early_done, its kernel and
 * launcher, for the rungs that change only how a block adds up its row's sum of squares. A rung
 * passes ROW_SUM, a struct whose `static __device__ float sum(float v, int parity)` returns the block's
 * sum of v: the same bits in every thread and on every rank, behind at least one block barrier, with
 * whatever shared memory it needs indexed by parity (callers alternate it by row, so a block's next
 * row never overwrites what a slow warp has yet to read). The rest of the call is v18's, told in its
 * opening comment (kernels/allreduce/v18_lamport_add_rmsnorm_early_done.cu). */
#pragma once

#include "kernels/allreduce/fused_rows.cuh"
#include "kernels/variant.h"

namespace kl_ar
{

constexpr int kEarlyDoneMaxSlices = 8;    /* blocks a row may span (a portable cluster) */
constexpr int kEarlyDoneMinThreads = 128; /* the fewest threads a block gets while a row has blocks to spare */

/* The 16 floats at p (shared memory, 16-byte aligned, the same address in every thread: four broadcast
 * float4 loads) added in a fixed tree: the same bits in every thread. For ROW_SUMs that end with the
 * warps' parts in shared memory (v20, v21). */
__device__ __forceinline__ float sum16_in_tree(const float *p)
{
    float q[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float4 w = reinterpret_cast<const float4 *>(p)[k];
        q[k] = (w.x + w.y) + (w.z + w.w);
    }
    return (q[0] + q[1]) + (q[2] + q[3]);
}

template <typename T, bool ALIGNED, int K, class ROW_SUM>
static __global__ void __launch_bounds__(kThreads)
    fused_early_done(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens,
                     int64_t hidden, float eps, peers P, lamport_bufs L, char *own)
{
#if KL_SM90A
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    __shared__ float slice_sums[2][kEarlyDoneMaxSlices];
    __shared__ __align__(8) uint64_t sums_in[2]; /* by row parity: all K slices' sums have landed */
    if constexpr (K > 1) {
        if (threadIdx.x == 0) { /* one arrival a phase, which comes with the bytes it awaits */
            kl::ptx::mbar_init(&sums_in[0], 1), kl::ptx::mbar_init(&sums_in[1], 1);
            kl::ptx::mbar_init_fence();
            kl::ptx::mbar_arrive_expect(&sums_in[0], 4 * K), kl::ptx::mbar_arrive_expect(&sums_in[1], 4 * K);
        }
        kl::ptx::cluster_arrive_release(); /* waited for before the first st.async */
    }
    const int slice = K > 1 ? (int)kl::ptx::cluster_rank() : 0;
    const int64_t row_units = hidden / V, first = blockIdx.x / K, step = gridDim.x / K;
    const int64_t u = (int64_t)slice * blockDim.x + threadIdx.x; /* this thread's unit of every row */
    const bool mine = u < row_units;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    const uint4 wt = mine ? chunk_bits(weight + u * V, V, ALIGNED) : zero; /* no kernel writes it */
    kl::pdl_wait(); /* the previous kernel has ended: x, residual, the epoch and the bookkeeping are final */
    stamp(P, KL_AR_T_RELEASED);
    /* This block's first row, asked for before the call number (it does not depend on it). */
    int64_t j = first * row_units + u; /* the unit of the row in the flat [tokens, hidden] buffer */
    uint4 xb = mine ? chunk_bits(x + j * V, V, ALIGNED) : zero;
    uint4 res = mine ? chunk_bits(residual + j * V, V, ALIGNED) : zero;
    const uint32_t e = begin_call_unfenced(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our rows into our slot of this call's set in every peer's buffer. */
    if (mine)
        for (int64_t t = first; t < tokens; t += step) {
            const int64_t jt = t * row_units + u;
            send_to_peers<uint4>(L, P, set, jt, unit_sendable<T>(t == first ? xb : chunk_bits(x + jt * V, V, ALIGNED)));
        }
    stamp(P, KL_AR_T_COPIED);
    count_call_done(P, e); /* this block has read the call number: count it done now, not at the end */

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_own_set(own, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);
    if constexpr (K > 1) kl::ptx::cluster_wait(); /* every block of the cluster has started, its mbarriers set */

    /* Receive, add, normalize, a row at a time. Every thread runs every row (the barriers need them
     * all); a thread past the row's end adds nothing. */
    int parity = 0;
    for (int64_t t = first; t < tokens; t += step, parity ^= 1) {
        float r[V], sum_sq = 0.f;
        if (mine) {
            if (t != first) {
                j = t * row_units + u;
                xb = chunk_bits(x + j * V, V, ALIGNED), res = chunk_bits(residual + j * V, V, ALIGNED);
            }
            uint4 w[KL_AR_MAX_RANKS];
#pragma unroll
            for (int s = 0; s < KL_AR_MAX_RANKS; s++)
                if (s < P.world && s != P.rank) w[s] = ld_volatile_v4(own_slot<uint4>(own, P, set, s) + j);
            float acc[V];
#pragma unroll
            for (int s = 0; s < KL_AR_MAX_RANKS; s++) { /* in rank order, from rank 0's value */
                if (s >= P.world) break;
                if (s != P.rank && unit_empty<T>(w[s]))
                    w[s] = wait_unit<T>(P, own_slot<uint4>(own, P, set, s) + j, e, s);
                const uint4 v = s == P.rank ? unit_sendable<T>(xb) : w[s];
#pragma unroll
                for (int k = 0; k < V; k++)
                    acc[k] = s == 0 ? kl::elem_f32<T>(v, k) : acc[k] + kl::elem_f32<T>(v, k);
            }
#pragma unroll
            for (int k = 0; k < V; k++) {
                r[k] = acc[k] + kl::elem_f32<T>(res, k);
                sum_sq += r[k] * r[k];
            }
            store_chunk<T>(residual_out + j * V, r, V, ALIGNED);
        }
        float total = ROW_SUM::sum(sum_sq, parity);
        if constexpr (K > 1) { /* this slice's sum into every block of the cluster, then theirs, in slice order */
            if (threadIdx.x < K)
                kl::ptx::st_async_f32(&slice_sums[parity][slice], &sums_in[parity], threadIdx.x, total);
            const int nth_use = (int)((t - first) / step) >> 1; /* of this parity's mbarrier */
            kl::ptx::mbar_wait_cluster(&sums_in[parity], nth_use & 1);
            total = 0.f;
#pragma unroll
            for (int k = 0; k < K; k++)
                total += slice_sums[parity][k];
            if (threadIdx.x == 0) kl::ptx::mbar_arrive_expect(&sums_in[parity], 4 * K); /* armed for row t + 2 step */
        }
        const float inv_rms = rsqrtf(total / (float)hidden + eps);
        if (mine) store_normed<T>(out + j * V, r, inv_rms, wt, V, ALIGNED);
    }
    stamp(P, KL_AR_T_REDUCED);
    stamp_exit(P);
#endif
}

template <class ROW_SUM, typename T, bool ALIGNED, int K>
inline cudaError_t launch_early_done_k(const struct kl_allreduce_add_rmsnorm_params *p, unsigned threads,
                                       cudaStream_t stream, const char *variant)
{
    /* one block a row (K = 1) is no cluster: no device limit to ask */
    const int64_t most = K > 1 ? max_clusters<fused_early_done<T, ALIGNED, K, ROW_SUM>, K>(threads) : INT64_MAX;
    const int64_t clusters = fused_clusters(p, K, threads, most, variant);
    if (clusters == 0) return cudaErrorInvalidConfiguration;
    cudaLaunchAttribute attr[2] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = K, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {dim3((unsigned)(clusters * K)), dim3(threads), 0, stream, attr, K > 1 ? 2u : 1u};
    return cudaLaunchKernelEx(&cfg, fused_early_done<T, ALIGNED, K, ROW_SUM>, (const T *)p->ar.x,
                              (const T *)p->residual, (const T *)p->weight, (T *)p->ar.out, (T *)p->residual_out,
                              p->num_tokens, p->hidden, p->eps, make_peers(&p->ar), make_lamport(&p->ar),
                              (char *)p->ar.comm->lamport[p->ar.comm->rank]);
}

template <class ROW_SUM, typename T, bool ALIGNED>
inline cudaError_t launch_early_done_t(const struct kl_allreduce_add_rmsnorm_params *p, int K, unsigned threads,
                                       cudaStream_t stream, const char *variant)
{
    return K == 1   ? launch_early_done_k<ROW_SUM, T, ALIGNED, 1>(p, threads, stream, variant)
           : K == 2 ? launch_early_done_k<ROW_SUM, T, ALIGNED, 2>(p, threads, stream, variant)
           : K == 4 ? launch_early_done_k<ROW_SUM, T, ALIGNED, 4>(p, threads, stream, variant)
                    : launch_early_done_k<ROW_SUM, T, ALIGNED, 8>(p, threads, stream, variant);
}

template <class ROW_SUM>
inline cudaError_t launch_early_done(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream,
                                     const char *variant)
{
    /* The checks, the grid, sh.C (the fewest blocks of kThreads threads that cover a row, up to
     * kEarlyDoneMaxSlices; wider is an error) and the alignment. */
    fused_shape sh;
    cudaError_t rc = fused_launch_shape(p, stream, kThreads, kEarlyDoneMaxSlices, variant, &sh);
    if (rc != cudaSuccess || sh.grid == 0) return rc;
    const int64_t V = 16 / (int64_t)kl_dtype_size(p->ar.dtype), units = p->hidden / V;
    if (p->hidden % V != 0) {
        /* Not this variant's rows: v15 runs the call (found by name, so this file stays one file). */
        const auto v15 =
            (kl_allreduce_ops_fn)kl_variant_launcher("allreduce", "v15_lamport_add_rmsnorm_in_registers", variant);
        return v15 ? v15()->add_rmsnorm(p, stream) : cudaErrorInvalidValue;
    }
    /* K blocks a row: 1 when the row fits one block; else as many as keep a block at kEarlyDoneMinThreads or
     * more, then fewer while the tokens' clusters would take more blocks than the communicator has
     * (an SM each), never below sh.C. */
    int K = sh.C == 1 ? 1 : kEarlyDoneMaxSlices;
    while (K > sh.C && units / K < kEarlyDoneMinThreads)
        K /= 2;
    while (K > sh.C && p->num_tokens * K > p->ar.comm->blocks)
        K /= 2;
    const unsigned threads = (unsigned)(((units + K - 1) / K + 31) / 32 * 32);
    KL_DISPATCH_FLOAT(p->ar.dtype, T, {
        rc = sh.aligned ? launch_early_done_t<ROW_SUM, T, true>(p, K, threads, stream, variant)
                        : launch_early_done_t<ROW_SUM, T, false>(p, K, threads, stream, variant);
    });
    return rc;
}

} // namespace kl_ar
