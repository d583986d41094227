/* Runs attention_decode's tensor-core variant (its exact source, lab/emulate/gen.py's copy) on the CPU under
 * the emulation of lab/emulate/emulator.h, through its own launcher, and judges out and lse against the
 * float64 reference with the module's policy (lab/core/compare.c's attention rows, given what
 * lab/attention_decode/module.c gives them). Problems with one query per request and with draft tokens
 * (qo_indptr): q_len 1..8 mixed, q_len = kv_len, an empty request, page sizes 1, 3, 5 and 16, GQA 1 to 8,
 * head_dim 64/128/256, split requests whose last chunk ends before some draft tokens' limits. Each runs
 * twice on one workspace, its partials NaN before the first launch: both launches' outputs are judged,
 * and each must leave the merge counters at zero. One-query problems at page 1, 5 and 32 (tiles inside
 * a longer page) take both copy paths of the TMA variant (row gathers, page boxes). Cache slots past a
 * request's keys hold NaN, as do the outputs before the launch. Problems on an FP8 cache (e4m3 codes of N(0, 1) x 24,
 * one scale per kv head a factor of ten from the next, NaN codes past a request's keys; one with qo heads whose q spans
 * 1e-3 .. 1e5) run the FP8 variants; a variant SKIPs the problems it declines as the GPU suite does (FP8 caches and
 * draft tokens for the 16-bit variants, 16-bit caches for the FP8 one), and must run at least one. decode_emulator
 * [--problem N] [NAME...]   the variants named, or all of them decode_emulator --mutants [NAME...]       every planted
 * bug of mutants.py must fail with its expected message on a problem its variant passes decode_emulator --list the
 * variants and mutants built in */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_decode/attention_decode.h"
#include "driver_main.h"
#include "tc_headers.h"
extern "C" {
#include "compare.h"
#include "kernels/dtype.h"
#include "reference/attention_decode.h"
}

