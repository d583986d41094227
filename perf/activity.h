/* Kernel records through the CUPTI Activity API: which kernels a piece of work launched, with
 * their grid, block, registers, shared and local memory and duration. This is the compiler's
 * resource report as the device saw it, for any variant, without knowing its kernel symbols. */
#ifndef KL_ACTIVITY_H
#define KL_ACTIVITY_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

struct kl_kernel_record {
    char name[160];            /* demangled, template arguments kept */
    int grid[3], block[3];
    int registers;             /* per thread */
    int static_smem, dynamic_smem; /* bytes per block */
    int local_bytes;           /* per thread: spills and stack frames live here */
    double duration_us;
    uint64_t start_ns;
    /* Theoretical occupancy from the resources and the device's limits. */
    double theoretical_occupancy_pct;
    char occupancy_limiter[24]; /* "registers", "shared memory", "threads", "blocks", "grid" */
};

#define KL_MAX_KERNEL_RECORDS 64

struct kl_kernel_records {
    int count;
    struct kl_kernel_record k[KL_MAX_KERNEL_RECORDS];
    char why[256]; /* set when nothing could be recorded */
};

/* Records the kernels that launch(ctx) runs (once). Returns 0, or -1 with out->why. */
int kl_activity_record(void (*launch)(void *ctx), void *ctx, struct kl_kernel_records *out);
/* {"kernel","grid":[..],"block":[..],"registers","static_smem","dynamic_smem","local_bytes",
 *  "theoretical_occupancy_pct","occupancy_limiter"} of the first record. */
struct cJSON *kl_kernel_record_json(const struct kl_kernel_record *r);

#ifdef __cplusplus
}
#endif
#endif
