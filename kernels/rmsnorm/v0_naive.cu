/* v0_naive: the textbook RMSNorm, written for clarity.
 *
 * Work mapping: one block of 256 threads per row (token). Each thread walks the row with a
 * stride of 256 elements, one scalar load at a time, so a warp reads 32 consecutive elements:
 * coalesced, but only 2-4 bytes per thread per load.
 * Two passes over global memory: pass 1 sums the squares, pass 2 reads the row again to scale
 * it. The second read usually hits L2 (a row is 8 KB), yet the loads are narrow and each pass
 * has little independent work in flight, so expect well under the copy bandwidth.
 * The reduction is the classic shared-memory tree: log2(256) = 8 barriers.
 *
 * Run alone: build/kernlab bench rmsnorm --variant v0_naive */
#include "kernels/common.cuh"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/variant.h"

constexpr int kThreads = 256;

template <typename T>
static __global__ void rmsnorm_v0(const T *__restrict__ x, const T *__restrict__ residual, const T *__restrict__ weight,
                           T *out, T *residual_out, int64_t hidden, float eps)
{
    const int64_t row = blockIdx.x;
    const T *xr = x + row * hidden;

    /* Pass 1: each thread's share of the sum of squares. With a residual, the sum r = x + res
     * is what gets normalised; it is also the residual_out this kernel must write. */
    float sum_sq = 0.f;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
        float r = kl::to_f32(xr[i]);
        if (residual) {
            r += kl::to_f32(residual[row * hidden + i]);
            residual_out[row * hidden + i] = kl::from_f32<T>(r);
        }
        sum_sq += r * r;
    }

    /* Tree reduction in shared memory: halve the active threads each step. The barrier inside
     * the loop makes the previous step's writes visible before they are read. */
    __shared__ float partial[kThreads];
    partial[threadIdx.x] = sum_sq;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float inv_rms = rsqrtf(partial[0] / (float)hidden + eps);

    /* Pass 2: read the row again and scale it. The sum is recomputed in float32 from the
     * inputs (not read back from residual_out) so the value normalised is the unrounded one. */
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
        float r = kl::to_f32(xr[i]);
        if (residual) r += kl::to_f32(residual[row * hidden + i]);
        out[row * hidden + i] = kl::from_f32<T>(r * inv_rms * kl::to_f32(weight[i]));
    }
}

static cudaError_t launch(const struct kl_rmsnorm_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rmsnorm_check_params(p, "v0_naive");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    KL_DISPATCH_FLOAT(p->dtype, T,
                      rmsnorm_v0<T><<<(unsigned)p->num_tokens, kThreads, 0, stream>>>(
                          (const T *)p->x, (const T *)p->residual, (const T *)p->weight, (T *)p->out,
                          (T *)p->residual_out, p->hidden, p->eps));
    return cudaGetLastError();
}

KL_VARIANT(rmsnorm, v0_naive, launch, .min_cc = 70,
           .summary = "one block per row, scalar loads, two passes, shared-memory tree reduction");
