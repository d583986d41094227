/* `kernlab new-variant`: the command that copies a working variant into a new one (scaffold.c). */
#ifndef KL_SCAFFOLD_H
#define KL_SCAFFOLD_H

#include "lab/core/args.h"

extern const struct kl_command kl_new_variant_command;
int kl_cmd_new_variant(int argc, char **argv);

#endif
