/* `kernlab new-variant MODULE [NAME] [--from VARIANT]`: a new variant file that builds, registers
 * itself and is tested at once (lab/CONTRACTS.md section 3).
 *
 * It is a copy of a working variant (by default the module's gated one, the best the targets
 * name) in which everything that carries the old name is renamed, so the copy is a variant of its
 * own from its first build:
 *   (a) the old name itself (v10_pingpong -> v11_my_idea) wherever it stands: the KL_VARIANT line,
 *       error messages, comments;
 *   (b) the old number as a part of a name (prefill_v10 -> prefill_v11, KL_V2_VPT -> KL_V4_VPT):
 *       kernel names stay unique in profiles, traces and the emulator;
 *   (c) functions the file defines with external linkage (a C variant's entry points):
 *       kl_radix_cmp_simd -> kl_radix_cmp_simd_v2, so the copy links beside the original.
 * A name that one of the file's own headers declares is shared, never renamed; #include lines are
 * copied as they are. The opening comment becomes a TODO that says whose copy this is, and the
 * summary says the same, until the learner writes their own. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/core/check.h"
#include "lab/core/registry.h"
#include "lab/core/scaffold.h"
#include "perf/bench.h"

/* The name becomes a file name (NAME.cu, and NAME.cu.o in the build), part of C identifiers
 * (kl_variant_desc_<module>_<NAME>) and a column of the guides' tables: 64 characters say any
 * idea (v12_tma_multicast_two_stage_pipeline is 36) and keep all of these far from the 255-byte
 * file-name limit. */
#define KL_VARIANT_NAME_MAX 64
/* The largest variant file read: the biggest in the tree is a few tens of KB. */
#define KL_SOURCE_MAX (4 << 20)

/* ---- a growable string ---- */

struct buf {
    char *s;
    size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        KL_CHECK(b->s, "out of memory");
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void putf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct buf *b, const char *fmt, ...)
{
    char tmp[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The whole file, or NULL (errno set). */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    struct buf b = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.n < KL_SOURCE_MAX) put(&b, chunk, n);
    const bool bad = ferror(f) || b.n >= KL_SOURCE_MAX;
    fclose(f);
    if (bad) {
        free(b.s);
        if (b.n >= KL_SOURCE_MAX) errno = EFBIG;
        return NULL;
    }
    if (!b.s) put(&b, "", 0);
    return b.s;
}

/* ---- a C/C++ lexer, just enough to tell code from comments, strings and directives ---- */

enum tok_kind {
    T_SPACE,   /* whitespace, newlines included */
    T_COMMENT, /* a comment, either kind */
    T_STRING,  /* a string or character literal */
    T_PP,      /* a preprocessor line (continuations included) other than #include */
    T_INCLUDE, /* an #include line: copied untouched */
    T_IDENT,   /* an identifier or keyword */
    T_OTHER,   /* a number or one punctuation character */
};

struct tok {
    enum tok_kind kind;
    const char *s;
    size_t n;
};

struct toks {
    struct tok *t;
    int n, cap;
};

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

static void lex(const char *s, struct toks *out)
{
    bool line_start = true;
    while (*s) {
        const char *p = s;
        enum tok_kind k;
        if (isspace((unsigned char)*p)) {
            while (isspace((unsigned char)*p)) line_start |= *p++ == '\n';
            k = T_SPACE;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') p++;
            k = T_COMMENT;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
            k = T_COMMENT;
        } else if (*p == '"' || *p == '\'') {
            const char q = *p++;
            while (*p && *p != q && *p != '\n') p += p[0] == '\\' && p[1] ? 2 : 1;
            if (*p == q) p++;
            k = T_STRING;
        } else if (*p == '#' && line_start) {
            const char *d = p + 1;
            while (*d == ' ' || *d == '\t') d++;
            k = strncmp(d, "include", 7) == 0 ? T_INCLUDE : T_PP;
            while (*p && !(*p == '\n' && p[-1] != '\\')) p++;
        } else if (ident_char(*p)) {
            k = isdigit((unsigned char)*p) ? T_OTHER : T_IDENT; /* a number: 0x1F, 1e-5f are no names */
            while (ident_char(*p) || (k == T_OTHER && *p == '.')) p++;
        } else {
            p++;
            k = T_OTHER;
        }
        if (k != T_SPACE) line_start = false;
        if (out->n == out->cap) {
            out->cap = out->cap * 2 + 256;
            out->t = realloc(out->t, sizeof *out->t * (size_t)out->cap);
            KL_CHECK(out->t, "out of memory");
        }
        out->t[out->n++] = (struct tok){k, s, (size_t)(p - s)};
        s = p;
    }
}

