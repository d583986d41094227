/* The emulator's runtime (emulator.h says what it models): fibers and their scheduler, barriers and
 * mbarriers with vector clocks, the shared-memory bookkeeping, the instructions the PTX wrappers call,
 * launches, and the few CUDA runtime and driver calls the launchers make. One OS thread runs a
 * cluster's fibers at a time, so nothing here locks. */
#include "emulator.h"

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
} S;

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
    fiber *next = S.runq.front();
    S.runq.pop_front();
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

namespace {
/* The 32 lanes of a warp-wide instruction, by lane; all must be there. */
void by_lane(std::vector<fiber *> &members, fiber *(&lanes)[32], const char *what)
{
    if (members.size() != 32)
        fail(std::string(what) + " executed by " + std::to_string(members.size()) +
             " lanes: the emulation needs the whole warp (have some lanes exited?)");
    for (fiber *m : members) lanes[m->tid.x % 32] = m;
}
} // namespace

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

/* ---- shared-memory bookkeeping ---- */
namespace {
float half_table[65536];
struct init_tables {
    init_tables()
    {
        for (uint32_t h = 0; h < 65536; h++) {
            __half v;
            const uint16_t bits = (uint16_t)h;
            memcpy(&v, &bits, 2);
            half_table[h] = __half2float(v);
        }
    }
} tables;
inline float to_float(uint16_t h, bool bf16)
{
    if (bf16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return half_table[h];
}
inline uint16_t load16(const cta &c, uint32_t addr)
{
    uint16_t h;
    memcpy(&h, c.smem.data() + addr, 2);
    return h;
}

/* Who wrote the chunk, in words. */
std::string writer_of(const cta &c, uint32_t ch) { return note_text(*c.cl, c.chunks[ch].note); }

/* A generic read (ldmatrix) of chunk ch by f: delivered, no copy in flight into it, and f ordered after
 * the delivery. */
void check_generic_read(fiber *f, uint32_t ch, uint32_t chain, const char *what)
{
    const cta &c = *f->c;
    const chunk &k = c.chunks[ch];
    if (k.state == kValid && f->vc[k.gen.actor] >= k.gen.clock) return;
    const std::string at = std::string(what) + " at " + chain_text(chain) + " reads shared memory " + hex(ch * 16);
    if (k.state == kInFlight) fail(at + " while a copy into it is in flight", "the copy: " + writer_of(c, ch));
    if (k.state == kUnwritten) fail(at + ", which nothing wrote");
    if (k.state == kReleased) fail(at + " after its stage was handed back", "the release: " + writer_of(c, ch));
    fail(at + " that " + f->c->cl->notes[k.note].what + " delivered, with nothing ordering that delivery before the read",
             "the write: " + writer_of(c, ch) + "\n    (the reader must wait for it: cp.async.wait_group and a barrier, "
             "or the mbarrier phase that counts it)");
}

/* A wgmma operand's chunks, read through the async proxy by the lanes of a warp. */
void check_async_read(fiber *(&lanes)[32], const std::vector<uint32_t> &chunks, size_t from, size_t to,
                      const char *operand, uint32_t chain)
{
    const cta &c = *lanes[0]->c;
    size_t empty = 0;
    uint32_t first_empty = kNone;
    epoch last;
    for (size_t i = from; i < to; i++) {
        const uint32_t ch = chunks[i];
        const chunk &k = c.chunks[ch];
        auto at = [&] { return std::string("wgmma at ") + chain_text(chain) + " reads " + operand + " bytes " + hex(ch * 16); };
        if (k.state == kInFlight) fail(at() + " while a copy into them is in flight", "the copy: " + writer_of(c, ch));
        const bool same = memcmp(c.smem.data() + ch * 16, c.view.data() + ch * 16, 16) == 0;
        if ((k.state == kValid && k.asy.actor == kNone) || !same) {
            if (k.state == kValid && k.asy.actor == kNone)
                fail(at() + " that a cp.async wrote through the generic proxy with no fence.proxy.async before the read",
                     "the write: " + writer_of(c, ch) + "\n    (the writing thread must fence.proxy.async after its "
                     "cp.async.wait_group and before the barrier that publishes the bytes)");
            fail(at() + " that a plain store changed with no fence.proxy.async after it",
                 "(the storing thread must fence.proxy.async before the barrier or arrival that publishes the bytes)");
        }
        if (k.state == kUnwritten || k.state == kReleased) {
            if (!empty++) first_empty = ch;
            continue;
        }
        if (k.asy.actor == last.actor && k.asy.clock == last.clock) continue;
        last = k.asy;
        for (fiber *l : lanes)
            if (l->vc[k.asy.actor] < k.asy.clock)
                fail(at() + " that " + c.cl->notes[k.note].what + " delivered, which " + who(l) +
                         " has not waited for",
                     "the delivery: " + writer_of(c, ch) + "\n    (no mbarrier wait or barrier orders it before this read)");
    }
    if (to > from && empty == to - from) {
        const chunk &k = c.chunks[first_empty];
        fail(std::string("wgmma at ") + chain_text(chain) + " reads its " + operand + " from shared memory " +
                 hex(chunks[from] * 16) + ".. that holds no delivered data",
             k.state == kReleased ? "handed back to the producer: " + writer_of(c, first_empty)
                                  : std::string("never written"));
    }
}

/* The in-flight product that reads chunk ch, for a message. */
std::string reader_of(const cta &c, uint32_t ch)
{
    for (const product &p : c.cl->products)
        if (!p.done && p.c == &c && std::find(p.reads.begin(), p.reads.end(), ch) != p.reads.end())
            return "the wgmma " + note_text(*c.cl, p.note);
    return "(unknown)";
}

/* Chunk ch of c is about to be written by a copy (note n): nothing may read it in flight, and no other
 * copy may be writing it. The copy's issuer learns which barrier hands the region back. */
void start_copy_into(cta &c, uint32_t ch, uint32_t n, const char *what, uint32_t chain)
{
    chunk &k = c.chunks[ch];
    if (k.readers)
        fail(std::string(what) + " at " + chain_text(chain) + " into shared memory " + hex(ch * 16) +
                 " while a wgmma in flight reads it",
             "the reader: " + reader_of(c, ch));
    if (k.state == kInFlight)
        fail(std::string(what) + " at " + chain_text(chain) + " into shared memory " + hex(ch * 16) +
                 " while another copy into it is in flight",
             "the other copy: " + writer_of(c, ch));
    if (cur->last_acquire) {
        auto it = c.mbarriers.find(cur->last_acquire->off);
        if (it != c.mbarriers.end()) it->second.guards[ch] = 1, it->second.guards_any = true;
    }
    k.state = kInFlight, k.note = n;
}
} // namespace

/* ---- ldmatrix and mma.sync ---- */
void ldmatrix(uint32_t *r, uint32_t addr, bool trans, site s)
{
    cur->x[0] = addr, cur->xp[0] = r, cur->x[1] = chain_child(cur->chain, s);
    collective(warp_gate(), kLdmatrix, s, false, [trans](std::vector<fiber *> &m) {
        fiber *lanes[32];
        by_lane(m, lanes, "ldmatrix");
        const cta &c = *lanes[0]->c;
        for (fiber *l : lanes) {
            const uint32_t a = (uint32_t)l->x[0];
            if (a % 16 || a + 16 > c.smem.size())
                fail("ldmatrix at " + chain_text((uint32_t)l->x[1]) + ": row address " + hex(a) +
                     " not 16-byte aligned or outside shared memory");
            check_generic_read(l, a / 16, (uint32_t)l->x[1], "ldmatrix");
        }
        /* lane l gave row l % 8 of matrix l / 8; register i of lane l gets matrix i's (row l / 4, cols
         * 2 (l % 4), +1), or with .trans (rows 2 (l % 4), +1; col l / 4) */
        for (int l = 0; l < 32; l++) {
            auto *out = (uint32_t *)lanes[l]->xp[0];
            for (int i = 0; i < 4; i++) {
                uint16_t e[2];
                for (int k = 0; k < 2; k++) {
                    if (!trans) e[k] = load16(c, (uint32_t)lanes[8 * i + l / 4]->x[0] + 2 * (2 * (l % 4) + k));
                    else e[k] = load16(c, (uint32_t)lanes[8 * i + 2 * (l % 4) + k]->x[0] + 2 * (l / 4));
                }
                out[i] = e[0] | (uint32_t)e[1] << 16;
            }
        }
    });
}

namespace {
/* The warp's 16 x 16 A operand of an m16n8k16 product from every lane's fragment (PTX ISA table). */
void gather_a(const uint32_t (*frag)[4], bool bf16, float (&A)[16][16])
{
    auto lo = [&](uint32_t v) { return to_float((uint16_t)(v & 0xffff), bf16); };
    auto hi = [&](uint32_t v) { return to_float((uint16_t)(v >> 16), bf16); };
    for (int ln = 0; ln < 32; ln++) {
        const int g = ln / 4, t = ln % 4;
        const uint32_t *a = frag[ln];
        A[g][2 * t] = lo(a[0]), A[g][2 * t + 1] = hi(a[0]);
        A[g + 8][2 * t] = lo(a[1]), A[g + 8][2 * t + 1] = hi(a[1]);
        A[g][2 * t + 8] = lo(a[2]), A[g][2 * t + 9] = hi(a[2]);
        A[g + 8][2 * t + 8] = lo(a[3]), A[g + 8][2 * t + 9] = hi(a[3]);
    }
}
} // namespace

void mma_16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1, bool bf16, site s)
{
    for (int i = 0; i < 4; i++) cur->x[i] = a[i];
    cur->x[4] = b0, cur->x[5] = b1, cur->xp[0] = d;
    collective(warp_gate(), kMma, s, false, [bf16](std::vector<fiber *> &m) {
        fiber *lanes[32];
        by_lane(m, lanes, "mma.sync");
        uint32_t frag[32][4];
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) frag[l][i] = (uint32_t)lanes[l]->x[i];
        float A[16][16], B[16][8];
        gather_a(frag, bf16, A);
        for (int ln = 0; ln < 32; ln++) {
            const int g = ln / 4, t = ln % 4;
            const uint32_t v0 = (uint32_t)lanes[ln]->x[4], v1 = (uint32_t)lanes[ln]->x[5];
            B[2 * t][g] = to_float((uint16_t)(v0 & 0xffff), bf16), B[2 * t + 1][g] = to_float((uint16_t)(v0 >> 16), bf16);
            B[2 * t + 8][g] = to_float((uint16_t)(v1 & 0xffff), bf16), B[2 * t + 9][g] = to_float((uint16_t)(v1 >> 16), bf16);
        }
        /* D += A B, each element accumulated in k order */
        float D[16][8];
        for (int l = 0; l < 32; l++) {
            const auto *d = (const float *)lanes[l]->xp[0];
            const int g = l / 4, t = l % 4;
            D[g][2 * t] = d[0], D[g][2 * t + 1] = d[1], D[g + 8][2 * t] = d[2], D[g + 8][2 * t + 1] = d[3];
        }
        for (int k = 0; k < 16; k++)
            for (int r = 0; r < 16; r++)
                for (int c = 0; c < 8; c++) D[r][c] += A[r][k] * B[k][c];
        for (int l = 0; l < 32; l++) {
            auto *d = (float *)lanes[l]->xp[0];
            const int g = l / 4, t = l % 4;
            d[0] = D[g][2 * t], d[1] = D[g][2 * t + 1], d[2] = D[g + 8][2 * t], d[3] = D[g + 8][2 * t + 1];
        }
    });
}

