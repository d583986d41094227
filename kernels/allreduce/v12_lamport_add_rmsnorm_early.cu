/* v12_lamport_add_rmsnorm_early: v10 with the row's inputs loaded before the wait for the peers, v11's call.
 *
 * What changed from v10, and why. At decode sizes a call's time is a chain of dependent steps, and v10
 * put three memory trips after the peers' data had landed: the residual (loaded once the polls were
 * over), the weight (once the row's sum of squares was), and the end-of-call fence v11 removed. Here a
 * block's inputs for its first row go out before anything waits: the weight before griddepcontrol.wait
 * (no kernel writes it), x and the residual right after it and before the call number (the previous
 * kernel may have written them; the call number does not depend on them), so the three trips overlap
 * the call number's read and the flight of the peers' data. A later row of the same block (more tokens
 * than blocks) loads its inputs before its polls, for the same reason. The call is v11's
 * (begin_call_unfenced / end_call_unfenced of peer.cuh: no fence, a one-block grid publishes the call
 * number at once). The row's sum of squares takes one block barrier, not block_sum's two: each warp's
 * part goes to shared memory, and after the barrier every warp adds the parts itself; the parts
 * alternate between two arrays by row, so a block's next row never overwrites parts a slow warp has
 * yet to read (the row between has a barrier every warp passed after its reads).
 * Work mapping: v10's (kernels/allreduce/fused_rows.cuh), with at most 512 threads a row (v10 takes up to
 * 1024, which caps a thread at 64 registers), so a thread holds up to 8 chunks of a wide row.
 * Precision and bound: v10's (the same sums in the same order; the warps' parts of the row's sum of
 * squares are added in warp order, where block_sum adds them as a tree).
 * Expect: v11's time plus about one block barrier and the stores of two rows at decode sizes.
 * Run alone: build/kernlab bench allreduce --variant v12_lamport_add_rmsnorm_early --workload
 * add-rmsnorm-t1-h4096-world2 */
#include "kernels/allreduce/fused_rows.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

constexpr int kRowThreads = 512; /* the most threads a row gets */
constexpr int kMaxChunks = 8;    /* chunks a thread holds: hidden up to 4096 V (16384 fp32, 32768 fp16/bf16) */

/* The row's inputs a thread holds, as loaded: its chunks of x, the residual and the weight. */
template <int C> struct row_inputs {
    uint4 x[C], res[C], wt[C];
};

template <typename T, int C>
__device__ __forceinline__ void load_weight(row_inputs<C> &in, const T *weight, int64_t t, int64_t hidden, bool aligned)
{
    constexpr int V = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < C; c++) {
        const chunk q = chunk_at<T>(t, hidden, c);
        in.wt[c] = q.m ? chunk_bits(weight + (q.i0 - t * hidden), q.m, q.m == V && aligned) : make_uint4(0, 0, 0, 0);
    }
}

template <typename T, int C>
__device__ __forceinline__ void load_x_residual(row_inputs<C> &in, const T *x, const T *residual, int64_t t,
                                                int64_t hidden, bool aligned)
{
#pragma unroll
    for (int c = 0; c < C; c++) {
        const chunk q = chunk_at<T>(t, hidden, c);
        const bool io = chunk_is_unit<T>(t, hidden, q) && aligned;
        in.x[c] = q.m ? chunk_bits(x + q.i0, q.m, io) : make_uint4(0, 0, 0, 0);
        in.res[c] = q.m ? chunk_bits(residual + q.i0, q.m, io) : make_uint4(0, 0, 0, 0);
    }
}

template <typename T, int C>
static __global__ void __launch_bounds__(kRowThreads, 1)
    fused_v12(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens, int64_t hidden,
              float eps, bool aligned, peers P, lamport_bufs L)
{
    constexpr int V = 16 / sizeof(T); /* elements per chunk */
    __shared__ float parts[2][32];
    const int64_t first = blockIdx.x; /* the launcher gives at most one block per token */
    row_inputs<C> in;
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    load_weight<T, C>(in, weight, first, hidden, aligned); /* no kernel writes the weight */
    kl::pdl_wait(); /* the previous kernel has ended: x, residual, the epoch and the bookkeeping are final */
    load_x_residual<T, C>(in, x, residual, first, hidden, aligned);
    const uint32_t e = begin_call_unfenced(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our x, chunk by chunk of our rows, into our slot of this call's set in every peer's buffer. */
    for (int64_t t = first; t < tokens; t += gridDim.x) {
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            if (q.m == 0) continue;
            const bool unit = chunk_is_unit<T>(t, hidden, q);
            const uint4 xb = t == first ? in.x[c] : unit ? chunk_bits(x + q.i0, V, aligned) : make_uint4(0, 0, 0, 0);
            send_chunk<T>(P, L, set, q, unit, x, xb);
        }
    }
    stamp(P, KL_AR_T_COPIED);

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_set(L, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);

    /* Receive, add, normalize: a row per block at a time. Every thread of the block runs every
     * iteration (row_sum needs them all), chunks past the row's end contribute nothing. */
    int parity = 0;
    for (int64_t t = first; t < tokens; t += gridDim.x, parity ^= 1) {
        if (t != first) {
            load_weight<T, C>(in, weight, t, hidden, aligned);
            load_x_residual<T, C>(in, x, residual, t, hidden, aligned);
        }
        float r[C][V];
        float sum_sq = 0.f;
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            if (q.m == 0) continue;
            const bool unit = chunk_is_unit<T>(t, hidden, q), io = unit && aligned;
            uint4 w[KL_AR_MAX_RANKS];
            gather_chunk<T>(P, L, set, e, q, unit, in.x[c], w);
            sum_sq += add_chunk<T>(w, P.world, in.res[c], q.m, r[c]);
            store_chunk<T>(residual_out + q.i0, r[c], q.m, io);
        }
        const float inv_rms = rsqrtf(row_sum(sum_sq, parts, parity) / (float)hidden + eps);
#pragma unroll
        for (int c = 0; c < C; c++) {
            const chunk q = chunk_at<T>(t, hidden, c);
            if (q.m == 0) continue;
            store_normed<T>(out + q.i0, r[c], inv_rms, in.wt[c], q.m, chunk_is_unit<T>(t, hidden, q) && aligned);
        }
    }
    stamp(P, KL_AR_T_REDUCED);
    end_call_unfenced(P, e);
}

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    fused_shape sh;
    cudaError_t rc = fused_launch_shape(p, stream, kRowThreads, kMaxChunks, "v12_lamport_add_rmsnorm_early", &sh);
    if (rc != cudaSuccess || sh.grid == 0) return rc;
    KL_DISPATCH_FLOAT(p->ar.dtype, T, {
        rc = launch_fused<T>(sh.C == 1   ? fused_v12<T, 1>
                             : sh.C == 2 ? fused_v12<T, 2>
                             : sh.C == 4 ? fused_v12<T, 4>
                                         : fused_v12<T, 8>,
                             p, sh, stream);
    });
    return rc;
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v12_lamport_add_rmsnorm_early, ops, .min_cc = 70,
           .summary = "v10 with the weight, x and residual loaded before the wait for the peers, v11's unfenced "
                      "call, one barrier for the row's sum of squares");
