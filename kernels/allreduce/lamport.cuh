/* Device building blocks of the Lamport all-reduce variants: no barrier, the data is its own flag.
 *
 * Each rank writes its x straight into a slot of every peer's Lamport buffer (slot = the writer's
 * rank, in the set of this call), and each reader polls its own slots until no element holds the
 * sentinel (kernels/allreduce/allreduce.h: KL_AR_LAMPORT_EMPTY16 in every 16-bit half, a NaN of
 * every float type). There is no flag to go stale and no round trip before the reads: a reader
 * sums a unit the moment the last peer's copy of it lands.
 *
 * The sentinel must never be data. A writer sends an element equal to it as the next NaN down
 * (0x7ffe in 16 bits, 0x7fff7ffe in fp32): the sum is NaN either way, and every rank, its own
 * contribution included, sums the value as sent, so the ranks' bits stay equal. Signed zeros
 * are untouched (a -0.0 sentinel would have to send -0 as +0 and lose the sign of a zero sum).
 *
 * Three sets rotate by call number e (the device-side epoch of peer.cuh): call e writes and reads
 * set e % 3 and empties, in the reader's own buffer, set (e + 2) % 3, the one call e - 1 used.
 * Why that is safe without a barrier:
 *   - Call e - 1 read every slot of that set to the end, so no write to it is still in flight.
 *   - The next writes into it are call e + 2's. A peer starts them only after reading this rank's
 *     data of call e + 1, which this rank sends only after its call e (and its emptying) ended.
 *   - Call e's own set (e % 3) was emptied by call e - 2, which ended before call e - 1 began.
 * With two sets the set emptied in call e would be call e + 1's, which a fast peer may already be
 * writing: its data would be wiped and the reader would wait for it forever.
 * How much to empty is what the previous call wrote: the reader records its slots' byte count per
 * set (signal->lamport_dirty), since n may change from call to call.
 *
 * Loads of our own slots are ld.volatile (not cached in L1: peers write them while we poll);
 * every element is checked, because a 16-byte store from a peer may become visible piecewise. */
#pragma once

#include "kernels/allreduce/peer.cuh"

