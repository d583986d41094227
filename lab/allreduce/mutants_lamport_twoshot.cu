/* Deliberately wrong Lamport two-shots, linked into the tests only: each is v9_lamport_twoshot (one
 * element per thread, no 16-byte units; slot s holds rank s's x slice of ours, then, from a 16-byte
 * boundary, its reduced slice) with one bug of the kind its design argues away:
 *   twoshot_gather_never_empty  only the first half of each slot (the x slices) is emptied: the
 *                               reduced slices of call e are still there in call e + 3, and the
 *                               copy-out takes them at once (a stale slice from three calls back);
 *                               the back-to-back calls see another call's sums
 *   twoshot_polls_world_minus_1 the reducer polls world - 1 sources: the last rank's x slice is
 *                               read once, arrived or not; with that rank late (the back-to-back
 *                               calls), or started second (any one-call job), it reads the
 *                               sentinel and sums to NaN
 *   twoshot_raw_reduced         the reduced slice is sent as it is: a NaN sum rounds to the
 *                               sentinel's bits in fp16 and bf16, and the peers wait for it until
 *                               the spin timeout (the sentinel-valued inputs)
 *   twoshot_owner_keeps_raw     the peers get the NaN sum as sent (the next NaN down), the owner
 *                               keeps the rounded bits (the sentinel's): the ranks' bits differ
 *                               (the sentinel-valued inputs) */
#include "kernels/allreduce/lamport.cuh"
#include "lab/core/registry.h"

using namespace kl_ar;

enum bug { GATHER_NEVER_EMPTY, POLLS_WORLD_MINUS_1, RAW_REDUCED, OWNER_KEEPS_RAW };

/* chunk: elements per slice; half: where the reduced slice starts in a slot (elements, chunk
 * rounded up to 16 bytes, so emptying the first half never touches the second). */
template <typename T, int BUG>
static __global__ void __launch_bounds__(kThreads)
    mutant(const T *x, T *out, int64_t n, int64_t chunk, int64_t half, peers P, lamport_bufs L)
{
    const uint32_t e = begin_call(P), set = e % KL_AR_LAMPORT_SETS, previous = (e + 2) % KL_AR_LAMPORT_SETS;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t mine0 = P.rank * chunk, mine = n - mine0 < 0 ? 0 : n - mine0 > chunk ? chunk : n - mine0;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous];
    for (int64_t j = first; j < chunk; j += stride)
        for (int c = 0; c < P.world; c++)
            if (c != P.rank && c * chunk + j < n)
                elem_store(lamport_slot<T>(L, P, c, set, P.rank) + j, elem_sendable<T>(elem_bits(x + c * chunk + j)));
    /* The record is the whole slot's; GATHER_NEVER_EMPTY empties its first half only. */
    empty_set(L, P, previous, BUG == GATHER_NEVER_EMPTY ? (uint64_t)half * sizeof(T) : previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(half + chunk) * sizeof(T);
    for (int64_t j = first; j < mine; j += stride) {
        float acc = 0.f;
        for (int s = 0; s < P.world; s++) {
            const T *slot = lamport_slot<T>(L, P, P.rank, set, s) + j;
            const uint32_t b = s == P.rank                                     ? elem_sendable<T>(elem_bits(x + mine0 + j))
                               : BUG == POLLS_WORLD_MINUS_1 && s == P.world - 1 ? elem_ld_volatile(slot)
                                                                                 : wait_elem<T>(P, slot, e, s);
            acc = s == 0 ? elem_value<T>(b) : acc + elem_value<T>(b);
        }
        const uint32_t raw = kl::bits_of<T>(acc), sent = elem_sendable<T>(raw);
        for (int s = 0; s < P.world; s++)
            if (s != P.rank) elem_store(lamport_slot<T>(L, P, s, set, P.rank) + half + j, BUG == RAW_REDUCED ? raw : sent);
        elem_store(out + mine0 + j, BUG == OWNER_KEEPS_RAW ? raw : sent);
    }
    for (int64_t j = first; j < chunk; j += stride)
        for (int c = 0; c < P.world; c++)
            if (c != P.rank && c * chunk + j < n)
                elem_store(out + c * chunk + j, wait_elem<T>(P, lamport_slot<T>(L, P, P.rank, set, c) + half + j, e, c));
    end_call(P, e);
}

template <int BUG>
static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT, "mutant");
    if (rc != cudaSuccess || p->n == 0) return rc;
    const int64_t es = (int64_t)kl_dtype_size(p->dtype), chunk = (p->n + p->comm->world - 1) / p->comm->world;
    const int64_t half = (chunk * es + 15) / 16 * 16 / es;
    if ((size_t)((half + chunk) * es) > p->comm->capacity) return cudaErrorNotSupported;
    const unsigned grid = grid_for(chunk, p->comm);
    KL_DISPATCH_FLOAT(p->dtype, T,
                      mutant<T, BUG><<<grid, kThreads, 0, stream>>>((const T *)p->x, (T *)p->out, p->n, chunk, half,
                                                                      make_peers(p), make_lamport(p)));
    return cudaGetLastError();
}

template <int BUG> KL_AR_OPS(ops, launch<BUG>, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, mutant_twoshot_gather_never_empty, ops<GATHER_NEVER_EMPTY>, .min_cc = 70,
           .summary = "Lamport two-shot whose reduced slices are never emptied: call e + 3 copies out call e's", .mutant = 1);
KL_VARIANT(allreduce, mutant_twoshot_polls_world_minus_1, ops<POLLS_WORLD_MINUS_1>, .min_cc = 70,
           .summary = "Lamport two-shot whose reducer polls world - 1 sources and reads the last one once", .mutant = 1);
KL_VARIANT(allreduce, mutant_twoshot_raw_reduced, ops<RAW_REDUCED>, .min_cc = 70,
           .summary = "Lamport two-shot sending a NaN sum as the sentinel's bits: it never arrives", .mutant = 1);
KL_VARIANT(allreduce, mutant_twoshot_owner_keeps_raw, ops<OWNER_KEEPS_RAW>, .min_cc = 70,
           .summary = "Lamport two-shot whose owner keeps a NaN sum's raw bits, its peers the converted ones", .mutant = 1);
