/* A deliberately wrong size switch, linked into the tests only: mutant_switch_through_v4 picks the
 * Lamport one-shot (v8) up to 4 KB and the one-shot with a barrier (v4) above, on one
 * communicator. A v4 call advances the call number without emptying the Lamport set the call
 * before it used, so three Lamport calls later a reader finds that set still full and sums stale
 * data (the reason v6_switch chooses among barrier-free variants and NCCL only). */
#include "kernels/allreduce/allreduce.h"
#include "lab/core/registry.h"

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    const bool small = p->n * (int64_t)kl_dtype_size(p->dtype) <= 4096;
    const auto v = (kl_allreduce_ops_fn)kl_variant_launcher(
        "allreduce", small ? "v8_lamport_pdl" : "v4_oneshot_one_barrier", "mutant_switch_through_v4");
    return v ? v()->launch(p, stream) : cudaErrorInvalidValue;
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, mutant_switch_through_v4, ops, .min_cc = 70,
           .summary = "a size switch through v4 between Lamport calls: a set left full is read as fresh data", .mutant = 1);
