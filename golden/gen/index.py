#!/usr/bin/env python3
"""Golden cases for index (embedding-row gather): exact, edge and odd shapes.

    out[t] = table[ids[t] - vocab_start]  if vocab_start <= ids[t] < vocab_start + vocab, else 0
computed with numpy from the stored table (a copy: exact in every dtype).
Run: python3 golden/gen/index.py && bash golden/gen/manifest.sh
"""
import numpy as np

from common import round_to, write_case

GEN = "golden/gen/index.py"


def ids_for(rng, n, vocab, vocab_start, outside):
    """First and last row of the shard, then ids inside, a share `outside` of them outside."""
    ids = vocab_start + rng.integers(0, vocab, size=n)
    out_mask = rng.random(n) < outside
    far = np.concatenate([[vocab_start - 1, vocab_start + vocab, -1, vocab_start + vocab + 12345, 0]])
    ids[out_mask] = rng.choice(far, size=out_mask.sum())
    if vocab_start == 0:
        ids[ids == 0] = vocab  # 0 is inside shard 0: keep the outside ones outside
        ids[~out_mask & (ids == vocab)] = 0
    ids[0], ids[min(1, n - 1)] = vocab_start, vocab_start + vocab - 1
    return ids.astype(np.int32)


CASES = [
    # name, dtype, tokens, vocab, hidden, vocab_start, share outside, repeated ids
    ("bf16_basic", "bf16", 24, 64, 128, 0, 0.0, False),
    ("fp32_small", "fp32", 10, 16, 32, 0, 0.0, False),
    ("fp16_rows", "fp16", 12, 40, 256, 0, 0.0, False),
    ("one_token", "bf16", 1, 4, 4096, 0, 0.0, False),
    ("hidden_4096", "bf16", 6, 8, 4096, 0, 0.0, False),
    ("hidden_7", "bf16", 19, 30, 7, 0, 0.2, False),
    ("hidden_264", "bf16", 21, 30, 264, 0, 0.2, False),
    ("repeated_ids", "bf16", 40, 5, 96, 0, 0.0, True),
    ("shard_ids_outside", "bf16", 48, 50, 64, 1000, 0.4, False),
    ("shard_fp32_odd_hidden", "fp32", 17, 9, 33, 77, 0.3, True),
]


def main():
    for i, (name, dtype, n, vocab, hidden, vocab_start, outside, repeated) in enumerate(CASES):
        seed = 200 + i
        rng = np.random.default_rng(seed)
        table = round_to(dtype, rng.standard_normal((vocab, hidden)))
        ids = ids_for(rng, n, vocab, vocab_start, outside)
        if repeated:
            ids[n // 2:] = ids[: n - n // 2]  # the second half repeats the first
        local = ids.astype(np.int64) - vocab_start
        inside = (local >= 0) & (local < vocab)
        out = np.zeros((n, hidden), dtype=np.float64)
        out[inside] = table[local[inside]].astype(np.float64)
        write_case("index", name, dtype, {"vocab_start": vocab_start}, seed, GEN,
                   {"table": table, "ids": ids, "out": out.astype(np.float32)})


if __name__ == "__main__":
    main()
