/* What GPUs this machine has and how they connect, learned in a child process (the rank
 * program "allreduce_probe", one rank): the parent stays free of CUDA, and the count honours
 * CUDA_VISIBLE_DEVICES as the ranks will see it. Also the topology the guide reports: P2P
 * access and performance rank per pair (CUDA), active NVLinks per GPU (NVML, dlopen'ed), and
 * `nvidia-smi topo -m` when the tool is there. */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "lab/allreduce/allreduce_module.h"

struct probe_payload {
    int want_smi;
    struct kl_ar_topology topo;
};

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_by_pci_fn)(const char *, void **);
typedef int (*nvml_link_state_fn)(void *, unsigned, int *);

/* Active NVLinks of each device, or -1 where NVML cannot say. */
static void count_nvlinks(struct kl_ar_topology *t)
{
    for (int d = 0; d < t->count; d++) t->dev[d].nvlinks = -1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml_by_pci_fn by_pci = (nvml_by_pci_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml_link_state_fn state = (nvml_link_state_fn)dlsym(lib, "nvmlDeviceGetNvLinkState");
    if (!init || !by_pci || !state || init() != 0) return;
    for (int d = 0; d < t->count; d++) {
        void *h = NULL;
        if (by_pci(t->dev[d].pci, &h) != 0) continue;
        int active = 0;
        for (unsigned link = 0; link < 18; link++) { /* NVML_NVLINK_MAX_LINKS on Hopper */
            int on = 0;
            if (state(h, link, &on) == 0 && on == 1) active++;
        }
        t->dev[d].nvlinks = active;
    }
}

static void read_smi_topo(struct kl_ar_topology *t)
{
    FILE *p = popen("nvidia-smi topo -m 2>/dev/null", "r");
    if (!p) return;
    size_t n = fread(t->smi_topo, 1, sizeof t->smi_topo - 1, p);
    t->smi_topo[n] = 0;
    if (pclose(p) != 0) t->smi_topo[0] = 0;
}

static int probe_main(struct kl_rank *r)
{
    struct probe_payload *pp = r->payload;
    struct kl_ar_topology *t = &pp->topo;
    kl_rank_step(r, "cudaGetDeviceCount");
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
        snprintf(t->why, sizeof t->why, "no CUDA device: %s",
                 rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount found none");
        t->count = 0;
        return 0;
    }
    t->count = count > KL_AR_MAX_RANKS ? KL_AR_MAX_RANKS : count;
    for (int d = 0; d < t->count; d++) {
        struct cudaDeviceProp p;
        kl_rank_step(r, "properties of GPU %d", d);
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
        snprintf(t->dev[d].name, sizeof t->dev[d].name, "%.95s", p.name);
        t->dev[d].cc = p.major * 10 + p.minor;
        t->dev[d].sms = p.multiProcessorCount;
        cudaDeviceGetPCIBusId(t->dev[d].pci, sizeof t->dev[d].pci, d);
        for (int e = 0; e < t->count; e++) {
            if (e == d) continue;
            cudaDeviceCanAccessPeer(&t->p2p[d][e], d, e);
            cudaDeviceGetP2PAttribute(&t->perf_rank[d][e], cudaDevP2PAttrPerformanceRank, d, e);
            cudaDeviceGetP2PAttribute(&t->atomics[d][e], cudaDevP2PAttrNativeAtomicSupported, d, e);
        }
    }
    kl_rank_step(r, "NVML link states");
    count_nvlinks(t);
    if (pp->want_smi) {
        kl_rank_step(r, "nvidia-smi topo -m");
        read_smi_topo(t);
    }
    return 0;
}

KL_RANK_PROGRAM("allreduce_probe", probe_main);

static int probe(struct kl_ar_topology *t, bool smi, struct kl_err *err)
{
    struct kl_ranks g;
    memset(t, 0, sizeof *t);
    if (kl_ranks_create(&g, 1, sizeof(struct probe_payload), err)) return -1;
    ((struct probe_payload *)g.payload)->want_smi = smi;
    int rc = kl_ranks_run(&g, "allreduce_probe", 60, err);
    if (!rc) *t = ((struct probe_payload *)g.payload)->topo;
    kl_ranks_destroy(&g);
    return rc;
}

int kl_ar_topology_probe(struct kl_ar_topology *t, struct kl_err *err) { return probe(t, true, err); }

bool kl_ar_shared_device(void)
{
    const char *s = getenv("KL_AR_SHARED_DEVICE");
    return s && strcmp(s, "1") == 0;
}

/* Shared-device mode: GPU 0 stands for every rank's GPU, up to KL_AR_SHARED_WORLDS of them. */
static void share_device_zero(struct kl_ar_topology *t)
{
    if (t->count < 1) return;
    t->count = KL_AR_SHARED_WORLDS;
    for (int d = 1; d < t->count; d++) t->dev[d] = t->dev[0];
    for (int d = 0; d < t->count; d++)
        for (int e = 0; e < t->count; e++) t->p2p[d][e] = d != e, t->perf_rank[d][e] = 0, t->atomics[d][e] = d != e;
}

const struct kl_ar_topology *kl_ar_machine(void)
{
    static struct kl_ar_topology t;
    static bool done;
    if (!done) {
        struct kl_err err = {{0}};
        if (probe(&t, false, &err)) snprintf(t.why, sizeof t.why, "the GPU probe failed: %.200s", err.msg);
        if (kl_ar_shared_device()) share_device_zero(&t);
        done = true;
    }
    return &t;
}

int kl_ar_gpu_count(char *why, size_t len)
{
    const struct kl_ar_topology *t = kl_ar_machine();
    if (why && len) snprintf(why, len, "%s", t->count ? "" : t->why);
    return t->count;
}

cJSON *kl_ar_topology_json(const struct kl_ar_topology *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "gpus", t->count);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (int d = 0; d < t->count; d++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", t->dev[d].name);
        cJSON_AddStringToObject(e, "pci", t->dev[d].pci);
        cJSON_AddNumberToObject(e, "cc", t->dev[d].cc);
        cJSON_AddNumberToObject(e, "sms", t->dev[d].sms);
        if (t->dev[d].nvlinks >= 0) cJSON_AddNumberToObject(e, "nvlinks", t->dev[d].nvlinks);
        else cJSON_AddNullToObject(e, "nvlinks");
        cJSON_AddItemToArray(devs, e);
    }
    cJSON *pairs = cJSON_AddArrayToObject(o, "pairs");
    for (int d = 0; d < t->count; d++)
        for (int e = 0; e < t->count; e++) {
            if (d == e) continue;
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "from", d);
            cJSON_AddNumberToObject(p, "to", e);
            cJSON_AddBoolToObject(p, "p2p", t->p2p[d][e]);
            cJSON_AddNumberToObject(p, "perf_rank", t->perf_rank[d][e]);
            cJSON_AddBoolToObject(p, "native_atomics", t->atomics[d][e]);
            cJSON_AddItemToArray(pairs, p);
        }
    if (t->smi_topo[0]) cJSON_AddStringToObject(o, "nvidia_smi_topo", t->smi_topo);
    return o;
}
