#include <stdio.h>
#include "lab/kernlab.h"
int kl_cmd_ceilings(int argc, char **argv) { fprintf(stderr, "not yet\n"); return 2; }
int kl_cmd_bench(int argc, char **argv) { fprintf(stderr, "not yet\n"); return 2; }