/* ---- cp.async ---- */
void cp_async(uint32_t dst, const void *src, int bytes, bool valid, site s)
{
    fiber *f = cur;
    cta &c = *f->c;
    const uint32_t chain = chain_child(f->chain, s);
    if (dst % bytes || dst + bytes > c.smem.size())
        fail("cp.async at " + chain_text(chain) + ": destination " + hex(dst) + " misaligned or outside shared memory");
    const uint32_t n = add_note("the cp.async", chain);
    /* the 4-byte copies carry page numbers, read by plain loads the emulation cannot see: only
     * 16-byte copies (tiles) are tracked */
    if (bytes == 16) start_copy_into(c, dst / 16, n, "cp.async", chain);
    f->cp_open.push_back({dst, src, bytes, valid, n});
}
void cp_async_commit(site)
{
    cur->cp_groups.push_back(std::move(cur->cp_open));
    cur->cp_open.clear();
}
namespace {
void land(fiber *f, const cp_copy &cp)
{
    cta &c = *f->c;
    if (cp.valid) memcpy(c.smem.data() + cp.dst, cp.src, cp.bytes);
    else memset(c.smem.data() + cp.dst, 0, cp.bytes);
    if (cp.bytes != 16) return;
    chunk &k = c.chunks[cp.dst / 16];
    k.state = kValid, k.gen = {f->flat, f->vc[f->flat]}, k.asy = {}, k.note = cp.note;
    f->unfenced.push_back(cp.dst / 16);
}
} // namespace
void cp_async_wait(int n, site)
{
    fiber *f = cur;
    while ((int)f->cp_groups.size() > n) {
        for (const cp_copy &cp : f->cp_groups.front()) land(f, cp);
        f->cp_groups.pop_front();
    }
}

