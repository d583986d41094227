# attention_prefill extras (included by the top-level CMakeLists.txt): every variant under
# compute-sanitizer's memcheck, racecheck and synccheck on the golden cases. Skipped (exit 77)
# without a GPU or without compute-sanitizer; it shares the GPU lock with the other device tests.
add_test(NAME attention_prefill_sanitizer
         COMMAND bash ${PROJECT_SOURCE_DIR}/lab/attention_prefill/sanitize.sh $<TARGET_FILE:kernlab>)
set_tests_properties(attention_prefill_sanitizer PROPERTIES LABELS "gpu;sanitizer" SKIP_RETURN_CODE 77
                     RESOURCE_LOCK gpu TIMEOUT 1800 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
