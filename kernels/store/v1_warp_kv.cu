/* v1_warp_kv: one warp per token, K and V in one launch, 16-byte copies.
 *
 * What changed from v0: a warp owns a token: it reads the slot once and copies the K row and
 * then the V row (8 heads x 128 bf16 = 2 KB each) in 16-byte units, 512 contiguous bytes per
 * warp instruction; one launch instead of two. Rows whose size or pointers are not 16-byte
 * multiples use 8-, 4- or element-size units (kl_store_unit_bytes): head_dim 7 is exact too.
 * Work mapping: blocks of 8 warps, warp w of block b stores token 8b + w; lanes stride the row.
 * Bound: DRAM bandwidth; but each lane has one load in flight at a time (load, store, next), so
 * a 2 KB row takes 4 dependent round trips per tensor: latency-limited.
 * Run alone: build/kernlab bench store --variant v1_warp_kv */
#include "kernels/common.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kWarps = 8;

static __device__ unsigned bad_slot; /* see store.h: set when a slot >= num_slots is skipped */

/* U is the unit of access (uint4 = 16 bytes ... uint16_t = 2 bytes); the copy is bitwise. */
template <typename U>
static __global__ void store_v1(const U *__restrict__ k, const U *__restrict__ v, const int64_t *__restrict__ slots,
                                U *k_cache, U *v_cache, int64_t num_tokens, int64_t units, int64_t num_slots)
{
    const int64_t t = blockIdx.x * (int64_t)kWarps + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (t >= num_tokens) return;
    const int64_t slot = slots[t];
    if (slot < 0) return;
    if (slot >= num_slots) {
        if (lane == 0) bad_slot = 1;
        return;
    }
    for (int64_t j = lane; j < units; j += 32) k_cache[slot * units + j] = k[t * units + j];
    for (int64_t j = lane; j < units; j += 32) v_cache[slot * units + j] = v[t * units + j];
}

template <typename U>
static void launch_u(const struct kl_store_params *p, cudaStream_t stream)
{
    const int64_t units = p->num_kv_heads * p->head_dim * (int64_t)kl_dtype_size(p->dtype) / (int64_t)sizeof(U);
    const unsigned blocks = (unsigned)((p->num_tokens + kWarps - 1) / kWarps);
    store_v1<U><<<blocks, kWarps * 32, 0, stream>>>((const U *)p->k, (const U *)p->v, p->slots, (U *)p->k_cache,
                                                    (U *)p->v_cache, p->num_tokens, units, p->num_slots);
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_params(p, "v1_warp_kv");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    switch (kl_store_unit_bytes(p)) {
    case 16: launch_u<uint4>(p, stream); break;
    case 8: launch_u<uint2>(p, stream); break;
    case 4: launch_u<uint32_t>(p, stream); break;
    default: launch_u<uint16_t>(p, stream);
    }
    return kl_store_validate_end(p, flag, stream, "v1_warp_kv");
}

KL_VARIANT(store, v1_warp_kv, launch, .min_cc = 70,
           .summary = "one warp per token, K and V in one launch, 16-byte copies");
