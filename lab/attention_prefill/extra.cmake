# attention_prefill extras (included by the top-level CMakeLists.txt): every variant under
# compute-sanitizer's memcheck, racecheck and synccheck on the golden cases. Skipped (exit 77)
# without a GPU or without compute-sanitizer; it shares the GPU lock with the other device tests.
add_test(NAME attention_prefill_sanitizer
         COMMAND bash ${PROJECT_SOURCE_DIR}/lab/attention_prefill/sanitize.sh $<TARGET_FILE:kernlab>)
set_tests_properties(attention_prefill_sanitizer PROPERTIES LABELS "gpu;sanitizer" SKIP_RETURN_CODE 77
                     RESOURCE_LOCK gpu TIMEOUT 1800 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# The tensor-core kernels (v2 and up: every kernels/attention_prefill/v*.cu that includes a helper
# header reaching kernels/ptx_*.cuh) run on the CPU under the lab's emulation (lab/emulate/), which checks
# their asynchrony, fences, barrier protocol and layouts; emulate/driver.cpp judges them against the
# float64 reference by the module's policy, and emulate/mutants.py plants the bugs it must catch.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_FOUND AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  include(${PROJECT_SOURCE_DIR}/lab/emulate/emulate.cmake)
  kl_add_emulator(attention_prefill prefill_emulator ${PROJECT_SOURCE_DIR}/lab/attention_prefill/emulate/driver.cpp
                  ${PROJECT_SOURCE_DIR}/lab/attention_prefill/emulate/mutants.py
                  ${PROJECT_SOURCE_DIR}/reference/attention_prefill.c
                  ${PROJECT_SOURCE_DIR}/kernels/attention_prefill/params.c ${PROJECT_SOURCE_DIR}/lab/core/compare.c
                  ${PROJECT_SOURCE_DIR}/kernels/dtype.c)
endif()
