set -u
tar xJf .gpu-deps.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$PWD/.gpu-deps/lib/pkgconfig CMAKE_PREFIX_PATH=$PWD/.gpu-deps NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt; nvidia-smi topo -m >> $OUT/gpu.txt
(cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real && timeout 280 cmake --build build -j 16 --target kernlab test_allreduce kl_gpu_guard) > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build ok $SECONDS s"
KL_COMMIT=$KLC timeout 100 build/kernlab bench allreduce --json $OUT/ar.jsonl > $OUT/bench.txt 2> $OUT/bench.err; echo "bench rc=$? $SECONDS s"; grep -E 'v0_nccl|v4_|v6_|v7_|v8_' $OUT/bench.txt | head -48; tail -3 $OUT/bench.err
cd build
KL_AR_TEST_ONLY=lamport timeout 150 ./test_allreduce --filter 'allreduce_multigpu/*' -j1 > $OUT/multigpu.log 2>&1; echo "multigpu rc=$? $SECONDS s"; grep -E 'Synthesis|\[FAIL\]|passed the' $OUT/multigpu.log | head -20
KL_AR_SHARED_DEVICE=1 KL_AR_TEST_ONLY=lamport timeout 200 ./test_allreduce --filter 'allreduce_multigpu/*' -j1 > $OUT/shared.log 2>&1; echo "shared rc=$? $SECONDS s"; grep -E 'Synthesis|\[FAIL\]|passed the' $OUT/shared.log | head -20