/* ---- names ---- */

/* A set of words (names, paths), as one string "\nw1\nw2\n" searched for "\nword\n". */
static bool has_word(const struct buf *set, const char *w, size_t n)
{
    if (!set->s) return false;
    char small[256], *needle = n + 3 <= sizeof small ? small : malloc(n + 3);
    KL_CHECK(needle, "out of memory");
    needle[0] = '\n';
    memcpy(needle + 1, w, n);
    needle[n + 1] = '\n', needle[n + 2] = 0;
    const bool found = strstr(set->s, needle) != NULL;
    if (needle != small) free(needle);
    return found;
}

static void add_word(struct buf *set, const char *w, size_t n)
{
    if (has_word(set, w, n)) return;
    if (!set->n) put(set, "\n", 1);
    put(set, w, n);
    put(set, "\n", 1);
}

/* Every identifier of the code of `path` and of the project headers it includes, recursively:
 * the names the variant shares with others, never renamed. */
static void header_names(const char *root, const char *path, struct buf *names, struct buf *seen, int depth)
{
    if (depth > 16 || has_word(seen, path, strlen(path))) return;
    add_word(seen, path, strlen(path));
    char *text = read_file(path);
    if (!text) return;
    struct toks t = {0};
    lex(text, &t);
    for (int i = 0; i < t.n; i++) {
        const struct tok *k = &t.t[i];
        if (depth > 0 && k->kind == T_IDENT) add_word(names, k->s, k->n);
        if (depth > 0 && k->kind == T_PP)
            for (size_t j = 0; j < k->n;) {
                size_t e = j;
                while (e < k->n && ident_char(k->s[e])) e++;
                if (e > j && !isdigit((unsigned char)k->s[j])) add_word(names, k->s + j, e - j);
                j = e > j ? e : j + 1;
            }
        if (k->kind != T_INCLUDE) continue;
        const char *q = memchr(k->s, '"', k->n);
        const char *q2 = q ? memchr(q + 1, '"', k->n - (size_t)(q + 1 - k->s)) : NULL;
        if (!q2) continue; /* <system> headers are nobody's variant */
        char inc[1200], dir[1024];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        /* the project's includes are relative to the source root, a few to the file itself */
        snprintf(inc, sizeof inc, "%s/%.*s", root, (int)(q2 - q - 1), q + 1);
        if (access(inc, R_OK) != 0) snprintf(inc, sizeof inc, "%s/%.*s", dir, (int)(q2 - q - 1), q + 1);
        header_names(root, inc, names, seen, depth + 1);
    }
    free(t.t);
    free(text);
}

/* Functions the file defines with external linkage: at file scope (or in a named namespace or
 * an extern "C" block), without `static`, outside any anonymous namespace. */
