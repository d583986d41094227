/* v3_rows_stream: v1's one-load-at-a-time copy, spread over a whole block per row, with streaming hints.
 *
 * What changed from v2: v2 keeps 4 loads in flight per thread, which only pays when the memory system
 * has room for them (the guide's counters show whether lg_throttle says it does not).
 * Here a block of 256 threads owns a 4096-wide bf16 row (512 units of 16 B: 2 trips of one load
 * each), so the row is read in 4 KB coalesced sweeps, and both sides carry cache hints: table rows
 * are read once (ld.global.cs) and out is written once (st.global.cs, evict-first), which lets L2
 * drain the 64 MB of out instead of holding it dirty.
 * Work mapping: a power-of-two group of G threads (G = units, capped at 256) per row; narrow rows
 * pack 256 / G rows per block. Bound: DRAM (64 MB read + 64 MB written); timed on a stream, the
 * launch floor (environment.md) is part of the figure.
 * Run alone: build/kernlab bench index --variant v3_rows_stream */
#include "kernels/common.cuh"
#include "kernels/index/index.h"
#include "kernels/variant.h"

constexpr int kThreads = 256; /* per block; 256 / G rows per block */

/* Streaming hints for 16-byte units; smaller units (odd rows) take the plain path. */
template <typename U> __device__ __forceinline__ U load_stream(const U *p) { return *p; }
template <> __device__ __forceinline__ uint4 load_stream<uint4>(const uint4 *p) { return __ldcs(p); }
template <typename U> __device__ __forceinline__ void store_stream(U *p, U v) { *p = v; }
template <> __device__ __forceinline__ void store_stream<uint4>(uint4 *p, uint4 v) { __stcs(p, v); }

template <typename U>
static __global__ void __launch_bounds__(kThreads)
    index_v3(const U *__restrict__ table, const int32_t *__restrict__ ids, U *__restrict__ out, int64_t num_tokens,
             int64_t vocab, int64_t units, int64_t vocab_start, int group_log2)
{
    const int G = 1 << group_log2, g = threadIdx.x & (G - 1);
    const int64_t t = blockIdx.x * (int64_t)(kThreads >> group_log2) + (threadIdx.x >> group_log2);
    if (t >= num_tokens) return;
    const int64_t row = (int64_t)__ldg(ids + t) - vocab_start;
    const bool inside = row >= 0 && row < vocab; /* another shard's id: a zero row, no table read */
    const U *src = table + (inside ? row : 0) * units;
    U *dst = out + t * units;
    /* Written as the measured build had it (base loop, bounds test per unit); thread g takes units
     * g, g + G, ...: a warp touches 512 contiguous bytes per instruction. */
    for (int64_t base = 0; base < units; base += G) {
        const int64_t j = base + g;
        const U v = (inside && j < units) ? load_stream(src + j) : U{};
        if (j < units) store_stream(dst + j, v);
    }
}

template <typename U>
static void launch_u(const struct kl_index_params *p, int64_t row_bytes, cudaStream_t stream)
{
    const int64_t units = row_bytes / (int64_t)sizeof(U);
    int group_log2 = 0; /* smallest power of two >= units, capped at the block: wider rows loop */
    while ((1 << group_log2) < kThreads && ((int64_t)1 << group_log2) < units) group_log2++;
    const int64_t rows_per_block = kThreads >> group_log2;
    const unsigned blocks = (unsigned)((p->num_tokens + rows_per_block - 1) / rows_per_block);
    index_v3<U><<<blocks, kThreads, 0, stream>>>((const U *)p->table, p->ids, (U *)p->out, p->num_tokens, p->vocab,
                                                 units, p->vocab_start, group_log2);
}

static cudaError_t launch(const struct kl_index_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_index_check_params(p, "v3_rows_stream");
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

KL_VARIANT(index, v3_rows_stream, launch, .min_cc = 70,
           .summary = "block-wide group per row, one 16 B load per thread per trip, ld.cs loads and st.cs stores");
