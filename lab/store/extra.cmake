# store extras (included by the top-level CMakeLists.txt): v5_tile_inflight stages a tile's cos/sin rows
# in shared memory behind a barrier, so shared-memory races and barrier misuse are checked beside the
# memcheck every module gets.
kl_add_sanitizer_test(store racecheck)
kl_add_sanitizer_test(store synccheck)

# The fused family (v4 to v7: RoPE + e4m3 quantize + store) on the CPU under the lab's emulation
# (lab/emulate/): problems that take each variant's paths, judged against the float64 reference by
# emulate/driver.cpp as the module judges them, and the planted bugs of emulate/mutants.py it must catch.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_FOUND AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  include(${PROJECT_SOURCE_DIR}/lab/emulate/emulate.cmake)
  kl_add_emulator(store store_emulator ${PROJECT_SOURCE_DIR}/lab/store/emulate/driver.cpp
                  ${PROJECT_SOURCE_DIR}/lab/store/emulate/mutants.py ${PROJECT_SOURCE_DIR}/reference/store.c
                  ${PROJECT_SOURCE_DIR}/reference/rope.c
                  ${PROJECT_SOURCE_DIR}/kernels/store/params.c ${PROJECT_SOURCE_DIR}/lab/core/compare.c
                  ${PROJECT_SOURCE_DIR}/kernels/dtype.c)
endif()
