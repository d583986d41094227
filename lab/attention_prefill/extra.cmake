# attention_prefill extras (included by the top-level CMakeLists.txt): every variant under
# compute-sanitizer's memcheck, racecheck and synccheck on the golden cases. Skipped (exit 77)
# without a GPU or without compute-sanitizer; it shares the GPU lock with the other device tests.
add_test(NAME attention_prefill_sanitizer
         COMMAND bash ${PROJECT_SOURCE_DIR}/lab/attention_prefill/sanitize.sh $<TARGET_FILE:kernlab>)
set_tests_properties(attention_prefill_sanitizer PROPERTIES LABELS "gpu;sanitizer" SKIP_RETURN_CODE 77
                     RESOURCE_LOCK gpu TIMEOUT 1800 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# The tensor-core kernels (v2..v10) run on the CPU under emulation and checked against the float64
# reference (lab/attention_prefill/emulate/): their indexing, masks, paging, pipeline order, barrier
# protocol and fragment and shared-memory layouts tested on every machine, GPU or not. gen.py copies
# the kernels' exact source with the PTX wrappers of mma.cuh and hopper.cuh swapped for emulated
# ones. Needs python3 at build time.
find_package(Python3 COMPONENTS Interpreter QUIET)
find_package(Threads QUIET)
if(Python3_FOUND AND Threads_FOUND)
  set(KL_PREFILL_EMU ${CMAKE_BINARY_DIR}/prefill_emulate)
  file(GLOB KL_PREFILL_EMU_DEPS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/attention_prefill/*.cu
       ${PROJECT_SOURCE_DIR}/kernels/attention_prefill/*.cuh ${PROJECT_SOURCE_DIR}/lab/attention_prefill/emulate/*)
  add_custom_command(OUTPUT ${KL_PREFILL_EMU}/kernels_emu.h
                     COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/lab/attention_prefill/emulate/gen.py
                             ${PROJECT_SOURCE_DIR} ${KL_PREFILL_EMU}
                     DEPENDS ${KL_PREFILL_EMU_DEPS}
                     COMMENT "Emulation copy of the attention_prefill tensor-core kernels")
  add_executable(prefill_emulator lab/attention_prefill/emulate/driver.cpp reference/attention_prefill.c
                                  kernels/attention_prefill/params.c ${KL_PREFILL_EMU}/kernels_emu.h)
  target_include_directories(prefill_emulator PRIVATE ${KL_PREFILL_EMU} ${PROJECT_SOURCE_DIR}
                             ${PROJECT_SOURCE_DIR}/lab/attention_prefill/emulate ${PROJECT_SOURCE_DIR}/lab/core
                             ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(prefill_emulator PRIVATE PkgConfig::OPENBLAS Threads::Threads m)
  set_target_properties(prefill_emulator PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
  # CUtensorMap (64-byte aligned) passed by value to an emulated kernel: GCC notes an ABI change of 4.6
  target_compile_options(prefill_emulator PRIVATE -Wno-psabi)
  add_test(NAME attention_prefill_emulated COMMAND prefill_emulator)
  set_tests_properties(attention_prefill_emulated PROPERTIES LABELS cpu TIMEOUT 600)
endif()
