#!/usr/bin/env python3
"""Golden cases for the fused RoPE + FP8 (e4m3) quantize + store, and the e4m3 conversion table.

For each token t (qkv row: q heads, then k heads, then v heads), with rope() as golden/gen/rope.py:
    q_out[t, h]             = rope(q[t, h])                                   (every token)
    k_cache_out[slots[t], h] = e4m3(clip(rope(k[t, h]) / k_scale[h], -448, 448))   (slots[t] >= 0)
    v_cache_out[slots[t], h] = e4m3(clip(v[t, h] / v_scale[h], -448, 448))
e4m3 is ml_dtypes' float8_e4m3fn (round to nearest even; it does not saturate, so values are clipped
first: NaN stays NaN, -0 stays -0). ml_dtypes converts a float64 through float32, and so does the
C reference (kernels/dtype.h). Caches are stored as |u1 (the codes); params.kv_dtype says so
(lab/CONTRACTS.md section 4). golden/dtype/fp8_e4m3/ holds ml_dtypes' value of every code and its
codes for a sweep of floats, against which lab/store/test_store_fp8.c checks the C converter.
ml_dtypes is used here only, pinned: pip install ml_dtypes==0.5.4 (with numpy 1.24).
Run: python3 golden/gen/store_fp8.py && bash golden/gen/manifest.sh
"""
import os

import ml_dtypes
import numpy as np

from common import ROOT, round_to, write_case
from rope import cos_sin_cache, rope

GEN = "golden/gen/store_fp8.py"
ML_DTYPES = "0.5.4"
E4M3 = ml_dtypes.float8_e4m3fn

CASES = [
    # name, dtype, tokens, qo heads, kv heads, head_dim, rotary_dim, neox, page_size, pages, slots, skipped,
    # k scale base (head h: base (1 + 0.3 h); v: 0.8 base (1 + 0.5 h)), special values
    ("fp8_page1_bf16_gqa4", "bf16", 12, 8, 2, 64, 64, True, 1, 40, "random", 0.2, 0.01, None),
    ("fp8_page16_fp16_interleaved", "fp16", 20, 4, 4, 128, 128, False, 16, 4, "sequential", 0.0, 0.01, None),
    ("fp8_saturate_negzero_ties_bf16", "bf16", 6, 4, 2, 32, 16, True, 16, 2, "random", 0.0, 1 / 448, "special"),
    ("fp8_prefill_256_bf16", "bf16", 256, 4, 2, 128, 128, True, 16, 18, "sequential", 0.05, 0.01, None),
    ("fp8_all_skipped_fp16", "fp16", 4, 2, 1, 64, 64, True, 16, 1, "random", 1.0, 0.01, None),
]


def e4m3_codes(y):
    """The saturating e4m3 codes of float64 values y, as uint8."""
    return np.clip(y, -448.0, 448.0).astype(E4M3).view(np.uint8)


def plant_special(q, k, v, k_scale, v_scale):
    """Values the format must keep: -0 (in V and in K's dims past rotary_dim), a NaN in V, exact
    ties of e4m3 (V of head 0 whose scale is a power of two), and tiny values (subnormal codes)."""
    rd = 16
    v_scale[0] = np.float32(2.0 ** -4)
    k[0, 0, rd:rd + 4] = -0.0
    v[0, 1, :4] = -0.0
    v[1, 1, 5] = np.nan
    ties = np.array([1.0625, 1.1875, -1.0625, 2.0 ** -10, 3 * 2.0 ** -10, -(2.0 ** -10), 2.0 ** -12, 1.5 * 2.0 ** -9])
    v[2, 0, :ties.size] = ties * 2.0 ** -4  # y = ties exactly: each halfway between two codes
    v[3, 0, :3] = np.array([2.0 ** -14, -(2.0 ** -13), 3 * 2.0 ** -15])  # subnormal codes
    q[0, 0, rd:rd + 2] = -0.0


