/* The instructions the emulated PTX wrappers call (emulator.h says what they model and check): the
 * shared-memory bookkeeping, ldmatrix and mma.sync, cp.async, fence.proxy.async, wgmma, mbarriers and
 * the bulk tensor copies. The fibers, barriers and launches they block and wake through are in
 * runtime.cpp. */
#include "runtime.h"

namespace emu {

/* a bulk copy's failure when its bytes leave the region they start in (in_shared) */
const char *const kOutsideRegion = " outside its region of shared memory (the dynamic bytes, or one static array)";

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
    bool last_reader_fenced = false;
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
                     "cp.async.wait_group and before the barrier that publishes the bytes, or each reading thread "
                     "after the wait that orders the copies before it)");
            fail(at() + " that a plain store changed with no fence.proxy.async after it",
                 "(the storing thread must fence.proxy.async before the barrier or arrival that publishes the bytes)");
        }
        if (k.state == kUnwritten || k.state == kReleased) {
            if (!empty++) first_empty = ch;
            continue;
        }
        if (k.asy.actor == last.actor && k.asy.clock == last.clock && k.reader_fenced == last_reader_fenced) continue;
        last = k.asy, last_reader_fenced = k.reader_fenced;
        if (k.reader_fenced)
            for (fiber *l : lanes)
                if (l->proxy_fenced.empty() || l->proxy_fenced[k.asy.actor] < k.asy.clock)
                    fail(at() + " that another thread's cp.async wrote through the generic proxy, which " + who(l) +
                             " did not fence.proxy.async after its wait for them",
                         "the write: " + writer_of(c, ch) + "\n    (a reader that fences instead of the writer must "
                         "do so itself, after the wait that orders the copies before it)");
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
        if (it != c.mbarriers.end()) {
            std::vector<uint8_t> &guards = it->second.guards;
            if (ch >= guards.size()) guards.resize(c.chunks.size(), 0); /* a static array placed after the init */
            guards[ch] = 1, it->second.guards_any = true;
        }
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
            if (a % 16 || !in_shared(c, a, 16))
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

/* ---- the global buffers of a launch ---- */
namespace {
struct global_range {
    const unsigned char *begin;
    size_t bytes;
    std::string name;
};
std::vector<global_range> global_ranges;
}
void global_buffer(const void *begin, size_t bytes, const char *name)
{
    if (begin) global_ranges.push_back({static_cast<const unsigned char *>(begin), bytes, name});
}
void global_buffers_clear() { global_ranges.clear(); }
/* Fails unless [src, src + bytes) lies inside one registered buffer (or none is registered). Names the
 * buffer the bytes fall just outside of, when one is within its own size of them. */
static void check_global_source(const void *src, size_t bytes, const char *what, uint32_t chain)
{
    if (global_ranges.empty()) return;
    const uintptr_t p = (uintptr_t)src; /* addresses as integers: src may point anywhere */
    for (const global_range &r : global_ranges)
        if (p >= (uintptr_t)r.begin && p - (uintptr_t)r.begin + bytes <= r.bytes) return;
    std::string known, where;
    char text[96];
    for (const global_range &r : global_ranges) {
        known += (known.empty() ? "" : ", ") + r.name + " (" + std::to_string(r.bytes) + " bytes)";
        const long long off = (long long)(p - (uintptr_t)r.begin), size = (long long)r.bytes;
        if (where.empty() && off >= -size && off < 2 * size) {
            snprintf(text, sizeof text, "%+lld bytes from %s's start", off, r.name.c_str());
            where = text;
        }
    }
    if (where.empty()) where = "far from every one";
    fail(std::string(what) + " at " + chain_text(chain) + ": source outside every global buffer of the launch (" +
             std::to_string(bytes) + " bytes, " + where + ")",
         "the launch's buffers: " + known);
}

