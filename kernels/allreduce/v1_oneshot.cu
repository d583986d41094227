/* v1_oneshot: every rank reads every peer's input over NVLink and sums it itself; one kernel.
 *
 * What changed from v0: no NCCL. NCCL's small-message cost is its protocol (several steps, each a
 * round trip through its FIFOs); a one-shot needs one barrier and one round of peer reads, so at
 * decode sizes it should take a launch, ~2 NVLink round trips and the bytes: less than NCCL's protocol.
 * Work mapping: element i belongs to block (i / 512) % grid on every rank (grid-stride, the same
 * grid everywhere), so block b only reads what block b of each peer copied: barriers pair blocks.
 *   1. copy-in: the block copies its elements of x into this rank's staging half (e & 1);
 *   2. start barrier: every rank's block b has its copy in place;
 *   3. each thread sums its elements over all ranks' staging, rank 0 first, and writes out;
 *   4. end barrier: no peer still reads our staging (v4 shows it is not needed).
 * Scalar loads (2-4 bytes): the teaching version; expect it close to v3 at 8 KB, poor at large sizes.
 * Run alone: build/kernlab bench allreduce --variant v1_oneshot */
#include "kernels/allreduce/peer.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T>
static __global__ void __launch_bounds__(kThreads) oneshot_v1(const T *x, T *out, int64_t n, peers P)
{
    const uint32_t e = begin_call(P);
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;

    /* 1. Our contribution goes where the peers can read it. x itself is not registered with the
     * peers (it can be any buffer, like NCCL's input), so it is copied: a local copy, cheap next
     * to the reads over NVLink. Plain stores: the barrier's release publishes them. */
    T *mine = staged<T>(P, P.rank, e);
    for (int64_t i = first; i < n; i += stride) mine[i] = x[i];
    stamp(P, KL_AR_T_COPIED);

    /* 2. After this, block b of every rank has copied its elements for call e. */
    barrier(P, KL_AR_START, e);
    stamp(P, KL_AR_T_STARTED);

    /* 3. The same elements as in step 1: this block only reads what block b of each peer wrote.
     * The order (rank 0, 1, ...) is the same on every rank, so every rank gets the same bits.
     * out may be x (in place): element i is read in step 1 and written here by the same thread. */
    for (int64_t i = first; i < n; i += stride) out[i] = sum_elem<T>(P, e, i);
    stamp(P, KL_AR_T_REDUCED);

    /* 4. Every peer's block b has finished reading our staging. The halves alternate by call, so
     * the next call would not overwrite this one's half anyway (see peer.cuh); v1 keeps the
     * barrier to be obviously right, v4 removes it. */
    barrier(P, KL_AR_END, e);
    end_call(P, e);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS, "v1_oneshot");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const unsigned grid = grid_for(p->n, p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T,
                      oneshot_v1<T><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, make_peers(p)));
    return cudaGetLastError();
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS)

KL_VARIANT(allreduce, v1_oneshot, ops, .min_cc = 70,
           .summary = "one-shot: copy in, barrier, read every peer over NVLink, sum in rank order, end barrier");
