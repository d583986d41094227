/* The emulator's runtime (emulator.h says what it models): fibers and their scheduler,
 * barriers with vector clocks, named barriers and the cluster barrier, launches, and the few CUDA
 * runtime and driver calls the launchers make (the instructions the PTX wrappers call are in
 * instructions.cpp). One OS thread runs a cluster's fibers at a time, so nothing here locks. */
#include "runtime.h"

#include <cstdlib>
#include <deque>
#include <fenv.h>
#include <signal.h>
#include <sys/mman.h>

#include <unordered_map>

emu_dim3 gridDim, blockDim;

namespace emu {

fiber *cur = nullptr;

/* ---- call-site chains ---- */
namespace {
struct chain_node {
    uint32_t parent;
    site s;
};
std::vector<chain_node> &chain_nodes()
{
    static std::vector<chain_node> nodes{{0, site("", 0)}};
    return nodes;
}
/* (parent, file, line) -> node; file names are string literals: their addresses identify them */
struct chain_key {
    uint32_t parent;
    const char *file;
    int line;
    bool operator==(const chain_key &o) const { return parent == o.parent && file == o.file && line == o.line; }
};
struct chain_hash {
    size_t operator()(const chain_key &k) const
    {
        return std::hash<uint64_t>()(((uint64_t)k.parent << 32 | (uint32_t)k.line) ^ (uint64_t)(uintptr_t)k.file * 0x9E3779B97F4A7C15ull);
    }
};
const char *short_name(const char *file)
{
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}
} // namespace

uint32_t chain_child(uint32_t parent, site s)
{
    /* a direct-mapped cache in front of the index: the same few sites come back millions of times */
    struct cached {
        chain_key key;
        uint32_t id;
    };
    static cached cache[4096];
    static std::unordered_map<chain_key, uint32_t, chain_hash> index;
    const chain_key key{parent, s.file, s.line};
    cached &hit = cache[chain_hash()(key) & 4095];
    if (hit.id && hit.key == key) return hit.id;
    auto it = index.find(key);
    uint32_t id;
    if (it != index.end()) id = it->second;
    else {
        chain_nodes().push_back({parent, s});
        id = index[key] = (uint32_t)chain_nodes().size() - 1;
    }
    hit = {key, id};
    return id;
}
std::string chain_text(uint32_t chain)
{
    std::vector<std::string> parts;
    for (uint32_t c = chain; c != 0; c = chain_nodes()[c].parent)
        parts.push_back(std::string(short_name(chain_nodes()[c].s.file)) + ":" +
                        std::to_string(chain_nodes()[c].s.line));
    std::string out;
    for (size_t i = parts.size(); i-- > 0;) out += parts[i] + (i ? " > " : "");
    return out.empty() ? "(host)" : out;
}

/* ---- fibers ---- */
namespace {
#if defined(__x86_64__)
extern "C" void emu_switch(void **save, void *to);
/* Saves the callee-saved registers and the stack pointer of the running context in *save, and
 * resumes the one whose stack pointer is `to` (System V: everything else is the caller's to save). */
asm(R"(
    .text
    .globl emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
#else
#error "the emulator switches fibers with x86-64 code only: add the registers of this architecture"
#endif

constexpr size_t kStackBytes = 256 * 1024, kGuardBytes = 4096;

struct scheduler {
    void *main_sp = nullptr;
    std::deque<fiber *> runq;
    bool failed = false;
    std::string failure;
    void (*body)(void *) = nullptr;
    void *ctx = nullptr;
    std::vector<unsigned char *> free_stacks;
    cudaError_t last_error = cudaSuccess;
    std::string last_failure;
    unsigned long long clock = 0;
    std::unordered_map<const void *, int> smem_limit;
    bool trap_masked = false; /* the invalid-operation trap, masked after an invalid operation not ours */
    uint64_t schedule = 0;    /* 0: first come, first run; else the seed of the warps' priorities */
    uint64_t switches = 0;    /* fibers taken from runq in this cluster's run, for the priorities' epochs */
    uint64_t cluster_salt = 0; /* this cluster's first block, so that each cluster draws its own priorities */
} S;

/* The next fiber to run, taken from runq. First come, first run, unless a schedule is set: then the
 * runnable fiber of the warp with the highest priority, the priorities drawn from the seed anew every
 * kEpoch switches, so that one warp at a time runs as far ahead of the others as its waits let it (a
 * schedule the round robin does not make, and a GPU may). */
fiber *take_runnable()
{
    constexpr uint64_t kEpoch = 4096;
    S.switches++;
    if (S.schedule == 0 || S.runq.size() == 1) {
        fiber *f = S.runq.front();
        S.runq.pop_front();
        return f;
    }
    auto priority = [](const fiber *f) {
        uint64_t x = S.schedule ^ S.cluster_salt ^ (S.switches / kEpoch) * 0x9E3779B97F4A7C15ull ^
                     (uint64_t)(f->flat / 32) << 40;
        x ^= x >> 33, x *= 0xFF51AFD7ED558CCDull, x ^= x >> 33, x *= 0xC4CEB9FE1A85EC53ull, x ^= x >> 33;
        return x;
    };
    size_t best = 0;
    uint64_t top = priority(S.runq[0]);
    for (size_t i = 1; i < S.runq.size(); i++)
        if (const uint64_t p = priority(S.runq[i]); p > top) best = i, top = p;
    fiber *f = S.runq[best];
    S.runq.erase(S.runq.begin() + (long)best);
    return f;
}

void thread_exit(fiber *f);

void fiber_main()
{
    fiber *f = cur;
    S.body(S.ctx);
    thread_exit(f);
    f->done = true;
    block_current();
    abort(); /* never resumed */
}

unsigned char *new_stack()
{
    if (!S.free_stacks.empty()) {
        unsigned char *s = S.free_stacks.back();
        S.free_stacks.pop_back();
        return s;
    }
    void *p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("emulator: mmap of a fiber stack");
        abort();
    }
    mprotect(p, kGuardBytes, PROT_NONE); /* an overflow faults instead of corrupting a neighbour */
    return (unsigned char *)p;
}

void start_fiber(fiber *f)
{
    f->stack = new_stack();
    auto *top = (uint64_t *)(f->stack + kStackBytes);
    *--top = 0;                          /* where fiber_main's return address would be: entry alignment */
    *--top = (uint64_t)(uintptr_t)&fiber_main;
    for (int i = 0; i < 6; i++) *--top = 0; /* rbp rbx r12 r13 r14 r15 */
    f->sp = top;
}
} // namespace

/* The calling fiber stops here; the next runnable one goes on (the scheduler's loop only when none is
 * left: the cluster is done, or deadlocked). */
void block_current()
{
    fiber *f = cur;
    if (S.trap_masked) {
        S.trap_masked = false;
        feclearexcept(FE_ALL_EXCEPT);
        feenableexcept(FE_INVALID);
    }
    if (S.runq.empty()) {
        emu_switch(&f->sp, S.main_sp);
        return;
    }
    fiber *next = take_runnable();
    cur = next;
    emu_switch(&f->sp, next->sp);
}
void wake(fiber *f) { S.runq.push_back(f); }

/* ---- diagnostics ---- */
std::string hex(uint32_t v)
{
    char b[16];
    snprintf(b, sizeof b, "+0x%x", v);
    return b;
}
std::string who(const fiber *f)
{
    char b[96];
    snprintf(b, sizeof b, "thread %u (warp %u lane %u) of CTA (%u,%u,%u)", f->tid.x, f->tid.x / 32, f->tid.x % 32,
             f->c->block.x, f->c->block.y, f->c->block.z);
    return b;
}
uint32_t add_note(const char *what, uint32_t chain, uint32_t bar, uint32_t phase)
{
    cluster &cl = *cur->cl;
    /* events of one thread at one site repeat (a copy loop): one note serves them all */
    if (!cl.notes.empty()) {
        const note &n = cl.notes.back();
        if (n.what == what && n.thread == cur->flat && n.chain == chain && n.bar == bar && n.phase == phase)
            return (uint32_t)cl.notes.size() - 1;
    }
    cl.notes.push_back({what, cur->flat, chain, bar, phase});
    return (uint32_t)cl.notes.size() - 1;
}
std::string note_text(const cluster &cl, uint32_t n)
{
    if (n == kNone || n >= cl.notes.size()) return "(unknown)";
    const note &e = cl.notes[n];
    std::string s = std::string(e.what) + " at " + chain_text(e.chain) + " by " + who(cl.threads[e.thread]);
    if (e.bar != kNone) s += ", on the mbarrier at " + hex(e.bar) + " (its phase " + std::to_string(e.phase) + ")";
    return s;
}
void fail(const std::string &first, const std::string &details)
{
    if (!cur) {
        fprintf(stderr, "emulator: %s\n%s\n", first.c_str(), details.c_str());
        abort();
    }
    if (!S.failed) {
        S.failed = true;
        S.failure = first + (details.empty() ? "" : "\n    " + details) + "\n    (seen by " + who(cur) + ")";
    }
    fiber *f = cur;
    emu_switch(&f->sp, S.main_sp);
    abort(); /* a failed launch never resumes its threads */
}
const std::string &last_failure() { return S.last_failure; }
void clear_failure() { S.last_failure.clear(); }
void set_last_error(cudaError_t rc) { S.last_error = rc; }
unsigned long long clock() { return ++S.clock; }
unsigned char *dynamic_smem() { return cur->c->smem.data(); }
unsigned char *cta_scalar(int i)
{
    if (i < 0 || i >= 8) fail("more than 8 static __shared__ scalars in one kernel: not emulated");
    return cur->c->scalars + 8 * i;
}
unsigned char *cta_static(int slot, size_t bytes, size_t align)
{
    cta &c = *cur->c;
    auto at = c.statics.find(slot);
    if (at == c.statics.end()) {
        const size_t start = (c.smem.size() + align - 1) / align * align, end = start + bytes;
        /* the vectors were reserved at the launch: growing them moves nothing a thread holds */
        if (end > c.smem.capacity())
            fail("static __shared__ arrays past the emulation's " + std::to_string(kStaticSmemReserve) +
                 " bytes for them");
        c.smem.resize(end, 0xFF), c.view.resize(end, 0xFF), c.chunks.resize((end + 15) / 16);
        at = c.statics.emplace(slot, std::make_pair(start, bytes)).first;
    }
    return c.smem.data() + at->second.first;
}
bool in_shared(const cta &c, size_t at, size_t bytes)
{
    if (at + bytes <= c.dynamic) return true;
    for (const auto &[slot, region] : c.statics)
        if (at >= region.first && at + bytes <= region.first + region.second) return true;
    return false;
}

/* ---- gates ---- */
namespace {
void complete(gate &g)
{
    std::vector<fiber *> members;
    members.swap(g.arrived);
    g.arrive_only = 0;
    auto done = g.done;
    void *ctx = g.done_ctx;
    g.done = nullptr, g.done_ctx = nullptr;
    if (done) done(ctx, members);
    if (g.hb)
        for (fiber *m : members) join(m->vc, g.vc);
    for (fiber *m : members)
        if (m != cur) wake(m);
    members.clear();
    if (g.arrived.empty()) g.arrived.swap(members); /* keep the capacity */
}
void start_generation(gate &g, int kind, uint32_t chain, bool hb)
{
    g.kind = kind, g.chain = chain, g.hb = hb;
    if (hb) std::fill(g.vc.begin(), g.vc.end(), 0);
}
bool lanewise(int kind) { return kind == kSyncwarp || kind == kShfl || kind == kLdmatrix || kind == kMma || kind == kWgmma || kind == kWgmmaWait; }
const char *kind_name(int kind)
{
    switch (kind) {
    case kSyncwarp: return "__syncwarp";
    case kShfl: return "__shfl_xor_sync";
    case kLdmatrix: return "ldmatrix";
    case kMma: return "mma.sync";
    case kWgmma: return "wgmma.mma_async";
    case kWgmmaWait: return "wgmma.wait_group";
    case kSyncthreads: return "__syncthreads";
    case kNamedSync: return "bar.sync";
    case kClusterSync: return "barrier.cluster";
    default: return "?";
    }
}
/* A participant exits: the others no longer wait for it. */
void drop(gate &g)
{
    g.expected--;
    if ((!g.arrived.empty() || g.arrive_only) && (int)g.arrived.size() + g.arrive_only >= g.expected) complete(g);
}
} // namespace

void arrive(gate &g, int kind, site s, bool hb, void (*done)(void *, std::vector<fiber *> &), void *ctx)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    if (g.arrived.empty() && g.arrive_only == 0) start_generation(g, kind, chain, hb);
    else if (g.kind != kind || (lanewise(kind) && g.chain != chain))
        fail(std::string(kind_name(kind)) + " at " + chain_text(chain) + " meets " + kind_name(g.kind) + " at " +
                 chain_text(g.chain) + " in " + g.name + ": the threads diverged at a collective instruction");
    if (hb) {
        join(g.vc, f->vc);
        f->vc[f->flat]++;
    }
    g.arrived.push_back(f);
    g.done = done, g.done_ctx = ctx;
    if ((int)g.arrived.size() + g.arrive_only >= g.expected) {
        complete(g);
        return;
    }
    f->wait_gate = &g, f->wait_chain = chain;
    block_current();
    f->wait_gate = nullptr;
}

