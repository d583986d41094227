/* v1_online_vec16: one pass over the keys with an online softmax, 16-byte loads.
 *
 * What changed from v0: each key and value is read once (v0 read every key twice), with 16-byte
 * vector loads, and no block-wide barrier per key. A row of head_dim elements is split over
 * LANES lanes (128-dim bf16: 16 lanes of 8 elements), so a warp holds 2 tokens and the block's 4
 * warps 8 token streams; each stream keeps a running max m, sum l and unnormalised output acc,
 * rescaled by exp2(m_old - m_new) whenever a larger score arrives (the online softmax), and the
 * streams are merged once at the end (kernels/attention_decode/decode.cuh: attend_cuda_cores).
 * Still one block per (request, qo head): the GQA group's qo heads each read their kv head's
 * K/V again, so with 4 qo heads per kv head it loads 4x the model's K/V bytes; L2 serves the
 * repeats it still holds, so fewer reach DRAM (the guide's DRAM bytes / model column says how
 * many); v2 loads each once. Head dims 64, 128, 256.
 * Run alone: build/kernlab bench attention_decode --variant v1_online_vec16 */
#include "kernels/attention_decode/decode.cuh"
#include "kernels/variant.h"

template <typename T, int HD>
static __global__ void __launch_bounds__(128) decode_v1(const kl_attention_decode_params p)
{
    extern __shared__ float sm[];
    const int b = blockIdx.x, h = blockIdx.y, g = h / (int)(p.num_qo_heads / p.num_kv_heads);
    const int n = kl::decode::kv_len(p, b);
    if (n == 0) return kl::decode::write_empty<T>(p, b, h, threadIdx.x, blockDim.x);
    kl::decode::attend_cuda_cores<T, HD, 1>(p, b, g, h, 1, 0, n, sm);
    kl::decode::write_output<T, HD, 1>(p, b, h, 1, sm);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v1_online_vec16");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    const dim3 grid((unsigned)p->batch, (unsigned)p->num_qo_heads);
    KL_DISPATCH_FLOAT(p->dtype, T, KL_DISPATCH_HEAD_DIM(p->head_dim, HD, {
        using S = kl::decode::cuda_core_shape<T, HD>;
        decode_v1<T, HD><<<grid, S::THREADS, S::template smem_floats<1>() * sizeof(float), stream>>>(*p);
    }));
    return cudaGetLastError();
}

KL_VARIANT(attention_decode, v1_online_vec16, launch, .min_cc = 70,
           .summary = "block per (request, qo head), one pass, online softmax, 16-byte loads");
