/* Checks perf/counters.c on a GPU against workloads whose counters we know in advance:
 *   copy 256 MiB  - DRAM must see ~256 MiB read and ~256 MiB written (the byte model);
 *   copy 16 MiB   - fits in L2: reads still come from DRAM only if the L2 flush between passes works;
 *   bf16 GEMM     - a small WMMA kernel: the tensor pipe must show up.
 * `probe copy256|copy16|gemm` runs one case (its own process: a crash names its case);
 * `probe plain` runs the same kernels once without CUPTI, for `ncu --metrics ... probe plain`.
 *
 * Standalone (not part of the CMake build); on the GPU machine:
 *   nvcc -O2 -arch=sm_90 -DKL_COUNTERS_NO_JSON perf/counters_probe.cu perf/counters.c \
 *        -lcupti -lnvperf_host -lnvperf_target -o counters_probe && ./counters_probe */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "counters.h"

/* lab/core/check.c provides this in the real build; the probe links only counters.c. */
int kl_fail(struct kl_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#define CHECK(expr)                                                                           \
    do {                                                                                      \
        cudaError_t e_ = (expr);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* 16-byte loads and stores, grid-stride: each byte read once and written once. */
__global__ void copy_kernel(const float4 *__restrict__ src, float4 *__restrict__ dst, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/* C[m,n] = A[m,k] B[k,n], bf16 in, fp32 out, all row-major; one warp per 16x16 tile of C,
 * operands straight from global memory (L2 serves the re-reads). Slow, but all MMA. */
__global__ void gemm_kernel(const __nv_bfloat16 *__restrict__ a, const __nv_bfloat16 *__restrict__ b,
                            float *__restrict__ c, int m, int n, int k)
{
    using namespace nvcuda;
    int tile_m = blockIdx.y * 16, tile_n = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 16;
    if (tile_m >= m || tile_n >= n) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < k; kk += 16) {
        wmma::load_matrix_sync(fa, a + (size_t)tile_m * k + kk, k);
        wmma::load_matrix_sync(fb, b + (size_t)kk * n + tile_n, n);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + (size_t)tile_m * n + tile_n, acc, n, wmma::mem_row_major);
}

struct copy_case {
    float4 *src, *dst;
    size_t n; /* float4 elements */
};
static void launch_copy(void *p)
{
    struct copy_case *c = (struct copy_case *)p;
    copy_kernel<<<132 * 16, 256>>>(c->src, c->dst, c->n);
}

struct gemm_case {
    __nv_bfloat16 *a, *b;
    float *c;
    int m, n, k;
};
static void launch_gemm(void *p)
{
    struct gemm_case *g = (struct gemm_case *)p;
    dim3 block(128), grid(g->n / 16 / 4, g->m / 16); /* 4 warps per block, along n */
    gemm_kernel<<<grid, block>>>(g->a, g->b, g->c, g->m, g->n, g->k);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Collects and prints one case; model_bytes is what each direction should move (0: no model). */
static int report(const char *name, void (*launch)(void *), void *ctx, double model_read,
                  double model_write)
{
    struct kl_counters c;
    struct kl_err err = {{0}};
    fprintf(stderr, "collecting %s\n", name);
    double t0 = now_s();
    int rc = kl_counters_collect(launch, ctx, &c, &err);
    double dt = now_s() - t0;
    if (rc) {
        fprintf(stderr, "%s: collect failed: %s\n", name, err.msg);
        return 1;
    }
    if (!c.valid) {
        fprintf(stderr, "%s: %s\n", name, c.why);
        return 1;
    }
    const double mib = 1024.0 * 1024.0;
    printf("== %s: %d passes, %.1f ms for the whole collection\n", name, c.n_passes, dt * 1e3);
    printf("  dram_read_bytes        %14.0f  (%.2f MiB", c.dram_read_bytes, c.dram_read_bytes / mib);
    if (model_read > 0) printf(", %.3f x model", c.dram_read_bytes / model_read);
    printf(")\n  dram_write_bytes       %14.0f  (%.2f MiB", c.dram_write_bytes, c.dram_write_bytes / mib);
    if (model_write > 0) printf(", %.3f x model", c.dram_write_bytes / model_write);
    printf(")\n");
    printf("  dram_throughput_pct    %8.2f\n  sm_throughput_pct      %8.2f\n", c.dram_throughput_pct,
           c.sm_throughput_pct);
    printf("  achieved_occupancy_pct %8.2f\n  tensor_pipe_pct        %8.2f\n", c.achieved_occupancy_pct,
           c.tensor_pipe_pct);
    printf("  l2_hit_rate_pct        %8.2f\n  stalls:", c.l2_hit_rate_pct);
    for (int i = 0; i < c.n_stalls; i++) printf(" %s %.1f%%", c.stalls[i].name, c.stalls[i].pct);
    printf("\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash inside CUPTI must not eat what was printed */
    const char *only = argc > 1 ? argv[1] : "all";
    bool plain = !strcmp(only, "plain"), all = !strcmp(only, "all");
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, sm_%d%d, %d SMs, L2 %d MiB\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.l2CacheSize >> 20);

    const size_t big = 256u << 20, small = 16u << 20;
    struct copy_case big_copy = {NULL, NULL, big / sizeof(float4)};
    CHECK(cudaMalloc(&big_copy.src, big));
    CHECK(cudaMalloc(&big_copy.dst, big));
    CHECK(cudaMemset(big_copy.src, 0x3c, big));
    struct copy_case small_copy = {big_copy.src, big_copy.dst, small / sizeof(float4)};

    struct gemm_case g = {NULL, NULL, NULL, 1024, 1024, 1024};
    CHECK(cudaMalloc(&g.a, (size_t)g.m * g.k * 2));
    CHECK(cudaMalloc(&g.b, (size_t)g.k * g.n * 2));
    CHECK(cudaMalloc(&g.c, (size_t)g.m * g.n * 4));
    CHECK(cudaMemset(g.a, 0x3c, (size_t)g.m * g.k * 2)); /* bf16 0x3c3c ~ 0.0115 */
    CHECK(cudaMemset(g.b, 0x3c, (size_t)g.k * g.n * 2));

    /* Warm-up: module load and first-touch stay out of the profiled passes. */
    launch_copy(&big_copy);
    launch_gemm(&g);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (plain) {
        launch_copy(&big_copy);
        launch_copy(&small_copy);
        launch_gemm(&g);
        CHECK(cudaDeviceSynchronize());
        return 0;
    }

    int failed = 0;
    if (all || !strcmp(only, "copy256"))
        failed += report("copy 256 MiB", launch_copy, &big_copy, (double)big, (double)big);
    if (all || !strcmp(only, "copy16"))
        failed += report("copy 16 MiB (fits in L2)", launch_copy, &small_copy, (double)small, (double)small);
    if (all || !strcmp(only, "gemm"))
        failed += report("bf16 wmma gemm 1024^3", launch_gemm, &g, 2.0 * g.m * g.k + 2.0 * g.k * g.n,
                         4.0 * g.m * g.n);

    /* The copy ran once per pass: its output must still be right. */
    unsigned char last;
    CHECK(cudaMemcpy(&last, (char *)big_copy.dst + big - 1, 1, cudaMemcpyDeviceToHost));
    float c00;
    CHECK(cudaMemcpy(&c00, g.c, 4, cudaMemcpyDeviceToHost));
    printf("check: copy last byte 0x%02x (want 0x3c), gemm c[0] %.5f (want 0.13484)\n", last, c00);
    kl_counters_shutdown();
    fprintf(stderr, "shutdown done\n");
    return failed ? 1 : 0;
}