/* ---- fence.proxy.async ---- */
void fence_proxy_async(site s)
{
    fiber *f = cur;
    cta &c = *f->c;
    const epoch now{f->flat, f->vc[f->flat]};
    for (uint32_t ch : f->unfenced) {
        chunk &k = c.chunks[ch];
        if (k.state != kValid || k.asy.actor != kNone) continue;
        k.asy = now;
        memcpy(c.view.data() + ch * 16, c.smem.data() + ch * 16, 16);
    }
    f->unfenced.clear();
    /* Plain stores are invisible to the emulation until they show as generic bytes that differ from
     * the async proxy's view: this fence publishes them (any thread's: a store's author is unknown). */
    uint32_t n = kNone;
    const size_t size = c.smem.size();
    for (size_t blk = 0; blk < size; blk += 1024) {
        const size_t len = std::min<size_t>(1024, size - blk);
        if (memcmp(c.smem.data() + blk, c.view.data() + blk, len) == 0) continue;
        for (size_t ch = blk / 16; ch * 16 < blk + len; ch++) {
            chunk &k = c.chunks[ch];
            const size_t bytes = std::min<size_t>(16, size - ch * 16);
            if (memcmp(c.smem.data() + ch * 16, c.view.data() + ch * 16, bytes) == 0) continue;
            if (k.state == kInFlight || (k.state == kValid && k.asy.actor == kNone)) continue; /* another's cp.async */
            if (n == kNone) n = add_note("a plain store fenced", chain_child(f->chain, s));
            memcpy(c.view.data() + ch * 16, c.smem.data() + ch * 16, bytes);
            k.state = kValid, k.gen = k.asy = now, k.note = n;
        }
    }
}

