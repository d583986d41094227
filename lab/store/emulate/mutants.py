"""Planted bugs the emulator must catch in store's fused family (lab/emulate/gen.py applies each edit to the
variant's text, and every find text must occur exactly once). `store_emulator --mutants` runs each on the
problems in order and passes only if the mutant fails with `expect` in the first line of its failure, on a
problem its variant passes."""

# v6_bulk_ring includes kernels/ptx_sm90.cuh; v4 and v5 reach the emulation only through kernels/common.cuh
# (pdl_wait, launch_pdl), so they are named here
ALSO_EMULATED = ["v4_rope_quant_store", "v5_tile_inflight"]

MUTANTS = [
    {   # one element a thread (shapes without whole 16-byte chunks): e4m3 without saturation, so a K value
        # past 448 becomes NaN instead of 448
        "name": "mutant_v4_element_not_saturated",
        "variant": "v4_rope_quant_store",
        "edits": [("o[0] * inv_scale, __NV_SATFINITE, __NV_E4M3)", "o[0] * inv_scale, __NV_NOSAT, __NV_E4M3)")],
        "expect": "elements of k_cache outside",
    },
    {   # one element a thread: the scale's reciprocal applied twice
        "name": "mutant_v4_element_scale_twice",
        "variant": "v4_rope_quant_store",
        "edits": [("o[0] * inv_scale, __NV_SATFINITE, __NV_E4M3)",
                   "o[0] * inv_scale * inv_scale, __NV_SATFINITE, __NV_E4M3)")],
        "expect": "elements of k_cache outside",
    },
    {   # the rotated q stored from the stage without the proxy fence: the bulk copy reads what the TMA wrote
        "name": "mutant_v6_q_stored_without_proxy_fence",
        "variant": "v6_bulk_ring",
        "edits": [("        kl::ptx::fence_async_smem();\n", "\n")],
        "expect": "elements of q_out outside",
    },
    {   # a block's step count rounded down: its last round of tokens never taken (the GPU suite's mutant), so
        # their K rows never reach the cache
        "name": "mutant_v6_last_round_dropped",
        "variant": "v6_bulk_ring",
        "edits": [("#define KL_STORE_V6_BUG 0", "#define KL_STORE_V6_BUG 1")],
        "expect": "elements of k_cache outside",
    },
    {   # the producer waits for round r of a stage's hand-back instead of round r - 1: nothing is ever copied
        "name": "mutant_v6_producer_waits_a_round_late",
        "variant": "v6_bulk_ring",
        "edits": [("kl::ptx::mbar_wait(&empty[st], (int)(k / stages & 1) ^ 1);",
                   "kl::ptx::mbar_wait(&empty[st], (int)(k / stages & 1));")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
]
