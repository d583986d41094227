/* v15_lamport_add_rmsnorm_in_registers: v13 with every address it uses computed in registers, as v14
 * does for v11.
 *
 * What changed from v13, and why. v13 sends, polls and empties through fused_rows.cuh's send_chunk and
 * gather_chunk and lamport.cuh's empty_set, which find buffers as L.base[s] and L.base[P.rank]: run-time
 * indices into lamport_bufs, an array the kernel receives by value, so every thread keeps a copy of it
 * (and of the arrays it fills from it) in its local memory, stored when it starts and read back on the
 * critical path (ptxas reports the copies as a stack frame). Here the launcher passes this rank's own
 * buffer as one pointer and the peers' are reached through constant indices in loops unrolled over the
 * most ranks (send_chunk_to_peers, gather_add_own_chunk, empty_own_set), so no thread has a stack frame
 * (lab/allreduce/stack_frames.sh checks it). The row mapping, the cluster, the sums and their order,
 * v11's unfenced call and the protocol are v13's.
 * Grid: v13's. Precision and bound: v13's (the same sums in the same order).
 * Expect: v13 less the local-memory trips, as v14 is v11 less them.
 * Run alone: build/kernlab bench allreduce --variant v15_lamport_add_rmsnorm_in_registers */
#include <cooperative_groups.h>

#include "kernels/allreduce/fused_rows.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

constexpr int kRowThreads = 512; /* the most threads a block gives its slice of a row: one unit each */
constexpr int kMaxBlocks = 8;    /* blocks a row may span (a portable cluster): hidden up to 4096 units */
constexpr int kMinThreads = 128; /* the fewest threads a block gets while a row has blocks to spare */

/* The weight's chunk q of row t (the weight is one row, shared by every token). */
template <typename T>
__device__ __forceinline__ uint4 weight_chunk(const T *weight, int64_t t, int64_t hidden, const chunk &q, bool aligned)
{
    constexpr int V = 16 / sizeof(T);
    return q.m ? chunk_bits(weight + (q.i0 - t * hidden), q.m, q.m == V && aligned) : make_uint4(0, 0, 0, 0);
}

