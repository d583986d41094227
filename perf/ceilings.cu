/* The ceilings of this GPU, measured at the start of every bench run (lab/CONTRACTS.md section 6):
 * targets are fractions of what this machine does, not of a datasheet.
 *   copy      our own streaming copy, 16-byte accesses, 1 GiB in and 1 GiB out: bytes = 2 GiB
 *   read      our own streaming read of 2 GiB, the best of three shapes (16-byte loads, or bulk copies into
 *             shared memory on sm_90) and three grids
 *   gemm      cuBLAS bf16 x bf16 -> bf16 (fp32 accumulate), 8192^3, on random data
 *   launch    an empty kernel: per launch back to back on a stream, and inside a CUDA graph */
#include <cublas_v2.h>
#include <cjson/cJSON.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>

#include "kernels/ptx_sm90.cuh"
#include "lab/core/device.h"
#include "perf/bench.h"

/* The copy ceiling is the best of three simple copy shapes, since no single shape is the
 * fastest on every GPU (on an H200 a grid-stride loop with four loads in flight read 0.81 of
 * the clock-derived DRAM peak, while kernels of this lab moved more than that):
 *   0  grid-stride loop, four independent 16-byte loads per thread before their stores
 *   1  one 16-byte element per thread, one block per 256 elements (many small blocks)
 *   2  four consecutive 16-byte elements (64 contiguous bytes) per thread */
static __global__ void copy_stride4(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t i = tid;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a, dst[i + stride] = b, dst[i + 2 * stride] = c, dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

extern "C" int kl_copy_stride4(const void *src, void *dst, size_t n16, int blocks, cudaStream_t s)
{
    copy_stride4<<<blocks, 512, 0, s>>>(static_cast<const uint4 *>(src), static_cast<uint4 *>(dst), n16);
    return (int)cudaGetLastError();
}

static __global__ void copy_one(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n)
{
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

static __global__ void copy_four(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n)
{
    const size_t i = 4 * (blockIdx.x * (size_t)blockDim.x + threadIdx.x);
    if (i + 3 < n) {
        uint4 a = src[i], b = src[i + 1], c = src[i + 2], d = src[i + 3];
        dst[i] = a, dst[i + 1] = b, dst[i + 2] = c, dst[i + 3] = d;
    } else {
        for (size_t j = i; j < n; j++) dst[j] = src[j];
    }
}

/* The read ceiling is the best of three read shapes at 4, 8 and 16 blocks an SM: as for the copy, no
 * single shape reads fastest on every GPU, and a ceiling a kernel can beat judges nothing. Shapes 0 and
 * 1 (blocks of 512 threads) read every 16-byte word once, folded into one word per thread with XOR so
 * the compiler must keep every load; the fold is stored only when it equals a value random data never
 * produces, so almost nothing is written. Shape 2 reads the way the Hopper kernels that read fastest do:
 * the bytes land in shared memory through the copy engine of each SM, and no thread touches them.
 *   0  grid-stride loop, eight independent loads per thread in flight
 *   1  grid-stride loop, one load per step, marked streaming (ld.global.cs: the line is evicted first)
 *   2  sm_90: one thread a block issues bulk copies (cp.async.bulk) of chunks taken by the grid's
 *      stride into a ring of READ_BULK_STAGES stages, each counted on its mbarrier, and waits for a
 *      stage's copy to land before it reuses the stage: READ_BULK_SM_BYTES of each SM's shared memory
 *      in flight, whatever the grid. Built without sm_90a its body is empty: block 0 marks the sink
 *      when the copies ran, and a shape that did not mark it is not a measurement. */
static __global__ void read_stride8(const uint4 *__restrict__ src, size_t n, uint4 *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint4 acc = make_uint4(0, 0, 0, 0);
    size_t i = tid;
    for (; i + 7 * stride < n; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = src[i + j * stride];
#pragma unroll
        for (int j = 0; j < 8; j++) acc.x ^= v[j].x, acc.y ^= v[j].y, acc.z ^= v[j].z, acc.w ^= v[j].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = src[i];
        acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
    }
    if ((acc.x & acc.y & acc.z & acc.w) == 0xdeadbeefu) sink[tid % 1024] = acc;
}

static __global__ void read_streaming(const uint4 *__restrict__ src, size_t n, uint4 *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (size_t i = tid; i < n; i += stride) {
        const uint4 v = __ldcs(src + i);
        acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
    }
    if ((acc.x & acc.y & acc.z & acc.w) == 0xdeadbeefu) sink[tid % 1024] = acc;
}

#define READ_BULK_STAGES 4
#define READ_BULK_SM_BYTES (192 << 10)
#define READ_BULK_RAN 0x600dc0dau

static __global__ void read_bulk(const uint4 *__restrict__ src, size_t n, uint32_t chunk_bytes, uint4 *sink)
{
#if KL_SM90A
    using namespace kl::ptx;
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) uint64_t landed[READ_BULK_STAGES];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < READ_BULK_STAGES; s++)
        mbar_init(&landed[s], 1);
    mbar_init_fence();
    const size_t chunk16 = chunk_bytes / 16, chunks = (n + chunk16 - 1) / chunk16;
    uint32_t k = 0; /* this block's copies so far: copy k uses stage k % STAGES, in round k / STAGES */
    for (size_t c = blockIdx.x; c < chunks; c += gridDim.x, k++) {
        const int s = (int)(k % READ_BULK_STAGES);
        if (k >= READ_BULK_STAGES) mbar_wait(&landed[s], (int)((k / READ_BULK_STAGES - 1) & 1)); /* its last copy */
        const uint32_t bytes = (uint32_t)(c * chunk16 + chunk16 <= n ? chunk16 : n - c * chunk16) * 16;
        mbar_arrive_expect(&landed[s], bytes);
        bulk_load(smem_addr(ring + (size_t)s * chunk_bytes), src + c * chunk16, bytes, &landed[s]);
    }
    for (uint32_t j = k > READ_BULK_STAGES ? k - READ_BULK_STAGES : 0; j < k; j++) /* the copies still in flight */
        mbar_wait(&landed[j % READ_BULK_STAGES], (int)((j / READ_BULK_STAGES) & 1));
    if (blockIdx.x == 0) sink[0] = make_uint4(READ_BULK_RAN, 0, 0, 0);
#endif
}

