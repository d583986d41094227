/* v2_rows_groups: a row-width-aware thread group per token, 4 loads in flight per thread.
 *
 * What changed from v1: v1 gives every row one warp and one 16-byte load per lane per trip, so a
 * 8 KB row takes 16 dependent DRAM round trips and narrow rows waste most lanes. Here a group
 * of G threads (a power of two, 1..256) owns a row, sized so each thread copies about kUnroll
 * units: a 4096-wide bf16 row (512 units of 16 B) gets G = 128 (4 warps: several warps per wide
 * row, one round trip), a 7-wide row gets G = 2 (128 rows per block: several rows per warp).
 * Each thread issues its kUnroll loads before its first store, so 64 bytes per thread are in
 * flight: with 2048 threads per SM that is 128 KB/SM, far above the ~20 KB/SM that Little's law
 * asks of HBM3 at ~600 ns. Table rows are read once, so the loads use the streaming hint
 * (ld.global.cs): they should not evict what the rest of the step keeps in L2.
 * Bound: DRAM bandwidth (prefill-8k: 64 MB read + 64 MB written); decode-64 is one round trip.
 * Run alone: build/kernlab bench index --variant v2_rows_groups */
#include "kernels/common.cuh"
#include "kernels/index/index.h"
#include "kernels/variant.h"

constexpr int kThreads = 256; /* per block; 256 / G rows per block */
constexpr int kUnroll = 4;    /* units per thread per trip: 4 x 16 B loads in flight */

/* Streaming loads for 16-byte units; smaller units (odd rows) take the plain path. */
template <typename U> __device__ __forceinline__ U load_stream(const U *p) { return *p; }
template <> __device__ __forceinline__ uint4 load_stream<uint4>(const uint4 *p) { return __ldcs(p); }

template <typename U>
static __global__ void __launch_bounds__(kThreads)
    index_v2(const U *__restrict__ table, const int32_t *__restrict__ ids, U *out, int64_t num_tokens, int64_t vocab,
             int64_t units, int64_t vocab_start, int group_log2)
{
    const int G = 1 << group_log2;
    const int64_t t = blockIdx.x * (int64_t)(kThreads >> group_log2) + (threadIdx.x >> group_log2);
    const int g = threadIdx.x & (G - 1);
    if (t >= num_tokens) return;
    const int64_t row = (int64_t)ids[t] - vocab_start;
    const bool inside = row >= 0 && row < vocab;
    const U *src = table + (inside ? row : 0) * units;
    U *dst = out + t * units;
    /* Unit j = base + g + r * G: consecutive threads of a group take consecutive units, so a
     * warp still touches contiguous 512-byte spans of the row (coalesced). */
    for (int64_t base = 0; base < units; base += (int64_t)G * kUnroll) {
        U v[kUnroll];
#pragma unroll
        for (int r = 0; r < kUnroll; r++) {
            const int64_t j = base + g + (int64_t)r * G;
            v[r] = (inside && j < units) ? load_stream(src + j) : U{};
        }
#pragma unroll
        for (int r = 0; r < kUnroll; r++) {
            const int64_t j = base + g + (int64_t)r * G;
            if (j < units) dst[j] = v[r];
        }
    }
}

template <typename U>
static void launch_u(const struct kl_index_params *p, int64_t row_bytes, cudaStream_t stream)
{
    const int64_t units = row_bytes / (int64_t)sizeof(U);
    /* Smallest power-of-two group whose threads cover the row in one trip of kUnroll units,
     * capped at the block: wider rows loop. */
    int group_log2 = 0;
    while ((1 << group_log2) < kThreads && ((int64_t)kUnroll << group_log2) < units) group_log2++;
    const int64_t rows_per_block = kThreads >> group_log2;
    const unsigned blocks = (unsigned)((p->num_tokens + rows_per_block - 1) / rows_per_block);
    index_v2<U><<<blocks, kThreads, 0, stream>>>((const U *)p->table, p->ids, (U *)p->out, p->num_tokens, p->vocab,
                                                 units, p->vocab_start, group_log2);
}

static cudaError_t launch(const struct kl_index_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_index_check_params(p, "v2_rows_groups");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t row_bytes = p->hidden * (int64_t)kl_dtype_size(p->dtype);
    switch (kl_index_unit_bytes(p)) {
    case 16: launch_u<uint4>(p, row_bytes, stream); break;
    case 8: launch_u<uint2>(p, row_bytes, stream); break;
    case 4: launch_u<uint32_t>(p, row_bytes, stream); break;
    default: launch_u<uint16_t>(p, row_bytes, stream);
    }
    return cudaGetLastError();
}

KL_VARIANT(index, v2_rows_groups, launch, .min_cc = 70,
           .summary = "power-of-two thread group per row sized to the row, 4 x 16 B loads in flight per thread");
