/* Commands of `kernlab` that live outside lab/kernlab.c: each is declared with lab/core/args.h
 * (its options, its usage, its run function, which returns the exit status). */
#ifndef KL_KERNLAB_H
#define KL_KERNLAB_H
#include "lab/core/args.h"

extern const struct kl_command kl_ceilings_command;    /* perf/bench.c */
extern const struct kl_command kl_bench_command;       /* perf/bench.c */
extern const struct kl_command kl_story_command;       /* lab/story/command.c */
extern const struct kl_command kl_new_variant_command; /* lab/core/scaffold.c */

int kl_cmd_ceilings(int argc, char **argv);
int kl_cmd_bench(int argc, char **argv);
int kl_cmd_new_variant(int argc, char **argv);
int kl_cmd_story(int argc, char **argv);
#endif
