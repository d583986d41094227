/* Peer copy bandwidth between two GPUs (perf/peer.h): streaming copies whose source or
 * destination is the other GPU's memory, done by this GPU's SMs (as the all-reduce kernels do)
 * and by the copy engines (as cudaMemcpyPeer does), timed with CUDA events. And the exchange
 * floor: the time of the least a barrier-free all-reduce call does at world 2, in a CUDA graph. */
#include <algorithm>
#include <cjson/cJSON.h>
#include <cuda_runtime.h>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/ptx_sys_scope.cuh"
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

/* ---- the exchange floor ----
 * Each GPU stores n bytes into the other's memory and polls its own copy until the other's bytes have
 * landed: the part of a one-shot all-reduce that no variant can leave out, with nothing else (no input
 * read, no sum, no output, no sets to empty). A call is one launch of blocks of kFloorThreads, a
 * programmatic dependent of the previous call, kFloorCalls of them a CUDA graph, timed as the
 * all-reduce bench times its calls. The data is the call number in every word, so a mailbox is never
 * emptied: a reader waits until each word of its unit holds this call's number or a later one. Every
 * block counts its own calls (block b meets only block b of the other GPU, and both GPUs launch the
 * same grids in the same order), starting from zero with both mailboxes zeroed for each size. */
constexpr int kFloorThreads = 512, kFloorCalls = 20, kFloorReplays = 20;
constexpr unsigned long long kFloorTimeoutNs = 10ull * 1000 * 1000 * 1000;
static const double kFloorBytes[KL_PEER_FLOOR_SIZES] = {16, 8 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20};

static __global__ void __launch_bounds__(kFloorThreads)
    exchange(uint4 *theirs, const uint4 *mine, uint32_t *calls, int64_t units, int *timed_out)
{
    __shared__ uint32_t call;
    kl::pdl_release();
    kl::pdl_wait();
    if (threadIdx.x == 0) call = calls[blockIdx.x] + 1, calls[blockIdx.x] = call;
    __syncthreads();
    const uint32_t e = call;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = first; j < units; j += stride)
        theirs[j] = make_uint4(e, e, e, e);
    for (int64_t j = first; j < units; j += stride) {
        const unsigned long long t0 = kl::ptx::globaltimer();
        for (;;) { /* every word: a 16-byte store may land piecewise */
            const uint4 w = kl::ptx::ld_volatile_v4(mine + j);
            if ((int32_t)(w.x - e) >= 0 && (int32_t)(w.y - e) >= 0 && (int32_t)(w.z - e) >= 0 &&
                (int32_t)(w.w - e) >= 0)
                break;
            if (kl::ptx::globaltimer() - t0 > kFloorTimeoutNs) {
                atomicExch(timed_out, 1);
                return;
            }
        }
    }
}

struct floor_side {
    int dev, sms;
    bool pdl;
    cudaStream_t s;
    uint4 *box;
    uint32_t *calls;
    int *timed_out;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaEvent_t ev[kFloorReplays + 1];
};

/* One size: both GPUs' graphs built, warmed up, then replayed at once; the slowest side's median us a call. */
static int floor_one(floor_side *side[2], size_t bytes, double *us, kl_err *err)
{
    int ret = -1;
    const int64_t units = (int64_t)((bytes + 15) / 16);
    for (int k = 0; k < 2; k++) {
        floor_side *me = side[k], *other = side[1 - k];
        const int64_t blocks = std::min<int64_t>((units + kFloorThreads - 1) / kFloorThreads, me->sms);
        TRY(cudaSetDevice(me->dev));
        TRY(cudaMemset(me->box, 0, (size_t)units * 16));
        TRY(cudaMemset(me->calls, 0, sizeof(uint32_t) * me->sms));
        TRY(cudaDeviceSynchronize());
        TRY(cudaStreamBeginCapture(me->s, cudaStreamCaptureModeThreadLocal));
        cudaError_t launched = cudaSuccess;
        for (int i = 0; i < kFloorCalls && launched == cudaSuccess; i++)
            launched = kl::launch_pdl(exchange, (unsigned)blocks, kFloorThreads, me->pdl, me->s, other->box,
                                      (const uint4 *)me->box, me->calls, units, me->timed_out);
        TRY(cudaStreamEndCapture(me->s, &me->g));
        TRY(launched);
        TRY(cudaGraphInstantiate(&me->ge, me->g, 0));
    }
    for (int k = 0; k < 2; k++) { /* warm-up: both GPUs' graphs queued before either is waited for */
        TRY(cudaSetDevice(side[k]->dev));
        TRY(cudaGraphLaunch(side[k]->ge, side[k]->s));
    }
    for (int k = 0; k < 2; k++) {
        TRY(cudaSetDevice(side[k]->dev));
        TRY(cudaStreamSynchronize(side[k]->s));
    }
    for (int k = 0; k < 2; k++) {
        TRY(cudaSetDevice(side[k]->dev));
        TRY(cudaEventRecord(side[k]->ev[0], side[k]->s));
        for (int r = 0; r < kFloorReplays; r++) {
            TRY(cudaGraphLaunch(side[k]->ge, side[k]->s));
            TRY(cudaEventRecord(side[k]->ev[r + 1], side[k]->s));
        }
    }
    *us = 0;
    for (int k = 0; k < 2; k++) {
        floor_side *me = side[k];
        int late = 0;
        TRY(cudaSetDevice(me->dev));
        TRY(cudaStreamSynchronize(me->s));
        TRY(cudaMemcpy(&late, me->timed_out, sizeof late, cudaMemcpyDeviceToHost));
        if (late) {
            kl_fail(err, "exchange floor: GPU %d waited over %.0f s for GPU %d's %zu bytes", me->dev,
                    kFloorTimeoutNs * 1e-9, side[1 - k]->dev, bytes);
            goto out;
        }
        std::vector<double> per_call;
        for (int r = 0; r < kFloorReplays; r++) {
            float ms = 0;
            TRY(cudaEventElapsedTime(&ms, me->ev[r], me->ev[r + 1]));
            per_call.push_back(1e3 * ms / kFloorCalls);
        }
        *us = std::max(*us, median(per_call));
    }
    ret = 0;
out:
    for (int k = 0; k < 2; k++) {
        cudaSetDevice(side[k]->dev);
        if (side[k]->ge) cudaGraphExecDestroy(side[k]->ge);
        if (side[k]->g) cudaGraphDestroy(side[k]->g);
        side[k]->ge = NULL, side[k]->g = NULL;
    }
    return ret;
}

