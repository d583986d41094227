"""Planted bugs the emulator must catch in store's bulk-copy ring (v6_bulk_ring; lab/emulate/gen.py applies
each edit to the variant's text, and every find text must occur exactly once). `store_emulator --mutants`
runs each on the problems in order and passes only if the mutant fails with `expect` in the first line of
its failure, on a problem its variant passes."""

MUTANTS = [
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
