#include "perf/activity.h"

#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libstdc++'s demangler (the binary links the C++ runtime through nvcc). */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

static struct kl_kernel_records *sink;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = 1 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

/* Occupancy a kernel can reach with its resources: the smallest of the per-SM limits on
 * blocks from threads, registers (allocated per warp in units of 256), shared memory (plus
 * the 1 KB the hardware reserves per block) and the block-count limit. */
static void occupancy(struct kl_kernel_record *r)
{
    int max_threads = 2048, max_blocks = 32, regs = 65536, smem = 228 * 1024;
    cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerMultiProcessor, 0);
    cudaDeviceGetAttribute(&max_blocks, cudaDevAttrMaxBlocksPerMultiprocessor, 0);
    cudaDeviceGetAttribute(&regs, cudaDevAttrMaxRegistersPerMultiprocessor, 0);
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
    int threads = r->block[0] * r->block[1] * r->block[2], warps = (threads + 31) / 32;
    if (warps == 0) return;
    int regs_per_warp = (r->registers * 32 + 255) / 256 * 256;
    int by_threads = max_threads / (warps * 32);
    int by_regs = regs_per_warp ? regs / (regs_per_warp * warps) : max_blocks;
    int smem_block = r->static_smem + r->dynamic_smem + 1024;
    int by_smem = smem / smem_block;
    int blocks = by_threads;
    snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "threads");
    if (by_regs < blocks) blocks = by_regs, snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "registers");
    if (by_smem < blocks) blocks = by_smem, snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "shared memory");
    if (max_blocks < blocks) blocks = max_blocks, snprintf(r->occupancy_limiter, sizeof r->occupancy_limiter, "blocks");
    r->theoretical_occupancy_pct = 100.0 * blocks * warps / (max_threads / 32);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    CUpti_Activity *rec = NULL;
    while (sink && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        if (sink->count == KL_MAX_KERNEL_RECORDS) break;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        struct kl_kernel_record *r = &sink->k[sink->count++];
        memset(r, 0, sizeof *r);
        int status = -1;
        char *name = k->name ? __cxa_demangle(k->name, NULL, NULL, &status) : NULL;
        snprintf(r->name, sizeof r->name, "%s", status == 0 && name ? name : k->name ? k->name : "?");
        free(name);
        r->grid[0] = k->gridX, r->grid[1] = k->gridY, r->grid[2] = k->gridZ;
        r->block[0] = k->blockX, r->block[1] = k->blockY, r->block[2] = k->blockZ;
        r->registers = k->registersPerThread;
        r->static_smem = k->staticSharedMemory, r->dynamic_smem = k->dynamicSharedMemory;
        r->local_bytes = (int)k->localMemoryPerThread;
        r->start_ns = k->start;
        r->duration_us = (double)(k->end - k->start) * 1e-3;
        occupancy(r);
    }
    free(buffer);
}

int kl_activity_record(void (*launch)(void *ctx), void *ctx, struct kl_kernel_records *out)
{
    memset(out, 0, sizeof *out);
    static bool registered;
    if (!registered) {
        if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
            snprintf(out->why, sizeof out->why, "CUPTI activity callbacks could not be registered");
            return -1;
        }
        registered = true;
    }
    cudaDeviceSynchronize();
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        snprintf(out->why, sizeof out->why, "CUPTI kernel activity is not available");
        return -1;
    }
    sink = out;
    launch(ctx);
    cudaDeviceSynchronize();
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushAll(1);
    sink = NULL;
    if (out->count == 0) snprintf(out->why, sizeof out->why, "no kernel was recorded");
    return out->count ? 0 : -1;
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