/* The exchange floor between GPUs a and b at every size of kFloorBytes (peer access already enabled). */
static int floor_measure(int a, int b, struct kl_peer_bw *out, kl_err *err)
{
    floor_side A = {a}, B = {b};
    floor_side *side[2] = {&A, &B};
    const size_t most = (size_t)kFloorBytes[KL_PEER_FLOOR_SIZES - 1];
    int ret = -1;
    for (int k = 0; k < 2; k++) {
        floor_side *me = side[k];
        int major = 0;
        TRY(cudaSetDevice(me->dev));
        TRY(cudaDeviceGetAttribute(&me->sms, cudaDevAttrMultiProcessorCount, me->dev));
        TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, me->dev));
        me->pdl = major >= 9;
        TRY(cudaStreamCreateWithFlags(&me->s, cudaStreamNonBlocking));
        TRY(cudaMalloc((void **)&me->box, most));
        TRY(cudaMalloc((void **)&me->calls, sizeof(uint32_t) * me->sms));
        TRY(cudaMalloc((void **)&me->timed_out, sizeof(int)));
        TRY(cudaMemset(me->timed_out, 0, sizeof(int)));
        for (int r = 0; r <= kFloorReplays; r++)
            TRY(cudaEventCreate(&me->ev[r]));
    }
    for (int i = 0; i < KL_PEER_FLOOR_SIZES; i++) {
        out->floor_bytes[i] = kFloorBytes[i];
        if (floor_one(side, (size_t)kFloorBytes[i], &out->floor_us[i], err)) goto out;
    }
    ret = 0;
out:
    for (int k = 0; k < 2; k++) {
        floor_side *me = side[k];
        cudaSetDevice(me->dev);
        if (me->s) cudaStreamSynchronize(me->s), cudaStreamDestroy(me->s);
        cudaFree(me->box), cudaFree(me->calls), cudaFree(me->timed_out);
        for (int r = 0; r <= kFloorReplays; r++)
            if (me->ev[r]) cudaEventDestroy(me->ev[r]);
    }
    return ret;
}

extern "C" int kl_peer_bw_measure(int a, int b, struct kl_peer_bw *out, struct kl_err *err)
{
    *out = (kl_peer_bw){a, b, (double)kBytes, 0, 0, 0, 0, {0}, {0}};
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
            timed(one, 1, one_peer, 2, &out->copy_engine_gbs, err) || floor_measure(a, b, out, err))
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
    fprintf(f, "exchange floor  GPU %d <-> GPU %d, us a call in a CUDA graph:", p->a, p->b);
    for (int i = 0; i < KL_PEER_FLOOR_SIZES; i++) {
        const double b = p->floor_bytes[i];
        const int shift = b >= 1 << 20 ? 20 : b >= 1 << 10 ? 10 : 0;
        fprintf(f, " %.0f %s %.2f%s", b / (1 << shift), shift == 20 ? "MB" : shift == 10 ? "KB" : "B", p->floor_us[i],
                i + 1 < KL_PEER_FLOOR_SIZES ? "," : "\n");
    }
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
    cJSON *fl = cJSON_AddArrayToObject(o, "exchange_floor");
    for (int i = 0; i < KL_PEER_FLOOR_SIZES; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "bytes", p->floor_bytes[i]);
        cJSON_AddNumberToObject(x, "us", p->floor_us[i]);
        cJSON_AddItemToArray(fl, x);
    }
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