/* ---- cp.async ---- */
void cp_async(uint32_t dst, const void *src, int bytes, bool valid, site s)
{
    fiber *f = cur;
    cta &c = *f->c;
    const uint32_t chain = chain_child(f->chain, s);
    if (dst % bytes || !in_shared(c, dst, bytes))
        fail("cp.async at " + chain_text(chain) + ": destination " + hex(dst) + " misaligned or outside shared memory");
    if (valid) check_global_source(src, (size_t)bytes, "cp.async", chain);
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
void land(fiber *f, const cp_copy &cp)
{
    cta &c = *f->c;
    if (cp.valid) memcpy(c.smem.data() + cp.dst, cp.src, cp.bytes);
    else memset(c.smem.data() + cp.dst, 0, cp.bytes);
    if (cp.bytes != 16) return;
    chunk &k = c.chunks[cp.dst / 16];
    k.state = kValid, k.gen = {f->flat, f->vc[f->flat]}, k.asy = {}, k.reader_fenced = false, k.note = cp.note;
    f->unfenced.push_back(cp.dst / 16);
    c.landed_unfenced.push_back(cp.dst / 16);
    if (c.landed_unfenced.size() > 2 * c.chunks.size()) { /* kernels whose readers never fence (ldmatrix) */
        auto &l = c.landed_unfenced;
        std::sort(l.begin(), l.end());
        l.erase(std::unique(l.begin(), l.end()), l.end());
        std::erase_if(l, [&](uint32_t i) { return c.chunks[i].asy.actor != kNone; });
    }
}
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
    /* Another thread's landed cp.async copies, where this thread is ordered after their landing (the
     * mbarrier phase their cp.async.mbarrier.arrive counted, or a barrier): a reader's fence is on the
     * path from the write to its own async-proxy reads, so it publishes them for itself. Each reading
     * lane must have fenced so (check_async_read); the rest stay for a later fence. */
    f->proxy_fenced = f->vc;
    size_t kept = 0;
    for (uint32_t ch : c.landed_unfenced) {
        chunk &k = c.chunks[ch];
        if (k.state != kValid || k.asy.actor != kNone) continue; /* fenced, released or rewritten since */
        if (f->vc[k.gen.actor] < k.gen.clock) {
            c.landed_unfenced[kept++] = ch;
            continue;
        }
        k.asy = k.gen, k.reader_fenced = true;
        memcpy(c.view.data() + ch * 16, c.smem.data() + ch * 16, 16);
    }
    c.landed_unfenced.resize(kept);
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
            k.state = kValid, k.gen = k.asy = now, k.reader_fenced = false, k.note = n;
        }
    }
}

/* ---- wgmma ---- */
namespace {
constexpr uint32_t kAPoison = 0x7FB57FB5u;   /* two NaNs, in bf16 and in fp16 */

const char *role(const reg_group &g) { return g.acc ? "accumulator" : "A fragment"; }
} // namespace
std::string operand_name(const reg_group &g) { return std::string(role(g)) + " " + g.name; }
namespace {

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
            if (!in_shared(*p.c, (size_t)ch * 16, 16)) fail("wgmma at " + chain_text(chain) + ": operand outside shared memory");
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

void land_copy(mbarrier &b, const mbarrier::copy &cp)
{
    emu_map m;
    memcpy(&m, cp.map, sizeof m);
    cta &c = *cp.dst_cta;
    uint32_t at = cp.dst;
    /* A plain bulk copy brings its bytes as they are; its map is zeros (an empty box: no loop below). */
    if (cp.src) memcpy(c.smem.data() + cp.dst, cp.src, cp.bytes);
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
        k.state = kValid, k.gen = k.asy = {b.actor, b.completed + 1}, k.reader_fenced = false, k.note = cp.note;
    }
}

/* The stage a barrier guards goes back to the producer: its bytes become garbage at once, and no
 * product may still be reading them. */
