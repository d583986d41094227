/* What the index module shares with its tests and perf workloads. */
#ifndef KL_INDEX_MODULE_H
#define KL_INDEX_MODULE_H

#include "kernels/index/index.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"

struct kl_index_problem {
    int64_t num_tokens, vocab, hidden, vocab_start;
    enum kl_dtype dtype;
    struct kl_tensor table; /* host, [vocab, hidden] in dtype */
    struct kl_tensor ids;   /* host, [num_tokens] KL_I32 */
};

/* Random table; ids: `outside` of every 8 tokens fall outside the shard (0..8), the rest uniform
 * inside it, and the first two tokens are the shard's first and last rows when num_tokens >= 2. */
struct kl_index_problem *kl_index_problem_random(int64_t num_tokens, int64_t vocab, int64_t hidden,
                                                 int64_t vocab_start, enum kl_dtype dtype, int outside,
                                                 uint64_t seed);
void kl_index_problem_free(struct kl_index_problem *p);
/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_index_ops;

extern const struct kl_perf_ops kl_index_perf;

#endif
