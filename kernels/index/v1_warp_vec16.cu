/* v1_warp_vec16: one warp per token, 16-byte copies.
 *
 * What changed from v0: a warp owns a whole row, reads the token's id once (one load, then a
 * shuffle-free broadcast: every lane reads the same word), and copies the row in 16-byte units
 * (8 bf16), 32 lanes x 16 B = 512 contiguous bytes per warp instruction. Rows whose size or
 * pointers are not 16-byte multiples fall back to 8-, 4- or element-size units through the same
 * template (kl_index_unit_bytes), so hidden 7 and 264 are exact too.
 * Work mapping: blocks of 8 warps, warp w of block b copies token 8b + w; lanes stride the row.
 * Bound: DRAM bandwidth, but with one 16-byte load in flight per lane per iteration, a 4096-wide
 * bf16 row is 16 dependent round trips per warp: latency-limited at low occupancy.
 * Run alone: build/kernlab bench index --variant v1_warp_vec16 */
#include "kernels/common.cuh"
#include "kernels/index/index.h"
#include "kernels/variant.h"

constexpr int kWarps = 8;

/* U is the unit of access (uint4 = 16 bytes ... uint16_t = 2 bytes); the copy is bitwise. */
template <typename U>
static __global__ void index_v1(const U *__restrict__ table, const int32_t *__restrict__ ids, U *out,
                                int64_t num_tokens, int64_t vocab, int64_t units, int64_t vocab_start)
{
    const int64_t t = blockIdx.x * (int64_t)kWarps + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (t >= num_tokens) return;
    const int64_t row = (int64_t)ids[t] - vocab_start;
    U *dst = out + t * units;
    if (row < 0 || row >= vocab) {
        /* Another shard's token: a zero row, and no table read at all. */
        for (int64_t j = lane; j < units; j += 32) dst[j] = U{};
        return;
    }
    const U *src = table + row * units;
    for (int64_t j = lane; j < units; j += 32) dst[j] = src[j];
}

template <typename U>
static void launch_u(const struct kl_index_params *p, int64_t row_bytes, cudaStream_t stream)
{
    const unsigned blocks = (unsigned)((p->num_tokens + kWarps - 1) / kWarps);
    index_v1<U><<<blocks, kWarps * 32, 0, stream>>>((const U *)p->table, p->ids, (U *)p->out, p->num_tokens,
                                                    p->vocab, row_bytes / (int64_t)sizeof(U), p->vocab_start);
}

static cudaError_t launch(const struct kl_index_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_index_check_params(p, "v1_warp_vec16");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t row_bytes = p->hidden * (int64_t)kl_dtype_size(p->dtype);
    switch (kl_index_unit_bytes(p)) {
    case 16: launch_u<uint4>(p, row_bytes, stream); break;
    case 8: launch_u<uint2>(p, row_bytes, stream); break;
    case 4: launch_u<uint32_t>(p, row_bytes, stream); break;
    default: launch_u<uint16_t>(p, row_bytes, stream);
    }
    return cudaGetLastError();
}

KL_VARIANT(index, v1_warp_vec16, launch, .min_cc = 70,
           .summary = "one warp per token, 16-byte copies, no table read for other shards' ids");
