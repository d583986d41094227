/* A variant registers itself; nothing central lists it. This is all a variant file needs from the
 * lab, at the kernels' own floor (lab/core/registry.h includes it and walks the registrations).
 *
 * A variant file ends with one macro:
 *     KL_VARIANT(rmsnorm, v2_vec16, launch_v2, .min_cc = 80, .summary = "16-byte loads ...")
 * It places a POINTER to a static descriptor in the linker section "kl_variants" (whole structs
 * would be padded by the linker and break the walk). The linker's __start_/__stop_ symbols
 * bound the section. Kernels are built as a CMake OBJECT library, so no registration is dropped
 * the way a static archive drops unreferenced objects.
 *
 * Designated initializers must follow the field order below (nvcc compiles .cu files as C++20,
 * which requires declaration order): .min_cc, .summary, .producer_regs, .consumer_regs, .mutant. */
#ifndef KL_VARIANT_H
#define KL_VARIANT_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*kl_fnptr)(void);

struct kl_variant {
    const char *module;  /* module name, e.g. "rmsnorm" */
    const char *name;    /* e.g. "v2_vec16" */
    kl_fnptr launch;     /* the module's launcher type (kernels/<module>/<module>.h), cast */
    const char *file;    /* __FILE__ of the registration */
    int line;
    int min_cc;          /* minimum compute capability x10 (80 = sm_80); 0 = runs on the CPU */
    const char *summary; /* one line for `kernlab list` */
    /* a warp-specialized kernel's registers per thread after setmaxnreg (producer, consumer): the
     * launch record knows only the cap at entry, the guide shows the split; 0 for the others */
    int producer_regs, consumer_regs;
    int mutant;          /* deliberately wrong, built into the tests only; never listed or benched */
};

#define KL_VARIANT(mod, vname, fn, ...)                                                        \
    static const struct kl_variant kl_variant_desc_##mod##_##vname = {                         \
        .module = #mod, .name = #vname, .launch = (kl_fnptr)(fn), .file = __FILE__,             \
        .line = __LINE__, __VA_ARGS__};                                                         \
    __attribute__((used, section("kl_variants"))) const struct kl_variant                      \
        *kl_variant_ptr_##mod##_##vname = &kl_variant_desc_##mod##_##vname

/* The variant `name` of `module` (mutants included), or NULL: for a variant that hands some calls to
 * another (allreduce v6_switch, the one-trip variants' fallbacks). Defined with the registry's other
 * walks, in lab/core/registry.c. */
const struct kl_variant *kl_variant_find(const char *module, const char *name);

/* The launcher of `rung`, the variant of `module` that `caller` hands some calls to (found by name, so
 * that each variant stays one file), or NULL, said on stderr, where that rung is not built. */
static inline kl_fnptr kl_variant_launcher(const char *module, const char *rung, const char *caller)
{
    const struct kl_variant *v = kl_variant_find(module, rung);
    if (!v) fprintf(stderr, "%s %s: %s is not built\n", module, caller, rung);
    return v ? v->launch : NULL;
}

#ifdef __cplusplus
}
#endif
#endif
