/* Runs the tensor-core attention_prefill variants (their exact source, lab/emulate/gen.py's copy) on the CPU under
 * the emulation of lab/emulate/emulator.h, through each variant's own launcher, and judges their outputs against
 * the float64 reference with the module's own policy (lab/core/compare.c's attention rows, given what
 * lab/attention_prefill/module.c gives them).
 *   prefill_emulator [--full] [--problem N] [--schedule SEED] [NAME...]
 *                                             the variants named (v10_pingpong or v10), or all of them;
 *                                             --full adds larger problems, --problem N runs one,
 *                                             --schedule runs the threads in the order of priorities
 *                                             drawn from SEED instead of the round robin (emulator.h)
 *   prefill_emulator --mutants [NAME...]      every planted bug of mutants.py (or those named) must fail
 *                                             with its expected message, where its variant passes (both
 *                                             under the mutant's schedule, where it names one: emulator.h)
 *   prefill_emulator --list                   the variants and mutants built in
 * One line per variant and problem as it runs. Each problem gets fresh random inputs, a shuffled page
 * table with spare pages, NaN in the cache slots past each request's keys, NaN in the outputs. */
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "tc_headers.h"
extern "C" {
#include "compare.h"
#include "kernels/dtype.h"
#include "reference/attention_prefill.h"
}

