/* Helpers the module test suites share (no Criterion in here: the suites assert). */
#ifndef KL_TESTING_H
#define KL_TESTING_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "registry.h"

/* Why v cannot run on this machine ("no CUDA device: ...", "needs sm_90"), or NULL. */
const char *kl_test_skip_reason(const struct kl_variant *v);
/* Runs every case under golden/<module>/ through v (NULL: the reference), a line per case to
 * log; returns the number of failing cases, or -1 when there are no cases at all. */
int kl_test_goldens(const char *module, const struct kl_variant *v, FILE *log);
/* A CPU stand-in for a kernel: outputs computed from a module's problem the way a kernel would
 * (float32 arithmetic and one rounding to the output dtype, or that with a deliberate bug), so a
 * test can show without a GPU that the policy passes the one and catches the other. Returns 0,
 * or -1 with err saying why. */
typedef int (*kl_stand_in_fn)(const void *prob, struct kl_outputs *out, struct kl_err *err);
/* Every golden case of module through fn, judged as a variant's outputs are (as the reference's
 * when as_reference); a line per case to log, labelled name; returns the number of failing
 * cases, or -1 when there are no cases at all. */
int kl_test_goldens_with(const char *module, kl_stand_in_fn fn, const char *name, bool as_reference, FILE *log);
/* The module's check catalogue for seed through fn, each problem judged against the reference as
 * a variant is; a line per failing problem to log; returns the number of failures. */
int kl_test_catalogue_with(const char *module, kl_stand_in_fn fn, const char *name, uint64_t seed, FILE *log);
/* A stand-in of a correct kernel on every golden and on the catalogue drawn from `seeds`
 * consecutive seeds (the first from kl_test_seed, printed); returns the failures (-1: no goldens). */
int kl_test_stand_in_passes(const char *module, kl_stand_in_fn fn, const char *name, int seeds, FILE *log);
/* v rounded toward zero to t (f32, f16, bf16): the rounding of a kernel that truncates. */
double kl_test_round_toward_zero(enum kl_dtype t, double v);
/* The seed for fresh random inputs: $KL_SEED if set (replay), else the clock; printed to log. */
uint64_t kl_test_seed(FILE *log);

#endif
