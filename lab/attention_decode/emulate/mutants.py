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
    {   # the splits' partials laid out for one query a request: a split's draft rows past the batch land on the
        # next split's rows
        "name": "mutant_partials_laid_out_for_one_query",
        "variant": "v4_tensor_cores",
        "edits": [("(p, mrg, last, nh, at, counter, split, splits, q_rows);",
                   "(p, mrg, last, nh, at, counter, split, splits, 1 + 0 * q_rows);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v28: a draft token that sees its successor: the causal limit one key late
        "name": "mutant_v28_draft_sees_its_successor",
        "variant": "v28_draft_tile_gatherers",
        "edits": [("(rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V28_CAUSAL_SHIFT)",
                   "(rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V28_CAUSAL_SHIFT + 1)")],
        "expect": "outside the attention policy's bound",
    },
    {   # v28: every n-tile's columns take the first n-tile's causal limits: the second tile's later tokens
        # miss their last keys
        "name": "mutant_v28_one_limit_for_every_tile",
        "variant": "v28_draft_tile_gatherers",
        "edits": [("(rb + 8 * nt + 2 * tq + e) / group + KL_DECODE_V28_CAUSAL_SHIFT)",
                   "(rb + 0 * nt + 2 * tq + e) / group + KL_DECODE_V28_CAUSAL_SHIFT)")],
        "expect": "outside the attention policy's bound",
    },
    {   # v28: a split's partials counted on the kv head's first block of rows: with two blocks the counter
        # reaches the split count early, and a block merges partials not yet written
        "name": "mutant_v28_counter_of_block_0",
        "variant": "v28_draft_tile_gatherers",
        "edits": [("((int64_t)b * p.num_kv_heads + g) * blocks + hb;", "((int64_t)b * p.num_kv_heads + g) * blocks + 0 * hb;")],
        "expect": "outside the attention policy's bound",
    },
    {   # FP8: the score scale without k_scale (the codes' dot product taken as the logits' own)
        "name": "mutant_fp8_k_scale_dropped",
        "variant": "v6_fp8_tensor_cores",
        "edits": [("const float scale = p.sm_scale * k_sc * 1.44269504089f;",
                   "const float scale = p.sm_scale * 1.44269504089f + 0 * k_sc;")],
        "expect": "outside the attention policy's bound",
    },
    {   # FP8: kv head 0's k_scale for every kv head
        "name": "mutant_fp8_head0_k_scale",
        "variant": "v6_fp8_tensor_cores",
        "edits": [("p.k_scale[KL_DECODE_V6_BUG == 2 ? 0 : g]", "p.k_scale[0]")],
        "expect": "outside the attention policy's bound",
    },
    {   # FP8: the accumulators leave without v_scale
        "name": "mutant_fp8_v_scale_dropped",
        "variant": "v6_fp8_tensor_cores",
        "edits": [("const float v_sc = KL_DECODE_V6_BUG == 3 ? 1.f : p.v_scale[g];", "const float v_sc = 1.f;")],
        "expect": "outside the attention policy's bound",
    },
    {   # FP8: the accumulators written to v4's dims (16 mt + gq), not to the dims the V loads gave them
        "name": "mutant_fp8_v_dims_as_v4",
        "variant": "v6_fp8_tensor_cores",
        "edits": [("const int d = 32 * (mt / 2) + 4 * gq + 2 * (mt % 2);", "const int d = 16 * mt + gq - 0 * (mt % 2);"),
                  ("w0[d + 1] = o[mt][2] * v_sc, w1[d + 1] = o[mt][3] * v_sc;",
                   "w0[d + 8] = o[mt][2] * v_sc, w1[d + 8] = o[mt][3] * v_sc;")],
        "expect": "outside the attention policy's bound",
    },
    {   # v8: the ldmatrix addresses without the TMA's 128-byte swizzle (rows read as the copies did not lay them)
        "name": "mutant_v8_swizzle_not_applied",
        "variant": "v8_tma_pages",
        "edits": [("#define KL_DECODE_V8_BUG 0", "#define KL_DECODE_V8_BUG 1")],
        "expect": "outside the attention policy's bound",
    },
    {   # FP8 with fp16 operands: a bf16 q's per-head power of two left in the scores (the logits 2^14 .. 2^15
        # times max|q| too large: the softmax collapses onto the largest score)
        "name": "mutant_fp8_q_scale_kept",
        "variant": "v7_fp8_f16_mma",
        "edits": [("const float dq0 = KL_DECODE_V7_BUG == 1 ? 1.f : __shfl_sync(0xffffffffu, q_down, 8 * tq);",
                   "const float dq0 = 1.f;"),
                  ("const float dq1 = KL_DECODE_V7_BUG == 1 ? 1.f : __shfl_sync(0xffffffffu, q_down, 8 * tq + 4);",
                   "const float dq1 = 1.f + 0 * q_down;")],
        "expect": "outside the attention policy's bound",
    },
    {   # FP8 with fp16 operands: a bf16 q converted to fp16 unscaled (heads past 65504 become infinite)
        "name": "mutant_fp8_q_unscaled",
        "variant": "v7_fp8_f16_mma",
        "edits": [("const float2 sc = q_scales(mx);", "const float2 sc = make_float2(1.f, 1.f + 0 * mx);")],
        "expect": "outside the attention policy's bound",
    },
    {   # FP8 with fp16 operands: V's codes paired within one token (bytes 2h, 2h + 1 of one row) instead of
        # across its two tokens
        "name": "mutant_fp8_v_pairs_within_token",
        "variant": "v7_fp8_f16_mma",
        "edits": [("return __byte_perm(x, y, h ? 0x7362u : 0x5140u);", "return __byte_perm(x, y, h ? 0x7632u : 0x5410u);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v9: the codes read without the TMA's 128-byte swizzle
        "name": "mutant_v9_swizzle_not_applied",
        "variant": "v9_fp8_tma_pages",
        "edits": [("#define KL_DECODE_V9_BUG 0", "#define KL_DECODE_V9_BUG 1")],
        "expect": "outside the attention policy's bound",
    },
    {   # v9: kv head 0's k_scale for every kv head
        "name": "mutant_v9_head0_k_scale",
        "variant": "v9_fp8_tma_pages",
        "edits": [("const float scale = p.sm_scale * p.k_scale[g] * 1.44269504089f;",
                   "const float scale = p.sm_scale * p.k_scale[0] * 1.44269504089f;")],
        "expect": "outside the attention policy's bound",
    },
    {   # v10: every consumer warp reads the first head's tile of the stage, whatever its kv head
        "name": "mutant_v10_every_warp_reads_head0",
        "variant": "v10_fp8_page_heads",
        "edits": [("*ks = ring + st * S::STAGE_BYTES + hh * S::HEAD_TILE,", "*ks = ring + st * S::STAGE_BYTES,")],
        "expect": "outside the attention policy's bound",
    },
    {   # v10: a stage handed back when one warp of its HB has arrived: the barrier phases run ahead of the ring
        "name": "mutant_v10_stage_freed_by_one_warp",
        "variant": "v10_fp8_page_heads",
        "edits": [("(full, empty, 1, 32 * HB)", "(full, empty, 1, 32)")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v10: every head of the CTA finished from the first head's merge rows (their stride 0)
        "name": "mutant_v10_heads_finish_from_head0",
        "variant": "v10_fp8_page_heads",
        "edits": [("(p, mrg, S::MERGE_ROWS * S::ROW, last,", "(p, mrg, 0, last,")],
        "expect": "outside the attention policy's bound",
    },
    {   # v14: the stage handed back before its codes are read: the producer's next copy may land
        # under the consumer's reads
        "name": "mutant_v14_stage_back_before_read",
        "variant": "v14_fp8_early_release",
        "edits": [("kl::decode::fp8_ring::load_codes<HD, true>(ks, vs, c);",
                   "kl::ptx::mbar_arrive(&empty[st]);\n            kl::decode::fp8_ring::load_codes<HD, true>(ks, vs, c);"),
                  ("(the arrive's release orders the reads before it): the\n             * stage goes back while the arithmetic runs. */\n            kl::ptx::mbar_arrive(&empty[st]);",
                   "(the arrive's release orders the reads before it): the\n             * stage goes back while the arithmetic runs. */")],
        "expect": "outside the attention policy's bound",
    },
    {   # v14: every consumer warp reads the first head's tile of the stage, whatever its kv head
        "name": "mutant_v14_every_warp_reads_head0",
        "variant": "v14_fp8_early_release",
        "edits": [("*ks = ring + st * S::STAGE_BYTES + warp * S::HEAD_TILE,", "*ks = ring + st * S::STAGE_BYTES,")],
        "expect": "outside the attention policy's bound",
    },
    {   # v14: a stage handed back when one warp of its HB has read it: the producer refills it under
        # the other warps' reads, and the barrier phases run ahead of the ring
        "name": "mutant_v14_stage_freed_by_one_warp",
        "variant": "v14_fp8_early_release",
        "edits": [("(full, empty, 1, 32 * HB)", "(full, empty, 1, 32)")],
        "expect": "outside the attention policy's bound",
    },
    {   # v14: two heads a CTA whenever there are two, so an odd head count leaves its last head out
        "name": "mutant_v14_heads_rounded_down",
        "variant": "v14_fp8_early_release",
        "edits": [("if (p->num_kv_heads % 2 == 0) return launch_shape<T, 2>", "if (p->num_kv_heads >= 2) return launch_shape<T, 2>")],
        "expect": "outside the attention policy's bound",
    },
    {   # v14: clusters of two along y whatever the head groups: an odd number of them (one group at 2 kv
        # heads, three at 3) is a grid the cluster does not divide, which the launch refuses
        "name": "mutant_v14_cluster_on_odd_groups",
        "variant": "v14_fp8_early_release",
        "edits": [("attr, grid.y % 2 == 0 ? 2u : 1u};", "attr, 2u};")],
        "expect": "the launcher returned cudaErrorInvalidValue",
    },
    {   # v12: a stage's full barrier counting one arrival, not the producer's 32: the phase completes
        # when the first lane's copies have landed, while the other lanes' rows are still in flight (the
        # emulator sees the 31 arrivals past the count)
        "name": "mutant_v12_full_counts_one_lane",
        "variant": "v12_cp_async_gather",
        "edits": [("(full, empty, 32, 32)", "(full, empty, 1, 32)")],
        "expect": "more arrivals on the mbarrier",
    },
    {   # v13: the cluster merge without its first cluster barrier: a CTA reads its neighbours' merged rows
        # before they are written
        "name": "mutant_v13_reads_before_cluster_barrier",
        "variant": "v13_cluster_merge",
        "edits": [("kl::ptx::cluster_sync(); /* every CTA's res is written */", "/* no cluster barrier */")],
        "expect": "outside the attention policy's bound",
    },
    {   # v13: the last CTA of a cluster left out of the cluster's sum
        "name": "mutant_v13_last_rank_dropped",
        "variant": "v13_cluster_merge",
        "edits": [("sum += l[r] * w, acc += a[r] * w;", "sum += l[r] * w, acc += a[r] * w * (r + 1 < cluster);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v13: a cluster's partial filed under its first split's index instead of the cluster's, where the
        # last CTA never reads it
        "name": "mutant_v13_partial_under_split_index",
        "variant": "v13_cluster_merge",
        "edits": [("float *part = kl::decode::partial(p, k, b, h0 + h);",
                   "float *part = kl::decode::partial(p, k * cluster, b, h0 + h);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v13: no second cluster barrier: a CTA leaves (its shared memory gone) while its neighbours still read it
        "name": "mutant_v13_leaves_before_neighbours_read",
        "variant": "v13_cluster_merge",
        "edits": [("kl::ptx::cluster_sync(); /* every CTA has read the others' res: each may leave, or reuse its ring */",
                   "/* no cluster barrier */")],
        "expect": "which had exited",
    },
    {   # v15: the ring's position not carried to the next piece: its tiles restart at stage 0, round 0
        "name": "mutant_v15_ring_restarts_each_piece",
        "variant": "v15_balanced_slices",
        "edits": [("ring_pos += tiles;", "ring_pos += 0 * tiles;")],
        # the next piece's waits pass on a phase long completed: its consumers read the merge area's floats
        "expect": "outside the attention policy's bound",
    },
    {   # v15: every piece of a pair filed as split 0: the pieces overwrite one partial, the merge reads unwritten ones
        "name": "mutant_v15_pieces_filed_as_split_0",
        "variant": "v15_balanced_slices",
        "edits": [("const int split = c - sl.cta_of(pair_first),", "const int split = 0 * c,")],
        "expect": "outside the attention policy's bound",
    },
    {   # v15: the even slice rounded down: the batch's last units in no slice
        "name": "mutant_v15_slices_rounded_down",
        "variant": "v15_balanced_slices",
        "edits": [("const int64_t even = (units + gridDim.x - 1) / gridDim.x,",
                   "const int64_t even = units / gridDim.x,")],
        "expect": "left a merge counter at",
    },
    {   # v16: v8's four consumer warps kept in the consumers' stride, with three warps: tiles 3, 7, ...
        # never consumed: a request of 4 to 9 tiles (the first problem's 100 keys) leaves them out of its
        # output (a longer one's producer would wait for their stages forever)
        "name": "mutant_v16_stride_of_four_consumers",
        "variant": "v16_head_clusters",
        "edits": [("for (int i = warp; i < tiles; i += CW) {", "for (int i = warp; i < tiles; i += 4) {")],
        "expect": "outside the attention policy's bound",
    },
    {   # v17: both producer warps take gatherer 0's part: a whole 16-slot tile's boxes are issued twice into
        # the same stage (and a gathered tile's odd instructions, half its rows, would never be copied)
        "name": "mutant_v17_both_warps_gatherer_0",
        "variant": "v17_two_gather_warps",
        "edits": [("kGatherers, 1>(", "kGatherers, 0>(")],
        "expect": "while another copy into it is in flight",
    },
    {   # v17: the full barriers count one gatherer's lanes: a stage would be announced full after the first 32
        # of its 64 arrivals, before the other gatherer's copies landed
        "name": "mutant_v17_full_counts_one_gatherer",
        "variant": "v17_two_gather_warps",
        "edits": [("(full, empty, 32 * kGatherers, 32)", "(full, empty, 32, 32)")],
        "expect": "more arrivals on the mbarrier",
    },
    {   # v19: the full barriers still count v18's two gatherers: with one gathering warp a stage's barrier
        # never completes, and the consumers wait on it forever
        "name": "mutant_v19_full_counts_two_gatherers",
        "variant": "v19_one_gatherer",
        "edits": [("(full, empty, 32 * kGatherers, 32)", "(full, empty, 64, 32)")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v24: the full barriers count one gatherer's lanes: a stage would be announced full after the first 32
        # of its 128 arrivals: the other gatherers' arrivals complete later phases, and a consumer waits on a
        # phase that never comes
        "name": "mutant_v24_full_counts_one_gatherer",
        "variant": "v24_four_gatherers",
        "edits": [("(full, empty, 32 * kGatherers, 32)", "(full, empty, 32, 32)")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v24: the last two warps both take gatherer 2's share: a quarter of every tile is copied twice and
        # another never, while every stage still gets its 128 arrivals (the emulator sees the second copy into
        # the same bytes)
        "name": "mutant_v24_one_share_twice",
        "variant": "v24_four_gatherers",
        "edits": [("((warp - CW == G ?", "((min(warp - CW, kGatherers - 2) == G ?")],
        "expect": "while another copy into it is in flight",
    },
    {   # v26: the full barriers count v24's four gatherers' lanes, where one warp gathers a tile: no stage is
        # ever full, and the consumers wait on it forever
        "name": "mutant_v26_full_counts_four_warps",
        "variant": "v26_tile_gatherers",
        "edits": [("(full, empty, 32, 32)", "(full, empty, 32 * kGatherers, 32)")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v26: every gathering warp starts at group 0: groups 0, 3, ... are copied three times over (and the
        # others never), the second copy into a stage while the first is in flight
        "name": "mutant_v26_every_warp_from_group_0",
        "variant": "v26_tile_gatherers",
        "edits": [("full, empty, 0, warp - CW);", "full, empty, 0, 0);")],
        "expect": "while another copy into it is in flight",
    },
    {   # v29: the ring's flips forgotten between work items: a stage's next round waits on a parity its barrier
        # has already shown, so a consumer reads the stage before its copies land
        "name": "mutant_v29_forgets_the_flips",
        "variant": "v29_work_queue",
        "edits": [("flips ^= odd_rounds<STAGES>(", "flips ^= 0 * odd_rounds<STAGES>(")],
        "expect": "after its stage was handed back",
    },
    {   # v29: the queue's counter never reset: the next launch finds it past the end, takes no item and leaves
        # the outputs as they were
        "name": "mutant_v29_queue_never_reset",
        "variant": "v29_work_queue",
        "edits": [("*queue = 0, *ended = 0;", "*ended = 0;")],
        "expect": "the first launch left a merge counter at",
    },
    {   # v29: a request with no keys gets no item: its output (and lse) are never written
        "name": "mutant_v29_empty_request_has_no_item",
        "variant": "v29_work_queue",
        "edits": [("return n > 0 ? (n + chunk - 1) / chunk : 1;", "return n > 0 ? (n + chunk - 1) / chunk : 0;")],
        "expect": "outside the attention policy's bound",
    },
    {   # v30: the ring's flips forgotten between work items, as v29's: the producers run on into the next item,
        # and a copy waits on a parity its stage's empty barrier has already shown, landing under a consumer
        "name": "mutant_v30_forgets_the_flips",
        "variant": "v30_item_pipeline",
        "edits": [("flips ^= odd_rounds<STAGES>(tiles);", "flips ^= 0 * odd_rounds<STAGES>(tiles);")],
        "expect": "while a copy into it is in flight",
    },
    {   # v30: an item slot counts one warp short of its readers: thread 0 takes the slot's next item before the
        # last warp has read the one in it, and that warp skips an item the others work on: the CTA's warps
        # wait on each other's tiles forever
        "name": "mutant_v30_slot_freed_a_warp_early",
        "variant": "v30_item_pipeline",
        "edits": [("kl::ptx::mbar_init(&item_empty[s], kThreads / 32);",
                   "kl::ptx::mbar_init(&item_empty[s], kThreads / 32 - 1);")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v30: the merge meets at __syncthreads, as v29's did: the producer warps, waiting for the ring's stages
        # of the next item, never come
        "name": "mutant_v30_merge_waits_for_the_producers",
        "variant": "v30_item_pipeline",
        "edits": [("chunks_of(kl::decode::kv_len(p, v.b), chunk), consumer_warps{});",
                   "chunks_of(kl::decode::kv_len(p, v.b), chunk));")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v30: the consumer warps go on to the next item without meeting after the merge: the first one done
        # writes its next state over the merge area while the others still read the last item's rows. The
        # round robin keeps the warps together and passes it; a schedule that lets one warp run ahead fails it
        "name": "mutant_v30_merge_area_reused_early",
        "variant": "v30_item_pipeline",
        "edits": [("consumer_warps{}.sync(); /* the merge area is read: the next item's states may go in */", "")],
        "schedule": 1,
        "expect": "outside the attention policy's bound",
    },
    {   # v31: the same, on the rung v11_by_shape runs
        "name": "mutant_v31_merge_area_reused_early",
        "variant": "v31_shrinking_items",
        "edits": [("consumer_warps{}.sync(); /* the merge area is read: the next item's states may go in */", "")],
        "schedule": 1,
        "expect": "outside the attention policy's bound",
    },
    {   # v31: every split reads a whole chunk from its first key, as v30's did: the first chunk's pieces overlap,
        # and the keys of a request's first chunk are counted up to three times
        "name": "mutant_v31_pieces_overlap",
        "variant": "v31_shrinking_items",
        "edits": [("t1 = min(n, c.first(w.split + 1));", "t1 = min(n, c.first(w.split) + c.chunk);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v31: a request's split count misses its last piece: that split is never handed out, and the merge
        # waits for one partial fewer, so the request's last keys are never read
        "name": "mutant_v31_a_piece_uncounted",
        "variant": "v31_shrinking_items",
        "edits": [("for (int t = 1; t <= tail; t++)", "for (int t = 1; t < tail; t++)")],
        "expect": "outside the attention policy's bound",
    },
    {   # v25: the full barriers count one gatherer's lanes: the other three gatherers' arrivals complete later
        # phases, and a consumer waits on a phase that never comes
        "name": "mutant_v25_full_counts_one_gatherer",
        "variant": "v25_fp8_gatherers",
        "edits": [("(full, empty, 32 * kGatherers, 32 * HB)", "(full, empty, 32, 32 * HB)")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v25: the tiles' rows gathered at kv head 0's offset for every CTA: a CTA of heads 4..7 reads heads 0..3
        "name": "mutant_v25_gathers_the_first_head_group",
        "variant": "v25_fp8_gatherers",
        "edits": [("&k_box, &v_box, &k_row, &v_row, false, p, b, g0, t0, t1, ring_at, full, empty);",
                   "&k_box, &v_box, &k_row, &v_row, false, p, b, 0, t0, t1, ring_at, full, empty);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v27: the full barriers count v25's four gatherers' lanes, where one warp gathers a tile: no stage is
        # ever full, and the consumers wait on it forever
        "name": "mutant_v27_full_counts_four_warps",
        "variant": "v27_fp8_tile_gatherers",
        "edits": [("(full, empty, 32, 32 * HB);", "(full, empty, 32 * 4, 32 * HB);")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v27: every gathering warp starts at group 0: groups 0, 3, ... are copied three times over (and the
        # others never), the second copy into a stage while the first is in flight
        "name": "mutant_v27_every_warp_from_group_0",
        "variant": "v27_fp8_tile_gatherers",
        "edits": [("full, empty, 0, warp - S::CW);", "full, empty, 0, 0);")],
        "expect": "while another copy into it is in flight",
    },
    {   # v20: the end of a CTA not stamped: its timeline would show the key loop and never the merge
        "name": "mutant_v20_end_not_stamped",
        "variant": "v20_bulk_merge",
        "edits": [("    stamp(KL_DECODE_END);\n", "")],
        "expect": "ran its key loop without stamping its first tile and its end",
    },
    {   # v20: the running sum not rescaled when a later batch's max is larger: that batch outweighs the rest
        # (batches of one split, so the 3-SM problems merge several)
        "name": "mutant_v20_sum_not_rescaled",
        "variant": "v20_bulk_merge",
        "edits": [("        sum *= rescale;\n", ""),
                  ("reinterpret_cast<unsigned char *>(ring), S::RING)",
                   "reinterpret_cast<unsigned char *>(ring), kMergeHead + 2 * 8 * (HD + 2) * 4)")],
        "expect": "outside the attention policy's bound",
    },
    {   # v20: the bulk merge where a split's rows are not a multiple of 16 bytes (MHA: one head's row)
        "name": "mutant_v20_copies_unaligned_rows",
        "variant": "v20_bulk_merge",
        "edits": [("const bool copies = bytes % 16 == 0 && ", "const bool copies = ")],
        "expect": "bulk copy at",
    },
    {   # v20: a half refilled before the block is done reading it (batches of one split, so the 3-SM problems
        # refill): the copy overwrites rows still being summed
        "name": "mutant_v20_refill_before_read",
        "variant": "v20_bulk_merge",
        "edits": [("        __syncthreads(); /* every thread is done with this half and this batch's weights */\n"
                   "        if (threadIdx.x == 0 && k + 2 < batches) issue(k + 2);\n",
                   "        if (threadIdx.x == 0 && k + 2 < batches) issue(k + 2);\n        __syncthreads();\n"),
                  ("reinterpret_cast<unsigned char *>(ring), S::RING)",
                   "reinterpret_cast<unsigned char *>(ring), kMergeHead + 2 * 8 * (HD + 2) * 4)")],
        "expect": "outside the attention policy's bound",
    },
    {   # v20: every wait on a half's copies for the parity of its first use (batches of one split, as above): the
        # third batch reads its half before the copies land, and the barriers' phases fall out of step
        "name": "mutant_v20_slot_parity_of_first_use",
        "variant": "v20_bulk_merge",
        "edits": [("kl::ptx::mbar_wait(&full[half + i], k / 2 & 1);", "kl::ptx::mbar_wait(&full[half + i], 0);"),
                  ("reinterpret_cast<unsigned char *>(ring), S::RING)",
                   "reinterpret_cast<unsigned char *>(ring), kMergeHead + 2 * 8 * (HD + 2) * 4)")],
        "expect": "deadlock: every live thread of the cluster is blocked",
    },
    {   # v21: the final merge over the first splits instead of the groups' partials (one apart, not a group apart)
        "name": "mutant_v21_final_merge_reads_splits",
        "variant": "v21_merge_tree",
        "edits": [("merge_split_rows<T, false>(p, nh, 0, t.groups, t.size, w, 1, at);",
                   "merge_split_rows<T, false>(p, nh, 0, t.groups, 1, w, 1, at);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v21: every split counted in group 0's field: group 0 completes early, or never, and the others never do
        "name": "mutant_v21_one_field_for_every_group",
        "variant": "v21_merge_tree",
        "edits": [("atomicAdd(counter, 1u << (kGroupBits * group));", "atomicAdd(counter, 1u);")],
        "expect": "left a merge counter at",
    },
    {   # v21: the counter not reset: the next launch's groups start from the last one's counts
        "name": "mutant_v21_counter_not_reset",
        "variant": "v21_merge_tree",
        "edits": [("        if (last) *counter = 0; /* every split and every group has counted: reset for the next launch */\n", "")],
        "expect": "left a merge counter at",
    },
    {   # v22: a prefetch of a box the CTA never copies (its kv head's first slot, whatever its chunk): the
        # outputs are right and the bytes wasted, so only the emulator's account of prefetched boxes sees it
        "name": "mutant_v22_prefetch_of_a_tile_not_copied",
        "variant": "v22_l2_prefetch",
        "edits": [("    if (warp == CW) {\n",
                   "    if (warp == CW) {\n        if (boxes && threadIdx.x % 32 == 0) kl::ptx::tma_prefetch_3d(&k_box, 0, g, 0);\n")],
        "expect": "a prefetched box was never loaded",
    },
    {   # v23: the count one past the CTAs that count: no CTA merges the clusters' partials, and the counter
        # is left where the last CTA brought it
        "name": "mutant_v23_counts_past_the_last",
        "variant": "v23_cluster_prefetch",
        "edits": [("count_last{clusters * cluster}", "count_last{clusters * cluster + 1}")],
        "expect": "left a merge counter at",
    },
    {   # v23: a cluster's partial filed under its first split's index, not the cluster's: the final merge
        # reads partials no cluster wrote
        "name": "mutant_v23_partial_under_split_index",
        "variant": "v23_cluster_prefetch",
        "edits": [("merge_cluster<T, HD>(p, res, b, h0, nh, cluster, whole, k);",
                   "merge_cluster<T, HD>(p, res, b, h0, nh, cluster, whole, k * cluster);")],
        "expect": "outside the attention policy's bound",
    },
    {   # v32: the cluster merge without its first cluster barrier: a CTA reads its neighbours' merged rows
        # before they are written
        "name": "mutant_v32_reads_before_cluster_barrier",
        "variant": "v32_cluster_tail",
        "edits": [("kl::ptx::cluster_sync(); /* every CTA's merged rows are written */", "/* no cluster barrier */")],
        "expect": "outside the attention policy's bound",
    },
    {   # v32: no second cluster barrier: a CTA leaves (its shared memory gone) while its neighbours still read it
        "name": "mutant_v32_leaves_before_neighbours_read",
        "variant": "v32_cluster_tail",
        "edits": [("kl::ptx::cluster_sync(); /* every CTA has read the others' rows, and written its share */",
                   "/* no cluster barrier */")],
        "expect": "which had exited",
    },
    {   # v32: a CTA of the padding (its chunk past the request's keys) leaves instead of meeting its cluster
        "name": "mutant_v32_padding_leaves_its_cluster",
        "variant": "v32_cluster_tail",
        "edits": [("    if (k >= clusters) return;\n", "    if (k >= clusters || split >= splits) return;\n")],
        "expect": "which had exited",
    },
    {   # v32: the final merge leaves out the last cluster's partial
        "name": "mutant_v32_last_cluster_dropped",
        "variant": "v32_cluster_tail",
        "edits": [("merge_states(clusters, [&]", "merge_states(clusters - 1, [&]")],
        "expect": "outside the attention policy's bound",
    },
    {   # v32: the running sums not put on a later batch's larger max (batches of one state, so that the merges
        # of two or more have a later batch, and some later state has the larger max)
        "name": "mutant_v32_running_sums_not_rescaled",
        "variant": "v32_cluster_tail",
        "edits": [("        r.l *= keep, r.a[0] *= keep, r.a[1] *= keep, r.a[2] *= keep, r.a[3] *= keep;\n", ""),
                  ("constexpr int kBatch = 8; ", "constexpr int kBatch = 1; ")],
        "expect": "outside the attention policy's bound",
    },
    {   # v32: the counter not reset: the next launch's CTAs count on from this one's total
        "name": "mutant_v32_counter_not_reset",
        "variant": "v32_cluster_tail",
        "edits": [("        if (last) *counter = 0; /* every other CTA of this request has counted: reset for the next launch */\n", "")],
        "expect": "left a merge counter at",
    },
    {   # v32: a CTA that ends at the cluster merge does not stamp its end
        "name": "mutant_v32_end_not_stamped",
        "variant": "v32_cluster_tail",
        "edits": [("    if (whole) {\n        if (tiles > 0) stamp(KL_DECODE_END);\n", "    if (whole) {\n")],
        "expect": "ran its key loop without stamping its first tile and its end",
    },
]
