#include <stdio.h>
#include "lab/kernlab.h"
int kl_cmd_report(int argc, char **argv) { fprintf(stderr, "kernlab report: not yet\n"); return 2; }
