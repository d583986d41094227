/* v16_lamport_add_rmsnorm_unit_rows: the plain one-shot v14, a row per block, with the residual add and
 * the RMSNorm after its sum.
 *
 * What changed from v15, and why. v15 carries the row mapping v10 was written for: any hidden, a row cut
 * into chunks that may be shorter than 16 bytes, a cluster when a row is wider than a block. So every
 * unit's load, send and poll goes through a chunk descriptor and the branches of the short chunks,
 * and the row's sum of squares ends in a loop over the block's warps that every thread runs after
 * the barrier. v16 takes the rows that fit v14's own mapping and nothing else: hidden a multiple of
 * the 16-byte unit (every row starts on one) and at most kThreads units a row. Thread k of a block
 * owns unit k of its row and moves it as v14 moves a unit: loaded before the call number, sent to
 * every peer, polled with every peer's load issued before the first wait, summed in rank order. Then
 * r = sum + residual, residual_out stored, and the row's sum of squares across the block: each warp's
 * sum into shared memory behind one barrier, then every warp adds those parts across its lanes (lane
 * i takes warp i's), one shared load and five shuffles after the barrier instead of a dependent add
 * per warp. The weight is read before the PDL wait (no kernel writes it), x and the residual right
 * after it. Other rows (an odd hidden, a row wider than a block) go to v15, whose clusters spread a
 * row over several SMs and which keeps the same slots, sets and call number; the shape alone
 * decides, so every rank decides alike.
 * Grid: a block per token up to the communicator's co-resident block count (a block polls units a
 * peer's block sends), then rows by the grid's stride; a block of one thread a unit, in whole warps.
 * The pointers' alignment is this rank's own: unaligned ones are read and written element by
 * element, bit for bit, in the same units.
 * Precision and bound: v15's sums (the ranks in rank order from rank 0's value in float32, the
 * residual added before any rounding); only the order in which the warps' parts of the sum of
 * squares are added differs, which the fused bound admits. Every rank computes the same bits.
 * Expect: the plain all-reduce of the same bytes plus one block reduction and the stores of
 * residual_out and out; the residual's and weight's loads overlap the flight of the peers' data.
 * Run alone: build/kernlab bench allreduce --variant v16_lamport_add_rmsnorm_unit_rows */
#include "kernels/allreduce/fused_rows.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

constexpr int kWidestRowUnits = 4096; /* v15's widest row (8 blocks of 512 threads); wider is an error */

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads)
    fused_v16(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens, int64_t hidden,
              float eps, peers P, lamport_bufs L, char *own)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    __shared__ float parts[2][32];
    const int64_t row_units = hidden / V, first = blockIdx.x;
    const bool mine = threadIdx.x < row_units; /* unit threadIdx.x of each row is this thread's */
    const uint4 zero = make_uint4(0, 0, 0, 0);
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    const uint4 wt = mine ? chunk_bits(weight + threadIdx.x * V, V, ALIGNED) : zero; /* no kernel writes it */
    kl::pdl_wait(); /* the previous kernel has ended: x, residual, the epoch and the bookkeeping are final */
    stamp(P, KL_AR_T_RELEASED);
    /* This block's first row, asked for before the call number (it does not depend on it). */
    int64_t j = first * row_units + threadIdx.x; /* the unit of the row in the flat [tokens, hidden] buffer */
    uint4 xb = mine ? chunk_bits(x + j * V, V, ALIGNED) : zero;
    uint4 res = mine ? chunk_bits(residual + j * V, V, ALIGNED) : zero;
    const uint32_t e = begin_call_unfenced(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our rows into our slot of this call's set in every peer's buffer. */
    if (mine)
        for (int64_t t = first; t < tokens; t += gridDim.x) {
            const int64_t jt = t * row_units + threadIdx.x;
            send_to_peers<uint4>(L, P, set, jt, unit_sendable<T>(t == first ? xb : chunk_bits(x + jt * V, V, ALIGNED)));
        }
    stamp(P, KL_AR_T_COPIED);

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_own_set(own, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);

    /* Receive, add, normalize, a row at a time. Every thread runs every row (the barrier needs them
     * all); a thread past the row's end adds nothing. */
    int parity = 0;
    for (int64_t t = first; t < tokens; t += gridDim.x, parity ^= 1) {
        float r[V], sum_sq = 0.f;
        if (mine) {
            if (t != first) {
                j = t * row_units + threadIdx.x;
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
                const uint4 u = s == P.rank ? unit_sendable<T>(xb) : w[s];
#pragma unroll
                for (int k = 0; k < V; k++)
                    acc[k] = s == 0 ? kl::elem_f32<T>(u, k) : acc[k] + kl::elem_f32<T>(u, k);
            }
#pragma unroll
            for (int k = 0; k < V; k++) {
                r[k] = acc[k] + kl::elem_f32<T>(res, k);
                sum_sq += r[k] * r[k];
            }
            store_chunk<T>(residual_out + j * V, r, V, ALIGNED);
        }
        const float inv_rms = rsqrtf(block_row_sum(sum_sq, parts, parity) / (float)hidden + eps);
        if (mine) store_normed<T>(out + j * V, r, inv_rms, wt, V, ALIGNED);
    }
    stamp(P, KL_AR_T_REDUCED);
    end_call_unfenced(P, e);
}

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    /* The checks, the grid (a block per token up to comm->blocks), sh.C (the blocks of kThreads
     * threads a row would take, up to v15's widest row), sh.threads and the alignment. */
    fused_shape sh;
    cudaError_t rc =
        fused_launch_shape(p, stream, kThreads, kWidestRowUnits / kThreads, "v16_lamport_add_rmsnorm_unit_rows", &sh);
    if (rc != cudaSuccess || sh.grid == 0) return rc;
    if (p->hidden % (16 / (int64_t)kl_dtype_size(p->ar.dtype)) != 0 || sh.C > 1) {
        /* Not this variant's rows: v15 runs the call (found by name, so this file stays one file). */
        const auto v15 = (kl_allreduce_ops_fn)kl_variant_launcher("allreduce", "v15_lamport_add_rmsnorm_in_registers",
                                                                  "v16_lamport_add_rmsnorm_unit_rows");
        return v15 ? v15()->add_rmsnorm(p, stream) : cudaErrorInvalidValue;
    }
    const bool pdl = kl::this_device().cc >= 90;
    char *own = (char *)p->ar.comm->lamport[p->ar.comm->rank];
    KL_DISPATCH_FLOAT(p->ar.dtype, T, {
        rc = kl::launch_pdl(sh.aligned ? fused_v16<T, true> : fused_v16<T, false>, sh.grid, sh.threads, pdl, stream,
                            (const T *)p->ar.x, (const T *)p->residual, (const T *)p->weight, (T *)p->ar.out,
                            (T *)p->residual_out, p->num_tokens, p->hidden, p->eps, make_peers(&p->ar),
                            make_lamport(&p->ar), own);
    });
    return rc;
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v16_lamport_add_rmsnorm_unit_rows, ops, .min_cc = 90,
           .summary = "v14's one-shot, a row per block, with the add + RMSNorm after its sum and a lane-parallel block "
                      "sum: rows of whole 16-byte units up to a block's threads; other rows go to v15");
