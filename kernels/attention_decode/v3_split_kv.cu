/* v3_split_kv: long requests split over several blocks (flash-decoding), merged by their LSEs.
 *
 * What changed from v2: a (request, kv head) pair no longer has one block but one per chunk of
 * `chunk` tokens (grid z). v2 gave batch 1 only num_kv_heads = 8 blocks for 132 SMs; here a 32k
 * request becomes 8 x 128 blocks. The chunk is chosen from the shape alone (the host knows
 * max_kv_len, kl_attention_decode_split): enough blocks for 16 per SM, chunks of at least 256
 * tokens so the partial results stay small next to the keys read. Each block writes its
 * unnormalised partial (acc, m, l) for its heads into the workspace; a second small kernel,
 * one block per (request, qo head), rescales the partials onto one max and sums them
 * (decode.cuh: merge_partials). A request that fits one chunk writes its output directly.
 * Cost of the split: partials of (head_dim + 2) floats per chunk and qo head, written and read
 * once (under 2% of the keys' bytes at these chunk sizes), and one more launch.
 * Run alone: build/kernlab bench attention_decode --variant v3_split_kv */
#include "kernels/attention_decode/decode.cuh"
#include "kernels/variant.h"

template <typename T, int HD, int GMAX>
static __global__ void __launch_bounds__(128) decode_v3(const kl_attention_decode_params p, int chunk)
{
    extern __shared__ float sm[];
    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + GMAX - 1) / GMAX;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * GMAX;
    const int nh = min(GMAX, g * group + group - h0), n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk;
    if (n == 0 && split == 0) {
        for (int h = 0; h < nh; h++) kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    if (split >= splits) return; /* this request is shorter than the grid's longest */
    const int t0 = split * chunk, t1 = min(n, t0 + chunk);
    kl::decode::attend_cuda_cores<T, HD, GMAX>(p, b, g, h0, nh, t0, t1, sm);
    if (splits == 1) return kl::decode::write_output<T, HD, GMAX>(p, b, h0, nh, sm);
    using S = kl::decode::cuda_core_shape<T, HD>;
    for (int i = threadIdx.x; i < nh * (HD + 2); i += S::THREADS) {
        const int h = i / (HD + 2), d = i % (HD + 2);
        kl::decode::partial(p, split, b, h0 + h)[d] = sm[(S::GROUPS * GMAX + h) * (HD + 2) + d];
    }
}

/* One block per (request, qo head): the partials of a split request merged into out and lse. */
template <typename T>
static __global__ void merge_v3(const kl_attention_decode_params p, int chunk)
{
    __shared__ float w[KL_DECODE_MAX_SPLITS + 2];
    const int b = blockIdx.x, h = blockIdx.y, n = kl::decode::kv_len(p, b), splits = (n + chunk - 1) / chunk;
    if (splits > 1) kl::decode::merge_partials<T>(p, b, h, 1, splits, w);
}

template <typename T, int HD, int GMAX>
static void launch_g(const struct kl_attention_decode_params *p, struct kl_decode_split plan, cudaStream_t stream)
{
    using S = kl::decode::cuda_core_shape<T, HD>;
    const int64_t group = p->num_qo_heads / p->num_kv_heads, blocks = (group + GMAX - 1) / GMAX;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    decode_v3<T, HD, GMAX><<<grid, S::THREADS, S::template smem_floats<GMAX>() * sizeof(float), stream>>>(
        *p, (int)plan.chunk);
    if (plan.splits > 1) merge_v3<T><<<dim3((unsigned)p->batch, (unsigned)p->num_qo_heads), 128, 0, stream>>>(
        *p, (int)plan.chunk);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v3_split_kv");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 16, 16, 256, 1 << 30);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v3_split_kv: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    const int64_t group = p->num_qo_heads / p->num_kv_heads;
    KL_DISPATCH_FLOAT(p->dtype, T, KL_DISPATCH_HEAD_DIM(p->head_dim, HD, {
        if (group == 1) launch_g<T, HD, 1>(p, plan, stream);
        else if (group == 2) launch_g<T, HD, 2>(p, plan, stream);
        else if (group <= 4) launch_g<T, HD, 4>(p, plan, stream);
        else launch_g<T, HD, 8>(p, plan, stream);
    }));
    return cudaGetLastError();
}

KL_VARIANT(attention_decode, v3_split_kv, launch, .min_cc = 70,
           .summary = "v2 with long requests split over blocks, partials merged by LSE in a second kernel");
