"""Planted bugs the emulator must catch in attention_decode's tensor-core variant (lab/emulate/gen.py
applies each edit to the variant's text; every find text must occur exactly once). `decode_emulator
--mutants` runs each on the problems in order and passes only if the mutant fails with `expect` in the
first line of its failure, where its variant passes those problems."""

MUTANTS = [
    {   # a draft token that sees its successor: the causal limit one key late
        "name": "mutant_draft_sees_its_successor",
        "variant": "v4_tensor_cores",
        "edits": [("(rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V4_CAUSAL_SHIFT)",
                   "(rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V4_CAUSAL_SHIFT + 1)")],
        "expect": "outside the attention policy's bound",
    },
    {   # one that misses its own key: one early
        "name": "mutant_draft_misses_its_own_key",
        "variant": "v4_tensor_cores",
        "edits": [("(rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V4_CAUSAL_SHIFT)",
                   "(rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V4_CAUSAL_SHIFT - 1)")],
        "expect": "outside the attention policy's bound",
    },
    {   # a split's partial filed under the request instead of the query row: draft rows overwrite each other
        "name": "mutant_partial_per_request",
        "variant": "v4_tensor_cores",
        "edits": [("kl::decode::partial(p, split, o.row, o.h0 + o.h, q_rows)[i % S::ROW] = res[i];",
                   "kl::decode::partial(p, split, b, o.h0 + o.h, q_rows)[i % S::ROW] = res[i];")],
        "expect": "outside the attention policy's bound",
    },
]
