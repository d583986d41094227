/* GPU clocks through NVML, opened at run time: linking libnvidia-ml would stop every binary
 * from starting on a machine without the driver (CI). The few entry points are declared here
 * with NVML's documented signatures. The device read is the calling process's current CUDA
 * device, found by its PCI bus id (an allreduce rank reads its own GPU); perf/peers/clocks.py
 * reads the same counters the same way. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

#include "perf/bench.h"

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned, void **);
typedef int (*nvml_bus_fn)(const char *, void **);
typedef int (*nvml_clock_fn)(void *, int, unsigned *);
typedef int (*nvml_reasons_fn)(void *, unsigned long long *);

enum { NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };

/* Weak: a test binary may read clocks of its own (perf/test_bench.c plays a throttled GPU). */
__attribute__((weak)) void kl_clocks_read(struct kl_clocks *c)
{
    static void *lib;
    static bool ready;
    static nvml_handle_fn by_index;
    static nvml_bus_fn by_bus;
    static nvml_clock_fn clock, max_clock;
    static nvml_reasons_fn reasons;
    memset(c, 0, sizeof *c);
    if (!lib) {
        lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) return;
        nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
        by_index = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
        by_bus = (nvml_bus_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
        clock = (nvml_clock_fn)dlsym(lib, "nvmlDeviceGetClockInfo");
        max_clock = (nvml_clock_fn)dlsym(lib, "nvmlDeviceGetMaxClockInfo");
        reasons = (nvml_reasons_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
        if (!reasons) reasons = (nvml_reasons_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
        ready = init && by_index && clock && init() == 0;
    }
    if (!ready) return;
    void *dev = NULL;
    char bus[32];
    int cuda_dev = 0;
    if (cudaGetDevice(&cuda_dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_dev) != cudaSuccess ||
        !by_bus || by_bus(bus, &dev) != 0)
        if (by_index(0, &dev) != 0) return;
    unsigned sm = 0, mem = 0, max_sm = 0;
    if (clock(dev, NVML_CLOCK_SM, &sm) != 0 || clock(dev, NVML_CLOCK_MEM, &mem) != 0) return;
    if (max_clock) max_clock(dev, NVML_CLOCK_SM, &max_sm);
    if (reasons) reasons(dev, &c->throttle_reasons);
    c->valid = true;
    c->sm_mhz = (int)sm, c->mem_mhz = (int)mem, c->max_sm_mhz = (int)max_sm;
}