gate &warp_gate() { return cur->c->warp_gates[cur->tid.x / 32]; }

/* The 32 lanes of a warp-wide instruction, by lane; all must be there. */
void by_lane(std::vector<fiber *> &members, fiber *(&lanes)[32], const char *what)
{
    if (members.size() != 32)
        fail(std::string(what) + " executed by " + std::to_string(members.size()) +
             " lanes: the emulation needs the whole warp (have some lanes exited?)");
    for (fiber *m : members) lanes[m->tid.x % 32] = m;
}

void syncthreads(site s)
{
    collective(cur->c->block_gate, kSyncthreads, s, true, [](std::vector<fiber *> &) {});
    cur->last_acquire = nullptr;
}
void syncwarp(site s) { collective(warp_gate(), kSyncwarp, s, true, [](std::vector<fiber *> &) {}); }
float shfl_xor(float v, int off, unsigned mask, site s)
{
    if (mask != 0xffffffffu) fail("__shfl_xor_sync with a partial mask: not emulated");
    cur->xf = v, cur->x[0] = (uint64_t)off;
    collective(warp_gate(), kShfl, s, false, [](std::vector<fiber *> &m) {
        fiber *lanes[32];
        by_lane(m, lanes, "__shfl_xor_sync");
        for (int l = 0; l < 32; l++) {
            if (lanes[l]->x[0] != lanes[0]->x[0]) fail("__shfl_xor_sync: lanes disagree on the lane mask");
            float r = lanes[(l ^ (int)lanes[l]->x[0]) & 31]->xf;
            memcpy(&lanes[l]->x[1], &r, 4);
        }
    });
    float r;
    memcpy(&r, &cur->x[1], 4);
    return r;
}

