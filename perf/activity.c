#include "perf/activity.h"

#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libstdc++'s demangler (the binary links the C++ runtime through nvcc). */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

/* Where records go now: kl_activity_record's list or a kl_activity_start sink. */
static const struct kl_activity_sink *sink;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = 1 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

/* The per-SM limits occupancy is computed from. Read on the caller's thread before recording starts:
 * CUPTI may hand buffers over from a thread of its own while API calls are being traced, and a CUDA
 * call made from inside its callback would be traced in turn. */
static struct {
    int max_threads, max_blocks, regs, smem;
} sm_limits = {2048, 32, 65536, 228 * 1024};

static void read_sm_limits(void)
{
    cudaDeviceGetAttribute(&sm_limits.max_threads, cudaDevAttrMaxThreadsPerMultiProcessor, 0);
    cudaDeviceGetAttribute(&sm_limits.max_blocks, cudaDevAttrMaxBlocksPerMultiprocessor, 0);
    cudaDeviceGetAttribute(&sm_limits.regs, cudaDevAttrMaxRegistersPerMultiprocessor, 0);
    cudaDeviceGetAttribute(&sm_limits.smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
}

/* Occupancy a kernel can reach with its resources: the smallest of the per-SM limits on
 * blocks from threads, registers (allocated per warp in units of 256), shared memory (plus
 * the 1 KB the hardware reserves per block) and the block-count limit. */
static void occupancy(struct kl_kernel_record *r)
{
    const int max_threads = sm_limits.max_threads, max_blocks = sm_limits.max_blocks;
    int threads = r->block[0] * r->block[1] * r->block[2], warps = (threads + 31) / 32;
    if (warps == 0) return;
    int regs_per_warp = (r->registers * 32 + 255) / 256 * 256;
    int by_threads = max_threads / (warps * 32);
    int by_regs = regs_per_warp ? sm_limits.regs / (regs_per_warp * warps) : max_blocks;
    int smem_block = r->static_smem + r->dynamic_smem + 1024;
    int by_smem = sm_limits.smem / smem_block;
    int blocks = by_threads;
    snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "threads");
    if (by_regs < blocks) blocks = by_regs, snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "registers");
    if (by_smem < blocks) blocks = by_smem, snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "shared memory");
    if (max_blocks < blocks) blocks = max_blocks, snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "blocks");
    r->theoretical_occupancy_pct = 100.0 * blocks * warps / (max_threads / 32);
}

static void kernel_record(const CUpti_ActivityKernel10 *k)
{
    struct kl_kernel_record r;
    memset(&r, 0, sizeof r);
    int status = -1;
    char *name = k->name ? __cxa_demangle(k->name, NULL, NULL, &status) : NULL;
    snprintf(r.name, sizeof r.name, "%s", status == 0 && name ? name : k->name ? k->name : "?");
    free(name);
    r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
    r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
    r.registers = k->registersPerThread;
    r.static_smem = k->staticSharedMemory, r.dynamic_smem = k->dynamicSharedMemory;
    r.local_bytes = (int)k->localMemoryPerThread;
    r.start_ns = k->start, r.end_ns = k->end;
    r.duration_us = (double)(k->end - k->start) * 1e-3;
    r.correlation = k->correlationId, r.stream = k->streamId, r.graph = k->graphId;
    occupancy(&r);
    sink->kernel(sink->user, &r);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    CUpti_Activity *rec = NULL;
    while (sink && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: kernel_record((const CUpti_ActivityKernel10 *)rec); break;
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER:
            if (sink->api) {
                const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
                sink->api(sink->user, a->correlationId, a->start, a->end);
            }
            break;
        case CUPTI_ACTIVITY_KIND_MEMCPY:
            if (sink->copy) {
                const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
                sink->copy(sink->user, m->runtimeCorrelationId ? m->runtimeCorrelationId : m->correlationId, m->streamId, m->start, m->end, m->bytes, m->copyKind);
            }
            break;
        default: break;
        }
    }
    free(buffer);
}

