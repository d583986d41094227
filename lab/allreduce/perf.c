/* placeholder: replaced below */
#include "lab/allreduce/allreduce_module.h"
#include "perf/bench.h"
int kl_ar_bench(const struct kl_bench_args *args) { return -1; }
