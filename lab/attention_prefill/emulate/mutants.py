"""Planted bugs the emulator must catch: each is a variant's file with its edits applied (every find
text must occur exactly once, or gen.py stops naming the mutant), built into the emulator as a variant
named `name`. `prefill_emulator --mutants` runs each on the problems in order and passes only if the
mutant fails with `expect` in the first line of its failure, and its variant passes those problems;
`@line{TEXT}` in `expect` stands for the number of the line of the mutated file that holds TEXT.
A kernel edit that moves a find text breaks the build: update the text here."""

MUTANTS = [
    {   # rule: a register operand in flight is off-limits until the wait covering it
        "name": "mutant_p_packed_early",
        "variant": "v10_pingpong",
        "edits": [("                softmax(j);\n"
                   "                wgmma_wait<0>();\n"
                   "                pv_done(j - 1);\n"
                   "                pack_p<T>(a, s[0]);\n",
                   "                softmax(j);\n"
                   "                pack_p<T>(a, s[0]);\n"
                   "                wgmma_wait<0>();\n"
                   "                pv_done(j - 1);\n")],
        "expect": "A fragment a[kk] of the wgmma issued at v10_pingpong.cu:@line{auto pv = [&]}",
    },
    {   # the same for an accumulator: O rescaled while P_{j-1} V_{j-1} runs
        "name": "mutant_o_rescaled_in_flight",
        "variant": "v10_pingpong",
        "edits": [("                rescale_rows(o, alpha); /* by tile j - 1's softmax, while S_j runs */\n"
                   "                wgmma_begin(a, o[0]);\n"
                   "                pv(j - 1);\n",
                   "                wgmma_begin(a, o[0]);\n"
                   "                pv(j - 1);\n"
                   "                rescale_rows(o, alpha);\n")],
        "expect": "accumulator o of the wgmma issued at v10_pingpong.cu:@line{auto pv = [&]}",
    },
    {   # the same, read instead of written: S used before the wait that covers it
        "name": "mutant_s_read_early",
        "variant": "v10_pingpong",
        "edits": [("                wgmma_wait<1>(); /* S_j; P_{j-1} V_{j-1} may still run under the softmax */\n"
                   "                softmax(j);\n",
                   "                softmax(j);\n"
                   "                wgmma_wait<1>();\n")],
        "expect": "accumulator s of the wgmma issued at v10_pingpong.cu:@line{auto qk = [&]}",
    },
    {   # rule: a copy lands when its mbarrier phase completes, and a reader must have waited for it
        "name": "mutant_no_wait_v",
        "variant": "v10_pingpong",
        "edits": [("                wait_v(j - 1);\n", "")],
        "expect": "has not waited for",
    },
    {   # rule: a stage handed back is poisoned, and a product still reading it fails
        "name": "mutant_early_release",
        "variant": "v8_warp_specialized",
        "edits": [("        wgmma_wait<0>();\n"
                   "        pin(o[0]);\n"
                   "        mark(at(kPvDone, j));\n"
                   "        if (lane == 0) mbar_arrive(&sm.empty_v[slot.stage]);\n",
                   "        if (lane == 0) mbar_arrive(&sm.empty_v[slot.stage]);\n"
                   "        wgmma_wait<0>();\n"
                   "        pin(o[0]);\n"
                   "        mark(at(kPvDone, j));\n")],
        "expect": "handed back to the producer",
    },
    {   # rule: wgmma.fence between ordinary register writes and the wgmma using them
        "name": "mutant_no_wgmma_fence",
        "variant": "v8_warp_specialized",
        "edits": [("        wgmma_begin(a, o[0]);\n", "        pin(a), pin(o[0]);\n")],
        "expect": "the first to use accumulator o, with no wgmma.fence",
    },
    {   # rule: fence.proxy.async between generic writes (cp.async) and the tensor cores' reads
        "name": "mutant_no_proxy_fence",
        "variant": "v7_wgmma",
        "edits": [("        fence_async_smem(); /* this thread's copies are read next by the tensor cores */\n", "")],
        "expect": "fence.proxy.async",
    },
    {   # rule: cp.async lands at its wait_group; reading before it reads a copy in flight
        "name": "mutant_no_cp_async_wait",
        "variant": "v7_wgmma",
        "edits": [("        cp_async_wait<0>();\n        fence_async_smem();", "        fence_async_smem();")],
        "expect": "in flight",
    },
    {   # rule: a cp.async copy is read only by threads a barrier orders after its landing
        "name": "mutant_no_syncthreads",
        "variant": "v4_cp_async",
        "edits": [("        __syncthreads();    /* ... and everyone's; and every warp is done with tile j - 1: its stage is free */\n",
                   "")],
        "expect": "ldmatrix at v4_cp_async.cu",
    },
    {   # rule: every variant's own launcher runs (a grid one request short)
        "name": "mutant_launch_grid",
        "variant": "v5_longest_first",
        "edits": [("const dim3 grid((unsigned)p->num_qo_heads, (unsigned)p->batch, (unsigned)tiles);",
                   "const dim3 grid((unsigned)p->num_qo_heads, (unsigned)p->batch - 1, (unsigned)tiles);")],
        "expect": "elements of out",
    },
    {   # the problem set: every causal boundary offset (this one shows at (kv - q + 2) mod 64 == 0)
        "name": "mutant_causal_row",
        "variant": "v2_mma",
        "edits": [("const int mask_from = visible_keys(p.causal, r.q_len, r.kv_len, tile_q0);",
                   "const int mask_from = visible_keys(p.causal, r.q_len, r.kv_len, tile_q0 + 1);")],
        "expect": "elements of out",
    },
    {   # the problem set: several kv heads
        "name": "mutant_kv_head0",
        "variant": "v4_cp_async",
        "edits": [("kv_head = head / (int)(p.num_qo_heads / p.num_kv_heads);",
                   "kv_head = 0 * head / (int)(p.num_qo_heads / p.num_kv_heads);")],
        "expect": "elements of out",
    },
    {   # the problem set: several key tiles whose maximum moves (l never rescaled)
        "name": "mutant_no_rescale_l",
        "variant": "v8_warp_specialized",
        "edits": [("        online_softmax(s, m, l, o, scale_log2);\n",
                   "        { float l_tile[1][2] = {{0.f, 0.f}}; online_softmax(s, m, l_tile, o, scale_log2);"
                   " l[0][0] += l_tile[0][0], l[0][1] += l_tile[0][1]; }\n")],
        "expect": "elements of",
    },
    {   # rule: a deadlock is found by progress (warp 4 never hands K back)
        "name": "mutant_deadlock",
        "variant": "v8_warp_specialized",
        "edits": [("        if (lane == 0) mbar_arrive(&sm.empty_k[slot.stage]); /* this warp is done reading K */",
                   "        if (lane == 0 && threadIdx.x / 32 != 4) mbar_arrive(&sm.empty_k[slot.stage]);")],
        "expect": "deadlock",
    },
    {   # a CTA of a cluster leaving while its partner still arrives on its barriers
        "name": "mutant_no_final_cluster_sync",
        "variant": "v9_multicast",
        "edits": [("    cluster_sync(); /* no CTA leaves while its partner may still copy into it or arrive on its barriers */\n",
                   "")],
        "expect": "which had exited",
    },
    {   # the problem set: every position of the diagonal (v11 leaves the mask out of one tile too many)
        "name": "mutant_whole_past_diagonal",
        "variant": "v11_diag_mask_exp2",
        "edits": [("        const int whole = min(n, mask_from / BN);\n",
                   "        const int whole = min(n, mask_from / BN + 1);\n")],
        "expect": "elements of out",
    },
    {   # v12: a page-number list read before the barrier that publishes it (stale numbers, wrong rows; a list
        # never yet written holds no page number at all, and its rows are read from outside the cache)
        "name": "mutant_page_list_unpublished",
        "variant": "v12_paged_gather",
        "edits": [("            next = page_number(step + 2); /* in flight under the next step's waits and copies */\n"
                   "            named_sync(kPagesBarrier, 128);\n",
                   "            next = page_number(step + 2); /* in flight under the next step's waits and copies */\n")],
        "expect": "source outside every global buffer of the launch",
    },
    {   # v12: two lists, so tile j + 1's overwrites tile j - 1's while its V rows are still being issued
        "name": "mutant_two_page_lists",
        "variant": "v12_paged_gather",
        "edits": [("constexpr int kPageLists = 3;", "constexpr int kPageLists = 2;")],
        "expect": "elements of out",
    },
    {   # v12: the next work tile's first list stored while the previous work tile's last V is still issued
        "name": "mutant_page_list_reused_early",
        "variant": "v12_paged_gather",
        "edits": [("    int32_t next = page_number(0);\n    named_sync(kPagesBarrier, 128);\n",
                   "    int32_t next = page_number(0);\n")],
        "expect": "elements of out",
    },
    {   # the problem set: a max that jumps by more than 2^8 between key tiles (v13 never rescaling O)
        "name": "mutant_lazy_never_rescales",
        "variant": "v13_lazy_rescale",
        "edits": [("            if (!__all_sync(0xffffffffu, alpha[0][0] == 1.f && alpha[0][1] == 1.f)) rescale_rows(o, alpha);\n",
                   "            if (!__all_sync(0xffffffffu, true)) rescale_rows(o, alpha);\n")],
        "expect": "elements of out",
    },
    {   # v13: a row keeping its first max for good: on the growing keys P overflows fp16 to inf, and the
        # P V product then forms inf x 0 (FE_INVALID). Which failure comes first depends on the host: where
        # an SSE register still holds a copy of an in-flight accumulator's poison when that trap fires, the
        # emulation names the accumulator; elsewhere the invalid operation is the kernel's own, runs on, and
        # the output holds infinities, out rel_l2 inf (seen on two CPU machines with the same build: one each way)
        "name": "mutant_lazy_keeps_always",
        "variant": "v13_lazy_rescale",
        "edits": [("        const bool keep = (mx - m[0][h]) * scale_log2 <= kLazyLog2;\n",
                   "        const bool keep = m[0][h] != -INFINITY;\n")],
        "expect": "accumulator o of the wgmma || (out rel_l2 inf",
    },
    {   # v14: the speculative exponentials always kept, the check ignored: on the growing keys a row's P is
        # formed against a stale max (fp16 P overflows; see mutant_lazy_keeps_always for the two ways it shows)
        "name": "mutant_spec_never_checked",
        "variant": "v14_speculative_softmax",
        "edits": [("    if (!__all_sync(0xffffffffu, keep)) return false;\n",
                   "    if (!__all_sync(0xffffffffu, true)) return false;\n")],
        "expect": "accumulator o of the wgmma || (out rel_l2 inf",
    },
    {   # v14: O not rescaled after a recomputation moved some row's max
        "name": "mutant_spec_rescale_dropped",
        "variant": "v14_speculative_softmax",
        "edits": [("            if (rescale) rescale_rows(o, alpha); /* O holds tiles < j */\n", "")],
        "expect": "elements of out",
    },
    {   # v14: the recomputed S of a tile the diagonal crosses left unmasked
        "name": "mutant_spec_recompute_unmasked",
        "variant": "v14_speculative_softmax",
        "edits": [("                    if (masked) mask_tile(s, j * BN, lane, limit);\n", "")],
        "expect": "elements of out",
    },
    {   # v14: K handed back when S is done (v13's place), before the warp may read it again to recompute S
        "name": "mutant_spec_k_released_early",
        "variant": "v14_speculative_softmax",
        "edits": [("            pin(s[0]);\n            mark(at(kSDone, j));\n            constexpr bool kWhole",
                   "            pin(s[0]);\n            mark(at(kSDone, j));\n            if (lane == 0) mbar_arrive(&sm.empty_k[stage(j)]);\n            constexpr bool kWhole"),
                  ("            __syncwarp();\n            if (lane == 0) mbar_arrive(&sm.empty_k[stage(j)]);\n", "")],
        "expect": "after its stage was handed back",
    },
    {   # v17: one of a thread's two row sums checked, the other row's exponentials never bounded: on the
        # growing keys that row's P is formed against a stale max (fp16 P overflows, as with v14's check ignored)
        "name": "mutant_sum_check_one_row",
        "variant": "v17_sum_check",
        "edits": [("sum[0] <= kBound && sum[1] <= kBound", "sum[0] <= kBound")],
        "expect": "elements of out",
    },
    {   # v14's trace: the second work tile's events written over the first's slots (the guide would read a
        # boundary that never happened)
        "name": "mutant_trace_second_work_tile_over_the_first",
        "variant": "v14_speculative_softmax",
        "edits": [("return trace_slot(traced, e, c, (int)consumed + j); };", "return trace_slot(traced, e, c, j); };")],
        "expect": "the trace of CTA 0 is missing events or out of order",
    },
    {   # v15: the consumers' fence for the tensor cores (its gathering threads no longer fence) run by one
        # warpgroup only: the other's products read bytes fenced by someone else (a fence publishes another
        # thread's copies only for the thread that runs it)
        "name": "mutant_async_gather_one_reader_fences",
        "variant": "v15_async_gather",
        "edits": [("            if constexpr (kGathered) fence_async_smem();\n",
                   "            if constexpr (kGathered) if (c == 1) fence_async_smem();\n")],
        "expect": "did not fence.proxy.async after its wait for them",
    },
    {   # v15: a thread's arrival made before its copies of the tile are issued: the stage is full while they
        # are still in flight (the emulation lands them at the thread's next arrival, after the readers'
        # fence, so the read is of bytes no fence published)
        "name": "mutant_async_gather_arrives_first",
        "variant": "v15_async_gather",
        "edits": [("        const uint32_t dst = smem_addr(tile);\n",
                   "        const uint32_t dst = smem_addr(tile);\n        cp_async_mbar_arrive(full);\n"),
                  ("        cp_async_mbar_arrive(full); /* arrives when this thread's copies of the tile have landed */\n", "")],
        "expect": "with no fence.proxy.async before the read",
    },
    {   # v16: a key's slot listed without its position in the page (page number x page_size): every row of
        # a page reads the page's first row where pages hold more than one key (page 1 cannot show it)
        "name": "mutant_lean_gather_slot_without_position",
        "variant": "v16_lean_gather",
        "edits": [("list(j)[tid] = k.page_number < 0 ? -1 : k.page_number * (int32_t)p.page_size + k.position;",
                   "list(j)[tid] = k.page_number < 0 ? -1 : k.page_number * (int32_t)p.page_size;")],
        "expect": "elements of out",
    },
    {   # v16: a request's last, partial key tile taken for a whole one: its rows past kv_len are copied from
        # slot -1 (2^32 - 1 slots into the cache) instead of zero-filled, a read outside every buffer
        "name": "mutant_lean_gather_partial_tile_as_whole",
        "variant": "v16_lean_gather",
        "edits": [("if ((j + 1) * BN <= r.kv_len) {", "if (j * BN < r.kv_len) {")],
        "expect": "source outside every global buffer of the launch",
    },
]
