#!/usr/bin/env python3
"""Golden cases for attention_prefill (paged, ragged, causal or not, GQA).

Request b owns query rows qo_indptr[b]..qo_indptr[b+1]-1 and the cache pages
kv_indices[kv_indptr[b]..kv_indptr[b+1]-1]; its kv_len = (pages - 1) * page_size + kv_last_page_len[b].
For query i of the request and qo head h (kv head h // (qo_heads // kv_heads)):
    s_j = sm_scale * q[i, h] . k[j]    for j < kv_len, and with causal only j <= kv_len - q_len + i
    out[i, h] = softmax(s) @ v;  lse[i, h] = log(sum_j exp(s_j))   (natural log)
Computed here in float64 with numpy from the exact stored inputs, independently of reference/.
Pages are handed out in a random order from a cache with spare pages (random values too), so a
kernel that ignores kv_indices or reads a wrong page fails. Cases with a page pool (last column) draw
every page of every request from that many distinct pages instead (page numbers repeat in
kv_indices): hundreds of keys in a few KB of cache, which keeps golden/ small.

The later cases are there for what the first ones never reach (each is named by a claim in
lab/core/compare.c's attention rationale or by a test of lab/attention_prefill/test_attention_prefill.c):
several kv heads at GQA 1, 4 and 8 (a kernel that reads kv head 0 for every qo head), requests of
hundreds of keys in every dtype, past the largest key tile of any variant (128), so the running max
grows after the first tile (a kernel that never rescales its running output) and a P.V accumulated in
the input dtype drifts past the bound, and one batch of 128 requests with q_len 2 and kv_len - q_len
= 0..127: every offset of the causal diagonal inside a key tile of 32, 64 or 128 keys (a mask whose
tile-skip test is off by one row is wrong at exactly one offset per tile size).
Run: /usr/bin/python3 golden/gen/attention_prefill.py && bash golden/gen/manifest.sh
"""
import math

import numpy as np

from common import round_to, write_case

GEN = "golden/gen/attention_prefill.py"

CASES = [
    # name, dtype, causal, q_lens, kv_lens, qo_heads, kv_heads, head_dim, page_size, spare pages, q scale, sm_scale
    # [, page pool: 0 = distinct pages as needed]
    ("causal_prefill_gqa4_bf16", "bf16", True, [21], [21], 4, 1, 64, 16, 1, 1.0, None),
    ("noncausal_ragged_fp16", "fp16", False, [9, 14], [20, 31], 1, 1, 64, 16, 1, 1.0, None),
    ("extend_q37_kv300", "bf16", True, [37], [300], 1, 1, 64, 16, 1, 1.0, None),
    ("q_len_1_batch_fp16", "fp16", True, [1, 1, 1], [1, 17, 40], 4, 1, 64, 16, 1, 1.0, None),
    ("ragged_empty_requests_page5_gqa8", "bf16", True, [3, 0, 11, 0], [3, 7, 19, 0], 8, 1, 64, 5, 2, 1.0, None),
    ("page1_fp32_custom_scale", "fp32", True, [6, 10], [6, 13], 2, 1, 64, 1, 3, 1.0, 0.2),
    ("partial_last_page_noncausal_fp32", "fp32", False, [7], [33], 2, 1, 64, 16, 1, 1.0, None),
    ("head_dim_128_extend", "bf16", True, [8], [20], 2, 1, 128, 16, 1, 1.0, None),
    ("head_dim_256_page8", "bf16", True, [9], [18], 1, 1, 256, 8, 1, 1.0, None),
    ("large_logits_bf16", "bf16", True, [24], [24], 2, 1, 64, 16, 1, 30.0, None),
    ("gqa8_extend_kv520_bf16", "bf16", True, [16, 0, 5], [520, 9, 300], 16, 2, 64, 16, 1, 1.0, None, 10),
    ("gqa4_noncausal_kv600_fp16", "fp16", False, [20, 13], [600, 333], 8, 2, 64, 16, 1, 1.0, None, 10),
    ("mha_causal_q140_page1_fp32", "fp32", True, [140, 0, 60], [140, 5, 400], 2, 2, 64, 1, 1, 1.0, None, 64),
    ("gqa8_ragged_page7_bf16", "bf16", True, [1, 0, 20, 0], [350, 20, 470, 0], 16, 2, 64, 7, 1, 1.0, None, 12),
    ("causal_offsets_0_127_bf16", "bf16", True, [2] * 128, [2 + r for r in range(128)], 1, 1, 64, 16, 1, 1.0, None,
     4),
]