namespace {

struct problem {
    const char *label;
    enum kl_dtype dtype;
    int head_dim, qo_heads, kv_heads, page;
    std::vector<int> kv_lens, q_lens; /* q_lens empty: qo_indptr NULL, one query per request */
    unsigned seed;
    bool fp8 = false; /* caches of e4m3 codes, k_scale and v_scale set */
    bool q_spread = false; /* qo head h's q times 1e-3, 1, 3e4, 1e5 for h % 4: past fp16's range and far below it */
};

/* A ragged batch of `n` requests: 1 .. 150 keys, request 40 empty, request 50 of 700 keys. */
std::vector<int> ragged_lengths(int n)
{
    std::vector<int> lens(n);
    for (int i = 0; i < n; i++)
        lens[i] = i == 40 ? 0 : i == 50 ? 700 : (37 * i + 11) % 150 + 1;
    return lens;
}

const std::vector<problem> &problems()
{
    static const std::vector<problem> ps = {
        {"one query, GQA 4", KL_BF16, 128, 8, 2, 16, {37, 16, 100, 5, 0}, {}, 1},
        {"one query, split", KL_F16, 64, 8, 2, 16, {1500, 3, 700}, {}, 2},
        {"draft tokens 1..8, q_len = kv_len", KL_BF16, 128, 8, 2, 16, {37, 16, 60, 9, 100, 23, 50, 8},
         {1, 2, 3, 4, 5, 6, 7, 8}, 3},
        {"8 tokens x GQA 8: 64 rows", KL_BF16, 128, 16, 2, 16, {64, 200, 8}, {8, 8, 8}, 4},
        {"page 1, GQA 8", KL_F16, 64, 16, 2, 1, {33, 7, 5, 120}, {4, 7, 5, 2}, 5},
        {"MHA, an empty request", KL_F16, 64, 4, 4, 16, {17, 3, 0, 40}, {8, 3, 0, 1}, 6},
        {"head_dim 256", KL_BF16, 256, 16, 2, 16, {70, 9}, {3, 8}, 7},
        {"split, 642 = 5 x 128 + 2", KL_BF16, 64, 8, 2, 16, {1500, 642}, {4, 8}, 8},
        {"split, page 5", KL_BF16, 128, 8, 2, 5, {3000, 642, 6}, {4, 8, 6}, 9},
        {"GQA 3", KL_F16, 64, 6, 2, 16, {50, 17}, {7, 2}, 10},
        {"page 3: two warps, two tiles", KL_BF16, 128, 8, 2, 3, {40, 41}, {3, 2}, 11},
        {"Llama 32/8, 4 tokens, 8k keys", KL_BF16, 128, 32, 8, 16, {8192, 8190}, {4, 4}, 12},
        {"fp8, GQA 4, partial pages", KL_BF16, 128, 8, 2, 16, {37, 16, 100, 5, 0}, {}, 13, true},
        {"fp8, split, head_dim 64", KL_F16, 64, 8, 2, 16, {1500, 3, 700}, {}, 14, true},
        {"fp8, page 1, MHA", KL_BF16, 128, 4, 4, 1, {33, 7, 64}, {}, 15, true},
        {"fp8, GQA 8, page 5, head_dim 256", KL_BF16, 256, 16, 2, 5, {70, 9}, {}, 16, true},
        {"fp8, Llama 32/8, split", KL_BF16, 128, 32, 8, 16, {1200, 900}, {}, 17, true},
        {"one query, page 1, GQA 8", KL_BF16, 128, 16, 2, 1, {33, 7, 120}, {}, 18},
        {"one query, head_dim 256, page 5, split", KL_F16, 256, 8, 2, 5, {1300, 9}, {}, 19},
        {"one query, page 32, split", KL_BF16, 128, 8, 2, 32, {1000, 45, 16}, {}, 20},
        {"fp8, q heads 1e-3 .. 1e5", KL_BF16, 128, 8, 2, 16, {37, 300, 5}, {}, 18, true, true},
        /* 3 kv heads: the FP8 rungs that take several heads a CTA fall back to one */
        {"fp8, 3 kv heads, fp16, split", KL_F16, 128, 6, 3, 16, {700, 40}, {}, 21, true},
        {"one query, page 1, head_dim 64, split", KL_F16, 64, 8, 2, 1, {3000, 17}, {}, 21},
        {"one query, 34768 keys: 17 splits of <= 2048 (v8)", KL_BF16, 64, 4, 1, 16, {34768}, {}, 22},
        /* The same long request beside short ones, whose larger outputs dominate the batch's rel_l2:
         * only the per-request comparison sees an error in the long one. */
        {"one query, 34768 keys beside 8 short requests", KL_BF16, 64, 4, 1, 16, {34768, 3, 5, 2, 4, 3, 6, 2, 3}, {}, 23},
        /* 16 pages, a workspace of 4 splits: v15's even slices (2 pages over the emulation's 9 CTAs) would cut
         * the request into 8 pieces, so its slices widen to 8 pages (2 pieces). */
        {"one query, 16 pages, slices widened to the workspace", KL_BF16, 128, 4, 1, 16, {256}, {}, 24},
        /* One head a kv head at head_dim 256: a split's partial row (258 floats) is not a multiple of 16 bytes, so
         * v20 merges it with loads. */
        {"one query, MHA, head_dim 256, split", KL_F16, 256, 4, 4, 16, {3000}, {}, 25},
        /* Many short requests, an empty one and a long one past the first 32: the persistent variants' work
         * lists and the split plans on a ragged batch. */
        {"one query, 70 ragged requests", KL_BF16, 64, 8, 2, 16, ragged_lengths(70), {}, 26},
    };
    return ps;
}

bool check(const problem &pr, const emu::variant &variant, std::string &why);

/* Whether v takes FP8 caches (and only them). The ladder's FP8 rungs say so in their names; a variant
 * whose name does not (a learner's copy of an FP8 rung, `kernlab new-variant ... --from v14_fp8_...`) is
 * asked: it takes them when it runs the first FP8 problem. Asked once a variant. */
bool fp8_variant(const emu::variant &v)
{
    const std::string &n = v.mutant_of.empty() ? v.name : v.mutant_of;
    if (n.find("fp8") != std::string::npos) return true;
    static std::map<std::string, bool> asked;
    if (auto it = asked.find(n); it != asked.end()) return it->second;
    asked[n] = false; /* while asking, an FP8 problem it declines reads as another cache's */
    const auto probe = std::find_if(problems().begin(), problems().end(), [](const problem &pr) { return pr.fp8; });
    std::string why;
    const emu::variant *self = emu::find_variant(n);
    return asked[n] = probe != problems().end() && self && check(*probe, *self, why) && why.rfind("skip:", 0) != 0;
}

/* v9_fp8_tma_pages, v10_fp8_page_heads and v14_fp8_early_release read rows of 128 codes (one
 * 128-byte swizzle row): they decline head_dim 64; v14 holds a tile's codes in registers and declines
 * 256 too, as do v25_fp8_gatherers and v27_fp8_tile_gatherers, which keep v14's consumers. An FP8
 * variant whose name does not say so (a learner's copy of one of them) may decline any head_dim but 128. */
bool declines_head_dim(const problem &pr, const emu::variant &v)
{
    const std::string &n = v.mutant_of.empty() ? v.name : v.mutant_of;
    if (n == "v14_fp8_early_release" || n == "v25_fp8_gatherers" || n == "v27_fp8_tile_gatherers" ||
        (n.find("fp8") == std::string::npos && fp8_variant(v)))
        return pr.head_dim != 128;
    return pr.head_dim == 64 && (n == "v9_fp8_tma_pages" || n == "v10_fp8_page_heads");
}

uint16_t to16(enum kl_dtype t, float f) { return t == KL_BF16 ? kl_f32_to_bf16(f) : kl_f32_to_f16(f); }
double from16(enum kl_dtype t, uint16_t h) { return t == KL_BF16 ? kl_bf16_to_f32(h) : kl_f16_to_f32(h); }

std::string trace_fault(const kl_decode_trace &t, const emu::variant &v);

/* PASS, or FAIL and the first line of why (stats: both outputs' errors). */
bool check(const problem &pr, const emu::variant &variant, std::string &why)
{
    std::mt19937 rng(pr.seed);
    std::normal_distribution<float> normal;
    const int batch = (int)pr.kv_lens.size(), D = pr.head_dim;
    const enum kl_dtype t = pr.dtype;
    const bool multi = !pr.q_lens.empty();
    int rows = 0, pages = 0, max_q = 1, max_kv = 0;
    for (int b = 0; b < batch; b++) {
        const int q = multi ? pr.q_lens[b] : 1;
        rows += q, max_q = std::max(max_q, q), max_kv = std::max(max_kv, pr.kv_lens[b]);
        pages += (pr.kv_lens[b] + pr.page - 1) / pr.page;
    }
    const int num_pages = pages + 2;
    std::vector<int32_t> qo(batch + 1), kv_indptr(batch + 1), last(batch), indices(std::max(pages, 1));
    std::vector<int> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int i = 0; i < pages; i++) indices[i] = order[i];
    for (int b = 0; b < batch; b++) {
        const int n = (pr.kv_lens[b] + pr.page - 1) / pr.page;
        qo[b + 1] = qo[b] + (multi ? pr.q_lens[b] : 1);
        kv_indptr[b + 1] = kv_indptr[b] + n;
        last[b] = n ? pr.kv_lens[b] - (n - 1) * pr.page : 0;
    }
    const size_t nq = (size_t)rows * pr.qo_heads * D, nc = (size_t)num_pages * pr.page * pr.kv_heads * D;
    const uint16_t nan16 = t == KL_BF16 ? 0x7FC0 : 0x7E00;
    std::vector<uint16_t> q(nq), k(nc), v(nc), out(nq);
    std::vector<float> lse((size_t)rows * pr.qo_heads);
    std::vector<double> q64(nq), k64(nc), v64(nc);
    static const float spread[4] = {1e-3f, 1, 3e4f, 1e5f};
    for (size_t i = 0; i < nq; i++)
        q[i] = to16(t, normal(rng) * (pr.q_spread ? spread[i / D % pr.qo_heads % 4] : 1)), q64[i] = from16(t, q[i]);
    std::vector<uint8_t> k8(pr.fp8 ? nc : 0), v8(pr.fp8 ? nc : 0);
    std::vector<float> k_scale(pr.kv_heads), v_scale(pr.kv_heads);
    if (pr.fp8) { /* codes of N(0, 1) x 24; a factor of ten between neighbouring kv heads' scales */
        for (int g = 0; g < pr.kv_heads; g++) {
            k_scale[g] = (float)(0.03 * (1 + 0.37 * g) * (g % 2 ? 0.1 : 1) / 24);
            v_scale[g] = (float)(0.05 * (1 + 0.61 * g) * (g % 2 ? 1 : 0.1) / 24);
        }
        for (size_t i = 0; i < nc; i++)
            k8[i] = kl_f32_to_e4m3(24 * normal(rng)), k64[i] = (double)kl_e4m3_to_f32(k8[i]) * k_scale[i / D % pr.kv_heads];
        for (size_t i = 0; i < nc; i++)
            v8[i] = kl_f32_to_e4m3(24 * normal(rng)), v64[i] = (double)kl_e4m3_to_f32(v8[i]) * v_scale[i / D % pr.kv_heads];
    } else {
        for (size_t i = 0; i < nc; i++) k[i] = to16(t, normal(rng)), k64[i] = from16(t, k[i]);
        for (size_t i = 0; i < nc; i++) v[i] = to16(t, normal(rng)), v64[i] = from16(t, v[i]);
    }
    for (int b = 0; b < batch; b++) { /* NaN past the keys of each last page: 0 x NaN shows a read of them */
        const int n = kv_indptr[b + 1] - kv_indptr[b];
        for (int slot = last[b]; n && slot < pr.page; slot++)
            for (size_t e = 0; e < (size_t)pr.kv_heads * D; e++) {
                const size_t at = ((size_t)indices[kv_indptr[b] + n - 1] * pr.page + slot) * pr.kv_heads * D + e;
                k[at] = v[at] = nan16;
                if (pr.fp8) k8[at] = 0x7F, v8[at] = 0xFF; /* NaN codes */
            }
    }
    kl_attention_decode_params p{};
    p.q = q.data(), p.k_cache = k.data(), p.v_cache = v.data(), p.kv_indptr = kv_indptr.data();
    p.kv_indices = indices.data(), p.kv_last_page_len = last.data(), p.out = out.data(), p.lse = lse.data();
    p.batch = batch, p.num_qo_heads = pr.qo_heads, p.num_kv_heads = pr.kv_heads, p.head_dim = D;
    p.page_size = pr.page, p.num_pages = num_pages, p.max_kv_len = max_kv, p.sm_scale = 1.0f / std::sqrt((float)D);
    p.dtype = t;
    if (multi) p.qo_indptr = qo.data(), p.max_q_len = max_q;
    if (pr.fp8) p.k_cache = k8.data(), p.v_cache = v8.data(), p.k_scale = k_scale.data(), p.v_scale = v_scale.data();
    p.workspace_bytes = kl_attention_decode_workspace_bytes(&p, kl_attention_decode_sms());
    /* The merge counters zeroed once (the contract), the partials NaN: a merge that reads a partial no split
     * of this launch wrote fails in the first launch, where the second would find the first's. */
    const size_t counter_bytes = kl_attention_decode_workspace_for(&p, 0);
    std::vector<unsigned char> workspace(p.workspace_bytes + 16, 0xFF);
    std::fill(workspace.begin(), workspace.begin() + (std::ptrdiff_t)counter_bytes, 0);
    p.workspace = workspace.data();
    emu::global_buffers_clear(); /* a copy from outside these fails */
    if (pr.fp8) emu::global_buffer(k8, "k_cache"), emu::global_buffer(v8, "v_cache");
    else emu::global_buffer(k, "k_cache"), emu::global_buffer(v, "v_cache");
    emu::global_buffer(q, "q"), emu::global_buffer(qo, "qo_indptr"), emu::global_buffer(kv_indptr, "kv_indptr");
    emu::global_buffer(indices, "kv_indices"), emu::global_buffer(last, "kv_last_page_len");
    emu::global_buffer(out, "out"), emu::global_buffer(lse, "lse"), emu::global_buffer(workspace, "workspace");
    emu::global_buffer(k_scale, "k_scale"), emu::global_buffer(v_scale, "v_scale");

