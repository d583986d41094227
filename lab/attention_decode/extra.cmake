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
endif()
