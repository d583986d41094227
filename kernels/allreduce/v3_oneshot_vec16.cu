/* v3_oneshot_vec16: v1 with 16-byte accesses, and every rank's load in flight at once.
 *
 * What changed from v1: v1 moves 2-4 bytes per load and, summing rank by rank, waits for one
 * NVLink round trip per rank before the next load. Here a thread moves 16-byte units (8 bf16,
 * 4 fp32): copy-in, peer loads and the output are one LDG/STG.128 each, and sum_vec issues the
 * loads of all ranks before the first add, so a thread waits for one round trip, not world.
 * Work mapping: unit j (16 bytes) belongs to block (j / 512) % grid; the last n % (16/size)
 * elements (the tail, when n is not a whole number of units) belong to block 0, on every rank.
 * x or out off a 16-byte boundary (this rank's own buffers): the same units, the same owners,
 * only this rank's loads of x and stores of out go element by element (ALIGNED = false).
 * Still two barriers (start, end). Expect v1's time at 8 KB (latency-bound, a few units per
 * thread either way) and far better from 1 MB: about the NVLink read rate per direction.
 * Run alone: build/kernlab bench allreduce --variant v3_oneshot_vec16 */
#include "kernels/allreduce/peer.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads) oneshot_v3(const T *x, T *out, int64_t n, peers P)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    const uint32_t e = begin_call(P);
    const int64_t units = n / V, tail0 = units * V;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const bool tail = blockIdx.x == 0 && tail0 + threadIdx.x < n; /* this thread owns element tail0 + tid */

    uint4 *mine = staged<uint4>(P, P.rank, e);
    for (int64_t j = first; j < units; j += stride) mine[j] = load_unit<T, ALIGNED>(x, j);
    if (tail) staged<T>(P, P.rank, e)[tail0 + threadIdx.x] = x[tail0 + threadIdx.x];
    stamp(P, KL_AR_T_COPIED);

    barrier(P, KL_AR_START, e);
    stamp(P, KL_AR_T_STARTED);

    for (int64_t j = first; j < units; j += stride) store_unit<T, ALIGNED>(out, j, sum_vec<T>(P, e, j));
    if (tail) out[tail0 + threadIdx.x] = sum_elem<T>(P, e, tail0 + threadIdx.x);
    stamp(P, KL_AR_T_REDUCED);
    barrier(P, KL_AR_END, e);
    end_call(P, e);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS, "Voneshot_v3");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(units_of(p), p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T, {
        if (aligned16(p)) oneshot_v3<T, true><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p));
        else oneshot_v3<T, false><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p));
    });
    return cudaGetLastError();
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS)

KL_VARIANT(allreduce, v3_oneshot_vec16, ops, .min_cc = 70,
           .summary = "one-shot with 16-byte loads and stores, all ranks' loads in flight together");
