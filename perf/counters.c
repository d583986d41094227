/* Hardware counters through the CUPTI Range Profiler (CUDA 12.6+ API), in-process.
 *
 * One collection:
 *   host side, once per device: chip name + counter availability -> a host object that knows
 *     this chip's metrics -> drop the metrics it lacks -> a config image and its pass count;
 *   target side, per call: enable the profiler on the context, size a counter-data image for one
 *     range, then per pass: flush L2, start, push a range, launch, pop, stop; decode; evaluate.
 * The metric names are Nsight Compute's, so a number here can be checked with `ncu --metrics`. */
#include "counters.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUcontext and the cuCtxGetCurrent type only: libcuda is never linked */
#include <cuda_runtime_api.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>

#ifndef KL_COUNTERS_NO_JSON
#include <cjson/cJSON.h>
#endif

/* ---- The part of cupti_profiler_host.h we use ---------------------------------------------
 * CUDA 13.0's cupti_profiler_host.h includes the C++ header <string> (it uses nothing from it),
 * so no C file can include it. These are its declarations, field for field; CUPTI tells struct
 * versions apart by structSize, so they stay valid for as long as the toolkit is pinned. Delete
 * this block and include the header once it compiles as C. */
typedef enum CUpti_MetricType {
    CUPTI_METRIC_TYPE_COUNTER = 0,
    CUPTI_METRIC_TYPE_RATIO,
    CUPTI_METRIC_TYPE_THROUGHPUT,
    CUPTI_METRIC_TYPE__COUNT
} CUpti_MetricType;

typedef enum CUpti_ProfilerType {
    CUPTI_PROFILER_TYPE_RANGE_PROFILER,
    CUPTI_PROFILER_TYPE_PM_SAMPLING,
    CUPTI_PROFILER_TYPE_PROFILER_INVALID
} CUpti_ProfilerType;

typedef struct CUpti_Profiler_Host_Object CUpti_Profiler_Host_Object;

typedef struct CUpti_Profiler_Host_Initialize_Params {
    size_t structSize;
    void *pPriv;
    CUpti_ProfilerType profilerType;
    const char *pChipName;
    const uint8_t *pCounterAvailabilityImage;
    CUpti_Profiler_Host_Object *pHostObject; /* out */
} CUpti_Profiler_Host_Initialize_Params;

typedef struct CUpti_Profiler_Host_Deinitialize_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
} CUpti_Profiler_Host_Deinitialize_Params;

typedef struct CUpti_Profiler_Host_GetMetricProperties_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const char *pMetricName;
    const char *pDescription; /* out */
    const char *pHwUnit;      /* out */
    const char *pDimUnit;     /* out */
    CUpti_MetricType metricType; /* out */
} CUpti_Profiler_Host_GetMetricProperties_Params;

typedef struct CUpti_Profiler_Host_ConfigAddMetrics_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const char **ppMetricNames;
    size_t numMetrics;
} CUpti_Profiler_Host_ConfigAddMetrics_Params;

typedef struct CUpti_Profiler_Host_GetConfigImageSize_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    size_t configImageSize; /* out */
} CUpti_Profiler_Host_GetConfigImageSize_Params;

typedef struct CUpti_Profiler_Host_GetConfigImage_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    size_t configImageSize;
    uint8_t *pConfigImage; /* out */
} CUpti_Profiler_Host_GetConfigImage_Params;

typedef struct CUpti_Profiler_Host_GetNumOfPasses_Params {
    size_t structSize;
    void *pPriv;
    size_t configImageSize;
    uint8_t *pConfigImage;
    size_t numOfPasses; /* out */
} CUpti_Profiler_Host_GetNumOfPasses_Params;

typedef struct CUpti_Profiler_Host_EvaluateToGpuValues_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const uint8_t *pCounterDataImage;
    size_t counterDataImageSize;
    size_t rangeIndex;
    const char **ppMetricNames;
    size_t numMetrics;
    double *pMetricValues; /* out */
} CUpti_Profiler_Host_EvaluateToGpuValues_Params;