def fused_case(i, name, dtype, n, hq, hk, d, rd, neox, page, pages, pattern, skipped, base, special):
    seed = 500 + i
    rng = np.random.default_rng(seed)
    num_slots = page * pages
    max_pos = 4 * n + 8
    q = round_to(dtype, rng.standard_normal((n, hq, d)))
    k = round_to(dtype, rng.standard_normal((n, hk, d)))
    v = round_to(dtype, rng.standard_normal((n, hk, d)))
    k_scale = (base * (1 + 0.3 * np.arange(hk))).astype(np.float32)
    v_scale = (0.8 * base * (1 + 0.5 * np.arange(hk))).astype(np.float32)
    if special:
        plant_special(q, k, v, k_scale, v_scale)
        q, k, v = (round_to(dtype, a) for a in (q, k, v))  # NaN and -0 survive round_to
    pos = rng.integers(0, max_pos, size=n).astype(np.int64)
    pos[0] = max_pos - 1
    if n > 1:
        pos[1] = 0
    if pattern == "sequential":
        start = page * rng.integers(0, max(1, pages - (n + page - 1) // page + 1))
        slots = (start + np.arange(n)).astype(np.int64)
        slots[slots >= num_slots] = -1
    else:
        slots = rng.permutation(num_slots)[:n].astype(np.int64)
    slots[rng.random(n) < skipped] = -1
    cs = cos_sin_cache(max_pos, rd)
    k_cache = rng.integers(0, 256, size=(num_slots, hk, d)).astype(np.uint8)
    k_cache[(k_cache & 0x7F) == 0x7F] = 0x38  # old codes: any but NaN (1.0 instead)
    v_cache = rng.integers(0, 256, size=(num_slots, hk, d)).astype(np.uint8)
    v_cache[(v_cache & 0x7F) == 0x7F] = 0x38
    k_rot = rope(k, pos, cs, rd, neox)
    k_out, v_out = k_cache.copy(), v_cache.copy()
    keep = slots >= 0
    k_out[slots[keep]] = e4m3_codes(k_rot[keep] / k_scale.astype(np.float64)[None, :, None])
    v_out[slots[keep]] = e4m3_codes(v[keep].astype(np.float64) / v_scale.astype(np.float64)[None, :, None])
    qkv = np.concatenate([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], axis=1)
    params = {"kv_dtype": "fp8_e4m3", "num_qo_heads": hq, "num_kv_heads": hk, "is_neox": neox, "page_size": page,
              "ml_dtypes": ML_DTYPES}
    write_case("store", name, dtype, params, seed, GEN,
               {"qkv": qkv, "positions": pos, "cos_sin_cache": cs, "k_scale": k_scale, "v_scale": v_scale,
                "slots": slots, "k_cache": k_cache, "v_cache": v_cache,
                "q_out": rope(q, pos, cs, rd, neox).astype(np.float32), "k_cache_out": k_out, "v_cache_out": v_out})
    sat = np.sum(np.abs(k_rot[keep] / k_scale[None, :, None]) > 464)
    print(f"store/{name}: {int(keep.sum())} of {n} tokens stored, {int(sat)} K values past 464 (saturate)")


def conversion_table():
    """ml_dtypes' value of each of the 256 codes, and its saturating codes for a sweep of floats:
    every tie between neighbouring codes and the floats on either side of it, subnormals, the
    saturation edge, infinities, NaN, both zeros, and random floats over the whole range."""
    d = os.path.join(ROOT, "dtype", "fp8_e4m3")
    os.makedirs(d, exist_ok=True)
    values = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
    finite = np.unique(np.abs(values[np.isfinite(values)]).astype(np.float64))
    ties = (finite[:-1] + finite[1:]) / 2
    ties = np.concatenate([ties, [464.0]]).astype(np.float32)  # 464: halfway past 448 (saturates)
    around = np.concatenate([ties, np.nextafter(ties, np.float32(0)), np.nextafter(ties, np.float32(np.inf))])
    edges = np.array([0.0, 2.0 ** -9, 2.0 ** -10, 2.0 ** -11, 2.0 ** -6, 448, 449, 464, 465, 480, 1e4, 3.4e38,
                      np.inf, 1e-30, 1e-45, 2.0 ** -149], dtype=np.float32)
    rng = np.random.default_rng(77)
    rand = (2.0 ** rng.uniform(-14, 10, 20000)).astype(np.float32)
    mags = np.concatenate([around, edges, rand])
    x = np.concatenate([mags, -mags, np.array([np.nan, -np.nan], dtype=np.float32)]).astype(np.float32)
    codes = np.clip(x, np.float32(-448), np.float32(448)).astype(E4M3).view(np.uint8)
    np.save(os.path.join(d, "values.npy"), values)
    np.save(os.path.join(d, "sweep_x.npy"), x)
    np.save(os.path.join(d, "sweep_codes.npy"), codes)
    print(f"dtype/fp8_e4m3: 256 codes, {x.size} floats")


def main():
    assert ml_dtypes.__version__ == ML_DTYPES, f"ml_dtypes {ml_dtypes.__version__}, pinned {ML_DTYPES}"
    for i, case in enumerate(CASES):
        fused_case(i, *case)
    conversion_table()


if __name__ == "__main__":
    main()
