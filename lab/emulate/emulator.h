/* A CPU emulation of the CUDA a tensor-core kernel uses (attention_prefill's, attention_decode's), so that the
 * kernels' exact source (gen.py copies it) runs, and is checked, on a machine without a GPU.
 *
 * Execution. Every CUDA thread of a cluster is a fiber (its own stack, switched in user space) on one
 * OS thread; a fiber runs until it blocks (a barrier, an mbarrier wait, a warp-wide instruction) and
 * the next runnable one takes over, in a fixed order, so a run is deterministic: first come, first run, or
 * (set_schedule) the warps in an order of priorities drawn from a seed, so that one warp runs far ahead of
 * the others, as a GPU's scheduler may let it. When no fiber of the
 * cluster can run and some have not exited, that is a deadlock, reported with every thread's wait:
 * progress decides, never a clock.
 *
 * What is checked, beside the results (driver.cpp):
 * - Happens-before. Each thread, and each mbarrier, carries a vector clock; barriers, arrivals and
 *   waits join them. Every 16-byte chunk of shared memory remembers the write that delivered it (the
 *   TMA phase it landed in, or the thread whose cp.async.wait_group or cp.async.mbarrier.arrive
 *   landed it). ldmatrix and wgmma
 *   check that the reading thread is ordered after that delivery, and that no copy is in flight
 *   into the bytes.
 * - Proxies. A second copy of shared memory, the async proxy's view, changes with TMA writes and with
 *   fence.proxy.async; a wgmma reads through it, and fails where a generic write (cp.async landing,
 *   plain store) was never fenced. A cp.async is fenced by the thread that landed it, or by a reader
 *   whose waits ordered the landing before its fence: then every lane of the reading warp must have
 *   fenced so itself.
 * - Asynchrony. A wgmma's register operands are saved when it is issued and the registers poisoned
 *   (signalling NaNs in accumulators, NaN pairs in A fragments); products run at the wait_group that
 *   covers them; the wait checks the registers still hold the poison, then restores them, and kernel
 *   arithmetic on a poisoned accumulator traps (FE_INVALID is unmasked while threads run). cp.async
 *   lands at its wait_group (or at the thread's cp.async.mbarrier.arrive, which then arrives), a TMA
 *   copy when the mbarrier phase counting its bytes completes. A stage
 *   handed back to the producer (an empty mbarrier's phase completing) is poisoned at once, and a
 *   product still reading it fails.
 * - wgmma.fence: registers a thread changed since its last fence (or, for registers no wgmma used
 *   before, any wgmma without a fence since the last commit or wait) fail the next wgmma using them.
 * - Sources. Where a driver registers its launch's buffers (attention_prefill's and attention_decode's
 *   do), a cp.async that reads its source, or a bulk copy, must read inside one of them: a row copied
 *   from a wrong page number or past a cache fails by name instead of reading whatever lies there.
 * - Prefetches. A box a CTA prefetches into L2 (cp.async.bulk.prefetch.tensor) must be one it copies
 *   afterwards: a prefetch of the wrong tile leaves the results right and only wastes bandwidth.
 * What it cannot see: timing, register limits, a read of an A fragment in flight or a plain copy of an
 * accumulator (they carry poison on: the results fail, unnamed), reads of registers before a wgmma
 * without a wgmma.fence (only writes are seen), plain shared-memory stores' order and authors (a buffer
 * reused before its readers are done shows only in the results, and only under a schedule that runs the
 * writer ahead: the planted bugs that need one name it), the
 * order between clusters (a launch's clusters run one after another, each to its end: a merge run too
 * early and then again once every cluster has filed leaves the later, right, output, where a GPU running
 * them at once may finish them in either order), and a misreading of the hardware shared by a kernel and
 * this emulation. */
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
using std::max;
using std::min;

struct emu_dim3 {
    unsigned x = 0, y = 0, z = 0;
};