/* ---- wgmma ---- */
namespace {
/* a signalling NaN (arithmetic on it traps, and would change its bits), the low bits naming the group */
constexpr uint32_t kAccPoison = 0x7FA00000u, kAccPoisonMask = 0xFFF00000u;
constexpr uint32_t kAPoison = 0x7FB57FB5u;   /* two NaNs, in bf16 and in fp16 */

const char *role(const reg_group &g) { return g.acc ? "accumulator" : "A fragment"; }
std::string operand_name(const reg_group &g) { return std::string(role(g)) + " " + g.name; }

/* The register group at addr of thread f, its fence and in-flight rules checked, for a new product. */
reg_group *take_operand(fiber *f, void *addr, int bytes, bool acc, const char *name, int n, uint32_t chain)
{
    reg_group *g = nullptr;
    for (auto &p : f->groups)
        if (p->addr == addr) g = p.get();
    if (g && (g->bytes != bytes || g->acc != acc)) {
        if (g->in_flight)
            fail("wgmma at " + chain_text(chain) + " uses the registers of the " + operand_name(*g) +
                 " of a wgmma in flight as another operand");
        g->bytes = bytes, g->acc = acc, g->has_baseline = false;
    }
    if (!g) {
        f->groups.push_back(std::make_unique<reg_group>());
        g = f->groups.back().get();
        g->addr = addr, g->bytes = bytes, g->acc = acc;
    }
    g->name = name;
    const int words = bytes / 4;
    if (g->in_flight) { /* a product chained on registers another one in flight uses */
        if (memcmp(addr, g->poison.data(), bytes) != 0)
            fail(operand_name(*g) + " of the wgmma " + note_text(*f->cl, g->issue_note) +
                     " written before its wait (found changed at the next wgmma, at " + chain_text(chain) + ")");
        if (acc && g->n != n)
            fail("wgmma at " + chain_text(chain) + " chains on the " + operand_name(*g) +
                 " of an m64n" + std::to_string(g->n) + " product in flight with m64n" + std::to_string(n));
        g->in_flight++;
        return g;
    }
    if (g->has_baseline) {
        if (memcmp(addr, g->baseline.data(), bytes) != 0)
            fail("wgmma at " + chain_text(chain) + " uses the " + operand_name(*g) + " that " + who(f) +
                 " wrote after its last wgmma.fence",
                 "(PTX: a wgmma.fence must come between a thread's register access and a wgmma using the registers)");
    } else if (!f->fenced_since_sync) {
        fail("wgmma at " + chain_text(chain) + ", the first to use " + operand_name(*g) + ", with no wgmma.fence by " +
                 who(f) + " since its last wgmma.commit_group or wait_group",
             "(PTX: a wgmma.fence comes before the first wgmma and between a register access and a wgmma using it)");
    }
    g->shadow.assign((uint32_t *)addr, (uint32_t *)addr + words);
    size_t index = 0;
    while (f->groups[index].get() != g) index++;
    g->poison.assign(words, acc ? kAccPoison | (uint32_t)(index + 1) : kAPoison);
    memcpy(addr, g->poison.data(), bytes);
    g->in_flight = 1, g->n = n;
    g->issue_note = add_note("issued", chain);
    return g;
}

struct desc {
    uint32_t start, leading, stride;
};
desc decode(uint64_t d, uint32_t chain)
{
    if ((d >> 62) != 1) fail("wgmma at " + chain_text(chain) + ": descriptor without the 128-byte swizzle (not emulated)");
    desc r{(uint32_t)(d & 0x3FFF) << 4, (uint32_t)((d >> 16) & 0x3FFF) << 4, (uint32_t)((d >> 32) & 0x3FFF) << 4};
    if ((r.start >> 7) & 7) fail("wgmma at " + chain_text(chain) + ": descriptor start not at row 0 of a 1024-byte atom");
    return r;
}
/* The 128-byte swizzle: address bits 4-6 XOR bits 7-9, for the tensor cores as for the TMA. */
inline uint32_t swizzle(uint32_t a) { return a ^ (((a >> 7) & 7) << 4); }
/* K-major: element (mn, k), k < 16, of rows 128 bytes long, 8-row groups `stride` apart. */
inline uint32_t kmajor(const desc &d, int mn, int k) { return swizzle(d.start + (mn / 8) * d.stride + (mn % 8) * 128 + 2 * k); }
/* MN-major: element (k, mn): 64-column blocks `leading` apart, 8-row groups of k `stride` apart. */
inline uint32_t mnmajor(const desc &d, int k, int mn)
{
    return swizzle(d.start + (mn / 64) * d.leading + (k / 8) * d.stride + (k % 8) * 128 + 2 * (mn % 64));
}

void run_product(product &p)
{
    const cta &c = *p.c;
    const desc db = decode(p.b_desc, 0);
    const uint32_t size = (uint32_t)c.smem.size();
    auto elem = [&](uint32_t a) {
        if (a + 2 > size) fail("wgmma operand outside shared memory at " + hex(a));
        return to_float(load16(c, a), p.bf16);
    };
    float A[16][16];
    static float B[16][256], C[16][256];
    if (p.ss) {
        const desc da = decode(p.a_desc, 0);
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 16; k++) A[r][k] = elem(kmajor(da, 16 * (p.warp % 4) + r, k));
    } else {
        memcpy(A, p.a_rows, sizeof A);
    }
    /* 8 elements at a time: the swizzle moves whole 16-byte chunks */
    auto row8 = [&](uint32_t a, float *out, int stride) {
        if (a + 16 > size) fail("wgmma operand outside shared memory at " + hex(a));
        uint16_t h[8];
        memcpy(h, c.smem.data() + a, 16);
        for (int i = 0; i < 8; i++) out[i * stride] = to_float(h[i], p.bf16);
    };
    for (int col = 0; col < p.n; col += p.ss ? 1 : 8)
        for (int k = 0; k < 16; k += p.ss ? 8 : 1) {
            if (p.ss) row8(kmajor(db, col, k), &B[k][col], 256);
            else row8(mnmajor(db, k, col), &B[k][col], 1);
        }
    /* C = A B, each element summed in k order, then added to (or written over) the accumulator */
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < p.n; col++) C[r][col] = 0.f;
    for (int k = 0; k < 16; k++)
        for (int r = 0; r < 16; r++)
            for (int col = 0; col < p.n; col++) C[r][col] += A[r][k] * B[k][col];
    for (int l = 0; l < 32; l++) {
        float *d = p.dst[l];
        if (!d) continue;
        const int g = l / 4, t = l % 4;
        for (int cc = 0; cc < p.n / 8; cc++)
            for (int e = 0; e < 4; e++) {
                const float acc = C[g + 8 * (e / 2)][8 * cc + 2 * t + e % 2];
                d[cc * 4 + e] = p.accumulate ? d[cc * 4 + e] + acc : acc;
            }
    }
}

