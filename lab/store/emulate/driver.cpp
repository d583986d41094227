/* Runs store's fused family (v4_rope_quant_store, v5_tile_inflight, v6_bulk_ring, v7_token_walk: their exact
 * source, lab/emulate/gen.py's copy) on the CPU under the emulation of lab/emulate/emulator.h, each through its
 * own launcher, and judges its three outputs as the module judges them (lab/store/fused.c): the K and V caches
 * code by code under the e4m3 policy (lab/core/compare.c: the float64 value before rounding and the slack of
 * its float32 computation, from reference/store.c), q_out under its dtype's row. The problems take every path
 * of the family: more tokens than v6 hands to v5 (256), so its ring runs with more tokens a block than stages,
 * and v5's token tiles; v7's groups walk several tokens each (the emulated device's 3 SMs hold fewer groups
 * than there are tokens), so its loads a token ahead are checked past a group's first two tokens; a decode
 * batch (v6 to v5 to v4's programmatic launch); shapes without whole 16-byte chunks
 * (v4's one element a thread). Neox and interleaved rotary, partial spans, bf16 and fp16, GQA 2 to 8, K values
 * past e4m3's range (a kv head's scale small enough to saturate), positions outside the table (left
 * unrotated), negative slots (skipped) and a slot past the cache (skipped, its q still written). Cache codes a
 * token does not own must keep their value; q_out starts as NaN.
 *   store_emulator [--problem N] [NAME...]   the variants named, or all of them
 *   store_emulator --mutants [NAME...]       every planted bug of mutants.py must fail with its expected
 *                                            message on a problem its variant passes
 *   store_emulator --list                    the variants and mutants built in */
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/store/store.h"
#include "driver_main.h"
#include "tc_headers.h"
extern "C" {
#include "compare.h"
#include "kernels/dtype.h"
#include "reference/store.h"
}