struct read_ctx {
    const uint4 *src;
    uint4 *sink;
    size_t n;
    int blocks, shape;
    uint32_t chunk_bytes; /* shape 2: a stage of the ring */
};

static int launch_read(void *p, int set, cudaStream_t s)
{
    struct read_ctx *c = (struct read_ctx *)p;
    if (c->shape == 0) read_stride8<<<c->blocks, 512, 0, s>>>(c->src, c->n, c->sink);
    else if (c->shape == 1)
        read_streaming<<<c->blocks, 512, 0, s>>>(c->src, c->n, c->sink);
    else
        read_bulk<<<c->blocks, 32, READ_BULK_STAGES * c->chunk_bytes, s>>>(c->src, c->n, c->chunk_bytes, c->sink);
    return (int)cudaGetLastError();
}

static __global__ void empty_kernel() {}

/* Random bf16 in [-1, 1) from a hash of the index: never time on zeros (they run faster). */
static __global__ void fill_random(__nv_bfloat16 *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2bfloat16((float)(h & 0xffff) / 32768.f - 1.f);
    }
}

struct copy_ctx {
    const uint4 *src;
    uint4 *dst;
    size_t n;
    int sms, shape;
};

static int launch_copy(void *p, int set, cudaStream_t s)
{
    struct copy_ctx *c = (struct copy_ctx *)p;
    if (c->shape == 0) copy_stride4<<<c->sms * 8, 512, 0, s>>>(c->src, c->dst, c->n);
    else if (c->shape == 1) copy_one<<<(unsigned)((c->n + 255) / 256), 256, 0, s>>>(c->src, c->dst, c->n);
    else copy_four<<<(unsigned)((c->n / 4 + 255) / 256), 256, 0, s>>>(c->src, c->dst, c->n);
    return (int)cudaGetLastError();
}

static int launch_empty(void *p, int set, cudaStream_t s)
{
    empty_kernel<<<1, 32, 0, s>>>();
    return (int)cudaGetLastError();
}

struct gemm_ctx {
    cublasHandle_t handle;
    const __nv_bfloat16 *a, *b;
    __nv_bfloat16 *c;
    int n;
};

