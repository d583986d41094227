#ifndef KL_REFERENCE_INDEX_H
#define KL_REFERENCE_INDEX_H
#include <stdint.h>
/* out[t] = table[ids[t] - vocab_start] for ids inside [vocab_start, vocab_start + vocab), else a
 * zero row. table [vocab, hidden], ids [num_tokens], out [num_tokens, hidden]; row-major doubles. */
void kl_index_reference(const double *table, const int32_t *ids, int64_t num_tokens, int64_t vocab,
                        int64_t hidden, int64_t vocab_start, double *out);
#endif
