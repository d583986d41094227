/* v10_lamport_add_rmsnorm: v8's barrier-free one-shot fused with the residual add and RMSNorm after it.
 *
 * What changed from v8: a tensor-parallel decoder runs the all-reduce, then an add + RMSNorm kernel
 * that reads the sum back from memory: a second launch and a second pass over the row. Here the
 * block that sums a token's row also adds the residual, writes residual_out, reduces the row's sum
 * of squares and writes the normalized row: one launch, and the sum stays in registers. The
 * protocol is v8's (kernels/allreduce/lamport.cuh: sentinel, three rotating sets, PDL); only the
 * work mapping changes. Block b owns tokens b, b + grid, ...; a row is cut into chunks of 16 bytes
 * (V elements; the last one shorter when hidden is not a multiple of V), and thread k owns chunks
 * k, k + blockDim, ... of each of its rows. The same thread sends a chunk, sums it and writes it,
 * so out may be x and residual_out may be residual (in place). A chunk whose offset in the flat
 * [tokens, hidden] buffer is a multiple of V travels as one 16-byte store and poll; the others (the
 * rows of an odd hidden) element by element. Which it is depends on the shape alone, so every rank
 * maps the work alike; a rank's own pointer alignment only changes how it touches x, residual, out.
 * Precision, per element: the ranks' values summed in rank order in float32 (from rank 0's value),
 * the residual added in float32 without rounding the sum to the dtype first, r rounded once for
 * residual_out; out = r * rsqrt(sum_row r^2 / hidden + eps) * weight from the float32 r, the formula
 * of rmsnorm v3. Bound: compare.c's fused bounds (the all-reduce's, one rounding of the add, carried
 * through rmsnorm's row), which also admit a sum rounded to the dtype before the add.
 * Expect: about v8's time plus one block reduction at decode sizes, below v8 then rmsnorm v3.
 * Run alone: build/kernlab bench allreduce --variant v10_lamport_add_rmsnorm --workload add-rmsnorm-t1-h4096-world2 */
#include <stdio.h>

#include "kernels/allreduce/lamport.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

constexpr int kRowThreads = 1024; /* the most threads a row gets */
constexpr int kMaxChunks = 4;     /* chunks a thread holds: hidden up to 4096 V (16384 fp32, 32768 fp16/bf16) */

/* Element j of a 16-byte word set to bits b (the word zeroed beforehand). */
template <typename T> __device__ __forceinline__ void set_elem(uint32_t (&w)[4], int j, uint32_t b)
{
    if constexpr (sizeof(T) == 4) w[j] = b;
    else w[j / 2] |= b << (16 * (j & 1));
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
template <typename T> __device__ __forceinline__ void store_chunk(T *p, const float (&r)[16 / sizeof(T)], int m, bool unit)
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

template <typename T, int C>
static __global__ void __launch_bounds__(kRowThreads)
    fused_v10(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens, int64_t hidden,
              float eps, bool aligned, peers P, lamport_bufs L)
{
    constexpr int V = 16 / sizeof(T); /* elements per chunk */
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    kl::pdl_wait();    /* the previous kernel has ended: x, residual, the epoch and the bookkeeping are final */
    const uint32_t e = begin_call(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our x, chunk by chunk of our rows, into our slot of this call's set in every peer's buffer. */
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const bool row_units = (t * hidden) % V == 0; /* the row's full chunks are whole 16-byte units of the slot */
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            const int64_t i0 = q.i0;
            const int m = q.m;
            if (m == 0) continue;
            if (row_units && m == V) {
                const uint4 u = unit_sendable<T>(chunk_bits(x + i0, V, aligned));
                for (int s = 0; s < P.world; s++)
                    if (s != P.rank) lamport_slot<uint4>(L, P, s, set, P.rank)[i0 / V] = u;
            } else {
                for (int j = 0; j < m; j++) {
                    const uint32_t b = elem_sendable<T>(elem_bits(x + i0 + j));
                    for (int s = 0; s < P.world; s++)
                        if (s != P.rank) elem_store(lamport_slot<T>(L, P, s, set, P.rank) + i0 + j, b);
                }
            }
        }
    }
    stamp(P, KL_AR_T_COPIED);

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_set(L, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);

    /* Receive, add, normalize: a row per block at a time. Every thread of the block runs every
     * iteration (block_sum needs them all), chunks past the row's end contribute nothing. */
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const bool row_units = (t * hidden) % V == 0;
        float r[C][V];
        float sum_sq = 0.f;
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            const int64_t i0 = q.i0;
            const int m = q.m;
            if (m == 0) continue;
            const bool unit = row_units && m == V, io = unit && aligned;
            /* Every rank's chunk: ours from x as sent, the peers' polled in our own buffer (all
             * loads issued before the first wait, as v8). */
            uint4 w[KL_AR_MAX_RANKS];
            if (unit) {
#pragma unroll
                for (int s = 0; s < KL_AR_MAX_RANKS; s++)
                    if (s < P.world && s != P.rank) w[s] = ld_volatile_v4(lamport_slot<uint4>(L, P, P.rank, set, s) + i0 / V);
#pragma unroll
                for (int s = 0; s < KL_AR_MAX_RANKS; s++)
                    if (s < P.world && s != P.rank && unit_empty<T>(w[s]))
                        w[s] = wait_unit<T>(P, lamport_slot<uint4>(L, P, P.rank, set, s) + i0 / V, e, s);
            } else {
#pragma unroll
                for (int s = 0; s < KL_AR_MAX_RANKS; s++)
                    if (s < P.world && s != P.rank) w[s] = poll_elems<T>(P, L, set, s, i0, m, e);
            }
            const uint4 mine = unit_sendable<T>(chunk_bits(x + i0, m, io));
#pragma unroll
            for (int s = 0; s < KL_AR_MAX_RANKS; s++)
                if (s == P.rank) w[s] = mine;
            const uint4 res = chunk_bits(residual + i0, m, io);
#pragma unroll
            for (int j = 0; j < V; j++) {
                float acc = kl::elem_f32<T>(w[0], j);
#pragma unroll
                for (int s = 1; s < KL_AR_MAX_RANKS; s++)
                    if (s < P.world) acc += kl::elem_f32<T>(w[s], j);
                r[c][j] = acc + kl::elem_f32<T>(res, j);
                if (j < m) sum_sq += r[c][j] * r[c][j];
            }
            store_chunk<T>(residual_out + i0, r[c], m, io);
        }
        const float inv_rms = rsqrtf(kl::block_sum(sum_sq) / (float)hidden + eps);
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            const int64_t i0 = q.i0;
            const int m = q.m;
            if (m == 0) continue;
            const bool io = row_units && m == V && aligned;
            const uint4 wt = chunk_bits(weight + (i0 - t * hidden), m, m == V && aligned);
            float o[V];
