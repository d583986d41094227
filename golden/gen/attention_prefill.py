#!/usr/bin/env python3
"""Golden cases for attention_prefill (paged, ragged, causal or not, GQA).

Request b owns query rows qo_indptr[b]..qo_indptr[b+1]-1 and the cache pages
kv_indices[kv_indptr[b]..kv_indptr[b+1]-1]; its kv_len = (pages - 1) * page_size + kv_last_page_len[b].
For query i of the request and qo head h (kv head h // (qo_heads // kv_heads)):
    s_j = sm_scale * q[i, h] . k[j]    for j < kv_len, and with causal only j <= kv_len - q_len + i
    out[i, h] = softmax(s) @ v;  lse[i, h] = log(sum_j exp(s_j))   (natural log)
Computed here in float64 with numpy from the exact stored inputs, independently of reference/.
Pages are handed out in a random order from a cache with spare pages (random values too), so a
kernel that ignores kv_indices or reads a wrong page fails.
Run: /usr/bin/python3 golden/gen/attention_prefill.py && bash golden/gen/manifest.sh
"""
import math

import numpy as np

from common import round_to, write_case

GEN = "golden/gen/attention_prefill.py"

CASES = [
    # name, dtype, causal, q_lens, kv_lens, qo_heads, kv_heads, head_dim, page_size, spare pages, q scale, sm_scale
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
    for n, (name, dtype, causal, q_lens, kv_lens, hq, hk, d, page, spare, q_scale, scale) in enumerate(CASES):
        seed = 1000 + n
        rng = np.random.default_rng(seed)
        npages = [(kv + page - 1) // page for kv in kv_lens]
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