/* __shfl_sync: lane l receives the 32-bit value of lane src(l) % 32. */
uint32_t shfl_idx(uint32_t v, int src, unsigned mask, site s)
{
    if (mask != 0xffffffffu) fail("__shfl_sync with a partial mask: not emulated");
    cur->x[0] = v, cur->x[2] = (uint64_t)(src & 31);
    collective(warp_gate(), kShfl, s, false, [](std::vector<fiber *> &m) {
        fiber *lanes[32];
        by_lane(m, lanes, "__shfl_sync");
        for (int l = 0; l < 32; l++) lanes[l]->x[1] = lanes[lanes[l]->x[2]]->x[0];
    });
    return (uint32_t)cur->x[1];
}

/* movmatrix.sync.aligned.m8n8.trans.b16: lane l holds row l / 4, b16 columns 2 (l % 4) (low half) and
 * 2 (l % 4) + 1 of an 8 x 8 matrix M, and receives the same of M^T: T[r][c] = M[c][r], which lane
 * 4 c + r / 2 holds in its half r % 2. */
uint32_t movmatrix_trans(uint32_t v, site s)
{
    cur->x[0] = v;
    collective(warp_gate(), kShfl, s, false, [](std::vector<fiber *> &m) {
        fiber *lanes[32];
        by_lane(m, lanes, "movmatrix.trans");
        uint32_t in[32];
        for (int l = 0; l < 32; l++) in[l] = (uint32_t)lanes[l]->x[0];
        for (int l = 0; l < 32; l++) {
            const int r = l / 4;
            uint32_t out = 0;
            for (int h = 0; h < 2; h++) {
                const int c = 2 * (l % 4) + h;
                out |= ((in[4 * c + r / 2] >> (16 * (r % 2))) & 0xffffu) << (16 * h);
            }
            lanes[l]->x[1] = out;
        }
    });
    return (uint32_t)cur->x[1];
}

