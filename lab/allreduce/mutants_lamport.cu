/* Deliberately wrong Lamport all-reduces, linked into the tests only: each is v7_lamport_oneshot
 * (one element per thread, no 16-byte units) with one of the bugs its design argues away
 * (kernels/allreduce/lamport.cuh):
 *   lamport_two_sets     two sets rotate instead of three: the set a reader empties in call e is
 *                        the one a fast peer already fills for call e + 1 (a buffer reused while
 *                        a slow peer still reads it); the reader then waits for data it wiped.
 *                        The race needs the slow rank to stall between its sends and its
 *                        emptying (preempted there, say) for longer than the fast rank takes to
 *                        finish the call and send the next: the mutant's last rank stalls 50 us
 *                        there, on every call, so the tests see the race every time
 *   lamport_never_empty  slots are never reset to the sentinel: call e + 3 reads call e's data
 *                        at once (a stale flag across calls)
 *   lamport_no_poll      reads each slot once without waiting for the sentinel to go
 *   lamport_raw_sentinel sends x as it is: an input element equal to the sentinel is never seen
 *                        as arrived (sentinel equal to real data), and the reader waits forever
 *   lamport_publish_at_once
 *                        v11's early publication of the call number in every grid, not only a
 *                        one-block one: a block that reads the number after block 0 published it
 *                        takes the next call's, so its set and the set it empties are no longer
 *                        the call's (a block of a peer that read in time waits for it in vain; on
 *                        every rank alike, it empties the wrong set and reads data three calls
 *                        old). Blocks past the first read the number 20 us late (as a block the
 *                        scheduler starts late would), so the tests see the race every time
 *   lamport_counted_before_read
 *                        v17's early count made too early: each block counts itself done with the call
 *                        before it reads the call number, so the last count can publish the number
 *                        before a block has read it, and that block takes the next call's (the race
 *                        of lamport_publish_at_once, reached through the count). Blocks past the first
 *                        read the number 20 us after counting, so the tests see the race every time */
#include "kernels/allreduce/lamport.cuh"
#include "lab/core/registry.h"

using namespace kl_ar;

enum bug { TWO_SETS, NEVER_EMPTY, NO_POLL, RAW_SENTINEL, PUBLISH_AT_ONCE, COUNTED_BEFORE_READ };

/* begin_call_unfenced (peer.cuh) publishing the call number at once in any grid: the bug of
 * lamport_publish_at_once. */
__device__ __forceinline__ uint32_t begin_call_publish_at_once(const peers &P)
{
    __shared__ uint32_t e;
    if (threadIdx.x == 0) {
        if (blockIdx.x > 0) {
            const unsigned long long t0 = globaltimer();
            while (globaltimer() - t0 < 20000) {
            }
        }
        kl_ar_signal *me = P.signal[P.rank];
        e = kl::ptx::ld_acquire_gpu(&me->epoch) + 1;
        *(volatile uint32_t *)&me->epoch = e;
    }
    __syncthreads();
    return e;
}

/* begin_call_unfenced with the block's count (count_call_done) before its read of the call number: the
 * bug of lamport_counted_before_read. The last block to count publishes the number it reads then. */
__device__ __forceinline__ uint32_t begin_call_counted_before_read(const peers &P)
{
    __shared__ uint32_t e;
    if (threadIdx.x == 0) {
        kl_ar_signal *me = P.signal[P.rank];
        if (atomicAdd(&me->done, 1u) == gridDim.x - 1) {
            me->done = 0;
            *(volatile uint32_t *)&me->epoch = kl::ptx::ld_acquire_gpu(&me->epoch) + 1;
        }
        if (blockIdx.x > 0) {
            const unsigned long long t0 = globaltimer();
            while (globaltimer() - t0 < 20000) {
            }
        }
        e = kl::ptx::ld_acquire_gpu(&me->epoch) + 1;
        if (gridDim.x == 1) *(volatile uint32_t *)&me->epoch = e;
    }
    __syncthreads();
    return e;
}

template <typename T, int BUG>
static __global__ void __launch_bounds__(kThreads) mutant(const T *x, T *out, int64_t n, peers P, lamport_bufs L)
{
    const uint32_t sets = BUG == TWO_SETS ? 2 : KL_AR_LAMPORT_SETS;
    const uint32_t e = BUG == PUBLISH_AT_ONCE       ? begin_call_publish_at_once(P)
                       : BUG == COUNTED_BEFORE_READ ? begin_call_counted_before_read(P)
                                                    : begin_call(P);
    const uint32_t set = e % sets, previous = (e + sets - 1) % sets;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous];
    for (int64_t i = first; i < n; i += stride) {
        const uint32_t b = BUG == RAW_SENTINEL ? elem_bits(x + i) : elem_sendable<T>(elem_bits(x + i));
        for (int s = 0; s < P.world; s++)
            if (s != P.rank) elem_store(lamport_slot<T>(L, P, s, set, P.rank) + i, b);
    }
    if (BUG == TWO_SETS && P.rank == P.world - 1) {
        const unsigned long long t0 = globaltimer();
        while (globaltimer() - t0 < 50000) {
        }
    }
    if (BUG != NEVER_EMPTY) empty_set(L, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)n * sizeof(T);
    for (int64_t i = first; i < n; i += stride) {
        float acc = 0.f;
        for (int s = 0; s < P.world; s++) {
            const T *slot = lamport_slot<T>(L, P, P.rank, set, s) + i;
            const uint32_t b = s == P.rank     ? elem_sendable<T>(elem_bits(x + i))
                               : BUG == NO_POLL ? elem_ld_volatile(slot)
                                                : wait_elem<T>(P, slot, e, s);
            acc = s == 0 ? elem_value<T>(b) : acc + elem_value<T>(b);
        }
        out[i] = kl::from_f32<T>(acc);
    }
    if (BUG == PUBLISH_AT_ONCE) end_call_unfenced(P, e);
    else if (BUG != COUNTED_BEFORE_READ) end_call(P, e); /* that one counted at the start */
}

template <int BUG>
static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT, "mutant");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(p->n, p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T,
                      mutant<T, BUG><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p),
                                                                      make_lamport(p)));
    return cudaGetLastError();
}

template <int BUG> KL_AR_OPS(ops, launch<BUG>, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, mutant_lamport_two_sets, ops<TWO_SETS>, .min_cc = 70,
           .summary = "two rotating Lamport sets: the set emptied is the one a fast peer fills next", .mutant = 1);
KL_VARIANT(allreduce, mutant_lamport_never_empty, ops<NEVER_EMPTY>, .min_cc = 70,
           .summary = "Lamport slots never reset: call e + 3 reads call e's data", .mutant = 1);
KL_VARIANT(allreduce, mutant_lamport_no_poll, ops<NO_POLL>, .min_cc = 70,
           .summary = "Lamport slots read once, without waiting for the sentinel to go", .mutant = 1);
KL_VARIANT(allreduce, mutant_lamport_raw_sentinel, ops<RAW_SENTINEL>, .min_cc = 70,
           .summary = "an input equal to the sentinel is sent as it is and never arrives", .mutant = 1);
KL_VARIANT(allreduce, mutant_lamport_publish_at_once, ops<PUBLISH_AT_ONCE>, .min_cc = 70,
           .summary = "the call number published as soon as read in a grid of several blocks", .mutant = 1);
KL_VARIANT(allreduce, mutant_lamport_counted_before_read, ops<COUNTED_BEFORE_READ>, .min_cc = 70,
           .summary = "each block counted done before it reads the call number: the last count publishes it early",
           .mutant = 1);
