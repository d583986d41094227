/* v0_naive: the textbook gather, one thread per output element.
 *
 * Work mapping: a flat grid over num_tokens x hidden elements; thread e copies element
 * e % hidden of token e / hidden. Consecutive threads copy consecutive elements of a row, so
 * each warp access is coalesced, but every thread moves only 2-4 bytes and re-reads the token's
 * id (a broadcast from L1, yet an extra dependent load before the row load can start).
 * Expect well under the copy bandwidth: too few bytes in flight per thread.
 * Run alone: build/kernlab bench index --variant v0_naive */
#include "kernels/common.cuh"
#include "kernels/index/index.h"
#include "kernels/variant.h"

constexpr int kThreads = 256;

/* T only carries the element size: the copy is bit-exact for any float type. */
template <typename T>
static __global__ void index_v0(const T *__restrict__ table, const int32_t *__restrict__ ids, T *out,
                                int64_t num_tokens, int64_t vocab, int64_t hidden, int64_t vocab_start)
{
    const int64_t total = num_tokens * hidden;
    /* Grid-stride loop: the grid is capped on the host, so any size is covered. */
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / hidden, i = e % hidden;
        /* 64-bit arithmetic: an int32 id minus vocab_start never overflows. */
        const int64_t row = (int64_t)ids[t] - vocab_start;
        out[e] = (row >= 0 && row < vocab) ? table[row * hidden + i] : T(0);
    }
}

static cudaError_t launch(const struct kl_index_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_index_check_params(p, "v0_naive");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t total = p->num_tokens * p->hidden;
    const unsigned blocks = (unsigned)(total / kThreads + 1 < 65536 * 16 ? total / kThreads + 1 : 65536 * 16);
    /* Same-size unsigned integers: a copy needs no arithmetic on the values, and an integer
     * zero is +0.0 in every float format. */
    switch (kl_dtype_size(p->dtype)) {
    case 2:
        index_v0<uint16_t><<<blocks, kThreads, 0, stream>>>((const uint16_t *)p->table, p->ids, (uint16_t *)p->out,
                                                            p->num_tokens, p->vocab, p->hidden, p->vocab_start);
        break;
    default:
        index_v0<uint32_t><<<blocks, kThreads, 0, stream>>>((const uint32_t *)p->table, p->ids, (uint32_t *)p->out,
                                                            p->num_tokens, p->vocab, p->hidden, p->vocab_start);
    }
    return cudaGetLastError();
}

KL_VARIANT(index, v0_naive, launch, .min_cc = 70, .summary = "one thread per element, 2-4 byte copies");
