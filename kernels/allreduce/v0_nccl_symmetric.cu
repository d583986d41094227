/* v0_nccl_symmetric: ncclAllReduce on buffers registered as a symmetric window, NCCL's own
 * fastest small-message path and the second baseline beside v0_nccl.
 *
 * What changed from v0_nccl: nothing in the call. The buffers differ: x and out come from
 * ncclMemAlloc and are registered on every rank with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)
 * (the lab's harness does it once per buffer, outside any timed call or graph capture, because the
 * variant asks for KL_AR_NEEDS_NCCL_WINDOW). With every rank's buffer at a known offset of a window
 * that all peers have mapped, NCCL (2.27 and later) can pick its symmetric kernels: each rank loads
 * and stores its peers' buffers directly over NVLink, without the ring's staging through FIFO
 * buffers and its per-step handshakes. Multicast (NVLS) stays off as for every variant, so the
 * kernels that need NVLink SHARP are not in the choice. Where a buffer is not in a window (a caller
 * that did not register it), NCCL falls back to its ordinary algorithms: still correct.
 * Which sizes its kernels win is NCCL's choice, not a law: the guide gives what it measured, size
 * by size, beside v0_nccl (the gate divides by the faster of the two).
 * Run alone: build/kernlab bench allreduce --variant v0_nccl_symmetric */
#include "kernels/allreduce/allreduce.h"
#include "kernels/variant.h"

#define NEEDS (KL_AR_NEEDS_NCCL | KL_AR_NEEDS_NCCL_WINDOW)

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    return kl_allreduce_nccl_launch(p, stream, NEEDS, "v0_nccl_symmetric");
}

KL_AR_OPS(ops, launch, NEEDS)

KL_VARIANT(allreduce, v0_nccl_symmetric, ops, .min_cc = 70,
           .summary = "ncclAllReduce on symmetric-window buffers (NCCL >= 2.27, NVLS off): NCCL's best small-message path");
