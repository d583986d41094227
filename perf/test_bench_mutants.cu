/* A deliberately wrong attention_decode variant for perf/test_bench.c only: it passes every
 * single-launch check (the module's tests, `kernlab check`) and must be caught by the bench's
 * re-check of its last timed replay.
 *   mutant_split_counter_never_reset   v4_tensor_cores without the reset of its merge counters:
 * v4's last block of each (request, kv head, head block) sets the counter back to 0 after counting;
 * without that line every counter is left at `splits` after a launch, so in the next launch no
 * block sees splits - 1 and none merges: the output is written by the first launch only. The
 * launcher runs v4 itself, then adds `splits` to every counter the plan uses, which leaves the
 * workspace exactly as v4 without the reset would. */
#include "kernels/attention_decode/attention_decode.h"
#include "lab/core/registry.h"

static __global__ void leave_counted(unsigned *counters, int64_t n, unsigned splits)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        counters[i] += splits;
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    const struct kl_variant *v4 = kl_variant_find("attention_decode", "v4_tensor_cores");
    if (!v4) return cudaErrorInvalidValue;
    cudaError_t rc = ((kl_attention_decode_launch_fn)v4->launch)(p, stream);
    if (rc != cudaSuccess || p->batch == 0) return rc;
    /* v4's plan and counter layout (v4_tensor_cores.cu and decode.cuh): one counter per
     * (request, kv head, block of 8 qo heads), used only when the keys are split. */
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 4, 64, 128, 2048);
    if (plan.splits <= 1) return cudaSuccess;
    const int64_t n = p->batch * p->num_kv_heads * ((p->num_qo_heads / p->num_kv_heads + 7) / 8);
    leave_counted<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(static_cast<unsigned *>(p->workspace), n,
                                                                    (unsigned)plan.splits);
    return cudaGetLastError();
}

KL_VARIANT(attention_decode, mutant_split_counter_never_reset, launch, .min_cc = 80,
           .summary = "v4 whose merge counters are not reset: writes its output on the first launch only",
           .mutant = 1);