namespace {

struct problem {
    const char *label;
    enum kl_dtype dtype;
    int head_dim, qo_heads, kv_heads, rotary_dim;
    bool neox;
    int tokens, num_slots;
    unsigned seed;
};

const std::vector<problem> &problems()
{
    static const std::vector<problem> ps = {
        {"neox, Llama-like GQA 2", KL_BF16, 128, 4, 2, 128, true, 600, 640, 1},
        {"interleaved, partial rotary 32 of 64", KL_F16, 64, 8, 2, 32, false, 400, 512, 2},
        {"neox, partial rotary 64 of 128, GQA 8", KL_BF16, 128, 8, 1, 64, true, 520, 600, 3},
        /* an odd head count (3 q + 3 k + 3 v): v7's last slice owns one head (a k head), not two; 9 chunks */
        {"interleaved, partial rotary 48 of 72, 9 heads (3/3)", KL_F16, 72, 3, 3, 48, false, 700, 800, 7},
        /* v6 hands these to v5 (256 tokens or fewer), which hands a decode batch to v4's launcher */
        {"decode batch, GQA 4", KL_BF16, 128, 8, 2, 128, true, 64, 256, 4},
        /* no whole 16-byte chunks (interleaved rotary 36; head_dim 100): v4 runs one element a thread */
        {"interleaved, rotary 36 of 80: one element a thread", KL_F16, 80, 4, 2, 36, false, 300, 320, 5},
        {"head_dim 100, neox: one element a thread", KL_BF16, 100, 4, 1, 100, true, 270, 300, 6},
    };
    return ps;
}

constexpr int kMaxPos = 64;

uint16_t to16(enum kl_dtype t, float f) { return t == KL_BF16 ? kl_f32_to_bf16(f) : kl_f32_to_f16(f); }
double from16(enum kl_dtype t, uint16_t h) { return t == KL_BF16 ? kl_bf16_to_f32(h) : kl_f16_to_f32(h); }

/* PASS, or FAIL and the first line of why. */
bool check(const problem &pr, const emu::variant &variant, std::string &why)
{
    std::mt19937 rng(pr.seed);
    std::normal_distribution<float> normal;
    const enum kl_dtype t = pr.dtype;
    const int D = pr.head_dim, heads = pr.qo_heads + 2 * pr.kv_heads, T = pr.tokens;
    const size_t nx = (size_t)T * heads * D, nq = (size_t)T * pr.qo_heads * D;
    const size_t nc = (size_t)pr.num_slots * pr.kv_heads * D;
    std::vector<uint16_t> qkv(nx), q_out(nq);
    std::vector<double> qkv64(nx);
    for (size_t i = 0; i < nx; i++) qkv[i] = to16(t, 2 * normal(rng)), qkv64[i] = from16(t, qkv[i]);
    /* positions: random rows of the table, one past it and one negative (both left unrotated) */
    std::vector<int64_t> positions(T), slots(T);
    for (int i = 0; i < T; i++) positions[i] = (int64_t)(rng() % kMaxPos);
    positions[5] = kMaxPos, positions[9] = -1;
    /* slots: distinct cache rows, every 37th token skipped (-1), one past the cache */
    std::vector<int64_t> rows(pr.num_slots);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    for (int i = 0; i < T; i++) slots[i] = i % 37 == 3 ? -1 : rows[i];
    slots[T / 2] = pr.num_slots;
    std::vector<float> cos_sin((size_t)kMaxPos * pr.rotary_dim);
    std::vector<double> cos_sin64(cos_sin.size());
    const int half = pr.rotary_dim / 2;
    for (int pos = 0; pos < kMaxPos; pos++)
        for (int i = 0; i < half; i++) {
            const double angle = pos * std::pow(10000.0, -2.0 * i / pr.rotary_dim);
            cos_sin[(size_t)pos * pr.rotary_dim + i] = (float)std::cos(angle);
            cos_sin[(size_t)pos * pr.rotary_dim + half + i] = (float)std::sin(angle);
        }
    for (size_t i = 0; i < cos_sin.size(); i++) cos_sin64[i] = cos_sin[i];
    /* scales: kv head 0's K small enough that |k| / scale passes 448 (saturation) */
    std::vector<float> k_scale(pr.kv_heads), v_scale(pr.kv_heads);
    std::vector<double> k_scale64(pr.kv_heads), v_scale64(pr.kv_heads);
    for (int g = 0; g < pr.kv_heads; g++) {
        k_scale[g] = g == 0 ? 0.01f : 0.02f * (1 + g), v_scale[g] = 0.03f / (1 + g);
        k_scale64[g] = k_scale[g], v_scale64[g] = v_scale[g];
    }
    /* caches: finite codes that differ from element to element, so a stray store shows */
    std::vector<uint8_t> k_cache(nc), v_cache(nc);
    for (size_t i = 0; i < nc; i++) k_cache[i] = (uint8_t)(i * 7 % 120), v_cache[i] = (uint8_t)(128 + i * 5 % 120);
    std::vector<uint8_t> k_want(k_cache), v_want(v_cache);
    std::fill(q_out.begin(), q_out.end(), t == KL_BF16 ? 0x7FC0 : 0x7E00);

    kl_store_params p{};
    p.fused = true, p.dtype = t, p.qkv = qkv.data(), p.q_out = q_out.data(), p.positions = positions.data();
    p.slots = slots.data(), p.cos_sin_cache = cos_sin.data(), p.k_scale = k_scale.data(), p.v_scale = v_scale.data();
    p.k_cache = k_cache.data(), p.v_cache = v_cache.data(), p.num_tokens = T, p.num_qo_heads = pr.qo_heads;
    p.num_kv_heads = pr.kv_heads, p.head_dim = D, p.num_slots = pr.num_slots, p.rotary_dim = pr.rotary_dim;
    p.max_pos = kMaxPos, p.is_neox = pr.neox;
    emu::clear_failure();
    const cudaError_t rc = ((kl_store_launch_fn)variant.launch)(&p, nullptr);
    if (rc != cudaSuccess) {
        why = emu::last_failure().empty() ? "the launcher returned " + std::string(cudaGetErrorName(rc))
                                          : emu::last_failure().substr(0, emu::last_failure().find('\n'));
        return false;
    }

    /* the reference, and the e4m3 policy's arrays, as lab/store/fused.c makes them */
    std::vector<double> q_ref(nq), k_pre(nc), v_pre(nc), k_terms(nc, 0), v_terms(nc, 0);
    for (size_t i = 0; i < nc; i++) k_pre[i] = kl_e4m3_to_f32(k_want[i]), v_pre[i] = kl_e4m3_to_f32(v_want[i]);
    kl_store_rope_quant a{};
    a.num_tokens = T, a.num_qo_heads = pr.qo_heads, a.num_kv_heads = pr.kv_heads, a.head_dim = D;
    a.rotary_dim = pr.rotary_dim, a.max_pos = kMaxPos, a.num_slots = pr.num_slots, a.is_neox = pr.neox;
    a.qkv = qkv64.data(), a.positions = positions.data(), a.slots = slots.data(), a.cos_sin_cache = cos_sin64.data();
    a.k_scale = k_scale64.data(), a.v_scale = v_scale64.data();
    kl_store_rope_quant_reference(&a, q_ref.data(), k_want.data(), v_want.data(), k_pre.data(), v_pre.data(),
                                  k_terms.data(), v_terms.data());
    std::vector<double> k_slack(nc), v_slack(nc), got(nc), want(nc), q_got(nq);
    for (size_t i = 0; i < nc; i++) k_slack[i] = kl_e4m3_slack(k_terms[i]), v_slack[i] = kl_e4m3_slack(v_terms[i]);
    kl_cmp c[3];
    for (size_t i = 0; i < nc; i++) got[i] = kl_e4m3_to_f32(k_cache[i]), want[i] = kl_e4m3_to_f32(k_want[i]);
    kl_compare(got.data(), want.data(), (int64_t)nc, kl_policy_e4m3(k_pre.data(), k_slack.data()), &c[0]);
    for (size_t i = 0; i < nc; i++) got[i] = kl_e4m3_to_f32(v_cache[i]), want[i] = kl_e4m3_to_f32(v_want[i]);
    kl_compare(got.data(), want.data(), (int64_t)nc, kl_policy_e4m3(v_pre.data(), v_slack.data()), &c[1]);
    for (size_t i = 0; i < nq; i++) q_got[i] = from16(t, q_out[i]);
    kl_compare(q_got.data(), q_ref.data(), (int64_t)nq, kl_policy_for(t, false), &c[2]);
    static const char *const names[3] = {"k_cache", "v_cache", "q_out"};
    char s[200];
    snprintf(s, sizeof s, "k_cache max_abs %.3g, v_cache max_abs %.3g, q_out rel_l2 %.3g max_abs %.3g", c[0].max_abs,
             c[1].max_abs, c[2].rel_l2, c[2].max_abs);
    why = s;
    for (int o = 0; o < 3; o++)
        if (!c[o].pass) {
            why = std::to_string(c[o].n_bad) + " elements of " + names[o] + " outside the " +
                  (o < 2 ? "e4m3 policy" : "dtype's policy") + " (" + s + ")";
            return false;
        }
    return true;
}

std::string describe(const problem &pr)
{
    char s[256];
    snprintf(s, sizeof s, "%s (head_dim %d %s, heads %d/%d, rotary %d %s, %d tokens, %d slots)", pr.label,
             pr.head_dim, kl_dtype_name(pr.dtype), pr.qo_heads, pr.kv_heads, pr.rotary_dim,
             pr.neox ? "neox" : "interleaved", pr.tokens, pr.num_slots);
    return s;
}

} // namespace

int main(int argc, char **argv)
{
    const emu::driver d{"store_emulator", problems().size(),
                        [](size_t i, const emu::variant &v, std::string &why) { return check(problems()[i], v, why); },
                        [](size_t i) { return describe(problems()[i]); }};
    return emu::driver_main(d, argc, argv);
}
