/* v11_lamport_unfenced: v8 without the fence at the end of every call, and x read before the call number.
 *
 * What changed from v8, and why. At decode sizes a call's time is a chain of dependent steps, and v8's
 * chain has two links that carry no data. First, a block reads the call number (thread 0, then a block
 * barrier) before any thread loads its x, so the call starts with two memory trips in series; here every
 * thread issues the load of its first unit of x before the call number's read, and the two trips overlap.
 * Second, v8 ends with end_call: thread 0 fences, then counts its block on the communicator's counter,
 * and the last block publishes the call number. The fence is there to order the call number's read
 * before the count, but a fence orders every store this thread issued, and this thread's stores went
 * to the peers over NVLink: the end of every call can wait for their delivery, which it has no use
 * for. Here thread 0 reads the call number with ld.acquire (its count cannot pass the read), there is
 * no fence, and a one-block grid (8 KB and below) publishes the number as soon as it has read it and
 * counts nothing (peer.cuh's begin_call_unfenced / end_call_unfenced). The protocol, the buffers, the
 * sets and PDL are v8's, and a call leaves the call number and the sets as a call of v8 leaves them.
 * Work mapping: v7's. Expect v8 minus about a memory trip and the fence at small sizes.
 * Run alone: build/kernlab bench allreduce --variant v11_lamport_unfenced */
#include "kernels/allreduce/lamport.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads) lamport_v11(const T *x, T *out, int64_t n, peers P, lamport_bufs L)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    kl::pdl_wait();    /* the previous kernel has ended: x, the epoch and the bookkeeping are final */
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
    for (int64_t j = first; j < units; j += stride) {
        const uint4 u = unit_sendable<T>(j == first ? x0 : load_unit<T, ALIGNED>(x, j));
        for (int s = 0; s < P.world; s++)
            if (s != P.rank) lamport_slot<uint4>(L, P, s, set, P.rank)[j] = u;
    }
    if (tail) {
        const uint32_t b = elem_sendable<T>(elem_bits(x + tail0 + threadIdx.x));
        for (int s = 0; s < P.world; s++)
            if (s != P.rank) elem_store(lamport_slot<T>(L, P, s, set, P.rank) + tail0 + threadIdx.x, b);
    }
    stamp(P, KL_AR_T_COPIED);

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_set(L, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)n * sizeof(T);

    /* Receive: every rank's unit j, ours from x as sent, the peers' polled in our own buffer. */
    for (int64_t j = first; j < units; j += stride) {
        uint4 w[KL_AR_MAX_RANKS];
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s < P.world && s != P.rank) w[s] = ld_volatile_v4(lamport_slot<uint4>(L, P, P.rank, set, s) + j);
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s < P.world && s != P.rank && unit_empty<T>(w[s]))
                w[s] = wait_unit<T>(P, lamport_slot<uint4>(L, P, P.rank, set, s) + j, e, s);
#pragma unroll
        for (int s = 0; s < KL_AR_MAX_RANKS; s++)
            if (s == P.rank) w[s] = unit_sendable<T>(j == first ? x0 : load_unit<T, ALIGNED>(x, j));
        store_unit<T, ALIGNED>(out, j, sum_units<T>(w, P.world));
    }
    if (tail) {
        const int64_t i = tail0 + threadIdx.x;
        float acc = 0.f;
        for (int s = 0; s < P.world; s++) {
            const uint32_t b = s == P.rank ? elem_sendable<T>(elem_bits(x + i))
                                           : wait_elem<T>(P, lamport_slot<T>(L, P, P.rank, set, s) + i, e, s);
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
    cudaError_t rc = kl_allreduce_check_params(p, stream, needs, "v11_lamport_unfenced");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(units_of(p), p->comm);
    const bool pdl = kl::this_device().cc >= 90;
    KL_DISPATCH_FLOAT(p->dtype, T, {
        rc = aligned16(p) ? kl::launch_pdl(lamport_v11<T, true>, grid, kThreads, pdl, stream, (const T *)p->x,
                                           (T *)p->out, p->n, make_peers(p), make_lamport(p))
                          : kl::launch_pdl(lamport_v11<T, false>, grid, kThreads, pdl, stream, (const T *)p->x,
                                           (T *)p->out, p->n, make_peers(p), make_lamport(p));
    });
    return rc;
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v11_lamport_unfenced, ops, .min_cc = 70,
           .summary = "v8 without the end-of-call fence (the call number read with acquire, published at once by "
                      "a one-block grid) and x read before the call number");
