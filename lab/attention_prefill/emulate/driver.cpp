/* Runs the tensor-core attention_prefill kernels (v2..v10, their exact source through gen.py) on the
 * CPU under emulation (shim.h) and compares them with the float64 reference: a check of their
 * indexing, masking, paging, pipelining order, barrier protocol and fragment and shared-memory
 * layouts that needs no GPU. v2..v6 are launched here; v7 and up through their own launchers.
 *   prefill_emulator [--full] [v2 v3 ...]      (default: every variant on the quick problems)
 * Each problem gets fresh random bf16/fp16 inputs, a shuffled page table with spare pages, and
 * shared memory filled with garbage before each CTA. The bound is loose (rel_l2 < 2^-7 for bf16,
 * 2^-9 for fp16; the real policy is the GPU tests'): this catches wrong indices, not rounding. */
#include <cstdio>
#include <random>
#include <string>

#include "kernels_emu.h"
extern "C" {
#include "reference/attention_prefill.h"
}

thread_local emu_dim3 emu_threadIdx, emu_blockIdx;
emu_dim3 emu_gridDim;
thread_local emu::cta *emu::g_cta;

/* Runs kernel() as every CTA of the grid, 128 threads each (v2..v6). */
template <class F> static void run_grid(unsigned gx, unsigned gy, unsigned gz, size_t smem, F kernel)
{
    emu::run_grid(gx, gy, gz, 128, smem, kernel);
}

struct problem {
    int qo_heads, kv_heads, page;
    bool causal;
    std::vector<int> q_lens, kv_lens;
};

template <typename T> static T from_float(float f)
{
    if constexpr (std::is_same<T, __nv_bfloat16>::value) return __float2bfloat16_rn(f);
    else return __float2half_rn(f);
}
template <typename T> static float to_float(T v)
{
    if constexpr (std::is_same<T, __nv_bfloat16>::value) return __bfloat162float(v);
    else return __half2float(v);
}

/* The trace of CTA 0 (v8, v9, v10): every key tile's events present and in the order the kernel passes them
 * (K ready, S done, softmax done, P V done; v10 finishes P_j V_j only after the softmax of tile j + 1).
 * tiles 0: CTA 0 had no rows (v8's block 0 is request 0's last tile, past a shorter request's rows). */
static int traced_cases; /* of the current variant: at least one must have traced CTA 0 */
static bool trace_in_order(const kl_prefill_trace &t, bool overlapped)
{
    const int n = std::min(t.tiles, KL_PREFILL_TRACE_TILES);
    if (t.tiles == 0) return true;
    traced_cases++;
    bool ok = t.start > 0;
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < n; j++) {
            ok &= t.issued[j] >= t.start && t.k_ready[c][j] >= t.start;
            ok &= t.k_ready[c][j] <= t.s_done[c][j] && t.s_done[c][j] <= t.softmax_done[c][j];
            ok &= t.softmax_done[c][j] <= t.pv_done[c][j] && t.pv_done[c][j] <= t.end[c];
            if (overlapped && j + 1 < n) ok &= t.softmax_done[c][j + 1] <= t.pv_done[c][j];
        }
    if (!ok) printf("FAIL: the trace of CTA 0 is missing events or out of order (%d tiles)\n", t.tiles);
    return ok;
}

