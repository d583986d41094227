/* v2_twoshot: reduce-scatter then all-gather over peer memory, for the sizes where one-shot's
 * world x n reads stop paying.
 *
 * What changed from v1: in a one-shot every rank reads all world x n elements, (world-1) x n of
 * them over NVLink. Here rank r owns chunk r (n/world elements): it sums only its chunk over the
 * ranks, publishes the result, and copies the other chunks' results from their owners. Each
 * rank reads 2 x (world-1)/world x n over NVLink instead of (world-1) x n: fewer bytes from
 * world 3 up, the same at world 2, for one more barrier. Each element is summed once (by its
 * owner, rank order 0, 1, ...) and copied as bits: every rank ends with the same bits, and the
 * same bits as the one-shot.
 * Work mapping: position j of every chunk belongs to block (j / 512) % grid; block b copies in,
 * reduces and gathers only positions it owns, so the barriers pair blocks as in v1:
 *   copy-in (all chunks) -> start barrier -> reduce own chunk -> middle barrier -> gather -> end barrier.
 * Scalar loads, like v1; expect v1's latency plus one barrier (one NVLink round trip) at decode sizes.
 * Run alone: build/kernlab bench allreduce --variant v2_twoshot */
#include "kernels/allreduce/peer.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T>
static __global__ void __launch_bounds__(kThreads) twoshot_v2(const T *x, T *out, int64_t n, int64_t chunk, peers P)
{
    const uint32_t e = begin_call(P);
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;

    /* 1. Copy-in: position j of every chunk (the peers' owners read them in step 2). */
    T *mine = staged<T>(P, P.rank, e);
    for (int64_t j = first; j < chunk; j += stride)
        for (int c = 0; c < P.world; c++)
            if (c * chunk + j < n) mine[c * chunk + j] = x[c * chunk + j];
    stamp(P, KL_AR_T_COPIED);
    barrier(P, KL_AR_START, e);
    stamp(P, KL_AR_T_STARTED);

    /* 2. Reduce-scatter: our chunk, summed over every rank's staged copy in rank order. The
     * result goes to out and to our reduced half, where the other ranks copy it from. */
    T *red = reduced<T>(P, P.rank, e);
    for (int64_t j = first; j < chunk; j += stride) {
        const int64_t i = P.rank * chunk + j;
        if (i < n) {
            const T v = sum_elem<T>(P, e, i);
            red[i] = v;
            out[i] = v;
        }
    }
    stamp(P, KL_AR_T_REDUCED);
    /* Block b of every rank has published its positions of its chunk. */
    barrier(P, KL_AR_MID, e);
    stamp(P, KL_AR_T_MID);

    /* 3. All-gather: the same positions of every other chunk, from its owner, bit for bit. */
    for (int64_t j = first; j < chunk; j += stride)
        for (int c = 0; c < P.world; c++)
            if (c != P.rank && c * chunk + j < n) out[c * chunk + j] = ld_peer_raw(reduced<T>(P, c, e) + c * chunk + j);
    stamp(P, KL_AR_T_GATHERED);

    /* 4. No peer still reads our staging or reduced half (redundant, as in v1: see v4). */
    barrier(P, KL_AR_END, e);
    end_call(P, e);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS, "v2_twoshot");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const int64_t chunk = (p->n + p->comm->world - 1) / p->comm->world;
    const unsigned grid = grid_for(chunk, p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T,
                      twoshot_v2<T><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, chunk,
                                                                   make_peers(p)));
    return cudaGetLastError();
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS)

KL_VARIANT(allreduce, v2_twoshot, ops, .min_cc = 70,
           .summary = "two-shot: each rank reduces its 1/world chunk, then copies the others' chunks from their owners");
