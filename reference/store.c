/* K/V store into a paged cache, the obviously right way: one token at a time. The page
 * structure needs no code: [num_pages, page_size, ...] is [num_slots, ...] in memory. */
#include "store.h"

int64_t kl_store_reference(const double *k, const double *v, const int64_t *slots, int64_t num_tokens, int64_t row,
                           int64_t num_slots, double *k_cache, double *v_cache)
{
    int64_t out_of_range = 0;
    for (int64_t t = 0; t < num_tokens; t++) {
        int64_t s = slots[t];
        if (s < 0) continue;
        if (s >= num_slots) {
            out_of_range++;
            continue;
        }
        for (int64_t i = 0; i < row; i++) {
            k_cache[s * row + i] = k[t * row + i];
            v_cache[s * row + i] = v[t * row + i];
        }
    }
    return out_of_range;
}
