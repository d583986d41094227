# allreduce extras (included by the top-level CMakeLists.txt): the tests across GPUs.
#
# Suite allreduce_multigpu of test_allreduce needs at least two GPUs: kl_gpu_guard --min-gpus 2
# exits 77 below that, which ctest reports as skipped (never as passed). Each test also skips
# itself when a world it needs is larger than this machine. The ranks these tests start are
# copies of test_allreduce itself (the mutants live only in the test binaries).
add_test(NAME allreduce_multigpu
         COMMAND kl_gpu_guard --min-gpus 2 $<TARGET_FILE:test_allreduce> --filter "allreduce_multigpu/*" -j1)
set_tests_properties(allreduce_multigpu PROPERTIES LABELS multigpu SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} TIMEOUT 1500)
# The kernlab command's allreduce paths without a GPU count: refusals and SKIP lines.
add_test(NAME allreduce_cli COMMAND bash ${PROJECT_SOURCE_DIR}/lab/allreduce/cli.sh $<TARGET_FILE:kernlab>)
set_tests_properties(allreduce_cli PROPERTIES LABELS cpu WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
# The guide generator on a hand-written fixture (no GPU data needed).
add_test(NAME report_allreduce COMMAND bash ${PROJECT_SOURCE_DIR}/lab/tests/report_allreduce.sh $<TARGET_FILE:kernlab>)
set_tests_properties(report_allreduce PROPERTIES LABELS cpu WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
# The same suite with every rank on GPU 0 (shared-device mode, KL_AR_SHARED_DEVICE=1): one GPU runs
# worlds 2-4 of the custom variants, so their flags, sentinels and buffer rotation are tested on a
# single-GPU machine; NCCL's variants skip there (one GPU per rank). On a multi-GPU machine it runs
# too: the protocols under time slicing, a harder schedule than two GPUs side by side.
add_test(NAME allreduce_shared_device
         COMMAND ${CMAKE_COMMAND} -E env KL_AR_SHARED_DEVICE=1
                 $<TARGET_FILE:kl_gpu_guard> $<TARGET_FILE:test_allreduce> --filter "allreduce_multigpu/*" -j1)
set_tests_properties(allreduce_shared_device PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu
                     WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} TIMEOUT 2400)
# v14 to v21 keep every address in registers: ptxas reports no stack frame and no spills in any of their functions (a
# run-time index into a by-value array would put a copy of it in local memory).
add_test(NAME allreduce_stack_frames
         COMMAND bash ${PROJECT_SOURCE_DIR}/lab/allreduce/stack_frames.sh ${CMAKE_CUDA_COMPILER}
                 kernels/allreduce/v14_lamport_in_registers.cu kernels/allreduce/v15_lamport_add_rmsnorm_in_registers.cu
                 kernels/allreduce/v16_lamport_add_rmsnorm_unit_rows.cu kernels/allreduce/v17_lamport_early_done.cu
                 kernels/allreduce/v18_lamport_add_rmsnorm_early_done.cu
                 kernels/allreduce/v19_lamport_add_rmsnorm_small_blocks.cu
                 kernels/allreduce/v20_lamport_add_rmsnorm_stored_sums.cu
                 kernels/allreduce/v21_lamport_add_rmsnorm_integer_sums.cu)
set_tests_properties(allreduce_stack_frames PROPERTIES LABELS cpu WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