namespace emu {

constexpr uint32_t kNone = 0xFFFFFFFFu;

/* ---- source sites: a default argument EMU_HERE is its caller's line, and gen.py's #line directives
 * make that the kernels' own file and line ---- */
struct site {
    const char *file;
    int line;
    site(const char *f, int l) : file(f), line(l) {}
    site(const std::source_location &l) : file(l.file_name()), line((int)l.line()) {}
};
#define EMU_HERE (std::source_location::current())
/* Chains of call sites (kernel line > helper line > ...), interned: 0 is the empty chain. */
uint32_t chain_child(uint32_t parent, site s);
std::string chain_text(uint32_t chain);

/* ---- happens-before ---- */
using vclock = std::vector<uint32_t>; /* by actor: the cluster's threads, then its mbarriers */
inline void join(vclock &into, const vclock &from)
{
    for (size_t i = 0; i < into.size(); i++) into[i] = std::max(into[i], from[i]);
}
struct epoch {
    uint32_t actor = kNone, clock = 0;
};

/* ---- shared memory, 16 bytes at a time ---- */
enum chunk_state : uint8_t { kUnwritten, kValid, kInFlight, kReleased };
struct chunk {
    chunk_state state = kUnwritten;
    uint16_t readers = 0; /* wgmma products in flight that read it */
    epoch gen;            /* the delivery a generic read must be ordered after */
    epoch asy;            /* the same for the async proxy (actor kNone: not yet fenced) */
    bool reader_fenced = false; /* a cp.async landed by one thread and fenced by a reader (asy = gen): every
                                 * reading lane must itself have fenced after its wait ordered the landing */
    uint32_t note = kNone; /* the event that put it in this state */
};
/* An event a diagnostic names: a copy issued, a stage released, a store fenced. */
struct note {
    const char *what;
    uint32_t thread, chain;
    uint32_t bar = kNone, phase = 0; /* mbarrier offset and phase, where one counts the event */
};

struct fiber;
struct cta;
struct cluster;
struct mbarrier;

/* A barrier of a group of threads (a warp, a CTA, a named barrier, a cluster), and the meeting point
 * of the warp-wide instructions, whose last arrival computes for all. */
struct gate {
    std::string name;
    int expected = 0;               /* live participants (named barriers: the count of the call) */
    int arrive_only = 0;            /* bar.arrive arrivals of this generation */
    std::vector<fiber *> arrived;   /* those waiting, in order of arrival */
    int kind = 0;                   /* the instruction of this generation: all must execute the same */
    uint32_t chain = 0;
    vclock vc;                      /* arrivals' clocks, for the barriers that order memory */
    bool hb = false;
    void (*done)(void *, std::vector<fiber *> &) = nullptr; /* the last arrival's work, and its context */
    void *done_ctx = nullptr;
};

/* A wgmma's register operand in one thread: an accumulator or one A fragment (4 registers). */
struct reg_group {
    void *addr;
    int bytes;
    bool acc;
    int n = 0;                     /* the product's N (wgmmas chain on an accumulator only at one shape) */
    int in_flight = 0;             /* products issued and not waited for */
    std::vector<uint32_t> shadow;  /* the true values while in flight */
    std::vector<uint32_t> poison;  /* what the registers hold meanwhile */
    std::vector<uint32_t> baseline; /* their values at the last wgmma.fence or wait that restored them */
    bool has_baseline = false;
    const char *name;
    uint32_t issue_note = kNone;
};

struct cp_copy {
    uint32_t dst;
    const void *src;
    int bytes;
    bool valid;
    uint32_t note;
};

/* A CUDA thread. */
struct fiber {
    void *sp = nullptr;
    unsigned char *stack = nullptr;
    emu_dim3 tid;
    cta *c = nullptr;
    cluster *cl = nullptr;
    uint32_t flat = 0;      /* its actor index in the cluster */
    uint32_t chain = 0;     /* the helpers it is inside (gen.py's site scopes) */
    vclock vc;
    bool done = false;
    /* what it waits for, for the deadlock report */
    gate *wait_gate = nullptr;
    mbarrier *wait_bar = nullptr;
    int wait_parity = 0;
    uint32_t wait_chain = 0;
    /* the last mbarrier it waited on, if no other barrier since: a copy it issues now goes into the
     * region that barrier hands back (the producer's wait on a stage's "empty" barrier) */
    mbarrier *last_acquire = nullptr;
    /* the exchange of a warp-wide instruction */
    uint64_t x[8];
    void *xp[2];
    float xf;
    /* cp.async: open copies, committed groups, landed chunks not yet fenced for the async proxy */
    std::vector<cp_copy> cp_open;
    std::deque<std::vector<cp_copy>> cp_groups;
    std::vector<uint32_t> unfenced;
    vclock proxy_fenced; /* its clock at its last fence.proxy.async (empty: none yet) */
    /* wgmma: register operands, products issued (open) and committed groups, both by product id */
    std::vector<std::unique_ptr<reg_group>> groups;
    std::vector<uint32_t> wg_open;
    std::deque<std::vector<uint32_t>> wg_groups;
    bool fenced_since_sync = false; /* a wgmma.fence since the last commit or wait */
};

/* A wgmma of one warp (16 rows of the warpgroup's 64): what it reads and where it writes. */
struct product {
    uint32_t id;
    bool ss, bf16, accumulate, done = false;
    int n, warp;
    cta *c;
    uint64_t a_desc, b_desc;
    float a_rows[16][16];             /* register A operand (rs), as it was at the issue */
    float *dst[32];                   /* each lane's accumulator shadow */
    reg_group *acc[32], *afrag[32];   /* each lane's operands */
    std::vector<uint32_t> reads;      /* chunks it reads (counted in their readers) */
    uint32_t note;
};

struct mbarrier {
    uint32_t off = 0;
    int count = 0, pending = 0;
    int64_t tx = 0;
    bool tx_seen = false;            /* this phase counted bytes: a "full" barrier */
    unsigned completed = 0;
    uint32_t actor = 0;
    vclock vc, done_vc;              /* this phase's arrivals; the last completed phase's */
    struct copy {
        cta *dst_cta;
        uint32_t dst;
        unsigned char map[128];
        int c[3];
        uint32_t bytes, note;
        const unsigned char *src;    /* a plain bulk copy's source (map unused); null for a TMA copy */
    };
    std::vector<copy> copies;        /* bulk copies counted on this phase, not yet landed */
    std::vector<fiber *> waiters;
    std::vector<uint8_t> guards;     /* chunks this barrier hands back when a phase completes */
    bool guards_any = false;
};

struct cta {
    emu_dim3 block;
    unsigned rank = 0;
    std::vector<unsigned char> smem, view; /* generic bytes; the async proxy's view of them */
    alignas(8) unsigned char scalars[64] = {}; /* static __shared__ scalars, 8 bytes each */
    size_t dynamic = 0;             /* the launch's dynamic shared bytes, at offset 0 */
    std::map<int, std::pair<size_t, size_t>> statics; /* static __shared__ arrays: slot -> (offset, bytes) */
    std::vector<chunk> chunks;
    std::vector<uint32_t> landed_unfenced; /* chunks cp.async landed that no fence has published yet */
    struct prefetched_box {
        const unsigned char *base;    /* the tensor map's global address and box */
        uint32_t box[3];
        int c[3];
        uint32_t note;
    };
    std::vector<prefetched_box> prefetched; /* boxes this CTA prefetched into L2 and has not loaded since */
    std::map<uint32_t, mbarrier> mbarriers;
    std::map<int, gate> named;
    gate block_gate;
    std::vector<gate> warp_gates;
    int live = 0;
    int mbarrier_actors = 0;
    cluster *cl = nullptr;
};

struct cluster {
    std::vector<std::unique_ptr<cta>> ctas;
    std::vector<fiber *> threads;
    gate sync;
    std::vector<note> notes;
    std::deque<product> products;
    std::vector<uint32_t> free_products; /* of those, the ones waited for: reused */
    uint32_t actors = 0, thread_actors = 0;
};

extern fiber *cur; /* the CUDA thread running; null in host code */

/* ---- diagnostics ---- */
/* Stops the launch with a failure: its first line names what broke and where; details follow. */
[[noreturn]] void fail(const std::string &first, const std::string &details = "");
std::string who(const fiber *f);
std::string hex(uint32_t v);
uint32_t add_note(const char *what, uint32_t chain, uint32_t bar = kNone, uint32_t phase = 0);
std::string note_text(const cluster &cl, uint32_t n);
/* The launch's failure, when cudaGetLastError said cudaErrorLaunchFailure: empty otherwise. */
const std::string &last_failure();
void clear_failure();
/* The global buffers a driver gave its launch, named. Once any is registered, a copy into shared
 * memory (cp.async that reads its source, a bulk copy) whose source bytes are not all inside one of
 * them fails, where a GPU would fault or read another allocation unseen. global_buffers_clear()
 * forgets them (none registered: no check). */
void global_buffer(const void *begin, size_t bytes, const char *name);
template <class T> void global_buffer(const std::vector<T> &buf, const char *name)
{
    global_buffer(buf.data(), buf.size() * sizeof(T), name);
}
void global_buffers_clear();

/* ---- scheduling ---- */
void block_current();
void wake(fiber *f);
/* The calling thread arrives at g; when every participant has, the last runs done(ctx, members)
 * and all go on. kind and s say which instruction: every participant must be at the same one. */
void arrive(gate &g, int kind, site s, bool hb, void (*done)(void *, std::vector<fiber *> &), void *ctx);
template <class F> void collective(gate &g, int kind, site s, bool hb, F &&done)
{
    arrive(g, kind, s, hb, [](void *ctx, std::vector<fiber *> &m) { (*static_cast<F *>(ctx))(m); }, &done);
}
enum collective_kind { kSyncwarp = 1, kShfl, kLdmatrix, kMma, kWgmma, kWgmmaWait, kSyncthreads, kNamedSync, kClusterSync };
gate &warp_gate();

/* ---- the instructions gen.py's wrappers call ---- */
void syncthreads(site s);
void syncwarp(site s);
float shfl_xor(float v, int off, unsigned mask, site s);
uint32_t shfl_idx(uint32_t v, int src, unsigned mask, site s);
uint32_t movmatrix_trans(uint32_t v, site s);
void ldmatrix(uint32_t *r, uint32_t addr, bool trans, site s);
void mma_16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1, bool bf16, site s);
void cp_async(uint32_t dst, const void *src, int bytes, bool valid, site s);
void cp_async_commit(site s);
void cp_async_wait(int n, site s);
void cp_async_mbar_arrive(uint32_t at, site s);
void wgmma_fence(site s);
void wgmma_commit(site s);
void wgmma_wait(int n, site s);
void wgmma(bool ss, int n, bool bf16, float *d, const uint32_t *a, uint64_t a_desc, uint64_t b_desc, int accumulate,
           const char *d_name, const char *a_name, site s);