#define KL_HOST_SIZE(type, last) CUPTI_PROFILER_STRUCT_SIZE(type, last)

CUptiResult CUPTIAPI cuptiProfilerHostInitialize(CUpti_Profiler_Host_Initialize_Params *p);
CUptiResult CUPTIAPI cuptiProfilerHostDeinitialize(CUpti_Profiler_Host_Deinitialize_Params *p);
CUptiResult CUPTIAPI
cuptiProfilerHostGetMetricProperties(CUpti_Profiler_Host_GetMetricProperties_Params *p);
CUptiResult CUPTIAPI cuptiProfilerHostConfigAddMetrics(CUpti_Profiler_Host_ConfigAddMetrics_Params *p);
CUptiResult CUPTIAPI
cuptiProfilerHostGetConfigImageSize(CUpti_Profiler_Host_GetConfigImageSize_Params *p);
CUptiResult CUPTIAPI cuptiProfilerHostGetConfigImage(CUpti_Profiler_Host_GetConfigImage_Params *p);
CUptiResult CUPTIAPI cuptiProfilerHostGetNumOfPasses(CUpti_Profiler_Host_GetNumOfPasses_Params *p);
CUptiResult CUPTIAPI
cuptiProfilerHostEvaluateToGpuValues(CUpti_Profiler_Host_EvaluateToGpuValues_Params *p);
/* ---- end of the cupti_profiler_host.h part ------------------------------------------------ */

/* The scalar metrics, in struct kl_counters order. All but the last exist on GA100 and GH100 (checked
 * with cuptiProfilerHostGetMetricProperties, which needs no GPU); sm__cycles_active.max was read on an
 * H100 only. A metric the chip lacks reads NaN (prepare keeps only those it knows). */
enum { KL_DRAM_READ, KL_DRAM_WRITE, KL_DRAM_PCT, KL_SM_PCT, KL_OCCUPANCY, KL_TENSOR, KL_L2_HIT,
       KL_SMEM_CONFLICTS, KL_SMEM_WAVEFRONTS, KL_ACTIVE_CYCLES, KL_N_SCALAR };
static const char *const kl_scalar_metric[KL_N_SCALAR] = {
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    /* warps resident per active cycle over the SM's warp slots: Nsight's "achieved occupancy" */
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    /* every MMA kind (HMMA, IMMA, DMMA and on sm_90 the warpgroup GMMA): the pipe the FLOP
     * model's tensor rate is measured on */
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    /* can read a little over 100 on Hopper (103% for an L2-resident GEMM on an H200; ncu agrees) */
    "lts__t_sector_hit_rate.pct",
    /* shared memory: the extra wavefronts bank conflicts cost (LDS, LDSM, STS, atomics, cp.async's
     * shared writes) against all shared wavefronts: conflicts / wavefronts is the share of the
     * shared-memory pipe's work that conflicts added. Checked on GA100 and GH100 as above. */
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    /* the busiest SM's cycles with work resident: the launch's length in SM clock cycles, which a lower
     * clock does not stretch where the SMs set the pace. Not gpc__cycles_elapsed: it counts the range
     * around the kernel as well, and moved between repeats of one launch where this did not */
    "sm__cycles_active.max",
};

/* Nsight Compute's warp states. "selected" is left out: that is the warp that issued, not a
 * stall. gmma (waiting on a warpgroup MMA) exists only from sm_90 and drops out elsewhere. */
static const char *const kl_stall_reason[] = {
    "long_scoreboard", "short_scoreboard", "barrier",       "membar",         "mio_throttle",
    "lg_throttle",     "tex_throttle",     "math_pipe_throttle", "dispatch_stall", "wait",
    "not_selected",    "no_instruction",   "branch_resolving", "drain",        "imc_miss",
    "misc",            "sleeping",         "gmma",
};
#define KL_N_STALL ((int)(sizeof kl_stall_reason / sizeof kl_stall_reason[0]))
#define KL_N_METRIC (KL_N_SCALAR + KL_N_STALL)
#define KL_TOP_STALLS ((int)(sizeof((struct kl_counters *)0)->stalls / sizeof(struct kl_stall)))

