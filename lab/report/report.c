/* `kernlab report [--results DIR] [--out DIR]`: the guides (lab/CONTRACTS.md section 8).
 *
 * Reads every DIR/<module>.jsonl and DIR/<device>/<module>.jsonl (results lines, section 7) and
 * the registry (modules, their guide texts and hooks, variants, their source files), and writes OUT/<module>.md,
 * OUT/README.md (the way in), OUT/environment.md and OUT/img/<module>-roofline.svg. Every number
 * comes from a results row, and every figure derived from one (GB/s, DRAM %, L2 hit rate, the
 * roof) from perf/figures.h; nothing depends on the clock or the machine the report runs on, so
 * the same inputs give byte-identical files.
 *
 * Inputs are read and checked before anything is written, and the files are written into a
 * folder beside OUT and renamed into place at the end: a failed run leaves OUT as it was.
 *
 * A registered variant that no results row measured is told as "not measured", and every line
 * about it carries the marker KL_UNMEASURED (or sits between KL_UNMEASURED_BEGIN and
 * KL_UNMEASURED_END): the tests that compare guides with committed ones leave those lines out, so
 * adding a variant never requires regenerating the guides. */

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/core/args.h"
#include "lab/core/check.h"
#include "lab/core/json_path.h"
#include "lab/report/internal.h"
#include "lab/report/report.h"
#include "lab/story/story.h"
#include "perf/bench.h"

/* mkdir -p: every missing folder on the way is made; one that cannot be is an error with
 * its errno (a regular file in the way reads "Not a directory"). */
