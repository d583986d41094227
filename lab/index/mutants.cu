/* Deliberately wrong index variants, linked into the tests only: the checker must flag every
 * one. Each is a one-warp-per-token gather (v1's shape, element-wide) with one realistic bug:
 *   ignores_vocab_start   row = id: right for shard 0, wrong for every other shard
 *   clamps_outside_ids    ids outside the shard copy the nearest edge row instead of zeros
 *   drops_row_tail        copies whole 8-element vectors only: rows not a multiple of 8 keep a
 *                         poisoned tail (hidden 7 keeps the whole row)
 *   grid_rounds_down      blocks = num_tokens / 8: the last num_tokens % 8 tokens are never written */
#include "kernels/common.cuh"
#include "kernels/index/index.h"
#include "lab/core/registry.h"

enum bug { IGNORES_VOCAB_START, CLAMPS_OUTSIDE_IDS, DROPS_ROW_TAIL, GRID_ROUNDS_DOWN };

template <typename T, int BUG>
static __global__ void index_mutant(const T *__restrict__ table, const int32_t *__restrict__ ids, T *out,
                                    int64_t num_tokens, int64_t vocab, int64_t hidden, int64_t vocab_start)
{
    const int64_t t = blockIdx.x * 8ll + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (t >= num_tokens) return;
    int64_t row = BUG == IGNORES_VOCAB_START ? (int64_t)ids[t] : (int64_t)ids[t] - vocab_start;
    bool inside = row >= 0 && row < vocab;
    if (BUG == CLAMPS_OUTSIDE_IDS && vocab > 0) {
        row = row < 0 ? 0 : row >= vocab ? vocab - 1 : row;
        inside = true;
    }
    const int64_t end = BUG == DROPS_ROW_TAIL ? hidden / 8 * 8 : hidden;
    for (int64_t i = lane; i < end; i += 32) out[t * hidden + i] = inside ? table[row * hidden + i] : T(0);
}

template <int BUG>
static cudaError_t launch(const struct kl_index_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_index_check_params(p, "mutant");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const unsigned blocks = (unsigned)(BUG == GRID_ROUNDS_DOWN ? p->num_tokens / 8 : (p->num_tokens + 7) / 8);
    if (blocks == 0) return cudaSuccess;
    if (kl_dtype_size(p->dtype) == 2)
        index_mutant<uint16_t, BUG><<<blocks, 256, 0, stream>>>((const uint16_t *)p->table, p->ids, (uint16_t *)p->out,
                                                                p->num_tokens, p->vocab, p->hidden, p->vocab_start);
    else
        index_mutant<uint32_t, BUG><<<blocks, 256, 0, stream>>>((const uint32_t *)p->table, p->ids, (uint32_t *)p->out,
                                                                p->num_tokens, p->vocab, p->hidden, p->vocab_start);
    return cudaGetLastError();
}

KL_VARIANT(index, mutant_ignores_vocab_start, launch<IGNORES_VOCAB_START>, .min_cc = 70,
           .summary = "row = id, the shard offset forgotten", .mutant = 1);
KL_VARIANT(index, mutant_clamps_outside_ids, launch<CLAMPS_OUTSIDE_IDS>, .min_cc = 70,
           .summary = "ids outside the shard clamped to an edge row instead of zeroed", .mutant = 1);
KL_VARIANT(index, mutant_drops_row_tail, launch<DROPS_ROW_TAIL>, .min_cc = 70,
           .summary = "row tail past the last whole 8-element vector never written", .mutant = 1);
KL_VARIANT(index, mutant_grid_rounds_down, launch<GRID_ROUNDS_DOWN>, .min_cc = 70,
           .summary = "grid rounded down: the last num_tokens % 8 tokens never written", .mutant = 1);