/* ---- named barriers and the cluster barrier ---- */
namespace {
gate &named_gate(int id, int threads, uint32_t chain)
{
    cta &c = *cur->c;
    gate &g = c.named[id];
    if (g.name.empty()) {
        g.name = "named barrier " + std::to_string(id);
        g.vc.assign(c.cl->actors, 0);
    }
    if (threads % 32 || threads <= 0) fail("bar.sync/arrive at " + chain_text(chain) + ": thread count not a multiple of 32");
    if (g.arrived.empty() && g.arrive_only == 0) g.expected = threads;
    else if (g.expected != threads)
        fail("named barrier " + std::to_string(id) + " at " + chain_text(chain) + " with " + std::to_string(threads) +
             " threads while its current phase counts " + std::to_string(g.expected));
    return g;
}
} // namespace
void named_sync(int id, int threads, site s)
{
    gate &g = named_gate(id, threads, chain_child(cur->chain, s));
    collective(g, kNamedSync, s, true, [](std::vector<fiber *> &) {});
    cur->last_acquire = nullptr;
}
void named_arrive(int id, int threads, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    gate &g = named_gate(id, threads, chain);
    if (g.arrived.empty() && g.arrive_only == 0) start_generation(g, kNamedSync, chain, true);
    join(g.vc, f->vc);
    f->vc[f->flat]++;
    g.arrive_only++;
    if ((int)g.arrived.size() + g.arrive_only >= g.expected) complete(g);
}
void cluster_sync(site s)
{
    collective(cur->cl->sync, kClusterSync, s, true, [](std::vector<fiber *> &) {});
    cur->last_acquire = nullptr;
}