/* The chunks an operand reads: A's 16 rows of this warp (K-major), B's n rows (K-major) or 16 rows of
 * n columns (MN-major). */
void operand_chunks(std::vector<uint32_t> &out, const desc &d, bool kmaj, int rows0, int rows, int n)
{
    if (kmaj) {
        for (int r = rows0; r < rows0 + rows; r++)
            for (int k = 0; k < 16; k += 8) out.push_back(kmajor(d, r, k) / 16);
    } else {
        for (int k = 0; k < 16; k++)
            for (int col = 0; col < n; col += 8) out.push_back(mnmajor(d, k, col) / 16);
    }
}
} // namespace

void wgmma_fence(site)
{
    fiber *f = cur;
    f->fenced_since_sync = true;
    for (auto &g : f->groups)
        if (!g->in_flight) {
            g->baseline.assign((uint32_t *)g->addr, (uint32_t *)g->addr + g->bytes / 4);
            g->has_baseline = true;
        }
}
void wgmma_commit(site)
{
    fiber *f = cur;
    f->wg_groups.push_back(std::move(f->wg_open));
    f->wg_open.clear();
    f->fenced_since_sync = false;
}

void wgmma(bool ss, int n, bool bf16, float *d, const uint32_t *a, uint64_t a_desc, uint64_t b_desc, int accumulate,
           const char *d_name, const char *a_name, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    reg_group *gd = take_operand(f, d, n / 8 * 4 * 4, true, d_name, n, chain);
    reg_group *ga = ss ? nullptr : take_operand(f, (void *)a, 16, false, a_name, n, chain);
    f->x[0] = a_desc, f->x[1] = b_desc, f->x[2] = (uint64_t)n | (uint64_t)bf16 << 16 | (uint64_t)(accumulate != 0) << 17;
    f->x[3] = chain, f->xp[0] = gd, f->xp[1] = ga;
    collective(warp_gate(), kWgmma, s, false, [ss, d](std::vector<fiber *> &m) {
        fiber *lanes[32];
        by_lane(m, lanes, "wgmma.mma_async");
        for (fiber *l : lanes)
            if (l->x[1] != lanes[0]->x[1] || l->x[2] != lanes[0]->x[2] || (ss && l->x[0] != lanes[0]->x[0]))
                fail("wgmma at " + chain_text((uint32_t)l->x[3]) + ": the lanes of a warp disagree on its operands");
        cluster &cl = *lanes[0]->cl;
        if (cl.free_products.empty()) {
            cl.products.emplace_back();
            cl.products.back().id = (uint32_t)cl.products.size() - 1;
            cl.free_products.push_back(cl.products.back().id);
        }
        product &p = cl.products[cl.free_products.back()];
        cl.free_products.pop_back();
        p.done = false, p.reads.clear();
        p.ss = ss, p.c = lanes[0]->c, p.warp = (int)lanes[0]->tid.x / 32;
        p.n = (int)(lanes[0]->x[2] & 0xffff), p.bf16 = (lanes[0]->x[2] >> 16) & 1, p.accumulate = (lanes[0]->x[2] >> 17) & 1;
        p.a_desc = lanes[0]->x[0], p.b_desc = lanes[0]->x[1];
        const uint32_t chain = (uint32_t)lanes[0]->x[3];
        p.note = ((reg_group *)lanes[0]->xp[0])->issue_note;
        if (p.note == kNone || cl.notes[p.note].chain != chain) p.note = add_note("issued", chain);
        for (int l = 0; l < 32; l++) {
            auto *gd = (reg_group *)lanes[l]->xp[0];
            p.acc[l] = gd, p.dst[l] = (float *)gd->shadow.data();
            p.afrag[l] = (reg_group *)lanes[l]->xp[1];
        }
        if (!ss) {
            uint32_t frag[32][4];
            for (int l = 0; l < 32; l++) memcpy(frag[l], p.afrag[l]->shadow.data(), 16);
            gather_a(frag, p.bf16, p.a_rows);
        }
        /* what it reads, checked now (the issue is where the thread needs the bytes delivered) */
        const desc db = decode(p.b_desc, chain);
        size_t a_end = 0;
        if (ss) {
            operand_chunks(p.reads, decode(p.a_desc, chain), true, 16 * (p.warp % 4), 16, p.n);
            a_end = p.reads.size();
        }
        operand_chunks(p.reads, db, ss, 0, ss ? p.n : 16, p.n);
        for (uint32_t ch : p.reads)
            if ((ch + 1) * 16 > p.c->smem.size()) fail("wgmma at " + chain_text(chain) + ": operand outside shared memory");
        if (ss) check_async_read(lanes, p.reads, 0, a_end, "A operand", chain);
        check_async_read(lanes, p.reads, a_end, p.reads.size(), ss ? "B operand (K-major)" : "B operand (MN-major)", chain);
        for (uint32_t ch : p.reads) p.c->chunks[ch].readers++;
        for (fiber *l : lanes) l->wg_open.push_back(p.id);
    });
    (void)d;
}

