/* v6_switch: the best of the ladder by size: the barrier-free one-shot (v17, v11 with every address
 * in registers and each block counted done as soon as its sends are out) for small messages, the
 * barrier-free two-shot (v9) for medium ones, NCCL (v0) beyond.
 *
 * What changed: nothing in the kernels; a serving engine picks per call the way vLLM and SGLang
 * do (custom all-reduce up to a size, NCCL above). Only the Lamport variants and NCCL are in the
 * choice: a Lamport call empties the buffer set the previous call used, so every custom call on a
 * communicator must be a Lamport one (a v4 call in between would advance the call number and
 * leave a set full, and a later Lamport call would read it as fresh data); NCCL does not touch
 * the call number. The thresholds at world 2 come from the measured crossovers in the guide's
 * size-switch table (2 GPUs): the Lamport one-shot is the fastest up to 1 MB (no barrier, but
 * every rank stores its whole input into every peer), the Lamport two-shot from there to 64 MB
 * (each rank moves 2 (world-1)/world of the bytes), NCCL's ring beyond. Worlds 3-8 were not
 * measured: their thresholds are predictions from the same cost model:
 *   world 2:    Lamport one-shot up to 1 MB, Lamport two-shot up to 64 MB, then NCCL
 *   world 3-4:  Lamport one-shot up to 512 KB, Lamport two-shot up to 16 MB, then NCCL
 *   world 5-8:  Lamport one-shot up to 256 KB, Lamport two-shot up to 16 MB, then NCCL
 * KL_AR_ONESHOT_MAX / KL_AR_TWOSHOT_MAX (bytes) override them for an experiment; every rank
 * inherits the same environment, so every rank takes the same branch (it must: a collective).
 * Work mapping and bound: those of the variant it calls.
 * Run alone: build/kernlab bench allreduce --variant v6_switch */
#include <stdlib.h>

#include "kernels/allreduce/allreduce.h"
#include "kernels/variant.h"

static int64_t limit(const char *env, int64_t fallback)
{
    const char *s = getenv(env);
    return s && *s ? strtoll(s, NULL, 10) : fallback;
}

static const char *choose(int64_t bytes, int world)
{
    static int64_t oneshot_env = -2, twoshot_env = -2; /* read once; -1: not set */
    if (oneshot_env == -2) oneshot_env = limit("KL_AR_ONESHOT_MAX", -1), twoshot_env = limit("KL_AR_TWOSHOT_MAX", -1);
    const int64_t oneshot = oneshot_env >= 0 ? oneshot_env : world <= 2 ? 1ll << 20 : world <= 4 ? 512ll << 10 : 256ll << 10;
    const int64_t twoshot = twoshot_env >= 0 ? twoshot_env : world <= 2 ? 64ll << 20 : 16ll << 20;
    if (bytes <= oneshot) return "v17_lamport_early_done";
    if (bytes <= twoshot) return "v9_lamport_twoshot";
    return "v0_nccl";
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT | KL_AR_NEEDS_NCCL, "v6_switch");
    if (rc != cudaSuccess || p->n == 0) return rc;
    /* The ladder's variants are found by name in the registry: this file stays one file. */
    const auto v = (kl_allreduce_ops_fn)kl_variant_launcher(
        "allreduce", choose(p->n * (int64_t)kl_dtype_size(p->dtype), p->comm->world), "v6_switch");
    return v ? v()->launch(p, stream) : cudaErrorInvalidValue;
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT | KL_AR_NEEDS_NCCL)

KL_VARIANT(allreduce, v6_switch, ops, .min_cc = 70,
           .summary = "by size: Lamport one-shot (v17), Lamport two-shot (v9) or NCCL (v0), as serving engines switch");
