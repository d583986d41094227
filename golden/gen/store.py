#!/usr/bin/env python3
"""Golden cases for store (K/V scatter into a paged cache): exact, edge and odd shapes.

    k_cache_out = k_cache; k_cache_out[slots[t]] = k[t] for slots[t] >= 0 (same for v)
The cache [num_pages, page_size, kv_heads, head_dim] is stored flattened as [num_slots, ...].
Slots never repeat within a case. Run: python3 golden/gen/store.py && bash golden/gen/manifest.sh
"""
import numpy as np

from common import round_to, write_case

GEN = "golden/gen/store.py"

CASES = [
    # name, dtype, tokens, kv_heads, head_dim, num_slots, pattern, share skipped, last slot used
    ("bf16_random_slots", "bf16", 12, 2, 64, 40, "random", 0.0, False),
    ("fp32_small", "fp32", 5, 1, 16, 8, "random", 0.0, False),
    ("fp16_sequential", "fp16", 10, 2, 32, 24, "sequential", 0.0, False),
    ("slot_minus_one", "bf16", 16, 2, 64, 32, "random", 0.4, False),
    ("last_slot", "bf16", 6, 4, 32, 20, "random", 0.0, True),
    ("head_dim_80", "bf16", 9, 2, 80, 16, "random", 0.2, True),
    ("head_dim_256", "bf16", 5, 2, 256, 8, "random", 0.2, True),
    ("one_kv_head", "bf16", 11, 1, 128, 16, "sequential", 0.1, True),
    ("odd_row_fp16", "fp16", 7, 3, 7, 12, "random", 0.2, True),
    ("all_skipped", "bf16", 4, 2, 32, 8, "random", 1.0, False),
    ("one_token_bit_patterns", "bf16", 1, 2, 64, 8, "random", 0.0, False),
]

# Values a copy must move bit for bit, whatever arithmetic would make of them: both zeros, quiet
# NaNs with payloads and either sign, infinities, the smallest subnormal and the largest finite.
# As float32 bits, each exact in bf16 (low 16 bits zero).
BIT_PATTERNS = np.array([0x80000000, 0x00000000, 0x7FC10000, 0xFFE30000, 0x7FFF0000, 0x7F800000,
                         0xFF800000, 0x00010000, 0x80010000, 0x7F7F0000, 0xFF7F0000], dtype=np.uint32)


def plant_bit_patterns(a, rng):
    """Writes the bit patterns over random places of a (float32, exact in the case's dtype)."""
    flat = a.reshape(-1)
    at = rng.permutation(flat.size)[: 2 * BIT_PATTERNS.size]
    flat[at] = np.tile(BIT_PATTERNS, 2).view(np.float32)


def main():
    for i, (name, dtype, n, heads, dim, num_slots, pattern, skipped, last) in enumerate(CASES):
        seed = 300 + i
        rng = np.random.default_rng(seed)
        k = round_to(dtype, rng.standard_normal((n, heads, dim)))
        v = round_to(dtype, rng.standard_normal((n, heads, dim)))
        k_cache = round_to(dtype, rng.standard_normal((num_slots, heads, dim)))
        v_cache = round_to(dtype, rng.standard_normal((num_slots, heads, dim)))
        if name == "one_token_bit_patterns":  # in the token and in the cache rows it leaves alone
            for a in (k, v, k_cache, v_cache):
                plant_bit_patterns(a, rng)
        if pattern == "sequential":
            start = rng.integers(0, num_slots - n + 1)
            slots = np.arange(start, start + n, dtype=np.int64)
        else:
            slots = rng.permutation(num_slots)[:n].astype(np.int64)
        if last:
            slots[slots == num_slots - 1] = slots[0]
            slots[0] = num_slots - 1
        skip = rng.random(n) < skipped
        if last:
            skip[0] = False
        slots[skip] = -1
        k_out, v_out = k_cache.astype(np.float64), v_cache.astype(np.float64)
        keep = slots >= 0
        k_out[slots[keep]] = k[keep]
        v_out[slots[keep]] = v[keep]
        write_case("store", name, dtype, {}, seed, GEN,
                   {"k": k, "v": v, "slots": slots, "k_cache": k_cache, "v_cache": v_cache,
                    "k_cache_out": k_out.astype(np.float32), "v_cache_out": v_out.astype(np.float32)})


if __name__ == "__main__":
    main()
