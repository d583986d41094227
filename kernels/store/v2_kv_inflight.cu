/* v2_kv_inflight: K and V loads of a token all in flight before any store; group sized to the row.
 *
 * What changed from v1: v1 walks K then V with one 16-byte load per lane in flight. Here a
 * group of G threads (a power of two, 1..256) owns a token, sized so each thread takes up to
 * kUnroll units of the row, and it issues those units of BOTH K and V (2 x kUnroll 16-byte
 * loads) before its first store: with 8 kv heads x 128 bf16 (2 KB rows, 128 units) G = 32, one
 * warp per token and one DRAM round trip per token instead of 8. Narrow rows pack several
 * tokens per warp. 128 bytes in flight per thread (256 KB/SM at full occupancy) covers HBM
 * latency many times over.
 * Sequential and random slots cost the same here: a token's cache row is 2 KB, contiguous and
 * 16-byte aligned, so a random slot is still 16 full 128-byte lines, never a partial-line write;
 * reads of k and v are sequential either way. K and V loads use the streaming hint (read once);
 * cache stores are plain: attention reads them back soon.
 * Bound: DRAM bandwidth (prefill-8k: 32 MB read + 32 MB written).
 * Run alone: build/kernlab bench store --variant v2_kv_inflight */
#include "kernels/common.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kThreads = 256; /* per block; 256 / G tokens per block */
constexpr int kUnroll = 4;    /* units of K and of V per thread per trip: 8 loads in flight */

static __device__ unsigned bad_slot; /* see store.h: set when a slot >= num_slots is skipped */

template <typename U> __device__ __forceinline__ U load_stream(const U *p) { return *p; }
template <> __device__ __forceinline__ uint4 load_stream<uint4>(const uint4 *p) { return __ldcs(p); }

template <typename U>
static __global__ void __launch_bounds__(kThreads)
    store_v2(const U *__restrict__ k, const U *__restrict__ v, const int64_t *__restrict__ slots, U *k_cache,
             U *v_cache, int64_t num_tokens, int64_t units, int64_t num_slots, int group_log2)
{
    const int G = 1 << group_log2;
    const int64_t t = blockIdx.x * (int64_t)(kThreads >> group_log2) + (threadIdx.x >> group_log2);
    const int g = threadIdx.x & (G - 1);
    if (t >= num_tokens) return;
    const int64_t slot = slots[t];
    if (slot < 0) return;
    if (slot >= num_slots) {
        if (g == 0) bad_slot = 1;
        return;
    }
    const U *ks = k + t * units, *vs = v + t * units;
    U *kd = k_cache + slot * units, *vd = v_cache + slot * units;
    /* Unit j = base + g + r * G: consecutive threads take consecutive units (coalesced). */
    for (int64_t base = 0; base < units; base += (int64_t)G * kUnroll) {
        U kv[kUnroll], vv[kUnroll];
#pragma unroll
        for (int r = 0; r < kUnroll; r++) {
            const int64_t j = base + g + (int64_t)r * G;
            if (j < units) kv[r] = load_stream(ks + j), vv[r] = load_stream(vs + j);
        }
#pragma unroll
        for (int r = 0; r < kUnroll; r++) {
            const int64_t j = base + g + (int64_t)r * G;
            if (j < units) kd[j] = kv[r], vd[j] = vv[r];
        }
    }
}

template <typename U>
static void launch_u(const struct kl_store_params *p, cudaStream_t stream)
{
    const int64_t units = p->num_kv_heads * p->head_dim * (int64_t)kl_dtype_size(p->dtype) / (int64_t)sizeof(U);
    /* Smallest power-of-two group that covers the row in one trip, capped at the block. */
    int group_log2 = 0;
    while ((1 << group_log2) < kThreads && ((int64_t)kUnroll << group_log2) < units) group_log2++;
    const int64_t per_block = kThreads >> group_log2;
    const unsigned blocks = (unsigned)((p->num_tokens + per_block - 1) / per_block);
    store_v2<U><<<blocks, kThreads, 0, stream>>>((const U *)p->k, (const U *)p->v, p->slots, (U *)p->k_cache,
                                                 (U *)p->v_cache, p->num_tokens, units, p->num_slots, group_log2);
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_params(p, "v2_kv_inflight");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    switch (kl_store_unit_bytes(p)) {
    case 16: launch_u<uint4>(p, stream); break;
    case 8: launch_u<uint2>(p, stream); break;
    case 4: launch_u<uint32_t>(p, stream); break;
    default: launch_u<uint16_t>(p, stream);
    }
    return kl_store_validate_end(p, flag, stream, "v2_kv_inflight");
}

KL_VARIANT(store, v2_kv_inflight, launch, .min_cc = 70,
           .summary = "thread group per token sized to the row, all K and V loads in flight before the stores");