/* ---- thread exit, deadlock, launches ---- */
namespace {
void thread_exit(fiber *f)
{
    if (!f->wg_open.empty() || !f->wg_groups.empty()) fail("the thread exits with wgmma products it never waited for");
    /* copies never waited for land anyway (the hardware completes them) */
    if (!f->cp_open.empty()) f->cp_groups.push_back(std::move(f->cp_open));
    for (auto &grp : f->cp_groups)
        for (const cp_copy &cp : grp) land(f, cp);
    f->cp_groups.clear();
    cta &c = *f->c;
    c.live--;
    drop(c.block_gate);
    drop(c.warp_gates[f->tid.x / 32]);
    drop(f->cl->sync);
}

std::string wait_text(const fiber *f)
{
    if (f->wait_gate) {
        const gate &g = *f->wait_gate;
        return std::string(kind_name(g.kind)) + " at " + chain_text(f->wait_chain) + " (" + g.name + ": " +
               std::to_string(g.arrived.size() + g.arrive_only) + " of " + std::to_string(g.expected) + " arrived)";
    }
    if (f->wait_bar) {
        const mbarrier &b = *f->wait_bar;
        return "mbarrier wait at " + chain_text(f->wait_chain) + " on the mbarrier at " + hex(b.off) + " for parity " +
               std::to_string(f->wait_parity) + " (phase " + std::to_string(b.completed) + ": " +
               std::to_string(b.pending) + " of " + std::to_string(b.count) + " arrivals missing, " +
               std::to_string(b.tx) + " bytes announced, " + std::to_string(b.copies.size()) + " copies pending)";
    }
    return "not blocked";
}

std::string deadlock_report(cluster &cl)
{
    std::string out;
    int groups = 0;
    for (size_t i = 0; i < cl.threads.size();) {
        const fiber *f = cl.threads[i];
        if (f->done) {
            i++;
            continue;
        }
        const std::string w = wait_text(f);
        size_t j = i + 1;
        while (j < cl.threads.size() && !cl.threads[j]->done && cl.threads[j]->c == f->c && wait_text(cl.threads[j]) == w) j++;
        if (groups++ < 24) {
            char head[96];
            snprintf(head, sizeof head, "CTA (%u,%u,%u) threads %u-%u: ", f->c->block.x, f->c->block.y, f->c->block.z,
                     f->tid.x, cl.threads[j - 1]->tid.x);
            out += "\n    " + std::string(head) + w;
        }
        i = j;
    }
    if (groups > 24) out += "\n    ... " + std::to_string(groups - 24) + " more groups";
    return out;
}

void free_cluster(cluster &cl, std::vector<fiber> &fibers)
{
    for (fiber &f : fibers) S.free_stacks.push_back(f.stack);
    (void)cl;
}
} // namespace

namespace {
/* Kernel code that computes with an accumulator still in flight computes with its poison, a
 * signalling NaN: FE_INVALID, trapped while the threads run. */
void on_invalid(int, siginfo_t *, void *uctx)
{
    feclearexcept(FE_ALL_EXCEPT);
    auto *uc = (ucontext_t *)uctx;
    if (!cur || !uc->uc_mcontext.fpregs) {
        signal(SIGFPE, SIG_DFL);
        raise(SIGFPE);
        return;
    }
    /* the poison's payload in an SSE register names the accumulator it was read from */
    fiber *f = cur;
    const reg_group *read = nullptr;
    for (int r = 0; r < 16 && !read; r++)
        for (int e = 0; e < 4 && !read; e++) {
            const uint32_t v = uc->uc_mcontext.fpregs->_xmm[r].element[e];
            const size_t index = (v & ~kAccPoisonMask) - 1;
            if ((v & kAccPoisonMask) == kAccPoison && index < f->groups.size()) read = f->groups[index].get();
        }
    if (!read) {
        /* an invalid operation of the kernel's own (inf - inf, a NaN compared): not this check's to judge.
         * It runs on with the exception masked; the trap comes back at the next switch of threads. */
        uc->uc_mcontext.fpregs->mxcsr |= 0x80; /* IM: invalid masked */
        S.trap_masked = true;
        return;
    }
    const std::string where = f->chain ? "(in " + chain_text(f->chain) + ", the innermost helper the thread was in)"
                                       : std::string("(in the kernel's own code, outside the helpers)");
    fail(operand_name(*read) + " of the wgmma " + note_text(*f->cl, read->issue_note) +
             " read before its wait: the thread computed with its poison (a signalling NaN)",
         where);
}
struct invalid_trap {
    invalid_trap()
    {
        struct sigaction sa = {};
        sa.sa_sigaction = on_invalid;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER; /* the handler never returns: it leaves the failed thread */
        sigaction(SIGFPE, &sa, nullptr);
        feclearexcept(FE_ALL_EXCEPT);
        feenableexcept(FE_INVALID);
    }
    ~invalid_trap()
    {
        fedisableexcept(FE_INVALID);
        feclearexcept(FE_ALL_EXCEPT);
    }
};
} // namespace

