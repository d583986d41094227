/* v4_pdl_one_trip: a decode batch's whole gather issued before the PDL wait, one 16-byte unit per thread.
 *
 * What changed from v3, for few tokens: v3 gives a 4096-wide bf16 row to 256 threads, 2 serial trips each
 * (load, store, load, store); torch's gather gives it 2 x 256 threads, one unit each, one trip. Here a thread owns one unit (grid tokens x ceil(units / 256), no loop) and, launched with
 * Programmatic Dependent Launch (sm_90), loads its id and its table unit BEFORE griddepcontrol.wait (weights
 * and the scheduler's ids: see the kernel); only the store waits, so after the wait the critical path is a
 * store. Many tokens (more threads than half the GPU holds): v3_rows_stream's own launcher, unchanged.
 * Predicted decode-64: ~1.2 us on H200, ~1.3 us on H100, below a plain copy of the same bytes.
 * Run alone: build/kernlab bench index --variant v4_pdl_one_trip --workload decode-64 */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/index/index.h"
#include "kernels/variant.h"

constexpr int kThreads = 256;      /* at most, per block; a row takes ceil(units / 256) blocks */
constexpr int kThreadsPerSm = 1024; /* few tokens: the grid fits in half the GPU's 2048 threads per SM, so it
                                     * sits beside the previous kernel's blocks instead of queueing behind them */

template <typename U> __device__ __forceinline__ U load_stream(const U *p) { return *p; }
template <> __device__ __forceinline__ uint4 load_stream<uint4>(const uint4 *p) { return __ldcs(p); }

template <typename U>
static __global__ void __launch_bounds__(kThreads)
    index_v4(const U *__restrict__ table, const int32_t *__restrict__ ids, U *__restrict__ out, int64_t vocab,
             int units, int64_t vocab_start)
{
    const int64_t t = blockIdx.x;
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    /* Before the wait, only what no kernel of this step writes: the table (weights) and the ids, which
     * the scheduler copies from the host before the forward pass starts; that copy is ordered before
     * the whole chain of kernels, so it is complete here. An engine whose ids come from a kernel of the
     * same step (an overlap scheduler resolving sampled tokens on the GPU) must load them after the wait.
     * Every thread of the block reads the same id: one L1 broadcast, then the row address. */
    const int64_t row = (int64_t)__ldg(ids + t) - vocab_start;
    const bool inside = row >= 0 && row < vocab; /* another shard's id: a zero row, no table read */
    U v = inside && j < units ? load_stream(table + row * units + j) : U{};
    kl::pdl_release(); /* the load is in flight, not landed: the next kernel may start launching now */
    kl::pdl_wait();    /* out may still be read by the kernel before us */
    /* Plain store, not v3's evict-first one: at decode size out is what the next kernel reads. */
    if (j < units) out[t * units + j] = v;
}

template <typename U>
static cudaError_t launch_u(const struct kl_index_params *p, int64_t units, bool pdl, cudaStream_t stream)
{
    unsigned per_row, threads;
    kl::split_even(units, kThreads, &per_row, &threads);
    return kl::launch_pdl(index_v4<U>, dim3((unsigned)p->num_tokens, per_row), dim3(threads), pdl, stream,
                          (const U *)p->table, p->ids, (U *)p->out, p->vocab, (int)units, p->vocab_start);
}

static cudaError_t launch(const struct kl_index_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_index_check_params(p, "v4_pdl_one_trip");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const kl::device_caps dev = kl::this_device();
    const int unit = kl_index_unit_bytes(p);
    const int64_t units = p->hidden * (int64_t)kl_dtype_size(p->dtype) / unit;
    if (p->num_tokens * ((units + 31) / 32 * 32) > (int64_t)dev.sms * kThreadsPerSm) {
        /* Many tokens: bandwidth-bound, where v3's block-per-row streaming copy is measured best. */
        const auto v3 = (kl_index_launch_fn)kl_variant_launcher("index", "v3_rows_stream", "v4_pdl_one_trip");
        return v3 ? v3(p, stream) : cudaErrorInvalidValue;
    }
    KL_DISPATCH_UNIT(unit, U, rc = launch_u<U>(p, units, dev.cc >= 90, stream));
    return rc != cudaSuccess ? rc : cudaGetLastError();
}

KL_VARIANT(index, v4_pdl_one_trip, launch, .min_cc = 70,
           .summary = "few tokens: id and row loaded before a PDL wait, one 16 B unit per thread, no loop; else v3");
