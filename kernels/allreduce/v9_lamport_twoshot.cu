/* v9_lamport_twoshot: v5's two-shot with no barrier: both shots carry their own flag (v8's sentinel).
 *
 * What changed from v5 and v8: v8 sends all of x to every peer, so each rank receives (world-1) x n
 * bytes and sums all n elements; v5 moves 2 (world-1)/world x n bytes per rank (each rank sums
 * 1/world of the elements, then gathers the rest) but pays two flag round trips. Here the 16-byte units are cut into world
 * slices of `chunk` units; rank c owns slice c. Shot 1: each rank stores its x's slice c into slot
 * `rank` of rank c's Lamport buffer. Rank c polls its slots until no element holds the sentinel,
 * sums in rank order in float32, rounds once, and stores the reduced slice into slot c of every
 * peer (shot 2) and into its own out. Each rank polls the reduced slices in its slots and copies
 * them out. Slot s of a set holds all that rank s writes here in one call: its x's slice of ours
 * (units [0, chunk)), then its reduced slice (units [chunk, 2 chunk)); 2 x chunk x 16 bytes fit a
 * slot whenever n fits the comm's capacity (the launcher checks). The last unit may be partial
 * (n not a multiple of 16 bytes): padded with +0 when sent, only its real elements stored to out.
 *
 * Three sets (kernels/allreduce/lamport.cuh) for both shots: call e uses set e % 3 and empties, in
 * its own buffer, the set call e - 1 used, both halves of every peer's slot. Why no barrier:
 *   - Call e - 1 polled every unit written into that set to the end (each peer's x slice, each
 *     peer's reduced slice), so no write to it is still in flight when we empty it.
 *   - A rank ends a call only after every rank began it: every rank waits for slice 0, which rank 0
 *     reduces from every rank's shot 1. The next writes into the set are call e + 2's: a peer's
 *     shot 1 comes after it ended call e + 1, so after we began call e + 1 (having ended call e and
 *     its emptying); its shot 2 comes after our own shot 1 of call e + 2, later still.
 *   - Call e's set was emptied by call e - 2, which ended before call e - 1 began.
 * A reduced unit is sent through unit_sendable as x is: a NaN sum rounds to the sentinel's bits,
 * and would never arrive. The owner keeps that same NaN in its own out, so every rank's bits agree.
 * The slot's first bytes hold the same writer whichever Lamport variant ran the call before
 * (v7/v8 fill [0, n bytes)), so lamport_dirty's byte count empties both kinds.
 * Work mapping: position j < chunk of every slice in thread j of the grid-stride loop, for both
 * shots and the copy-out. PDL as v8 (every read and store after griddepcontrol.wait).
 * Expect: per rank 2 (world-1)/world x n bytes stored over NVLink, as v5 reads, with one one-way
 * trip per shot instead of v5's copy-in and two barrier round trips; and 2 (world-1)/world x n
 * local bytes emptied, off the critical path. v6_switch hands it the sizes between its two
 * thresholds (kernels/allreduce/v6_switch.cu).
 * Run alone: build/kernlab bench allreduce --variant v9_lamport_twoshot */
#include <stdio.h>

#include "kernels/allreduce/lamport.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

/* Unit u of x, the elements past n as +0; bits moved as they are (no float round trip, which would
 * rewrite a NaN's payload). One 16-byte load where the unit is whole and x aligned. */
template <typename T, bool ALIGNED> __device__ __forceinline__ uint4 x_unit(const T *x, int64_t u, int64_t n)
{
    constexpr int V = 16 / sizeof(T);
    if (ALIGNED && (u + 1) * V <= n) return ((const uint4 *)x)[u];
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < V; k++)
        if (u * V + k < n) {
            if constexpr (sizeof(T) == 4) w[k] = elem_bits(x + u * V + k);
            else w[k / 2] |= elem_bits(x + u * V + k) << (16 * (k & 1));
        }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Unit u of out, only its elements below n. */
template <typename T, bool ALIGNED> __device__ __forceinline__ void out_unit(T *out, int64_t u, int64_t n, const uint4 &v)
{
    constexpr int V = 16 / sizeof(T);
    if (ALIGNED && (u + 1) * V <= n) {
        ((uint4 *)out)[u] = v;
        return;
    }
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < V; k++)
        if (u * V + k < n) {
            if constexpr (sizeof(T) == 4) elem_store(out + u * V + k, w[k]);
            else elem_store(out + u * V + k, (w[k / 2] >> (16 * (k & 1))) & 0xffffu);
        }
}

