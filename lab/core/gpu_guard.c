/* kl_gpu_guard [--min-gpus N] COMMAND ARGS...: runs COMMAND when this machine has a CUDA device
 * (at least N of them with --min-gpus), else prints why not and exits 77 so ctest reports the
 * test as skipped (not passed). COMMAND is looked up on PATH. The count initialises CUDA in this
 * process, which is harmless: exec replaces it. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"

int main(int argc, char **argv)
{
    int first = 1, min_gpus = 1;
    if (argc > 2 && strcmp(argv[1], "--min-gpus") == 0) min_gpus = atoi(argv[2]), first = 3;
    if (argc <= first || min_gpus < 1) {
        fprintf(stderr, "usage: kl_gpu_guard [--min-gpus N] COMMAND [ARGS...]\n");
        return 2;
    }
    char why[256];
    if (!kl_device_cc(why, sizeof why)) {
        printf("skipped: %s\n", why);
        return 77;
    }
    int count = 0;
    cudaGetDeviceCount(&count);
    if (count < min_gpus) {
        printf("skipped: needs %d GPUs, this machine has %d\n", min_gpus, count);
        return 77;
    }
    fflush(stdout);
    execvp(argv[first], argv + first);
    perror(argv[first]);
    return 127;
}
