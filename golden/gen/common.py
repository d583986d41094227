"""Shared helpers for the golden generators: numpy only, independent of reference/.

A case is golden/<module>/<case>/ with meta.json and .npy arrays (lab/CONTRACTS.md section 4).
Inputs of a bf16/fp16 case are stored as float32 holding values exactly representable in
that dtype; expected outputs are computed in float64 from those exact values, stored <f4.
"""
import json
import os
import shutil

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def round_bf16(a):
    """Rounds float32 values to bfloat16 (nearest, ties to even), returned as float32."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16) << 16
    out = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a), np.float32(np.nan), out).astype(np.float32)


def round_to(dtype, a):
    a = np.asarray(a, dtype=np.float64).astype(np.float32)
    if dtype == "bf16":
        return round_bf16(a)
    if dtype == "fp16":
        return a.astype(np.float16).astype(np.float32)
    return a


def write_case(module, case, dtype, params, seed, generator, arrays):
    d = os.path.join(ROOT, module, case)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    meta = {"module": module, "case": case, "dtype": dtype, "params": params, "seed": seed,
            "generator": generator, "reference": "float64"}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=False)
        f.write("\n")
    for name, arr in arrays.items():
        np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(arr))