namespace kl_ar {

/* Every rank's Lamport buffer, by value (graph-safe, as peers). */
struct lamport_bufs {
    char *base[KL_AR_MAX_RANKS];
};

inline lamport_bufs make_lamport(const kl_allreduce_params *p)
{
    lamport_bufs L = {};
    for (int s = 0; s < p->comm->world; s++) L.base[s] = (char *)p->comm->lamport[s];
    return L;
}

/* The slot that rank `from` writes in rank `owner`'s buffer, in set `set`. */
template <typename U> __device__ __forceinline__ U *lamport_slot(const lamport_bufs &L, const peers &P, int owner, uint32_t set, int from)
{
    return (U *)(L.base[owner] + ((size_t)set * P.world + from) * P.capacity);
}

using kl::ptx::ld_volatile_v4;

/* One 32-bit word: whether any element of type T in it is the sentinel, and the word as sent. */
template <typename T> __device__ __forceinline__ bool word_empty(uint32_t w)
{
    if constexpr (sizeof(T) == 4) return w == KL_AR_LAMPORT_EMPTY32;
    else return (w & 0xffffu) == KL_AR_LAMPORT_EMPTY16 || (w >> 16) == KL_AR_LAMPORT_EMPTY16;
}

template <typename T> __device__ __forceinline__ uint32_t word_sendable(uint32_t w)
{
    if constexpr (sizeof(T) == 4) {
        return w == KL_AR_LAMPORT_EMPTY32 ? KL_AR_LAMPORT_EMPTY32 - 1 : w;
    } else {
        if ((w & 0xffffu) == KL_AR_LAMPORT_EMPTY16) w -= 1;
        if ((w >> 16) == KL_AR_LAMPORT_EMPTY16) w -= 1u << 16;
        return w;
    }
}

template <typename T> __device__ __forceinline__ bool unit_empty(const uint4 &u)
{
    return word_empty<T>(u.x) || word_empty<T>(u.y) || word_empty<T>(u.z) || word_empty<T>(u.w);
}

template <typename T> __device__ __forceinline__ uint4 unit_sendable(uint4 u)
{
    return make_uint4(word_sendable<T>(u.x), word_sendable<T>(u.y), word_sendable<T>(u.z), word_sendable<T>(u.w));
}

/* A single element (the tail): its bits, as sent, and its emptiness. */
template <typename T> __device__ __forceinline__ uint32_t elem_bits(const T *p)
{
    if constexpr (sizeof(T) == 4) return *(const uint32_t *)p;
    else return *(const unsigned short *)p;
}

template <typename T> __device__ __forceinline__ uint32_t elem_sendable(uint32_t b)
{
    if constexpr (sizeof(T) == 4) return b == KL_AR_LAMPORT_EMPTY32 ? b - 1 : b;
    else return b == KL_AR_LAMPORT_EMPTY16 ? b - 1 : b;
}

template <typename T> __device__ __forceinline__ void elem_store(T *p, uint32_t b)
{
    if constexpr (sizeof(T) == 4) *(uint32_t *)p = b;
    else *(unsigned short *)p = (unsigned short)b;
}

template <typename T> __device__ __forceinline__ uint32_t elem_ld_volatile(const T *p)
{
    if constexpr (sizeof(T) == 4) return *(const volatile uint32_t *)p;
    else return *(const volatile unsigned short *)p;
}

template <typename T> __device__ __forceinline__ float elem_value(uint32_t b)
{
    if constexpr (sizeof(T) == 4) return __uint_as_float(b);
    else if constexpr (std::is_same<T, __half>::value) return __half2float(__ushort_as_half((unsigned short)b));
    else return __bfloat162float(__ushort_as_bfloat16((unsigned short)b));
}

/* Polls until unit p of our slot from rank s holds no sentinel; traps after the timeout with the
 * diagnosis of a data wait (call e, rank s). */
template <typename T> __device__ __forceinline__ uint4 wait_unit(const peers &P, const uint4 *p, uint32_t e, int s)
{
    uint4 u = ld_volatile_v4(p);
    if (!unit_empty<T>(u)) return u;
    const unsigned long long t0 = globaltimer();
    do {
        u = ld_volatile_v4(p);
        if (!unit_empty<T>(u)) return u;
    } while (globaltimer() - t0 < P.spin_timeout_ns);
    barrier_timed_out(P, KL_AR_DATA, s, e, 0);
    return u;
}

template <typename T> __device__ __forceinline__ uint32_t wait_elem(const peers &P, const T *p, uint32_t e, int s)
{
    const uint32_t empty = sizeof(T) == 4 ? KL_AR_LAMPORT_EMPTY32 : KL_AR_LAMPORT_EMPTY16;
    uint32_t b = elem_ld_volatile(p);
    if (b != empty) return b;
    const unsigned long long t0 = globaltimer();
    do {
        b = elem_ld_volatile(p);
        if (b != empty) return b;
    } while (globaltimer() - t0 < P.spin_timeout_ns);
    barrier_timed_out(P, KL_AR_DATA, s, e, 0);
    return b;
}

/* Units of 16 bytes summed over the ranks in rank order (float32, from rank 0's value, rounded
 * once), as sum_vec of peer.cuh but from registers. */
template <typename T> __device__ __forceinline__ uint4 sum_units(const uint4 (&w)[KL_AR_MAX_RANKS], int world)
{
    constexpr int V = 16 / sizeof(T);
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = kl::elem_f32<T>(w[0], k);
#pragma unroll
    for (int s = 1; s < KL_AR_MAX_RANKS; s++)
        if (s < world) {
#pragma unroll
            for (int k = 0; k < V; k++) acc[k] += kl::elem_f32<T>(w[s], k);
        }
    return kl::pack<T>(acc);
}

/* Empties, in this rank's buffer, the peers' slots of `set` up to `bytes` each (the grid shares
 * the work). */
__device__ __forceinline__ void empty_set(const lamport_bufs &L, const peers &P, uint32_t set, uint64_t bytes)
{
    const int64_t units = (int64_t)((bytes + 15) / 16);
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const uint4 empty = make_uint4(KL_AR_LAMPORT_EMPTY32, KL_AR_LAMPORT_EMPTY32, KL_AR_LAMPORT_EMPTY32, KL_AR_LAMPORT_EMPTY32);
    for (int s = 0; s < P.world; s++) {
        if (s == P.rank) continue;
        uint4 *slot = lamport_slot<uint4>(L, P, P.rank, set, s);
        for (int64_t j = first; j < units; j += stride) slot[j] = empty;
    }
}

/* The forms v14 and v15 use: this rank's own buffer passed as one pointer (own = L.base[P.rank]), and
 * a peer's reached only through a constant index into L. A run-time index into lamport_bufs, which a
 * kernel receives by value, makes the compiler copy the whole array into every thread's local memory.
 * lamport_slot and empty_set stay as they are beside these: written over them, v7-v13 compile to
 * other stack frames and registers than the code their results rows measured. */
/* The address of rank `from`'s slot of `set` in a buffer whose base is b. */
__device__ __forceinline__ char *slot_in(char *b, const peers &P, uint32_t set, int from)
{
    return b + ((size_t)set * P.world + from) * P.capacity;
}

template <typename U> __device__ __forceinline__ U *own_slot(char *own, const peers &P, uint32_t set, int from)
{
    return (U *)slot_in(own, P, set, from);
}

/* u into our slot of `set` in every peer's buffer, at index j (in units of U). */
template <typename U>
__device__ __forceinline__ void send_to_peers(const lamport_bufs &L, const peers &P, uint32_t set, int64_t j, U u)
{
#pragma unroll
    for (int k = 0; k < KL_AR_MAX_RANKS; k++)
        if (k < P.world && k != P.rank) ((U *)slot_in(L.base[k], P, set, P.rank))[j] = u;
}

/* Element i of type T, as bits b, into our slot of `set` in every peer's buffer. */
template <typename T>
__device__ __forceinline__ void send_elem_to_peers(const lamport_bufs &L, const peers &P, uint32_t set, int64_t i,
                                                   uint32_t b)
{
#pragma unroll
    for (int k = 0; k < KL_AR_MAX_RANKS; k++)
        if (k < P.world && k != P.rank) elem_store((T *)slot_in(L.base[k], P, set, P.rank) + i, b);
}

/* empty_set on our own buffer, given as one pointer. */
__device__ __forceinline__ void empty_own_set(char *own, const peers &P, uint32_t set, uint64_t bytes)
{
    const int64_t units = (int64_t)((bytes + 15) / 16);
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    constexpr uint32_t E = KL_AR_LAMPORT_EMPTY32;
    const uint4 empty = make_uint4(E, E, E, E);
    for (int s = 0; s < P.world; s++) {
        if (s == P.rank) continue;
        uint4 *slot = own_slot<uint4>(own, P, set, s);
        for (int64_t j = first; j < units; j += stride)
            slot[j] = empty;
    }
}

} // namespace kl_ar