#pragma unroll
            for (int j = 0; j < V; j++) o[j] = r[c][j] * inv_rms * kl::elem_f32<T>(wt, j);
            store_chunk<T>(out + i0, o, m, io);
        }
    }
    stamp(P, KL_AR_T_REDUCED);
    end_call(P, e);
}

template <typename T, int C>
static cudaError_t launch_c(const struct kl_allreduce_add_rmsnorm_params *p, unsigned grid, unsigned threads, bool aligned,
                            cudaStream_t stream)
{
    const bool pdl = kl::this_device().cc >= 90;
    return kl::launch_pdl(fused_v10<T, C>, grid, threads, pdl, stream, (const T *)p->ar.x, (const T *)p->residual,
                          (const T *)p->weight, (T *)p->ar.out, (T *)p->residual_out, p->num_tokens, p->hidden, p->eps,
                          aligned, make_peers(&p->ar), make_lamport(&p->ar));
}

static bool aligned16_ptr(const void *q) { return (uintptr_t)q % 16 == 0; }

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    const unsigned needs = KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT;
    cudaError_t rc = kl_allreduce_check_add_rmsnorm(p, stream, needs, "v10_lamport_add_rmsnorm");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t V = 16 / (int64_t)kl_dtype_size(p->ar.dtype), chunks = (p->hidden + V - 1) / V;
    int C = 1;
    while (C <= kMaxChunks && (chunks + C - 1) / C > kRowThreads) C *= 2;
    if (C > kMaxChunks) {
        fprintf(stderr, "allreduce v10_lamport_add_rmsnorm: hidden %lld is over %lld elements\n", (long long)p->hidden,
                (long long)(kMaxChunks * kRowThreads * V));
        return cudaErrorInvalidValue;
    }
    /* The grid and the block come from the shape alone (equal on every rank), at most the
     * communicator's co-resident block count: a block polls data that a peer's block sends. */
    const unsigned threads = (unsigned)(((chunks + C - 1) / C + 31) / 32 * 32);
    const unsigned grid = (unsigned)(p->num_tokens < p->ar.comm->blocks ? p->num_tokens : p->ar.comm->blocks);
    const bool aligned = aligned16_ptr(p->ar.x) && aligned16_ptr(p->ar.out) && aligned16_ptr(p->residual) &&
                         aligned16_ptr(p->residual_out) && aligned16_ptr(p->weight);
    KL_DISPATCH_FLOAT(p->ar.dtype, T, {
        rc = C == 1   ? launch_c<T, 1>(p, grid, threads, aligned, stream)
             : C == 2 ? launch_c<T, 2>(p, grid, threads, aligned, stream)
                      : launch_c<T, 4>(p, grid, threads, aligned, stream);
    });
    return rc;
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v10_lamport_add_rmsnorm, ops, .min_cc = 70,
           .summary = "v8 fused with the residual add and RMSNorm: a block per token sums, adds, normalizes in one launch");
