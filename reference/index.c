/* Embedding-row gather, the obviously right way: one token at a time, one element at a time. */
#include "index.h"

void kl_index_reference(const double *table, const int32_t *ids, int64_t num_tokens, int64_t vocab,
                        int64_t hidden, int64_t vocab_start, double *out)
{
    for (int64_t t = 0; t < num_tokens; t++) {
        int64_t row = (int64_t)ids[t] - vocab_start; /* 64-bit: no overflow for any int32 id */
        int inside = row >= 0 && row < vocab;
        for (int64_t i = 0; i < hidden; i++) out[t * hidden + i] = inside ? table[row * hidden + i] : 0.0;
    }
}
