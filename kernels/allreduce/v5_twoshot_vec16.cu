/* v5_twoshot_vec16: v2's two-shot with v3's 16-byte units and v4's barrier scheme (no end barrier).
 *
 * What changed from v2: the same three steps (copy-in, reduce our chunk, copy the other chunks
 * from their owners) on 16-byte units with every rank's load in flight together (sum_vec), and
 * two barriers per call instead of three: both the staging copy and the reduced chunk alternate
 * halves by call number, so no peer can still read what call e+2 overwrites (peer.cuh).
 * Work mapping: units (16 bytes) are cut into world chunks of ceil(units / world); position j of
 * every chunk belongs to block (j / 512) % grid, so both barriers pair blocks. The tail (n not a
 * whole number of units) is summed by block 0 of every rank itself, one-shot style: the same
 * rank order everywhere, so still the same bits on every rank.
 * Bound: each rank reads 2 (world-1)/world x n bytes over NVLink. At world 2 that equals the
 * one-shot's n, for one more barrier: expect it to lose to v4 at world 2 and to win from world 4
 * at a few MB.
 * Run alone: build/kernlab bench allreduce --variant v5_twoshot_vec16 */
#include "kernels/allreduce/peer.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads) twoshot_v5(const T *x, T *out, int64_t n, int64_t chunk, peers P)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    const uint32_t e = begin_call(P);
    const int64_t units = n / V, tail0 = units * V;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const bool tail = blockIdx.x == 0 && tail0 + threadIdx.x < n;

    uint4 *mine = staged<uint4>(P, P.rank, e);
    for (int64_t j = first; j < chunk; j += stride)
        for (int c = 0; c < P.world; c++)
            if (c * chunk + j < units) mine[c * chunk + j] = load_unit<T, ALIGNED>(x, c * chunk + j);
    if (tail) staged<T>(P, P.rank, e)[tail0 + threadIdx.x] = x[tail0 + threadIdx.x];
    stamp(P, KL_AR_T_COPIED);
    barrier(P, KL_AR_START, e);
    stamp(P, KL_AR_T_STARTED);

    /* Reduce-scatter: our chunk, in rank order, to out and to our reduced half for the peers. */
    uint4 *red = reduced<uint4>(P, P.rank, e);
    for (int64_t j = first; j < chunk; j += stride) {
        const int64_t u = P.rank * chunk + j;
        if (u < units) {
            const uint4 v = sum_vec<T>(P, e, u);
            red[u] = v;
            store_unit<T, ALIGNED>(out, u, v);
        }
    }
    if (tail) out[tail0 + threadIdx.x] = sum_elem<T>(P, e, tail0 + threadIdx.x);
    stamp(P, KL_AR_T_REDUCED);
    barrier(P, KL_AR_MID, e);
    stamp(P, KL_AR_T_MID);

    /* All-gather: every other chunk from its owner, bit for bit. */
    for (int64_t j = first; j < chunk; j += stride)
        for (int c = 0; c < P.world; c++) {
            const int64_t u = c * chunk + j;
            if (c != P.rank && u < units) store_unit<T, ALIGNED>(out, u, ld_peer(reduced<uint4>(P, c, e) + u));
        }
    stamp(P, KL_AR_T_GATHERED);
    end_call(P, e);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS, "v5_twoshot_vec16");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const int64_t chunk = (units_of(p) + p->comm->world - 1) / p->comm->world; /* units per rank */
    const unsigned grid = grid_for(chunk, p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T, {
        if (aligned16(p))
            twoshot_v5<T, true><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, chunk, make_peers(p));
        else
            twoshot_v5<T, false><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, chunk, make_peers(p));
    });
    return cudaGetLastError();
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS)

KL_VARIANT(allreduce, v5_twoshot_vec16, ops, .min_cc = 70,
           .summary = "two-shot with 16-byte units and two barriers per call (alternating halves)");