static void external_definitions(const struct toks *t, struct buf *defs)
{
    enum { FILE_SCOPE, ANON, OTHER } stack[256];
    int depth = 0, pending = OTHER;
    bool is_static = false;
    /* the significant tokens: code only */
    int *sig = malloc(sizeof *sig * (size_t)(t->n + 1)), ns = 0;
    KL_CHECK(sig, "out of memory");
    for (int i = 0; i < t->n; i++)
        if (t->t[i].kind == T_IDENT || t->t[i].kind == T_OTHER || t->t[i].kind == T_STRING) sig[ns++] = i;
    for (int j = 0; j < ns; j++) {
        const struct tok *k = &t->t[sig[j]];
        const bool external = depth == 0 || stack[depth - 1] == FILE_SCOPE;
        if (k->kind == T_OTHER && k->n == 1 && k->s[0] == '{') {
            if (depth < 256) stack[depth] = pending;
            depth++, pending = OTHER, is_static = false;
        } else if (k->kind == T_OTHER && k->n == 1 && k->s[0] == '}') {
            depth -= depth > 0, is_static = false;
        } else if (k->kind == T_OTHER && k->n == 1 && k->s[0] == ';') {
            is_static = false, pending = OTHER;
        } else if (k->kind == T_IDENT && k->n == 9 && strncmp(k->s, "namespace", 9) == 0) {
            /* namespace { : anonymous; namespace name { : as the file scope */
            pending = j + 1 < ns && t->t[sig[j + 1]].s[0] == '{' ? ANON : FILE_SCOPE;
        } else if (k->kind == T_IDENT && k->n == 6 && strncmp(k->s, "extern", 6) == 0) {
            pending = FILE_SCOPE; /* extern "C" { */
        } else if (k->kind == T_IDENT && k->n == 6 && strncmp(k->s, "static", 6) == 0) {
            is_static = true;
        } else if (k->kind == T_IDENT && external && !is_static && j + 1 < ns && t->t[sig[j + 1]].s[0] == '(') {
            int d = 0, e = j + 1;
            for (; e < ns; e++) {
                const char c = t->t[sig[e]].kind == T_OTHER ? t->t[sig[e]].s[0] : 0;
                if (c == '(') d++;
                if (c == ')' && --d == 0) break;
            }
            if (e + 1 < ns && t->t[sig[e + 1]].s[0] == '{' && t->t[sig[e + 1]].kind == T_OTHER)
                add_word(defs, k->s, k->n);
        }
    }
    free(sig);
}

/* What word becomes in the copy, written to out; false when it stays as it is.
 *   old, new: "v10_pingpong", "v11_my_idea"; num_old, num_new: 10, 11
 *   shared: names of the included headers (code words only); defs: external definitions (ditto) */
struct renaming {
    const char *old_name, *new_name;
    unsigned long num_old, num_new;
    const struct buf *shared, *defs;
};

static bool rename_word(const struct renaming *r, const char *w, size_t n, bool code, struct buf *out)
{
    const bool defined_here = code && has_word(r->defs, w, n);
    if (code && !defined_here && has_word(r->shared, w, n)) return false;
    struct buf o = {0};
    const size_t on = strlen(r->old_name);
    char vold[32], vnew[32];
    snprintf(vold, sizeof vold, "%lu", r->num_old);
    snprintf(vnew, sizeof vnew, "%lu", r->num_new);
    bool changed = false;
    /* '_'-separated parts: (a) the old name as a run of whole parts, (b) "vN" / "VN" as one part */
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && w[e] != '_') e++;
        if (on <= n - i && strncmp(w + i, r->old_name, on) == 0 && (i + on == n || w[i + on] == '_')) {
            put(&o, r->new_name, strlen(r->new_name));
            i += on, changed = true;
        } else if (e > i && (w[i] == 'v' || w[i] == 'V') && e - i - 1 == strlen(vold) &&
                   strncmp(w + i + 1, vold, e - i - 1) == 0) {
            put(&o, &w[i], 1);
            put(&o, vnew, strlen(vnew));
            i = e, changed = true;
        } else {
            put(&o, w + i, e - i);
            i = e;
        }
        if (i < n) put(&o, "_", 1), i++; /* the separator */
    }
    if (!changed && defined_here) { /* (c) */
        o.n = 0;
        putf(&o, "%.*s_v%s", (int)n, w, vnew);
        changed = true;
    }
    if (changed) put(out, o.s, o.n);
    free(o.s);
    return changed;
}

