/* Host side of the TMA copies of a paged K or V cache, shared by the modules that read one with
 * cp.async.bulk.tensor: the cache [pages, page_size, kv_heads, head_dim] of 16-bit elements (bf16,
 * fp16) or of bytes (e4m3 codes) seen as the 3-D tensor (head_dim, kv_heads, slots), slot = page *
 * page_size + position in the page, read in boxes of 128 bytes (64 16-bit columns, 128 codes) x 1
 * head x box_rows slots written into shared memory 128-byte swizzled.
 * cuTensorMapEncodeTiled comes through the runtime's driver entry point, so nothing links libcuda:
 * cudaErrorNotSupported where the driver lacks it, cudaErrorInvalidValue (who, the code and the
 * shape on stderr) where it refuses the map. */
#pragma once

#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdio.h>

namespace kl {

enum class cache_elem { bf16, f16, e4m3 };

inline cudaError_t encode_cache_map(CUtensorMap *map, const void *cache, cache_elem elem, int64_t head_dim,
                                    int64_t kv_heads, int64_t slots, int box_rows, const char *who)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr; /* a benign race: every writer stores the same */
    if (!encode) {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess || !fn)
            return cudaErrorNotSupported;
        encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }
    const int bytes = elem == cache_elem::e4m3 ? 1 : 2;
    const CUtensorMapDataType type = elem == cache_elem::e4m3  ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                     : elem == cache_elem::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const cuuint64_t dims[3] = {(cuuint64_t)head_dim, (cuuint64_t)kv_heads, (cuuint64_t)slots};
    const cuuint64_t strides[2] = {(cuuint64_t)(head_dim * bytes), (cuuint64_t)(kv_heads * head_dim * bytes)};
    const cuuint32_t box[3] = {(cuuint32_t)(128 / bytes), 1, (cuuint32_t)box_rows}, unit[3] = {1, 1, 1};
    /* L2 fetches of 256 bytes where a head's row is whole 256-byte runs; 128 where a row is 128
     * bytes (e4m3 at head_dim 128, 16-bit at 64): a 256-byte fetch would bring the next head's row,
     * which another CTA reads at another time, and DRAM reads grow by what L2 evicts before then. */
    const CUtensorMapL2promotion l2 =
        head_dim * bytes % 256 == 0 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    const CUresult rc = encode(map, type, 3, (void *)cache, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                               CU_TENSOR_MAP_SWIZZLE_128B, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "%s: cuTensorMapEncodeTiled failed (%d) for a %lld x %lld x %lld cache, boxes of %d slots\n",
                who, (int)rc, (long long)head_dim, (long long)kv_heads, (long long)slots, box_rows);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

} // namespace kl
