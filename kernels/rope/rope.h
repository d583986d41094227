/* Rotary position embedding (rope), in place on Q and K in one launch: the C ABI every variant
 * implements.
 *
 * For each token t, head h (of q and of k) and pair i < rotary_dim / 2, with
 *   c = cos_sin_cache[positions[t], i],  s = cos_sin_cache[positions[t], rotary_dim / 2 + i]:
 *   (x1, x2) = (x[i1], x[i2]);  x[i1] = x1 * c - x2 * s;  x[i2] = x2 * c + x1 * s
 * where is_neox pairs the two halves of the rotary part (i1 = i, i2 = i + rotary_dim / 2) and
 * otherwise interleaved neighbours (GPT-J: i1 = 2i, i2 = 2i + 1). Dims past rotary_dim are left
 * untouched (partial rotary). Variants compute in float32 and round once to the tensor dtype.
 * A token whose position is outside [0, max_pos) is left unrotated: the kernel never reads
 * past the cache (positions are device data; the module rejects such cases up front). */
#ifndef KL_KERNELS_ROPE_H
#define KL_KERNELS_ROPE_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_rope_params {
    void *q;                    /* [num_tokens, num_q_heads, head_dim], rotated in place */
    void *k;                    /* [num_tokens, num_kv_heads, head_dim], rotated in place */
    const int64_t *positions;   /* [num_tokens]: any order, each in [0, max_pos) */
    const float *cos_sin_cache; /* [max_pos, rotary_dim] f32: cos in columns 0..rotary_dim/2-1, sin after */
    int64_t num_tokens;
    int64_t num_q_heads;        /* >= 1 */
    int64_t num_kv_heads;       /* >= 0 (0: rotate q only) */
    int64_t head_dim;
    int64_t rotary_dim;         /* even, 2 <= rotary_dim <= head_dim */
    int64_t max_pos;            /* rows of cos_sin_cache */
    bool is_neox;               /* true: rotate halves; false: interleaved pairs (GPT-J) */
    enum kl_dtype dtype;        /* KL_F32, KL_F16 or KL_BF16 for q and k */
};

typedef cudaError_t (*kl_rope_launch_fn)(const struct kl_rope_params *p, cudaStream_t stream);

/* Shape and pointer checks every launcher starts with: cudaErrorInvalidValue, with the
 * argument at fault printed to stderr, or cudaSuccess. */
cudaError_t kl_rope_check_params(const struct kl_rope_params *p, const char *variant);

#ifdef __cplusplus
}
#endif
#endif
