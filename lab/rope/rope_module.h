/* What the rope module shares with its tests and perf workloads. */
#ifndef KL_ROPE_MODULE_H
#define KL_ROPE_MODULE_H

#include <stdbool.h>

#include "kernels/rope/rope.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"

#define KL_ROPE_BASE 500000.0 /* Llama-3's rope_theta */

struct kl_rope_problem {
    int64_t num_tokens, num_q_heads, num_kv_heads, head_dim, rotary_dim, max_pos;
    bool is_neox;
    enum kl_dtype dtype;
    struct kl_tensor q, k;          /* host, in dtype: the inputs (before rotation) */
    struct kl_tensor positions;     /* host, [num_tokens] KL_I64 */
    struct kl_tensor cos_sin_cache; /* host, [max_pos, rotary_dim] KL_F32 */
};

/* Random q and k; positions uniform in [0, max_pos) with the first two tokens at max_pos - 1 and
 * 0 (so positions decrease too); the usual cos/sin table with Llama-3's base. */
struct kl_rope_problem *kl_rope_problem_random(int64_t num_tokens, int64_t num_q_heads, int64_t num_kv_heads,
                                               int64_t head_dim, int64_t rotary_dim, int64_t max_pos, bool is_neox,
                                               enum kl_dtype dtype, uint64_t seed);
void kl_rope_problem_free(struct kl_rope_problem *p);
/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_rope_ops;
/* The reference outputs q_out, k_out of p. */
void kl_rope_expected(const struct kl_rope_problem *p, struct kl_outputs *o);

extern const struct kl_perf_ops kl_rope_perf;

#endif