void fence_proxy_async(site s);
void named_sync(int id, int threads, site s);
void named_arrive(int id, int threads, site s);
void cluster_sync(site s);
void mbar_init(uint32_t at, int count, site s);
void mbar_arrive(unsigned rank, uint32_t at, uint32_t expect_bytes, site s);
void mbar_wait(uint32_t at, int parity, site s);
float ld_cluster_f32(unsigned rank, uint32_t at, site s);
void tma_load(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint32_t bar, uint16_t cta_mask, site s);
/* cp.async.bulk.prefetch.tensor into L2: nothing lands and nothing is counted, so a prefetch of the wrong box
 * computes the same outputs and costs only bandwidth. The emulation keeps the CTA's prefetched boxes, each
 * tma_load of the same box by that CTA takes one off, and a launch whose CTA ends with a box it prefetched and
 * never loaded fails: the prefetch asked memory for bytes the kernel did not use. */
void tma_prefetch(const CUtensorMap *map, int c0, int c1, int c2, site s);
void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, site s);
/* cp.async.bulk from shared to global memory: the async proxy's bytes of [src, src + bytes) copied to dst at
 * issue (sizes and addresses checked as bulk_load's). */
void bulk_store(void *dst, uint32_t src, uint32_t bytes, site s);
unsigned long long clock();
unsigned char *dynamic_smem();
/* Slot i (< 8, 8 bytes each) of the CTA's static __shared__ scalars (gen.py numbers them). */
unsigned char *cta_scalar(int i);
/* Static __shared__ array `slot` of this thread's CTA (gen.py numbers them per kernel): `bytes` at an
 * `align`-aligned offset past the dynamic shared bytes, placed by the first thread to ask, so its
 * addresses are shared addresses (mbarriers in it work) and the TMA bounds checks see it. */
