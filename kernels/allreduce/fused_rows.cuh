/* The row mapping of the fused all-reduce + residual add + RMSNorm variants (v10, v12, v13): a block owns
 * whole tokens, a row is cut into chunks of 16 bytes (V elements; the last one shorter when hidden is
 * not a multiple of V), and thread k owns chunks k, k + blockDim, ... of each of its rows. A chunk
 * whose offset in the flat [tokens, hidden] buffer is a multiple of V travels as one 16-byte store
 * and poll; the others (the rows of an odd hidden) element by element. Which it is depends on the
 * shape alone, so every rank maps the work alike; a rank's own pointer alignment (`aligned`) only
 * changes how it touches x, residual, weight, out and residual_out. */
#pragma once

#include <stdio.h>

#include "kernels/allreduce/lamport.cuh"
#include "kernels/ptx_cluster.cuh"

namespace kl_ar
{

/* Element j of a 16-byte word set to bits b (the word zeroed beforehand). */
template <typename T> __device__ __forceinline__ void set_elem(uint32_t (&w)[4], int j, uint32_t b)
{
    if constexpr (sizeof(T) == 4)
        w[j] = b;
    else
        w[j / 2] |= b << (16 * (j & 1));
}

/* The first m elements at p as a 16-byte word, bit for bit: one access when unit (p 16-byte aligned,
 * m == V), else element by element (the rest zero). */
template <typename T> __device__ __forceinline__ uint4 chunk_bits(const T *p, int m, bool unit)
{
    constexpr int V = 16 / sizeof(T);
    if (unit) return *(const uint4 *)p;
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < V; j++)
        if (j < m) set_elem<T>(w, j, elem_bits(p + j));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* r rounded to T into the first m elements at p (one 16-byte store when unit). */
template <typename T>
__device__ __forceinline__ void store_chunk(T *p, const float (&r)[16 / sizeof(T)], int m, bool unit)
{
    constexpr int V = 16 / sizeof(T);
    if (unit) {
        *(uint4 *)p = kl::pack<T>(r);
        return;
    }
#pragma unroll
    for (int j = 0; j < V; j++)
        if (j < m) p[j] = kl::from_f32<T>(r[j]);
}

/* Chunk c of this thread in row t: its first element in the flat buffer and its length (0: past the row). */
struct chunk {
    int64_t i0;
    int m;
};
template <typename T> __device__ __forceinline__ chunk chunk_at(int64_t t, int64_t hidden, int c)
{
    constexpr int V = 16 / sizeof(T);
    const int64_t k = threadIdx.x + (int64_t)c * blockDim.x, left = hidden - k * V;
    return {t * hidden + k * V, left <= 0 ? 0 : left < V ? (int)left : V};
}

/* The first m elements of chunk i0 of our slot from rank s, polled element by element (a row off the
 * 16-byte units). Out of line: the rare path's loops would otherwise crowd the fast path's registers. */
template <typename T>
static __device__ __noinline__ uint4 poll_elems(const peers &P, const lamport_bufs &L, uint32_t set, int s, int64_t i0,
                                                int m, uint32_t e)
{
    constexpr int V = 16 / sizeof(T);
    uint32_t b[4] = {0, 0, 0, 0};
    const T *slot = lamport_slot<T>(L, P, P.rank, set, s) + i0;
#pragma unroll
    for (int j = 0; j < V; j++)
        if (j < m) set_elem<T>(b, j, wait_elem<T>(P, slot + j, e, s));
    return make_uint4(b[0], b[1], b[2], b[3]);
}

/* Whether chunk q of row t travels as one 16-byte unit of the slot. */
template <typename T> __device__ __forceinline__ bool chunk_is_unit(int64_t t, int64_t hidden, const chunk &q)
{
    constexpr int V = 16 / sizeof(T);
    return (t * hidden) % V == 0 && q.m == V;
}

/* Chunk q of x (its bits as loaded, xb) into our slot of `set` in every peer's buffer. */
template <typename T>
__device__ __forceinline__ void send_chunk(const peers &P, const lamport_bufs &L, uint32_t set, const chunk &q,
                                           bool unit, const T *x, uint4 xb)
{
    constexpr int V = 16 / sizeof(T);
    if (unit) {
        const uint4 u = unit_sendable<T>(xb);
        for (int s = 0; s < P.world; s++)
            if (s != P.rank) lamport_slot<uint4>(L, P, s, set, P.rank)[q.i0 / V] = u;
        return;
    }
    for (int j = 0; j < q.m; j++) {
        const uint32_t b = elem_sendable<T>(elem_bits(x + q.i0 + j));
        for (int s = 0; s < P.world; s++)
            if (s != P.rank) elem_store(lamport_slot<T>(L, P, s, set, P.rank) + q.i0 + j, b);
    }
}

/* Every rank's chunk q: ours (mine, as sent), the peers' polled in our own buffer, all loads issued
 * before the first wait. */
template <typename T>
__device__ __forceinline__ void gather_chunk(const peers &P, const lamport_bufs &L, uint32_t set, uint32_t e,
                                             const chunk &q, bool unit, uint4 mine, uint4 (&w)[KL_AR_MAX_RANKS])
{
    constexpr int V = 16 / sizeof(T);
    if (unit) {
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s < P.world && s != P.rank) w[s] = ld_volatile_v4(lamport_slot<uint4>(L, P, P.rank, set, s) + q.i0 / V);
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s < P.world && s != P.rank && unit_empty<T>(w[s]))
                w[s] = wait_unit<T>(P, lamport_slot<uint4>(L, P, P.rank, set, s) + q.i0 / V, e, s);
    } else {
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s < P.world && s != P.rank) w[s] = poll_elems<T>(P, L, set, s, q.i0, q.m, e);
    }