/* What is built once per device and kept until kl_counters_shutdown. Not thread-safe: one
 * collection at a time, which the benchmark's one-GPU-at-a-time rule gives anyway. */
static struct {
    bool cupti_up;                     /* cuptiProfilerInitialize succeeded */
    int device;                        /* what the rest was built for; -1: nothing built */
    CUpti_Profiler_Host_Object *host;  /* knows this chip's metrics; also evaluates them */
    uint8_t *avail;                    /* counter availability image: the host object may point
                                          into it, so it lives as long as the host object */
    uint8_t *config;                   /* the scheduled metrics, as CUPTI wants them */
    size_t config_size, n_passes;
    int n_metrics;                     /* names[0..n_metrics): the metrics this GPU has */
    const char *names[KL_N_METRIC];
    int slot[KL_N_METRIC];             /* our metric i -> index into names, -1 if absent */
    char stall_name[KL_N_STALL][64];   /* "smsp__warps_issue_stalled_<reason>.sum" */
} kl_prof = {.device = -1};

static const char *cupti_str(CUptiResult r)
{
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    return s ? s : "unknown CUPTI error";
}

#define KL_CUPTI_TRY(call, err)                                                              \
    do {                                                                                     \
        CUptiResult kl_r_ = (call);                                                          \
        if (kl_r_ != CUPTI_SUCCESS) return kl_fail(err, "%s: %s", #call, cupti_str(kl_r_)); \
    } while (0)

static const char *metric_name(int i)
{
    return i < KL_N_SCALAR ? kl_scalar_metric[i] : kl_prof.stall_name[i - KL_N_SCALAR];
}

static void release_device_state(void)
{
    if (kl_prof.host) {
        CUpti_Profiler_Host_Deinitialize_Params p = {
            .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_Deinitialize_Params, pHostObject),
            .pHostObject = kl_prof.host};
        cuptiProfilerHostDeinitialize(&p);
        kl_prof.host = NULL;
    }
    free(kl_prof.avail);
    free(kl_prof.config);
    kl_prof.avail = kl_prof.config = NULL;
    kl_prof.device = -1;
}

/* The runtime owns the context (cudaFree(0) makes it current); CUPTI wants it as a CUcontext.
 * cuCtxGetCurrent comes through the runtime's entry-point lookup so that libcuda is never a
 * link dependency. */
static int current_context(CUcontext *ctx, int *device, struct kl_err *err)
{
    cudaError_t e = cudaFree(0);
    if (e != cudaSuccess) return kl_fail(err, "no CUDA device: %s", cudaGetErrorString(e));
    if ((e = cudaGetDevice(device)) != cudaSuccess)
        return kl_fail(err, "cudaGetDevice: %s", cudaGetErrorString(e));
    CUresult (*get_current)(CUcontext *) = NULL;
    enum cudaDriverEntryPointQueryResult found;
    e = cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", (void **)&get_current, 12000,
                                         cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !get_current)
        return kl_fail(err, "cuCtxGetCurrent not found in the driver");
    if (get_current(ctx) != CUDA_SUCCESS || !*ctx) return kl_fail(err, "no current CUDA context");
    return 0;
}

