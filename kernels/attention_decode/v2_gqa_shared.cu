/* v2_gqa_shared: one block serves every qo head of a kv head, so each K/V row is read once.
 *
 * What changed from v1: the grid is (request, kv head) instead of (request, qo head). In
 * Llama-3.1-8B four qo heads share each kv head; v1 read every K/V row four times (once per qo
 * head, mostly from DRAM: a request's 8k tokens of one kv head are 4 MB, the L2 cannot hold them
 * between blocks), v2 reads it once and computes the four dot products and four P.V updates from
 * the same registers. Bytes drop by the group size (the counters' bytes_ratio goes from ~4 to
 * ~1); arithmetic per byte grows by the same factor, which is still far below the CUDA cores'
 * rate for groups up to 4. Groups above 8 run as several head blocks of 8.
 * The bound is now the read bandwidth for long requests; what is left is parallelism: batch 1
 * has only num_kv_heads = 8 blocks for 132 SMs. v3 splits the keys.
 * Run alone: build/kernlab bench attention_decode --variant v2_gqa_shared */
#include "kernels/attention_decode/decode.cuh"
#include "kernels/variant.h"

template <typename T, int HD, int GMAX>
static __global__ void __launch_bounds__(128) decode_v2(const kl_attention_decode_params p)
{
    extern __shared__ float sm[];
    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + GMAX - 1) / GMAX;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * GMAX;
    const int nh = min(GMAX, g * group + group - h0), n = kl::decode::kv_len(p, b);
    if (n == 0) {
        for (int h = 0; h < nh; h++) kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    kl::decode::attend_cuda_cores<T, HD, GMAX>(p, b, g, h0, nh, 0, n, sm);
    kl::decode::write_output<T, HD, GMAX>(p, b, h0, nh, sm);
}

template <typename T, int HD, int GMAX>
static void launch_g(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    using S = kl::decode::cuda_core_shape<T, HD>;
    const int64_t group = p->num_qo_heads / p->num_kv_heads, blocks = (group + GMAX - 1) / GMAX;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks));
    decode_v2<T, HD, GMAX><<<grid, S::THREADS, S::template smem_floats<GMAX>() * sizeof(float), stream>>>(*p);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v2_gqa_shared");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    const int64_t group = p->num_qo_heads / p->num_kv_heads;
    /* The smallest head block that holds the group: registers grow with it. */
    KL_DISPATCH_FLOAT(p->dtype, T, KL_DISPATCH_HEAD_DIM(p->head_dim, HD, {
        if (group == 1) launch_g<T, HD, 1>(p, stream);
        else if (group == 2) launch_g<T, HD, 2>(p, stream);
        else if (group <= 4) launch_g<T, HD, 4>(p, stream);
        else launch_g<T, HD, 8>(p, stream);
    }));
    return cudaGetLastError();
}

KL_VARIANT(attention_decode, v2_gqa_shared, launch, .min_cc = 70,
           .summary = "block per (request, kv head) serving its whole GQA group: K/V read once");
