/* v14_lamport_in_registers: v11 with every address it uses computed in registers, none read through a
 * run-time index into an array passed by value.
 *
 * What changed from v11, and why. v11 finds its own Lamport slots as L.base[P.rank] and a peer's as
 * L.base[s] in a loop bounded by the world: run-time indices into lamport_bufs, an array the kernel
 * receives by value. The compiler cannot index registers at run time, so every thread copies the
 * array into its local memory when it starts and reads it back before its sends, its polls and its
 * emptying (ptxas reports the copy as a stack frame). Local memory is per thread: a block of 512
 * threads stores and reloads 32 KB of it, through L1 and past it, on the call's critical path. Here
 * the launcher passes this rank's own buffer as one pointer (`own`), and the peers' buffers are
 * visited in loops unrolled over the most ranks, each index a constant and the rank a predicate. The
 * ranks' units are summed one by one as each is in hand (v11's sum_units takes an array of them, which
 * went to local memory too; the sums and their order are the same). So no thread has a stack frame
 * (lab/allreduce/stack_frames.sh checks it). Everything else is v11's: the protocol, the three sets,
 * the call number (begin_call_unfenced / end_call_unfenced), PDL and the work mapping, and a call
 * leaves the call number and the sets as a call of v11 leaves them.
 * Expect: v11 less the local-memory trips before the sends and the polls, a fixed amount a call,
 * so most visible at the smallest sizes.
 * Run alone: build/kernlab bench allreduce --variant v14_lamport_in_registers */
#include "kernels/allreduce/lamport.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads)
    lamport_v14(const T *x, T *out, int64_t n, peers P, lamport_bufs L, char *own)
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
    end_call_unfenced(P, e);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    const unsigned needs = KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT;
    cudaError_t rc = kl_allreduce_check_params(p, stream, needs, "v14_lamport_in_registers");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(units_of(p), p->comm);
    const bool pdl = kl::this_device().cc >= 90;
    char *own = (char *)p->comm->lamport[p->comm->rank];
    KL_DISPATCH_FLOAT(p->dtype, T, {
        rc = aligned16(p) ? kl::launch_pdl(lamport_v14<T, true>, grid, kThreads, pdl, stream, (const T *)p->x,
                                           (T *)p->out, p->n, make_peers(p), make_lamport(p), own)
                          : kl::launch_pdl(lamport_v14<T, false>, grid, kThreads, pdl, stream, (const T *)p->x,
                                           (T *)p->out, p->n, make_peers(p), make_lamport(p), own);
    });
    return rc;
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v14_lamport_in_registers, ops, .min_cc = 70,
           .summary = "v11 with its own buffer passed as one pointer and the peers' visited in unrolled loops: no "
                      "run-time index into a by-value array, so no per-thread local-memory copy of it");