/* Why profiling is off on this device, in CUPTI's own terms; 0 when it is on. */
static int device_supported(int device, struct kl_err *err)
{
    CUpti_Profiler_DeviceSupported_Params p = {
        .structSize = CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE,
        .cuDevice = (CUdevice)device, /* runtime and driver ordinals agree */
        .api = CUPTI_PROFILER_RANGE_PROFILING};
    KL_CUPTI_TRY(cuptiProfilerDeviceSupported(&p), err);
    if (p.isSupported == CUPTI_PROFILER_CONFIGURATION_SUPPORTED) return 0;
    const char *why = p.architecture != CUPTI_PROFILER_CONFIGURATION_SUPPORTED ? "GPU architecture"
                      : p.vGpu != CUPTI_PROFILER_CONFIGURATION_SUPPORTED       ? "vGPU (profiling off or unsupported)"
                      : p.confidentialCompute != CUPTI_PROFILER_CONFIGURATION_SUPPORTED
                          ? "confidential computing"
                      : p.sli != CUPTI_PROFILER_CONFIGURATION_SUPPORTED ? "SLI"
                      : p.cmp != CUPTI_PROFILER_CONFIGURATION_SUPPORTED ? "mining GPU (CMP)"
                      : p.wsl != CUPTI_PROFILER_CONFIGURATION_SUPPORTED ? "WSL"
                                                                        : "unknown reason";
    return kl_fail(err, "device %d does not support profiling: %s", device, why);
}

/* Host object, metric list, config image and pass count for `device`. */
static int build_device_state(int device, CUcontext ctx, struct kl_err *err)
{
    release_device_state();
    if (device_supported(device, err)) return -1;

    CUpti_Device_GetChipName_Params chip = {.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE,
                                            .deviceIndex = (size_t)device};
    KL_CUPTI_TRY(cuptiDeviceGetChipName(&chip), err);

    /* Which counters this context may read (MIG slices and vGPU see fewer): sizing call first. */
    CUpti_Profiler_GetCounterAvailability_Params avail = {
        .structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE, .ctx = ctx};
    KL_CUPTI_TRY(cuptiProfilerGetCounterAvailability(&avail), err);
    if (!(kl_prof.avail = malloc(avail.counterAvailabilityImageSize)))
        return kl_fail(err, "out of memory");
    avail.pCounterAvailabilityImage = kl_prof.avail;
    CUptiResult r = cuptiProfilerGetCounterAvailability(&avail);
    CUpti_Profiler_Host_Initialize_Params init = {
        .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_Initialize_Params, pHostObject),
        .profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER,
        .pChipName = chip.pChipName,
        .pCounterAvailabilityImage = kl_prof.avail};
    if (r == CUPTI_SUCCESS) r = cuptiProfilerHostInitialize(&init);
    if (r != CUPTI_SUCCESS)
        return kl_fail(err, "chip %s: counter availability / host init: %s", chip.pChipName,
                       cupti_str(r));
    kl_prof.host = init.pHostObject;

    /* Keep the metrics this chip knows; a missing one becomes NaN rather than failing the lot.
     * They go into ONE ConfigAddMetrics call: adding them one by one schedules each on its own
     * (33 passes instead of 14 on GH100). */
    kl_prof.n_metrics = 0;
    for (int i = 0; i < KL_N_METRIC; i++) {
        if (i >= KL_N_SCALAR)
            snprintf(kl_prof.stall_name[i - KL_N_SCALAR], sizeof kl_prof.stall_name[0],
                     "smsp__warps_issue_stalled_%s.sum", kl_stall_reason[i - KL_N_SCALAR]);
        CUpti_Profiler_Host_GetMetricProperties_Params prop = {
            .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_GetMetricProperties_Params, metricType),
            .pHostObject = kl_prof.host,
            .pMetricName = metric_name(i)};
        kl_prof.slot[i] = -1;
        if (cuptiProfilerHostGetMetricProperties(&prop) == CUPTI_SUCCESS) {
            kl_prof.slot[i] = kl_prof.n_metrics;
            kl_prof.names[kl_prof.n_metrics++] = metric_name(i);
        }
    }
    if (kl_prof.n_metrics == 0) return kl_fail(err, "chip %s offers none of our metrics", chip.pChipName);

    CUpti_Profiler_Host_ConfigAddMetrics_Params add = {
        .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics),
        .pHostObject = kl_prof.host,
        .ppMetricNames = kl_prof.names,
        .numMetrics = (size_t)kl_prof.n_metrics};
    KL_CUPTI_TRY(cuptiProfilerHostConfigAddMetrics(&add), err);
    CUpti_Profiler_Host_GetConfigImageSize_Params size = {
        .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize),
        .pHostObject = kl_prof.host};
    KL_CUPTI_TRY(cuptiProfilerHostGetConfigImageSize(&size), err);
    if (!(kl_prof.config = malloc(size.configImageSize))) return kl_fail(err, "out of memory");
    kl_prof.config_size = size.configImageSize;
    CUpti_Profiler_Host_GetConfigImage_Params image = {
        .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage),
        .pHostObject = kl_prof.host,
        .configImageSize = kl_prof.config_size,
        .pConfigImage = kl_prof.config};
    KL_CUPTI_TRY(cuptiProfilerHostGetConfigImage(&image), err);
    CUpti_Profiler_Host_GetNumOfPasses_Params passes = {
        .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses),
        .configImageSize = kl_prof.config_size,
        .pConfigImage = kl_prof.config};
    KL_CUPTI_TRY(cuptiProfilerHostGetNumOfPasses(&passes), err);
    kl_prof.n_passes = passes.numOfPasses;
    kl_prof.device = device;
    return 0;
}

