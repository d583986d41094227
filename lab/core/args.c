#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kl_parse_u64(const char *s, uint64_t *out)
{
    if (!*s) return false;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return false;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno) return false;
    *out = v;
    return true;
}

void kl_args_synopsis(const struct kl_command *c, FILE *f)
{
    fprintf(f, "kernlab %s", c->name);
    if (c->operands) fprintf(f, " %s", c->operands);
    for (const struct kl_opt *o = c->opts; o && o->name; o++)
        fprintf(f, o->kind == KL_OPT_FLAG ? " [%s]" : " [%s %s]", o->name, o->meta);
}

void kl_args_usage(const struct kl_command *c, FILE *f)
{
    fprintf(f, "usage: ");
    kl_args_synopsis(c, f);
    fprintf(f, "\n  %s\n", c->summary);
    /* the option column as wide as its longest entry */
    int width = (int)strlen("-h, --help");
    for (const struct kl_opt *o = c->opts; o && o->name; o++) {
        const int n = (int)(strlen(o->name) + (o->kind == KL_OPT_FLAG ? 0 : 1 + strlen(o->meta)));
        if (n > width) width = n;
    }
    fprintf(f, "options:\n");
    for (const struct kl_opt *o = c->opts; o && o->name; o++) {
        char head[96];
        snprintf(head, sizeof head, o->kind == KL_OPT_FLAG ? "%s" : "%s %s", o->name, o->meta);
        fprintf(f, "  %-*s  %s\n", width, head, o->help);
    }
    fprintf(f, "  %-*s  %s\n", width, "-h, --help", "this help");
    if (c->details) fprintf(f, "%s", c->details);
}

static int usage_error_v(const struct kl_command *c, const char *fmt, va_list ap)
{
    fprintf(stderr, "kernlab %s: ", c->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nusage: ");
    kl_args_synopsis(c, stderr);
    fprintf(stderr, "\n       (kernlab %s --help says more)\n", c->name);
    return KL_EXIT_USAGE;
}

int kl_usage_error(const struct kl_command *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    usage_error_v(c, fmt, ap);
    va_end(ap);
    return KL_EXIT_USAGE;
}

/* The index of the option named by the first len characters of arg, or -1. */
static int find_opt(const struct kl_command *c, const char *arg, size_t len)
{
    for (int k = 0; c->opts && c->opts[k].name; k++)
        if (strlen(c->opts[k].name) == len && strncmp(c->opts[k].name, arg, len) == 0) return k;
    return -1;
}

int kl_args_parse(const struct kl_command *c, int argc, char **argv, struct kl_optval *opt, const char **operands,
                  int *n_operands)
{
    int nopts = 0;
    while (c->opts && c->opts[nopts].name) nopts++;
    memset(opt, 0, sizeof *opt * (size_t)nopts);
    *n_operands = 0;
    bool only_operands = false;
    /* --help wins wherever it stands: `kernlab check --seed x --help` is a question, not an error. */
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return kl_args_usage(c, stdout), KL_EXIT_OK;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (only_operands || a[0] != '-' || a[1] == 0) { /* "-" alone is an operand (stdin, by convention) */
            if (c->max_operands >= 0 && *n_operands == c->max_operands)
                return kl_usage_error(c, "unexpected argument '%s'", a);
            operands[(*n_operands)++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_operands = true;
            continue;
        }
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        const int k = find_opt(c, a, eq ? (size_t)(eq - a) : strlen(a));
        if (k < 0) return kl_usage_error(c, "unknown option '%s'", a);
        const struct kl_opt *o = &c->opts[k];
        if (o->kind == KL_OPT_FLAG) {
            if (eq) return kl_usage_error(c, "%s takes no value ('%s')", o->name, a);
            opt[k].set = true;
            continue;
        }
        /* "--json --gate" is a forgotten value, not a file named --gate. */
        const char *v = eq ? eq + 1 : i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : NULL;
        if (!v) return kl_usage_error(c, "%s needs a value (%s)", o->name, o->meta);
        if (!*v) return kl_usage_error(c, "%s needs a value (%s), not an empty one", o->name, o->meta);
        opt[k].set = true;
        opt[k].value = v;
        if (o->kind == KL_OPT_NUMBER) {
            const uint64_t max = o->max ? o->max : UINT64_MAX;
            if (!kl_parse_u64(v, &opt[k].number) || opt[k].number < o->min || opt[k].number > max) {
                if (o->max)
                    return kl_usage_error(c, "%s '%s': want a whole number from %llu to %llu", o->name, v,
                                          (unsigned long long)o->min, (unsigned long long)o->max);
                return kl_usage_error(c, "%s '%s' is not a number (want a decimal integer >= %llu)", o->name, v,
                                      (unsigned long long)o->min);
            }
        }
    }
    if (*n_operands < c->min_operands) /* "no MODULE given", "no CASE_DIR given" */
        return kl_usage_error(c, "no %.*s given", (int)strcspn(c->operands, " .["), c->operands);
    return -1;
}