#pragma unroll
    for (int s = 0; s < KL_AR_MAX_RANKS; s++)
        if (s == P.rank) w[s] = unit_sendable<T>(mine);
}

/* send_chunk, poll_elems, and gather_chunk with add_chunk, in the forms of lamport.cuh's send_to_peers and
 * own_slot (v15): no run-time index into lamport_bufs, our own buffer passed as one pointer, everything
 * inlined (an out-of-line call would need the peers and the ranks' chunks in local memory). */
template <typename T>
__device__ __forceinline__ void send_chunk_to_peers(const peers &P, const lamport_bufs &L, uint32_t set, const chunk &q,
                                                    bool unit, const T *x, uint4 xb)
{
    constexpr int V = 16 / sizeof(T);
    if (unit) {
        send_to_peers<uint4>(L, P, set, q.i0 / V, unit_sendable<T>(xb));
        return;
    }
    for (int j = 0; j < q.m; j++)
        send_elem_to_peers<T>(L, P, set, q.i0 + j, elem_sendable<T>(elem_bits(x + q.i0 + j)));
}

template <typename T>
__device__ __forceinline__ uint4 poll_own_elems(const peers &P, char *own, uint32_t set, int s, int64_t i0, int m,
                                                uint32_t e)
{
    constexpr int V = 16 / sizeof(T);
    uint32_t b[4] = {0, 0, 0, 0};
    const T *slot = own_slot<T>(own, P, set, s) + i0;
#pragma unroll
    for (int j = 0; j < V; j++)
        if (j < m) set_elem<T>(b, j, wait_elem<T>(P, slot + j, e, s));
    return make_uint4(b[0], b[1], b[2], b[3]);
}

/* gather_chunk then add_chunk, from our own buffer: every rank's chunk q (ours as sent, the peers'
 * polled, all 16-byte loads issued before the first wait) summed in rank order in float32 from rank 0's
 * value, plus the residual's, into r; returns the sum of squares of its first m elements. The sums are
 * add_chunk's, in its order; they are taken as each rank's chunk arrives, so no array of the ranks'
 * chunks outlives a poll. */
template <typename T>
__device__ __forceinline__ float gather_add_own_chunk(const peers &P, char *own, uint32_t set, uint32_t e,
                                                      const chunk &q, bool unit, uint4 mine, uint4 res,
                                                      float (&r)[16 / sizeof(T)])
{
    constexpr int V = 16 / sizeof(T);
    uint4 w[KL_AR_MAX_RANKS];
    if (unit) {
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s < P.world && s != P.rank) w[s] = ld_volatile_v4(own_slot<uint4>(own, P, set, s) + q.i0 / V);
    }
    float acc[V];