namespace {

struct problem {
    std::string label;
    enum kl_dtype dtype;
    int head_dim, qo_heads, kv_heads, page;
    bool causal;
    std::vector<int> q_lens, kv_lens;
    unsigned seed;
    float k_ramp = 0; /* key j of a request scaled by 1 + k_ramp j: its logits grow along the keys */
    bool quiet_rows = false; /* the queries of a request's tokens 0-3, 8-11, ... scaled by 1/64: with k_ramp,
                              * their logits hardly grow while the other tokens' do (at gqa 2, rows 0-7 and
                              * 8-15 of a warp's 16, the two rows a thread holds) */
};

/* A batch of short requests whose kv_len - q_len takes every value 0 .. tile - 1: every position of
 * the causal diagonal within a key tile of `tile` keys (and of any tile size dividing it). */
problem every_offset(const char *label, enum kl_dtype t, int d, int qo, int kv, int page, int tile, int q_len, unsigned seed)
{
    problem p{std::string(label) + " 0.." + std::to_string(tile - 1), t, d, qo, kv, page, true, {}, {}, seed};
    for (int off = 0; off < tile; off++) p.q_lens.push_back(q_len), p.kv_lens.push_back(q_len + off);
    return p;
}

/* Offsets modulo a multiple of every key-tile size the headers give head_dim D (smem_tiles.cuh's tile_shape
 * for v2..v6, mainloop_sm90.cuh's wg_tiles for v7 and up) cover every diagonal position in all of them. */
template <int D> constexpr int key_tile_lcm() { return std::lcm(kl::mma::tile_shape<D>::kBN, kl::hopper::wg_tiles<D>::kBN); }
static_assert(key_tile_lcm<64>() == key_tile_lcm<128>(), "one offset case serves head_dim 64 and 128");

std::vector<problem> problems(bool full)
{
    constexpr int small = key_tile_lcm<128>(), large = key_tile_lcm<256>();
    std::vector<problem> ps = {
        every_offset("causal offsets", KL_BF16, 128, 4, 2, 16, small, 2, 1),
        {"ragged, gqa 4", KL_BF16, 64, 8, 2, 16, true, {40, 0, 3, 130}, {70, 9, 100, 300}, 2},
        {"gather page 7, gqa 8", KL_F16, 128, 8, 1, 7, true, {37}, {200}, 3},
        every_offset("causal offsets", KL_F16, 256, 2, 1, 32, large, 2, 4),
        {"page 1, gqa 1", KL_BF16, 256, 2, 2, 1, false, {40}, {100}, 5},
        {"page 32 by TMA, four tiles", KL_BF16, 256, 4, 2, 32, false, {64}, {200}, 6},
        {"gather page 3, four tiles", KL_F16, 64, 2, 1, 3, true, {20, 150}, {420, 150}, 7},
        {"packed pairs, page 16", KL_BF16, 128, 4, 1, 16, true, {100, 20}, {300, 20}, 8},
        {"five key tiles, gqa 1", KL_F16, 128, 2, 2, 16, true, {130}, {600}, 9},
        /* each key tile's max well above the last one's (by more than 2^8 after the scale): a row must
         * move its max and rescale at every tile (v13's lazy rescale included); in fp16, a P formed
         * against a stale max overflows. Page 1. */
        {"keys growing along the request, page 1", KL_F16, 128, 2, 1, 1, true, {64}, {400}, 15, 1.f / 32},
        {"keys growing for half the rows, page 16", KL_F16, 128, 2, 1, 16, false, {64}, {400}, 16, 1.f / 32, true},
    };
    if (full) {
        ps.push_back({"full: gqa 4, two requests", KL_BF16, 128, 8, 2, 16, true, {150, 1}, {150, 260}, 10});
        ps.push_back({"full: page 5", KL_F16, 64, 8, 1, 5, false, {33, 64}, {90, 64}, 11});
        ps.push_back({"full: head_dim 256 causal", KL_BF16, 256, 4, 2, 16, true, {70}, {200}, 12});
        ps.push_back({"full: gqa 1, eight kv heads", KL_BF16, 128, 8, 8, 16, true, {70, 5, 0, 140}, {70, 300, 3, 140}, 13});
        ps.push_back(every_offset("full: fp16 head_dim 64, causal offsets", KL_F16, 64, 8, 2, 8, key_tile_lcm<64>(), 5, 14));
    }
    return ps;
}

struct verdict {
    bool pass;
    std::string first, details; /* why it failed: the first line, then the rest */
};

std::string trim(const std::string &s) { return s.substr(0, s.find_last_not_of('\n') + 1); }

/* The trace of CTA 0: every key tile's events present and in the order the kernel passes them (K
 * ready, S done, softmax done, P V done; an overlapping variant finishes P_j V_j only after the
 * softmax of tile j + 1). tiles 0: CTA 0 had no rows. A second work tile (next_tiles) is taken up
 * after the first's rows are stored, and its key tiles follow in the slots left. */
bool trace_in_order(const kl_prefill_trace &t, bool overlapped, std::string &why)
{
    if (t.tiles == 0) return true;
    bool ok = t.start > 0;
    /* key tiles [from, to) of one work tile, whose rows were stored at end[c] */
    auto work = [&](int from, int to, const unsigned long long *end) {
        for (int c = 0; c < 2; c++)
            for (int j = from; j < to; j++) {
                ok &= t.issued[j] >= t.start && t.k_ready[c][j] >= t.start;
                ok &= t.k_ready[c][j] <= t.s_done[c][j] && t.s_done[c][j] <= t.softmax_done[c][j];
                ok &= t.softmax_done[c][j] <= t.pv_done[c][j] && t.pv_done[c][j] <= end[c];
                if (overlapped && j + 1 < to) ok &= t.softmax_done[c][j + 1] <= t.pv_done[c][j];
            }
    };
    const int first = std::min(t.tiles, KL_PREFILL_TRACE_TILES);
    work(0, first, t.end);
    if (t.next_tiles > 0) {
        for (int c = 0; c < 2; c++)
            ok &= t.end[c] > 0 && t.end[c] <= t.next_begin[c] && t.next_begin[c] <= t.next_end[c];
        const int to = std::min(t.tiles + t.next_tiles, KL_PREFILL_TRACE_TILES);
        for (int c = 0; c < 2; c++)
            if (first < to) ok &= t.next_begin[c] <= t.k_ready[c][first];
        work(first, to, t.next_end);
    }
    if (!ok) why = "the trace of CTA 0 is missing events or out of order (" + std::to_string(t.tiles) + " tiles" +
                   (t.next_tiles > 0 ? ", then " + std::to_string(t.next_tiles) : "") + ")";
    return ok;
}

uint16_t to16(enum kl_dtype t, float f) { return t == KL_BF16 ? kl_f32_to_bf16(f) : kl_f32_to_f16(f); }
double from16(enum kl_dtype t, uint16_t h) { return t == KL_BF16 ? kl_bf16_to_f32(h) : kl_f16_to_f32(h); }

std::string describe(const problem &pr)
{
    std::string q;
    if (pr.q_lens.size() > 6) q = std::to_string(pr.q_lens.size()) + " requests";
    else
        for (size_t b = 0; b < pr.q_lens.size(); b++)
            q += (b ? "/" : "") + std::to_string(pr.q_lens[b]) + ":" + std::to_string(pr.kv_lens[b]);
    char s[256];
    snprintf(s, sizeof s, "%s (head_dim %d %s, heads %d/%d, page %d, %s, q:kv %s)", pr.label.c_str(), pr.head_dim,
             kl_dtype_name(pr.dtype), pr.qo_heads, pr.kv_heads, pr.page, pr.causal ? "causal" : "noncausal", q.c_str());
    return s;
}

int traced_cases; /* of the current variant: at least one must have traced CTA 0 */

verdict check(const problem &pr, const emu::variant &v, std::string &stats)
{
    std::mt19937 rng(pr.seed);
    std::normal_distribution<float> normal;
    const int batch = (int)pr.q_lens.size(), D = pr.head_dim;
    const enum kl_dtype t = pr.dtype;
    int total_q = 0, pages = 0, max_q = 0, max_kv = 0;
    for (int b = 0; b < batch; b++) {
        total_q += pr.q_lens[b], max_q = std::max(max_q, pr.q_lens[b]), max_kv = std::max(max_kv, pr.kv_lens[b]);
        pages += (pr.kv_lens[b] + pr.page - 1) / pr.page;
    }
    const int num_pages = pages + 2;
    std::vector<int32_t> qo_indptr(batch + 1), kv_indptr(batch + 1), last(batch), indices(pages);
    std::vector<int> order(num_pages);
    for (int i = 0; i < num_pages; i++) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (int i = 0; i < pages; i++) indices[i] = order[i];
    for (int b = 0; b < batch; b++) {
        const int n = (pr.kv_lens[b] + pr.page - 1) / pr.page;
        qo_indptr[b + 1] = qo_indptr[b] + pr.q_lens[b];
        kv_indptr[b + 1] = kv_indptr[b] + n;
        last[b] = n ? pr.kv_lens[b] - (n - 1) * pr.page : 0;
    }
    const size_t nq = (size_t)total_q * pr.qo_heads * D, nc = (size_t)num_pages * pr.page * pr.kv_heads * D;
    const uint16_t nan16 = t == KL_BF16 ? 0x7FC0 : 0x7E00;
    std::vector<uint16_t> q(nq), k(nc), vv(nc), out(nq, nan16);
    std::vector<float> lse((size_t)total_q * pr.qo_heads, NAN);
    std::vector<double> q64(nq), k64(nc), v64(nc);
    for (size_t i = 0; i < nq; i++) q[i] = to16(t, normal(rng)), q64[i] = from16(t, q[i]);
    for (size_t i = 0; i < nc; i++) k[i] = to16(t, normal(rng)), k64[i] = from16(t, k[i]);
    for (size_t i = 0; i < nc; i++) vv[i] = to16(t, normal(rng)), v64[i] = from16(t, vv[i]);
    for (int b = 0; pr.quiet_rows && b < batch; b++)
        for (int i = 0; i < pr.q_lens[b]; i += 8)
            for (size_t e = (size_t)(qo_indptr[b] + i) * pr.qo_heads * D;
                 e < (size_t)(qo_indptr[b] + std::min(i + 4, pr.q_lens[b])) * pr.qo_heads * D; e++)
                q[e] = to16(t, (float)q64[e] / 64.f), q64[e] = from16(t, q[e]);
    for (int b = 0; pr.k_ramp != 0 && b < batch; b++)
        for (int j = 0; j < pr.kv_lens[b]; j++)
            for (size_t e = 0; e < (size_t)pr.kv_heads * D; e++) {
                const size_t at = ((size_t)indices[kv_indptr[b] + j / pr.page] * pr.page + j % pr.page) * pr.kv_heads * D + e;
                k[at] = to16(t, (float)k64[at] * (1.f + pr.k_ramp * (float)j)), k64[at] = from16(t, k[at]);
            }
    /* The slots of a request's last page past its keys hold NaN, as an uninitialised cache may: a kernel
     * whose P V reads them (0 x NaN = NaN) fails. The reference never reads them. */
    for (int b = 0; b < batch; b++) {
        const int n = kv_indptr[b + 1] - kv_indptr[b];
        if (n == 0) continue;
        for (int slot = last[b]; slot < pr.page; slot++)
            for (size_t e = 0; e < (size_t)pr.kv_heads * D; e++) {
                const size_t at = ((size_t)indices[kv_indptr[b] + n - 1] * pr.page + slot) * pr.kv_heads * D + e;
                k[at] = vv[at] = nan16;
            }
    }

    kl_attention_prefill_params p{};
    kl_prefill_trace trace{};
    p.q = q.data(), p.k_cache = k.data(), p.v_cache = vv.data(), p.qo_indptr = qo_indptr.data();
    p.kv_indptr = kv_indptr.data(), p.kv_indices = indices.data(), p.kv_last_page_len = last.data();
    p.out = out.data(), p.lse = lse.data(), p.batch = batch, p.total_q = total_q, p.num_qo_heads = pr.qo_heads;
    p.num_kv_heads = pr.kv_heads, p.head_dim = D, p.page_size = pr.page, p.num_pages = num_pages;
    p.max_q_len = max_q, p.sm_scale = 1.0f / std::sqrt((float)D), p.causal = pr.causal, p.dtype = t;
    p.trace = &trace;

    emu::clear_failure();
    emu::global_buffers_clear(); /* a copy from outside these fails */
    emu::global_buffer(q, "q"), emu::global_buffer(k, "k_cache"), emu::global_buffer(vv, "v_cache");
    emu::global_buffer(qo_indptr, "qo_indptr"), emu::global_buffer(kv_indptr, "kv_indptr");
    emu::global_buffer(indices, "kv_indices"), emu::global_buffer(last, "kv_last_page_len");
    emu::global_buffer(out, "out"), emu::global_buffer(lse, "lse");
    const cudaError_t rc = ((kl_attention_prefill_launch_fn)v.launch)(&p, nullptr);
    if (rc != cudaSuccess) {
        const std::string &why = emu::last_failure();
        if (why.empty()) return {false, "the launcher returned " + std::string(cudaGetErrorName(rc)), ""};
        const size_t nl = why.find('\n');
        return {false, why.substr(0, nl), nl == std::string::npos ? "" : why.substr(nl + 1)};
    }

    kl_attention_prefill_shape shape = {batch, total_q, pr.qo_heads, pr.kv_heads, D, pr.page, num_pages,
                                        qo_indptr.data(), kv_indptr.data(), indices.data(), last.data(),
                                        (double)p.sm_scale, pr.causal};
    std::vector<double> ref_out(nq), ref_lse(lse.size()), got_out(nq), got_lse(lse.size());
    kl_attention_prefill_reference(&shape, q64.data(), k64.data(), v64.data(), ref_out.data(), ref_lse.data());
    for (size_t i = 0; i < nq; i++) got_out[i] = from16(t, out[i]);
    for (size_t i = 0; i < lse.size(); i++) got_lse[i] = lse[i];

    /* The policy's arguments as module.c computes them: sm_scale max||q|| max||k|| over the keys the
     * requests attend, max|v| over the same, and the longest kv_len. */
    double qmax = 0, kmax = 0, vmax = 0;
    for (size_t r = 0; r < nq / D; r++) {
        double n2 = 0;
        for (int c = 0; c < D; c++) n2 += q64[r * D + c] * q64[r * D + c];
        qmax = std::max(qmax, n2);
    }
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < pr.kv_lens[b]; j++)
            for (int h = 0; h < pr.kv_heads; h++) {
                const size_t base =
                    (((size_t)indices[kv_indptr[b] + j / pr.page] * pr.page + j % pr.page) * pr.kv_heads + h) * D;
                double n2 = 0;
                for (int c = 0; c < D; c++) n2 += k64[base + c] * k64[base + c], vmax = std::max(vmax, std::fabs(v64[base + c]));
                kmax = std::max(kmax, n2);
            }
    const double logit = p.sm_scale * std::sqrt(qmax) * std::sqrt(kmax);
    kl_cmp c_out, c_lse;
    kl_compare(got_out.data(), ref_out.data(), (int64_t)nq,
               kl_policy_attention_out(t, D, max_kv, logit, vmax, (int64_t)pr.qo_heads * D), &c_out);
    kl_compare(got_lse.data(), ref_lse.data(), (int64_t)lse.size(), kl_policy_attention_lse(D, max_kv, logit), &c_lse);
    char s[160];
    snprintf(s, sizeof s, "out rel_l2 %.3g max_abs %.3g, lse rel_l2 %.3g max_abs %.3g", c_out.rel_l2, c_out.max_abs,
             c_lse.rel_l2, c_lse.max_abs);
    stats = s;

