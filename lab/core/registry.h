/* Modules register themselves; nothing central lists them. Variants register with KL_VARIANT
 * (kernels/variant.h, at the kernels' floor); a module file ends with KL_MODULE, placed the same way
 * in the linker section "kl_modules". Below: the walks over both, and the generic checker. */
#ifndef KL_REGISTRY_H
#define KL_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "compare.h"
#include "golden.h"
#include "kernels/variant.h"
#include "tensor.h"

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

/* One device buffer of a kernel's params struct, as a module's `device` hook describes it for a
 * problem: kl_tensor_upload allocates it, fills it and stores the pointer in its field. */
enum kl_buf_init {
    KL_BUF_NONE,   /* not allocated: the field stays NULL (an optional input the problem leaves out) */
    KL_BUF_UPLOAD, /* `bytes` copied from `src` */
    KL_BUF_FILL,   /* every byte set to `fill`: 0xFF poisons (NaN in every float type, so an element
                    * the kernel never writes fails), 0 zeroes (a workspace's counters) */
};
struct kl_dev_buf {
    enum kl_buf_init init;
    size_t bytes;    /* allocated; a module asks for 16 where its kernels want a pointer even when empty */
    const void *src; /* KL_BUF_UPLOAD */
    int fill;        /* KL_BUF_FILL */
};
#define KL_MAX_BUFS 12
/* Buffers as `device` hooks describe them. `nonempty`: 16 bytes where there would be none, for
 * kernels that want a pointer even to an empty tensor. */
struct kl_dev_buf kl_buf_tensor(const struct kl_tensor *t, bool nonempty); /* an upload of t */
struct kl_dev_buf kl_buf_fill(size_t bytes, int byte, bool nonempty);

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
     * leaves out: tensor-core attention takes fp16/bf16 only): a SKIP with err's reason. NULL:
     * kl_tensor_run, from the device description below (a module whose variants run elsewhere,
     * allreduce's rank groups, gives its own). */
    int (*run)(const struct kl_variant *v, const void *prob, struct kl_outputs *out,
               struct kl_err *err);
    void (*free)(void *prob);

    /* The device side, described once; kl_tensor_upload/download/release/run do the work. */
    size_t params_size;               /* sizeof the kernels' params struct */
    int n_bufs;                       /* device pointers in it */
    size_t buf_field[KL_MAX_BUFS];    /* offsetof each of them */
    size_t out_field[KL_MAX_OUTPUTS]; /* offsetof the buffer output i is copied back from */
    /* Sets params' scalars (params starts zeroed) and describes buffer i (the one at buf_field[i])
     * for problem prob. */
    void (*device)(const void *prob, void *params, struct kl_dev_buf *bufs);
    /* Names, dtypes, sizes and policies of prob's outputs (as `reference` sets them). */
    void (*outputs)(const void *prob, struct kl_outputs *o);
    /* v's launcher on params and a stream (cudaStream_t; NULL the default): v->launch cast to the
     * module's launcher type. Returns its cudaError_t. */
    int (*launch)(const struct kl_variant *v, const void *params, void *stream);
    /* A launch that returns cudaErrorNotSupported declines the problem: why, into err (then a
     * SKIP). NULL: that is a failure like any other. */
    void (*declined)(const struct kl_variant *v, const void *prob, struct kl_err *err);
};

/* Defines `const struct kl_tensor_ops name` for a module whose kernels take params_t and launch
 * as launch_t (cast from v->launch: every module's (const params_t *, cudaStream_t)), with the
 * hooks and fields given after them, e.g.
 *     KL_TENSOR_OPS(kl_rmsnorm_ops, struct kl_rmsnorm_params, kl_rmsnorm_launch_fn, .load = load, ...);
 * with buf_field and out_field given as offsetof(params_t, field). */
#define KL_TENSOR_OPS(name, params_t, launch_t, ...)                                                \
    static int name##_launch(const struct kl_variant *v, const void *params, void *stream)         \
    {                                                                                              \
        return (int)((launch_t)v->launch)((const params_t *)params, (cudaStream_t)stream);         \
    }                                                                                              \
    const struct kl_tensor_ops name = {.params_size = sizeof(params_t), .launch = name##_launch, __VA_ARGS__}

/* The generic device side of a tensor module (lab/core/tensor_ops.c). */
/* params zeroed, its scalars set, every buffer allocated and filled; on failure nothing stays
 * allocated and err says which allocation failed. */
int kl_tensor_upload(const struct kl_tensor_ops *ops, const void *prob, void *params, struct kl_err *err);
/* prob's outputs (ops->outputs) copied back as doubles from their buffers. */
int kl_tensor_download(const struct kl_tensor_ops *ops, const void *prob, const void *params,
                       struct kl_outputs *o, struct kl_err *err);
/* Frees every buffer of params and zeroes it. */
void kl_tensor_release(const struct kl_tensor_ops *ops, void *params);
/* Upload, launch on the default stream, synchronize, download, release: tensor ops' run when a
 * module gives none. Returns as `run` does. */
int kl_tensor_run(const struct kl_tensor_ops *ops, const struct kl_variant *v, const void *prob,
                  struct kl_outputs *out, struct kl_err *err);
/* ops->run if the module has one, else kl_tensor_run. */
int kl_tensor_run_variant(const struct kl_tensor_ops *ops, const struct kl_variant *v, const void *prob,
                          struct kl_outputs *out, struct kl_err *err);

enum kl_status { KL_PASS, KL_FAIL, KL_SKIP };

struct kl_verdict {
    enum kl_status status;
    double rel_l2, max_abs;
    char why[768];
};

struct kl_bench_args;  /* perf/bench.h */
struct kl_perf_ops;    /* perf/bench.h */
struct kl_guide_hooks; /* lab/core/guide.h */

struct kl_module {
    const char *name;
    const char *summary;
    int min_cc;         /* 0: the module's work runs on the CPU */
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
    const char *tolerance; /* for the guide, where outputs carry a policy of their own (attention) */
    /* for the guide: the outputs the kernel updates in place ("q, k"), which start as inputs and so
     * cannot be poisoned before a run; NULL: every output is poisoned (an unwritten element fails) */
    const char *in_place;
    /* The guide's prose is text, not C: lab/<module>/guide/<section>.md, embedded at build time
     * and read with kl_guide_text (lab/core/guide.h): semantics (what it computes, exactly),
     * exercises (the next variant to write, what it should gain, how to check), analysis (after
     * the targets: what the measurements mean that the tables cannot say; mechanisms, not
     * figures), learning (its line on README.md's learning path). */
    int learning_step;  /* where its guide comes on README.md's learning path (1 first); 0: not on it */
    /* the module's own guide sections (lab/<module>/guide.c); NULL: the generic guide alone */
    const struct kl_guide_hooks *guide;
};

#define KL_MODULE(mod, ...)                                                                   \
    static const struct kl_module kl_module_desc_##mod = {.name = #mod, __VA_ARGS__};          \
    __attribute__((used, section("kl_modules"))) const struct kl_module                      \
        *kl_module_ptr_##mod = &kl_module_desc_##mod

/* N of a "vN_..." name (a rung of the ladder); false for names without that prefix (mutants, peers). */
bool kl_variant_number(const char *name, unsigned long long *n);
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
