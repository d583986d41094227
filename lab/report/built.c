/* Whether this kernlab was built from the sources its guides quote as they are now: the guide texts
 * (embed.cmake compiles lab/<module>/guide/<section>.md in) and each variant file's opening comment
 * and kernel line (tools/variant_notes.c). A binary built before an edit to one of them writes the
 * old text, and a check of reports/ run with the same binary agrees with it, so `kernlab report`
 * refuses to write until it is rebuilt. The tree is KL_SOURCE_DIR, or KL_REPORT_SOURCE_TREE where
 * set (the tests point it at an edited copy); a binary run where no tree is skips the check. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lab/report/internal.h"
#include "lab/report/variant_source.h"

extern const struct kl_guide_text *__start_kl_guide_texts[] __attribute__((weak));
extern const struct kl_guide_text *__stop_kl_guide_texts[] __attribute__((weak));
extern const struct kl_variant_note *__start_kl_variant_notes[] __attribute__((weak));
extern const struct kl_variant_note *__stop_kl_variant_notes[] __attribute__((weak));

/* The whole file, less one final newline (as embed.cmake takes it); NULL when it cannot be read. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *s = malloc(cap);
    while (s && (got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        if ((n += got) + 1 < cap) continue;
        char *more = realloc(s, cap *= 2);
        if (!more) free(s);
        s = more;
    }
    fclose(f);
    if (!s) return NULL;
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    return s;
}

static bool built_with_note(const char *rel)
{
    for (const struct kl_variant_note **p = __start_kl_variant_notes; p < __stop_kl_variant_notes; p++)
        if (strcmp((*p)->file, rel) == 0) return true;
    return false;
}

/* Each file of the tree matching pattern (relative to root) that this binary has no copy of. */
static int unbuilt(const char *root, const char *pattern, bool guide, FILE *err)
{
    char full[1200];
    snprintf(full, sizeof full, "%s/%s", root, pattern);
    glob_t g;
    int stale = 0;
    if (glob(full, 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *rel = g.gl_pathv[i] + strlen(root) + 1;
        bool known;
        if (guide) { /* lab/<module>/guide/<section>.md */
            char module[256], section[256];
            known = sscanf(rel, "lab/%255[^/]/guide/%255[^.].md", module, section) == 2 &&
                    kl_guide_text(module, section) != NULL;
        } else {
            known = built_with_note(rel);
        }
        if (!known) fprintf(err, "  %s: not in this build\n", rel), stale++;
    }
    globfree(&g);
    return stale;
}

int kl_rep_check_built(FILE *err)
{
    const char *root = getenv("KL_REPORT_SOURCE_TREE");
    if (!root || !*root) root = KL_SOURCE_DIR;
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/lab", root);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    int stale = 0;
    for (const struct kl_guide_text **p = __start_kl_guide_texts; p < __stop_kl_guide_texts; p++) {
        snprintf(path, sizeof path, "%s/lab/%s/guide/%s.md", root, (*p)->module, (*p)->section);
        char *now = read_text(path);
        if (!now || strcmp(now, (*p)->text) != 0)
            fprintf(err, "  lab/%s/guide/%s.md: %s\n", (*p)->module, (*p)->section,
                    now ? "edited since the build" : "no longer in the tree"),
                stale++;
        free(now);
    }
    static char comment[KL_NOTE_MAX];
    for (const struct kl_variant_note **p = __start_kl_variant_notes; p < __stop_kl_variant_notes; p++) {
        snprintf(path, sizeof path, "%s/%s", root, (*p)->file);
        const int line = kl_variant_source_read(path, comment, sizeof comment);
        if (stat(path, &st) != 0) fprintf(err, "  %s: no longer in the tree\n", (*p)->file), stale++;
        else if (line != (*p)->kernel_line || strcmp(comment, (*p)->comment) != 0)
            fprintf(err, "  %s: its opening comment or kernel line edited since the build\n", (*p)->file), stale++;
    }
    stale += unbuilt(root, "lab/*/guide/*.md", true, err);
    stale += unbuilt(root, "kernels/*/v*.cu", false, err) + unbuilt(root, "kernels/*/v*.c", false, err);
    return stale;
}