void release(cta &c, mbarrier &b, uint32_t n)
{
    /* guards covers the chunks the CTA had at the barrier's init (and any it guarded since): the static
     * arrays a kernel places later are never a stage */
    for (uint32_t ch = 0; ch < b.guards.size(); ch++) {
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
        k.state = kReleased, k.gen = k.asy = {}, k.reader_fenced = false, k.note = n;
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
        fail("the bulk copies counted on the mbarrier at " + hex(b.off) + " carry " + std::to_string(pending_bytes) +
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
        fail("an arrival, a copy or a read at " + chain_text(chain) + " reached CTA rank " + std::to_string(rank) +
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

/* cp.async.mbarrier.arrive.noinc: every copy the thread issued lands (committed or not), then it
 * arrives, so a waiter on the phase finds them ordered before its wait. */
void cp_async_mbar_arrive(uint32_t at, site s)
{
    fiber *f = cur;
    for (const auto &group : f->cp_groups)
        for (const cp_copy &cp : group) land(f, cp);
    f->cp_groups.clear();
    for (const cp_copy &cp : f->cp_open) land(f, cp);
    f->cp_open.clear();
    mbar_arrive(f->c->rank, at, 0, s);
}

/* ld.shared::cluster: the bytes the CTA of that rank holds now (the emulation runs a thread until it
 * blocks, so a read not ordered after the writer's store by a cluster_sync reads what was there
 * before: a wrong value, not a race report). */
float ld_cluster_f32(unsigned rank, uint32_t at, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    cta &c = rank == f->c->rank ? *f->c : cta_of_rank(rank, chain);
    if (!in_shared(c, at, 4))
        fail("ld.shared::cluster at " + chain_text(chain) + ": address " + hex(at) + " outside the " +
             std::to_string(c.dynamic) + " dynamic bytes (and static arrays) of CTA rank " + std::to_string(rank) +
             "'s shared memory");
    float v;
    std::memcpy(&v, &c.smem[at], 4);
    return v;
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
    auto &pre = f->c->prefetched; /* the box, if this CTA prefetched it, is now used */
    for (size_t i = 0; i < pre.size(); i++)
        if (pre[i].base == m.base && std::equal(pre[i].box, pre[i].box + 3, m.box) && pre[i].c[0] == c0 &&
            pre[i].c[1] == c1 && pre[i].c[2] == c2) {
            pre.erase(pre.begin() + (std::ptrdiff_t)i);
            break;
        }
    cluster &cl = *f->cl;
    if (cta_mask >> cl.ctas.size()) fail("multicast at " + chain_text(chain) + " to a CTA outside the cluster");
    for (unsigned r = 0; r < cl.ctas.size(); r++) {
        if (!(cta_mask >> r & 1)) continue;
        cta &c = cta_of_rank(r, chain);
        if (dst % 128) fail("bulk tensor copy at " + chain_text(chain) + ": destination " + hex(dst) + " not 128-byte aligned");
        if (!in_shared(c, dst, bytes)) fail("bulk tensor copy at " + chain_text(chain) + kOutsideRegion);
        mbarrier &b = find_mbarrier(c, bar, chain);
        const uint32_t n = add_note("the TMA copy", chain, bar, b.completed);
        for (uint32_t ch = dst / 16; ch < (dst + bytes) / 16; ch++) start_copy_into(c, ch, n, "bulk tensor copy", chain);
        mbarrier::copy cp{&c, dst, {}, {c0, c1, c2}, bytes, n, nullptr};
        memcpy(cp.map, map, sizeof cp.map);
        b.copies.push_back(cp);
        b.tx_seen = true;
        try_complete(c, b, n);
    }
}

void tma_prefetch(const CUtensorMap *map, int c0, int c1, int c2, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    emu_map m;
    memcpy(&m, map, sizeof m);
    if (m.magic != kMapMagic) fail("tensor prefetch at " + chain_text(chain) + " with a tensor map cuTensorMapEncodeTiled did not make");
    cta::prefetched_box b{m.base, {m.box[0], m.box[1], m.box[2]}, {c0, c1, c2}, add_note("the tensor prefetch", chain)};
    f->c->prefetched.push_back(b);
}

void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    cta &c = *f->c;
    if (dst % 16 || (uintptr_t)src % 16 || bytes % 16 || bytes == 0)
        fail("bulk copy at " + chain_text(chain) + ": " + std::to_string(bytes) + " bytes from " + hex((uint32_t)(uintptr_t)src) +
             " to " + hex(dst) + " (the size and both addresses must be multiples of 16)");
    if (!in_shared(c, dst, bytes)) fail("bulk copy at " + chain_text(chain) + kOutsideRegion);
    check_global_source(src, bytes, "bulk copy", chain);
    mbarrier &b = find_mbarrier(c, bar, chain);
    const uint32_t n = add_note("the bulk copy", chain, bar, b.completed);
    for (uint32_t ch = dst / 16; ch < (dst + bytes) / 16; ch++) start_copy_into(c, ch, n, "bulk copy", chain);
    b.copies.push_back({&c, dst, {}, {0, 0, 0}, bytes, n, static_cast<const unsigned char *>(src)});
    b.tx_seen = true;
    try_complete(c, b, n);
}

void bulk_store(void *dst, uint32_t src, uint32_t bytes, site s)
{
    fiber *f = cur;
    const uint32_t chain = chain_child(f->chain, s);
    cta &c = *f->c;
    if (src % 16 || (uintptr_t)dst % 16 || bytes % 16 || bytes == 0)
        fail("bulk store at " + chain_text(chain) + ": " + std::to_string(bytes) + " bytes from " + hex(src) +
             " to " + hex((uint32_t)(uintptr_t)dst) + " (the size and both addresses must be multiples of 16)");
    if (!in_shared(c, src, bytes)) fail("bulk store at " + chain_text(chain) + kOutsideRegion);
    memcpy(dst, c.view.data() + src, bytes);
}

} // namespace emu
