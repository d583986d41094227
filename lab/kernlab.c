/* kernlab: the lab's one command (DESIGN.md section 3).
 *
 *   kernlab list
 *   kernlab verify CASE_DIR... [--reference | --variant NAME | --all]
 *   kernlab check MODULE [--variant NAME] [--seed N]
 *   kernlab ceilings
 *   kernlab bench MODULE|all [--variant NAME] [--workload NAME] [--json FILE] [--gate] [--counters] [--peers]
 *   kernlab report [--results DIR] [--out DIR]
 *   kernlab story [--layers N] [--prompt N] [--shared N] [--steps N] [--seed N] [--out DIR] [--tiny]
 *   kernlab new-variant MODULE NAME
 *
 * Results go to stdout, errors to stderr naming the file or argument at fault; usage errors
 * exit 2. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lab/core/device.h"
#include "lab/core/registry.h"
#include "lab/kernlab.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: kernlab <command> [args]\n"
            "  list                                   modules and variants\n"
            "  verify CASE_DIR... [--reference | --variant NAME | --all]\n"
            "                                         check golden cases (a directory of cases is searched)\n"
            "  check MODULE [--variant NAME] [--seed N]\n"
            "                                         fresh random inputs + edge cases, variants vs the reference\n"
            "  ceilings                               measure this GPU's ceilings\n"
            "  bench MODULE|all [--variant NAME] [--workload NAME] [--json FILE] [--gate] [--counters] [--peers]\n"
            "  report [--results DIR] [--out DIR]     write the guides from results\n"
            "  story [--layers N] [--prompt N] [--shared N] [--steps N] [--seed N] [--out DIR] [--tiny]\n"
            "                                         a Llama-shaped forward pass told kernel by kernel (story --help)\n"
            "  new-variant MODULE NAME                write a variant skeleton (kernels/MODULE/NAME.cu)\n");
    return 2;
}

static const char *cc_str(int cc, char *buf, size_t len)
{
    if (cc == 0) snprintf(buf, len, "cpu");
    else snprintf(buf, len, "sm_%d", cc);
    return buf;
}

static int cmd_list(int argc, char **argv)
{
    if (argc > 0) return fprintf(stderr, "kernlab list: unexpected argument '%s'\n", argv[0]), 2;
    char cc[16];
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        printf("%-36s %-6s %s\n", m->name, cc_str(m->min_cc, cc, sizeof cc), m->summary);
        for (int j = 0; j < kl_variant_count(m->name, false); j++) {
            const struct kl_variant *v = kl_variant_at(m->name, j, false);
            char full[96];
            snprintf(full, sizeof full, "%s/%s", m->name, v->name);
            printf("  %-34s %-6s %s\n", full, cc_str(v->min_cc, cc, sizeof cc), v->summary);
        }
    }
    return 0;
}

/* ---- verify ---- */

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool has_meta(const char *dir)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/meta.json", dir);
    struct stat st;
    return stat(p, &st) == 0;
}

static int by_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool has_subdirs(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while (d && !found && (e = readdir(d))) {
        char p[1100];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        found = e->d_name[0] != '.' && is_dir(p);
    }
    if (d) closedir(d);
    return found;
}

/* A directory without meta.json that holds directories is a collection (golden/, golden/rmsnorm/):
 * its cases are the directories below it with a meta.json, in name order (golden/gen/ and other
 * folders without one are passed over). A path given by the user is always taken as a case
 * when it is not a collection, so an empty directory is reported as a case without meta.json. */
static void collect_cases(const char *dir, bool given, char ***list, int *n, int *cap)
{
    if (has_meta(dir) || !is_dir(dir) || !has_subdirs(dir)) {
        if (!given && !has_meta(dir)) return;
        if (*n == *cap) *list = realloc(*list, sizeof **list * (size_t)(*cap = *cap * 2 + 8));
        (*list)[(*n)++] = strdup(dir);
        return;
    }
    char **subs = NULL;
    int nsub = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[1100];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || !is_dir(p)) continue;
        subs = realloc(subs, sizeof *subs * (size_t)(nsub + 1));
        subs[nsub++] = strdup(p);
    }
    if (d) closedir(d);
    qsort(subs, (size_t)nsub, sizeof *subs, by_str);
    for (int i = 0; i < nsub; i++) {
        collect_cases(subs[i], false, list, n, cap);
        free(subs[i]);
    }
    free(subs);
}

static void print_verdict(const char *module, const char *name, const char *impl, const struct kl_verdict *v)
{
    static const char *kstatus[] = {"PASS", "FAIL", "SKIP"};
    printf("%s %s %s %s rel_l2=%.3g max_abs=%.3g%s%s\n", kstatus[v->status], module, name, impl, v->rel_l2,
           v->max_abs, v->why[0] ? " " : "", v->why);
}

