#!/usr/bin/env python3
"""Golden cases for attention_decode on an FP8 (e4m3) KV cache, float64.

The caches hold E4M3 codes (ml_dtypes' float8_e4m3fn, stored |u1) and one float32 scale per kv head
for each cache: k[t, g] = e4m3(code) * k_scale[g], v[t, g] = e4m3(code) * v_scale[g]. The attention is
golden/gen/attention_decode.py's on those values (q and out in the case's dtype):
    s_t = sm_scale * q[b, h] . k[token t, g];  out = softmax(s) @ v[tokens, g];  lse = log sum exp s
The reference reads the same codes, so e4m3's rounding is in the inputs, not in the error: the
tolerance is the 16-bit decode's (lab/core/compare.c). The scales differ by a factor of ten from
one kv head to the next, so a kernel that drops a scale, or takes another head's, fails. Codes are
e4m3 of N(0, 1) x 24 (so the whole range of exponents is used), and the cases plant what the format
must keep: +-448 (the saturated codes), -0, and subnormal codes (2^-9 .. 7 x 2^-9). Every cache row
no request attends holds NaN codes (0x7f in K, 0xff in V), so a kernel that reads one gets NaN.
ml_dtypes is used here only, pinned as golden/gen/store_fp8.py pins it: pip install ml_dtypes==0.5.4.
Seeds 980 + i; golden/gen/attention_decode.py's cases are not touched.
Run: /usr/bin/python3 golden/gen/attention_decode_fp8.py && bash golden/gen/manifest.sh
"""
import ml_dtypes
import numpy as np

from common import round_to, write_case

GEN = "golden/gen/attention_decode_fp8.py"
ML_DTYPES = "0.5.4"
E4M3 = ml_dtypes.float8_e4m3fn
NAN_K, NAN_V = 0x7F, 0xFF

CASES = [
    # name, dtype, qo_heads, kv_heads, head_dim, page_size, kv_lens, distinct pages (0: as needed), special codes
    ("fp8_bf16_gqa4_page16_partial", "bf16", 8, 2, 128, 16, [37, 16, 60], 0, False),
    ("fp8_bf16_mha_page1", "bf16", 4, 4, 128, 1, [33, 7, 1], 0, False),
    ("fp8_bf16_gqa8_page16_split", "bf16", 16, 2, 128, 16, [1500, 700, 0, 5], 8, False),
    ("fp8_fp16_gqa4_page5", "fp16", 8, 2, 128, 5, [23, 5, 41], 0, False),
    ("fp8_bf16_saturated_negzero_subnormal", "bf16", 8, 2, 128, 16, [40, 9], 0, True),
    ("fp8_bf16_head_dim64_gqa4", "bf16", 16, 4, 64, 16, [70, 17], 0, False),
]


def codes_of(y):
    """The saturating e4m3 codes of float64 values y, as uint8."""
    return np.clip(y, -448.0, 448.0).astype(E4M3).view(np.uint8)


def values_of(codes):
    return codes.view(E4M3).astype(np.float64)


def plant_special(rng, codes, rows):
    """In attended rows: the saturated codes, negative zero and every subnormal, at random places."""
    special = np.array([0x7E, 0xFE, 0x80, 0x00] + list(range(1, 8)) + list(range(0x81, 0x88)), dtype=np.uint8)
    for page, row in rows:
        for g in range(codes.shape[2]):
            at = rng.choice(codes.shape[3], size=8, replace=False)
            codes[page, row, g, at] = rng.choice(special, size=8)


def make_cache(rng, kv, d, ps, lens, distinct, special):
    pages_of = [(n + ps - 1) // ps for n in lens]
    num_pages = distinct + 1 if distinct else sum(pages_of) + 1  # a free page holds NaN codes too
    order = rng.permutation(num_pages)
    indices, indptr = [], [0]
    for p in pages_of:
        indices += list(rng.integers(0, distinct, size=p)) if distinct else list(order[len(indices):len(indices) + p])
        indptr.append(len(indices))
    last = [n - (p - 1) * ps if p else 0 for n, p in zip(lens, pages_of)]
    shape = (num_pages, ps, kv, d)
    k_rand, v_rand = codes_of(24 * rng.standard_normal(shape)), codes_of(24 * rng.standard_normal(shape))
    rows = sorted({(indices[indptr[b] + t // ps], t % ps) for b, n in enumerate(lens) for t in range(n)})
    if special:
        plant_special(rng, k_rand, rows), plant_special(rng, v_rand, rows)
    k_codes = np.full(shape, NAN_K, dtype=np.uint8)
    v_codes = np.full(shape, NAN_V, dtype=np.uint8)
    for page, row in rows:  # the attended rows get codes, the rest stay NaN
        k_codes[page, row], v_codes[page, row] = k_rand[page, row], v_rand[page, row]
    return k_codes, v_codes, indices, indptr, last


def main():
    assert ml_dtypes.__version__ == ML_DTYPES, f"ml_dtypes {ml_dtypes.__version__}, pinned {ML_DTYPES}"
    for i, (name, dtype, qo, kv, d, ps, lens, distinct, special) in enumerate(CASES):
        seed = 980 + i
        rng = np.random.default_rng(seed)
        k_codes, v_codes, indices, indptr, last = make_cache(rng, kv, d, ps, lens, distinct, special)
        # A factor of ten between neighbouring kv heads (and not a power of two: no code lines up with another's)
        k_scale = (0.03 * (1 + 0.37 * np.arange(kv)) * 10.0 ** -(np.arange(kv) % 2)).astype(np.float32)
        v_scale = (0.05 * (1 + 0.61 * np.arange(kv)) * 10.0 ** -((np.arange(kv) + 1) % 2)).astype(np.float32)
        q = round_to(dtype, rng.standard_normal((len(lens), qo, d))).astype(np.float64)
        k_val = values_of(k_codes) * k_scale.astype(np.float64)[None, None, :, None]
        v_val = values_of(v_codes) * v_scale.astype(np.float64)[None, None, :, None]
        sm_scale = 1.0 / np.sqrt(d)
        out = np.zeros((len(lens), qo, d))
        lse = np.full((len(lens), qo), -np.inf)
        group = qo // kv
        for b, n in enumerate(lens):
            toks = [(indices[indptr[b] + t // ps], t % ps) for t in range(n)]
            for h in range(qo if n else 0):
                g = h // group
                k = np.array([k_val[p, r, g] for p, r in toks])
                v = np.array([v_val[p, r, g] for p, r in toks])
                assert np.isfinite(k).all() and np.isfinite(v).all()
                s = sm_scale * (k @ q[b, h])
                m = s.max()
                e = np.exp(s - m)
                out[b, h] = (e @ v) / e.sum()
                lse[b, h] = m + np.log(e.sum())
        params = {"sm_scale": sm_scale, "kv_dtype": "fp8_e4m3", "ml_dtypes": ML_DTYPES}
        write_case("attention_decode", name, dtype, params, seed, GEN, {
            "q": q.astype(np.float32), "k_cache": k_codes, "v_cache": v_codes,
            "k_scale": k_scale, "v_scale": v_scale,
            "kv_indptr": np.array(indptr, dtype=np.int32),
            "kv_indices": np.array(indices, dtype=np.int32),
            "kv_last_page_len": np.array(last, dtype=np.int32),
            "out": out.astype(np.float32), "lse": lse.astype(np.float32)})
        sat = int(np.sum((k_codes & 0x7F) == 0x7E) + np.sum((v_codes & 0x7F) == 0x7E))
        print(f"attention_decode/{name}: {sum(lens)} keys, {sat} saturated codes")


if __name__ == "__main__":
    main()
