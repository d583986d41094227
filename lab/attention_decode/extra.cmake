# attention_decode extras (included by the top-level CMakeLists.txt): shared memory races and
# barrier misuse in the variants that stage K/V through shared memory (memcheck runs for every
# module already).
kl_add_sanitizer_test(attention_decode racecheck)
kl_add_sanitizer_test(attention_decode synccheck)
