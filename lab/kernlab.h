/* Subcommands of `kernlab` that live outside lab/kernlab.c. Each returns the exit status. */
#ifndef KL_KERNLAB_H
#define KL_KERNLAB_H
int kl_cmd_ceilings(int argc, char **argv);
int kl_cmd_bench(int argc, char **argv);
int kl_cmd_report(int argc, char **argv);
int kl_cmd_new_variant(int argc, char **argv);
int kl_cmd_story(int argc, char **argv); /* lab/story/command.c */
#endif