unsigned char *cta_static(int slot, size_t bytes, size_t align);
constexpr size_t kStaticSmemReserve = 16 * 1024; /* the static arrays' room beside the dynamic bytes */
/* Whether [at, at + bytes) lies inside one region of c's shared memory: the dynamic bytes, or one static
 * array (an access that runs from one into the next is outside both, as it is past its end on a GPU). */
bool in_shared(const cta &c, size_t at, size_t bytes);

/* ---- launches ---- */
struct launch_shape {
    dim3 grid, block, cluster;
    size_t smem;
    const void *kernel;
};
cudaError_t run(const launch_shape &l, void (*body)(void *), void *ctx);
/* Kernel<<<grid, block, smem, stream>>>(args...), as gen.py rewrites it: emu::launch(Kernel, grid,
 * block, smem, stream)(args...). */
void set_last_error(cudaError_t rc);
template <class K> struct launcher {
    K *kernel;
    launch_shape l;
    template <class... A> void operator()(A &&...a)
    {
        auto body = [&] { kernel(a...); };
        set_last_error(run(l, [](void *ctx) { (*static_cast<decltype(body) *>(ctx))(); }, &body));
    }
};
template <class K>
launcher<K> launch(K *kernel, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t = nullptr)
{
    return {kernel, {grid, block, dim3(1, 1, 1), smem, (const void *)kernel}};
}
/* cudaLaunchKernelEx, as gen.py rewrites it: the cluster dimension attribute is honoured. */
template <class... E, class... A> cudaError_t launch_kernel_ex(const cudaLaunchConfig_t *config, void (*kernel)(E...), A &&...args)
{
    dim3 cl(1, 1, 1);
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs[i].id == cudaLaunchAttributeClusterDimension)
            cl = dim3(config->attrs[i].val.clusterDim.x, config->attrs[i].val.clusterDim.y,
                      config->attrs[i].val.clusterDim.z);
    auto body = [&] { kernel(args...); };
    const cudaError_t rc = run({config->gridDim, config->blockDim, cl, config->dynamicSmemBytes, (const void *)kernel},
                               [](void *ctx) { (*static_cast<decltype(body) *>(ctx))(); }, &body);
    set_last_error(rc);
    return rc;
}

