/* Timing (lab/CONTRACTS.md section 6): CUDA events, a warm-up, the median of many repetitions with
 * min and max kept, inputs rotated over several sets so the working set is cold in L2, and
 * small workloads timed as CUDA-graph replays so launch gaps do not count as kernel time.
 * The last repetition is the one the bench re-checks: a hook poisons its outputs (or restores
 * in-place inputs) before it, on the stream and before its start event, so the re-check reads
 * what that very repetition wrote and the poisoning is not timed. */
#include <algorithm>
#include <stdio.h>
#include <vector>

#include "perf/bench.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define TRY(expr)                                                                                 \
    do {                                                                                          \
        cudaError_t rc_ = (expr);                                                                 \
        if (rc_ != cudaSuccess) {                                                                 \
            kl_fail(err, "%s: %s", #expr, cudaGetErrorString(rc_));                               \
            goto out;                                                                             \
        }                                                                                         \
    } while (0)

extern "C" int kl_time_set(int i, int n, int sets)
{
    if (sets <= 1 || i == n - 1) return 0;
    return 1 + i % (sets - 1);
}

/* Poison kernel of kl_dev_poison_rows: block k fills row rows[k] with 0xFF, 16 bytes at a time
 * where the row allows it. */
static __global__ void poison_rows(unsigned char *base, size_t row_bytes, const int64_t *rows)
{
    const int64_t row = rows[blockIdx.x];
    if (row < 0) return;
    unsigned char *p = base + (size_t)row * row_bytes;
    if (row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0)
        for (size_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x)
            reinterpret_cast<uint4 *>(p)[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
    else
        for (size_t i = threadIdx.x; i < row_bytes; i += blockDim.x) p[i] = 0xff;
}

extern "C" int kl_dev_poison_rows(void *base, size_t row_bytes, const int64_t *rows, int64_t n, cudaStream_t stream)
{
    /* One block per row; a grid's x dimension takes 2^31 - 1 blocks, far more rows than any workload. */
    if (n <= 0) return (int)cudaSuccess;
    poison_rows<<<(unsigned)n, 128, 0, stream>>>(static_cast<unsigned char *>(base), row_bytes, rows);
    return (int)cudaGetLastError();
}

extern "C" int kl_time(kl_launch_set_fn launch, void *ctx, int sets, int reps, bool use_graph, struct kl_timing *t,
                       struct kl_err *err)
{
    return kl_time_checked(launch, nullptr, ctx, sets, reps, use_graph, t, err);
}

extern "C" int kl_time_checked(kl_launch_set_fn launch, kl_before_last_fn before_last, void *ctx, int sets, int reps,
                               bool use_graph, struct kl_timing *t, struct kl_err *err)
{
    int ret = -1;
    cudaStream_t stream = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaEvent_t> ev(2 * (size_t)reps, nullptr);
    std::vector<double> us((size_t)reps);
    /* One graph holds enough launches to cover every input set and to make the replay's own
     * launch cost small next to the work inside it. */
    const int per_graph = std::max(sets, 20);
    *t = (struct kl_timing){0, 0, 0, reps, use_graph, use_graph ? per_graph : 1};
    TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (auto &e : ev) TRY(cudaEventCreate(&e));

    /* Warm-up: module load, first-touch of every set, clocks up. */
    for (int i = 0; i < std::min(sets, 8) + 3; i++) TRY((cudaError_t)launch(ctx, i % sets, stream));
    TRY(cudaStreamSynchronize(stream));

    if (use_graph) {
        TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < per_graph; i++) {
            cudaError_t rc = (cudaError_t)launch(ctx, kl_time_set(i, per_graph, sets), stream);
            if (rc != cudaSuccess) {
                cudaStreamEndCapture(stream, &graph);
                kl_fail(err, "launch during graph capture: %s", cudaGetErrorString(rc));
                goto out;
            }
        }
        TRY(cudaStreamEndCapture(stream, &graph));
        TRY(cudaGraphInstantiate(&exec, graph, 0));
        TRY(cudaGraphLaunch(exec, stream)); /* graph warm-up */
        for (int r = 0; r < reps; r++) {
            if (r == reps - 1 && before_last) TRY((cudaError_t)before_last(ctx, stream));
            TRY(cudaEventRecord(ev[2 * r], stream));
            TRY(cudaGraphLaunch(exec, stream));
            TRY(cudaEventRecord(ev[2 * r + 1], stream));
        }
    } else {
        for (int r = 0; r < reps; r++) {
            if (r == reps - 1 && before_last) TRY((cudaError_t)before_last(ctx, stream));
            TRY(cudaEventRecord(ev[2 * r], stream));
            TRY((cudaError_t)launch(ctx, kl_time_set(r, reps, sets), stream));
            TRY(cudaEventRecord(ev[2 * r + 1], stream));
        }
    }
    TRY(cudaStreamSynchronize(stream));
    for (int r = 0; r < reps; r++) {
        float ms = 0;
        TRY(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
        us[(size_t)r] = 1e3 * ms / (use_graph ? per_graph : 1);
    }
    qsort(us.data(), (size_t)reps, sizeof(double), cmp_double);
    t->min_us = us[0];
    t->max_us = us[(size_t)reps - 1];
    t->median_us = reps % 2 ? us[(size_t)reps / 2] : 0.5 * (us[(size_t)reps / 2 - 1] + us[(size_t)reps / 2]);
    ret = 0;
out:
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    for (auto e : ev)
        if (e) cudaEventDestroy(e);
    if (stream) cudaStreamDestroy(stream);
    return ret;
}
