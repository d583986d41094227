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
#include "kernels/allreduce/fused_rows.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

constexpr int kRowThreads = 1024; /* the most threads a row gets */
constexpr int kMaxChunks = 4;     /* chunks a thread holds: hidden up to 4096 V (16384 fp32, 32768 fp16/bf16) */

template <typename T, int C>
static __global__ void __launch_bounds__(kRowThreads)
    fused_v10(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens, int64_t hidden,
              float eps, bool aligned, peers P, lamport_bufs L)
{
    constexpr int V = 16 / sizeof(T); /* elements per chunk */
    kl::pdl_release();                /* the next call may launch now; it waits for this grid in its pdl_wait */
    kl::pdl_wait(); /* the previous kernel has ended: x, residual, the epoch and the bookkeeping are final */
    const uint32_t e = begin_call(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our x, chunk by chunk of our rows, into our slot of this call's set in every peer's buffer. */
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            if (q.m == 0) continue;
            const bool unit = chunk_is_unit<T>(t, hidden, q);
            send_chunk<T>(P, L, set, q, unit, x, unit ? chunk_bits(x + q.i0, V, aligned) : make_uint4(0, 0, 0, 0));
        }
    }
    stamp(P, KL_AR_T_COPIED);

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_set(L, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);

    /* Receive, add, normalize: a row per block at a time. Every thread of the block runs every
     * iteration (block_sum needs them all), chunks past the row's end contribute nothing. */
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        float r[C][V];
        float sum_sq = 0.f;
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            if (q.m == 0) continue;
            const bool unit = chunk_is_unit<T>(t, hidden, q), io = unit && aligned;
            uint4 w[KL_AR_MAX_RANKS];
            gather_chunk<T>(P, L, set, e, q, unit, chunk_bits(x + q.i0, q.m, io), w);
            sum_sq += add_chunk<T>(w, P.world, chunk_bits(residual + q.i0, q.m, io), q.m, r[c]);
            store_chunk<T>(residual_out + q.i0, r[c], q.m, io);
        }
        const float inv_rms = rsqrtf(kl::block_sum(sum_sq) / (float)hidden + eps);
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            if (q.m == 0) continue;
            const uint4 wt = chunk_bits(weight + (q.i0 - t * hidden), q.m, q.m == V && aligned);
            store_normed<T>(out + q.i0, r[c], inv_rms, wt, q.m, chunk_is_unit<T>(t, hidden, q) && aligned);
        }
    }
    stamp(P, KL_AR_T_REDUCED);
    end_call(P, e);
}

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    fused_shape sh;
    cudaError_t rc = fused_launch_shape(p, stream, kRowThreads, kMaxChunks, "v10_lamport_add_rmsnorm", &sh);
    if (rc != cudaSuccess || sh.grid == 0) return rc;
    KL_DISPATCH_FLOAT(p->ar.dtype, T, {
        rc = launch_fused<T>(sh.C == 1   ? fused_v10<T, 1>
                             : sh.C == 2 ? fused_v10<T, 2>
                                         : fused_v10<T, 4>,
                             p, sh, stream);
    });
    return rc;
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(
    allreduce, v10_lamport_add_rmsnorm, ops, .min_cc = 70,
    .summary = "v8 fused with the residual add and RMSNorm: a block per token sums, adds, normalizes in one launch");
