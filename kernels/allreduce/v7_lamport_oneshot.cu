/* v7_lamport_oneshot: the one-shot with no barrier at all: the data is its own flag.
 *
 * What changed from v4: v4 copies x into its own staging buffer, meets every peer at a barrier
 * (a flag written over NVLink and polled back), then reads the peers' copies: two NVLink trips
 * before the first add. Here each rank stores its x straight into a slot of every peer's buffer
 * and each reader polls its own slots until the sentinel is gone (kernels/allreduce/lamport.cuh:
 * the sentinel, the three rotating sets, why no barrier is needed): one NVLink trip, the store,
 * and the reads are local. The stores are pushed, so the trip is one way, not a round trip.
 * Work mapping: 16-byte unit j in thread j of the grid-stride loop, the same thread sending it
 * and, later, summing it; the last n % (16/size) elements in block 0, one per thread.
 * Expect: at small sizes about half of v4 (one trip instead of two); at large ones world - 1
 * remote stores and an emptying pass per element, slower than v4's remote loads, so a switch
 * hands large sizes to another variant.
 * Run alone: build/kernlab bench allreduce --variant v7_lamport_oneshot */
#include "kernels/allreduce/lamport.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads) lamport_v7(const T *x, T *out, int64_t n, peers P, lamport_bufs L)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    const uint32_t e = begin_call(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    const int64_t units = n / V, tail0 = units * V;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const bool tail = blockIdx.x == 0 && tail0 + threadIdx.x < n; /* this thread owns element tail0 + tid */
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our x into our slot of this call's set in every peer's buffer. */
    for (int64_t j = first; j < units; j += stride) {
        const uint4 u = unit_sendable<T>(load_unit<T, ALIGNED>(x, j));
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
            if (s == P.rank) w[s] = unit_sendable<T>(load_unit<T, ALIGNED>(x, j));
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
    end_call(P, e);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    const unsigned needs = KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT;
    cudaError_t rc = kl_allreduce_check_params(p, stream, needs, "v7_lamport_oneshot");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(units_of(p), p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T, {
        if (aligned16(p))
            lamport_v7<T, true><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p), make_lamport(p));
        else
            lamport_v7<T, false><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p), make_lamport(p));
    });
    return cudaGetLastError();
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v7_lamport_oneshot, ops, .min_cc = 70,
           .summary = "one-shot without a barrier: x stored into every peer's buffer, readers poll until the sentinel is gone");
