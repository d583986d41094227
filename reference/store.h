#ifndef KL_REFERENCE_STORE_H
#define KL_REFERENCE_STORE_H
#include <stdint.h>
/* k_cache[slots[t]] = k[t], v_cache[slots[t]] = v[t] for every token with 0 <= slot < num_slots
 * (slot < 0 skips the token). k, v [num_tokens, row]; caches [num_slots, row], updated in place;
 * row = num_kv_heads * head_dim. Returns the number of tokens whose slot was >= num_slots
 * (not stored). */
int64_t kl_store_reference(const double *k, const double *v, const int64_t *slots, int64_t num_tokens, int64_t row,
                           int64_t num_slots, double *k_cache, double *v_cache);
#endif