cudaError_t run(const launch_shape &l, void (*body)(void *), void *ctx)
{
    const unsigned threads = l.block.x;
    if (l.block.y != 1 || l.block.z != 1 || threads == 0 || threads > 1024 || threads % 32) {
        fprintf(stderr, "emulator: block (%u,%u,%u): only 1-D blocks of whole warps are emulated\n", l.block.x, l.block.y,
                l.block.z);
        return cudaErrorInvalidConfiguration;
    }
    if (l.grid.x == 0 || l.grid.y == 0 || l.grid.z == 0 || l.grid.y > 65535 || l.grid.z > 65535)
        return cudaErrorInvalidConfiguration;
    auto limit = S.smem_limit.find(l.kernel);
    if (l.smem > (size_t)(limit == S.smem_limit.end() ? 48 * 1024 : limit->second)) return cudaErrorInvalidValue;
    const dim3 cd = l.cluster;
    if (cd.x == 0 || cd.y == 0 || cd.z == 0 || l.grid.x % cd.x || l.grid.y % cd.y || l.grid.z % cd.z ||
        cd.x * cd.y * cd.z > 8)
        return cudaErrorInvalidValue;
    gridDim = {l.grid.x, l.grid.y, l.grid.z};
    blockDim = {threads, 1, 1};
    S.body = body, S.ctx = ctx;
    invalid_trap trap;
    const unsigned per = cd.x * cd.y * cd.z;
    for (unsigned z0 = 0; z0 < l.grid.z; z0 += cd.z)
        for (unsigned y0 = 0; y0 < l.grid.y; y0 += cd.y)
            for (unsigned x0 = 0; x0 < l.grid.x; x0 += cd.x) {
                cluster cl;
                cl.thread_actors = per * threads;
                cl.actors = cl.thread_actors + per * 64;
                cl.sync.name = "the cluster barrier", cl.sync.expected = (int)(per * threads);
                cl.sync.vc.assign(cl.actors, 0);
                std::vector<fiber> fibers(per * threads);
                for (unsigned r = 0; r < per; r++) {
                    cl.ctas.push_back(std::make_unique<cta>());
                    cta &c = *cl.ctas.back();
                    c.block = {x0 + r % cd.x, y0 + r / cd.x % cd.y, z0 + r / (cd.x * cd.y)};
                    c.rank = r, c.cl = &cl, c.live = (int)threads;
                    /* garbage that reads as NaN in bf16 and fp16: a tile read before it is written shows */
                    c.smem.assign(l.smem, 0xFF);
                    c.view.assign(l.smem, 0xFF);
                    c.chunks.assign((l.smem + 15) / 16, chunk{});
                    c.dynamic = l.smem;
                    c.smem.reserve(l.smem + kStaticSmemReserve), c.view.reserve(l.smem + kStaticSmemReserve);
                    c.chunks.reserve((l.smem + kStaticSmemReserve + 15) / 16);
                    c.block_gate.name = "__syncthreads", c.block_gate.expected = (int)threads;
                    c.block_gate.vc.assign(cl.actors, 0);
                    c.warp_gates.resize(threads / 32);
                    for (unsigned w = 0; w < threads / 32; w++) {
                        c.warp_gates[w].name = "warp " + std::to_string(w);
                        c.warp_gates[w].expected = 32;
                        c.warp_gates[w].vc.assign(cl.actors, 0);
                    }
                    for (unsigned t = 0; t < threads; t++) {
                        fiber &f = fibers[r * threads + t];
                        f.tid = {t, 0, 0}, f.c = &c, f.cl = &cl, f.flat = r * threads + t;
                        f.vc.assign(cl.actors, 0);
                        f.vc[f.flat] = 1;
                        start_fiber(&f);
                        cl.threads.push_back(&f);
                    }
                }
                S.failed = false, S.failure.clear();
                const emu_dim3 first = cl.ctas[0]->block;
                S.switches = 0;
                S.cluster_salt = ((uint64_t)first.z << 42 ^ (uint64_t)first.y << 21 ^ first.x) * 0xD6E8FEB86659FD93ull;
                S.runq.assign(cl.threads.begin(), cl.threads.end());
                while (!S.failed && !S.runq.empty()) { /* returns when no fiber can run, or one failed */
                    fiber *f = take_runnable();
                    cur = f;
                    emu_switch(&S.main_sp, f->sp);
                }
                cur = nullptr;
                if (!S.failed) {
                    int blocked = 0;
                    for (fiber *f : cl.threads) blocked += !f->done;
                    if (blocked) {
                        S.failed = true;
                        S.failure = "deadlock: every live thread of the cluster is blocked (" + std::to_string(blocked) +
                                    " threads)" + deadlock_report(cl);
                    }
                }
                for (auto &c : cl.ctas)
                    if (!S.failed && !c->prefetched.empty()) {
                        const auto &b = c->prefetched[0];
                        auto three = [](auto x, auto y, auto z) {
                            return "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
                        };
                        S.failed = true;
                        S.failure = "a prefetched box was never loaded: CTA " + three(c->block.x, c->block.y, c->block.z) +
                                    " prefetched " + std::to_string(c->prefetched.size()) +
                                    " boxes into L2 that it did not copy afterwards; the first, at " +
                                    three(b.c[0], b.c[1], b.c[2]) + ": " + note_text(cl, b.note);
                    }
                for (auto &c : cl.ctas)
                    for (auto &[at, b] : c->mbarriers)
                        if (!S.failed && !b.copies.empty()) {
                            S.failed = true;
                            S.failure = "a TMA copy never landed: the phase of the mbarrier at " + hex(at) +
                                        " that counts it never completed\n    the copy: " + note_text(cl, b.copies[0].note);
                        }
                free_cluster(cl, fibers);
                if (S.failed) {
                    char where[64];
                    snprintf(where, sizeof where, " [launch grid (%u,%u,%u) x %u threads]", l.grid.x, l.grid.y, l.grid.z,
                             threads);
                    S.last_failure = S.failure + where;
                    return cudaErrorLaunchFailure;
                }
            }
    return cudaSuccess;
}

