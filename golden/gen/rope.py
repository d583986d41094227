#!/usr/bin/env python3
"""Golden cases for rope (rotary position embedding, in place on q and k).

For pair i < rotary_dim/2 of every head, with c, s = cos_sin_cache[pos, i], cos_sin_cache[pos, rd/2 + i]:
    (x1, x2) -> (x1*c - x2*s, x2*c + x1*s)
neox pairs (i, i + rotary_dim/2), interleaved (GPT-J) pairs (2i, 2i+1); dims past rotary_dim untouched.
cos_sin_cache is float32 (cos then sin), built in float64 from base^(-2i/rotary_dim); the expected
outputs are float64 from the exact stored inputs. Run: python3 golden/gen/rope.py && bash golden/gen/manifest.sh
"""
import numpy as np

from common import round_to, write_case

GEN = "golden/gen/rope.py"
BASE = 500000.0

CASES = [
    # name, dtype, tokens, q heads, kv heads, head_dim, rotary_dim, max_pos, is_neox
    ("neox_bf16", "bf16", 6, 4, 2, 128, 128, 64, True),
    ("interleaved_bf16", "bf16", 6, 4, 2, 128, 128, 64, False),
    ("fp32_small", "fp32", 3, 2, 1, 16, 16, 8, True),
    ("fp16_interleaved", "fp16", 4, 4, 4, 64, 64, 32, False),
    ("partial_rotary_neox", "bf16", 5, 4, 1, 128, 64, 40, True),
    ("partial_rotary_interleaved", "bf16", 5, 4, 1, 128, 32, 40, False),
    ("head_dim_64_gqa8", "bf16", 4, 8, 1, 64, 64, 20, True),
    ("head_dim_256", "bf16", 3, 2, 1, 256, 256, 16, False),
    ("positions_extremes", "bf16", 6, 2, 2, 64, 64, 512, True),
    ("odd_rotary_fp16", "fp16", 3, 3, 1, 66, 30, 10, True),
    ("one_token", "bf16", 1, 32, 8, 128, 128, 64, True),  # a decode step of one request, Llama's heads
]


def cos_sin_cache(max_pos, rotary_dim):
    inv_freq = BASE ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    ang = np.arange(max_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)


def rope(x, pos, cs, rotary_dim, neox):
    x = x.astype(np.float64).copy()
    half = rotary_dim // 2
    c = cs[pos, :half].astype(np.float64)[:, None, :]
    s = cs[pos, half:].astype(np.float64)[:, None, :]
    i1 = np.arange(half) if neox else 2 * np.arange(half)
    i2 = i1 + half if neox else i1 + 1
    x1, x2 = x[..., i1].copy(), x[..., i2].copy()
    x[..., i1] = x1 * c - x2 * s
    x[..., i2] = x2 * c + x1 * s
    return x


def main():
    for i, (name, dtype, n, hq, hk, d, rd, max_pos, neox) in enumerate(CASES):
        seed = 400 + i
        rng = np.random.default_rng(seed)
        q = round_to(dtype, rng.standard_normal((n, hq, d)))
        k = round_to(dtype, rng.standard_normal((n, hk, d)))
        pos = rng.integers(0, max_pos, size=n).astype(np.int64)
        pos[0] = max_pos - 1
        pos[1:2] = 0  # both ends of the cache, and a decreasing step
        cs = cos_sin_cache(max_pos, rd)
        write_case("rope", name, dtype, {"is_neox": neox, "rotary_dim": rd}, seed, GEN,
                   {"q": q, "k": k, "positions": pos, "cos_sin_cache": cs,
                    "q_out": rope(q, pos, cs, rd, neox).astype(np.float32),
                    "k_out": rope(k, pos, cs, rd, neox).astype(np.float32)})


if __name__ == "__main__":
    main()