static int launch_gemm(void *p, int set, cudaStream_t s)
{
    struct gemm_ctx *g = (struct gemm_ctx *)p;
    const float one = 1.f, zero = 0.f;
    cublasSetStream(g->handle, s);
    cublasStatus_t st = cublasGemmEx(g->handle, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a, CUDA_R_16BF,
                                     g->n, g->b, CUDA_R_16BF, g->n, &zero, g->c, CUDA_R_16BF, g->n,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : (int)cudaErrorUnknown;
}

/* A copy moving the same bytes as a workload (half read, half written), with the ceiling's best
 * shape, rotated over enough buffers to stay cold in L2, timed as graph replays like the
 * workloads: the size's own ceiling, ramp-up and tail included. */
struct copy_rot_ctx {
    uint4 *src, *dst;
    size_t n; /* 16-byte elements each way per set */
    int sms, shape;
};

static int launch_copy_rot(void *p, int set, cudaStream_t s)
{
    struct copy_rot_ctx *c = (struct copy_rot_ctx *)p;
    struct copy_ctx one = {c->src + (size_t)set * c->n, c->dst + (size_t)set * c->n, c->n, c->sms, c->shape};
    return launch_copy(&one, 0, s);
}

extern "C" int kl_copy_same_bytes(const struct kl_ceilings *c, double bytes, struct kl_timing *t, struct kl_err *err)
{
    struct copy_rot_ctx cc = {nullptr, nullptr, (size_t)(bytes / 2 + 15) / 16, c->dev.sms, c->copy_shape};
    if (cc.n == 0) cc.n = 1;
    double set_bytes = 32.0 * cc.n, want = 4.0 * (double)c->dev.l2_bytes;
    int sets = set_bytes >= want ? 1 : (int)((want + set_bytes - 1) / set_bytes);
    if (sets * set_bytes > 4e9) sets = (int)(4e9 / set_bytes) > 0 ? (int)(4e9 / set_bytes) : 1;
    if (cudaMalloc((void **)&cc.src, 16 * cc.n * sets) != cudaSuccess ||
        cudaMalloc((void **)&cc.dst, 16 * cc.n * sets) != cudaSuccess) {
        cudaFree(cc.src);
        return kl_fail(err, "cudaMalloc for a %.0f-byte copy failed", bytes);
    }
    cudaMemset(cc.src, 0x3c, 16 * cc.n * sets);
    int rc = kl_time(launch_copy_rot, &cc, sets, 30, true, t, err);
    cudaFree(cc.src), cudaFree(cc.dst);
    return rc;
}

extern "C" int kl_ceilings_measure(struct kl_ceilings *c, FILE *progress, struct kl_err *err)
{
    memset(c, 0, sizeof *c);
    char why[256];
    if (!kl_device_cc(why, sizeof why)) return kl_fail(err, "%s", why);
    kl_device_query(&c->dev);
    int drv = 0, rt = 0, mem_khz = 0, bus = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(c->driver, sizeof c->driver, "%d.%d", drv / 1000, drv % 1000 / 10);
    snprintf(c->runtime, sizeof c->runtime, "%d.%d", rt / 1000, rt % 1000 / 10);
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, 0);
    c->dram_peak_gbs = 2.0 * mem_khz * 1e3 * (bus / 8) / 1e9; /* double data rate */

    struct kl_timing t;
    /* copy: 1 GiB each way, far beyond any L2, so every rep streams from DRAM */
    const size_t bytes = (size_t)1 << 30;
    struct copy_ctx cc = {nullptr, nullptr, bytes / 16, c->dev.sms, 0};
    if (cudaMalloc((void **)&cc.src, bytes) || cudaMalloc((void **)&cc.dst, bytes))
        return kl_fail(err, "cudaMalloc of 2 x 1 GiB for the copy ceiling failed");
    cudaMemset((void *)cc.src, 0x3c, bytes);
    if (progress) fprintf(progress, "ceilings: copy 1 GiB ...\n");
    c->copy_bytes = 2.0 * bytes;
    for (cc.shape = 0; cc.shape < 3; cc.shape++) {
        if (kl_time(launch_copy, &cc, 1, 20, false, &t, err)) return -1;
        double gbs = c->copy_bytes / (t.median_us * 1e-6) / 1e9;
        if (progress) fprintf(progress, "ceilings: copy shape %d: %.0f GB/s\n", cc.shape, gbs);
        if (gbs > c->dev.copy_gbs) c->dev.copy_gbs = gbs, c->copy_shape = cc.shape;
    }
    cudaFree((void *)cc.src), cudaFree(cc.dst);

    /* read: 2 GiB, best of three shapes (the bulk copies on sm_90 only) at three grid sizes (4, 8 and 16
     * blocks an SM) */
    {
        const size_t rbytes = (size_t)2 << 30;
        struct read_ctx rc = {nullptr, nullptr, rbytes / 16, 0, 0, 0};
        if (cudaMalloc((void **)&rc.src, rbytes) || cudaMalloc((void **)&rc.sink, 1024 * 16))
            return kl_fail(err, "cudaMalloc of 2 GiB for the read ceiling failed");
        fill_random<<<1024, 256>>>((__nv_bfloat16 *)rc.src, rbytes / 2, 3);
        if (progress) fprintf(progress, "ceilings: read 2 GiB ...\n");
        c->read_bytes = (double)rbytes;
        const int shapes = c->dev.cc >= 90 ? 3 : 2;
        if (shapes == 3 && cudaFuncSetAttribute(read_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                READ_BULK_SM_BYTES / 4) != cudaSuccess)
            return kl_fail(err, "the bulk read's shared memory (%d KB a block) was refused",
                           READ_BULK_SM_BYTES / 4 >> 10);
        for (rc.shape = 0; rc.shape < shapes; rc.shape++)
            for (int per_sm = 4; per_sm <= 16; per_sm *= 2) {
                rc.blocks = c->dev.sms * per_sm;
                rc.chunk_bytes = READ_BULK_SM_BYTES / per_sm / READ_BULK_STAGES; /* 12, 6 or 3 KB */
                uint4 ran = make_uint4(0, 0, 0, 0);
                if (rc.shape == 2) cudaMemset(rc.sink, 0, sizeof ran);
                if (kl_time(launch_read, &rc, 1, 20, false, &t, err)) return -1;
                if (rc.shape == 2 && (cudaMemcpy(&ran, rc.sink, sizeof ran, cudaMemcpyDeviceToHost) != cudaSuccess ||
                                      ran.x != READ_BULK_RAN)) {
                    if (progress) fprintf(progress, "ceilings: read shape 2 did not run (built without sm_90a)\n");
                    break;
                }
                const double gbs = c->read_bytes / (t.median_us * 1e-6) / 1e9;
                if (progress)
                    fprintf(progress, "ceilings: read shape %d, %d blocks per SM: %.0f GB/s\n", rc.shape, per_sm, gbs);
                if (gbs > c->read_gbs) c->read_gbs = gbs, c->read_shape = rc.shape;
            }
        cudaFree((void *)rc.src), cudaFree(rc.sink);
    }

    /* gemm */
    struct gemm_ctx g = {nullptr, nullptr, nullptr, nullptr, 8192};
    const size_t elems = (size_t)g.n * g.n;
    if (cublasCreate(&g.handle) != CUBLAS_STATUS_SUCCESS) return kl_fail(err, "cublasCreate failed");
    if (cudaMalloc((void **)&g.a, elems * 2) || cudaMalloc((void **)&g.b, elems * 2) || cudaMalloc((void **)&g.c, elems * 2))
        return kl_fail(err, "cudaMalloc for the 8192^3 GEMM failed");
    fill_random<<<1024, 256>>>((__nv_bfloat16 *)g.a, elems, 1);
    fill_random<<<1024, 256>>>((__nv_bfloat16 *)g.b, elems, 2);
    if (progress) fprintf(progress, "ceilings: cuBLAS bf16 GEMM 8192^3 ...\n");
    if (kl_time(launch_gemm, &g, 1, 20, false, &t, err)) return -1;
    c->dev.gemm_tflops = 2.0 * g.n * (double)g.n * g.n / (t.median_us * 1e-6) / 1e12;
    cudaFree((void *)g.a), cudaFree((void *)g.b), cudaFree(g.c);
    cublasDestroy(g.handle);

    /* launch floor */
    if (progress) fprintf(progress, "ceilings: launch floor ...\n");
    if (kl_time(launch_empty, nullptr, 1, 101, false, &t, err)) return -1;
    c->launch_us_stream = t.median_us;
    if (kl_time(launch_empty, nullptr, 1, 21, true, &t, err)) return -1;
    c->launch_us_graph = t.median_us;

    struct kl_clocks clk;
    kl_clocks_read(&clk);
    c->sm_clock_mhz = clk.sm_mhz, c->mem_clock_mhz = clk.mem_mhz, c->max_sm_clock_mhz = clk.max_sm_mhz;
    return 0;
}

