/* kl_gpu_guard CMD ARGS...: runs CMD when a CUDA device is present, else prints why not and
 * exits 77 so ctest reports the test as skipped (not passed). COMMAND is looked up on PATH. */
#include <stdio.h>
#include <unistd.h>

#include "device.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: kl_gpu_guard COMMAND [ARGS...]\n");
        return 2;
    }
    char why[256];
    if (!kl_device_cc(why, sizeof why)) {
        printf("skipped: %s\n", why);
        return 77;
    }
    fflush(stdout);
    execvp(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
