/* v6_switch: the best of the ladder by size: the barrier-free one-shot (v8) for small messages,
 * the one-shot with a barrier (v4) or the two-shot (v5) for medium ones, NCCL (v0) beyond.
 *
 * What changed: nothing in the kernels; a serving engine picks per call the way vLLM and SGLang
 * do (custom all-reduce up to a size, NCCL above). The thresholds at world 2 come from the
 * measured crossovers in the guide's size-switch table (2 GPUs): the Lamport one-shot is the
 * fastest up to 1 MB (it needs no barrier, but every rank stores its whole input into every
 * peer and then clears a set, so its cost per byte is the highest of the custom ones), the
 * one-shot with a barrier from there to the last size where it beat NCCL, NCCL's ring beyond.
 * Worlds 3-8 were not measured: their thresholds are predictions from the same cost model (the
 * one-shots' reads grow with world x n, the two-shot's with 2 (world-1)/world x n):
 *   world 2:    Lamport one-shot up to 1 MB, one-shot up to 16 MB, then NCCL
 *   world 3-4:  Lamport one-shot up to 512 KB, two-shot up to 16 MB, then NCCL
 *   world 5-8:  Lamport one-shot up to 256 KB, two-shot up to 16 MB, then NCCL
 * KL_AR_LAMPORT_MAX / KL_AR_ONESHOT_MAX / KL_AR_TWOSHOT_MAX (bytes) override them for an
 * experiment; every rank inherits the same environment, so every rank takes the same branch (it
 * must: a collective).
 * Work mapping and bound: those of the variant it calls. Expect the fastest of v0, v4, v5 and v8
 * at every size.
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
    static int64_t lamport_env = -2, oneshot_env = -2, twoshot_env = -2; /* read once; -1: not set */
    if (lamport_env == -2)
        lamport_env = limit("KL_AR_LAMPORT_MAX", -1), oneshot_env = limit("KL_AR_ONESHOT_MAX", -1),
        twoshot_env = limit("KL_AR_TWOSHOT_MAX", -1);
    const int64_t lamport = lamport_env >= 0 ? lamport_env : world <= 2 ? 1ll << 20 : world <= 4 ? 512ll << 10 : 256ll << 10;
    const int64_t oneshot = oneshot_env >= 0 ? oneshot_env : world <= 2 ? 16ll << 20 : 0;
    const int64_t twoshot = twoshot_env >= 0 ? twoshot_env : world <= 2 ? 0 : 16ll << 20;
    if (bytes <= lamport) return "v8_lamport_pdl";
    if (bytes <= oneshot) return "v4_oneshot_one_barrier";
    if (bytes <= twoshot) return "v5_twoshot_vec16";
    return "v0_nccl";
}

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_params(p, stream, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT | KL_AR_NEEDS_NCCL, "v6_switch");
    if (rc != cudaSuccess || p->n == 0) return rc;
    /* The ladder's variants are found by name in the registry: this file stays one file. */
    const struct kl_variant *v = kl_variant_find("allreduce", choose(p->n * (int64_t)kl_dtype_size(p->dtype), p->comm->world));
    if (!v) return cudaErrorInvalidValue;
    return ((kl_allreduce_ops_fn)v->launch)()->launch(p, stream);
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT | KL_AR_NEEDS_NCCL)

KL_VARIANT(allreduce, v6_switch, ops, .min_cc = 70,
           .summary = "by size: Lamport one-shot (v8), one-shot (v4), two-shot (v5) or NCCL (v0), as serving engines switch");
