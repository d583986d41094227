/* Embedding-row gather (index): the C ABI every variant implements.
 *
 *   out[t, :] = table[ids[t] - vocab_start, :]   when vocab_start <= ids[t] < vocab_start + vocab
 *   out[t, :] = 0                                otherwise (the id belongs to another shard)
 * Under tensor parallelism each GPU holds one slice of the vocabulary (a shard); the zero rows
 * are summed away by the all-reduce that follows. Pure data movement: every variant is
 * bit-exact for any element type, so the kernels move bytes and only the size of an element
 * matters. */
#ifndef KL_KERNELS_INDEX_H
#define KL_KERNELS_INDEX_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_index_params {
    const void *table;    /* [vocab, hidden]: rows vocab_start .. vocab_start + vocab - 1 */
    const int32_t *ids;   /* [num_tokens]: token ids, any value (outside the shard -> zero row) */
    void *out;            /* [num_tokens, hidden] */
    int64_t num_tokens;
    int64_t vocab;        /* rows in this shard's table (>= 0) */
    int64_t hidden;       /* elements per row (>= 1) */
    int64_t vocab_start;  /* id of the table's first row (0 without tensor parallelism) */
    enum kl_dtype dtype;  /* KL_F32, KL_F16 or KL_BF16 for table and out */
};

typedef cudaError_t (*kl_index_launch_fn)(const struct kl_index_params *p, cudaStream_t stream);

/* Shape and pointer checks every launcher starts with: cudaErrorInvalidValue, with the
 * argument at fault printed to stderr, or cudaSuccess. */
cudaError_t kl_index_check_params(const struct kl_index_params *p, const char *variant);

/* The widest access (16, 8, 4 bytes, else the element size) that divides a row and to which
 * table and out are aligned: rows of 4096 bf16 move as 16-byte units, rows of 7 bf16 as 2-byte
 * ones. Shared by the vectorised variants so they never read across a row's end. */
int kl_index_unit_bytes(const struct kl_index_params *p);

#ifdef __cplusplus
}
#endif
#endif
