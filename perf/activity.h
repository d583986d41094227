/* Kernel records through the CUPTI Activity API: which kernels a piece of work launched, with
 * their grid, block, registers, shared and local memory and duration. This is the compiler's
 * resource report as the device saw it, for any variant, without knowing its kernel symbols.
 *
 * Two ways in: kl_activity_record runs one piece of work and keeps its first kernels (bench);
 * kl_activity_start/stop stream every kernel, API call and copy of a whole run to callbacks
 * (`kernlab story`, tens of thousands of kernels). */
#ifndef KL_ACTIVITY_H
#define KL_ACTIVITY_H

#include <stdbool.h>
#include <stddef.h>
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
    uint64_t start_ns, end_ns;  /* CUPTI's clock (kl_activity_now) */
    uint32_t correlation;       /* the API call that launched it (a graph launch for graph kernels) */
    uint32_t stream;            /* CUPTI's stream id */
    uint32_t graph;             /* the graph it ran in, 0 for a plain launch */
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
/* What kl_activity_start hands out, as CUPTI returns its buffers: in batches, not in time order,
 * possibly from a thread of CUPTI's own while the run goes on (so the functions must not call CUDA,
 * and must guard what the run's thread also touches). The record and its name live only for the
 * call. */
struct kl_activity_sink {
    void *user;
    void (*kernel)(void *user, const struct kl_kernel_record *k);
    /* A CUDA runtime or driver API call (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch, ...):
     * its host interval and the correlation id its kernels and copies carry. May be NULL. */
    void (*api)(void *user, uint32_t correlation, uint64_t start_ns, uint64_t end_ns);
    /* A memory copy on a stream (bytes, kind as cudaMemcpyKind: 1 H2D, 2 D2H, 3 D2D). May be NULL. */
    void (*copy)(void *user, uint32_t correlation, uint32_t stream, uint64_t start_ns, uint64_t end_ns,
                 uint64_t bytes, int kind);
};
/* Streams every kernel (and API call and copy, where the sink takes them) from now until
 * kl_activity_stop to the sink. Returns 0, or -1 with the reason in why (no CUPTI, no device). */
int kl_activity_start(const struct kl_activity_sink *sink, char *why, size_t len);
/* Synchronises the device, delivers every pending record, and stops. */
void kl_activity_stop(void);
/* Now, on the clock of the records (CPU time in ns, as CUPTI normalises GPU timestamps to it). */
uint64_t kl_activity_now(void);

/* {"kernel","grid":[..],"block":[..],"registers","static_smem","dynamic_smem","local_bytes",
 *  "theoretical_occupancy_pct","occupancy_limiter"} of the first record. */
struct cJSON *kl_kernel_record_json(const struct kl_kernel_record *r);

#ifdef __cplusplus
}
#endif
#endif