/* ---- the variants ---- */
std::vector<variant> &variants()
{
    static std::vector<variant> all;
    return all;
}
registration::registration(const char *name, launch_fn fn, const char *file, const char *override_name, bool traced,
                           bool overlapped, const char *mutant_of, const char *expect, unsigned long long schedule)
{
    variants().push_back({override_name ? override_name : name, file, fn, traced, overlapped, mutant_of ? mutant_of : "",
                          expect ? expect : "", schedule});
}
void set_schedule(unsigned long long seed) { S.schedule = seed; }
} // namespace emu

/* kernels/variant.h's lookup, for a variant whose launcher hands some calls to another: the emulated
 * variant of that name (never a planted bug), or NULL where the emulation does not build it. */
extern "C" const struct kl_variant *kl_variant_find(const char *module, const char *name)
{
    static std::deque<kl_variant> found; /* one each, at stable addresses */
    for (const kl_variant &k : found)
        if (strcmp(k.name, name) == 0) return &k;
    for (const emu::variant &v : emu::variants())
        if (v.name == name && v.mutant_of.empty()) {
            found.push_back({module, v.name.c_str(), (kl_fnptr)v.launch, v.file.c_str(), 0, 90, "", 0, 0, 0});
            return &found.back();
        }
    return nullptr;
}

/* ---- the CUDA runtime and driver calls the launchers make, answered for an emulated device: an sm_90
 * with 3 SMs (a persistent grid then walks several work tiles per CTA), or KL_EMU_SMS of them (1 to
 * 1024: a planner that splits by the SM count then makes as many pieces as on a real GPU), and an
 * H100's shared memory ---- */
