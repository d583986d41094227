/* `kernlab new-variant MODULE NAME`: a new variant file that builds, registers itself and is
 * tested at once. It starts as a copy of the module's v0 (a correct baseline to improve
 * on) with its own name, so the tests pass before the learner changes anything. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lab/core/registry.h"
#include "lab/kernlab.h"

/* The name becomes a file name (NAME.cu, and NAME.cu.o in the build), part of C identifiers
 * (kl_variant_desc_<module>_<NAME>, <function>_<NAME>) and a column of the guides' tables:
 * 64 characters say any idea (v12_tma_multicast_two_stage_pipeline is 36) and keep all of
 * these far from the 255-byte file-name limit. */
#define KL_VARIANT_NAME_MAX 64

static bool valid_name(const char *s)
{
    if (s[0] != 'v' || !isdigit((unsigned char)s[1])) return false;
    const char *p = s + 1;
    while (isdigit((unsigned char)*p)) p++;
    if (*p++ != '_' || !*p) return false;
    for (; *p; p++)
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_')) return false;
    return true;
}

int kl_cmd_new_variant(int argc, char **argv)
{
    if (argc != 2) return fprintf(stderr, "usage: kernlab new-variant MODULE NAME (e.g. rmsnorm v3_persistent)\n"), 2;
    const char *module = argv[0], *name = argv[1];
    const struct kl_module *m = kl_module_find(module);
    if (!m) return fprintf(stderr, "kernlab new-variant: unknown module '%s'\n", module), 2;
    if (strlen(name) > KL_VARIANT_NAME_MAX)
        return fprintf(stderr, "kernlab new-variant: NAME is %zu characters; at most %d\n", strlen(name),
                       KL_VARIANT_NAME_MAX), 2;
    if (!valid_name(name))
        return fprintf(stderr, "kernlab new-variant: NAME '%s' must look like vN_what_changed (lowercase)\n", name), 2;
    if (kl_variant_find(module, name))
        return fprintf(stderr, "kernlab new-variant: %s/%s exists already\n", module, name), 1;
    const struct kl_variant *base = kl_variant_at(module, 0, false);
    if (!base) return fprintf(stderr, "kernlab new-variant: %s has no variant to start from\n", module), 1;

    char src[1200], dst[1200];
    snprintf(src, sizeof src, "%s", base->file);
    const char *ext = strrchr(src, '.');
    snprintf(dst, sizeof dst, KL_SOURCE_DIR "/kernels/%s/%s%s", module, name, ext ? ext : ".cu");
    FILE *in = fopen(src, "r");
    if (!in) return fprintf(stderr, "kernlab new-variant: %s: %s\n", src, strerror(errno)), 1;
    struct stat st;
    if (stat(dst, &st) == 0) {
        fclose(in);
        return fprintf(stderr, "kernlab new-variant: %s exists already\n", dst), 1;
    }
    FILE *out = fopen(dst, "w");
    if (!out) {
        fclose(in);
        return fprintf(stderr, "kernlab new-variant: %s: %s\n", dst, strerror(errno)), 1;
    }
    fprintf(out,
            "/* %s: <what changed from the previous variant, and why it should be faster>.\n"
            " *\n"
            " * Started from %s by `kernlab new-variant`: it is correct as it stands. Change one idea,\n"
            " * then: cmake --build build && build/kernlab check %s --variant %s\n"
            " *       build/kernlab bench %s --variant %s\n"
            " * Work mapping: <who owns which rows/heads/pages>. Bound: <the bound it should hit>. */\n",
            name, base->name, module, name, module, name);
    /* Copy the base, renaming its registration and the function it registers (whole words:
     * a CPU variant's function may be non-static, so the copy must not define it again); the
     * base's own opening comment is skipped. */
    char line[4096], reg[128], fn[128] = "", fn_new[256] = "";
    snprintf(reg, sizeof reg, "KL_VARIANT(%s, %s,", module, base->name);
    bool in_header = true;
    long start = ftell(in);
    while (fgets(line, sizeof line, in)) /* first pass: the registered function's name */
        if (strstr(line, reg)) {
            const char *p = strstr(line, reg) + strlen(reg);
            while (*p == ' ') p++;
            size_t k = 0;
            while ((isalnum((unsigned char)p[k]) || p[k] == '_') && k + 1 < sizeof fn) k++;
            snprintf(fn, sizeof fn, "%.*s", (int)k, p);
            snprintf(fn_new, sizeof fn_new, "%s_%s", fn, name);
        }
    fseek(in, start, SEEK_SET);
    while (fgets(line, sizeof line, in)) {
        if (in_header) {
            if (strstr(line, "*/")) in_header = false;
            continue;
        }
        for (const char *p = line; *p;) {
            bool word_start = p == line || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
            size_t fl = strlen(fn);
            if (strncmp(p, reg, strlen(reg)) == 0) {
                fprintf(out, "KL_VARIANT(%s, %s,", module, name);
                p += strlen(reg);
            } else if (fl && word_start && strncmp(p, fn, fl) == 0 && !(isalnum((unsigned char)p[fl]) || p[fl] == '_')) {
                fputs(fn_new, out);
                p += fl;
            } else {
                fputc(*p++, out);
            }
        }
    }
    fclose(in);
    if (fclose(out) != 0) return fprintf(stderr, "kernlab new-variant: writing %s failed\n", dst), 1;
    printf("wrote %s\nnext: cmake --build build && build/kernlab check %s --variant %s\n", dst, module, name);
    return 0;
}
