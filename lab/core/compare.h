/* The correctness policy (DESIGN.md section 5): compare an output with its float64 reference.
 *
 * Two measures, both must pass:
 *   rel_l2 = ||out - ref|| / ||ref||                        <= policy.rel_l2
 *   every element: |out - ref| <= atol * max|ref| + rtol * |ref|
 * The numbers come from one table per output dtype (compare.c, with the rationale next to each
 * row). NaN or Inf where the reference is finite always fails; that is how poisoned (never
 * written) elements are caught. The first ten mismatches are kept for printing. */
#ifndef KL_COMPARE_H
#define KL_COMPARE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_policy {
    double rtol;      /* per element, relative to |ref| */
    double atol_frac; /* per element, absolute, as a fraction of max|ref| over the output */
    double rel_l2;    /* whole output */
    const char *why;  /* the rationale, printed by guides */
};

/* The policy for an output of kernel dtype t; exact (all zeros) for data movement. */
struct kl_policy kl_policy_for(enum kl_dtype t, bool exact);

#define KL_MAX_REPORTED 10

struct kl_mismatch {
    int64_t index;
    double got, want;
};

struct kl_cmp {
    double rel_l2, max_abs;
    int64_t n_bad; /* elements outside the bound (NaN/Inf included) */
    bool pass;
    int n_reported;
    struct kl_mismatch first[KL_MAX_REPORTED];
};

/* Compares n values. An empty output (n == 0) passes with zeros. */
void kl_compare(const double *got, const double *want, int64_t n, struct kl_policy p,
                struct kl_cmp *out);
/* Folds b into a (worst of both): used to report one verdict for several outputs. */
void kl_cmp_merge(struct kl_cmp *a, const struct kl_cmp *b);
/* Prints "name[index]: got G, expected W" lines for the kept mismatches. */
void kl_cmp_print(FILE *f, const char *name, const struct kl_cmp *c);

#ifdef __cplusplus
}
#endif
#endif
