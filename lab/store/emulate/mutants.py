"""Planted bugs the emulator must catch in store's fused family (lab/emulate/gen.py applies each edit to the
variant's text, and every find text must occur exactly once). `store_emulator --mutants` runs each on the
problems in order and passes only if the mutant fails with `expect` in the first line of its failure, on a
problem its variant passes."""

# v6_bulk_ring includes kernels/ptx_sm90.cuh; v4, v5 and v7 reach the emulation only through
# kernels/common.cuh (pdl_wait, launch_pdl), so the fused family is named here by its header: every variant that
# includes it, a learner's copy of v7 too
ALSO_EMULATED = ["kernels/store/fused_pairs.cuh"]

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
    {   # the position loaded a token ahead taken for the token after it: every token a group walks past its
        # first two is rotated with the cos/sin of the token G before it (K first, in the check's order)
        "name": "mutant_v7_position_a_token_late",
        "variant": "v7_token_walk",
        "edits": [("pos_next = t_next + w.groups < w.num_tokens ? __ldg(positions + t_next + w.groups) : -1;",
                   "pos_next = t_next + w.groups < w.num_tokens ? __ldg(positions + t_next) : -1;")],
        "expect": "elements of k_cache outside",
    },
    {   # the next token's loads issued into the buffer of the token being stored: each token after a group's
        # first is stored with the chunks of the token after it
        "name": "mutant_v7_next_loads_into_this_token",
        "variant": "v7_token_walk",
        "edits": [("issue_token<T, NEOX>(qkv, slots, cos_sin, w, t_next, pos_next, s, pc, needs_slot, next);",
                   "issue_token<T, NEOX>(qkv, slots, cos_sin, w, t_next, pos_next, s, pc, needs_slot, now);")],
        "expect": "elements of k_cache outside",
    },
]