/* Copies text, renaming every word of it by r; code says whether these are names of code. */
static void rename_text(const struct renaming *r, const char *s, size_t n, bool code, struct buf *out)
{
    for (size_t i = 0; i < n;) {
        size_t e = i + 1;
        if (ident_char(s[i])) /* a word; one that starts with a digit is a number (1e5, 0x2f) */
            while (e < n && ident_char(s[e])) e++;
        if (isdigit((unsigned char)s[i]) || !ident_char(s[i]) || !rename_word(r, s + i, e - i, code, out))
            put(out, s + i, e - i);
        i = e;
    }
}

/* Whether text holds KL_VARIANT(module, name, ...), spaced any way. */
static bool registers(const char *text, const char *module, const char *name)
{
    for (const char *p = text; (p = strstr(p, "KL_VARIANT")); p++) {
        const char *q = p + 10;
        const char *want[] = {"(", module, ",", name, ","};
        int k = 0;
        for (; k < 5; k++) {
            while (isspace((unsigned char)*q)) q++;
            if (strncmp(q, want[k], strlen(want[k])) != 0) break;
            q += strlen(want[k]);
        }
        if (k == 5) return true;
    }
    return false;
}

/* text as comment lines " * ..." of at most width characters, broken at spaces. */
static void put_wrapped(struct buf *out, const char *text, int width)
{
    while (*text) {
        int n = (int)strlen(text);
        if (n > width - 3) {
            n = width - 3;
            while (n > 0 && text[n] != ' ') n--;
            if (n == 0) n = (int)strcspn(text, " "); /* one word longer than the line */
        }
        putf(out, " * %.*s\n", n, text);
        text += n;
        text += *text == ' ';
    }
}

/* ---- the command ---- */

static bool valid_what(const char *s)
{
    if (!*s || !(islower((unsigned char)*s) || *s == '_')) return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return false;
    return true;
}

/* "v12_x" -> 12 (true); anything else false. */
static bool name_number(const char *name, unsigned long *n)
{
    if (name[0] != 'v' || !isdigit((unsigned char)name[1])) return false;
    char *end;
    *n = strtoul(name + 1, &end, 10);
    return *end == '_';
}

enum { NV_FROM, NV_SOURCE_DIR };
static const struct kl_opt new_variant_opts[] = {
    [NV_FROM] = {"--from", KL_OPT_VALUE, "VARIANT", "the variant to copy (default: the module's gated one, perf/targets)"},
    [NV_SOURCE_DIR] = {"--source-dir", KL_OPT_VALUE, "DIR",
                       "the source tree to write into (default: the one this kernlab was built from)"},
    {0},
};
const struct kl_command kl_new_variant_command = {
    .name = "new-variant",
    .operands = "MODULE [NAME]",
    .min_operands = 1,
    .max_operands = 2,
    .summary = "copy a variant into kernels/MODULE/vN_NAME.cu, renamed: a variant of its own, correct as it stands",
    .details = "NAME is what changes, lowercase (my_idea): the next free number is put in front (v11_my_idea);\n"
               "a NAME with a number (v11_my_idea) must use a free one. Default NAME: my_idea. The copy's kernel\n"
               "names, strings, registration and summary carry the new name; its opening comment is a TODO.\n"
               "The file is never overwritten. Then: cmake --build build, kernlab check, ctest, kernlab bench.\n"
               "exit: 0 written, 1 refused (a number or file taken) or not written, 2 usage\n",
    .opts = new_variant_opts,
    .run = kl_cmd_new_variant,
};

static int refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kernlab new-variant: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return KL_EXIT_FAIL;
}

/* The variant file for name in dir (.cu, or .c for CPU modules): its path in path, or false. */
static bool variant_file(const char *dir, const char *name, char *path, size_t len)
{
    static const char *const exts[] = {".cu", ".c"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, len, "%s/%s%s", dir, name, exts[i]);
        if (access(path, R_OK) == 0) return true;
    }
    return false;
}

/* The highest variant number among the module's files in dir (a file written but not yet built has
 * taken its number; one deleted since the last build has given it back, whatever the binary still
 * registers); the variant holding `want`, if any. */
