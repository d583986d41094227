/* Device building blocks of the custom all-reduce variants: the cross-GPU barrier, the call
 * number (epoch), peer loads, and the sum in rank order. Every custom variant uses these, so
 * the memory-ordering argument is made once, here.
 *
 * The barrier. Block b of every rank meets block b of every other rank (per-block pairing: the
 * work is split over blocks the same way on every rank, so block b only ever reads what block b
 * of a peer wrote). To arrive, thread s of the block stores the call number e into
 * arrive[phase][b][rank] of rank s's signal area with st.release.sys; then it spins on
 * arrive[phase][b][s] of its own area with ld.acquire.sys until the value is >= e. The
 * __syncthreads before the release makes the writes (and reads) of the whole block happen-before
 * it (PTX release is cumulative), and the __syncthreads after the acquire makes the peer's writes
 * visible to the whole block's later loads. Scope .sys: the other side is another GPU; .gpu
 * would order nothing across NVLink.
 *
 * The call number. Flags are never reset: a wait is for "the peer reached this call or later".
 * The number is kept on the device (signal.epoch), not passed by the host, so graph replays and
 * calls queued back to back each get a fresh one without the host. Every block reads it at its
 * start; the last block of the kernel to finish (an atomic count) publishes it. Both the read
 * and the publish see the previous kernel's values through kernel ordering on the one stream.
 * ">= e" rather than "== e": a fast peer can reach the next call's barrier and overwrite the
 * flag before a slow rank has looked (never two calls ahead: that needs this rank's arrival).
 *
 * Staging halves. A rank copies its x into staging region (e & 1) and peers read it there.
 * Call e+2 overwrites the same half only after this rank passed call e+1's barrier, which every
 * peer reached only after finishing call e: so a peer never reads a half being overwritten,
 * even without an end barrier. The variants up to v3 still keep an end barrier; v4 drops it.
 *
 * Timeouts. A wait longer than comm->spin_timeout_ns (a peer died, or a bug) writes what it
 * waited for into comm->diag (mapped host memory) and traps: the launch fails, the rank reports
 * the phase, block and peer, and the parent process kills the others (lab/core/ranks.h). */
#pragma once

#include "kernels/allreduce/allreduce.h"
#include "kernels/common.cuh"
#include "kernels/ptx_sys_scope.cuh"

