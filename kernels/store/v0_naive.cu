/* v0_naive: the textbook scatter, one thread per element, one launch for K and one for V.
 *
 * Work mapping: a flat grid over num_tokens x row elements (row = num_kv_heads * head_dim);
 * thread e copies element e % row of token e / row into slot slots[e / row]. Consecutive threads
 * write consecutive elements of one cache row, so accesses are coalesced, but each thread moves
 * 2-4 bytes and first waits for its token's slot (a dependent load), and K and V take two
 * launches (two launch latencies, two passes over slots).
 * Out-of-range slots (>= num_slots) are skipped and noted in bad_slot (see store.h).
 * Run alone: build/kernlab bench store --variant v0_naive */
#include "kernels/common.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kThreads = 256;

/* Set to 1 by a kernel of this file that meets a slot >= num_slots (read under validate). */
static __device__ unsigned bad_slot;

/* T only carries the element size: the copy is bit-exact for any float type. */
template <typename T>
static __global__ void store_v0(const T *__restrict__ src, const int64_t *__restrict__ slots, T *cache,
                                int64_t num_tokens, int64_t row, int64_t num_slots)
{
    const int64_t total = num_tokens * row;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / row, i = e % row, slot = slots[t];
        if (slot < 0) continue; /* padding token: nothing to store */
        if (slot >= num_slots) {
            bad_slot = 1; /* every writer stores the same 1: a benign race */
            continue;
        }
        cache[slot * row + i] = src[e];
    }
}

template <typename T>
static void launch_t(const struct kl_store_params *p, cudaStream_t stream)
{
    const int64_t row = p->num_kv_heads * p->head_dim, total = p->num_tokens * row;
    const unsigned blocks = (unsigned)(total / kThreads + 1 < 65536 * 16 ? total / kThreads + 1 : 65536 * 16);
    store_v0<T><<<blocks, kThreads, 0, stream>>>((const T *)p->k, p->slots, (T *)p->k_cache, p->num_tokens, row,
                                                 p->num_slots);
    store_v0<T><<<blocks, kThreads, 0, stream>>>((const T *)p->v, p->slots, (T *)p->v_cache, p->num_tokens, row,
                                                 p->num_slots);
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_params(p, "v0_naive");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    if (kl_dtype_size(p->dtype) == 2) launch_t<uint16_t>(p, stream);
    else launch_t<uint32_t>(p, stream);
    return kl_store_validate_end(p, flag, stream, "v0_naive");
}

KL_VARIANT(store, v0_naive, launch, .min_cc = 70,
           .summary = "one thread per element, separate K and V launches, 2-4 byte copies");
