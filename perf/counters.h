/* Hardware counters for one piece of GPU work, read in-process through the CUPTI Range Profiler.
 *
 * `kernlab bench --counters` calls kl_counters_collect once per variant and workload and stores
 * kl_counters_json under "counters" in the result line (lab/CONTRACTS.md section 6). The point is to put a
 * measured number beside each modelled one: dram bytes against the byte model, tensor-pipe use
 * against the FLOP model, and the stall reasons that say why a kernel sits below its ceiling.
 *
 * Everything the launch callback enqueues between two markers is one "range"; the profiler cannot
 * read every counter at once, so the callback runs once per pass (14 for this metric set on
 * sm_90, 10 on sm_80). L2 is flushed before each pass, as Nsight Compute does by default, so
 * every pass sees a cold cache rather than the previous pass's data.
 *
 * Links libcupti and libnvperf_host/_target only (no libcuda): a binary with this file still
 * starts on a machine without a GPU driver, and then reports valid = false. */
#ifndef KL_COUNTERS_H
#define KL_COUNTERS_H

#include <stdbool.h>

#include "lab/core/check.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

struct kl_stall {
    char name[48]; /* "long_scoreboard", "barrier", ... (Nsight Compute's stall names) */
    double pct;    /* share of all stalled warp-cycles, percent */
};

/* Every double is NaN when this GPU does not offer its metric (JSON null). */
struct kl_counters {
    bool valid;    /* false: nothing was measured, `why` says why */
    char why[256]; /* "counters not available: ..." */
    double dram_read_bytes, dram_write_bytes;
    double dram_throughput_pct;    /* % of peak DRAM throughput over the range */
    double sm_throughput_pct;      /* % of peak SM throughput (the busiest SM unit) */
    double achieved_occupancy_pct; /* achieved active warps / max warps per SM, % */
    double tensor_pipe_pct;        /* tensor pipe active cycles, % of peak (all MMA kinds) */
    double l2_hit_rate_pct;        /* L2 sector lookups that hit, % */
    double smem_bank_conflicts;    /* shared-memory wavefronts added by bank conflicts (count) */
    double smem_wavefronts;        /* all shared-memory wavefronts (count): conflicts / this = share lost */
    double active_cycles;          /* the busiest SM's cycles with work resident: the launch in SM clock cycles */
    int n_stalls;
    struct kl_stall stalls[6]; /* top warp-stall reasons, largest first */
    int n_passes;              /* how many times `launch` ran */
};

/* Collects the counters of everything `launch(ctx)` enqueues on the current device, as one range.
 * `launch` runs once per pass and must do the same work each time (it may read what it wrote).
 * Returns 0 with out->valid = false when this machine cannot profile (no device, no permission to
 * read counters, unsupported GPU or virtualisation); returns -1 with err->msg when something
 * that should work fails (the launch itself, a CUPTI call mid-collection). */
int kl_counters_collect(void (*launch)(void *ctx), void *ctx, struct kl_counters *out,
                        struct kl_err *err);

#ifndef KL_COUNTERS_NO_JSON
/* {"dram_read_bytes","dram_write_bytes","dram_throughput_pct","sm_throughput_pct",
 *  "achieved_occupancy_pct","tensor_pipe_pct","l2_hit_rate_pct","smem_bank_conflicts","smem_wavefronts",
 *  "active_cycles","stalls":{name: pct,...},"passes"}
 * NaN becomes null; an invalid collection adds "why". NULL only when out of memory. */
struct cJSON *kl_counters_json(const struct kl_counters *c);
#endif

/* Releases the profiler; call at exit. Safe when never initialised. */
void kl_counters_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
