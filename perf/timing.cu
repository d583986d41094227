/* Timing (DESIGN.md section 6): CUDA events, a warm-up, the median of many repetitions with
 * min and max kept, inputs rotated over several sets so the working set is cold in L2, and
 * small workloads timed as CUDA-graph replays so launch gaps do not count as kernel time. */
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

extern "C" int kl_time(kl_launch_set_fn launch, void *ctx, int sets, int reps, bool use_graph, struct kl_timing *t,
                       struct kl_err *err)
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
    *t = (struct kl_timing){0, 0, 0, reps, use_graph};
    TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (auto &e : ev) TRY(cudaEventCreate(&e));

    /* Warm-up: module load, first-touch of every set, clocks up. */
    for (int i = 0; i < std::min(sets, 8) + 3; i++) TRY((cudaError_t)launch(ctx, i % sets, stream));
    TRY(cudaStreamSynchronize(stream));

    if (use_graph) {
        TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < per_graph; i++) {
            cudaError_t rc = (cudaError_t)launch(ctx, i % sets, stream);
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
            TRY(cudaEventRecord(ev[2 * r], stream));
            TRY(cudaGraphLaunch(exec, stream));
            TRY(cudaEventRecord(ev[2 * r + 1], stream));
        }
    } else {
        for (int r = 0; r < reps; r++) {
            TRY(cudaEventRecord(ev[2 * r], stream));
            TRY((cudaError_t)launch(ctx, r % sets, stream));
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