    verdict r{true, "", ""};
    for (auto [name, cmp, n] : {std::tuple{"out", &c_out, nq}, std::tuple{"lse", &c_lse, lse.size()}}) {
        if (cmp->pass || !r.pass) continue;
        r.pass = false;
        r.first = std::to_string(cmp->n_bad) + " of " + std::to_string(n) + " elements of " + name +
                  " outside the attention policy's bound (" + s + ")";
        char *buf = nullptr;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        kl_cmp_print(f, name, cmp);
        fclose(f);
        r.details = trim(buf);
        free(buf);
        long nonfinite = 0;
        for (size_t i = 0; i < nq; i++) nonfinite += !std::isfinite(got_out[i]);
        if (nonfinite)
            r.details += "\n" + std::to_string(nonfinite) +
                         " non-finite elements of out: unwritten rows, or poison (an operand read in flight, a stage read "
                         "after its hand-back) reaching the output";
    }
    if (r.pass && v.traced && trace.tiles > 0) {
        traced_cases++;
        std::string why;
        if (!trace_in_order(trace, v.overlapped, why)) r = {false, why, ""};
    }
    return r;
}

void print_verdict(const char *name, const problem &pr, const verdict &r, const std::string &stats)
{
    if (r.pass) printf("PASS %s %s: %s\n", name, describe(pr).c_str(), stats.c_str());
    else {
        printf("FAIL %s %s: %s\n", name, describe(pr).c_str(), r.first.c_str());
        if (!r.details.empty()) {
            std::string d = "    " + r.details;
            for (size_t at = 0; (at = d.find('\n', at)) != std::string::npos; at += 5) d.replace(at, 1, "\n    ");
            printf("%s\n", d.c_str());
        }
    }
    fflush(stdout);
}