extern "C" void kl_ceilings_print(FILE *f, const struct kl_ceilings *c)
{
    fprintf(f, "device          %s (sm_%d, %d SMs, L2 %.0f MB)\n", c->dev.name, c->dev.cc, c->dev.sms,
            c->dev.l2_bytes / 1e6);
    fprintf(f, "driver/runtime  %s / %s\n", c->driver, c->runtime);
    fprintf(f, "copy bandwidth  %.0f GB/s (read+write of %.1f GiB, best of 3 copy shapes: shape %d; DRAM peak from "
               "clocks %.0f GB/s, copy = %.2f of it)\n",
            c->dev.copy_gbs, c->copy_bytes / (1 << 30), c->copy_shape, c->dram_peak_gbs, c->dev.copy_gbs / c->dram_peak_gbs);
    fprintf(f, "read bandwidth  %.0f GB/s (a streaming read of %.1f GiB, best of 2 read shapes: shape %d; %.2f of the "
               "DRAM peak from clocks)\n",
            c->read_gbs, c->read_bytes / (1 << 30), c->read_shape, c->read_gbs / c->dram_peak_gbs);
    fprintf(f, "bf16 GEMM       %.0f TFLOP/s (cuBLAS 8192^3)\n", c->dev.gemm_tflops);
    fprintf(f, "ridge point     %.0f FLOP/byte\n", c->dev.gemm_tflops * 1e12 / (c->dev.copy_gbs * 1e9));
    fprintf(f, "launch floor    %.2f us per launch on a stream, %.2f us inside a CUDA graph\n", c->launch_us_stream,
            c->launch_us_graph);
    if (c->sm_clock_mhz)
        fprintf(f, "clocks          SM %d MHz (max %d), memory %d MHz (NVML, after the measurements)\n", c->sm_clock_mhz,
                c->max_sm_clock_mhz, c->mem_clock_mhz);
    else
        fprintf(f, "clocks          not available (NVML could not be opened)\n");
}

