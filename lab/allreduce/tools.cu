/* The device side of the allreduce harness (not variants): fresh inputs made on the device
 * before every call, a late rank's sleep, the record of each call's output, and a consumer
 * kernel launched with programmatic dependent launch. All of it is stream-ordered and graph-safe:
 * the call number can come from a device counter that the graph itself advances. */
#include "kernels/common.cuh"
#include "kernels/ptx_sys_scope.cuh"
#include "lab/allreduce/gen.h"

template <typename T>
static __global__ void generate(T *x, int64_t n, uint64_t seed, uint32_t call, const uint32_t *call_dev, uint32_t rank)
{
    const uint32_t c = call_dev ? *call_dev : call;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = kl::from_f32<T>(kl_ar_gen(seed, c, rank, (uint64_t)i));
}

static unsigned blocks_for(int64_t n) { return (unsigned)(n / 256 + 1 < 1024 ? n / 256 + 1 : 1024); }

extern "C" int kl_ar_dev_generate(void *x, enum kl_dtype t, int64_t n, uint64_t seed, uint32_t call,
                                  const uint32_t *call_dev, uint32_t rank, cudaStream_t s)
{
    KL_DISPATCH_FLOAT(t, T, generate<T><<<blocks_for(n), 256, 0, s>>>((T *)x, n, seed, call, call_dev, rank));
    return (int)cudaGetLastError();
}

/* One thread sleeps 5-40 us, a different length each call, so the rank behind it reaches each
 * all-reduce late by a varying margin: the other ranks must wait at the barrier, and a barrier
 * that does not wait reads stale staging. */
static __global__ void delay(uint32_t call, const uint32_t *call_dev)
{
    const uint32_t c = call_dev ? *call_dev : call;
    const unsigned long long ns = 5000ull + (c * 7919u) % 35000u;
    const unsigned long long t0 = kl::ptx::globaltimer();
    do {
        __nanosleep(1000);
    } while (kl::ptx::globaltimer() - t0 < ns);
}

extern "C" int kl_ar_dev_delay(uint32_t call, const uint32_t *call_dev, cudaStream_t s)
{
    delay<<<1, 1, 0, s>>>(call, call_dev);
    return (int)cudaGetLastError();
}

static __global__ void fill32(uint32_t *p, uint32_t v, size_t words)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}

extern "C" int kl_ar_dev_fill32(void *p, uint32_t v, size_t words, cudaStream_t s)
{
    if (words) fill32<<<1024, 256, 0, s>>>((uint32_t *)p, v, words);
    return (int)cudaGetLastError();
}

/* Copies the output into its slot of the history; the last block to finish advances the
 * counter (so every block read the same call number first). */
static __global__ void record(const uint8_t *out, uint8_t *history, size_t bytes, uint32_t call, uint32_t *call_dev,
                              uint32_t *blocks_done)
{
    const uint32_t c = call_dev ? *call_dev : call;
    uint8_t *dst = history + (size_t)c * bytes;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = out[i];
    if (!call_dev) return;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(blocks_done, 1u) == gridDim.x - 1) *blocks_done = 0, *call_dev = c + 1;
    }
}

extern "C" int kl_ar_dev_record(const void *out, void *history, enum kl_dtype t, int64_t n, uint32_t call,
                                uint32_t *call_dev, cudaStream_t s)
{
    /* The counter's neighbour word counts finished blocks (callers allocate two words). */
    const size_t bytes = (size_t)n * kl_dtype_size(t);
    record<<<blocks_for((int64_t)bytes / 4), 256, 0, s>>>((const uint8_t *)out, (uint8_t *)history, bytes, call,
                                                          call_dev, call_dev ? call_dev + 1 : nullptr);
    return (int)cudaGetLastError();
}

/* A consumer as a PDL-launched kernel is written: it may start while the all-reduce still runs,
 * and griddepcontrol.wait holds it until that grid has completed and its writes are visible. A
 * variant that signalled completion early (launch_dependents) before writing out would still be
 * safe for this consumer; one that returned before its output was written would not be. */
static __global__ void pdl_copy(const uint8_t *src, uint8_t *dst, size_t bytes)
{
    kl::pdl_wait(); /* griddepcontrol.wait; nothing below sm_90 */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

extern "C" int kl_ar_dev_pdl_copy(const void *src, void *dst, enum kl_dtype t, int64_t n, cudaStream_t s)
{
    const size_t bytes = (size_t)n * kl_dtype_size(t);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks_for((int64_t)bytes / 4));
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return (int)cudaLaunchKernelEx(&cfg, pdl_copy, (const uint8_t *)src, (uint8_t *)dst, bytes);
}