/* Everything before the first launch: if any of it fails, this machine cannot profile. */
static int prepare(CUcontext *ctx, struct kl_err *err)
{
    int device;
    if (current_context(ctx, &device, err)) return -1;
    if (!kl_prof.cupti_up) {
        CUpti_Profiler_Initialize_Params p = {.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
        KL_CUPTI_TRY(cuptiProfilerInitialize(&p), err);
        kl_prof.cupti_up = true;
    }
    if (kl_prof.device != device && build_device_state(device, *ctx, err)) {
        release_device_state();
        return -1;
    }
    return 0;
}

/* Evicts the launch's data (and the previous pass's dirty lines) from L2, so each pass starts
 * cold, as under Nsight Compute's default cache control: a kernel reads twice the L2 size
 * (perf/l2flush.cu says why a read and not a copy or a memset). */
int kl_l2_flush_read(const void *buf, size_t bytes, int *sink);

struct kl_flush {
    void *dev, *host; /* host: the kernel's never-written sink word, kept in device memory */
    size_t bytes;
};

static int flush_open(struct kl_flush *f, int device, struct kl_err *err)
{
    int l2 = 0;
    cudaError_t e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    if (e != cudaSuccess) return kl_fail(err, "L2 size: %s", cudaGetErrorString(e));
    f->bytes = 2 * (size_t)l2;
    if ((e = cudaMalloc(&f->dev, f->bytes)) != cudaSuccess || (e = cudaMemset(f->dev, 0, f->bytes)) != cudaSuccess ||
        (e = cudaMalloc(&f->host, 16)) != cudaSuccess)
        return kl_fail(err, "L2 flush buffers (%zu bytes): %s", f->bytes, cudaGetErrorString(e));
    return 0;
}

static int flush_l2(const struct kl_flush *f, struct kl_err *err)
{
    int e = kl_l2_flush_read(f->dev, f->bytes, (int *)f->host);
    return e ? kl_fail(err, "L2 flush: %s", cudaGetErrorString((cudaError_t)e)) : 0;
}

static void flush_close(struct kl_flush *f)
{
    cudaFree(f->dev);
    cudaFree(f->host);
}

/* One replay of the user's work inside one range. The synchronize before the pop puts every
 * stream's work inside the range, whatever streams `launch` used. */
static int one_pass(CUpti_RangeProfiler_Object *rp, void (*launch)(void *), void *ctx,
                    bool *all_submitted, struct kl_err *err)
{
    CUpti_RangeProfiler_Start_Params start = {.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE,
                                              .pRangeProfilerObject = rp};
    KL_CUPTI_TRY(cuptiRangeProfilerStart(&start), err);
    CUpti_RangeProfiler_PushRange_Params push = {
        .structSize = CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE,
        .pRangeProfilerObject = rp,
        .pRangeName = "launch"};
    CUptiResult r = cuptiRangeProfilerPushRange(&push);
    cudaError_t e = cudaSuccess;
    if (r == CUPTI_SUCCESS) {
        launch(ctx);
        e = cudaGetLastError();
        cudaError_t s = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = s;
        CUpti_RangeProfiler_PopRange_Params pop = {
            .structSize = CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE, .pRangeProfilerObject = rp};
        r = cuptiRangeProfilerPopRange(&pop);
    }
    /* Stop even after a failure, or the profiler stays mid-pass and Disable fails too. */
    CUpti_RangeProfiler_Stop_Params stop = {.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE,
                                            .pRangeProfilerObject = rp};
    CUptiResult rs = cuptiRangeProfilerStop(&stop);
    if (e != cudaSuccess) return kl_fail(err, "launch under the profiler: %s", cudaGetErrorString(e));
    if (r != CUPTI_SUCCESS) return kl_fail(err, "push/pop range: %s", cupti_str(r));
    if (rs != CUPTI_SUCCESS) return kl_fail(err, "cuptiRangeProfilerStop: %s", cupti_str(rs));
    *all_submitted = stop.isAllPassSubmitted != 0;
    return 0;
}

static int cmp_stall_desc(const void *a, const void *b)
{
    double x = ((const struct kl_stall *)a)->pct, y = ((const struct kl_stall *)b)->pct;
    return (x < y) - (x > y);
}

/* Metric values -> struct fields; stalls as shares of the stalled warp-cycles we read. */
static void fill(struct kl_counters *out, const double *value)
{
    double *scalar[KL_N_SCALAR] = {&out->dram_read_bytes,        &out->dram_write_bytes,
                                   &out->dram_throughput_pct,    &out->sm_throughput_pct,
                                   &out->achieved_occupancy_pct, &out->tensor_pipe_pct,
                                   &out->l2_hit_rate_pct,        &out->smem_bank_conflicts,
                                   &out->smem_wavefronts,        &out->active_cycles};
    for (int i = 0; i < KL_N_SCALAR; i++)
        *scalar[i] = kl_prof.slot[i] >= 0 ? value[kl_prof.slot[i]] : NAN;

    struct kl_stall all[KL_N_STALL];
    int n = 0;
    double total = 0;
    for (int i = 0; i < KL_N_STALL; i++) {
        int s = kl_prof.slot[KL_N_SCALAR + i];
        if (s < 0 || !(value[s] > 0)) continue; /* absent, zero or NaN */
        snprintf(all[n].name, sizeof all[n].name, "%s", kl_stall_reason[i]);
        all[n++].pct = value[s];
        total += value[s];
    }
    for (int i = 0; i < n; i++) all[i].pct *= 100.0 / total;
    qsort(all, (size_t)n, sizeof all[0], cmp_stall_desc);
    out->n_stalls = n < KL_TOP_STALLS ? n : KL_TOP_STALLS;
    memcpy(out->stalls, all, (size_t)out->n_stalls * sizeof all[0]);
}

/* Passes and evaluation on an enabled profiler. *data_out receives the counter-data image; the
 * caller frees it only after disabling the profiler, which holds a pointer to it from SetConfig on. */
static int run(CUpti_RangeProfiler_Object *rp, uint8_t **data_out, void (*launch)(void *), void *ctx,
               struct kl_counters *out, struct kl_err *err)
{
    /* One range (we push one), one nesting level. */
    CUpti_RangeProfiler_GetCounterDataSize_Params size = {
        .structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE,
        .pRangeProfilerObject = rp,
        .pMetricNames = kl_prof.names,
        .numMetrics = (size_t)kl_prof.n_metrics,
        .maxNumOfRanges = 1,
        .maxNumRangeTreeNodes = 1};
    KL_CUPTI_TRY(cuptiRangeProfilerGetCounterDataSize(&size), err);
    uint8_t *data = *data_out = malloc(size.counterDataSize);
    if (!data) return kl_fail(err, "out of memory");
    struct kl_flush flush = {0};
    int device = kl_prof.device, rc = -1;

    CUpti_RangeProfiler_CounterDataImage_Initialize_Params init = {
        .structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE,
        .pRangeProfilerObject = rp,
        .counterDataSize = size.counterDataSize,
        .pCounterData = data};
    CUpti_RangeProfiler_SetConfig_Params config = {
        .structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE,
        .pRangeProfilerObject = rp,
        .configSize = kl_prof.config_size,
        .pConfig = kl_prof.config,
        .counterDataImageSize = size.counterDataSize,
        .pCounterDataImage = data,
        .range = CUPTI_UserRange,       /* our push/pop, not one range per kernel */
        .replayMode = CUPTI_UserReplay, /* we re-run `launch`; CUPTI saves no memory */
        .maxRangesPerPass = 1,
        .numNestingLevels = 1,
        .minNestingLevel = 1,
        .passIndex = 0,
        .targetNestingLevel = 1};
    CUptiResult r = cuptiRangeProfilerCounterDataImageInitialize(&init);
    if (r == CUPTI_SUCCESS) r = cuptiRangeProfilerSetConfig(&config);
    if (r != CUPTI_SUCCESS) {
        kl_fail(err, "counter data / config: %s", cupti_str(r));
        goto out;
    }
    if (flush_open(&flush, device, err)) goto out;

    /* The profiler says when it has all passes; the bound only guards against a loop that
     * never ends if it misbehaves. */
    bool done = false;
    int limit = (int)kl_prof.n_passes + 4;
    for (out->n_passes = 0; !done; out->n_passes++) {
        if (out->n_passes == limit) {
            kl_fail(err, "profiler wanted more than %d passes (config says %zu)", limit,
                    kl_prof.n_passes);
            goto out;
        }
        if (flush_l2(&flush, err) || one_pass(rp, launch, ctx, &done, err)) goto out;
    }

    CUpti_RangeProfiler_DecodeData_Params decode = {
        .structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE, .pRangeProfilerObject = rp};
    if ((r = cuptiRangeProfilerDecodeData(&decode)) != CUPTI_SUCCESS) {
        kl_fail(err, "cuptiRangeProfilerDecodeData: %s", cupti_str(r));
        goto out;
    }
    CUpti_RangeProfiler_GetCounterDataInfo_Params info = {
        .structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE,
        .pCounterDataImage = data,
        .counterDataImageSize = size.counterDataSize};
    if ((r = cuptiRangeProfilerGetCounterDataInfo(&info)) != CUPTI_SUCCESS || info.numTotalRanges != 1 ||
        decode.numOfRangeDropped != 0) {
        kl_fail(err, "expected one range, got %zu (%zu dropped): %s", info.numTotalRanges,
                decode.numOfRangeDropped, cupti_str(r));
        goto out;
    }
    double value[KL_N_METRIC];
    CUpti_Profiler_Host_EvaluateToGpuValues_Params eval = {
        .structSize = KL_HOST_SIZE(CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues),
        .pHostObject = kl_prof.host,
        .pCounterDataImage = data,
        .counterDataImageSize = size.counterDataSize,
        .rangeIndex = 0,
        .ppMetricNames = kl_prof.names,
        .numMetrics = (size_t)kl_prof.n_metrics,
        .pMetricValues = value};
    if ((r = cuptiProfilerHostEvaluateToGpuValues(&eval)) != CUPTI_SUCCESS) {
        kl_fail(err, "cuptiProfilerHostEvaluateToGpuValues: %s", cupti_str(r));
        goto out;
    }
    fill(out, value);
    out->valid = true;
    rc = 0;
out:
    flush_close(&flush); /* cudaFree(NULL) and cudaFreeHost(NULL) do nothing */
    return rc;
}

int kl_counters_collect(void (*launch)(void *ctx), void *ctx, struct kl_counters *out,
                        struct kl_err *err)
{
    memset(out, 0, sizeof *out);
    out->dram_read_bytes = out->dram_write_bytes = out->dram_throughput_pct = NAN;
    out->sm_throughput_pct = out->achieved_occupancy_pct = out->tensor_pipe_pct = NAN;
    out->l2_hit_rate_pct = out->smem_bank_conflicts = out->smem_wavefronts = out->active_cycles = NAN;

    struct kl_err why;
    CUcontext cu_ctx;
    if (prepare(&cu_ctx, &why)) {
        snprintf(out->why, sizeof out->why, "counters not available: %.200s", why.msg);
        return 0;
    }
    /* Enable is where a driver that restricts counters to admins says so
     * (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES): still "not available", nothing has run. */
    CUpti_RangeProfiler_Enable_Params enable = {
        .structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE, .ctx = cu_ctx};
    CUptiResult r = cuptiRangeProfilerEnable(&enable);
    if (r != CUPTI_SUCCESS) {
        snprintf(out->why, sizeof out->why, "counters not available: cuptiRangeProfilerEnable: %s",
                 cupti_str(r));
        return 0;
    }
    uint8_t *data = NULL;
    int rc = run(enable.pRangeProfilerObject, &data, launch, ctx, out, err);
    CUpti_RangeProfiler_Disable_Params disable = {
        .structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE,
        .pRangeProfilerObject = enable.pRangeProfilerObject};
    r = cuptiRangeProfilerDisable(&disable);
    free(data);
    if (rc == 0 && r != CUPTI_SUCCESS)
        return kl_fail(err, "cuptiRangeProfilerDisable: %s", cupti_str(r));
    if (rc != 0) snprintf(out->why, sizeof out->why, "collection failed: %.200s",
                          err ? err->msg : "");
    return rc;
}

#ifndef KL_COUNTERS_NO_JSON
static void add_number(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key); /* JSON has no NaN */
}

