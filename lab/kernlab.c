/* kernlab: the lab's one command (lab/CONTRACTS.md section 3).
 *
 *   kernlab list | verify | check | ceilings | bench | report | story | new-variant | help
 *
 * Every command parses its arguments with lab/core/args.h and answers --help on stdout. Results
 * go to stdout, errors to stderr naming the file or argument at fault. Exit status: 0 success,
 * 1 a failure, 2 a usage error, 77 nothing could be run here (ctest's skip). */
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
#include "lab/core/scaffold.h"
#include "lab/report/report.h"
#include "lab/story/story.h"
#include "perf/bench.h"

static const char *cc_str(int cc, char *buf, size_t len)
{
    if (cc == 0) snprintf(buf, len, "cpu");
    else snprintf(buf, len, "sm_%d", cc);
    return buf;
}

static int cmd_list(int argc, char **argv);
static const struct kl_opt list_opts[] = {{0}};
static const struct kl_command list_command = {
    .name = "list",
    .summary = "modules and their variants: name, minimum compute capability, one line each",
    .opts = list_opts,
    .run = cmd_list,
};

static int cmd_list(int argc, char **argv)
{
    struct kl_optval opt[1];
    int n, rc = kl_args_parse(&list_command, argc, argv, opt, NULL, &n);
    if (rc >= 0) return rc;
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

static int cmd_verify(int argc, char **argv);
enum { VERIFY_REFERENCE, VERIFY_VARIANT, VERIFY_ALL };
static const struct kl_opt verify_opts[] = {
    [VERIFY_REFERENCE] = {"--reference", KL_OPT_FLAG, NULL, "the CPU reference only (runs anywhere)"},
    [VERIFY_VARIANT] = {"--variant", KL_OPT_VALUE, "NAME", "this variant only (not the reference)"},
    [VERIFY_ALL] = {"--all", KL_OPT_FLAG, NULL, "the reference and every variant, attempted even where they cannot run"},
    {0},
};
static const struct kl_command verify_command = {
    .name = "verify",
    .operands = "CASE_DIR...",
    .min_operands = 1,
    .max_operands = -1,
    .summary = "check golden cases; a directory of cases (golden/, golden/rmsnorm/) is searched",
    .details = "Default: the reference and every variant this machine can run. One line per case and\n"
               "implementation: PASS|FAIL|SKIP <module> <case> <impl> rel_l2=<x> max_abs=<y> [why]. A malformed\n"
               "case is one FAIL line naming the file. The case format: lab/CONTRACTS.md section 4.\n"
               "exit: 0 nothing failed, 1 a FAIL, 2 usage (a CASE_DIR that does not exist), 77 nothing could run\n",
    .opts = verify_opts,
    .run = cmd_verify,
};

static int cmd_verify(int argc, char **argv)
{
    struct kl_optval opt[3];
    const char **paths = malloc(sizeof *paths * (size_t)(argc + 1));
    KL_CHECK(paths, "out of memory");
    int npaths, rc = kl_args_parse(&verify_command, argc, argv, opt, paths, &npaths);
    if (rc >= 0) return free(paths), rc;
    if (opt[VERIFY_REFERENCE].set + opt[VERIFY_VARIANT].set + opt[VERIFY_ALL].set > 1)
        return free(paths), kl_usage_error(&verify_command, "--reference, --variant and --all exclude each other");
    enum { DEFAULT, REFERENCE, ONE, ALL } mode = opt[VERIFY_REFERENCE].set ? REFERENCE
                                                 : opt[VERIFY_VARIANT].set ? ONE
                                                 : opt[VERIFY_ALL].set     ? ALL
                                                                           : DEFAULT;
    const char *only = opt[VERIFY_VARIANT].value;
    if (only && !any_module_has(only))
        return free(paths), kl_usage_error(&verify_command, "--variant '%s': no module has such a variant (kernlab list shows them)",
                                           only);
    /* Every path exists before anything runs: a typo is a usage error naming it, not a FAIL line. */
    for (int i = 0; i < npaths; i++) {
        struct stat st;
        const bool found = stat(paths[i], &st) == 0;
        if (!found || !S_ISDIR(st.st_mode)) {
            rc = kl_usage_error(&verify_command, "CASE_DIR '%s': %s", paths[i], found ? "not a directory" : strerror(errno));
            return free(paths), rc;
        }
    }
    struct walk w = {0};
    for (int i = 0; i < npaths; i++) {
        /* The whole argument, however long: a copy cut to a fixed buffer could name
         * another case, which would then PASS in its place. */
        char *path = strdup(paths[i]);
        KL_CHECK(path, "out of memory");
        for (size_t k = strlen(path); k > 1 && path[k - 1] == '/'; k--) path[k - 1] = 0;
        collect_cases(path, true, &w);
        free(path);
    }
    free(paths);
    char **dirs = w.cases;
    int ndirs = w.n;
    free(w.seen);
    if (ndirs == 0) return kl_usage_error(&verify_command, "no case found under the CASE_DIRs given");

    char why[256];
    const int cc = kl_device_cc(why, sizeof why);
    int fails = 0, passes = 0, skips = 0, unrunnable = 0;
    char first_skip[sizeof ((struct kl_verdict *)0)->why] = "";
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
            if (v.status == KL_SKIP && !first_skip[0]) snprintf(first_skip, sizeof first_skip, "%s", v.why);
        }
        kl_case_close(&c);
        free(dirs[i]);
    }
    free(dirs);
    /* stdout first: with both sent to one file, the summary never lands inside a verdict line. */
    fflush(stdout);
    if (passes + fails == 0) {
        fprintf(stderr, "verify: nothing checked: %d skipped (%s)\n", skips + unrunnable,
                first_skip[0] ? first_skip : cc ? "needs a newer GPU" : why);
        return KL_EXIT_NOTHING_RUN;
    }
    fprintf(stderr, "verify: %d passed, %d failed, %d skipped", passes, fails, skips);
    if (unrunnable) fprintf(stderr, "; %d GPU variant runs not attempted (%s)", unrunnable, cc ? "needs a newer GPU" : why);
    fprintf(stderr, "\n");
    return fails ? KL_EXIT_FAIL : KL_EXIT_OK;
}

