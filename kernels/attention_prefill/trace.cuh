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
/* The trace of this CTA: block 0 of a launch that asked for one. */
__device__ __forceinline__ kl_prefill_trace *traced_cta(const kl_attention_prefill_params &p)
{
    return p.trace && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 ? p.trace : nullptr;
}

} // namespace hopper
} // namespace kl