#pragma unroll
    for (int s = 0; s < KL_AR_MAX_RANKS; s++) {
        if (s >= P.world) break;
        uint4 u;
        if (s == P.rank)
            u = unit_sendable<T>(mine);
        else if (!unit)
            u = poll_own_elems<T>(P, own, set, s, q.i0, q.m, e);
        else
            u = unit_empty<T>(w[s]) ? wait_unit<T>(P, own_slot<uint4>(own, P, set, s) + q.i0 / V, e, s) : w[s];
#pragma unroll
        for (int j = 0; j < V; j++)
            acc[j] = s == 0 ? kl::elem_f32<T>(u, j) : acc[j] + kl::elem_f32<T>(u, j);
    }
    float sum_sq = 0.f;
#pragma unroll
    for (int j = 0; j < V; j++) {
        r[j] = acc[j] + kl::elem_f32<T>(res, j);
        if (j < q.m) sum_sq += r[j] * r[j];
    }
    return sum_sq;
}

/* r = the ranks' chunks summed in rank order in float32 (from rank 0's value) plus the residual's,
 * not rounded in between; returns the sum of squares of its first m elements. */
template <typename T>
__device__ __forceinline__ float add_chunk(const uint4 (&w)[KL_AR_MAX_RANKS], int world, uint4 res, int m,
                                           float (&r)[16 / sizeof(T)])
{
    constexpr int V = 16 / sizeof(T);
    float sum_sq = 0.f;
#pragma unroll
    for (int j = 0; j < V; j++) {
        float acc = kl::elem_f32<T>(w[0], j);
#pragma unroll
        for (int s = 1; s < KL_AR_MAX_RANKS; s++)
            if (s < world) acc += kl::elem_f32<T>(w[s], j);
        r[j] = acc + kl::elem_f32<T>(res, j);
        if (j < m) sum_sq += r[j] * r[j];
    }
    return sum_sq;
}

/* out = r * inv_rms * weight, rounded to T, into the first m elements at out (one store when unit). */
template <typename T>
__device__ __forceinline__ void store_normed(T *out, const float (&r)[16 / sizeof(T)], float inv_rms, uint4 wt, int m,
                                             bool unit)
{
    constexpr int V = 16 / sizeof(T);
    float o[V];
#pragma unroll
    for (int j = 0; j < V; j++)
        o[j] = r[j] * inv_rms * kl::elem_f32<T>(wt, j);
    store_chunk<T>(out, o, m, unit);
}

/* The block's sum of v behind one barrier: each warp's part goes to parts[parity], and after the
 * barrier every warp adds the parts itself, in warp order. Callers alternate parity by row, so a
 * block's next row never overwrites parts a slow warp has yet to read (the row between has a barrier
 * every warp passed after its reads). */
__device__ __forceinline__ float row_sum(float v, float (*parts)[32], int parity)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (int)(blockDim.x / 32);
    v = kl::warp_sum(v);
    if (lane == 0) parts[parity][warp] = v;
    __syncthreads();
    float total = 0.f;
    for (int k = 0; k < warps; k++)
        total += parts[parity][k]; /* the same order in every warp */
    return total;
}

/* A fused launch's shape, from the shape of the call alone (equal on every rank): C chunks a thread
 * (a power of two, the fewest that fit the row in row_threads threads), the row's threads in whole
 * warps, a block per token up to the communicator's co-resident block count (a block polls data that
 * a peer's block sends), and whether every pointer is 16-byte aligned. */
struct fused_shape {
    int C;
    unsigned threads, grid;
    bool aligned;
};

/* The launcher's checks and shape; cudaErrorInvalidValue (said on stderr) when the row is wider
 * than max_chunks * row_threads chunks. A call of no tokens passes with grid 0: launch nothing. */