/* ---- check ---- */

static int cmd_check(int argc, char **argv);
enum { CHECK_VARIANT, CHECK_SEED };
static const struct kl_opt check_opts[] = {
    [CHECK_VARIANT] = {"--variant", KL_OPT_VALUE, "NAME", "this variant only (default: the reference part, then every variant)"},
    [CHECK_SEED] = {"--seed", KL_OPT_NUMBER, "N", "the random inputs' seed (default: the clock; printed first, for a replay)"},
    {0},
};
static const struct kl_command check_command = {
    .name = "check",
    .operands = "MODULE",
    .min_operands = 1,
    .max_operands = 1,
    .summary = "fresh random inputs and the edge-case catalogue, every variant against the reference",
    .details = "One line per problem, as verify. Without --variant the reference part comes first (the module's\n"
               "golden cases and the catalogue through the CPU reference). The last line says how many variant\n"
               "runs were judged, or \"nothing checked\" and why when no variant could run here.\n"
               "exit: 0 nothing failed, 1 a FAIL (or a module with no checker), 2 usage,\n"
               "      77 nothing checked (no variant could run here: no GPU, or one too old)\n",
    .opts = check_opts,
    .run = cmd_check,
};

static int cmd_check(int argc, char **argv)
{
    struct kl_optval opt[2];
    const char *module;
    int n, rc = kl_args_parse(&check_command, argc, argv, opt, &module, &n);
    if (rc >= 0) return rc;
    const uint64_t seed = opt[CHECK_SEED].set ? opt[CHECK_SEED].number : (uint64_t)time(NULL);
    const struct kl_module *m = kl_module_find(module);
    if (!m) return kl_usage_error(&check_command, "unknown module '%s' (kernlab list shows them)", module);
    const char *only = opt[CHECK_VARIANT].value;
    const struct kl_variant *v = NULL;
    if (only && !(v = kl_variant_find(module, only)))
        return kl_usage_error(&check_command, "--variant '%s': no such variant of %s", only, module);
    printf("seed %llu (replay with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    struct kl_check_tally t;
    kl_check_run(m, v, seed, stdout, &t);
    fflush(stdout); /* before the summary on stderr: one file holding both keeps every line whole */
    if (!t.judged && !t.failures) return fprintf(stderr, "check %s: nothing checked: %s\n", module, t.why), KL_EXIT_NOTHING_RUN;
    fprintf(stderr, "check %s: %d failure%s", module, t.failures, t.failures == 1 ? "" : "s");
    if (t.judged) fprintf(stderr, " in %d variant run%s (%d skipped)\n", t.judged, t.judged == 1 ? "" : "s", t.skipped);
    else fprintf(stderr, "; nothing checked: %s\n", t.why);
    return t.failures ? KL_EXIT_FAIL : KL_EXIT_OK;
}

/* ---- help and dispatch ---- */

static int cmd_help(int argc, char **argv);
static const struct kl_opt help_opts[] = {{0}};
static const struct kl_command help_command = {
    .name = "help",
    .operands = "[COMMAND]",
    .max_operands = 1,
    .summary = "this list, or one command's usage (the same as kernlab COMMAND --help)",
    .opts = help_opts,
    .run = cmd_help,
};

static const struct kl_command *const commands[] = {
    &list_command, &verify_command, &check_command, &kl_ceilings_command, &kl_bench_command,
    &kl_report_command, &kl_story_command, &kl_new_variant_command, &help_command,
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f)
{
    fprintf(f, "usage: kernlab COMMAND [ARGS]   (kernlab COMMAND --help: that command's options)\n");
    for (int i = 0; i < N_COMMANDS; i++) {
        fprintf(f, "  ");
        kl_args_synopsis(commands[i], f);
        fprintf(f, "\n      %s\n", commands[i]->summary);
    }
    fprintf(f, "exit: 0 success, 1 a failure, 2 a usage error, 77 nothing could run here (ctest's skip code).\n"
               "The contracts (case format, results, targets, exit codes): lab/CONTRACTS.md\n");
}

static const struct kl_command *find_command(const char *name)
{
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i]->name, name) == 0) return commands[i];
    return NULL;
}

static int cmd_help(int argc, char **argv)
{
    struct kl_optval opt[1];
    const char *name = NULL;
    int n, rc = kl_args_parse(&help_command, argc, argv, opt, &name, &n);
    if (rc >= 0) return rc;
    if (!name) return usage(stdout), KL_EXIT_OK;
    const struct kl_command *c = find_command(name);
    if (!c) return kl_usage_error(&help_command, "unknown command '%s'", name);
    kl_args_usage(c, stdout);
    return KL_EXIT_OK;
}

int main(int argc, char **argv)
{
    /* A rank process this binary started for a multi-GPU module (lab/core/ranks.h): not a command. */
    if (kl_rank_argv(argc, argv)) return kl_rank_main(argc - 2, argv + 2);
    /* Whole lines: stdout sent to a file with stderr never breaks a line in two. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return usage(stderr), KL_EXIT_USAGE;
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) return usage(stdout), KL_EXIT_OK;
    const struct kl_command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "kernlab: unknown command '%s'\n", name);
        return usage(stderr), KL_EXIT_USAGE;
    }
    return c->run(argc - 2, argv + 2);
}
