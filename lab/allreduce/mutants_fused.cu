/* Deliberately wrong fused all-reduce + add + RMSNorm variants, linked into the tests only: each is
 * v10_lamport_add_rmsnorm's protocol done element by element (a block per token, the row's sum
 * polled again from the slots for the second pass, which no one empties before the next call;
 * in place, the second pass reads r back from residual_out)
 * with one bug the fused tests must flag (lab/allreduce/test_allreduce_fused.c):
 *   fused_no_residual_out  residual_out is never written back: the next layer's residual stream
 *                          would be stale (the outputs were poisoned, so it reads NaN)
 *   fused_tail_dropped     each row stops at its last whole 16-byte chunk: with hidden 4100 (fp16,
 *                          8 to a chunk) the last 4 elements are neither summed nor written, and
 *                          the row's mean of squares misses them
 *   fused_never_empty      the Lamport slots are never reset to the sentinel: call e + 3 reads
 *                          call e's data at once (the buffer not cleared)
 * and one that is v18's kernel (kernels/allreduce/fused_early_done.cuh, which v20 and v21 run with
 * sums of their own) with a row sum that misses a warp:
 *   fused_row_sum_misses_a_warp  the block's last warp's part of the row's sum of squares is left
 *                          out, so its norm divides by too small a mean (a one-warp row by eps) */
#include "kernels/allreduce/fused_early_done.cuh"
#include "kernels/allreduce/lamport.cuh"
#include "lab/core/registry.h"

using namespace kl_ar;

enum bug { NO_RESIDUAL_OUT, TAIL_DROPPED, NEVER_EMPTY };

template <typename T, int BUG>
static __global__ void __launch_bounds__(kThreads)
    mutant(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens, int64_t hidden,
           float eps, peers P, lamport_bufs L)
{
    constexpr int64_t V = 16 / sizeof(T);
    const uint32_t e = begin_call(P), set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous];
    const int64_t cols = BUG == TAIL_DROPPED ? hidden / V * V : hidden;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x)
        for (int64_t i = t * hidden + threadIdx.x; i < t * hidden + cols; i += blockDim.x) {
            const uint32_t b = elem_sendable<T>(elem_bits(x + i));
            for (int s = 0; s < P.world; s++)
                if (s != P.rank) elem_store(lamport_slot<T>(L, P, s, set, P.rank) + i, b);
        }
    if (BUG != NEVER_EMPTY) empty_set(L, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        float sum_sq = 0.f;
        for (int pass = 0; pass < 2; pass++) {
            const float inv_rms = pass ? rsqrtf(kl::block_sum(sum_sq) / (float)hidden + eps) : 0.f;
            for (int64_t i = t * hidden + threadIdx.x; i < t * hidden + cols; i += blockDim.x) {
                float acc = 0.f;
                for (int s = 0; s < P.world; s++) {
                    const uint32_t b = s == P.rank ? elem_sendable<T>(elem_bits(x + i))
                                                   : wait_elem<T>(P, lamport_slot<T>(L, P, P.rank, set, s) + i, e, s);
                    acc = s == 0 ? elem_value<T>(b) : acc + elem_value<T>(b);
                }
                /* In place, the second pass finds r (rounded) where the residual was. */
                const float r = pass && (const void *)residual == (const void *)residual_out ? kl::to_f32(residual_out[i])
                                                                                           : acc + kl::to_f32(residual[i]);
                if (pass == 0) {
                    sum_sq += r * r;
                    if (BUG != NO_RESIDUAL_OUT) residual_out[i] = kl::from_f32<T>(r);
                } else {
                    out[i] = kl::from_f32<T>(r * inv_rms * kl::to_f32(weight[i - t * hidden]));
                }
            }
        }
    }
    end_call(P, e);
}

template <int BUG>
static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_allreduce_check_add_rmsnorm(p, stream, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT, "mutant");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const unsigned grid = (unsigned)(p->num_tokens < p->ar.comm->blocks ? p->num_tokens : p->ar.comm->blocks);
    KL_DISPATCH_FLOAT(p->ar.dtype, T,
                      mutant<T, BUG><<<grid, kThreads, 0, stream>>>((const T *)p->ar.x, (const T *)p->residual,
                                                                      (const T *)p->weight, (T *)p->ar.out,
                                                                      (T *)p->residual_out, p->num_tokens, p->hidden,
                                                                      p->eps, make_peers(&p->ar), make_lamport(&p->ar)));
    return cudaGetLastError();
}

template <int BUG> KL_AR_FUSED_OPS(ops, launch<BUG>, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, mutant_fused_no_residual_out, ops<NO_RESIDUAL_OUT>, .min_cc = 70,
           .summary = "fused: residual_out never written back", .mutant = 1);
KL_VARIANT(allreduce, mutant_fused_tail_dropped, ops<TAIL_DROPPED>, .min_cc = 70,
           .summary = "fused: each row stops at its last whole 16-byte chunk (an odd hidden's tail lost)", .mutant = 1);
KL_VARIANT(allreduce, mutant_fused_never_empty, ops<NEVER_EMPTY>, .min_cc = 70,
           .summary = "fused: Lamport slots never reset, call e + 3 reads call e's data", .mutant = 1);

/* v18's row sum with the last warp's part dropped. */
struct row_sum_missing_a_warp {
    static __device__ __forceinline__ float sum(float v, int parity)
    {
        __shared__ float parts[2][32];
        return block_row_sum(threadIdx.x / 32 == blockDim.x / 32 - 1 ? 0.f : v, parts, parity);
    }
};

static cudaError_t launch_missing_a_warp(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    return launch_early_done<row_sum_missing_a_warp>(p, stream, "mutant_fused_row_sum_misses_a_warp");
}

KL_AR_FUSED_OPS(ops_missing_a_warp, launch_missing_a_warp, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, mutant_fused_row_sum_misses_a_warp, ops_missing_a_warp, .min_cc = 90,
           .summary = "fused: v18's kernel whose row sum of squares leaves out the block's last warp", .mutant = 1);
