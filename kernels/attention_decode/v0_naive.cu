/* v0_naive: one block per (request, qo head), scalar loads, two passes over the keys.
 *
 * The obviously right way, written to be read: pass 1 computes every score s_t = sm_scale *
 * q . k_t (the block's 128 threads split head_dim, then a block-wide sum) and keeps the max m;
 * pass 2 computes each score again, p_t = exp(s_t - m), sums them into l and accumulates
 * p_t * v_t (thread i owns output dims i, i + 128, ...). out = acc / l, lse = m + log(l).
 * Everything in float32; nothing is rounded to the input dtype until out is written.
 * Cost: each key is read twice and each value once, the GQA group's qo heads each read their kv
 * head's keys again, and two block-wide reductions per key serialise the block: expect a small
 * fraction of the read bandwidth. That is the point of the ladder: v1 reads once, v2 once per
 * kv head instead of once per qo head, v3 splits long requests over blocks.
 * Several query tokens per request (qo_indptr): one block per (request, token, qo head), each
 * with its own causal limit: query i of q_len sees the first kv_len - q_len + 1 + i keys.
 * Run alone: build/kernlab bench attention_decode --variant v0_naive */
#include "kernels/attention_decode/decode.cuh"
#include "kernels/variant.h"

template <typename T>
static __global__ void decode_v0(const kl_attention_decode_params p)
{
    const int b = blockIdx.x, h = blockIdx.y, group = (int)(p.num_qo_heads / p.num_kv_heads), g = h / group;
    const int d = (int)p.head_dim, kv_len = kl::decode::kv_len(p, b), i = blockIdx.z;
    /* Query row of token i of request b, and how many keys it sees. */
    const int row = p.qo_indptr ? p.qo_indptr[b] + i : b, q_len = p.qo_indptr ? p.qo_indptr[b + 1] - p.qo_indptr[b] : 1;
    if (i >= q_len) return; /* a request with fewer tokens than the grid's max_q_len */
    const int n = kv_len - q_len + 1 + i;
    if (n == 0) return kl::decode::write_empty<T>(p, row, h, threadIdx.x, blockDim.x);
    const T *q = static_cast<const T *>(p.q) + ((int64_t)row * p.num_qo_heads + h) * d;
    const T *k_cache = static_cast<const T *>(p.k_cache), *v_cache = static_cast<const T *>(p.v_cache);

    /* The score of token t: this thread's slice of the dot product, summed over the block. */
    auto score = [&](int t) {
        const T *k = k_cache + kl::decode::kv_offset(p, b, t, g);
        float part = 0;
        for (int i = threadIdx.x; i < d; i += blockDim.x) part += kl::to_f32(q[i]) * kl::to_f32(k[i]);
        return p.sm_scale * kl::block_sum(part);
    };

    float m = -INFINITY;
    for (int t = 0; t < n; t++) m = fmaxf(m, score(t)); /* pass 1: the max */

    float l = 0, acc[2] = {0, 0}; /* head_dim <= 256 = 2 x 128 threads */
    for (int t = 0; t < n; t++) { /* pass 2: probabilities, their sum, and P.V */
        const float prob = expf(score(t) - m);
        l += prob;
        const T *v = v_cache + kl::decode::kv_offset(p, b, t, g);
        for (int j = 0; j < 2; j++) {
            const int i = threadIdx.x + j * blockDim.x;
            if (i < d) acc[j] += prob * kl::to_f32(v[i]);
        }
    }
    T *out = static_cast<T *>(p.out) + ((int64_t)row * p.num_qo_heads + h) * d;
    for (int j = 0; j < 2; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) out[i] = kl::from_f32<T>(acc[j] / l);
    }
    if (threadIdx.x == 0) p.lse[(int64_t)row * p.num_qo_heads + h] = m + logf(l);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params_multi(p, "v0_naive");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    const dim3 grid((unsigned)p->batch, (unsigned)p->num_qo_heads, (unsigned)kl_attention_decode_q_rows(p));
    KL_DISPATCH_FLOAT(p->dtype, T, decode_v0<T><<<grid, 128, 0, stream>>>(*p));
    return cudaGetLastError();
}

KL_VARIANT(attention_decode, v0_naive, launch, .min_cc = 70,
           .summary = "block per (request, query token, qo head), scalar, two passes (max, then sum and P.V)");
