/* v21_lamport_add_rmsnorm_integer_sums: v18 whose warps add their parts of the row's sum of squares as
 * integers with two redux instructions, one barrier and four shared loads after them.
 *
 * What changed from v18, and why. The take-apart that led to v20 (its opening comment) found a warp
 * vote before the row's barrier almost free where five shuffles were not. redux.sync, the integer
 * reduction of a warp, is on the vote's side of that line, and an integer sum has no order: any
 * grouping gives the same bits. So each warp turns its 32 parts into fixed point on a scale of its
 * own, sums them exactly, and turns the sum back into one float:
 * - the warp's largest part, by redux max over the parts' bits (non-negative floats order as their
 *   bits do), gives the scale: its exponent e;
 * - each lane's part, mantissa and exponent taken from its bits, is shifted onto that scale: the
 *   largest part's mantissa lands in [2^26, 2^27), and a smaller part loses the bits that fall below
 *   the scale's last; 32 such add up below 2^32, and a redux add sums them exactly;
 * - the sum, converted to float (one rounding) and scaled back by 2^(e-153), is the warp's part.
 * A warp whose largest part is infinite or NaN gives that value, as a float sum would. Then v20's last
 * step: each warp's part into shared memory, one barrier, every thread reads the at most 16 parts as
 * four float4 words and adds them in a fixed tree. The arithmetic is kernels/allreduce/fixed_sums.cuh,
 * which the CPU tests run on the host (fixed-point sums: order-free, within their bound, NaN and
 * infinities kept). Everything else, the K blocks a row of a
 * cluster and their exchange of the slices' sums included, is v18's (fused_early_done.cuh).
 * Precision and bound: a part drops less than 2^-26 of its warp's largest part, so a warp's part is
 * within 2^-21 of the exact sum of its 32 parts, relative, before its one rounding: far inside the
 * fused bound. Every thread and every rank computes the same bits: nothing depends on the order
 * in which warps or lanes arrive.
 * Expect: v18 less its ten shuffles after the row's last unit, where v20 pays a second barrier and a
 * leader's 32 shared loads instead: two redux where v18 has five shuffles, then one barrier.
 * Run alone: build/kernlab bench allreduce --variant v21_lamport_add_rmsnorm_integer_sums */
#include "kernels/allreduce/fixed_sums.cuh"
#include "kernels/allreduce/fused_early_done.cuh"

using namespace kl_ar;

/* The warp's sum of v >= 0 (or NaN, or infinite) in fixed point (fixed_sums.cuh), the same bits in
 * every lane: two redux, the scale's and the sum's. */
__device__ __forceinline__ float warp_sum_fixed(float v)
{
    const uint32_t bits = float_bits(v), top = __reduce_max_sync(0xffffffffu, bits);
    if (fixed_special(top)) return bits_float(top);
    const int e = fixed_exponent(top);
    return fixed_value(__reduce_add_sync(0xffffffffu, fixed_part(bits, e)), e);
}

/* The block's sum of v (at most 16 warps): each warp's fixed-point part, one barrier, then every
 * thread adds the parts from four float4 words in a fixed tree (parts past the block's warps are 0). */
struct integer_row_sum {
    static __device__ __forceinline__ float sum(float v, int parity)
    {
        __shared__ __align__(16) float part[2][16];
        static_assert(kThreads / 32 <= 16, "16 parts at most");
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (int)(blockDim.x / 32);
        const float w = warp_sum_fixed(v);
        if (lane == 0) part[parity][warp] = w;
        if (warp == 0 && lane >= warps && lane < 16) part[parity][lane] = 0.f;
        __syncthreads();
        return sum16_in_tree(part[parity]);
    }
};

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    return launch_early_done<integer_row_sum>(p, stream, "v21_lamport_add_rmsnorm_integer_sums");
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v21_lamport_add_rmsnorm_integer_sums, ops, .min_cc = 90,
           .summary = "v18 whose warps add their parts of the row's sum of squares exactly in fixed point by redux "
                      "(max for the scale, then add), one barrier, the warps' parts added in a fixed tree");