namespace kl_ar {

constexpr int kThreads = 512; /* threads per block of every custom kernel (>= KL_AR_MAX_RANKS) */

/* What a kernel needs of the communicator, by value (fixed while it lives: graph-safe). */
struct peers {
    char *staging[KL_AR_MAX_RANKS];
    kl_ar_signal *signal[KL_AR_MAX_RANKS];
    kl_ar_diag *diag;
    unsigned long long *trace;
    unsigned long long spin_timeout_ns;
    size_t capacity;
    int rank, world;
};

inline peers make_peers(const kl_allreduce_params *p)
{
    const kl_allreduce_comm *c = p->comm;
    peers P = {};
    for (int s = 0; s < c->world; s++) P.staging[s] = (char *)c->staging[s], P.signal[s] = c->signal[s];
    P.diag = c->diag, P.trace = p->trace, P.spin_timeout_ns = c->spin_timeout_ns, P.capacity = c->capacity;
    P.rank = c->rank, P.world = c->world;
    return P;
}

/* Blocks for `units` pieces of work at kThreads per block: at least 1, at most the communicator's
 * co-resident limit. Depends only on values equal on every rank, so every rank launches the same grid. */
inline unsigned grid_for(int64_t units, const kl_allreduce_comm *c)
{
    int64_t g = (units + kThreads - 1) / kThreads;
    return (unsigned)(g < 1 ? 1 : g > c->blocks ? c->blocks : g);
}

/* Whole 16-byte units in n elements: what a vectorised variant sizes its grid by (the last
 * n % (16/size) elements are its tail). */
inline int64_t units_of(const kl_allreduce_params *p) { return p->n * (int64_t)kl_dtype_size(p->dtype) / 16; }
/* Whether this rank's x and out allow 16-byte accesses. It may differ between ranks (each has its
 * own buffers), so it may only change HOW a thread touches x and out (load_unit, store_unit),
 * never which block owns which unit: the grid and the mapping come from n alone. */
inline bool aligned16(const kl_allreduce_params *p) { return ((uintptr_t)p->x | (uintptr_t)p->out) % 16 == 0; }

/* ---- memory order and time: kernels/ptx_sys_scope.cuh ---- */

using kl::ptx::globaltimer;
using kl::ptx::ld_acquire_sys;
using kl::ptx::st_release_sys;

/* Peer data bypasses L1 (ld.global.cg, cached in L2 only): L1 is not coherent, and a line of a
 * peer's staging read in an earlier call must never answer for this call's data. Never the
 * read-only path (ld.global.nc) either: peers write these buffers while our kernel runs. */
__device__ __forceinline__ uint4 ld_peer(const uint4 *p) { return __ldcg(p); }
template <typename T> __device__ __forceinline__ float ld_peer_elem(const T *p)
{
    if constexpr (sizeof(T) == 4) {
        return __ldcg((const float *)p);
    } else {
        const unsigned short bits = __ldcg((const unsigned short *)p);
        if constexpr (std::is_same<T, __half>::value) return __half2float(__ushort_as_half(bits));
        else return __bfloat162float(__ushort_as_bfloat16(bits));
    }
}

/* An element copied bit for bit from a peer (no conversion). */
template <typename T> __device__ __forceinline__ T ld_peer_raw(const T *p)
{
    if constexpr (sizeof(T) == 4) {
        return __ldcg((const float *)p);
    } else {
        const unsigned short bits = __ldcg((const unsigned short *)p);
        if constexpr (std::is_same<T, __half>::value) return __ushort_as_half(bits);
        else return __ushort_as_bfloat16(bits);
    }
}

/* ---- trace, call number, barrier ---- */

__device__ __forceinline__ void stamp(const peers &P, int k)
{
    if (P.trace && blockIdx.x == 0 && threadIdx.x == 0) P.trace[k] = globaltimer();
}

/* Traced calls only, thread 0 of every block, once its block is done: block 0's exit stamp, and the
 * grid's last exit (a reduction to memory, which the block does not wait for). */
__device__ __forceinline__ void stamp_block_exit(const peers &P)
{
    if (P.trace && threadIdx.x == 0) {
        const unsigned long long t = globaltimer();
        if (blockIdx.x == 0) P.trace[KL_AR_T_EXIT] = t;
        atomicMax(&P.trace[KL_AR_T_LAST_EXIT], t);
    }
}

/* This call's number, the same in every block. */
__device__ __forceinline__ uint32_t begin_call(const peers &P)
{
    __shared__ uint32_t e;
    if (threadIdx.x == 0) e = *(volatile uint32_t *)&P.signal[P.rank]->epoch + 1;
    stamp(P, KL_AR_T_ENTRY);
    __syncthreads();
    return e;
}

/* Publishes call e once every block is done with it (see the file comment). Every block must
 * call this last. */
__device__ __forceinline__ void end_call(const peers &P, uint32_t e)
{
    __syncthreads();
    stamp_block_exit(P);
    if (threadIdx.x == 0) {
        kl_ar_signal *me = P.signal[P.rank];
        __threadfence(); /* this block's read of epoch, long done, is ordered before its count */
        if (atomicAdd(&me->done, 1u) == gridDim.x - 1) {
            /* Every block has counted itself, so every block has read epoch: publish. */
            me->done = 0;
            *(volatile uint32_t *)&me->epoch = e;
        }
    }
}

/* begin_call and end_call without end_call's fence, for a kernel whose stores go to peers: a fence
 * orders those stores too, so it can hold the block's count until NVLink has delivered them, which
 * the call number does not need. Here thread 0 reads the call number with acquire instead, so its
 * count, whenever it comes, is performed after that read; and a one-block grid, whose number no other
 * block reads, publishes it at once and counts nothing. Both meet the file comment's rule (every
 * block has read the number before it is published) and leave the same epoch for any variant that
 * runs next. */
__device__ __forceinline__ uint32_t begin_call_unfenced(const peers &P)
{
    __shared__ uint32_t e;
    if (threadIdx.x == 0) {
        kl_ar_signal *me = P.signal[P.rank];
        e = kl::ptx::ld_acquire_gpu(&me->epoch) + 1;
        if (gridDim.x == 1) *(volatile uint32_t *)&me->epoch = e;
    }
    stamp(P, KL_AR_T_ENTRY);
    __syncthreads();
    return e;
}

/* The block's count of begin_call_unfenced's call: the last block of a grid of several to count
 * itself publishes e. Thread 0 read the number with acquire, so the count may come any time after
 * begin_call_unfenced: end_call_unfenced counts last thing, the variants from v17 on as soon as their
 * sends are out, so that the count's round trip to L2 (a returning atomic) overlaps the peers' flight
 * instead of ending the call. */
__device__ __forceinline__ void count_call_done(const peers &P, uint32_t e)
{
    if (gridDim.x > 1 && threadIdx.x == 0) {
        kl_ar_signal *me = P.signal[P.rank];
        if (atomicAdd(&me->done, 1u) == gridDim.x - 1) {
            me->done = 0;
            *(volatile uint32_t *)&me->epoch = e;
        }
    }
}

/* Traced calls only: the exit stamps (stamp_block_exit), once every thread of the block is done. */
__device__ __forceinline__ void stamp_exit(const peers &P)
{
    if (P.trace) {
        __syncthreads();
        stamp_block_exit(P);
    }
}

__device__ __forceinline__ void end_call_unfenced(const peers &P, uint32_t e)
{
    stamp_exit(P);
    count_call_done(P, e);
}

static __device__ __noinline__ void barrier_timed_out(const peers &P, int phase, int s, uint32_t e, uint32_t seen)
{
    volatile kl_ar_diag *d = P.diag;
    if (d) {
        d->phase = phase, d->block = (int32_t)blockIdx.x, d->peer = s, d->epoch = e, d->seen = seen;
        __threadfence_system();
        d->tripped = 1;
        __threadfence_system();
    }
    __trap();
}

/* Spins until rank s's flag says it reached call e (or later); traps after the timeout. */
__device__ __forceinline__ void wait_flag(const peers &P, const uint32_t *flag, uint32_t e, int phase, int s)
{
    uint32_t v = ld_acquire_sys(flag);
    if ((int32_t)(v - e) >= 0) return;
    const unsigned long long t0 = globaltimer();
    do {
        v = ld_acquire_sys(flag);
        if ((int32_t)(v - e) >= 0) return;
    } while (globaltimer() - t0 < P.spin_timeout_ns);
    barrier_timed_out(P, phase, s, e, v);
}

/* Block b of every rank meets here for call e (see the file comment for the ordering). Thread
 * s < world talks to rank s; for s == rank it writes and reads its own flag, which keeps the code
 * uniform at the price of one local store. */
__device__ __forceinline__ void barrier(const peers &P, int phase, uint32_t e)
{
    __syncthreads(); /* every thread of the block is done with the work before this barrier */
    if ((int)threadIdx.x < P.world) {
        const int s = threadIdx.x;
        st_release_sys(&P.signal[s]->arrive[phase][blockIdx.x][P.rank], e);
        wait_flag(P, &P.signal[P.rank]->arrive[phase][blockIdx.x][s], e, phase, s);
    }
    __syncthreads(); /* no thread reads peer data before every peer has arrived */
}

/* ---- buffers and the sum ---- */

template <typename T> __device__ __forceinline__ T *region(const peers &P, int s, int r)
{
    return (T *)(P.staging[s] + (size_t)r * P.capacity);
}
/* Rank s's copy of its x for call e, and its reduced chunk (two-shot). */
template <typename T> __device__ __forceinline__ T *staged(const peers &P, int s, uint32_t e) { return region<T>(P, s, e & 1); }
template <typename T> __device__ __forceinline__ T *reduced(const peers &P, int s, uint32_t e) { return region<T>(P, s, 2 + (e & 1)); }

/* Element i summed over the ranks' staged copies in rank order, float32, rounded once. The
 * accumulator starts from rank 0's value, not from 0.0f, so -0 + -0 stays -0 as in IEEE. */
template <typename T> __device__ __forceinline__ T sum_elem(const peers &P, uint32_t e, int64_t i)
{
    float acc = ld_peer_elem(staged<T>(P, 0, e) + i);
    for (int s = 1; s < P.world; s++) acc += ld_peer_elem(staged<T>(P, s, e) + i);
    return kl::from_f32<T>(acc);
}

/* Unit j (16 bytes) of this rank's x, and the store of unit j of out: one 16-byte access when
 * aligned, else element by element (exact: the elements go through float32 unchanged). */
template <typename T, bool ALIGNED> __device__ __forceinline__ uint4 load_unit(const T *x, int64_t j)
{
    constexpr int V = 16 / sizeof(T);
    if constexpr (ALIGNED) {
        return ((const uint4 *)x)[j];
    } else {
        float v[V];
#pragma unroll
        for (int k = 0; k < V; k++) v[k] = kl::to_f32(x[j * V + k]);
        return kl::pack<T>(v);
    }
}

template <typename T, bool ALIGNED> __device__ __forceinline__ void store_unit(T *out, int64_t j, const uint4 &u)
{
    constexpr int V = 16 / sizeof(T);
    if constexpr (ALIGNED) {
        ((uint4 *)out)[j] = u;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) out[j * V + k] = kl::from_f32<T>(kl::elem_f32<T>(u, k));
    }
}

/* 16-byte unit j summed over the ranks, in rank order. The loads of all ranks are issued before
 * the first add (unrolled to the most ranks, predicated on world), so they are in flight together:
 * one NVLink round trip, not world of them. */
template <typename T> __device__ __forceinline__ uint4 sum_vec(const peers &P, uint32_t e, int64_t j)
{
    constexpr int V = 16 / sizeof(T);
    uint4 w[KL_AR_MAX_RANKS];
#pragma unroll
    for (int s = 0; s < KL_AR_MAX_RANKS; s++)
        if (s < P.world) w[s] = ld_peer(staged<uint4>(P, s, e) + j);
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = kl::elem_f32<T>(w[0], k);
#pragma unroll
    for (int s = 1; s < KL_AR_MAX_RANKS; s++)
        if (s < P.world) {
#pragma unroll
            for (int k = 0; k < V; k++) acc[k] += kl::elem_f32<T>(w[s], k);
        }
    return kl::pack<T>(acc);
}

} // namespace kl_ar