static int cmd_verify(int argc, char **argv)
{
    enum { DEFAULT, REFERENCE, ONE, ALL } mode = DEFAULT;
    const char *only = NULL;
    char **dirs = NULL;
    int ndirs = 0, cap = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reference") == 0) mode = REFERENCE;
        else if (strcmp(argv[i], "--all") == 0) mode = ALL;
        else if (strcmp(argv[i], "--variant") == 0) {
            if (++i == argc) return fprintf(stderr, "kernlab verify: --variant needs a NAME\n"), 2;
            mode = ONE, only = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return fprintf(stderr, "kernlab verify: unknown option '%s'\n", argv[i]), 2;
        } else {
            {
            char path[1024];
            snprintf(path, sizeof path, "%s", argv[i]);
            for (size_t k = strlen(path); k > 1 && path[k - 1] == '/'; k--) path[k - 1] = 0;
            collect_cases(path, true, &dirs, &ndirs, &cap);
        }
        }
    }
    if (ndirs == 0) return fprintf(stderr, "kernlab verify: no CASE_DIR given (or none found under it)\n"), 2;

    char why[256];
    const int cc = kl_device_cc(why, sizeof why);
    int fails = 0, passes = 0, skips = 0, unrunnable = 0;
    for (int i = 0; i < ndirs; i++) {
        struct kl_case c;
        struct kl_err err = {{0}};
        struct kl_verdict v = {.status = KL_FAIL, .rel_l2 = NAN, .max_abs = NAN};
        const struct kl_module *m = NULL;
        if (kl_case_open(&c, dirs[i], &err) == 0 && !(m = kl_module_find(c.module)))
            kl_fail(&err, "%s/meta.json: unknown module \"%s\"", c.dir, c.module);
        if (!m) {
            const char *base = strrchr(dirs[i], '/');
            snprintf(v.why, sizeof v.why, "%s", err.msg);
            print_verdict(c.meta ? c.module : "?", base && base[1] ? base + 1 : dirs[i], "reference", &v);
            fails++;
            kl_case_close(&c);
            free(dirs[i]);
            continue;
        }
        if (mode != ONE) {
            kl_verify_case(m, &c, NULL, &v);
            print_verdict(m->name, c.name, "reference", &v);
            fails += v.status == KL_FAIL, passes += v.status == KL_PASS, skips += v.status == KL_SKIP;
        }
        if (mode == ONE && !kl_variant_find(m->name, only)) {
            v = (struct kl_verdict){.status = KL_FAIL, .rel_l2 = NAN, .max_abs = NAN};
            snprintf(v.why, sizeof v.why, "--variant %s: no such variant of %s", only, m->name);
            print_verdict(m->name, c.name, only, &v);
            fails++;
        }
        for (int j = 0; mode != REFERENCE && j < kl_variant_count(m->name, false); j++) {
            const struct kl_variant *var = kl_variant_at(m->name, j, false);
            if (mode == ONE && strcmp(var->name, only) != 0) continue;
            if (mode == DEFAULT && var->min_cc > cc) {
                unrunnable++;
                continue;
            }
            kl_verify_case(m, &c, var, &v);
            print_verdict(m->name, c.name, var->name, &v);
            fails += v.status == KL_FAIL, passes += v.status == KL_PASS, skips += v.status == KL_SKIP;
        }
        kl_case_close(&c);
        free(dirs[i]);
    }
    free(dirs);
    fprintf(stderr, "verify: %d passed, %d failed, %d skipped", passes, fails, skips);
    if (unrunnable) fprintf(stderr, "; %d GPU variant runs not attempted (%s)", unrunnable, cc ? "needs a newer GPU" : why);
    fprintf(stderr, "\n");
    return fails ? 1 : 0;
}

/* ---- check ---- */

static int cmd_check(int argc, char **argv)
{
    const char *module = NULL, *only = NULL;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            seed = strtoull(argv[++i], &end, 10);
            if (errno || *end) return fprintf(stderr, "kernlab check: --seed '%s' is not a number\n", argv[i]), 2;
        } else if (argv[i][0] == '-') return fprintf(stderr, "kernlab check: unknown option '%s'\n", argv[i]), 2;
        else if (!module) module = argv[i];
        else return fprintf(stderr, "kernlab check: unexpected argument '%s'\n", argv[i]), 2;
    }
    if (!module) return fprintf(stderr, "kernlab check: no MODULE given\n"), 2;
    const struct kl_module *m = kl_module_find(module);
    if (!m) return fprintf(stderr, "kernlab check: unknown module '%s' (kernlab list shows them)\n", module), 2;
    const struct kl_variant *v = NULL;
    if (only && !(v = kl_variant_find(module, only)))
        return fprintf(stderr, "kernlab check: --variant '%s': no such variant of %s\n", only, module), 2;
    printf("seed %llu (replay with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    int failures = kl_check_module(m, v, seed, stdout);
    fprintf(stderr, "check %s: %d failure%s\n", module, failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    const char *cmd = argv[1];
    argc -= 2, argv += 2;
    if (strcmp(cmd, "list") == 0) return cmd_list(argc, argv);
    if (strcmp(cmd, "verify") == 0) return cmd_verify(argc, argv);
    if (strcmp(cmd, "check") == 0) return cmd_check(argc, argv);
    if (strcmp(cmd, "ceilings") == 0) return kl_cmd_ceilings(argc, argv);
    if (strcmp(cmd, "bench") == 0) return kl_cmd_bench(argc, argv);
    if (strcmp(cmd, "report") == 0) return kl_cmd_report(argc, argv);
    if (strcmp(cmd, "new-variant") == 0) return kl_cmd_new_variant(argc, argv);
    if (strcmp(cmd, "story") == 0) return kl_cmd_story(argc, argv);
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) return usage(), 0;
    fprintf(stderr, "kernlab: unknown command '%s'\n", cmd);
    return usage();
}