inline cudaError_t fused_launch_shape(const kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream, int row_threads,
                                      int max_chunks, const char *variant, fused_shape *sh)
{
    cudaError_t rc = kl_allreduce_check_add_rmsnorm(p, stream, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT, variant);
    *sh = fused_shape{1, 0, 0, false};
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t V = 16 / (int64_t)kl_dtype_size(p->ar.dtype), chunks = (p->hidden + V - 1) / V;
    while (sh->C <= max_chunks && (chunks + sh->C - 1) / sh->C > row_threads)
        sh->C *= 2;
    if (sh->C > max_chunks) {
        fprintf(stderr, "allreduce %s: hidden %lld is over %lld elements\n", variant, (long long)p->hidden,
                (long long)(max_chunks * row_threads * V));
        return cudaErrorInvalidValue;
    }
    sh->threads = (unsigned)(((chunks + sh->C - 1) / sh->C + 31) / 32 * 32);
    sh->grid = (unsigned)(p->num_tokens < p->ar.comm->blocks ? p->num_tokens : p->ar.comm->blocks);
    const void *ptrs[5] = {p->ar.x, p->ar.out, p->residual, p->residual_out, p->weight};
    sh->aligned = true;
    for (const void *q : ptrs)
        sh->aligned &= (uintptr_t)q % 16 == 0;
    return cudaSuccess;
}

/* How many clusters of K blocks of `threads` threads of KERNEL (a fused variant's kernel) the device
 * holds at once, asked once per kernel, device and block size. */
template <auto KERNEL, int K> inline int max_clusters(unsigned threads)
{
    static int seen[16][1024 / 32 + 1]; /* by device ordinal and warps a block; a benign race */
    int dev = 0;
    cudaGetDevice(&dev);
    int *n = dev >= 0 && dev < 16 && threads <= 1024 ? &seen[dev][threads / 32] : NULL;
    if (n && *n) return *n;
    cudaLaunchAttribute cluster = {};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = K, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {dim3(K), dim3(threads), 0, 0, &cluster, 1};
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, KERNEL, &cfg) != cudaSuccess) clusters = 0;
    if (n) *n = clusters;
    return clusters;
}

/* The clusters of K blocks of `threads` threads a fused call launches: one a token, up to the
 * communicator's blocks over K and `most` (max_clusters, where the variant asks). 0, said on stderr,
 * when none fits. */
inline int64_t fused_clusters(const kl_allreduce_add_rmsnorm_params *p, int K, unsigned threads, int64_t most,
                              const char *variant)
{
    int64_t clusters = p->num_tokens < p->ar.comm->blocks / K ? p->num_tokens : p->ar.comm->blocks / K;
    if (most < clusters) clusters = most;
    if (clusters < 1)
        fprintf(stderr, "allreduce %s: no cluster of %d blocks of %u threads fits (%d blocks)\n", variant, K, threads,
                p->ar.comm->blocks);
    return clusters < 1 ? 0 : clusters;
}

/* kernel (a fused variant's kernel for T, its C chosen by sh) on the call's buffers, as a programmatic
 * dependent of the previous kernel on sm_90. */
template <typename T>
inline cudaError_t launch_fused(void (*kernel)(const T *, const T *, const T *, T *, T *, int64_t, int64_t, float, bool,
                                               peers, lamport_bufs),
                                const kl_allreduce_add_rmsnorm_params *p, const fused_shape &sh, cudaStream_t stream)
{
    const bool pdl = kl::this_device().cc >= 90;
    return kl::launch_pdl(kernel, sh.grid, sh.threads, pdl, stream, (const T *)p->ar.x, (const T *)p->residual,
                          (const T *)p->weight, (T *)p->ar.out, (T *)p->residual_out, p->num_tokens, p->hidden, p->eps,
                          sh.aligned, make_peers(&p->ar), make_lamport(&p->ar));
}

/* The block's sum of v, the same bits in every thread: each warp's sum into parts[parity], one
 * barrier, then every warp adds the parts across its lanes (lane i takes warp i's), one shared load
 * and five shuffles after the barrier instead of a dependent add per warp. Callers alternate parity
 * by row, so a block's next row never overwrites parts a slow warp has yet to read. (kl::block_sum
 * has two barriers and one buffer.) */
__device__ __forceinline__ float block_row_sum(float v, float (*parts)[32], int parity)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (int)(blockDim.x / 32);
    v = kl::warp_sum(v);
    if (lane == 0) parts[parity][warp] = v;
    __syncthreads();
    return kl::warp_sum(lane < warps ? parts[parity][lane] : 0.f);
}

} // namespace kl_ar
