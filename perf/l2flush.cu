/* Evicting the L2 between profiler passes by READING a buffer twice the L2's size with a
 * kernel: loads allocate lines in L2 (clean, so evicting them later costs no write-back),
 * pushing out whatever the previous pass left. A device-to-host copy does not do this: the
 * copy engine's reads were seen not to displace L2 contents (decode-sized inputs measured
 * 0.05x their modelled DRAM bytes after such a "flush"). */
#include <cuda_runtime.h>
#include <stdint.h>

static __global__ void read_all(const uint4 *__restrict__ p, size_t n, int *sink)
{
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    /* A store the compiler cannot prove dead keeps the loads; it never happens (buffer is zero). */
    if (acc == 0x9e3779b9u) *sink = (int)acc;
}

extern "C" int kl_l2_flush_read(const void *buf, size_t bytes, int *sink)
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    read_all<<<sms * 4, 512>>>((const uint4 *)buf, bytes / 16, sink);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return (int)e;
}
