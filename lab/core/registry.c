/* Walks the linker sections that KL_MODULE and KL_VARIANT fill. The bounds are the linker's
 * __start_<section> / __stop_<section> symbols; they are weak so a binary without any entry
 * still links (and sees an empty list). */
#include "registry.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

extern const struct kl_variant *__start_kl_variants[] __attribute__((weak));
extern const struct kl_variant *__stop_kl_variants[] __attribute__((weak));
extern const struct kl_module *__start_kl_modules[] __attribute__((weak));
extern const struct kl_module *__stop_kl_modules[] __attribute__((weak));

static const struct kl_module **modules;
static const struct kl_variant **variants;
static int n_modules, n_variants;

static int by_module_name(const void *a, const void *b)
{
    return strcmp((*(const struct kl_module *const *)a)->name, (*(const struct kl_module *const *)b)->name);
}

bool kl_variant_number(const char *name, unsigned long long *n)
{
    if (name[0] != 'v' || !isdigit((unsigned char)name[1])) return false;
    char *end;
    errno = 0;
    *n = strtoull(name + 1, &end, 10);
    return *end == '_' && errno == 0;
}

int kl_variant_name_cmp(const char *a, const char *b)
{
    unsigned long long na = 0, nb = 0;
    bool ha = kl_variant_number(a, &na), hb = kl_variant_number(b, &nb);
    if (ha != hb) return ha ? -1 : 1;
    if (ha && na != nb) return na < nb ? -1 : 1;
    return strcmp(a, b);
}

static int by_variant_name(const void *a, const void *b)
{
    const struct kl_variant *x = *(const struct kl_variant *const *)a, *y = *(const struct kl_variant *const *)b;
    int c = strcmp(x->module, y->module);
    return c ? c : kl_variant_name_cmp(x->name, y->name);
}

/* Sorted copies, made once: link order is not a stable order to show users. */
static void load(void)
{
    if (modules) return;
    n_modules = (int)(__stop_kl_modules - __start_kl_modules);
    n_variants = (int)(__stop_kl_variants - __start_kl_variants);
    modules = malloc(sizeof *modules * (size_t)(n_modules + 1));
    variants = malloc(sizeof *variants * (size_t)(n_variants + 1));
    for (int i = 0; i < n_modules; i++) modules[i] = __start_kl_modules[i];
    for (int i = 0; i < n_variants; i++) variants[i] = __start_kl_variants[i];
    qsort(modules, (size_t)n_modules, sizeof *modules, by_module_name);
    qsort(variants, (size_t)n_variants, sizeof *variants, by_variant_name);
}

int kl_module_count(void) { return load(), n_modules; }
const struct kl_module *kl_module_at(int i) { return load(), i >= 0 && i < n_modules ? modules[i] : NULL; }

const struct kl_module *kl_module_find(const char *name)
{
    load();
    for (int i = 0; i < n_modules; i++)
        if (strcmp(modules[i]->name, name) == 0) return modules[i];
    return NULL;
}

static bool counts(const struct kl_variant *v, const char *module, bool include_mutants)
{
    return strcmp(v->module, module) == 0 && (include_mutants || !v->mutant);
}

int kl_variant_count(const char *module, bool include_mutants)
{
    load();
    int n = 0;
    for (int i = 0; i < n_variants; i++) n += counts(variants[i], module, include_mutants);
    return n;
}

const struct kl_variant *kl_variant_at(const char *module, int k, bool include_mutants)
{
    load();
    for (int i = 0; i < n_variants; i++)
        if (counts(variants[i], module, include_mutants) && k-- == 0) return variants[i];
    return NULL;
}

const struct kl_variant *kl_variant_find(const char *module, const char *name)
{
    load();
    for (int i = 0; i < n_variants; i++)
        if (strcmp(variants[i]->module, module) == 0 && strcmp(variants[i]->name, name) == 0) return variants[i];
    return NULL;
}

void kl_outputs_free(struct kl_outputs *o)
{
    for (int i = 0; i < o->count; i++) free(o->o[i].v);
    memset(o, 0, sizeof *o);
}

void kl_outputs_set(struct kl_outputs *o, int i, const char *name, enum kl_dtype dtype, bool exact, int64_t n)
{
    struct kl_out *x = &o->o[i];
    free(x->v);
    *x = (struct kl_out){.name = name, .dtype = dtype, .exact = exact, .n = n, .v = calloc((size_t)(n ? n : 1), sizeof(double))};
    KL_CHECK(x->v, "out of host memory for %lld values of output %s", (long long)n, name);
    if (i >= o->count) o->count = i + 1;
}

void kl_outputs_policy(struct kl_outputs *o, int i, struct kl_policy p)
{
    o->o[i].own_policy = true;
    o->o[i].policy = p;
}

int kl_out_download(struct kl_out *o, const void *dev, struct kl_err *err)
{
    size_t bytes = (size_t)o->n * kl_dtype_size(o->dtype);
    void *host = malloc(bytes ? bytes : 1);
    KL_CHECK(host, "out of host memory");
    int rc = kl_dev_download(host, dev, bytes);
    for (int64_t j = 0; !rc && j < o->n; j++) o->v[j] = kl_load_elem(o->dtype, host, (size_t)j);
    free(host);
    return rc ? kl_fail(err, "copying %s back: %s", o->name, kl_cuda_error_string(rc)) : 0;
}
