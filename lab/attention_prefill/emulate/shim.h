/* Host emulation of the CUDA pieces the attention_prefill tensor-core kernels use, so their exact
 * source (mma.cuh, hopper.cuh, kv_ring.cuh and the kernels of v2..v10, gen.py copies them) runs on
 * a machine without a GPU: one std::thread per CUDA thread of a CTA, std::barrier for
 * __syncthreads, named barriers and the exchanges a warp-wide instruction needs (shuffles,
 * ldmatrix, mma.sync, wgmma's register operand). gen.py swaps the PTX wrappers for emulated ones:
 * ldmatrix, mma.sync and wgmma by the PTX ISA's fragment tables and shared-memory descriptor format
 * (wgmma deferred to the wait that covers it, so an accumulator read or a stage released too early
 * shows), cp.async deferred the same way to its wait_group, bulk tensor copies as immediate copies
 * (the TMA's 128-byte swizzle applied to the destination address), and mbarriers as arrival and
 * byte counters with phases (below). The order of copies, barriers and reads is then checked: a
 * tile read before its copy landed reads stale bytes, which the driver fills with garbage, and a
 * protocol that never completes a phase is reported as a deadlock. What it cannot see: races that
 * need real asynchrony (compute-sanitizer's racecheck does), timing, register limits, and a
 * misreading of the hardware shared by the kernel and this emulation. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#undef __grid_constant__
#define __grid_constant__
using std::max;
using std::min;

struct emu_dim3 {
    unsigned x = 0, y = 0, z = 0;
};
extern thread_local emu_dim3 emu_threadIdx, emu_blockIdx;
extern emu_dim3 emu_gridDim;
inline emu_dim3 emu_blockDim = {128, 1, 1};
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define gridDim emu_gridDim
#define blockDim emu_blockDim

namespace emu {
constexpr int kMaxWarps = 12;
/* An mbarrier: arrivals still expected in this phase, bytes announced and not yet landed, and the
 * number of completed phases (waiting on parity P returns once a phase of parity P completed). */
struct mbarrier {
    int count = 0, pending = 0;
    int64_t tx = 0;
    unsigned completed = 0;
};
struct cluster;
/* One CTA being run: its shared memory, its barriers, a word exchange per warp lane, and its cluster
 * (the CTAs run at the same time, each able to reach the others' shared memory and mbarriers). */
struct cta {
    std::vector<unsigned char> smem;
    std::barrier<> *block;
    std::barrier<> *warp[kMaxWarps];
    uint32_t xchg[kMaxWarps][32][8];
    std::mutex mu; /* guards what follows */
    std::condition_variable cv;
    std::map<uint32_t, mbarrier> mbarriers; /* by shared-memory offset */
    std::map<int, std::unique_ptr<std::barrier<>>> named;
    cluster *cl = nullptr;
    unsigned rank = 0;
    int live = 0; /* threads not yet exited (guarded by mu): a copy or arrival to a CTA without any fails */
};
struct cluster {
    std::vector<cta *> ctas;
    std::barrier<> *sync; /* barrier.cluster: every thread of every CTA */
};
extern thread_local cta *g_cta; /* the calling thread's CTA */
inline int lane() { return threadIdx.x % 32; }
inline int wid() { return threadIdx.x / 32; }
inline void warp_sync() { g_cta->warp[wid()]->arrive_and_wait(); }
[[noreturn]] inline void fail(const char *what, unsigned where)
{
    fprintf(stderr, "emulator: %s (shared-memory offset %u, thread %u of CTA %u,%u,%u)\n", what, where, threadIdx.x,
            blockIdx.x, blockIdx.y, blockIdx.z);
    abort();
}

/* ---- mbarriers (of the calling thread's CTA, or of CTA c of its cluster) ---- */
inline void complete_if_done(cta &c, mbarrier &b, uint32_t at)
{
    if (b.pending < 0) fail("more arrivals on an mbarrier than its count", at);
    if (b.pending == 0 && b.tx == 0) {
        b.completed++, b.pending = b.count;
        c.cv.notify_all();
    }
}
inline mbarrier &find_mbarrier(cta &c, uint32_t at)
{
    auto it = c.mbarriers.find(at);
    if (it == c.mbarriers.end()) fail("mbarrier used before mbarrier.init", at);
    return it->second;
}
inline void mbar_init(uint32_t at, int count)
{
    std::lock_guard<std::mutex> lock(g_cta->mu);
    g_cta->mbarriers[at] = mbarrier{count, count, 0, 0};
}
/* An arrival that first announces `bytes` (0 for a plain arrive); a copy's landing is
 * mbar_update(c, at, -bytes, false). */