def attention(q, kc, vc, qo_indptr, kv_indptr, kv_indices, last, causal, sm_scale):
    total_q, hq, d = q.shape
    hk = kc.shape[2]
    group = hq // hk
    page = kc.shape[1]
    out = np.zeros((total_q, hq, d))
    lse = np.full((total_q, hq), -np.inf)
    for b in range(len(qo_indptr) - 1):
        q0, q1 = qo_indptr[b], qo_indptr[b + 1]
        pages = kv_indices[kv_indptr[b]:kv_indptr[b + 1]]
        kv_len = (len(pages) - 1) * page + last[b] if len(pages) else 0
        keys = np.concatenate([kc[p] for p in pages], axis=0)[:kv_len] if len(pages) else np.zeros((0, hk, d))
        vals = np.concatenate([vc[p] for p in pages], axis=0)[:kv_len] if len(pages) else np.zeros((0, hk, d))
        q_len = q1 - q0
        for i in range(q_len):
            seen = min(kv_len, max(0, kv_len - q_len + i + 1)) if causal else kv_len
            for h in range(hq):
                if seen == 0:
                    continue
                s = sm_scale * (keys[:seen, h // group, :] @ q[q0 + i, h, :])
                m = s.max()
                p = np.exp(s - m)
                out[q0 + i, h] = p @ vals[:seen, h // group, :] / p.sum()
                lse[q0 + i, h] = m + math.log(p.sum())
    return out, lse


def main():
    total = 0
    for n, (name, dtype, causal, q_lens, kv_lens, hq, hk, d, page, spare, q_scale, scale, *pool) in enumerate(CASES):
        seed = 1000 + n
        rng = np.random.default_rng(seed)
        npages = [(kv + page - 1) // page for kv in kv_lens]
        if pool:
            num_pages = pool[0] + spare
            order = rng.integers(0, pool[0], size=sum(npages)).astype(np.int32)
        else:
            num_pages = sum(npages) + spare
            order = rng.permutation(num_pages)[:sum(npages)].astype(np.int32)
        qo_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        kv_indptr = np.concatenate([[0], np.cumsum(npages)]).astype(np.int32)
        last = np.array([kv - (p - 1) * page if p else 0 for kv, p in zip(kv_lens, npages)], dtype=np.int32)
        q = round_to(dtype, q_scale * rng.standard_normal((sum(q_lens), hq, d)))
        kc = round_to(dtype, rng.standard_normal((num_pages, page, hk, d)))
        vc = round_to(dtype, rng.standard_normal((num_pages, page, hk, d)))
        sm_scale = scale if scale is not None else 1.0 / math.sqrt(d)
        out, lse = attention(q.astype(np.float64), kc.astype(np.float64), vc.astype(np.float64), qo_indptr,
                             kv_indptr, order, last, causal, sm_scale)
        arrays = {"q": q, "qo_indptr": qo_indptr, "k_cache": kc, "v_cache": vc, "kv_indptr": kv_indptr,
                  "kv_indices": order, "kv_last_page_len": last, "out": out.astype(np.float32),
                  "lse": lse.astype(np.float32)}
        write_case("attention_prefill", name, dtype, {"causal": causal, "sm_scale": sm_scale}, seed, GEN, arrays)
        total += sum(a.nbytes for a in arrays.values())
    print(f"attention_prefill: {len(CASES)} cases, {total / 1024:.0f} KiB of array data")


if __name__ == "__main__":
    main()