/* kernels/common.cuh's kl::launch_pdl, as gen.py rewrites it: the programmatic launch is a plain one here (a
 * launch runs to its end before the next begins). */
template <class... E, class... A>
cudaError_t launch_pdl(void (*kernel)(E...), dim3 grid, dim3 block, bool, cudaStream_t stream, A &&...args)
{
    const cudaLaunchConfig_t config = {grid, block, 0, stream, nullptr, 0};
    return launch_kernel_ex(&config, kernel, std::forward<A>(args)...);
}

/* ---- the variants: KL_VARIANT registers each file's launcher here (gen.py's output) ---- */
/* the module's launcher type (kernels/<module>/<module>.h), cast, as kernels/variant.h stores it; the
 * module's driver casts it back */
using launch_fn = void (*)(void);
struct variant {
    std::string name, file;
    launch_fn launch;
    bool traced, overlapped;  /* records CTA 0's trace (traced_cta), S_j issued before P_{j-1} V_{j-1} waits */
    std::string mutant_of, expect; /* a planted bug: its variant and the failure it must cause */
    unsigned long long schedule = 0; /* a planted bug's schedule (set_schedule), 0: the round robin */
};
std::vector<variant> &variants();
struct registration {
    registration(const char *name, launch_fn fn, const char *file, const char *override_name, bool traced,
                 bool overlapped, const char *mutant_of, const char *expect, unsigned long long schedule);
};
/* The order in which runnable threads run, for the launches after it: 0, the round robin (first come,
 * first run); any other seed, the warps in an order of priorities drawn from it, each warp running as
 * far ahead of the lower ones as its waits let it, the order drawn again every few thousand switches.
 * Deterministic for a seed, as the round robin is. */
