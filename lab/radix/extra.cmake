# radix extras (included by the top-level CMakeLists.txt): the libFuzzer target and the leak test.
#
# Both build lab/radix/fuzz_radix.c with the few sources it needs, compiled again with
# sanitizers (kernlab_objs is built without them and carries CUDA, which sanitizers and
# valgrind report noise in). Nothing here needs a GPU: both tests are labelled cpu.

set(KL_RADIX_SAN_SOURCES
    ${PROJECT_SOURCE_DIR}/lab/radix/fuzz_radix.c
    ${PROJECT_SOURCE_DIR}/lab/radix/radix.c
    ${PROJECT_SOURCE_DIR}/lab/radix/trace.c
    ${PROJECT_SOURCE_DIR}/reference/radix.c
    ${PROJECT_SOURCE_DIR}/kernels/radix/v0_scalar.c
    ${PROJECT_SOURCE_DIR}/kernels/radix/v1_simd.c
    ${PROJECT_SOURCE_DIR}/lab/core/golden.c
    ${PROJECT_SOURCE_DIR}/lab/core/npy.c
    ${PROJECT_SOURCE_DIR}/lab/core/tensor.c
    ${PROJECT_SOURCE_DIR}/kernels/dtype.c
    ${PROJECT_SOURCE_DIR}/lab/core/check.c
    ${PROJECT_SOURCE_DIR}/lab/core/files.c)
file(GLOB KL_RADIX_GOLDEN_TRACES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/golden/radix/*/trace.jsonl)
file(GLOB KL_RADIX_FUZZ_SEEDS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/lab/radix/fuzz_seeds/*)

# ---- the leak test: ASan + LeakSanitizer where the compiler has them, else valgrind ----
include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=address")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address")
check_c_source_compiles("int main(void) { return 0; }" KL_HAVE_ASAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
find_program(KL_VALGRIND valgrind)

if(KL_HAVE_ASAN OR KL_VALGRIND)
  add_executable(radix_leakcheck ${KL_RADIX_SAN_SOURCES})
  target_compile_definitions(radix_leakcheck PRIVATE KL_FUZZ_STANDALONE)
  target_include_directories(radix_leakcheck PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/lab/core)
  target_link_libraries(radix_leakcheck PRIVATE PkgConfig::CJSON m)
  if(KL_HAVE_ASAN)
    target_compile_options(radix_leakcheck PRIVATE -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
                                                   -fno-sanitize-recover=undefined)
    target_link_options(radix_leakcheck PRIVATE -fsanitize=address,undefined)
    add_test(NAME radix_leaks COMMAND radix_leakcheck ${KL_RADIX_GOLDEN_TRACES} ${KL_RADIX_FUZZ_SEEDS})
    set_tests_properties(radix_leaks PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0")
  else()
    target_compile_options(radix_leakcheck PRIVATE -g -O1)
    add_test(NAME radix_leaks COMMAND ${KL_VALGRIND} -q --leak-check=full --errors-for-leak-kinds=definite,indirect
                                      --error-exitcode=1 $<TARGET_FILE:radix_leakcheck> ${KL_RADIX_GOLDEN_TRACES}
                                      ${KL_RADIX_FUZZ_SEEDS})
  endif()
  set_tests_properties(radix_leaks PROPERTIES LABELS "cpu;sanitizer" WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                                              TIMEOUT 120)
endif()

# ---- the fuzzer: clang's libFuzzer, when a clang here can link -fsanitize=fuzzer ----
find_program(KL_CLANG NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14)
set(KL_CLANG_FUZZ_WORKS OFF)
if(KL_CLANG)
  set(_probe ${CMAKE_BINARY_DIR}/kl_fuzz_probe.c)
  file(WRITE ${_probe} "#include <stdint.h>\n#include <stddef.h>\n"
                      "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${KL_CLANG} -fsanitize=fuzzer,address ${_probe} -o ${CMAKE_BINARY_DIR}/kl_fuzz_probe
                  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
  if(_rc EQUAL 0)
    set(KL_CLANG_FUZZ_WORKS ON)
  endif()
endif()
option(KL_FUZZ "Build the radix libFuzzer target (needs clang with -fsanitize=fuzzer)" ${KL_CLANG_FUZZ_WORKS})

if(KL_FUZZ)
  if(NOT KL_CLANG_FUZZ_WORKS)
    message(FATAL_ERROR "KL_FUZZ=ON but no clang here links -fsanitize=fuzzer,address (found: ${KL_CLANG})")
  endif()
  # The project's C compiler may be gcc: build this one binary with clang directly.
  set(_inc)
  foreach(dir ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/lab/core ${CJSON_INCLUDE_DIRS})
    list(APPEND _inc -I${dir})
  endforeach()
  add_custom_command(
    OUTPUT ${CMAKE_BINARY_DIR}/radix_fuzzer
    COMMAND ${KL_CLANG} -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
            -fno-sanitize-recover=undefined -D_GNU_SOURCE ${_inc} ${KL_RADIX_SAN_SOURCES}
            ${CJSON_LINK_LIBRARIES} -lm -o ${CMAKE_BINARY_DIR}/radix_fuzzer
    DEPENDS ${KL_RADIX_SAN_SOURCES}
    COMMENT "Building the radix fuzzer (clang, libFuzzer + ASan + UBSan)"
    VERBATIM)
  add_custom_target(fuzz_radix ALL DEPENDS ${CMAKE_BINARY_DIR}/radix_fuzzer)
  # New inputs go to the build tree's corpus (the first directory), never into golden/.
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/radix_fuzz_corpus)
  add_test(NAME radix_fuzz_short
           COMMAND ${CMAKE_BINARY_DIR}/radix_fuzzer -max_total_time=15 -runs=100000 -max_len=8192 -print_final_stats=1
                   ${CMAKE_BINARY_DIR}/radix_fuzz_corpus ${PROJECT_SOURCE_DIR}/golden/radix
                   ${PROJECT_SOURCE_DIR}/lab/radix/fuzz_seeds)
  set_tests_properties(radix_fuzz_short PROPERTIES LABELS cpu WORKING_DIRECTORY ${CMAKE_BINARY_DIR} TIMEOUT 120)
endif()

# ---- the reference's evict at scale ----
# 216k leaves evicted through the reference. The test asserts no time: this TIMEOUT is what
# fails an evict gone quadratic again (well over 20 s on that tree; the heap under a second).
add_test(NAME radix_evict_scale COMMAND test_radix --filter "radix_scale/*" -j1)
set_tests_properties(radix_evict_scale PROPERTIES LABELS cpu TIMEOUT 20 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
