#!/usr/bin/env python3
"""Golden cases for allreduce: x [world, n] -> out [n] = x[0] + x[1] + ... + x[world-1].

Row r is rank r's contribution. The sum is taken in float64 in rank order, starting from row 0
(so -0 + -0 stays -0, as in IEEE), from inputs rounded to the case's dtype, and stored <f4.
Integer cases keep every partial sum within the dtype's exact integers (|sum| <= 2^8 bf16,
2^11 fp16, 2^24 fp32): any correct all-reduce reproduces them bit for bit; their signed-zero
columns check the sign of zero (all -0 gives -0; -0 and +0 give +0; v and -v give +0).
Fused cases ("op": "add_rmsnorm", the all-reduce a tensor-parallel decoder runs before each norm):
x [world, tokens, hidden], residual [tokens, hidden], weight [hidden] ->
    residual_out = (x[0] + ... + x[world-1]) + residual      (rank order, float64)
    out = residual_out / sqrt(mean(residual_out^2) + eps) * weight
both stored <f4; every rank ends with the same two tensors.
Run: python3 golden/gen/allreduce.py && bash golden/gen/manifest.sh
"""
import numpy as np

from common import round_to, write_case

GEN = "golden/gen/allreduce.py"
EXACT_BITS = {"bf16": 8, "fp16": 11, "fp32": 24}

CASES = [
    # name, dtype, world, n, kind
    ("int_bf16_world2_n1", "bf16", 2, 1, "int"),
    ("int_bf16_world2_signed_zeros_515", "bf16", 2, 515, "zeros"),
    ("int_fp16_world3_signed_zeros", "fp16", 3, 1001, "zeros"),
    ("int_fp32_world4_odd_777", "fp32", 4, 777, "int"),
    ("int_bf16_world8_odd_33", "bf16", 8, 33, "int"),
    ("rand_bf16_world2_20000", "bf16", 2, 20000, "random"),
    ("rand_bf16_world3_odd_1031", "bf16", 3, 1031, "random"),
    ("rand_fp16_world4_odd_2047", "fp16", 4, 2047, "random"),
    ("rand_fp32_world8_n7", "fp32", 8, 7, "random"),
]

FUSED = [
    # name, dtype, world, tokens, hidden, eps: 4096 (a model's hidden), 4100 (a tail after the last
    # 16-byte unit), 64 (small, many tokens)
    ("add_rmsnorm_bf16_world2_t4_h4096", "bf16", 2, 4, 4096, 1e-6),
    ("add_rmsnorm_fp16_world4_t3_odd_h4100", "fp16", 4, 3, 4100, 1e-5),
    ("add_rmsnorm_fp32_world8_t1_h4096", "fp32", 8, 1, 4096, 1e-6),
    ("add_rmsnorm_bf16_world8_t64_h64", "bf16", 8, 64, 64, 1e-6),
    ("add_rmsnorm_fp16_world2_t17_h256", "fp16", 2, 17, 256, 1e-6),
]


def inputs(rng, dtype, world, n, kind):
    if kind == "random":
        return round_to(dtype, rng.standard_normal((world, n)))
    bound = min((1 << EXACT_BITS[dtype]) // world, 1024)
    x = rng.integers(-bound, bound + 1, size=(world, n)).astype(np.float64)
    if kind == "zeros":
        cols = np.arange(n)
        x[:, cols % 4 == 0] = -0.0            # every rank -0: the sum is -0
        x[0, cols % 4 == 1] = -0.0            # -0 and +0: +0
        x[1:, cols % 4 == 1] = 0.0
        x[:, cols % 4 == 2] = 0.0             # v and -v: +0
        x[0, cols % 4 == 2] = 17.0
        x[1, cols % 4 == 2] = -17.0
    return round_to(dtype, x)


def main():
    for i, (name, dtype, world, n, kind) in enumerate(CASES):
        seed = 1200 + i
        rng = np.random.default_rng(seed)
        x = inputs(rng, dtype, world, n, kind)
        out = x[0].astype(np.float64)
        for r in range(1, world):            # rank order, one IEEE addition at a time
            out = out + x[r].astype(np.float64)
        if kind != "random":                 # exact: the float32 file holds the sum itself
            assert np.all(np.abs(x).astype(np.float64).sum(axis=0) <= (1 << EXACT_BITS[dtype]))
            assert np.array_equal(out.astype(np.float32).astype(np.float64), out)
        write_case("allreduce", name, dtype, {"world": world}, seed, GEN,
                   {"x": x.astype(np.float32), "out": out.astype(np.float32)})
    for i, (name, dtype, world, tokens, hidden, eps) in enumerate(FUSED):
        seed = 1300 + i
        rng = np.random.default_rng(seed)
        x = round_to(dtype, rng.standard_normal((world, tokens, hidden)))
        residual = round_to(dtype, rng.standard_normal((tokens, hidden)))
        weight = round_to(dtype, 1.0 + 0.5 * rng.standard_normal(hidden))
        s = x[0].astype(np.float64)
        for r in range(1, world):
            s = s + x[r].astype(np.float64)
        r = s + residual.astype(np.float64)
        inv_rms = 1.0 / np.sqrt(np.mean(r * r, axis=1, keepdims=True) + eps)
        out = r * inv_rms * weight.astype(np.float64)
        write_case("allreduce", name, dtype,
                   {"op": "add_rmsnorm", "world": world, "tokens": tokens, "hidden": hidden, "eps": eps}, seed, GEN,
                   {"x": x, "residual": residual, "weight": weight, "out": out.astype(np.float32),
                    "residual_out": r.astype(np.float32)})


if __name__ == "__main__":
    main()
