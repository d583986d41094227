/* The host side of attention_prefill's tensor-core launchers: what params the kernels take, the
 * instantiation per dtype and head_dim, the argument checks, the grid of the packed variants, and the
 * launches with their shared-memory limit raised (in clusters for v9). */
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <type_traits>

#include "kernels/attention_prefill/paged.cuh"
#include "kernels/attention_prefill/smem_tiles.cuh"

namespace kl {
namespace mma {

using namespace ::kl::ptx; /* the sm_80 PTX wrappers (kernels/ptx_sm80.cuh) */

/* Whether a variant can take these params: 16-bit inputs, head_dim 64/128/256, and 16-byte aligned
 * rows (every copy is 16 bytes). cudaErrorNotSupported otherwise (the module's SKIP). */
inline cudaError_t supports(const kl_attention_prefill_params *p)
{
    const bool dtype = p->dtype == KL_F16 || p->dtype == KL_BF16;
    const bool dim = p->head_dim == 64 || p->head_dim == 128 || p->head_dim == 256;
    const bool aligned = (((uintptr_t)p->q | (uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) == 0;
    return dtype && dim && aligned ? cudaSuccess : cudaErrorNotSupported;
}

/* Calls f(T{}, std::integral_constant<int, D>{}) for the params' 16-bit dtype and head_dim, so a
 * launcher instantiates its kernel for each (T, D) in one line. Call supports() first. */
template <class F> cudaError_t dispatch(const kl_attention_prefill_params *p, F &&f)
{
    using bf16 = __nv_bfloat16;
    const bool b = p->dtype == KL_BF16;
    switch (p->head_dim) {
    case 64:
        return b ? f(bf16{}, std::integral_constant<int, 64>{}) : f(__half{}, std::integral_constant<int, 64>{});
    case 128:
        return b ? f(bf16{}, std::integral_constant<int, 128>{}) : f(__half{}, std::integral_constant<int, 128>{});
    case 256:
        return b ? f(bf16{}, std::integral_constant<int, 256>{}) : f(__half{}, std::integral_constant<int, 256>{});
    default:
        return cudaErrorNotSupported;
    }
}

/* Raises a kernel's dynamic shared-memory limit past the default 48 KB, once per kernel (the
 * kernel's address is the template argument, so each kernel has its own flag). */
template <auto Kernel> cudaError_t allow_smem(size_t bytes)
{
    static bool done = false;
    if (done) return cudaSuccess;
    cudaError_t rc = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    done = rc == cudaSuccess;
    return rc;
}

/* The front of every tensor-core launcher: the argument checks, the dtypes and head_dims these
 * kernels take (cudaErrorNotSupported otherwise), and the grid's batch dimension. *go is false when
 * there is nothing to launch (no queries). */
inline cudaError_t launch_checks(const kl_attention_prefill_params *p, const char *variant, bool *go)
{
    *go = false;
    cudaError_t rc = kl_attention_prefill_check_params(p, variant);
    if (rc != cudaSuccess || p->total_q == 0 || p->max_q_len == 0) return rc;
    if ((rc = supports(p)) != cudaSuccess) return rc;
    if (p->batch > 65535) {
        fprintf(stderr, "attention_prefill %s: batch %lld > 65535 (a grid dimension)\n", variant, (long long)p->batch);
        return cudaErrorInvalidValue;
    }
    *go = true;
    return cudaSuccess;
}

/* The grid of the GQA-packed variants (v6 and up): (kv heads, requests, tiles of bm packed rows), or
 * cudaErrorInvalidValue with the reason printed when the tiles overflow grid z. */
inline cudaError_t packed_grid(const kl_attention_prefill_params *p, int bm, const char *variant, dim3 *grid)
{
    const int64_t rows = p->max_q_len * (p->num_qo_heads / p->num_kv_heads), tiles = (rows + bm - 1) / bm;
    if (tiles > 65535 || rows > INT32_MAX) {
        fprintf(stderr, "attention_prefill %s: %lld packed rows, %lld tiles > 65535 (grid z)\n", variant,
                (long long)rows, (long long)tiles);
        return cudaErrorInvalidValue;
    }
    *grid = dim3((unsigned)p->num_kv_heads, (unsigned)p->batch, (unsigned)tiles);
    return cudaSuccess;
}

/* Kernel<<<grid, threads, smem>>>(args...) with its shared-memory limit raised first. */
template <auto Kernel, class... Args>
cudaError_t launch_kernel_with(dim3 grid, int threads, size_t smem, cudaStream_t stream, Args... args)
{
    cudaError_t rc = allow_smem<Kernel>(smem);
    if (rc != cudaSuccess) return rc;
    Kernel<<<grid, threads, smem, stream>>>(args...);
    return cudaGetLastError();
}
/* The same with the FlashAttention-2 ladder's kCtaThreads (v2..v6). */
template <auto Kernel, class... Args>
cudaError_t launch_kernel(dim3 grid, size_t smem, cudaStream_t stream, Args... args)
{
    return launch_kernel_with<Kernel>(grid, kCtaThreads, smem, stream, args...);
}

} // namespace mma
} // namespace kl

namespace kl {
namespace hopper {

/* Kernel<<<grid, threads, smem>>>(args...) launched in clusters of cluster_z CTAs along z (grid.z a
 * multiple of it), with its shared-memory limit raised first. */
template <auto Kernel, class... Args>
cudaError_t launch_cluster_kernel_with(dim3 grid, unsigned cluster_z, int threads, size_t smem, cudaStream_t stream,
                                       Args... args)
{
    cudaError_t rc = mma::allow_smem<Kernel>(smem);
    if (rc != cudaSuccess) return rc;
    cudaLaunchAttribute cluster = {};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = cluster_z;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid, config.blockDim = dim3((unsigned)threads), config.dynamicSmemBytes = smem;
    config.stream = stream, config.attrs = &cluster, config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, Kernel, args...);
}

/* The SMs of the current device: a persistent grid's size. */
inline int sm_count() { return this_device().sms; }

} // namespace hopper
} // namespace kl