namespace {
constexpr int kMaxSmem = 227 * 1024;

int emulated_sms()
{
    const char *s = getenv("KL_EMU_SMS");
    const int n = s ? atoi(s) : 0;
    return n >= 1 && n <= 1024 ? n : 3;
}

CUresult encode_tiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank, void *addr, const cuuint64_t *dims,
                      const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *element_strides,
                      CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion,
                      CUtensorMapFloatOOBfill)
{
    /* the driver's rules where they bite, and what this emulation supports */
    const uint32_t bytes = dtype == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2;
    if (rank != 3 ||
        (dtype != CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 && dtype != CU_TENSOR_MAP_DATA_TYPE_FLOAT16 &&
         dtype != CU_TENSOR_MAP_DATA_TYPE_UINT8) ||
        interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || swizzle != CU_TENSOR_MAP_SWIZZLE_128B)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((uintptr_t)addr % 16) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 2; i++)
        if (strides[i] % 16 || strides[i] >= (1ull << 40)) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 3; i++) {
        if (box[i] < 1 || box[i] > 256 || element_strides[i] != 1 || dims[i] < 1 || dims[i] > (1ull << 32))
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (box[0] * bytes > 128) return CUDA_ERROR_INVALID_VALUE; /* the inner box within the 128-byte swizzle span */
    emu::emu_map m{emu::kMapMagic, (const unsigned char *)addr, {dims[0], dims[1], dims[2]}, {strides[0], strides[1]},
                   {box[0], box[1], box[2]}, bytes};
    static_assert(sizeof m <= sizeof(CUtensorMap), "fits the opaque map");
    memset(map, 0, sizeof *map);
    memcpy(map, &m, sizeof m);
    return CUDA_SUCCESS;
}
} // namespace

extern "C" {
cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int)
{
    switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = emulated_sms(); return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kMaxSmem; return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
}
/* As many CTAs as the shared memory (dynamic, plus a kilobyte) and 2048 threads allow, at least one. */
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, const void *, int block_size,
                                                                   size_t smem, unsigned int)
{
    const int by_smem = (int)(kMaxSmem / (smem + 1024)), by_threads = block_size > 0 ? 2048 / block_size : 1;
    *blocks = std::max(1, std::min(by_smem, by_threads));
    return cudaSuccess;
}
/* The emulation runs one cluster after another, with no residency limit, but answers as a GPU of
 * emulated_sms() SMs in one GPC would: the whole clusters of the launch's size that its SMs hold at
 * once (the CTAs an SM holds by the count above), at least one. So a planner that fits its grid to one
 * wave of clusters takes its smaller-wave paths on the emulated problems, as it does on a real GPU
 * whose clusters must each fit one GPC. */
cudaError_t cudaOccupancyMaxActiveClusters(int *clusters, const void *func, const cudaLaunchConfig_t *cfg)
{
    unsigned size = 1;
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension)
            size = cfg->attrs[i].val.clusterDim.x * cfg->attrs[i].val.clusterDim.y * cfg->attrs[i].val.clusterDim.z;
    int per_sm = 1;
    const int threads = (int)(cfg->blockDim.x * cfg->blockDim.y * cfg->blockDim.z);
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&per_sm, func, threads, cfg->dynamicSmemBytes, 0);
    *clusters = std::max(1, emulated_sms() * per_sm / (int)std::max(1u, size));
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func, int block_size, size_t smem)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block_size, smem, 0);
}
/* Memory is the host's and every launch has run to its end when it returns: the stream calls a launcher
 * makes around its kernel are plain copies, and synchronizing has nothing to wait for. */
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t)
{
    memset(ptr, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind, cudaStream_t)
{
    memcpy(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
/* A __device__ variable is a host one here: its address is itself. */
cudaError_t cudaGetSymbolAddress(void **ptr, const void *symbol)
{
    *ptr = const_cast<void *>(symbol);
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || value > kMaxSmem) return cudaErrorInvalidValue;
    emu::S.smem_limit[func] = value;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void)
{
    const cudaError_t rc = emu::S.last_error;
    emu::S.last_error = cudaSuccess;
    return rc;
}
cudaError_t cudaPeekAtLastError(void) { return emu::S.last_error; }
const char *cudaGetErrorName(cudaError_t rc)
{
    switch (rc) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "a CUDA error";
    }
}
const char *cudaGetErrorString(cudaError_t rc) { return cudaGetErrorName(rc); }
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int, unsigned long long,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    if (strcmp(symbol, "cuTensorMapEncodeTiled") != 0) {
        if (status) *status = cudaDriverEntryPointSymbolNotFound;
        *fn = nullptr;
        return cudaSuccess;
    }
    *fn = (void *)&encode_tiled;
    if (status) *status = cudaDriverEntryPointSuccess;
    return cudaSuccess;
}
}