template <typename T, int K>
static __global__ void __launch_bounds__(kRowThreads, 1)
    fused_v15(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens, int64_t hidden,
              float eps, bool aligned, peers P, lamport_bufs L, char *own)
{
#if KL_SM90A
    constexpr int V = 16 / sizeof(T);
    __shared__ float parts[2][32];
    __shared__ float block_part[2];
    const int slice = K > 1 ? (int)kl::ptx::cluster_rank() : 0;      /* this block's slice of its rows */
    const int64_t first = blockIdx.x / K, rows_step = gridDim.x / K; /* a cluster per token at a time */
    const uint4 zero = make_uint4(0, 0, 0, 0);
    chunk q = chunk_at<T>(first, hidden, slice);
    bool unit = chunk_is_unit<T>(first, hidden, q);
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    uint4 wt = weight_chunk<T>(weight, first, hidden, q, aligned); /* no kernel writes the weight */
    kl::pdl_wait(); /* the previous kernel has ended: x, residual, the epoch and the bookkeeping are final */
    uint4 xb = q.m ? chunk_bits(x + q.i0, q.m, unit && aligned) : zero;
    uint4 res = q.m ? chunk_bits(residual + q.i0, q.m, unit && aligned) : zero;
    const uint32_t e = begin_call_unfenced(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our x, slice by slice of our rows, into our slot of this call's set in every peer's buffer. */
    for (int64_t t = first; t < tokens; t += rows_step) {
        const chunk qt = t == first ? q : chunk_at<T>(t, hidden, slice);
        if (qt.m == 0) continue;
        const bool ut = chunk_is_unit<T>(t, hidden, qt);
        send_chunk_to_peers<T>(P, L, set, qt, ut, x, t == first ? xb : ut ? chunk_bits(x + qt.i0, V, aligned) : zero);
    }
    stamp(P, KL_AR_T_COPIED);

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_own_set(own, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);

    /* Receive, add, normalize: a row per cluster at a time. Every thread of the cluster runs every
     * iteration (the barriers need them all); threads past the row's end contribute nothing. */
    int parity = 0;
    for (int64_t t = first; t < tokens; t += rows_step, parity ^= 1) {
        if (t != first) {
            q = chunk_at<T>(t, hidden, slice), unit = chunk_is_unit<T>(t, hidden, q);
            wt = weight_chunk<T>(weight, t, hidden, q, aligned);
            xb = q.m ? chunk_bits(x + q.i0, q.m, unit && aligned) : zero;
            res = q.m ? chunk_bits(residual + q.i0, q.m, unit && aligned) : zero;
        }
        float r[V];
        float sum_sq = 0.f;
        if (q.m) {
            sum_sq = gather_add_own_chunk<T>(P, own, set, e, q, unit, xb, res, r);
            store_chunk<T>(residual_out + q.i0, r, q.m, unit && aligned);
        }
        float total = row_sum(sum_sq, parts, parity);
        if constexpr (K > 1) {
            if (threadIdx.x == 0) block_part[parity] = total;
            kl::ptx::cluster_sync();
            total = 0.f;
#pragma unroll
            for (int k = 0; k < K; k++)
                total += *cooperative_groups::this_cluster().map_shared_rank(&block_part[parity], k);
        }
        if (q.m) store_normed<T>(out + q.i0, r, rsqrtf(total / (float)hidden + eps), wt, q.m, unit && aligned);
    }
    if constexpr (K > 1) kl::ptx::cluster_sync(); /* no block leaves while another may read its part */
    stamp(P, KL_AR_T_REDUCED);
    end_call_unfenced(P, e);
#endif
}

template <typename T, int K>
static cudaError_t launch_k(const struct kl_allreduce_add_rmsnorm_params *p, const fused_shape &sh, cudaStream_t stream)
{
    const int64_t clusters = fused_clusters(p, K, sh.threads, max_clusters<fused_v15<T, K>, K>(sh.threads),
                                            "v15_lamport_add_rmsnorm_in_registers");
    if (clusters == 0) return cudaErrorInvalidConfiguration;
    cudaLaunchAttribute attr[2] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = K, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {dim3((unsigned)(clusters * K)), dim3(sh.threads), 0, stream, attr, 2};
    return cudaLaunchKernelEx(&cfg, fused_v15<T, K>, (const T *)p->ar.x, (const T *)p->residual, (const T *)p->weight,
                              (T *)p->ar.out, (T *)p->residual_out, p->num_tokens, p->hidden, p->eps, sh.aligned,
                              make_peers(&p->ar), make_lamport(&p->ar), (char *)p->ar.comm->lamport[p->ar.comm->rank]);
}

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    fused_shape sh; /* sh.C: the fewest blocks of at most kRowThreads threads that cover a row */
    cudaError_t rc =
        fused_launch_shape(p, stream, kRowThreads, kMaxBlocks, "v15_lamport_add_rmsnorm_in_registers", &sh);
    if (rc != cudaSuccess || sh.grid == 0) return rc;
    /* K blocks a row: 1 when the row fits one block; else as many as keep a block at kMinThreads or
     * more, then fewer while the tokens' clusters would take more blocks than the communicator has
     * (an SM each), never below sh.C. */
    const int64_t V = 16 / (int64_t)kl_dtype_size(p->ar.dtype), chunks = (p->hidden + V - 1) / V;
    int K = sh.C == 1 ? 1 : kMaxBlocks;
    while (K > sh.C && chunks / K < kMinThreads)
        K /= 2;
    while (K > sh.C && p->num_tokens * K > p->ar.comm->blocks)
        K /= 2;
    sh.threads = (unsigned)(((chunks + K - 1) / K + 31) / 32 * 32);
    KL_DISPATCH_FLOAT(p->ar.dtype, T, {
        rc = K == 1   ? launch_k<T, 1>(p, sh, stream)
             : K == 2 ? launch_k<T, 2>(p, sh, stream)
             : K == 4 ? launch_k<T, 4>(p, sh, stream)
                      : launch_k<T, 8>(p, sh, stream);
    });
    return rc;
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v15_lamport_add_rmsnorm_in_registers, ops, .min_cc = 90,
           .summary = "v13 with its own buffer passed as one pointer and the peers' reached through constant indices: "
                      "no per-thread local-memory copy of the buffer array");
