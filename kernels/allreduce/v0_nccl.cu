/* v0_nccl: ncclAllReduce, the baseline every other variant is judged against.
 *
 * What a serving engine calls when it has nothing better (vLLM's PyNcclCommunicator, SGLang's
 * fallback). NCCL picks its algorithm per size: ring or tree, over NVLink with NVLS off (every
 * rank runs with NCCL_NVLS_ENABLE=0). A ring's reduce-scatter rounds each partial sum to the
 * dtype at every step, so its result can differ in the last bit from our float32 sums; it is the
 * same on every rank. Work mapping: NCCL's own channels (a few blocks per GPU).
 * Expected: at decode sizes a protocol cost of several NVLink round trips whatever the bytes; in a
 * CUDA graph, as the bench times it, the launch overlaps the previous call. At large sizes a ring
 * at the NVLink rate. The guide gives what it measured.
 * Run alone: build/kernlab bench allreduce --variant v0_nccl */
#include "kernels/allreduce/allreduce.h"
#include "kernels/variant.h"

static cudaError_t launch(const struct kl_allreduce_params *p, cudaStream_t stream)
{
    return kl_allreduce_nccl_launch(p, stream, KL_AR_NEEDS_NCCL, "v0_nccl");
}

KL_AR_OPS(ops, launch, KL_AR_NEEDS_NCCL)

KL_VARIANT(allreduce, v0_nccl, ops, .min_cc = 70, .summary = "ncclAllReduce (NVLS off): the baseline");