static int register_callbacks(char *why, size_t len)
{
    static bool registered;
    if (!registered) {
        if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
            snprintf(why, len, "CUPTI activity callbacks could not be registered");
            return -1;
        }
        registered = true;
    }
    return 0;
}

/* kl_activity_record's sink: the first KL_MAX_KERNEL_RECORDS kernels into a list. */
static void keep_kernel(void *user, const struct kl_kernel_record *k)
{
    struct kl_kernel_records *out = user;
    if (out->count < KL_MAX_KERNEL_RECORDS) out->k[out->count++] = *k;
}

int kl_activity_record(void (*launch)(void *ctx), void *ctx, struct kl_kernel_records *out)
{
    memset(out, 0, sizeof *out);
    if (register_callbacks(out->why, sizeof out->why)) return -1;
    read_sm_limits();
    cudaDeviceSynchronize();
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        snprintf(out->why, sizeof out->why, "CUPTI kernel activity is not available");
        return -1;
    }
    const struct kl_activity_sink keep = {.user = out, .kernel = keep_kernel};
    sink = &keep;
    launch(ctx);
    cudaDeviceSynchronize();
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushAll(1);
    sink = NULL;
    if (out->count == 0) snprintf(out->why, sizeof out->why, "no kernel was recorded");
    return out->count ? 0 : -1;
}

/* The kinds a stream enables: kernels always, API calls and copies when the sink takes them. */
static const CUpti_ActivityKind stream_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                                                  CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MEMCPY};

static bool kind_wanted(const struct kl_activity_sink *s, CUpti_ActivityKind k)
{
    return k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
           (k == CUPTI_ACTIVITY_KIND_MEMCPY ? s->copy != NULL : s->api != NULL);
}

int kl_activity_start(const struct kl_activity_sink *s, char *why, size_t len)
{
    if (register_callbacks(why, len)) return -1;
    read_sm_limits();
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return snprintf(why, len, "no CUDA device: %s", cudaGetErrorString(e)), -1;
    sink = s;
    for (size_t i = 0; i < sizeof stream_kinds / sizeof stream_kinds[0]; i++) {
        if (!kind_wanted(s, stream_kinds[i])) continue;
        CUptiResult r = cuptiActivityEnable(stream_kinds[i]);
        if (r != CUPTI_SUCCESS) {
            const char *msg = NULL;
            cuptiGetResultString(r, &msg);
            snprintf(why, len, "CUPTI activity kind %d could not be enabled: %s", (int)stream_kinds[i], msg ? msg : "?");
            for (size_t j = 0; j < i; j++) cuptiActivityDisable(stream_kinds[j]);
            sink = NULL;
            return -1;
        }
    }
    return 0;
}

void kl_activity_stop(void)
{
    cudaDeviceSynchronize();
    cuptiActivityFlushAll(1);
    for (size_t i = 0; sink && i < sizeof stream_kinds / sizeof stream_kinds[0]; i++)
        if (kind_wanted(sink, stream_kinds[i])) cuptiActivityDisable(stream_kinds[i]);
    cuptiActivityFlushAll(1);
    sink = NULL;
}

uint64_t kl_activity_now(void)
{
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return t;
}

cJSON *kl_kernel_record_json(const struct kl_kernel_record *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kernel", r->name);
    cJSON_AddItemToObject(o, "grid", cJSON_CreateIntArray(r->grid, 3));
    cJSON_AddItemToObject(o, "block", cJSON_CreateIntArray(r->block, 3));
    cJSON_AddNumberToObject(o, "registers", r->registers);
    cJSON_AddNumberToObject(o, "static_smem", r->static_smem);
    cJSON_AddNumberToObject(o, "dynamic_smem", r->dynamic_smem);
    cJSON_AddNumberToObject(o, "local_bytes", r->local_bytes);
    cJSON_AddNumberToObject(o, "theoretical_occupancy_pct", r->theoretical_occupancy_pct);
    cJSON_AddStringToObject(o, "occupancy_limiter", r->occupancy_limiter);
    return o;
}
