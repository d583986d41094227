/* Commands of `kernlab` that live outside lab/kernlab.c: each is declared with lab/core/args.h
 * (its options, its usage, its run function, which returns the exit status). */
#ifndef KL_KERNLAB_H
#define KL_KERNLAB_H
#include "lab/core/args.h"
#include "lab/core/scaffold.h" /* kl_new_variant_command */

extern const struct kl_command kl_report_command;      /* perf/report.c */

int kl_cmd_report(int argc, char **argv);
#endif
