/* v3_pdl_one_trip: a decode batch's slots read before the PDL wait; one 16-byte unit of K or V per thread.
 *
 * What changed from v2, for few tokens: v2 gives a token one warp walking 4 K and 4 V units a lane, and each
 * launch starts cold (launch, slot, k/v, store in series). Here a thread owns one unit (grid tokens x [K
 * blocks, V blocks], no loop) and, launched with Programmatic Dependent Launch (sm_90), loads its slot
 * BEFORE griddepcontrol.wait (the scheduler's slot mapping: see the kernel); k and v are the previous
 * kernel's output, so after the wait the critical path is one DRAM round trip for them and the store.
 * Many tokens (more threads than half the GPU holds): v2_kv_inflight's own launcher, unchanged.
 * Predicted decode-64-random: ~1.75 us on H200, ~1.85 us on H100, under a plain copy of the same bytes.
 * Run alone: build/kernlab bench store --variant v3_pdl_one_trip --workload decode-64-random */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kThreads = 256;       /* at most, per block; a row (K or V) takes ceil(units / 256) blocks */
constexpr int kThreadsPerSm = 1024; /* few tokens: the grid fits beside the previous kernel's blocks */

static __device__ unsigned bad_slot; /* see store.h: set when a slot >= num_slots is skipped */

template <typename U> __device__ __forceinline__ U load_stream(const U *p) { return *p; }
template <> __device__ __forceinline__ uint4 load_stream<uint4>(const uint4 *p) { return __ldcs(p); }

/* blockIdx.y < per_row: K blocks; the rest: V blocks of the same token. */
template <typename U>
static __global__ void __launch_bounds__(kThreads)
    store_v3(const U *__restrict__ k, const U *__restrict__ v, const int64_t *__restrict__ slots, U *k_cache,
             U *v_cache, int units, int per_row, int64_t num_slots)
{
    const int64_t t = blockIdx.x;
    const bool is_v = (int)blockIdx.y >= per_row;
    const int j = ((int)blockIdx.y - (is_v ? per_row : 0)) * blockDim.x + threadIdx.x;
    /* Before the wait: the slot mapping, written before the forward pass (copied from the host, or by
     * the cache allocator's kernel ahead of the embedding), never by the kernel just before this one. */
    const int64_t slot = __ldg(slots + t);
    kl::pdl_release();
    kl::pdl_wait(); /* k and v come from the kernel before us (QKV GEMM, RoPE) */
    if (slot < 0 || j >= units) return;
    if (slot >= num_slots) {
        if (j == 0) bad_slot = 1;
        return;
    }
    const U x = load_stream((is_v ? v : k) + t * units + j); /* read once: evict-first */
    /* Plain store: attention reads the cache rows back soon. */
    (is_v ? v_cache : k_cache)[slot * units + j] = x;
}

template <typename U>
static cudaError_t launch_u(const struct kl_store_params *p, int64_t units, bool pdl, cudaStream_t stream)
{
    unsigned per_row, threads;
    kl::split_even(units, kThreads, &per_row, &threads);
    return kl::launch_pdl(store_v3<U>, dim3((unsigned)p->num_tokens, 2 * per_row), dim3(threads), pdl, stream,
                          (const U *)p->k, (const U *)p->v, p->slots, (U *)p->k_cache, (U *)p->v_cache, (int)units,
                          (int)per_row, p->num_slots);
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_params(p, "v3_pdl_one_trip");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const kl::device_caps dev = kl::this_device();
    const int unit = kl_store_unit_bytes(p);
    const int64_t units = p->num_kv_heads * p->head_dim * (int64_t)kl_dtype_size(p->dtype) / unit;
    if (p->num_tokens * 2 * ((units + 31) / 32 * 32) > (int64_t)dev.sms * kThreadsPerSm) {
        /* Many tokens: bandwidth-bound, where v2's loads-in-flight copy is measured best. */
        const auto v2 = (kl_store_launch_fn)kl_variant_launcher("store", "v2_kv_inflight", "v3_pdl_one_trip");
        return v2 ? v2(p, stream) : cudaErrorInvalidValue;
    }
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    KL_DISPATCH_UNIT(unit, U, rc = launch_u<U>(p, units, dev.cc >= 90, stream));
    if (rc != cudaSuccess) return rc;
    return kl_store_validate_end(p, flag, stream, "v3_pdl_one_trip");
}

KL_VARIANT(store, v3_pdl_one_trip, launch, .min_cc = 70,
           .summary = "few tokens: slot loaded before a PDL wait, one 16 B unit of K or V per thread; else v2");
