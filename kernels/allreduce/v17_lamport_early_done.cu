/* v17_lamport_early_done: v14 with each block counted done with the call as soon as its sends are out.
 *
 * What changed from v14, and why. A grid of several blocks publishes the next call number through a
 * count: thread 0 of every block adds one to `done`, and the block that brings it to the grid's size
 * publishes the number (peer.cuh, count_call_done). v14 counts last thing, after the block's own units
 * are summed and stored: the count is a returning atomic, a round trip to L2, and where block b's thread
 * 0 is among the last to finish, the grid cannot end before that round trip does. The count needs only
 * that the block has read the number (thread 0 read it with acquire in begin_call_unfenced), so here it
 * comes right after the sends, while the peers' data is in flight, and the call ends when its last unit
 * is stored. A one-block grid counts nothing (its number is published when read), so the 8 KB call is
 * v14's. Everything else is v14's.
 * Expect: v14 less about one L2 round trip at the sizes that take several blocks (16 KB and up), the
 * same at one block.
 * Run alone: build/kernlab bench allreduce --variant v17_lamport_early_done */
#include "kernels/allreduce/lamport.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads)
    lamport_v17(const T *x, T *out, int64_t n, peers P, lamport_bufs L, char *own)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    kl::pdl_release();                /* the next call may launch now; it waits for this grid in its pdl_wait */
    kl::pdl_wait();                   /* the previous kernel has ended: x, the epoch and the bookkeeping are final */
    stamp(P, KL_AR_T_RELEASED);       /* traced calls only: when this grid was let through */
    const int64_t units = n / V, tail0 = units * V;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    /* This thread's first unit of x, asked for before the call number (it does not depend on it). */
    const uint4 x0 = first < units ? load_unit<T, ALIGNED>(x, first) : make_uint4(0, 0, 0, 0);
    const uint32_t e = begin_call_unfenced(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    const bool tail = blockIdx.x == 0 && tail0 + threadIdx.x < n; /* this thread owns element tail0 + tid */
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our x into our slot of this call's set in every peer's buffer. */
    for (int64_t j = first; j < units; j += stride)
        send_to_peers<uint4>(L, P, set, j, unit_sendable<T>(j == first ? x0 : load_unit<T, ALIGNED>(x, j)));
    if (tail) {
        const uint32_t b = elem_sendable<T>(elem_bits(x + tail0 + threadIdx.x));
        send_elem_to_peers<T>(L, P, set, tail0 + threadIdx.x, b);
    }
    stamp(P, KL_AR_T_COPIED);
    count_call_done(P, e); /* this block has read the call number: count it done now, not at the end */

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_own_set(own, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)n * sizeof(T);

    /* Receive: every rank's unit j, ours from x as sent, the peers' polled in our own buffer. */
    for (int64_t j = first; j < units; j += stride) {
        uint4 w[KL_AR_MAX_RANKS];
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s < P.world && s != P.rank) w[s] = ld_volatile_v4(own_slot<uint4>(own, P, set, s) + j);
        const uint4 mine = unit_sendable<T>(j == first ? x0 : load_unit<T, ALIGNED>(x, j));
        float acc[V];
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++) { /* in rank order, from rank 0's value, rounded once */
            if (s >= P.world) break;
            if (s != P.rank && unit_empty<T>(w[s])) w[s] = wait_unit<T>(P, own_slot<uint4>(own, P, set, s) + j, e, s);
            const uint4 u = s == P.rank ? mine : w[s];
#pragma unroll
            for (int k = 0; k < V; k++)
                acc[k] = s == 0 ? kl::elem_f32<T>(u, k) : acc[k] + kl::elem_f32<T>(u, k);
        }
        store_unit<T, ALIGNED>(out, j, kl::pack<T>(acc));
    }
    if (tail) {
        const int64_t i = tail0 + threadIdx.x;
        float acc = 0.f;
        for (int s = 0; s < P.world; s++) {
            const uint32_t b = s == P.rank ? elem_sendable<T>(elem_bits(x + i))
                                           : wait_elem<T>(P, own_slot<T>(own, P, set, s) + i, e, s);
            acc = s == 0 ? elem_value<T>(b) : acc + elem_value<T>(b);
        }
        out[i] = kl::from_f32<T>(acc);
    }
    stamp(P, KL_AR_T_REDUCED);
    stamp_exit(P);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    const unsigned needs = KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT;
    cudaError_t rc = kl_allreduce_check_params(p, stream, needs, "v17_lamport_early_done");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(units_of(p), p->comm);
    const bool pdl = kl::this_device().cc >= 90;
    char *own = (char *)p->comm->lamport[p->comm->rank];
    KL_DISPATCH_FLOAT(p->dtype, T, {
        rc = aligned16(p) ? kl::launch_pdl(lamport_v17<T, true>, grid, kThreads, pdl, stream, (const T *)p->x,
                                           (T *)p->out, p->n, make_peers(p), make_lamport(p), own)
                          : kl::launch_pdl(lamport_v17<T, false>, grid, kThreads, pdl, stream, (const T *)p->x,
                                           (T *)p->out, p->n, make_peers(p), make_lamport(p), own);
    });
    return rc;
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v17_lamport_early_done, ops, .min_cc = 70,
           .summary = "v14 with each block counted done with the call right after its sends, so the count's round trip "
                      "to L2 overlaps the peers' flight instead of ending the call");
