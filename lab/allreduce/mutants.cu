/* Deliberately wrong allreduce variants, linked into the tests only: the tests must flag every
 * one. Each is v1's scalar one-shot with one realistic bug:
 *   missing_last_rank  the sum stops one rank short (an off-by-one in the rank loop)
 *   barrier_no_wait    the start barrier announces its arrival but does not wait: a stale-flag
 *                      barrier, which reads a late peer's staging before the peer wrote it
 *   own_rank_first     each rank adds its own value first, then the others: a summation order
 *                      that differs between ranks (the ranks' bits disagree from world 3 up;
 *                      with two ranks a + b = b + a and it is no bug at all)
 *   zero_start         the sum starts from +0.0f: -0 + -0 comes out +0 (IEEE says -0)
 *   host_epoch         the call number comes from a host counter passed as a kernel argument:
 *                      a CUDA graph freezes it at capture, so every replay after the first finds
 *                      the flags already at that number and does not wait */
#include "kernels/allreduce/peer.cuh"
#include "lab/core/registry.h"

using namespace kl_ar;

enum bug { MISSING_LAST, NO_WAIT, OWN_FIRST, ZERO_START, HOST_EPOCH };

template <typename T, int BUG>
static __global__ void __launch_bounds__(kThreads) mutant(const T *x, T *out, int64_t n, peers P, uint32_t host_e)
{
    const uint32_t e = BUG == HOST_EPOCH ? host_e : begin_call(P);
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    T *mine = staged<T>(P, P.rank, e);
    for (int64_t i = first; i < n; i += stride) mine[i] = x[i];
    if (BUG == NO_WAIT) {
        __syncthreads();
        if ((int)threadIdx.x < P.world) st_release_sys(&P.signal[threadIdx.x]->arrive[KL_AR_START][blockIdx.x][P.rank], e);
        __syncthreads();
    } else {
        barrier(P, KL_AR_START, e);
    }
    for (int64_t i = first; i < n; i += stride) {
        float acc;
        if (BUG == ZERO_START) {
            acc = 0.f;
            for (int s = 0; s < P.world; s++) acc += ld_peer_elem(staged<T>(P, s, e) + i);
        } else if (BUG == OWN_FIRST) {
            acc = ld_peer_elem(staged<T>(P, P.rank, e) + i);
            for (int s = 0; s < P.world; s++)
                if (s != P.rank) acc += ld_peer_elem(staged<T>(P, s, e) + i);
        } else {
            acc = ld_peer_elem(staged<T>(P, 0, e) + i);
            for (int s = 1; s < (BUG == MISSING_LAST ? P.world - 1 : P.world); s++) acc += ld_peer_elem(staged<T>(P, s, e) + i);
        }
        out[i] = kl::from_f32<T>(acc);
    }
    barrier(P, KL_AR_END, e);
    if (BUG != HOST_EPOCH) end_call(P, e);
}

template <int BUG>
static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    static uint32_t host_epoch; /* HOST_EPOCH's bug: counted on the host, captured by value */
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS, "mutant");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(p->n, p->comm);
    const uint32_t e = ++host_epoch;
    KL_DISPATCH_FLOAT(p->dtype, T,
                      mutant<T, BUG><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p), e));
    return cudaGetLastError();
}

template <int BUG> KL_AR_OPS(ops, launch<BUG>, KL_AR_NEEDS_PEERS)

KL_VARIANT(allreduce, mutant_missing_last_rank, ops<MISSING_LAST>, .min_cc = 70,
           .summary = "the last rank's contribution is never added", .mutant = 1);
KL_VARIANT(allreduce, mutant_barrier_no_wait, ops<NO_WAIT>, .min_cc = 70,
           .summary = "start barrier that sets its flag but does not wait (stale reads)", .mutant = 1);
KL_VARIANT(allreduce, mutant_own_rank_first, ops<OWN_FIRST>, .min_cc = 70,
           .summary = "each rank sums its own value first: the order differs between ranks", .mutant = 1);
KL_VARIANT(allreduce, mutant_zero_start, ops<ZERO_START>, .min_cc = 70,
           .summary = "the sum starts from +0.0: -0 + -0 gives +0", .mutant = 1);
KL_VARIANT(allreduce, mutant_host_epoch, ops<HOST_EPOCH>, .min_cc = 70,
           .summary = "call number from a host counter: frozen by graph capture, replays do not wait", .mutant = 1);