static unsigned long highest_number(const char *dir, unsigned long want, char *holder, size_t len)
{
    unsigned long top = 0, n;
    holder[0] = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *dot = strrchr(e->d_name, '.');
        if (!dot || (strcmp(dot, ".cu") != 0 && strcmp(dot, ".c") != 0) || !name_number(e->d_name, &n)) continue;
        if (n > top) top = n;
        if (n == want && !holder[0]) snprintf(holder, len, "%.*s", (int)(dot - e->d_name), e->d_name);
    }
    if (d) closedir(d);
    return top;
}

int kl_cmd_new_variant(int argc, char **argv)
{
    const struct kl_command *cmd = &kl_new_variant_command;
    struct kl_optval opt[2];
    const char *operands[2] = {NULL, NULL};
    int nops, rc = kl_args_parse(cmd, argc, argv, opt, operands, &nops);
    if (rc >= 0) return rc;
    const char *module = operands[0], *name = nops > 1 ? operands[1] : "my_idea";
    const char *root = opt[NV_SOURCE_DIR].set ? opt[NV_SOURCE_DIR].value : KL_SOURCE_DIR;
    const struct kl_module *m = kl_module_find(module);
    if (!m) return kl_usage_error(cmd, "unknown module '%s' (kernlab list shows them)", module);

    /* NAME: what changed, with or without a number in front. */
    unsigned long num = 0;
    const bool numbered = name_number(name, &num);
    const char *what = numbered ? strchr(name, '_') + 1 : name;
    if (strlen(name) > KL_VARIANT_NAME_MAX)
        return kl_usage_error(cmd, "NAME is %zu characters; at most %d", strlen(name), KL_VARIANT_NAME_MAX);
    if (!valid_what(what) || (numbered && name[1] == '0' && num != 0))
        return kl_usage_error(cmd,
                              "NAME '%s': lowercase letters, digits and '_', starting with a letter (a C identifier "
                              "in the project's style): my_idea, or v11_my_idea with a number",
                              name);
    if (name[0] == 'v' && isdigit((unsigned char)name[1]) && !numbered)
        return kl_usage_error(cmd, "NAME '%s': say what changes after the number, e.g. %s_my_idea", name, name);

    char dir[1100];
    snprintf(dir, sizeof dir, "%s/kernels/%s", root, module);
    struct stat st;
    const bool found = stat(dir, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) return refuse("%s: %s", dir, found ? "not a directory" : strerror(errno));

    /* The variant copied: --from, or the gated one (the CPU's targets for CPU modules; sm_90's for
     * GPU modules, whatever this machine has: the best variant to start from even where it cannot run). */
    struct kl_err err = {{0}};
    const char *from = opt[NV_FROM].value;
    if (!from) {
        const struct kl_variant *g = kl_gated_variant(module, m->min_cc == 0 ? 0 : 90, &err);
        if (!g) return refuse("no variant to start from: %s; name one with --from (kernlab list shows them)", err.msg);
        from = g->name;
    }
    char src[1200];
    if (!variant_file(dir, from, src, sizeof src))
        return kl_usage_error(cmd, "--from '%s': no %s/%s.cu or .c (kernlab list shows the variants)", from, dir, from);
    unsigned long from_num = 0;
    if (!name_number(from, &from_num)) return refuse("--from '%s': not a numbered variant (vN_what)", from);

    /* The number: the one given, if free; else the next after the highest. */
    char holder[256], full[KL_VARIANT_NAME_MAX + 32];
    const unsigned long next = highest_number(dir, numbered ? num : (unsigned long)-1, holder, sizeof holder) + 1;
    if (numbered && holder[0])
        return refuse("v%lu is taken (%s/%s); the next free number is v%lu: kernlab new-variant %s v%lu_%s", num, module,
                      holder, next, module, next, what);
    snprintf(full, sizeof full, "v%lu_%s", numbered ? num : next, what);
    if (strlen(full) > KL_VARIANT_NAME_MAX)
        return kl_usage_error(cmd, "NAME '%s' with its number is %zu characters; at most %d", full, strlen(full),
                              KL_VARIANT_NAME_MAX);

    char *text = read_file(src);
    if (!text) return refuse("%s: %s", src, strerror(errno));
    const char *ext = strrchr(src, '.');
    char dst[1300];
    snprintf(dst, sizeof dst, "%s/%s%s", dir, full, ext);

    /* The copy: a new opening comment, then the body renamed. */
    struct buf names = {0}, seen = {0}, defs = {0}, out = {0};
    header_names(root, src, &names, &seen, 0);
    struct toks t = {0};
    const char *body = text;
    if (strncmp(body, "/*", 2) == 0 && strstr(body, "*/")) { /* the old opening comment goes */
        body = strstr(body, "*/") + 2;
        body += *body == '\n';
    }
    lex(body, &t);
    external_definitions(&t, &defs);
    const struct renaming r = {from, full, from_num, numbered ? num : next, &names, &defs};
    putf(&out, "/* %s: TODO: what changed from %s, and why it should be faster.\n *\n", full, from);
    char todo[1024];
    snprintf(todo, sizeof todo,
             "TODO: this file is a copy of %s (kernels/%s/%s%s), written by `kernlab new-variant` with its "
             "kernels, strings and registration renamed. It is correct as it stands, and %s's opening comment "
             "explains the code as it is. Change one idea, then replace this comment: what changed and why, how "
             "work maps to threads, the bound it should hit.",
             from, module, from, ext, from);
    put_wrapped(&out, todo, 100);
    putf(&out, " * Run alone: build/kernlab bench %s --variant %s */\n", module, full);
    bool in_variant = false, summary_next = false, summary_done = false;
    for (int i = 0; i < t.n; i++) {
        const struct tok *k = &t.t[i];
        if (k->kind == T_IDENT && k->n == 10 && strncmp(k->s, "KL_VARIANT", 10) == 0) in_variant = true;
        if (in_variant && k->kind == T_IDENT && k->n == 7 && strncmp(k->s, "summary", 7) == 0) summary_next = true;
        if (summary_next && k->kind == T_STRING) { /* the summary's literals (one or several) become one */
            if (!summary_done) putf(&out, "\"a copy of %s, to be edited (kernlab new-variant)\"", from);
            summary_done = true;
            while (i + 2 < t.n && t.t[i + 1].kind == T_SPACE && t.t[i + 2].kind == T_STRING) i += 2;
            summary_next = false;
            continue;
        }
        switch (k->kind) {
        case T_INCLUDE:
        case T_SPACE:
        case T_OTHER: put(&out, k->s, k->n); break;
        case T_COMMENT:
        case T_STRING: rename_text(&r, k->s, k->n, false, &out); break;
        case T_PP:
        case T_IDENT: rename_text(&r, k->s, k->n, true, &out); break;
        }
    }
    free(t.t), free(text), free(names.s), free(seen.s), free(defs.s);

    /* The copy must register itself under its new name, or it is no variant at all. */
    if (!registers(out.s, module, full) || !summary_done) {
        free(out.s);
        return refuse("%s has no KL_VARIANT(%s, %s, ..., .summary = \"...\") line to rename: nothing written", src,
                      module, from);
    }

    /* O_EXCL: never overwrite, even a file that appeared since the check above. */
    const int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0) {
        free(out.s);
        if (errno == EEXIST) return refuse("%s exists already: nothing written", dst);
        return refuse("%s: %s", dst, strerror(errno));
    }
    const bool written = write(fd, out.s, out.n) == (ssize_t)out.n;
    free(out.s);
    if (close(fd) != 0 || !written) {
        unlink(dst);
        return refuse("writing %s failed: nothing written", dst);
    }
    printf("wrote %s: a copy of %s/%s, renamed %s\n"
           "next: build it, check it, test the module, time it:\n"
           "  cmake --build build\n"
           "  build/kernlab check %s --variant %s\n"
           "  ctest --test-dir build -R %s\n"
           "  build/kernlab bench %s --variant %s\n",
           dst, module, from, full, module, full, module, module, full);
    return KL_EXIT_OK;
}
