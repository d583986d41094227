# attention_prefill extras (included by the top-level CMakeLists.txt): every variant under
# compute-sanitizer's memcheck, racecheck and synccheck on the golden cases. Skipped (exit 77)
# without a GPU or without compute-sanitizer; it shares the GPU lock with the other device tests.
add_test(NAME attention_prefill_sanitizer
         COMMAND bash ${PROJECT_SOURCE_DIR}/lab/attention_prefill/sanitize.sh $<TARGET_FILE:kernlab>)
set_tests_properties(attention_prefill_sanitizer PROPERTIES LABELS "gpu;sanitizer" SKIP_RETURN_CODE 77
                     RESOURCE_LOCK gpu TIMEOUT 1800 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# The tensor-core kernels (v2 and up: every kernels/attention_prefill/v*.cu that includes mma.cuh,
# hopper.cuh or kv_ring.cuh) run on the CPU under an emulation that checks their asynchrony, fences,
# barrier protocol and layouts, and are judged against the float64 reference by the module's policy
# (lab/attention_prefill/emulate/). gen.py copies the kernels' exact source with the PTX wrappers
# swapped for emulated ones, plus the planted bugs of emulate/mutants.py. One test per variant (ctest
# -j spreads them) and one for the mutants. Needs python3 at configure and build time.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_FOUND AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(KL_EMU_SRC ${PROJECT_SOURCE_DIR}/lab/attention_prefill/emulate)
  set(KL_PREFILL_EMU ${CMAKE_BINARY_DIR}/prefill_emulate)
  # A new variant file re-runs the configuration (the glob), which lists the variants again.
  file(GLOB KL_PREFILL_EMU_DEPS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/attention_prefill/*.cu
       ${PROJECT_SOURCE_DIR}/kernels/attention_prefill/*.cuh ${KL_EMU_SRC}/*.py ${KL_EMU_SRC}/ptx_*.h)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${KL_EMU_SRC}/mutants.py ${KL_EMU_SRC}/gen.py)
  execute_process(COMMAND ${Python3_EXECUTABLE} ${KL_EMU_SRC}/gen.py --list ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE KL_PREFILL_EMU_LIST RESULT_VARIABLE KL_PREFILL_EMU_RC)
  if(NOT KL_PREFILL_EMU_RC EQUAL 0)
    message(FATAL_ERROR "lab/attention_prefill/emulate/gen.py --list failed")
  endif()
  set(KL_PREFILL_EMU_SHARDS)
  foreach(k RANGE 5) # gen.py's SHARDS
    list(APPEND KL_PREFILL_EMU_SHARDS ${KL_PREFILL_EMU}/variants_${k}.cpp)
  endforeach()
  add_custom_command(OUTPUT ${KL_PREFILL_EMU}/gen.stamp
                     BYPRODUCTS ${KL_PREFILL_EMU}/tc_headers.h ${KL_PREFILL_EMU_SHARDS}
                     COMMAND ${Python3_EXECUTABLE} ${KL_EMU_SRC}/gen.py ${PROJECT_SOURCE_DIR} ${KL_PREFILL_EMU}
                     COMMAND ${CMAKE_COMMAND} -E touch ${KL_PREFILL_EMU}/gen.stamp
                     DEPENDS ${KL_PREFILL_EMU_DEPS}
                     COMMENT "Emulation copy of the attention_prefill tensor-core kernels")
  add_executable(prefill_emulator ${KL_EMU_SRC}/driver.cpp ${KL_EMU_SRC}/runtime.cpp ${KL_PREFILL_EMU_SHARDS}
                                  ${KL_PREFILL_EMU}/gen.stamp reference/attention_prefill.c
                                  kernels/attention_prefill/params.c lab/core/compare.c lab/core/dtype.c)
  target_include_directories(prefill_emulator PRIVATE ${KL_PREFILL_EMU} ${KL_EMU_SRC} ${PROJECT_SOURCE_DIR}
                             ${PROJECT_SOURCE_DIR}/lab/core ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(prefill_emulator PRIVATE PkgConfig::OPENBLAS m)
  set_target_properties(prefill_emulator PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
  # CUtensorMap (64-byte aligned) passed by value to an emulated kernel: GCC notes an ABI change of 4.6.
  # -O2 in every build type: the tests run the kernels' every thread.
  target_compile_options(prefill_emulator PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-psabi -O2>)
  # Hang guards only: a verdict never depends on time (deadlocks are found by progress).
  string(REGEX MATCHALL "variant [^\n]+" KL_PREFILL_EMU_VARIANTS "${KL_PREFILL_EMU_LIST}")
  foreach(line ${KL_PREFILL_EMU_VARIANTS})
    string(REPLACE "variant " "" name "${line}")
    add_test(NAME attention_prefill_emulated_${name} COMMAND prefill_emulator ${name})
    set_tests_properties(attention_prefill_emulated_${name} PROPERTIES LABELS cpu TIMEOUT 900)
  endforeach()
  add_test(NAME attention_prefill_emulator_mutants COMMAND prefill_emulator --mutants)
  set_tests_properties(attention_prefill_emulator_mutants PROPERTIES LABELS cpu TIMEOUT 900)
  # gen.py itself: new variant files picked up, stale mutants and unemulated PTX stop it, lines kept
  add_test(NAME attention_prefill_emulator_gen COMMAND ${Python3_EXECUTABLE} ${KL_EMU_SRC}/test_gen.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(attention_prefill_emulator_gen PROPERTIES LABELS cpu TIMEOUT 300)
endif()
