#!/usr/bin/env python3
"""Golden cases for rmsnorm: exact, edge and odd shapes (big shapes use fresh random inputs).

    out = r / sqrt(mean(r^2) + eps) * weight,  r = x (+ residual; then residual_out = r)
computed in float64 with numpy, from inputs rounded to the case's dtype.
Run: python3 golden/gen/rmsnorm.py && bash golden/gen/manifest.sh
"""
import numpy as np

from common import round_to, write_case

GEN = "golden/gen/rmsnorm.py"

CASES = [
    # name, dtype, tokens, hidden, scale, eps, fused
    ("fp32_small", "fp32", 4, 64, 1.0, 1e-6, False),
    ("fp16_rows", "fp16", 3, 256, 1.0, 1e-6, False),
    ("bf16_one_row", "bf16", 1, 4096, 1.0, 1e-6, False),
    ("odd_hidden_111", "bf16", 5, 111, 1.0, 1e-6, False),
    ("hidden_16384", "bf16", 2, 16384, 1.0, 1e-6, False),
    ("large_magnitude_bf16", "bf16", 2, 512, 3000.0, 1e-6, False),
    ("large_magnitude_fp16", "fp16", 2, 512, 2.0e4, 1e-6, False),
    ("eps_matters_fp32", "fp32", 2, 256, 1e-3, 1e-5, False),
    ("fused_residual_bf16", "bf16", 4, 4096, 1.0, 1e-6, True),
    ("fused_residual_fp16_odd", "fp16", 3, 111, 1.0, 1e-5, True),
    ("fused_residual_fp32", "fp32", 2, 1000, 1.0, 1e-6, True),
    # Systematic errors: a shift of every element by a fraction of a rounding, which only the bias
    # check sees, and which it resolves better the more elements there are (its spread is about
    # u sqrt(sum ref^4) / sum ref^2, ~u sqrt(5/n) here). 16 rows of 4100: 4100 % 8 = 4, the tail a
    # 16-byte vector loop leaves (bf16: 8 a vector); dropping it from the sum of squares shifts
    # every element by ~u/8. 2 rows of 32768 in fp16: 128 terms for each of 256 threads, so
    # partial sums of squares kept in fp16 lose the small terms against their running sum.
    ("tail_4100_bf16", "bf16", 16, 4100, 1.0, 1e-6, False),
    ("hidden_32768_fp16", "fp16", 2, 32768, 1.0, 1e-6, False),
]


def main():
    for i, (name, dtype, n, h, scale, eps, fused) in enumerate(CASES):
        seed = 100 + i
        rng = np.random.default_rng(seed)
        # Clipped to stay finite in fp16 (largest finite: 65504); a no-op for the other cases.
        x = round_to(dtype, np.clip(rng.standard_normal((n, h)) * scale, -60000, 60000))
        w = round_to(dtype, 1.0 + 0.5 * rng.standard_normal(h))
        arrays = {"x": x, "weight": w}
        r = x.astype(np.float64)
        if fused:
            res = round_to(dtype, rng.standard_normal((n, h)) * scale)
            arrays["residual"] = res
            r = r + res.astype(np.float64)
            arrays["residual_out"] = r.astype(np.float32)
        inv_rms = 1.0 / np.sqrt(np.mean(r * r, axis=1, keepdims=True) + eps)
        arrays["out"] = (r * inv_rms * w.astype(np.float64)).astype(np.float32)
        write_case("rmsnorm", name, dtype, {"eps": eps}, seed, GEN, arrays)


if __name__ == "__main__":
    main()