    std::vector<double> want_out(nq), want_lse(lse.size()), got_out(nq);
    if (pr.fp8)
        kl_attention_decode_reference_fp8(q64.data(), k8.data(), v8.data(), k_scale.data(), v_scale.data(), num_pages,
                                          kv_indptr.data(), indices.data(), last.data(), batch, pr.qo_heads,
                                          pr.kv_heads, D, pr.page, p.sm_scale, want_out.data(), want_lse.data());
    else
        kl_attention_decode_reference_multi(q64.data(), k64.data(), v64.data(), multi ? qo.data() : nullptr,
                                            kv_indptr.data(), indices.data(), last.data(), batch, pr.qo_heads,
                                            pr.kv_heads, D, pr.page, p.sm_scale, want_out.data(), want_lse.data());
    /* The policy's arguments as module.c computes them (kl_attention_decode_bounds): sm_scale times the
     * largest |q| and |k| (over the attended keys), and the largest |v| there. */
    auto norm = [D](const double *x) { return std::sqrt(std::inner_product(x, x + D, x, 0.0)); };
    double q_norm = 0, k_norm = 0, v_max = 0;
    for (size_t r = 0; r < nq; r += D) q_norm = std::max(q_norm, norm(&q64[r]));
    const size_t token = (size_t)pr.kv_heads * D; /* elements of one token's row of either cache */
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < pr.kv_lens[b]; j++) {
            const size_t row = ((size_t)indices[kv_indptr[b] + j / pr.page] * pr.page + j % pr.page) * token;
            for (size_t at = row; at < row + token; at += D) k_norm = std::max(k_norm, norm(&k64[at]));
            for (size_t at = row; at < row + token; at++) v_max = std::max(v_max, std::fabs(v64[at]));
        }
    const double logit = p.sm_scale * q_norm * k_norm;

    /* Two launches on one workspace; each must leave the merge counters at zero and compute out and lse
     * within the policy. The second also asks for the CTAs' timeline (params.trace), which the variants
     * that record one fill. */
    static kl_decode_trace trace;
    memset(&trace, 0, sizeof trace);
    for (int launch = 0; launch < 2; launch++) {
        std::fill(out.begin(), out.end(), nan16), std::fill(lse.begin(), lse.end(), NAN);
        p.trace = launch == 1 ? &trace : nullptr;
        emu::clear_failure();
        const cudaError_t rc = ((kl_attention_decode_launch_fn)variant.launch)(&p, nullptr);
        if (rc == cudaErrorNotSupported && emu::last_failure().empty() &&
            (multi || pr.fp8 != fp8_variant(variant) || declines_head_dim(pr, variant))) {
            why = pr.fp8 != fp8_variant(variant) ? "skip: not this variant's cache"
                  : multi                        ? "skip: the variant takes one query token per request"
                                                 : "skip: the variant declines this head_dim";
            return true; /* as the GPU suite SKIPs it */
        }
        if (rc != cudaSuccess) {
            why = emu::last_failure().empty() ? "the launcher returned " + std::string(cudaGetErrorName(rc))
                                              : emu::last_failure().substr(0, emu::last_failure().find('\n'));
            return false;
        }
        const std::string nth = launch == 0 ? "the first launch" : "the second launch";
        for (size_t i = 0; i < counter_bytes; i++)
            if (workspace[i]) {
                why = nth + " left a merge counter at " + std::to_string(reinterpret_cast<const unsigned *>(
                                                              workspace.data())[i / sizeof(unsigned)]) +
                      ", not zero (counter " + std::to_string(i / sizeof(unsigned)) + ")";
                return false;
            }
        for (size_t i = 0; i < nq; i++) got_out[i] = from16(t, out[i]);
        const std::vector<double> got_lse(lse.begin(), lse.end());
        kl_cmp c_out, c_lse;
        kl_compare(got_out.data(), want_out.data(), (int64_t)nq,
                   kl_policy_attention_out(t, D, max_kv, logit, v_max, (int64_t)pr.qo_heads * D), &c_out);
        kl_compare(got_lse.data(), want_lse.data(), (int64_t)lse.size(), kl_policy_attention_lse(D, max_kv, logit),
                   &c_lse);
        char s[200];
        snprintf(s, sizeof s, "out rel_l2 %.3g max_abs %.3g, lse rel_l2 %.3g max_abs %.3g", c_out.rel_l2,
                 c_out.max_abs, c_lse.rel_l2, c_lse.max_abs);
        why = s;
        if (!c_out.pass || !c_lse.pass) {
            const kl_cmp &bad = c_out.pass ? c_lse : c_out;
            why = std::to_string(bad.n_bad) + " elements of " + (c_out.pass ? "lse" : "out") +
                  " outside the attention policy's bound in " + nth + " (" + s + ")";
            return false;
        }
    }
    const std::string fault = trace_fault(trace, variant);
    if (!fault.empty()) why = fault;
    return fault.empty();
}

