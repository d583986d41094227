/* What the store module shares with its tests and perf workloads. */
#ifndef KL_STORE_MODULE_H
#define KL_STORE_MODULE_H

#include <stdbool.h>

#include "kernels/store/store.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"

struct kl_store_problem {
    int64_t num_tokens, num_kv_heads, head_dim, num_slots;
    enum kl_dtype dtype;
    struct kl_tensor k, v;             /* host, [num_tokens, num_kv_heads, head_dim] in dtype */
    struct kl_tensor slots;            /* host, [num_tokens] KL_I64 */
    struct kl_tensor k_cache, v_cache; /* host, [num_slots, num_kv_heads, head_dim]: before the store */
};

enum kl_store_slot_pattern { KL_SLOTS_RANDOM, KL_SLOTS_SEQUENTIAL };

/* Random k, v and caches; distinct slots, random or consecutive from a random start; `skipped`
 * of every 8 tokens get slot -1; with last_slot, token 0 goes to slot num_slots - 1. */
struct kl_store_problem *kl_store_problem_random(int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                                                 int64_t num_slots, enum kl_dtype dtype,
                                                 enum kl_store_slot_pattern pattern, int skipped, bool last_slot,
                                                 uint64_t seed);
void kl_store_problem_free(struct kl_store_problem *p);
/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_store_ops;

extern const struct kl_perf_ops kl_store_perf;

#endif
