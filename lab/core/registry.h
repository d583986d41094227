/* Modules register themselves; nothing central lists them. Variants register with KL_VARIANT
 * (kernels/variant.h, at the kernels' floor); a module file ends with KL_MODULE, placed the same way
 * in the linker section "kl_modules". Below: the walks over both, and the generic checker. */
#ifndef KL_REGISTRY_H
#define KL_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "compare.h"
#include "golden.h"
#include "kernels/variant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- outputs compared by the generic tensor-module checker ---- */

#define KL_MAX_OUTPUTS 4

struct kl_out {
    const char *name;    /* array name in the golden case: "out", "residual_out", ... */
    enum kl_dtype dtype; /* the kernel's output dtype (chooses the tolerance row) */
    bool exact;          /* data movement: bit-exact */
    int64_t n;
    double *v;           /* n values, owned */
    bool own_policy;     /* variants are judged by `policy` (attention), not the dtype's row */
    struct kl_policy policy;
};

struct kl_outputs {
    int count;
    struct kl_out o[KL_MAX_OUTPUTS];
};
void kl_outputs_free(struct kl_outputs *o);
/* Sets output i (name, dtype, exact, n) with zeroed storage. */
void kl_outputs_set(struct kl_outputs *o, int i, const char *name, enum kl_dtype dtype, bool exact,
                    int64_t n);
/* Gives output i a policy of the module's own (kl_policy_attention_out, ...). */
void kl_outputs_policy(struct kl_outputs *o, int i, struct kl_policy p);
/* Copies o->n elements of o->dtype from device memory into o->v (as doubles). */
int kl_out_download(struct kl_out *o, const void *dev, struct kl_err *err);

/* A tensor module (everything but radix) supplies these; verify/check/tests are then generic. */
struct kl_tensor_ops {
    /* Builds a problem from a golden case; `expected` gets the stored outputs. */
    void *(*load)(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err);
    /* Problem i of the check catalogue (edge cases first, then random shapes), inputs drawn from
     * seed; writes its label ("hidden=111 rows=3 bf16"); NULL when i is past the end. */
    void *(*make)(int i, uint64_t seed, char *label, size_t label_len);
    /* The CPU reference (reference/<module>.c), float64 accumulation. Allocates out. */
    int (*reference)(const void *prob, struct kl_outputs *out, struct kl_err *err);
    /* Runs variant v on the GPU: uploads inputs, poisons outputs, launches, downloads. Returns 0,
     * -1 on failure (err says why), or 1 when v does not take this problem (a dtype or head_dim it
     * leaves out: tensor-core attention takes fp16/bf16 only): a SKIP with err's reason. */
    int (*run)(const struct kl_variant *v, const void *prob, struct kl_outputs *out,
               struct kl_err *err);
    void (*free)(void *prob);
};

enum kl_status { KL_PASS, KL_FAIL, KL_SKIP };

struct kl_verdict {
    enum kl_status status;
    double rel_l2, max_abs;
    char why[768];
};

struct kl_bench_args;  /* perf/bench.h */
struct kl_perf_ops;    /* perf/bench.h */

struct kl_module {
    const char *name;
    const char *summary;
    int min_cc;         /* 0: the module's work runs on the CPU */
    const char *semantics; /* a paragraph for the guide: what it computes, exactly */
    const struct kl_tensor_ops *tensor;
    /* Modules that are not tensor-shaped (radix) give their own; NULL means the generic one. */
    void (*verify)(const struct kl_case *c, const struct kl_variant *v, struct kl_verdict *out);
    /* Fresh random inputs + the edge catalogue against the reference; one line per problem
     * to `log`; returns the number of failures. */
    int (*check)(const struct kl_variant *v, uint64_t seed, FILE *log);
    const struct kl_perf_ops *perf;                 /* GPU workloads, timed by perf/ */
    /* Or a module's own bench (radix: CPU): rows run, -1 on a failure, -2 for an unknown
     * --variant or --workload (a usage error). */
    int (*bench)(const struct kl_bench_args *args);
    const char *exercises; /* for the guide: the next variant to write, what it should gain, how to check */
    const char *tolerance; /* for the guide, where outputs carry a policy of their own (attention) */
    /* for the guide: the outputs the kernel updates in place ("q, k"), which start as inputs and so
     * cannot be poisoned before a run; NULL: every output is poisoned (an unwritten element fails) */
    const char *in_place;
    /* for the guide, after the targets: what the measurements mean that the tables cannot say (why
     * a peer wins or loses, what a counter rules out); mechanisms, not figures: every number in a
     * guide comes from a results file. NULL: no such section. */
    const char *analysis;
};

#define KL_MODULE(mod, ...)                                                                   \
    static const struct kl_module kl_module_desc_##mod = {.name = #mod, __VA_ARGS__};          \
    __attribute__((used, section("kl_modules"))) const struct kl_module                      \
        *kl_module_ptr_##mod = &kl_module_desc_##mod

/* Variant names in ladder order: by the number N of "vN_" (v10_x after v9_x, where strcmp
 * would put it before v2_x), then by name; names without a number (mutants) last. */
int kl_variant_name_cmp(const char *a, const char *b);
/* Walks. Modules are returned sorted by name, variants by module, then kl_variant_name_cmp. */
int kl_module_count(void);
const struct kl_module *kl_module_at(int i);
const struct kl_module *kl_module_find(const char *name);
/* Variants of a module; mutants only when include_mutants. */
int kl_variant_count(const char *module, bool include_mutants);
const struct kl_variant *kl_variant_at(const char *module, int i, bool include_mutants);
/* kl_variant_find(module, name): kernels/variant.h. */

/* Generic verify/check for tensor modules (lab/core/verify.c); modules' own hooks win. */
void kl_verify_case(const struct kl_module *m, const struct kl_case *c, const struct kl_variant *v,
                    struct kl_verdict *out);
/* Judges got against want as kl_verify_case does: reference (the float64 reference against a
 * golden) or a variant (each output's own policy, else its dtype's row). */
void kl_compare_outputs(const struct kl_outputs *got, const struct kl_outputs *want, bool reference,
                        struct kl_verdict *out);
/* What a check did. A run of a variant is judged when it gave PASS or FAIL; a check in which no
 * run was judged checked nothing, whatever the reference part did (lab/CONTRACTS.md section 3). */
struct kl_check_tally {
    int failures;  /* FAIL lines: the reference part's and the variants' */
    int judged;    /* variant runs that gave PASS or FAIL */
    int skipped;   /* variant runs this machine could not make (SKIP) */
    char why[512]; /* when nothing was judged: why (the first skip's reason, or no checker) */
};
/* v == NULL: the reference part first (every golden case of the module, then the catalogue
 * through the reference, which needs no GPU), then every variant; else variant v alone. A module
 * with neither a checker of its own nor tensor ops is a failure. One line per problem to log. */
void kl_check_run(const struct kl_module *m, const struct kl_variant *v, uint64_t seed, FILE *log,
                  struct kl_check_tally *t);
/* kl_check_run, then, when no variant run was judged, a last line "nothing checked: <why>" to
 * log. Returns the number of failures. */
int kl_check_module(const struct kl_module *m, const struct kl_variant *v, uint64_t seed, FILE *log);

#ifdef __cplusplus
}
#endif
#endif
