/* Helpers the module test suites share (no Criterion in here: the suites assert). */
#ifndef KL_TESTING_H
#define KL_TESTING_H

#include <stdint.h>
#include <stdio.h>

#include "registry.h"

/* Why v cannot run on this machine ("no CUDA device: ...", "needs sm_90"), or NULL. */
const char *kl_test_skip_reason(const struct kl_variant *v);
/* Runs every case under golden/<module>/ through v (NULL: the reference), a line per case to
 * log; returns the number of failing cases, or -1 when there are no cases at all. */
int kl_test_goldens(const char *module, const struct kl_variant *v, FILE *log);
/* The seed for fresh random inputs: $KL_SEED if set (replay), else the clock; printed to log. */
uint64_t kl_test_seed(FILE *log);

#endif