inline void mbar_update(cta &c, uint32_t at, int64_t bytes, bool arrival)
{
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.live == 0) fail("an arrival or a copy reached a CTA of the cluster that had exited", at);
    mbarrier &b = find_mbarrier(c, at);
    b.tx += bytes;
    if (arrival) b.pending--;
    complete_if_done(c, b, at);
}
inline void mbar_update(uint32_t at, int64_t bytes, bool arrival) { mbar_update(*g_cta, at, bytes, arrival); }
inline void mbar_wait(uint32_t at, int parity)
{
    std::unique_lock<std::mutex> lock(g_cta->mu);
    mbarrier &b = find_mbarrier(*g_cta, at);
    /* The phase of parity P has completed when the current phase's parity (completed % 2) differs from P. */
    if (!g_cta->cv.wait_for(lock, std::chrono::seconds(60), [&] { return (int)(b.completed & 1) != parity; }))
        fail("deadlock: an mbarrier phase never completed within 60 s", at);
}

/* ---- asynchronous work of a thread: wgmma products and cp.async copies ----
 * open: issued since the last commit; committed: one list per commit group, oldest first. The wait for
 * "at most N groups in flight" runs every group but the newest N, so a product's shared-memory reads
 * and accumulator writes, and a copy's landing, happen there: as late as the hardware may make them. */
struct async_queue {
    std::vector<std::function<void()>> open;
    std::vector<std::vector<std::function<void()>>> committed;
    template <int N> void run_all_but()
    {
        for (; committed.size() > N; committed.erase(committed.begin()))
            for (auto &work : committed.front()) work();
    }
};
inline thread_local async_queue t_wgmma, t_cp_async;

/* ---- named barriers (bar.sync / bar.arrive id, threads) ---- */
inline std::barrier<> &named_barrier(int id, int threads)
{
    std::lock_guard<std::mutex> lock(g_cta->mu);
    auto &b = g_cta->named[id];
    if (!b) b = std::make_unique<std::barrier<>>(threads);
    return *b;
}

/* Runs kernel() as every CTA of the grid, `threads` threads each: one cluster of cluster_z CTAs
 * (consecutive along z) after the other, the CTAs of a cluster at the same time. A thread that returns
 * drops out of __syncthreads, of its warp's exchanges and of the cluster barrier, as an exited thread
 * does. */
template <class F>
void run_grid(unsigned gx, unsigned gy, unsigned gz, unsigned threads, size_t smem, F kernel, unsigned cluster_z = 1);
} // namespace emu

inline void __syncthreads() { emu::g_cta->block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_sync(); }
inline float __shfl_xor_sync(unsigned, float v, int off)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    emu::g_cta->xchg[emu::wid()][emu::lane()][0] = u;
    emu::warp_sync();
    const uint32_t o = emu::g_cta->xchg[emu::wid()][emu::lane() ^ off][0];
    emu::warp_sync();
    float r;
    memcpy(&r, &o, 4);
    return r;
}
inline long long clock64()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
template <typename T> inline T __ldg(const T *p) { return *p; } /* the read-only path is a plain load here */
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

inline void __trap() { emu::fail("__trap()", 0); }

template <class F>
void emu::run_grid(unsigned gx, unsigned gy, unsigned gz, unsigned threads, size_t smem, F kernel, unsigned cluster_z)
{
    if (threads % 32 || threads / 32 > kMaxWarps) fail("unsupported CTA size", threads);
    if (cluster_z == 0 || gz % cluster_z) fail("grid z not a multiple of the cluster", gz);
    emu_gridDim = {gx, gy, gz};
    emu_blockDim = {threads, 1, 1};
    for (unsigned z0 = 0; z0 < gz; z0 += cluster_z)
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++) {
                std::vector<std::unique_ptr<cta>> ctas;
                std::vector<std::unique_ptr<std::barrier<>>> barriers;
                std::barrier<> cluster_sync(threads * cluster_z);
                cluster cl{{}, &cluster_sync};
                for (unsigned r = 0; r < cluster_z; r++) {
                    ctas.push_back(std::make_unique<cta>());
                    cta &c = *ctas.back();
                    c.smem.assign(smem, 0xAB); /* stale bytes: a tile read before it is copied shows */
                    barriers.push_back(std::make_unique<std::barrier<>>(threads));
                    c.block = barriers.back().get();
                    for (unsigned w = 0; w < threads / 32; w++) {
                        barriers.push_back(std::make_unique<std::barrier<>>(32));
                        c.warp[w] = barriers.back().get();
                    }
                    c.cl = &cl, c.rank = r, c.live = (int)threads;
                    cl.ctas.push_back(&c);
                }
                std::vector<std::thread> pool;
                for (unsigned r = 0; r < cluster_z; r++)
                    for (unsigned t = 0; t < threads; t++)
                        pool.emplace_back([&, r, t] {
                            cta &c = *ctas[r];
                            g_cta = &c;
                            emu_threadIdx = {t, 0, 0};
                            emu_blockIdx = {x, y, z0 + r};
                            kernel();
                            if (!t_wgmma.open.empty() || !t_wgmma.committed.empty())
                                fail("the thread exits with wgmma products it never waited for", 0);
                            t_cp_async.open.clear(), t_cp_async.committed.clear(); /* never waited for: unused */
                            c.block->arrive_and_drop();
                            c.warp[t / 32]->arrive_and_drop();
                            cluster_sync.arrive_and_drop();
                            std::lock_guard<std::mutex> lock(c.mu);
                            c.live--;
                        });
                for (auto &t : pool) t.join();
            }
}