cJSON *kl_counters_json(const struct kl_counters *c)
{
    cJSON *o = cJSON_CreateObject(), *stalls = cJSON_CreateObject();
    if (!o || !stalls) {
        cJSON_Delete(o);
        cJSON_Delete(stalls);
        return NULL;
    }
    add_number(o, "dram_read_bytes", c->dram_read_bytes);
    add_number(o, "dram_write_bytes", c->dram_write_bytes);
    add_number(o, "dram_throughput_pct", c->dram_throughput_pct);
    add_number(o, "sm_throughput_pct", c->sm_throughput_pct);
    add_number(o, "achieved_occupancy_pct", c->achieved_occupancy_pct);
    add_number(o, "tensor_pipe_pct", c->tensor_pipe_pct);
    add_number(o, "l2_hit_rate_pct", c->l2_hit_rate_pct);
    add_number(o, "smem_bank_conflicts", c->smem_bank_conflicts);
    add_number(o, "smem_wavefronts", c->smem_wavefronts);
    add_number(o, "active_cycles", c->active_cycles);
    for (int i = 0; i < c->n_stalls; i++) add_number(stalls, c->stalls[i].name, c->stalls[i].pct);
    cJSON_AddItemToObject(o, "stalls", stalls);
    cJSON_AddNumberToObject(o, "passes", c->n_passes);
    if (!c->valid) cJSON_AddStringToObject(o, "why", c->why);
    return o;
}
#endif

void kl_counters_shutdown(void)
{
    release_device_state();
    if (kl_prof.cupti_up) {
        CUpti_Profiler_DeInitialize_Params p = {.structSize = CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
        cuptiProfilerDeInitialize(&p);
        kl_prof.cupti_up = false;
    }
}
