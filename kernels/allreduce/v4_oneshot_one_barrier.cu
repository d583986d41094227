/* v4_oneshot_one_barrier: v3 without the end barrier: one barrier per call.
 *
 * What changed from v3: the end barrier only protected our staging copy from being overwritten
 * while a peer still reads it. The copies alternate between two halves by call number (e & 1),
 * so call e+2 is the first to write this call's half again, and before it does, this rank has
 * passed call e+1's start barrier, which no peer reaches before it has finished call e. The
 * protection was already there: dropping the barrier saves one NVLink round trip and one
 * __syncthreads per call, nothing else changes.
 * Work mapping: as v3 (16-byte unit j in block (j / 512) % grid; the tail in block 0).
 * Expect v3 minus one round trip at 8-512 KB; the same as v3 at large sizes (bandwidth-bound).
 * Run alone: build/kernlab bench allreduce --variant v4_oneshot_one_barrier */
#include "kernels/allreduce/peer.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads) oneshot_v4(const T *x, T *out, int64_t n, peers P)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    const uint32_t e = begin_call(P);
    const int64_t units = n / V, tail0 = units * V;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const bool tail = blockIdx.x == 0 && tail0 + threadIdx.x < n; /* this thread owns element tail0 + tid */

    /* Our half for this call: no peer reads it (calls e-2 are done everywhere, see above). */
    uint4 *mine = staged<uint4>(P, P.rank, e);
    for (int64_t j = first; j < units; j += stride) mine[j] = load_unit<T, ALIGNED>(x, j);
    if (tail) staged<T>(P, P.rank, e)[tail0 + threadIdx.x] = x[tail0 + threadIdx.x];
    stamp(P, KL_AR_T_COPIED);

    /* The only wait of the call: every peer's block b has its copy of call e in place. */
    barrier(P, KL_AR_START, e);
    stamp(P, KL_AR_T_STARTED);

    for (int64_t j = first; j < units; j += stride) store_unit<T, ALIGNED>(out, j, sum_vec<T>(P, e, j));
    if (tail) out[tail0 + threadIdx.x] = sum_elem<T>(P, e, tail0 + threadIdx.x);
    stamp(P, KL_AR_T_REDUCED);
    end_call(P, e); /* no end barrier: the kernel ends when our own reads and writes are done */
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS, "Voneshot_v4");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(units_of(p), p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T, {
        if (aligned16(p)) oneshot_v4<T, true><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p));
        else oneshot_v4<T, false><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p));
    });
    return cudaGetLastError();
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS)

KL_VARIANT(allreduce, v4_oneshot_one_barrier, ops, .min_cc = 70,
           .summary = "v3 with one barrier per call: the alternating staging halves make the end barrier redundant");