/* Every problem on a variant; true when all pass. */
bool run_variant(const emu::variant &v, const std::vector<problem> &ps)
{
    traced_cases = 0;
    bool ok = true;
    for (const problem &pr : ps) {
        std::string stats;
        const verdict r = check(pr, v, stats);
        print_verdict(v.name.c_str(), pr, r, stats);
        ok &= r.pass;
    }
    if (ok && v.traced && traced_cases == 0) {
        printf("FAIL %s: no problem traced CTA 0 (params.trace ignored?)\n", v.name.c_str());
        ok = false;
    }
    return ok;
}

const emu::variant *find_variant(const std::string &name)
{
    for (const emu::variant &v : emu::variants())
        if (v.name == name) return &v;
    return nullptr;
}

/* A mutant in a child process (a planted bug may crash): the index of the first problem it fails and
 * that failure's first line, or -1 when it passes them all. */
int run_mutant(const emu::variant &m, const std::vector<problem> &ps, std::string &first)
{
    int fd[2];
    if (pipe(fd) != 0) return perror("pipe"), -2;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        int failed = -1;
        for (size_t i = 0; i < ps.size() && failed < 0; i++) {
            std::string stats;
            const verdict r = check(ps[i], m, stats);
            print_verdict(m.name.c_str(), ps[i], r, stats);
            if (!r.pass) failed = (int)i, first = r.first;
        }
        const std::string msg = std::to_string(failed) + "\n" + first;
        if (write(fd[1], msg.data(), msg.size()) < 0) _exit(3);
        _exit(0);
    }
    close(fd[1]);
    std::string msg;
    char buf[4096];
    for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) msg.append(buf, (size_t)n);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || msg.empty()) {
        first = "the emulator crashed (status " + std::to_string(status) + ")";
        return -2;
    }
    const size_t nl = msg.find('\n');
    first = msg.substr(nl + 1);
    return std::stoi(msg.substr(0, nl));
}