void wgmma_wait(int n, site s)
{
    fiber *f = cur;
    std::vector<uint32_t> ids;
    while ((int)f->wg_groups.size() > n) {
        ids.insert(ids.end(), f->wg_groups.front().begin(), f->wg_groups.front().end());
        f->wg_groups.pop_front();
    }
    f->fenced_since_sync = false;
    f->xp[0] = &ids, f->x[3] = chain_child(f->chain, s);
    collective(warp_gate(), kWgmmaWait, s, false, [](std::vector<fiber *> &m) {
        fiber *lanes[32];
        by_lane(m, lanes, "wgmma.wait_group");
        const auto &ids0 = *(std::vector<uint32_t> *)lanes[0]->xp[0];
        for (fiber *l : lanes)
            if (*(std::vector<uint32_t> *)l->xp[0] != ids0)
                fail("wgmma.wait_group at " + chain_text((uint32_t)l->x[3]) +
                     ": the lanes of a warp wait for different products");
        cluster &cl = *lanes[0]->cl;
        for (uint32_t id : ids0) {
            product &p = cl.products[id];
            run_product(p);
            for (uint32_t ch : p.reads) p.c->chunks[ch].readers--;
            p.reads.clear();
            p.done = true;
        }
        /* each lane's registers: still the poison, then the true values back */
        for (uint32_t id : ids0) {
            product &p = cl.products[id];
            for (int l = 0; l < 32; l++)
                for (reg_group *g : {p.acc[l], p.afrag[l]}) {
                    if (!g || --g->in_flight) continue;
                    if (memcmp(g->addr, g->poison.data(), g->bytes) != 0)
                        fail(operand_name(*g) + " of the wgmma " + note_text(cl, g->issue_note) +
                                 " written before its wait (wgmma.wait_group at " + chain_text((uint32_t)lanes[l]->x[3]) + ")",
                             "found changed in " + who(lanes[l]));
                    memcpy(g->addr, g->shadow.data(), g->bytes);
                    g->baseline = g->shadow, g->has_baseline = true;
                }
        }
        for (uint32_t id : ids0) cl.free_products.push_back(id);
    });
}

