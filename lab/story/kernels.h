/* The kernels written only for the story, beside the lab's modules: the MLP's activation, greedy
 * sampling, and the weights' generator. Each is small and memory-bound; reference/story.c has
 * their float64 references and lab/story/test_story.c tests them. */
#ifndef KL_STORY_KERNELS_H
#define KL_STORY_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[t, i] = silu(gu[t, i]) * gu[t, mlp + i] for t < n, i < mlp; bf16 in and out, float32 math:
 * the gate and up projections come out of one GEMM as [n, 2 * mlp], gate first (SGLang's
 * silu_and_mul layout). */
cudaError_t kl_story_silu_mul(const void *gu, void *out, int64_t n, int64_t mlp, cudaStream_t stream);

/* ids[b] = argmax of logits[b, :] (float32 [batch, vocab]): the first index on ties, NaN never
 * the largest unless the whole row is NaN (then 0). One block per row. */
cudaError_t kl_story_argmax(const float *logits, int64_t batch, int64_t vocab, int32_t *ids, cudaStream_t stream);

/* n bf16 values of tensor `tensor` (lab/story/weights.h): offset + half_width * U(-1, 1). */
cudaError_t kl_story_fill_weights(void *p, size_t n, uint64_t seed, uint32_t tensor, float offset, float half_width,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