extern "C" cJSON *kl_ceilings_json(const struct kl_ceilings *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->dev.name);
    cJSON_AddNumberToObject(o, "cc", c->dev.cc);
    cJSON_AddNumberToObject(o, "sms", c->dev.sms);
    cJSON_AddNumberToObject(o, "l2_bytes", (double)c->dev.l2_bytes);
    cJSON_AddNumberToObject(o, "copy_gbs", c->dev.copy_gbs);
    cJSON_AddNumberToObject(o, "gemm_tflops", c->dev.gemm_tflops);
    cJSON_AddNumberToObject(o, "dram_peak_gbs", c->dram_peak_gbs);
    cJSON_AddNumberToObject(o, "copy_shape", c->copy_shape);
    cJSON_AddNumberToObject(o, "read_gbs", c->read_gbs);
    cJSON_AddNumberToObject(o, "read_shape", c->read_shape);
    cJSON_AddNumberToObject(o, "launch_us_stream", c->launch_us_stream);
    cJSON_AddNumberToObject(o, "launch_us_graph", c->launch_us_graph);
    cJSON_AddNumberToObject(o, "sm_clock_mhz", c->sm_clock_mhz);
    cJSON_AddNumberToObject(o, "max_sm_clock_mhz", c->max_sm_clock_mhz);
    cJSON_AddNumberToObject(o, "mem_clock_mhz", c->mem_clock_mhz);
    cJSON_AddStringToObject(o, "driver", c->driver);
    cJSON_AddStringToObject(o, "runtime", c->runtime);
    return o;
}