/* ---- mbarriers ---- */
namespace {
mbarrier &find_mbarrier(cta &c, uint32_t at, uint32_t chain)
{
    auto it = c.mbarriers.find(at);
    if (it == c.mbarriers.end())
        fail("the mbarrier at " + hex(at) + " used at " + chain_text(chain) + " before mbarrier.init");
    return it->second;
}

struct emu_map {
    uint64_t magic;
    const unsigned char *base;
    uint64_t dims[3], strides[2];
    uint32_t box[3], elem_bytes;
};
constexpr uint64_t kMapMagic = 0x454d55544d4150ull;

void land_copy(mbarrier &b, const mbarrier::copy &cp)
{
    emu_map m;
    memcpy(&m, cp.map, sizeof m);
    cta &c = *cp.dst_cta;
    uint32_t at = cp.dst;
    for (uint32_t z = 0; z < m.box[2]; z++)
        for (uint32_t y = 0; y < m.box[1]; y++)
            for (uint32_t x = 0; x < m.box[0]; x++, at += m.elem_bytes) {
                const int64_t gx = (int64_t)cp.c[0] + x, gy = (int64_t)cp.c[1] + y, gz = (int64_t)cp.c[2] + z;
                unsigned char *s = c.smem.data() + swizzle(at);
                if (gx < 0 || gy < 0 || gz < 0 || gx >= (int64_t)m.dims[0] || gy >= (int64_t)m.dims[1] ||
                    gz >= (int64_t)m.dims[2])
                    memset(s, 0, m.elem_bytes); /* out of bounds: zeros */
                else memcpy(s, m.base + gx * m.elem_bytes + gy * m.strides[0] + gz * m.strides[1], m.elem_bytes);
            }
    for (uint32_t ch = cp.dst / 16; ch < (cp.dst + cp.bytes) / 16; ch++) {
        chunk &k = c.chunks[ch];
        memcpy(c.view.data() + ch * 16, c.smem.data() + ch * 16, 16);
        k.state = kValid, k.gen = k.asy = {b.actor, b.completed + 1}, k.note = cp.note;
    }
}

/* The stage a barrier guards goes back to the producer: its bytes become garbage at once, and no
 * product may still be reading them. */
void release(cta &c, mbarrier &b, uint32_t n)
{
    for (uint32_t ch = 0; ch < c.chunks.size(); ch++) {
        if (!b.guards[ch]) continue;
        chunk &k = c.chunks[ch];
        if (k.readers)
            fail("shared memory " + hex(ch * 16) + " handed back to the producer (the mbarrier at " + hex(b.off) +
                     " completed its phase " + std::to_string(b.completed - 1) + ") while a wgmma that reads it is in flight",
                 "the hand-back: " + note_text(*c.cl, n) + "\n    the reader: " + reader_of(c, ch) +
                     "\n    (arrive on the stage's empty barrier only after the wgmma.wait_group that covers its reads)");
        if (k.state == kInFlight) continue; /* already refilled by the producer: its copy is in flight */
        memset(c.smem.data() + ch * 16, 0xFF, 16);
        memset(c.view.data() + ch * 16, 0xFF, 16);
        k.state = kReleased, k.gen = k.asy = {}, k.note = n;
    }
}

void complete_phase(cta &c, mbarrier &b, uint32_t n)
{
    b.completed++;
    b.vc[b.actor] = b.completed;
    b.done_vc = b.vc;
    std::fill(b.vc.begin(), b.vc.end(), 0);
    if (!b.tx_seen && b.guards_any) {
        cluster &cl = *c.cl;
        uint32_t rel = (uint32_t)cl.notes.size();
        const note &a = cl.notes[n];
        cl.notes.push_back({"handed back by the arrival", a.thread, a.chain, b.off, b.completed - 1});
        release(c, b, rel);
    }
    b.tx_seen = false, b.pending = b.count;
    for (fiber *w : b.waiters) wake(w);
    b.waiters.clear();
}

/* Completes the phase once every arrival is in and the bytes announced have been copied: the
 * copies land then, as late as the hardware may land them. */
void try_complete(cta &c, mbarrier &b, uint32_t n)
{
    if (b.pending > 0) return;
    int64_t pending_bytes = 0;
    for (const auto &cp : b.copies) pending_bytes += cp.bytes;
    if (pending_bytes > b.tx)
        fail("the TMA copies counted on the mbarrier at " + hex(b.off) + " carry " + std::to_string(pending_bytes) +
             " bytes, more than the " + std::to_string(b.tx) + " its arrivals announced");
    if (pending_bytes < b.tx) return;
    for (const auto &cp : b.copies) land_copy(b, cp);
    b.copies.clear();
    b.tx = 0;
    complete_phase(c, b, n);
}

cta &cta_of_rank(unsigned rank, uint32_t chain)
{
    cluster &cl = *cur->cl;
    if (rank >= cl.ctas.size()) fail("mapa at " + chain_text(chain) + ": no CTA of rank " + std::to_string(rank) + " in the cluster");
    cta &c = *cl.ctas[rank];
    if (c.live == 0)
        fail("an arrival or a copy at " + chain_text(chain) + " reached CTA rank " + std::to_string(rank) +
             " of the cluster, which had exited");
    return c;
}
} // namespace

void mbar_init(uint32_t at, int count, site s)
{
    cta &c = *cur->c;
    const uint32_t chain = chain_child(cur->chain, s);
    if (count < 1) fail("mbarrier.init at " + chain_text(chain) + " with count " + std::to_string(count));
    auto found = c.mbarriers.find(at);
    mbarrier &b = c.mbarriers[at];
    if (found == c.mbarriers.end()) {
        if (c.mbarrier_actors == 64) fail("more than 64 mbarriers in a CTA: not emulated");
        b.actor = c.cl->thread_actors + c.rank * 64 + c.mbarrier_actors++;
        b.vc.assign(c.cl->actors, 0);
        b.done_vc.assign(c.cl->actors, 0);
        b.guards.assign(c.chunks.size(), 0);
    }
    if (!b.waiters.empty() || !b.copies.empty()) fail("mbarrier.init at " + chain_text(chain) + " of a barrier in use");
    b.off = at, b.count = b.pending = count, b.tx = 0, b.tx_seen = false, b.completed = 0;
}

