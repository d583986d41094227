/* Peer copy bandwidth between two GPUs (perf/peer.h): streaming copies whose source or
 * destination is the other GPU's memory, done by this GPU's SMs (as the all-reduce kernels do)
 * and by the copy engines (as cudaMemcpyPeer does), timed with CUDA events. */
#include <algorithm>
#include <cjson/cJSON.h>
#include <cuda_runtime.h>
#include <vector>

#include "perf/bench.h"
#include "perf/peer.h"

#define TRY(expr)                                                                                 \
    do {                                                                                          \
        cudaError_t rc_ = (expr);                                                                 \
        if (rc_ != cudaSuccess && rc_ != cudaErrorPeerAccessAlreadyEnabled) {                     \
            kl_fail(err, "%s: %s", #expr, cudaGetErrorString(rc_));                               \
            goto out;                                                                             \
        }                                                                                         \
    } while (0)

constexpr size_t kBytes = 256u << 20;
constexpr int kReps = 10;

struct side {
    int dev, sms;
    cudaStream_t s;
    uint4 *src, *dst;
    cudaEvent_t e0[kReps], e1[kReps];
};

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* One timed copy per rep on each listed side (both at once when two are given): per direction,
 * bytes over the slowest side's median. mode 0: SM copy from the peer; 1: SM copy into the
 * peer; 2: copy engines from the peer. */
static int timed(side *sides[], int count, side *peers[], int mode, double *gbs, kl_err *err)
{
    int ret = -1;
    const size_t n = kBytes / 16;
    for (int rep = -2; rep < kReps; rep++) { /* two warm-ups */
        for (int k = 0; k < count; k++) {
            side *me = sides[k], *other = peers[k];
            TRY(cudaSetDevice(me->dev));
            if (rep >= 0) TRY(cudaEventRecord(me->e0[rep], me->s));
            /* The copy ceiling's grid-stride copy (four loads in flight per thread: enough bytes in
             * flight to cover an NVLink round trip at hundreds of GB/s), reading or writing the peer. */
            if (mode == 0) TRY((cudaError_t)kl_copy_stride4(other->src, me->dst, n, me->sms * 8, me->s));
            else if (mode == 1) TRY((cudaError_t)kl_copy_stride4(me->src, other->dst, n, me->sms * 8, me->s));
            else TRY(cudaMemcpyPeerAsync(me->dst, me->dev, other->src, other->dev, kBytes, me->s));
            TRY(cudaGetLastError());
            if (rep >= 0) TRY(cudaEventRecord(me->e1[rep], me->s));
        }
    }
    {
        double worst = 0;
        for (int k = 0; k < count; k++) {
            std::vector<double> ms;
            TRY(cudaSetDevice(sides[k]->dev));
            TRY(cudaStreamSynchronize(sides[k]->s));
            for (int rep = 0; rep < kReps; rep++) {
                float t = 0;
                TRY(cudaEventElapsedTime(&t, sides[k]->e0[rep], sides[k]->e1[rep]));
                ms.push_back(t);
            }
            worst = std::max(worst, median(ms));
        }
        *gbs = (double)kBytes / (worst * 1e-3) / 1e9;
        ret = 0;
    }
out:
    return ret;
}

extern "C" int kl_peer_bw_measure(int a, int b, struct kl_peer_bw *out, struct kl_err *err)
{
    *out = (kl_peer_bw){a, b, (double)kBytes, 0, 0, 0, 0};
    side A = {a}, B = {b};
    side *sides[2] = {&A, &B};
    int ret = -1, ok = 0;
    TRY(cudaDeviceCanAccessPeer(&ok, a, b));
    if (!ok) {
        kl_fail(err, "GPU %d cannot access GPU %d (no P2P)", a, b);
        goto out;
    }
    for (int k = 0; k < 2; k++) {
        side *me = sides[k], *other = sides[1 - k];
        TRY(cudaSetDevice(me->dev));
        TRY(cudaDeviceEnablePeerAccess(other->dev, 0));
        cudaGetLastError(); /* "already enabled" is sticky until read */
        TRY(cudaDeviceGetAttribute(&me->sms, cudaDevAttrMultiProcessorCount, me->dev));
        TRY(cudaStreamCreateWithFlags(&me->s, cudaStreamNonBlocking));
        TRY(cudaMalloc((void **)&me->src, kBytes));
        TRY(cudaMalloc((void **)&me->dst, kBytes));
        TRY(cudaMemset(me->src, 0x3c, kBytes));
        for (int r = 0; r < kReps; r++) {
            TRY(cudaEventCreate(&me->e0[r]));
            TRY(cudaEventCreate(&me->e1[r]));
        }
    }
    {
        side *one[1] = {&A}, *one_peer[1] = {&B}, *both_peer[2] = {&B, &A};
        if (timed(one, 1, one_peer, 0, &out->read_gbs, err) || timed(one, 1, one_peer, 1, &out->write_gbs, err) ||
            timed(sides, 2, both_peer, 0, &out->read_both_gbs, err) ||
            timed(one, 1, one_peer, 2, &out->copy_engine_gbs, err))
            goto out;
    }
    ret = 0;
out:
    for (int k = 0; k < 2; k++) {
        side *me = sides[k];
        cudaSetDevice(me->dev);
        if (me->s) cudaStreamSynchronize(me->s), cudaStreamDestroy(me->s);
        cudaFree(me->src), cudaFree(me->dst);
        for (int r = 0; r < kReps; r++) {
            if (me->e0[r]) cudaEventDestroy(me->e0[r]);
            if (me->e1[r]) cudaEventDestroy(me->e1[r]);
        }
    }
    cudaSetDevice(a);
    return ret;
}

extern "C" void kl_peer_bw_print(FILE *f, const struct kl_peer_bw *p)
{
    fprintf(f, "peer copy       GPU %d <- GPU %d: SM reads %.0f GB/s, SM writes %d -> %d %.0f GB/s, both ways at once %.0f "
               "GB/s per direction, copy engines %.0f GB/s (%.0f MB copies)\n",
            p->a, p->b, p->read_gbs, p->a, p->b, p->write_gbs, p->read_both_gbs, p->copy_engine_gbs, p->bytes / 1e6);
}

extern "C" cJSON *kl_peer_bw_json(const struct kl_peer_bw *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "a", p->a);
    cJSON_AddNumberToObject(o, "b", p->b);
    cJSON_AddNumberToObject(o, "bytes", p->bytes);
    cJSON_AddNumberToObject(o, "read_gbs", p->read_gbs);
    cJSON_AddNumberToObject(o, "write_gbs", p->write_gbs);
    cJSON_AddNumberToObject(o, "read_both_gbs", p->read_both_gbs);
    cJSON_AddNumberToObject(o, "copy_engine_gbs", p->copy_engine_gbs);
    return o;
}

extern "C" int kl_peer_ceilings(FILE *f, cJSON *ceil_json, struct kl_err *err)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) return cudaGetLastError(), 0;
    cJSON *arr = ceil_json ? cJSON_AddArrayToObject(ceil_json, "peer") : NULL;
    for (int k = 0; k < 2; k++) {
        struct kl_peer_bw p;
        if (kl_peer_bw_measure(k, 1 - k, &p, err)) return -1;
        kl_peer_bw_print(f, &p);
        if (arr) cJSON_AddItemToArray(arr, kl_peer_bw_json(&p));
    }
    return 0;
}
