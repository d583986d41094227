# store extras (included by the top-level CMakeLists.txt): v5_tile_inflight stages a tile's cos/sin rows
# in shared memory behind a barrier, so shared-memory races and barrier misuse are checked beside the
# memcheck every module gets.
kl_add_sanitizer_test(store racecheck)
kl_add_sanitizer_test(store synccheck)