void mbar_arrive(unsigned rank, uint32_t at, uint32_t expect_bytes, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    cta &c = rank == f->c->rank ? *f->c : cta_of_rank(rank, chain);
    mbarrier &b = find_mbarrier(c, at, chain);
    if (expect_bytes) b.tx += expect_bytes, b.tx_seen = true;
    join(b.vc, f->vc);
    f->vc[f->flat]++;
    if (--b.pending < 0) fail("more arrivals on the mbarrier at " + hex(at) + " than its count (at " + chain_text(chain) + ")");
    try_complete(c, b, add_note("the arrival", chain, at, b.completed));
}

void mbar_wait(uint32_t at, int parity, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    mbarrier &b = find_mbarrier(*f->c, at, chain);
    /* waiting on parity P returns once the phase of parity P has completed: the current phase's parity
     * (completed % 2) differs from P */
    while ((int)(b.completed & 1) == parity) {
        f->wait_bar = &b, f->wait_parity = parity, f->wait_chain = chain;
        b.waiters.push_back(f);
        block_current();
    }
    f->wait_bar = nullptr;
    join(f->vc, b.done_vc);
    f->last_acquire = &b;
}

void tma_load(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint32_t bar, uint16_t cta_mask, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    emu_map m;
    memcpy(&m, map, sizeof m);
    if (m.magic != kMapMagic) fail("bulk tensor copy at " + chain_text(chain) + " with a tensor map cuTensorMapEncodeTiled did not make");
    const uint32_t bytes = m.box[0] * m.box[1] * m.box[2] * m.elem_bytes;
    cluster &cl = *f->cl;
    if (cta_mask >> cl.ctas.size()) fail("multicast at " + chain_text(chain) + " to a CTA outside the cluster");
    for (unsigned r = 0; r < cl.ctas.size(); r++) {
        if (!(cta_mask >> r & 1)) continue;
        cta &c = cta_of_rank(r, chain);
        if (dst % 128) fail("bulk tensor copy at " + chain_text(chain) + ": destination " + hex(dst) + " not 128-byte aligned");
        if (dst + bytes > c.smem.size()) fail("bulk tensor copy at " + chain_text(chain) + " past the end of shared memory");
        mbarrier &b = find_mbarrier(c, bar, chain);
        const uint32_t n = add_note("the TMA copy", chain, bar, b.completed);
        for (uint32_t ch = dst / 16; ch < (dst + bytes) / 16; ch++) start_copy_into(c, ch, n, "bulk tensor copy", chain);
        mbarrier::copy cp{&c, dst, {}, {c0, c1, c2}, bytes, n};
        memcpy(cp.map, map, sizeof cp.map);
        b.copies.push_back(cp);
        b.tx_seen = true;
        try_complete(c, b, n);
    }
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
                S.runq.assign(cl.threads.begin(), cl.threads.end());
                while (!S.failed && !S.runq.empty()) { /* returns when no fiber can run, or one failed */
                    fiber *f = S.runq.front();
                    S.runq.pop_front();
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
                           bool overlapped, const char *mutant_of, const char *expect)
{
    variants().push_back({override_name ? override_name : name, file, fn, traced, overlapped, mutant_of ? mutant_of : "",
                          expect ? expect : ""});
}
} // namespace emu

/* ---- the CUDA runtime and driver calls the launchers make, answered for an emulated device: an sm_90
 * with 3 SMs (a persistent grid then walks several work tiles per CTA) and an H100's shared memory ---- */
namespace {
constexpr int kSms = 3, kMaxSmem = 227 * 1024;

CUresult encode_tiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank, void *addr, const cuuint64_t *dims,
                      const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *element_strides,
                      CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion,
                      CUtensorMapFloatOOBfill)
{
    /* the driver's rules where they bite, and what this emulation supports */
    if (rank != 3 || (dtype != CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 && dtype != CU_TENSOR_MAP_DATA_TYPE_FLOAT16) ||
        interleave != CU_TENSOR_MAP_INTERLEAVE_NONE || swizzle != CU_TENSOR_MAP_SWIZZLE_128B)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((uintptr_t)addr % 16) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 2; i++)
        if (strides[i] % 16 || strides[i] >= (1ull << 40)) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 3; i++) {
        if (box[i] < 1 || box[i] > 256 || element_strides[i] != 1 || dims[i] < 1 || dims[i] > (1ull << 32))
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (box[0] * 2 > 128) return CUDA_ERROR_INVALID_VALUE; /* the inner box within the 128-byte swizzle span */
    emu::emu_map m{emu::kMapMagic, (const unsigned char *)addr, {dims[0], dims[1], dims[2]}, {strides[0], strides[1]},
                   {box[0], box[1], box[2]}, 2};
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
    case cudaDevAttrMultiProcessorCount: *value = kSms; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kMaxSmem; return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
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