template <typename T, int D> static bool check(const problem &pr, const std::string &variant, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    const int batch = (int)pr.q_lens.size();
    int total_q = 0, pages = 0, max_q = 0;
    for (int b = 0; b < batch; b++) {
        total_q += pr.q_lens[b], max_q = std::max(max_q, pr.q_lens[b]);
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
    std::vector<T> q(nq), k(nc), v(nc), out(nq, from_float<T>(NAN));
    std::vector<float> lse((size_t)total_q * pr.qo_heads, NAN);
    std::vector<double> q64(nq), k64(nc), v64(nc);
    for (size_t i = 0; i < nq; i++) q[i] = from_float<T>(normal(rng)), q64[i] = to_float(q[i]);
    for (size_t i = 0; i < nc; i++) k[i] = from_float<T>(normal(rng)), k64[i] = to_float(k[i]);
    for (size_t i = 0; i < nc; i++) v[i] = from_float<T>(normal(rng)), v64[i] = to_float(v[i]);
    /* The slots of a request's last page past its keys hold NaN, as an uninitialised cache may: a kernel
     * whose P V reads them (0 x NaN = NaN) fails. The reference never reads them. */
    for (int b = 0; b < batch; b++) {
        const int n = kv_indptr[b + 1] - kv_indptr[b];
        if (n == 0) continue;
        for (int slot = last[b]; slot < pr.page; slot++)
            for (size_t e = 0; e < (size_t)pr.kv_heads * D; e++) {
                const size_t at = ((size_t)indices[kv_indptr[b] + n - 1] * pr.page + slot) * pr.kv_heads * D + e;
                k[at] = v[at] = from_float<T>(NAN);
            }
    }

    kl_attention_prefill_params p{};
    kl_prefill_trace trace{};
    p.q = q.data(), p.k_cache = k.data(), p.v_cache = v.data(), p.qo_indptr = qo_indptr.data();
    p.kv_indptr = kv_indptr.data(), p.kv_indices = indices.data(), p.kv_last_page_len = last.data();
    p.out = out.data(), p.lse = lse.data(), p.batch = batch, p.total_q = total_q, p.num_qo_heads = pr.qo_heads;
    p.num_kv_heads = pr.kv_heads, p.head_dim = D, p.page_size = pr.page, p.num_pages = num_pages;
    p.max_q_len = max_q, p.sm_scale = 1.0f / std::sqrt((float)D), p.causal = pr.causal;
    p.dtype = std::is_same<T, __nv_bfloat16>::value ? KL_BF16 : KL_F16;

    /* The grids and shared-memory sizes of the launchers. */
    using S = kl::mma::tile_shape<D>;
    const auto page = kl::prefill::make_fast_div((uint32_t)pr.page);
    const int group = pr.qo_heads / pr.kv_heads;
    const size_t smem_one = (size_t)(S::kBM + 2 * S::kBN) * D * 2;
    const size_t smem_two = (size_t)(S::kBM + 4 * S::kBN) * D * 2 + 2 * S::kBN * sizeof(int32_t);
    const unsigned tiles = (max_q + S::kBM - 1) / S::kBM, packed = (max_q * group + S::kBM - 1) / S::kBM;
    const unsigned qo = pr.qo_heads, kv = pr.kv_heads, nb = batch;
    if (variant == "v2") run_grid(tiles, qo, nb, smem_one, [&] { emu_v2_mma::prefill_v2<T, D>(p, page); });
    else if (variant == "v3") run_grid(tiles, qo, nb, smem_one, [&] { emu_v3_swizzle::prefill_v3<T, D>(p, page); });
    else if (variant == "v4") run_grid(tiles, qo, nb, smem_two, [&] { emu_v4_cp_async::prefill_v4<T, D>(p, page); });
    else if (variant == "v5")
        run_grid(qo, nb, tiles, smem_two, [&] { emu_v5_longest_first::prefill_v5<T, D>(p, page); });
    else if (variant == "v6")
        run_grid(kv, nb, packed, smem_two, [&] {
            emu_v6_gqa_packed::prefill_v6<T, D>(p, page, kl::prefill::make_fast_div((uint32_t)group));
        });
    else {
        p.trace = &trace; /* the warp-specialized variants record CTA 0's events: checked below */
        cudaError_t rc = cudaErrorInvalidValue;
        if (variant == "v7") rc = emu_v7_wgmma::launch(&p, nullptr);
        else if (variant == "v8") rc = emu_v8_warp_specialized::launch(&p, nullptr);
        else if (variant == "v9") rc = emu_v9_multicast::launch(&p, nullptr);
        else if (variant == "v10") rc = emu_v10_pingpong::launch(&p, nullptr);
        else fprintf(stderr, "no variant %s\n", variant.c_str());
        if (rc != cudaSuccess) {
            printf("FAIL %s: the launcher returned %d\n", variant.c_str(), (int)rc);
            return false;
        }
    }

    kl_attention_prefill_shape shape = {batch, total_q, pr.qo_heads, pr.kv_heads, D, pr.page, num_pages,
                                        qo_indptr.data(), kv_indptr.data(), indices.data(), last.data(),
                                        (double)p.sm_scale, pr.causal};
    std::vector<double> ref_out(nq), ref_lse(lse.size());
    kl_attention_prefill_reference(&shape, q64.data(), k64.data(), v64.data(), ref_out.data(), ref_lse.data());
    double err2 = 0, ref2 = 0, max_abs = 0, lse_abs = 0;
    long nonfinite = 0;
    for (size_t i = 0; i < nq; i++) {
        const double g = to_float(out[i]);
        if (!std::isfinite(g)) nonfinite++;
        else err2 += (g - ref_out[i]) * (g - ref_out[i]), ref2 += ref_out[i] * ref_out[i],
             max_abs = std::max(max_abs, std::fabs(g - ref_out[i]));
    }
    for (size_t i = 0; i < lse.size(); i++) {
        if (!std::isfinite(lse[i])) nonfinite++;
        else lse_abs = std::max(lse_abs, std::fabs(lse[i] - ref_lse[i]));
    }
    const double rel = std::sqrt(err2 / ref2), limit = std::is_same<T, __half>::value ? 0x1p-9 : 0x1p-7;
    bool ok = nonfinite == 0 && rel < limit && lse_abs < 1e-3;
    if (variant == "v8" || variant == "v9" || variant == "v10") ok &= trace_in_order(trace, variant == "v10");
    std::string q_lens;
    for (int x : pr.q_lens) q_lens += (q_lens.empty() ? "" : "/") + std::to_string(x);
    printf("%s %s head_dim=%d %s q=%s heads=%d/%d page=%d %s: rel_l2 %.3g max_abs %.3g lse %.3g, %ld non-finite\n",
           ok ? "PASS" : "FAIL", variant.c_str(), D, std::is_same<T, __half>::value ? "fp16" : "bf16", q_lens.c_str(),
           pr.qo_heads, pr.kv_heads, pr.page, pr.causal ? "causal" : "noncausal", rel, max_abs, lse_abs, nonfinite);
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv)
{
    bool full = false;
    std::vector<std::string> variants;
    for (int i = 1; i < argc; i++) {
        if (std::string(argv[i]) == "--full") full = true;
        else variants.push_back(argv[i]);
    }
    if (variants.empty()) variants = {"v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10"};
    int passed = 0, failed = 0;
    for (const std::string &v : variants) {
        traced_cases = 0;
        /* quick: every head_dim, both 16-bit types, a ragged batch with an empty request, two query tiles
         * and up to four key tiles, pages of 16 (partial), 7, 3, 1 and 32, GQA 1 and 2, causal and not;
         * --full adds larger batches, GQA 4/8, an extend over 300 keys and odd pages of 5. */
        bool ok = check<__nv_bfloat16, 64>({4, 2, 16, true, {40, 0, 3}, {70, 9, 100}}, v, 1);
        ok &= check<__nv_bfloat16, 128>({2, 1, 7, true, {130}, {130}}, v, 2);
        ok &= check<__half, 128>({2, 2, 16, true, {37}, {200}}, v, 3);
        ok &= check<__nv_bfloat16, 256>({2, 1, 1, false, {40}, {100}}, v, 4);
        /* head_dim 256 by TMA (pages of 32, two per 64-key tile), both consumer warpgroups busy, a tail */
        ok &= check<__nv_bfloat16, 256>({4, 2, 32, false, {64}, {200}}, v, 9);
        /* the gather (pages of 3) over four key tiles: a producer that publishes a tile only after it has
         * issued the next one must not wait on a stage the consumers free only after that tile */
        ok &= check<__half, 64>({2, 1, 3, true, {20, 150}, {420, 150}}, v, 10);
        /* pages of 16 by TMA, four packed tiles of one request (v9's CTA pairs, their key counts one
         * apart under the causal mask, the last V tile partial) and a request of one tile (a pair with
         * a CTA that has no rows) */
        ok &= check<__nv_bfloat16, 128>({4, 1, 16, true, {100, 20}, {300, 20}}, v, 11);
        if (full) {
            ok &= check<__nv_bfloat16, 128>({8, 2, 16, true, {150, 1}, {150, 260}}, v, 5);
            ok &= check<__half, 64>({8, 1, 5, false, {33, 64}, {90, 64}}, v, 6);
            ok &= check<__nv_bfloat16, 256>({4, 2, 16, true, {70}, {200}}, v, 7);
            ok &= check<__nv_bfloat16, 128>({8, 8, 16, true, {70, 5, 0, 140}, {70, 300, 3, 140}}, v, 8);
        }
        if ((v == "v8" || v == "v9" || v == "v10") && traced_cases == 0) {
            printf("FAIL %s: no problem traced CTA 0 (params.trace ignored?)\n", v.c_str());
            ok = false;
        }
        ok ? passed++ : failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
