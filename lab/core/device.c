/* Device access through the CUDA runtime only. cudart is linked statically and finds the
 * driver at run time, so on a machine without one these calls fail with an error code that
 * we turn into "no CUDA device: ..." instead of the binary failing to start. */
#include "device.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "tensor.h"

const char *kl_cuda_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

int kl_device_cc(char *why, size_t len)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
        /* The runtime's own words for the two common cases mislead ("driver version is
         * insufficient" on a machine with no driver at all), so they come after plain ones. */
        const char *plain = rc == cudaErrorInsufficientDriver ? " (no driver, or one older than this CUDA runtime)"
                            : rc == cudaErrorNoDevice || rc == cudaSuccess ? " (none found)"
                                                                           : "";
        if (why)
            snprintf(why, len, "no CUDA device%s: %s", plain,
                     rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount found none");
        cudaGetLastError(); /* clear the sticky error so later calls report their own */
        return 0;
    }
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    return major * 10 + minor;
}

bool kl_have_gpu(void) { return kl_device_cc(NULL, 0) > 0; }

int kl_device_query(struct kl_device_info *d)
{
    memset(d, 0, sizeof *d);
    d->cc = kl_device_cc(NULL, 0);
    if (!d->cc) return -1;
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return -1;
    snprintf(d->name, sizeof d->name, "%s", p.name);
    d->sms = p.multiProcessorCount;
    d->l2_bytes = p.l2CacheSize;
    return 0;
}

int kl_dev_alloc(void **ptr, size_t bytes) { return (int)cudaMalloc(ptr, bytes ? bytes : 16); }
int kl_dev_free(void *ptr) { return (int)cudaFree(ptr); }
int kl_dev_upload(void *dst, const void *src, size_t bytes)
{
    return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}
int kl_dev_download(void *dst, const void *src, size_t bytes)
{
    return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}
int kl_dev_fill_bytes(void *ptr, int byte, size_t bytes) { return (int)cudaMemset(ptr, byte, bytes); }
int kl_dev_sync(void) { return (int)cudaDeviceSynchronize(); }
