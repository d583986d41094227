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

#include "lab/core/args.h"
#include "lab/core/device.h"
#include "lab/core/ranks.h"
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
    int width = 34; /* the longest module/variant name sets the column */
    for (int i = 0; i < kl_module_count(); i++)
        for (int j = 0; j < kl_variant_count(kl_module_at(i)->name, false); j++) {
            const int n = (int)(strlen(kl_module_at(i)->name) + 1 + strlen(kl_variant_at(kl_module_at(i)->name, j, false)->name));
            if (n > width) width = n;
        }
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        printf("%-*s %-6s %s\n", width + 2, m->name, cc_str(m->min_cc, cc, sizeof cc), m->summary);
        for (int j = 0; j < kl_variant_count(m->name, false); j++) {
            const struct kl_variant *v = kl_variant_at(m->name, j, false);
            char full[96];
            snprintf(full, sizeof full, "%s/%s", m->name, v->name);
            printf("  %-*s %-6s %s\n", width, full, cc_str(v->min_cc, cc, sizeof cc), v->summary);
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

/* "dir/name", allocated: case paths have no fixed bound here (kl_case_open says which are
 * too long for it, as a FAIL line naming them). */
static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    KL_CHECK(p, "out of memory");
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* lstat, not stat: a meta.json that is a dangling or looping link still makes its directory
 * a case, which then FAILs naming it instead of vanishing from the run. */
static bool has_meta(const char *dir)
{
    char *p = join(dir, "meta.json");
    struct stat st;
    bool found = lstat(p, &st) == 0;
    free(p);
    return found;
}

static int by_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool has_subdirs(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while (d && !found && (e = readdir(d))) {
        char *p = join(dir, e->d_name);
        found = e->d_name[0] != '.' && is_dir(p);
        free(p);
    }
    if (d) closedir(d);
    return found;
}

/* The cases found so far, and every directory the walk entered (device + inode): a link to
 * '.' or '..' inside a collection leads back to one of them and is not walked again. */
struct walk {
    char **cases;
    int n, cap;
    struct stat *seen;
    int nseen;
};

static bool seen_before(struct walk *w, const struct stat *st)
{
    for (int i = 0; i < w->nseen; i++)
        if (w->seen[i].st_dev == st->st_dev && w->seen[i].st_ino == st->st_ino) return true;
    w->seen = realloc(w->seen, sizeof *w->seen * (size_t)(w->nseen + 1));
    KL_CHECK(w->seen, "out of memory");
    w->seen[w->nseen++] = *st;
    return false;
}

/* A directory without meta.json that holds directories is a collection (golden/, golden/rmsnorm/):
 * its cases are the directories below it with a meta.json, in name order (golden/gen/ and other
 * folders without one are passed over). A path given by the user is always taken as a case
 * when it is not a collection, so an empty directory is reported as a case without meta.json. */
static void collect_cases(const char *dir, bool given, struct walk *w)
{
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && seen_before(w, &st)) return;
    if (has_meta(dir) || !is_dir(dir) || !has_subdirs(dir)) {
        if (!given && !has_meta(dir)) return;
        if (w->n == w->cap) w->cases = realloc(w->cases, sizeof *w->cases * (size_t)(w->cap = w->cap * 2 + 8));
        KL_CHECK(w->cases, "out of memory");
        w->cases[w->n++] = strdup(dir);
        return;
    }
    char **subs = NULL;
    int nsub = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *p = join(dir, e->d_name);
        if (e->d_name[0] == '.' || !is_dir(p)) {
            free(p);
            continue;
        }
        subs = realloc(subs, sizeof *subs * (size_t)(nsub + 1));
        KL_CHECK(subs, "out of memory");
        subs[nsub++] = p;
    }
    if (d) closedir(d);
    qsort(subs, (size_t)nsub, sizeof *subs, by_str);
    for (int i = 0; i < nsub; i++) {
        collect_cases(subs[i], false, w);
        free(subs[i]);
    }
    free(subs);
}

/* Prints s with control characters as '?': whatever a path or a message holds, a verdict stays
 * one line and cannot forge another. */
static void put_clean(const char *s)
{
    for (; *s; s++) putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

static void print_verdict(const char *module, const char *name, const char *impl, const struct kl_verdict *v)
{
    static const char *kstatus[] = {"PASS", "FAIL", "SKIP"};
    const char *fields[] = {module, name, impl};
    printf("%s", kstatus[v->status]);
    for (int i = 0; i < 3; i++) putchar(' '), put_clean(fields[i]);
    printf(" rel_l2=%.3g max_abs=%.3g%s", v->rel_l2, v->max_abs, v->why[0] ? " " : "");
    put_clean(v->why);
    putchar('\n');
}

static bool any_module_has(const char *variant)
{
    for (int i = 0; i < kl_module_count(); i++)
        if (kl_variant_find(kl_module_at(i)->name, variant)) return true;
    return false;
}

static int cmd_verify(int argc, char **argv)
{
    enum { DEFAULT, REFERENCE, ONE, ALL } mode = DEFAULT;
    const char *only = NULL;
    struct walk w = {0};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reference") == 0) mode = REFERENCE;
        else if (strcmp(argv[i], "--all") == 0) mode = ALL;
        else if (strcmp(argv[i], "--variant") == 0) {
            if (!(only = kl_opt_value("verify", argc, argv, &i))) return 2;
            mode = ONE;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return fprintf(stderr, "kernlab verify: unknown option '%s'\n", argv[i]), 2;
        } else {
            /* The whole argument, however long: a copy cut to a fixed buffer could name
             * another case, which would then PASS in its place. */
            char *path = strdup(argv[i]);
            KL_CHECK(path, "out of memory");
            for (size_t k = strlen(path); k > 1 && path[k - 1] == '/'; k--) path[k - 1] = 0;
            collect_cases(path, true, &w);
            free(path);
        }
    }
    if (only && !any_module_has(only))
        return fprintf(stderr, "kernlab verify: --variant '%s': no module has such a variant (kernlab list shows them)\n",
                       only), 2;
    char **dirs = w.cases;
    int ndirs = w.n;
    free(w.seen);
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
    const char *module = NULL, *only = NULL, *seed_s = NULL;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--variant") == 0) {
            if (!(only = kl_opt_value("check", argc, argv, &i))) return 2;
        } else if (strcmp(argv[i], "--seed") == 0) {
            if (!(seed_s = kl_opt_value("check", argc, argv, &i))) return 2;
            if (!kl_parse_u64(seed_s, &seed))
                return fprintf(stderr, "kernlab check: --seed '%s' is not a number (want a decimal integer >= 0)\n",
                               seed_s), 2;
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
    /* A rank process this binary started for a multi-GPU module (lab/core/ranks.h): not a command. */
    if (kl_rank_argv(argc, argv)) return kl_rank_main(argc - 2, argv + 2);
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
