/* v2_pdl: v1 plus what a 64-token decode step needs: hide the launch and the weight load.
 *
 * What changed from v1, for grids of few rows (fewer than 2x the SMs: a decode batch):
 * (1) the weight row is loaded into registers FIRST, before the kernel waits on its
 * predecessor: it never depends on the previous kernel, so with Programmatic Dependent Launch
 * (sm_90: griddepcontrol) it is fetched while that kernel still runs; (2) each block lets the
 * next kernel start launching at once (launch_dependents), so its launch overlaps this one;
 * (3) each row gets up to 1024 threads holding one 16-byte vector each, so a thread's critical
 * path is one DRAM round trip. griddepcontrol.wait returns only when the previous grid has
 * finished and its writes are visible, so x is always read after whoever produced it; in
 * serving, RMSNorm follows another kernel on the same stream: exactly this situation.
 * Grids of many rows take v1's path (weight after the reduction, no PDL): there the early
 * weight load would hold the weight row in registers through the reduction, and the extra
 * registers cost resident blocks that a bandwidth-bound kernel needs to keep DRAM busy.
 * On sm_80 PDL does not exist: the few-rows path only keeps the early weight load.
 * Run alone: build/kernlab bench rmsnorm --variant v2_pdl */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/variant.h"

template <typename T, int W, int VPT, bool FEW_ROWS>
static __global__ void __launch_bounds__(1024) rmsnorm_v2(const T *__restrict__ x, const T *__restrict__ residual,
                                                          const T *__restrict__ weight, T *out, T *residual_out,
                                                          int64_t hidden, float eps)
{
    using V = kl::vec<T, W>;
    const int64_t row = blockIdx.x;
    const int nvec = (int)(hidden / W);

    /* The weight does not come from the previous kernel: load it before waiting on it. */
    float w[VPT][W]; /* used only when FEW_ROWS; otherwise optimised away */
    if constexpr (FEW_ROWS) {
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            V a = j < nvec ? reinterpret_cast<const V *>(weight)[j] : V{};
#pragma unroll
            for (int k = 0; k < W; k++) w[i][k] = kl::to_f32(a.v[k]);
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        kl::pdl_release(); /* griddepcontrol.launch_dependents: the next kernel may launch now... */
        kl::pdl_wait();    /* griddepcontrol.wait: ...and this one reads x only now */
#endif
    }

    const V *xr = reinterpret_cast<const V *>(x + row * hidden);
    const V *rr = reinterpret_cast<const V *>(residual + row * hidden);
    float v[VPT][W];
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < nvec) {
            V a = xr[j];
            if (residual) {
                V b = rr[j], s;
#pragma unroll
                for (int k = 0; k < W; k++) {
                    v[i][k] = kl::to_f32(a.v[k]) + kl::to_f32(b.v[k]);
                    s.v[k] = kl::from_f32<T>(v[i][k]);
                }
                reinterpret_cast<V *>(residual_out + row * hidden)[j] = s;
            } else {
#pragma unroll
                for (int k = 0; k < W; k++) v[i][k] = kl::to_f32(a.v[k]);
            }
#pragma unroll
            for (int k = 0; k < W; k++) sum_sq += v[i][k] * v[i][k];
        }
    }
    const float inv_rms = rsqrtf(kl::block_sum(sum_sq) / (float)hidden + eps);

    V *orow = reinterpret_cast<V *>(out + row * hidden);
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < nvec) {
            /* Many rows: v1's order, the weight read here, after the reduction (fewer live
             * registers than holding it across the barrier). */
            V wv, o;
            if constexpr (!FEW_ROWS) wv = reinterpret_cast<const V *>(weight)[j];
#pragma unroll
            for (int k = 0; k < W; k++)
                o.v[k] = kl::from_f32<T>(v[i][k] * inv_rms * (FEW_ROWS ? w[i][k] : kl::to_f32(wv.v[k])));
            orow[j] = o;
        }
    }
}

template <typename T, int W, int VPT, bool FEW_ROWS>
static cudaError_t launch_vpt(const struct kl_rmsnorm_params *p, int threads, bool pdl, cudaStream_t stream)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)p->num_tokens);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl && FEW_ROWS ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, rmsnorm_v2<T, W, VPT, FEW_ROWS>, (const T *)p->x, (const T *)p->residual,
                              (const T *)p->weight, (T *)p->out, (T *)p->residual_out, p->hidden, p->eps);
}

/* Few rows (a decode batch): the most threads per row, for the shortest per-thread chain.
 * Many rows: at most 256 threads with several vectors each, as v1. */
template <typename T, int W>
static cudaError_t launch_w(const struct kl_rmsnorm_params *p, bool pdl, int sms, cudaStream_t stream)
{
    const bool few_rows = p->num_tokens < 2 * sms;
    const int64_t nvec = p->hidden / W, max_threads = few_rows ? 1024 : 256;
    int vpt = 1;
    while (vpt < 16 && (nvec + vpt - 1) / vpt > max_threads) vpt *= 2;
    const int64_t threads = ((nvec + vpt - 1) / vpt + 31) / 32 * 32;
    if (threads > 1024) {
        fprintf(stderr, "rmsnorm v2_pdl: hidden=%lld is longer than 1024 threads x 16 vectors\n", (long long)p->hidden);
        return cudaErrorInvalidValue;
    }
#define KL_V2_VPT(n)                                                                          \
    case n:                                                                                   \
        return few_rows ? launch_vpt<T, W, n, true>(p, (int)threads, pdl, stream)             \
                        : launch_vpt<T, W, n, false>(p, (int)threads, pdl, stream)
    switch (vpt) {
        KL_V2_VPT(1);
        KL_V2_VPT(2);
        KL_V2_VPT(4);
        KL_V2_VPT(8);
        KL_V2_VPT(16);
    }
#undef KL_V2_VPT
    return cudaErrorInvalidValue;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static cudaError_t launch(const struct kl_rmsnorm_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rmsnorm_check_params(p, "v2_pdl");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    /* Device properties once per process: the launcher runs in every decode step. */
    static int cc = -1, sms = 0;
    if (cc < 0) {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        cc = major * 10;
    }
    const bool pdl = cc >= 90;
    const int width = 16 / (int)kl_dtype_size(p->dtype);
    const bool vector = p->hidden % width == 0 && aligned16(p->x) && aligned16(p->weight) && aligned16(p->out) &&
                        (!p->residual || (aligned16(p->residual) && aligned16(p->residual_out)));
    KL_DISPATCH_FLOAT(p->dtype, T,
                      rc = vector ? launch_w<T, 16 / sizeof(T)>(p, pdl, sms, stream) : launch_w<T, 1>(p, pdl, sms, stream));
    return rc != cudaSuccess ? rc : cudaGetLastError();
}

KL_VARIANT(rmsnorm, v2_pdl, launch, .min_cc = 70,
           .summary = "few rows: weight loaded before a programmatic-dependent-launch wait, 1024 threads/row; else v1");