void set_schedule(unsigned long long seed);
/* A driver's --schedule argument: true, with seed set, for a whole number (0 included). */
inline bool parse_schedule(const char *text, unsigned long long &seed)
{
    char *end = nullptr;
    seed = strtoull(text, &end, 10);
    return *text && !*end;
}
/* The schedule a variant runs under: a planted bug's own, else the one the driver was given. */
inline unsigned long long schedule_of(const variant &v, unsigned long long given) { return v.schedule ? v.schedule : given; }

/* Helper scopes: gen.py gives each helper of the module's headers that reaches an
 * emulated instruction a trailing `emu::site emu_at = EMU_HERE` and opens one of these, so that a
 * diagnostic names the kernel's line first. */
struct site_scope {
    uint32_t saved;
    explicit site_scope(site s)
    {
        saved = cur ? cur->chain : 0;
        if (cur) cur->chain = chain_child(cur->chain, s);
    }
    ~site_scope()
    {
        if (cur) cur->chain = saved;
    }
};
} // namespace emu

#define threadIdx (::emu::cur->tid)
#define blockIdx (::emu::cur->c->block)
/* the launch's, the same for every CTA (objects, not macros: cudaLaunchConfig_t has members of
 * these names) */
extern emu_dim3 gridDim, blockDim;

/* The KL_VARIANT line of a variant file registers its launcher with the emulator (gen.py defines
 * EMU_NAME, EMU_TRACED, ... before each file). kernels/variant.h's struct and kl_variant_find (a variant
 * that hands some calls to another: runtime.cpp answers with the emulated one) stay; its KL_VARIANT is
 * replaced. */
#include "kernels/variant.h"
#undef KL_VARIANT
#define KL_VARIANT(mod, vname, fn, ...)                                                                       \
    static ::emu::registration emu_registration_##vname(#vname, (::emu::launch_fn)(fn), __FILE__, EMU_NAME, EMU_TRACED, EMU_OVERLAPPED, \
                                                        EMU_MUTANT_OF, EMU_EXPECT, EMU_SCHEDULE)

