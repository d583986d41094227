/* The clock marks of the traced CTA of the warp-specialized attention_prefill variants
 * (kl_prefill_trace in attention_prefill.h): which slot an event of a key tile goes to, and the CTA
 * that records them. Inline device code only. */
#pragma once

#include "kernels/attention_prefill/attention_prefill.h"

namespace kl {
namespace hopper {

/* An event of the traced CTA (attention_prefill.h's kl_prefill_trace): `at` is the event's slot, or
 * nullptr where this launch, CTA, thread or tile is not traced. */
__device__ __forceinline__ void mark(unsigned long long *at)
{
    if (at) *at = (unsigned long long)clock64();
}
/* A consumer warpgroup's events of key tile j: its slot in trace t for warpgroup c, or nullptr. */
enum trace_event { kKReady, kSDone, kSoftmaxDone, kPvDone };
__device__ __forceinline__ unsigned long long *trace_slot(kl_prefill_trace *t, trace_event e, int c, int j)
{
    if (!t || j >= KL_PREFILL_TRACE_TILES) return nullptr;
    return e == kKReady ? &t->k_ready[c][j] : e == kSDone ? &t->s_done[c][j]
                      : e == kSoftmaxDone ? &t->softmax_done[c][j] : &t->pv_done[c][j];
}
/* The trace for the CTA's nth_work-th work tile with rows (n key tiles, its first in slot `slot`): the
 * first always, the second where all of its key tiles fit the slots left (so the producer's and the
 * consumers' events of a traced tile are all there), none after; nullptr where t is. */
__device__ __forceinline__ kl_prefill_trace *traced_work(kl_prefill_trace *t, int nth_work, uint32_t slot, int n)
{
    return nth_work == 0 || (nth_work == 1 && slot + n <= KL_PREFILL_TRACE_TILES) ? t : nullptr;
}
/* The trace of this CTA: block 0 of a launch that asked for one. */
__device__ __forceinline__ kl_prefill_trace *traced_cta(const kl_attention_prefill_params &p)
{
    return p.trace && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 ? p.trace : nullptr;
}

} // namespace hopper
} // namespace kl
