# attention_decode extras (included by the top-level CMakeLists.txt): shared memory races and
# barrier misuse in the variants that stage K/V through shared memory (memcheck runs for every
# module already).
kl_add_sanitizer_test(attention_decode racecheck)
kl_add_sanitizer_test(attention_decode synccheck)

# The tensor-core variant (v4_tensor_cores: kernels/ptx_sm80.cuh) on the CPU under the lab's emulation
# (lab/emulate/): one and several query tokens per request, judged against the float64 reference by
# emulate/driver.cpp, and the planted bugs of emulate/mutants.py it must catch.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_FOUND AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  include(${PROJECT_SOURCE_DIR}/lab/emulate/emulate.cmake)
  kl_add_emulator(attention_decode decode_emulator ${PROJECT_SOURCE_DIR}/lab/attention_decode/emulate/driver.cpp
                  ${PROJECT_SOURCE_DIR}/lab/attention_decode/emulate/mutants.py
                  ${PROJECT_SOURCE_DIR}/reference/attention_decode.c
                  ${PROJECT_SOURCE_DIR}/kernels/attention_decode/params.c ${PROJECT_SOURCE_DIR}/lab/core/compare.c
                  ${PROJECT_SOURCE_DIR}/kernels/dtype.c)
  # The variants that split by the SM count, on 24 emulated SMs: the 34768-key request is cut into about
  # 90 pieces, so the final merge takes its partials in several batches of loads (8 in v19) or refills
  # each half of its copies' slots several times (v20), and v21's groups hold more than one batch, where
  # 3 SMs give at most 12 pieces; v23's final merge then takes the partials of several clusters, and v24,
  # v26, v27 and v28 split as v19 (the three gathering warps of v26, of v27 on e4m3 pages and of v28 on
  # draft tokens, then take turns over tiles of many short chunks); v29's, v30's and v31's queues hand those
  # chunks out (v31's first chunks in pieces); v32's final merge takes a dozen clusters' partials, more than
  # one batch of loads.
  foreach(name v19_one_gatherer v20_bulk_merge v21_merge_tree v23_cluster_prefetch v24_four_gatherers
          v26_tile_gatherers v27_fp8_tile_gatherers v28_draft_tile_gatherers v29_work_queue
          v30_item_pipeline v31_shrinking_items v32_cluster_tail)
    add_test(NAME attention_decode_emulated_${name}_24_sms COMMAND decode_emulator ${name})
    set_tests_properties(attention_decode_emulated_${name}_24_sms PROPERTIES LABELS cpu TIMEOUT 900
                         ENVIRONMENT KL_EMU_SMS=24)
  endforeach()
  # The queue rungs under a schedule that runs one warp far ahead of the others (emulator.h's
  # set_schedule): their consumer warps share a merge area between items, which only such a schedule
  # reuses before every reader is done (the mutants that need it name it).
  add_test(NAME attention_decode_emulated_queues_priority_schedule
           COMMAND decode_emulator --schedule 1 v29_work_queue v30_item_pipeline v31_shrinking_items)
  set_tests_properties(attention_decode_emulated_queues_priority_schedule PROPERTIES LABELS cpu TIMEOUT 900)
endif()