int usage(const char *why, FILE *to = stderr)
{
    fprintf(to, "prefill_emulator: %s\nusage: prefill_emulator [--full] [--problem N] [--schedule SEED] [NAME...]\n"
                    "       prefill_emulator --mutants [NAME...]\n       prefill_emulator --list\n"
                    "NAME: a variant's full name (v10_pingpong) or its number (v10), or a mutant's name\n"
                    "--schedule SEED: the threads run in the order of priorities drawn from SEED (emulator.h's\n"
                    "set_schedule) instead of the round robin; a mutant that names a schedule runs under its own\n", why);
    return 2;
}

} // namespace

/* The variants in number order, the mutants after them (registration follows gen.py's shards). */
void sort_variants()
{
    auto key = [](const emu::variant &v) {
        const int number = v.mutant_of.empty() && v.name[0] == 'v' ? atoi(v.name.c_str() + 1) : 1 << 20;
        return std::make_tuple(!v.mutant_of.empty(), number, v.name);
    };
    std::stable_sort(emu::variants().begin(), emu::variants().end(),
                     [&](const emu::variant &a, const emu::variant &b) { return key(a) < key(b); });
}

int main(int argc, char **argv)
{
    sort_variants();
    bool full = false, mutants = false, list = false;
    int only = -1;                      /* --problem N: that problem alone */
    unsigned long long schedule = 0;    /* --schedule SEED: 0 is the round robin */
    std::vector<const emu::variant *> chosen;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--full") full = true;
        else if (a == "--mutants") mutants = true;
        else if (a == "--list") list = true;
        else if (a == "--problem" && i + 1 < argc) only = atoi(argv[++i]);
        else if (a == "--schedule" && i + 1 < argc) {
            if (!emu::parse_schedule(argv[++i], schedule)) return usage("--schedule: not a whole number");
        }
        else if (a == "--help" || a == "-h") {
            usage("runs the tensor-core variants under emulation", stdout);
            return 0;
        } else if (a[0] == '-') return usage(("unknown option " + a).c_str());
        else {
            const emu::variant *v = find_variant(a);
            for (const emu::variant &w : emu::variants())
                if (!v && w.mutant_of.empty() && w.name.substr(0, w.name.find('_')) == a) v = &w;
            if (!v) return usage(("no variant or mutant named " + a).c_str());
            chosen.push_back(v);
        }
    }
    if (list) {
        for (const emu::variant &v : emu::variants())
            printf("%s%s%s\n", v.name.c_str(), v.mutant_of.empty() ? "" : " (mutant of ", v.mutant_of.empty() ? "" : (v.mutant_of + ")").c_str());
        return 0;
    }
    if (chosen.empty())
        for (const emu::variant &v : emu::variants())
            if (v.mutant_of.empty() != mutants) chosen.push_back(&v);
    std::vector<problem> ps = problems(full);
    if (only >= 0) {
        if (only >= (int)ps.size()) return usage("--problem: no such problem");
        ps = {ps[only]};
    }
    int passed = 0, failed = 0;
    if (!mutants) {
        emu::set_schedule(schedule);
        for (const emu::variant *v : chosen) (run_variant(*v, ps) ? passed : failed)++;
        printf("%d variants passed, %d failed\n", passed, failed);
        return failed != 0;
    }
    std::map<std::tuple<std::string, size_t, unsigned long long>, bool> base_passes; /* (variant, problem, schedule) */
    for (const emu::variant *m : chosen) {
        if (m->mutant_of.empty()) return usage((m->name + " is not a mutant").c_str());
        const unsigned long long seed = emu::schedule_of(*m, schedule);
        emu::set_schedule(seed); /* a mutant's own schedule first; its variant is judged under the same */
        std::string first;
        const int at = run_mutant(*m, ps, first);
        /* expect may name alternatives, " || " between them: a mutant whose first failure depends on the
         * host (mutants.py says where) is caught by any of them, and by nothing else */
        bool ok = false;
        for (size_t from = 0; at >= 0 && !ok; from += 4) {
            const size_t bar = m->expect.find(" || ", from);
            ok = first.find(m->expect.substr(from, bar - from)) != std::string::npos; /* npos - from: to the end */
            if (bar == std::string::npos) break;
            from = bar;
        }
        std::string why = at == -1 ? "passed every problem" : at == -2 ? first : "failed with: " + first;
        const emu::variant *base = find_variant(m->mutant_of);
        for (int i = 0; ok && i <= at; i++) { /* the failure is the mutation's: its variant passes there */
            auto key = std::make_tuple(m->mutant_of, (size_t)i, seed);
            if (!base_passes.count(key)) {
                std::string stats;
                const verdict r = check(ps[i], *base, stats);
                print_verdict(base->name.c_str(), ps[i], r, stats);
                base_passes[key] = r.pass;
            }
            if (!base_passes[key]) ok = false, why = m->mutant_of + " itself fails " + ps[i].label;
        }
        if (ok) printf("CAUGHT %s (%s): %s\n", m->name.c_str(), m->mutant_of.c_str(), first.c_str());
        else printf("MISSED %s (%s): %s; expected a failure with \"%s\"\n", m->name.c_str(), m->mutant_of.c_str(),
                    why.c_str(), m->expect.c_str());
        fflush(stdout);
        (ok ? passed : failed)++;
    }
    printf("%d mutants caught, %d missed\n", passed, failed);
    return failed != 0;
}
