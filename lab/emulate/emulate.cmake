# The lab-wide emulator (lab/emulate/): kl_add_emulator(module driver mutants) builds <short>_emulator,
# the CPU emulation of kernels/<module>/'s tensor-core variants (gen.py: the kernels' exact source with
# kernels/ptx_*.cuh shadowed by the emulated wrappers of sm80.h / sm90.h), and registers one ctest per
# variant, <module>_emulated_<variant>, one for the planted bugs of the module's mutants file,
# <module>_emulator_mutants, and one for gen.py itself, <module>_emulator_gen. `driver` is the module's
# main (problems, reference, verdicts); `sources` the other sources it needs. Included by a module's
# extra.cmake; needs python3 at configure and build time, and x86-64 (the fibers switch in assembly).
set(KL_EMU_SRC ${PROJECT_SOURCE_DIR}/lab/emulate)

function(kl_add_emulator module target driver mutants)
  set(out ${CMAKE_BINARY_DIR}/${target}_gen)
  # A new variant or helper file re-runs the configuration (the glob), which lists the variants again.
  file(GLOB deps CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/${module}/*.cu
       ${PROJECT_SOURCE_DIR}/kernels/${module}/*.cuh ${PROJECT_SOURCE_DIR}/kernels/ptx_*.cuh ${KL_EMU_SRC}/*.py
       ${KL_EMU_SRC}/sm*.h ${mutants})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${mutants} ${KL_EMU_SRC}/gen.py)
  execute_process(COMMAND ${Python3_EXECUTABLE} ${KL_EMU_SRC}/gen.py --list ${PROJECT_SOURCE_DIR} ${mutants}
                  OUTPUT_VARIABLE list RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lab/emulate/gen.py --list failed")
  endif()
  set(shards)
  foreach(k RANGE 5) # gen.py's SHARDS
    list(APPEND shards ${out}/variants_${k}.cpp)
  endforeach()
  add_custom_command(OUTPUT ${out}/gen.stamp
                     BYPRODUCTS ${out}/tc_headers.h ${out}/kernels/ptx_sm80.cuh ${out}/kernels/ptx_sm90.cuh ${shards}
                     COMMAND ${Python3_EXECUTABLE} ${KL_EMU_SRC}/gen.py ${PROJECT_SOURCE_DIR} ${out} ${mutants}
                     COMMAND ${CMAKE_COMMAND} -E touch ${out}/gen.stamp
                     DEPENDS ${deps}
                     COMMENT "Emulation copy of the ${module} tensor-core kernels")
  file(GLOB runtime CONFIGURE_DEPENDS ${KL_EMU_SRC}/*.cpp)
  add_executable(${target} ${driver} ${runtime} ${shards} ${out}/gen.stamp ${ARGN})
  # ${out} first: its kernels/ptx_*.cuh shadow the real ones
  target_include_directories(${target} PRIVATE ${out} ${KL_EMU_SRC} ${PROJECT_SOURCE_DIR}
                             ${PROJECT_SOURCE_DIR}/lab/core ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE PkgConfig::OPENBLAS m)
  set_target_properties(${target} PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
  # CUtensorMap (64-byte aligned) passed by value to an emulated kernel: GCC notes an ABI change of 4.6.
  # -O2 in every build type: the tests run the kernels' every thread.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-psabi -O2>)
  # Hang guards only: a verdict never depends on time (deadlocks are found by progress).
  string(REGEX MATCHALL "variant [^\n]+" variants "${list}")
  foreach(line ${variants})
    string(REPLACE "variant " "" name "${line}")
    add_test(NAME ${module}_emulated_${name} COMMAND ${target} ${name})
    set_tests_properties(${module}_emulated_${name} PROPERTIES LABELS cpu TIMEOUT 900)
  endforeach()
  add_test(NAME ${module}_emulator_mutants COMMAND ${target} --mutants)
  set_tests_properties(${module}_emulator_mutants PROPERTIES LABELS cpu TIMEOUT 900)
  # gen.py itself: new variant files picked up, stale mutants and unemulated PTX stop it, lines kept (its
  # checks name attention_prefill's files, so it runs with that module)
  if(module STREQUAL "attention_prefill")
    add_test(NAME ${module}_emulator_gen COMMAND ${Python3_EXECUTABLE} ${KL_EMU_SRC}/test_gen.py ${PROJECT_SOURCE_DIR}
                                                ${mutants})
    set_tests_properties(${module}_emulator_gen PROPERTIES LABELS cpu TIMEOUT 300)
  endif()
endfunction()