static int kl_rep_make_dirs(const char *dir)
{
    char *p = strdup(dir);
    KL_CHECK(p, "out of memory");
    int rc = 0;
    for (char *s = p + (p[0] != 0); rc == 0; s++) {
        if (*s != '/' && *s != 0) continue;
        const char c = *s;
        *s = 0;
        struct stat st;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = -1;
        else if (stat(p, &st) != 0) rc = -1;
        else if (!S_ISDIR(st.st_mode)) rc = -1, errno = ENOTDIR;
        if (rc) fprintf(stderr, "kernlab report: cannot make folder %s: %s\n", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    free(p);
    return rc;
}


/* Every regular file of staging/sub moved to out/sub (sub "" or "img"), made first; -1 naming the
 * file at fault. */
static int move_files(const char *staging, const char *out, const char *sub)
{
    char from_dir[1200], to_dir[1200];
    snprintf(from_dir, sizeof from_dir, "%s%s%s", staging, sub[0] ? "/" : "", sub);
    snprintf(to_dir, sizeof to_dir, "%s%s%s", out, sub[0] ? "/" : "", sub);
    struct dirent **names;
    int n = scandir(from_dir, &names, NULL, alphasort), rc = n < 0 || kl_rep_make_dirs(to_dir) ? -1 : 0;
    for (int i = 0; i < n; i++) {
        char from[2400], to[2400];
        struct stat st;
        snprintf(from, sizeof from, "%s/%s", from_dir, names[i]->d_name);
        snprintf(to, sizeof to, "%s/%s", to_dir, names[i]->d_name);
        if (!rc && names[i]->d_name[0] != '.' && stat(from, &st) == 0 && S_ISREG(st.st_mode) && rename(from, to) != 0)
            rc = -1, fprintf(stderr, "kernlab report: cannot move %s to %s: %s\n", from, to, strerror(errno));
        free(names[i]);
    }
    if (n >= 0) free(names);
    return rc;
}

/* Removes the staging folder and what is left in it (after a failure: everything). */
static void remove_staging(const char *staging)
{
    const char *subs[] = {"/img", ""};
    for (int s = 0; s < 2; s++) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s%s", staging, subs[s]);
        struct dirent **names;
        int n = scandir(dir, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            char path[2400];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
            if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..") && strcmp(names[i]->d_name, "img"))
                unlink(path);
            free(names[i]);
        }
        if (n >= 0) free(names);
        rmdir(dir);
    }
}

enum { REPORT_RESULTS, REPORT_OUT };
static const struct kl_opt report_opts[] = {
    [REPORT_RESULTS] = {"--results", KL_OPT_VALUE, "DIR", "results to read: DIR/*.jsonl and DIR/<device>/*.jsonl (default reports/data)"},
    [REPORT_OUT] = {"--out", KL_OPT_VALUE, "DIR", "where the guides go (default reports)"},
    {0},
};
const struct kl_command kl_report_command = {
    .name = "report",
    .summary = "write the guides (DIR/<module>.md, README.md, environment.md, img/) from results",
    .details = "The results line: lab/CONTRACTS.md section 7; the guides: section 8.\n"
               "exit: 0, 1 a results file or a guide that could not be read or written, 2 usage\n",
    .opts = report_opts,
    .run = kl_cmd_report,
};

int kl_cmd_report(int argc, char **argv)
{
    struct kl_optval opt[2];
    int n, rc = kl_args_parse(&kl_report_command, argc, argv, opt, NULL, &n);
    if (rc >= 0) return rc;
    const char *results = opt[REPORT_RESULTS].set ? opt[REPORT_RESULTS].value : "reports/data";
    const char *out = opt[REPORT_OUT].set ? opt[REPORT_OUT].value : "reports";
    /* Everything is read and checked before anything is written: a mistyped --results leaves
     * --out as it was. */
    struct stat st;
    if (stat(results, &st) != 0 || !S_ISDIR(st.st_mode))
        return fprintf(stderr, "kernlab report: --results %s: %s\n", results,
                       stat(results, &st) != 0 ? strerror(errno) : "not a folder"),
               2;
    /* A binary built before the last edit of a guide text or a variant's comment would write the old text. */
    char *stale_list = NULL;
    size_t stale_len = 0;
    FILE *stale_out = open_memstream(&stale_list, &stale_len);
    const int stale = stale_out ? kl_rep_check_built(stale_out) : 0;
    if (stale_out) fclose(stale_out);
    if (stale) {
        fprintf(stderr,
                "kernlab report: this kernlab was built from other text than the source tree holds now, so its "
                "guides would quote the old text:\n%srebuild it (cmake --build build --target kernlab): nothing "
                "written\n",
                stale_list);
        free(stale_list);
        return 1;
    }
    free(stale_list);
    static struct kl_guide mods[32];
    memset(mods, 0, sizeof mods);
    int nm = 0, status = 0;
    /* A file that cannot be read is skipped (said on stderr) and the rest still written: exit 1. */
    if (kl_rep_load(results, mods, &nm)) status = 1;
    cJSON *story = NULL;
    const int story_found = kl_story_load(results, &story);
    if (story_found < 0) status = 1;
    if (nm == 0 && story_found <= 0) {
        fprintf(stderr,
                "kernlab report: no results in %s (neither <module>.jsonl, <device>/<module>.jsonl nor a valid "
                "story.json): nothing written\n",
                results);
        return 1;
    }
    kl_rep_prepare(mods, nm);
    struct kl_targets t90 = {0}, t80 = {0};
    struct kl_err err;
    kl_targets_load(&t90, KL_SOURCE_DIR "/perf/targets", 90, &err);
    kl_targets_load(&t80, KL_SOURCE_DIR "/perf/targets", 80, &err);
    kl_targets_load(&kl_rep_cpu_targets, KL_SOURCE_DIR "/perf/targets", 0, &err);
    /* Written into a folder beside the guides, then renamed into place: all or nothing. */
    char staging[1200], img[1300];
    bool wrote = false;
    if (snprintf(staging, sizeof staging, "%s/.report-XXXXXX", out) >= (int)sizeof staging) {
        fprintf(stderr, "kernlab report: --out %s: path too long\n", out);
    } else if (kl_rep_make_dirs(out) || !mkdtemp(staging)) {
        fprintf(stderr, "kernlab report: cannot write into %s: %s\n", out, strerror(errno));
    } else {
        snprintf(img, sizeof img, "%s/img", staging);
        int bad = kl_rep_make_dirs(img);
        for (int k = 0; k < nm && !bad; k++)
            bad = kl_rep_write_guide(staging, &mods[k], &t90, &t80);
        if (!bad && story) {
            const char *from = NULL;
            bool same_run = false;
            const cJSON *ceil = kl_rep_device_ceilings(mods, nm, kl_json_str(story, "device.name", ""),
                                                       kl_json_str(story, "commit", ""), &from, &same_run);
            char words[160];
            snprintf(words, sizeof words, same_run ? "the `%s` results of the story's commit" : "the `%s` run, environment.md",
                     from ? from : "?");
            bad = kl_story_write(story, ceil, ceil ? words : NULL, staging);
        }
        if (!bad) bad = kl_rep_write_index(staging, mods, nm, &t90, story != NULL) || kl_rep_write_environment(staging, mods, nm);
        if (!bad) bad = move_files(staging, out, "img") || move_files(staging, out, "");
        wrote = !bad;
        remove_staging(staging);
    }
    if (wrote) {
        for (int k = 0; k < nm; k++)
            printf("wrote %s/%s.md\n", out, mods[k].name);
        if (story) printf("wrote %s/story.md, %s/story-trace.json\n", out, out);
        printf("wrote %s/README.md, %s/environment.md\n", out, out);
    } else {
        status = 1;
    }
    for (int k = 0; k < nm; k++) {
        for (int j = 0; j < mods[k].rows.n; j++) cJSON_Delete(mods[k].rows.r[j]);
        free(mods[k].rows.r), free(mods[k].rows.file);
    }
    cJSON_Delete(story);
    kl_targets_free(&t90), kl_targets_free(&t80), kl_targets_free(&kl_rep_cpu_targets);
    return status;
}