template <typename T, bool ALIGNED>
static __global__ void __launch_bounds__(kThreads)
    lamport_v9(const T *x, T *out, int64_t n, int64_t chunk, peers P, lamport_bufs L)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    kl::pdl_wait();    /* the previous kernel has ended: x, the epoch and the bookkeeping are final */
    const uint32_t e = begin_call(P);
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    const int64_t units = (n + V - 1) / V; /* the last one partial when V does not divide n */
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t mine0 = P.rank * chunk; /* our slice: units [mine0, mine0 + mine) */
    const int64_t mine = units - mine0 < 0 ? 0 : units - mine0 > chunk ? chunk : units - mine0;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Shot 1: each peer's slice of our x into our slot of this call's set in that peer's buffer. */
    for (int64_t j = first; j < chunk; j += stride)
        for (int c = 0; c < P.world; c++) {
            const int64_t u = c * chunk + j;
            if (c != P.rank && u < units) lamport_slot<uint4>(L, P, c, set, P.rank)[j] = unit_sendable<T>(x_unit<T, ALIGNED>(x, u, n));
        }
    stamp(P, KL_AR_T_COPIED);

    /* Off the critical path, while shot 1 travels: empty the set the previous call used. */
    empty_set(L, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)chunk * 32; /* both halves of a slot */

    /* Our slice: every rank's unit, ours from x as sent, the peers' polled in our own slots; the
     * sum to every peer's slot `rank`, second half (shot 2), and to our out. */
    for (int64_t j = first; j < mine; j += stride) {
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
            if (s == P.rank) w[s] = unit_sendable<T>(x_unit<T, ALIGNED>(x, mine0 + j, n));
        const uint4 v = unit_sendable<T>(sum_units<T>(w, P.world));
        for (int s = 0; s < P.world; s++)
            if (s != P.rank) lamport_slot<uint4>(L, P, s, set, P.rank)[chunk + j] = v;
        out_unit<T, ALIGNED>(out, mine0 + j, n, v);
    }
    stamp(P, KL_AR_T_REDUCED);

    /* The other slices, as their owners reduced them: polled in our slots, copied out bit for bit. */
    for (int64_t j = first; j < chunk; j += stride) {
        uint4 w[KL_AR_MAX_RANKS];
#pragma unroll
        for (int c = 0; c < KL_AR_MAX_RANKS; c++)
            if (c < P.world && c != P.rank && c * chunk + j < units)
                w[c] = ld_volatile_v4(lamport_slot<uint4>(L, P, P.rank, set, c) + chunk + j);
#pragma unroll
        for (int c = 0; c < KL_AR_MAX_RANKS; c++)
            if (c < P.world && c != P.rank && c * chunk + j < units) {
                if (unit_empty<T>(w[c])) w[c] = wait_unit<T>(P, lamport_slot<uint4>(L, P, P.rank, set, c) + chunk + j, e, c);
                out_unit<T, ALIGNED>(out, c * chunk + j, n, w[c]);
            }
    }
    stamp(P, KL_AR_T_GATHERED);
    end_call(P, e);
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    const unsigned needs = KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT;
    cudaError_t rc = kl_allreduce_check_params(p, stream, needs, "v9_lamport_twoshot");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const int64_t units = ((int64_t)p->n * (int64_t)kl_dtype_size(p->dtype) + 15) / 16;
    const int64_t chunk = (units + p->comm->world - 1) / p->comm->world; /* units per slice */
    /* Both halves of a slot: with a capacity of whole 256-byte blocks holding n, they always fit. */
    if ((size_t)chunk * 32 > p->comm->capacity) {
        fprintf(stderr, "allreduce v9_lamport_twoshot: 2 x %lld slice bytes exceed a slot's %zu (n=%lld)\n",
                (long long)chunk * 16, p->comm->capacity, (long long)p->n);
        return cudaErrorNotSupported;
    }
    const unsigned grid = grid_for(chunk, p->comm);
    const bool pdl = kl::this_device().cc >= 90;
    KL_DISPATCH_FLOAT(p->dtype, T, {
        rc = aligned16(p) ? kl::launch_pdl(lamport_v9<T, true>, grid, kThreads, pdl, stream, (const T *)p->x, (T *)p->out,
                                           p->n, chunk, make_peers(p), make_lamport(p))
                          : kl::launch_pdl(lamport_v9<T, false>, grid, kThreads, pdl, stream, (const T *)p->x, (T *)p->out,
                                           p->n, chunk, make_peers(p), make_lamport(p));
    });
    return rc;
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v9_lamport_twoshot, ops, .min_cc = 70,
           .summary = "two-shot without a barrier: slices pushed to their owners, reduced slices pushed back, both polled on the sentinel");
