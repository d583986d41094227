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
Run: python3 golden/gen/attention_decode.py && bash golden/gen/manifest.sh
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


def main():
    for i, (name, dtype, qo, kv, d, ps, lens, q_scale, distinct) in enumerate(CASES):
        seed = 900 + i
        rng = np.random.default_rng(seed)
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