/* ---- the CUDA built-ins the kernels call ---- */
inline void __syncthreads(::emu::site s = EMU_HERE) { ::emu::syncthreads(s); }
inline void __syncwarp(unsigned = 0xffffffffu, ::emu::site s = EMU_HERE) { ::emu::syncwarp(s); }
inline float __shfl_xor_sync(unsigned mask, float v, int off, int width = 32, ::emu::site s = EMU_HERE)
{
    if (width != 32) ::emu::fail("__shfl_xor_sync: only whole-warp shuffles are emulated");
    return ::emu::shfl_xor(v, off, mask, s);
}
inline int __shfl_sync(unsigned mask, int v, int src, int width = 32, ::emu::site s = EMU_HERE)
{
    if (width != 32) ::emu::fail("__shfl_sync: only whole-warp shuffles are emulated");
    return (int)::emu::shfl_idx((uint32_t)v, src, mask, s);
}
/* the float form moves the bits (an int's conversion would truncate the value) */
inline float __shfl_sync(unsigned mask, float v, int src, int width = 32, ::emu::site s = EMU_HERE)
{
    if (width != 32) ::emu::fail("__shfl_sync: only whole-warp shuffles are emulated");
    uint32_t u;
    memcpy(&u, &v, 4);
    u = ::emu::shfl_idx(u, src, mask, s);
    memcpy(&v, &u, 4);
    return v;
}
/* the 64-bit form: two shuffles of 32 bits, as the device does it */
inline long __shfl_sync(unsigned mask, long v, int src, int width = 32, ::emu::site s = EMU_HERE)
{
    if (width != 32) ::emu::fail("__shfl_sync: only whole-warp shuffles are emulated");
    const uint64_t u = (uint64_t)v;
    const uint64_t lo = ::emu::shfl_idx((uint32_t)u, src, mask, s);
    const uint64_t hi = ::emu::shfl_idx((uint32_t)(u >> 32), src, mask, s);
    return (long)(lo | hi << 32);
}
/* A whole-warp vote, as the minimum of the lanes' predicates over five shuffles: the same answer, and
 * the same checks (every lane present, one mask) as __shfl_xor_sync. */
inline int __all_sync(unsigned mask, int pred, ::emu::site s = EMU_HERE)
{
    float all = pred ? 1.f : 0.f;
    for (int off = 1; off < 32; off *= 2) all = std::min(all, ::emu::shfl_xor(all, off, mask, s));
    return all != 0.f;
}
inline size_t __cvta_generic_to_shared(const void *p)
{
    return (size_t)((const unsigned char *)p - ::emu::cur->c->smem.data());
}
inline long long clock64() { return (long long)::emu::clock(); }
template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcs(const T *p) { return *p; } /* the evict-first hint has no effect here */
inline float __frcp_rn(float x) { return 1.0f / x; } /* IEEE division: rounded to nearest */
/* cudaGetSymbolAddress(&p, symbol), the runtime's template form (nvcc declares it, a host compiler does not) */
template <class T> inline cudaError_t cudaGetSymbolAddress(void **ptr, const T &symbol)
{
    return ::cudaGetSymbolAddress(ptr, (const void *)&symbol);
}
/* Between CTAs (a split-KV merge): the launch runs one cluster after another on one OS thread, so an
 * earlier CTA's stores are all visible, a fence adds nothing and a read-modify-write is atomic. Not
 * seen: a missing fence or a stale-L1 read (a kernel without them passes here). */
inline void __threadfence() {}
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    const unsigned old = *p;
    *p = old + v;
    return old;
}
template <typename T> inline T __ldcg(const T *p) { return *p; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
/* prmt: byte i of the result is byte (s >> 4 i) & 7 of the eight bytes y:x (x the low four) */
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const uint64_t xy = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)(xy >> (8 * ((s >> (4 * i)) & 7u)) & 0xFFu) << (8 * i);
    return r;
}
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
[[noreturn]] inline void __trap() { ::emu::fail("__trap()"); }
/* the C++ forms of the runtime calls (cuda_runtime.h declares them for nvcc only) */
template <class T> inline cudaError_t cudaFuncSetAttribute(T *func, enum cudaFuncAttribute attr, int value)
{
    return ::cudaFuncSetAttribute((const void *)func, attr, value);
}
template <class T>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, T *func, int block_size, size_t smem)
{
    return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (const void *)func, block_size, smem);
}
