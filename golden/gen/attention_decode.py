#!/usr/bin/env python3
"""Golden cases for attention_decode (paged GQA decode attention), float64, numpy only.

For request b, qo head h, kv head g = h // (qo_heads // kv_heads):
    s_t = sm_scale * q[b, h] . k[token t, g];  out = softmax(s) @ v[tokens, g];  lse = log sum exp s
Token t of b lives in page kv_indices[kv_indptr[b] + t // page_size], row t % page_size.
Every cache row no request attends (free pages, the rows past kv_last_page_len in a last page)
holds POISON, so a kernel reading past the end of a request gets a visibly wrong answer.
The long cases reuse a few distinct pages many times (page numbers may repeat in kv_indices):
8192 attended tokens in 256 KB per cache, which keeps golden/ small.
The last three are there for what the first ones never reach (lab/core/compare.c's attention
rationale names them): several kv heads at GQA 1, 4 and 8 with requests of 900-1500 keys, split
by v3/v4 into several chunks (chunks of 128-2048 keys, kernels/attention_decode/params.c), a P.V
accumulated in the input dtype drifting past the bound, a running output never rescaled. The 16-bit
ones hold no request of a few keys: its output, as large as v itself, would dominate rel_l2 and hide
the long rows' drift; the fp32 one has an empty and a 1-token request beside its long ones.
The multi_* cases verify several draft tokens per request (speculative decoding): request b
brings q_len[b] query rows, qo_indptr.npy [batch+1] says which rows of q are its, and query i
(0-based) of q_len sees the keys t <= kv_len - q_len + i only. They mix q_len 1..8 in one batch,
hold a request whose every key is a draft token (q_len == kv_len) and, beside it, one with no keys
and no queries; one is long enough to be split by v3/v4 (642 keys = 5 chunks of 128 and 2 more:
six of its 8 draft tokens see none of the last chunk's keys) and one gives 64 rows per kv head
(GQA 8 x 8 tokens). Seeds 950 + i, so the cases above stay byte-identical.
Run: /usr/bin/python3 golden/gen/attention_decode.py && bash golden/gen/manifest.sh
"""
import numpy as np

from common import round_to, write_case

GEN = "golden/gen/attention_decode.py"
POISON = 1000.0  # exactly representable in bf16, fp16 and fp32

CASES = [
    # name, dtype, qo_heads, kv_heads, head_dim, page_size, kv_lens, q scale, distinct pages (0: as needed)
    ("bf16_gqa4_page16_partial", "bf16", 8, 2, 128, 16, [37, 16, 60], 1.0, 0),
    ("fp16_gqa8_page5", "fp16", 8, 1, 64, 5, [23, 5], 1.0, 0),
    ("fp32_mha_page1", "fp32", 4, 4, 64, 1, [17, 3], 1.0, 0),
    ("kv_len_1", "bf16", 4, 1, 128, 16, [1, 1], 1.0, 0),
    ("kv_len_0_in_batch", "bf16", 4, 2, 64, 16, [10, 0, 5], 1.0, 0),
    ("head_dim_256", "bf16", 4, 1, 256, 16, [70], 1.0, 0),
    ("large_logits", "bf16", 4, 1, 128, 16, [40, 9], 100.0, 0),
    ("long_8k_repeated_pages", "bf16", 4, 1, 64, 16, [8192], 1.0, 32),
    ("fp16_mha_page16", "fp16", 2, 2, 128, 16, [31, 20, 1, 17], 1.0, 0),
    ("ragged_odd_page3", "bf16", 8, 2, 128, 3, [1, 2, 3, 4, 50], 1.0, 0),
    ("fp32_gqa4_large_logits", "fp32", 8, 2, 64, 7, [29, 13], 30.0, 0),
    ("page1_gqa8", "bf16", 16, 2, 64, 1, [33, 7], 1.0, 0),
    ("gqa4_split_kv1500_bf16", "bf16", 8, 2, 64, 16, [1500, 700, 0], 1.0, 8),
    ("gqa8_split_page5_fp16", "fp16", 16, 2, 128, 5, [1200, 333], 1.0, 16),
    ("mha_split_page1_fp32", "fp32", 4, 4, 64, 1, [900, 257, 0, 1], 1.0, 48),
]

MULTI = [
    # name, dtype, qo_heads, kv_heads, head_dim, page_size, kv_lens, q_lens, q scale, distinct pages
    ("multi_q1to8_gqa4_page16_bf16", "bf16", 8, 2, 128, 16, [37, 16, 60, 9, 100, 23, 50, 8],
     [1, 2, 3, 4, 5, 6, 7, 8], 1.0, 0),
    ("multi_page1_gqa8_fp16", "fp16", 16, 2, 64, 1, [33, 7, 5, 120], [4, 7, 5, 2], 1.0, 0),
    ("multi_mha_page16_fp32", "fp32", 4, 4, 64, 16, [17, 3, 0, 40], [8, 3, 0, 1], 1.0, 0),
    ("multi_gqa8_q8_page16_bf16", "bf16", 16, 2, 128, 16, [64, 200, 8], [8, 8, 8], 1.0, 0),
    ("multi_gqa4_split_bf16", "bf16", 8, 2, 64, 16, [1500, 642], [4, 8], 1.0, 8),
]