/* What is wrong with a launch's timeline, or "": a CTA's events out of order, or a CTA that ran its key
 * loop without stamping its first tile and its end; the variants that record timelines (v20_bulk_merge,
 * v21_merge_tree, v32_cluster_tail) must have recorded one. */
std::string trace_fault(const kl_decode_trace &t, const emu::variant &v)
{
    const std::string &name = v.mutant_of.empty() ? v.name : v.mutant_of;
    const bool records = name == "v20_bulk_merge" || name == "v21_merge_tree" || name == "v32_cluster_tail";
    bool any = false;
    for (int c = 0; c < KL_DECODE_TRACE_CTAS; c++) {
        const unsigned long long *a = t.at[c];
        if (!a[KL_DECODE_START]) continue;
        any = true;
        const std::string cta = "timeline: CTA " + std::to_string(c) + " ";
        if (!a[KL_DECODE_RELEASED] || a[KL_DECODE_RELEASED] < a[KL_DECODE_START])
            return cta + "has no release from its PDL wait after its start";
        if (!a[KL_DECODE_LOOP_DONE]) continue; /* a CTA with no keys */
        if (!a[KL_DECODE_FIRST_TILE] || !a[KL_DECODE_END])
            return cta + "ran its key loop without stamping its first tile and its end";
        if (a[KL_DECODE_FIRST_TILE] < a[KL_DECODE_RELEASED] || a[KL_DECODE_LOOP_DONE] < a[KL_DECODE_FIRST_TILE] ||
            a[KL_DECODE_END] < a[KL_DECODE_LOOP_DONE])
            return cta + "stamped its events out of order";
    }
    if (records && !any) return "timeline: params.trace was set and no CTA recorded its start";
    return "";
}

std::string describe(const problem &pr)
{
    std::string lens;
    for (size_t b = 0; b < pr.kv_lens.size(); b++)
        lens += (b ? "/" : "") + (pr.q_lens.empty() ? "" : std::to_string(pr.q_lens[b]) + ":") +
                std::to_string(pr.kv_lens[b]);
    char s[256];
    snprintf(s, sizeof s, "%s (head_dim %d %s%s, heads %d/%d, page %d, %s %s)", pr.label, pr.head_dim,
             kl_dtype_name(pr.dtype), pr.fp8 ? ", e4m3 cache" : "", pr.qo_heads, pr.kv_heads, pr.page, pr.q_lens.empty() ? "kv" : "q:kv",
             lens.c_str());
    return s;
}

} // namespace

int main(int argc, char **argv)
{
    const emu::driver d{"decode_emulator", problems().size(),
                        [](size_t i, const emu::variant &v, std::string &why) { return check(problems()[i], v, why); },
                        [](size_t i) { return describe(problems()[i]); }};
    return emu::driver_main(d, argc, argv);
}
