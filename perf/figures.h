/* Figures the guides derive from measurements, each computed one way for every guide (module
 * guides, INDEX, the story), so that no two pages can disagree about the same bytes and time.
 *
 * The inputs are what a results row or a story profile records: a byte model or the DRAM bytes
 * the counters saw, a time in microseconds, the ceilings measured on the same device. */
#ifndef KL_FIGURES_H
#define KL_FIGURES_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GB/s of `bytes` moved in `us` microseconds; NAN unless both are positive and finite. */
double kl_fig_gbs(double bytes, double us);
/* TFLOP/s of `flops` done in `us` microseconds; NAN unless both are positive and finite. */
double kl_fig_tflops(double flops, double us);
/* value / ceiling, NAN unless the ceiling is positive. */
double kl_fig_frac(double value, double ceiling);

/* DRAM busy, in percent: the DRAM bytes the counters saw (read + written, one launch with L2
 * flushed first) over the launch's measured time, against the device's measured copy bandwidth
 * (`kernlab ceilings`: a streaming copy, read + write bytes). The counter CUPTI calls
 * gpu__dram_throughput is averaged over the whole profiled range, which also holds the profiler's
 * own start and stop and the synchronisation after the launch: for a short kernel most of that
 * range is idle, so it reads far below what bytes / time says. */
double kl_fig_dram_pct(double dram_read_bytes, double dram_write_bytes, double us, double copy_gbs);

/* The L2 hit rate, in percent, where the counter can mean one; NAN elsewhere.
 * lts__t_sector_hit_rate is hits / lookups of every L2 client (copy engines and the driver's
 * own work as well as the kernel's loads and stores, stores counted as hits), and the profiler
 * may count the two in different replays of the range. For a kernel that moves a few kilobytes
 * the lookups of one replay are not those of the other, and the ratio can read above 100%: such
 * a value says nothing about the kernel's reuse, so it is not shown as a rate. */
double kl_fig_l2_hit_pct(double counter_pct);

/* What limited a kernel, from what it achieved: "memory-bound" when its DRAM traffic reached at
 * least half of the copy bandwidth (dram_pct from kl_fig_dram_pct), "tensor-bound" when its
 * tensor pipe was active at least half of the time, the larger share winning when both hold,
 * and "neither roof" when neither holds (too little work to fill the GPU, or latency). */
const char *kl_fig_roof(double dram_pct, double tensor_pipe_pct);
/* The share of a roof at or above which kl_fig_roof names it. */
#define KL_FIG_ROOF_SHARE 0.5

/* Which roof the byte and FLOP models put a workload under: "memory" when its intensity
 * (flops / bytes) is below the ridge (gemm_tflops / copy_gbs, in FLOP per byte), else "compute". */
const char *kl_fig_model_bound(double flops, double bytes, double copy_gbs, double gemm_tflops);
/* The ridge point in FLOP per byte. */
double kl_fig_ridge(double copy_gbs, double gemm_tflops);

#ifdef __cplusplus
}
#endif
#endif