def make_cache(rng, dtype, kv, d, ps, lens, distinct):
    """A paged cache holding the requests' keys and values, poison elsewhere."""
    pages_of = [(n + ps - 1) // ps for n in lens]
    used = sum(pages_of)
    num_pages = distinct + 1 if distinct else used + 1  # a free page holds poison too
    order = rng.permutation(num_pages)
    indices, indptr = [], [0]
    for p in pages_of:
        if distinct:
            indices += list(rng.integers(0, distinct, size=p))
        else:
            indices += list(order[len(indices):len(indices) + p])
        indptr.append(len(indices))
    last = [n - (p - 1) * ps if p else 0 for n, p in zip(lens, pages_of)]
    shape = (num_pages, ps, kv, d)
    k_cache = np.full(shape, POISON, dtype=np.float64)
    v_cache = np.full(shape, -POISON, dtype=np.float64)
    k_rand = round_to(dtype, rng.standard_normal(shape)).astype(np.float64)
    v_rand = round_to(dtype, rng.standard_normal(shape)).astype(np.float64)
    for b, n in enumerate(lens):  # the attended rows get random values, the rest stay poison
        for t in range(n):
            page, row = indices[indptr[b] + t // ps], t % ps
            k_cache[page, row], v_cache[page, row] = k_rand[page, row], v_rand[page, row]
    return k_cache, v_cache, indices, indptr, last


def multi_main():
    for i, (name, dtype, qo, kv, d, ps, lens, q_lens, q_scale, distinct) in enumerate(MULTI):
        seed = 950 + i
        rng = np.random.default_rng(seed)
        k_cache, v_cache, indices, indptr, last = make_cache(rng, dtype, kv, d, ps, lens, distinct)
        qo_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        rows = int(qo_indptr[-1])
        q = round_to(dtype, q_scale * rng.standard_normal((rows, qo, d))).astype(np.float64)
        sm_scale = 1.0 / np.sqrt(d)
        out = np.zeros((rows, qo, d))
        lse = np.full((rows, qo), -np.inf)
        group = qo // kv
        for b, (n, q_len) in enumerate(zip(lens, q_lens)):
            assert q_len <= n
            toks = [(indices[indptr[b] + t // ps], t % ps) for t in range(n)]
            for j in range(q_len):
                seen = n - q_len + 1 + j  # causal: the keys before this draft token, and itself
                r = qo_indptr[b] + j
                for h in range(qo):
                    g = h // group
                    k = np.array([k_cache[p, w, g] for p, w in toks[:seen]])
                    v = np.array([v_cache[p, w, g] for p, w in toks[:seen]])
                    s = sm_scale * (k @ q[r, h])
                    m = s.max()
                    e = np.exp(s - m)
                    out[r, h] = (e @ v) / e.sum()
                    lse[r, h] = m + np.log(e.sum())
        write_case("attention_decode", name, dtype, {"sm_scale": sm_scale}, seed, GEN, {
            "q": q.astype(np.float32), "qo_indptr": qo_indptr,
            "k_cache": k_cache.astype(np.float32), "v_cache": v_cache.astype(np.float32),
            "kv_indptr": np.array(indptr, dtype=np.int32),
            "kv_indices": np.array(indices, dtype=np.int32),
            "kv_last_page_len": np.array(last, dtype=np.int32),
            "out": out.astype(np.float32), "lse": lse.astype(np.float32)})


def main():
    for i, (name, dtype, qo, kv, d, ps, lens, q_scale, distinct) in enumerate(CASES):
        seed = 900 + i
        rng = np.random.default_rng(seed)
        k_cache, v_cache, indices, indptr, last = make_cache(rng, dtype, kv, d, ps, lens, distinct)
        q = round_to(dtype, q_scale * rng.standard_normal((len(lens), qo, d))).astype(np.float64)
        sm_scale = 1.0 / np.sqrt(d)
        out = np.zeros((len(lens), qo, d))
        lse = np.full((len(lens), qo), -np.inf)
        group = qo // kv
        for b, n in enumerate(lens):
            if n == 0:
                continue
            toks = [(indices[indptr[b] + t // ps], t % ps) for t in range(n)]
            for h in range(qo):
                g = h // group
                k = np.array([k_cache[p, r, g] for p, r in toks])
                v = np.array([v_cache[p, r, g] for p, r in toks])
                s = sm_scale * (k @ q[b, h])
                m = s.max()
                e = np.exp(s - m)
                out[b, h] = (e @ v) / e.sum()
                lse[b, h] = m + np.log(e.sum())
        params = {"sm_scale": sm_scale}
        write_case("attention_decode", name, dtype, params, seed, GEN, {
            "q": q.astype(np.float32),
            "k_cache": k_cache.astype(np.float32), "v_cache": v_cache.astype(np.float32),
            "kv_indptr": np.array(indptr, dtype=np.int32),
            "kv_indices": np.array(indices, dtype=np.int32),
            "kv_last_page_len": np.array(last, dtype=np.int32),
            "out": out.astype(np.float32), "lse": lse.astype(np.float32)})


if __name__ == "__main__":
    main()
    multi_main()
