/* v0_naive: one block per (query row, qo head), scalar float32, the softmax in two passes.
 *
 * The obviously right version the ladder starts from. Each block finds its request, copies its q
 * row to shared memory as float32, and walks the keys this query sees:
 *   pass 1: every thread takes keys tid, tid + 128, ...: dot(q, k_j) -> the row max m (block reduction)
 *   pass 2: keys in chunks of 128: thread t computes p_j = exp(s_j - m) for one key of the chunk into
 *           shared memory, then each thread adds sum_j p_j v_j[c] for its columns c = tid, tid + 128, ...
 * The max is known before any exponential, so nothing is rescaled and nothing overflows.
 * Work mapping: grid (total_q, num_qo_heads), 128 threads. K and V rows are read from global memory
 * by every query that sees them (L2 serves the repeats): no reuse at all, far below any roofline;
 * its use is to be easy to believe. Run alone: build/kernlab bench attention_prefill --variant v0_naive */
#include <math.h>

#include "kernels/attention_prefill/paged.cuh"
#include "kernels/variant.h"

namespace {

constexpr int kThreads = 128;
constexpr int kMaxColsPerThread = 8; /* head_dim <= 1024 */

/* Max over the block; every thread gets it. Two barriers: all partials written before thread 0
 * reads them; the result read by everyone before `part` is reused. */
__device__ float block_max(float v, float *part)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float m = part[0];
    for (int w = 1; w < kThreads / 32; w++) m = fmaxf(m, part[w]);
    __syncthreads();
    return m;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) prefill_v0(const kl_attention_prefill_params p, kl::prefill::fast_div page)
{
    using namespace kl::prefill;
    extern __shared__ float q_row[]; /* head_dim floats */
    __shared__ float prob[kThreads];
    __shared__ float part[kThreads / 32];
    const int token = blockIdx.x, head = blockIdx.y, d = (int)p.head_dim;
    const int kv_head = head / (int)(p.num_qo_heads / p.num_kv_heads);
    const request r = load_request(p, find_request(p.qo_indptr, (int)p.batch, token));
    const int n = visible_keys(p.causal, r.q_len, r.kv_len, token - r.q0);
    const T *q = (const T *)p.q + ((int64_t)token * p.num_qo_heads + head) * d;
    const T *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    for (int c = threadIdx.x; c < d; c += kThreads) q_row[c] = kl::to_f32(q[c]);
    __syncthreads();

    /* Pass 1: the row max of the scaled logits. */
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += kThreads) {
        const T *k = kc + cache_offset(p, p.kv_indices, r, page, j, kv_head);
        float dot = 0.f;
        for (int c = 0; c < d; c++) dot += q_row[c] * kl::to_f32(k[c]);
        m = fmaxf(m, dot * p.sm_scale);
    }
    m = block_max(m, part);

    /* Pass 2: weights of a chunk of keys, then their weighted values. */
    float acc[kMaxColsPerThread] = {0.f}, l = 0.f;
    for (int j0 = 0; j0 < n; j0 += kThreads) {
        const int j = j0 + threadIdx.x;
        float pj = 0.f;
        if (j < n) {
            const T *k = kc + cache_offset(p, p.kv_indices, r, page, j, kv_head);
            float dot = 0.f;
            for (int c = 0; c < d; c++) dot += q_row[c] * kl::to_f32(k[c]);
            pj = expf(dot * p.sm_scale - m);
        }
        prob[threadIdx.x] = pj;
        l += pj; /* this thread's share of the sum; reduced once at the end */
        __syncthreads(); /* the chunk's weights are all in prob[] */
        const int chunk = min(kThreads, n - j0);
        for (int jj = 0; jj < chunk; jj++) {
            const T *v = vc + cache_offset(p, p.kv_indices, r, page, j0 + jj, kv_head);
#pragma unroll
            for (int i = 0; i < kMaxColsPerThread; i++) {
                const int c = threadIdx.x + i * kThreads;
                if (c < d) acc[i] += prob[jj] * kl::to_f32(v[c]);
            }
        }
        __syncthreads(); /* everyone is done with prob[] before the next chunk overwrites it */
    }
    /* The sum of the weights: a block reduction (sum) through the same helper's pattern. */
    l = kl::block_sum(l);

    T *out = (T *)p.out + ((int64_t)token * p.num_qo_heads + head) * d;
#pragma unroll
    for (int i = 0; i < kMaxColsPerThread; i++) {
        const int c = threadIdx.x + i * kThreads;
        if (c < d) out[c] = kl::from_f32<T>(n > 0 ? acc[i] / l : 0.f);
    }
    if (threadIdx.x == 0) p.lse[(int64_t)token * p.num_qo_heads + head] = n > 0 ? m + logf(l) : -INFINITY;
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_prefill_check_params(p, "v0_naive");
    if (rc != cudaSuccess || p->total_q == 0) return rc;
    const dim3 grid((unsigned)p->total_q, (unsigned)p->num_qo_heads);
    const size_t smem = sizeof(float) * (size_t)p->head_dim;
    const kl::prefill::fast_div page = kl::prefill::make_fast_div((uint32_t)p->page_size);
    KL_DISPATCH_FLOAT(p->dtype, T, prefill_v0<T><<<grid, kThreads, smem, stream>>>(*p, page));
    return cudaGetLastError();
}

} // namespace

KL_VARIANT(attention_prefill, v0_naive, launch, .min_cc = 80,
           .summary = "one block per (query, qo head), scalar float32, max pass then weights-and-values pass");
