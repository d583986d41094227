/* radix tests (suite radix, all CPU). Parameterized over variant INDICES (pointers as
 * Criterion parameters crash its workers); each test logs the variant it runs.
 *
 * - the goldens through the reference, every variant, and every mutant (which must fail);
 * - malformed traces, each failing with a message that names the file and the line;
 * - property tests: seeded random op sequences (thousands of ops, pages 1 and 4), the tree
 *   and the reference compared after EVERY op: results, sizes, and a digest of the whole tree
 *   (every node's path, lock count, stamp and stamp order), plus the tree's invariants;
 * - the compare paths (scalar, SSE2, AVX2) at every length and misalignment;
 * - memory: every byte the tree holds is given back by evict (the valgrind/ASan runs of this
 *   binary, ctest radix_leaks, check that nothing leaks at all). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/core/golden.h"
#include "lab/core/guide.h"
#include "lab/core/tensor.h"
#include "lab/core/testing.h"
#include "lab/radix/radix.h"
#include "lab/radix/trace.h"

static const struct kl_variant *variant(int i, bool mutants)
{
    return kl_variant_at("radix", i, mutants);
}

/* Indices (into the list that includes mutants) of the variants, or of the mutants. */
static int variant_idx[64], mutant_idx[64];

static struct criterion_test_params variant_params(bool mutants)
{
    int n = kl_variant_count("radix", true), m = 0;
    int *idx = mutants ? mutant_idx : variant_idx;
    for (int i = 0; i < n && m < 64; i++)
        if (variant(i, true)->mutant == (int)mutants) idx[m++] = i;
    return cr_make_param_array(int, idx, (size_t)m);
}

/* ---- goldens ---- */

Test(radix, reference_replays_every_golden_trace)
{
    int failures = kl_test_goldens("radix", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/radix");
    cr_assert_eq(failures, 0, "%d golden traces failed on the reference (lines above)", failures);
}

ParameterizedTestParameters(radix, every_variant_replays_the_goldens)
{
    return variant_params(false);
}

ParameterizedTest(int *i, radix, every_variant_replays_the_goldens)
{
    const struct kl_variant *v = variant(*i, true);
    cr_log_info("variant %s", v->name);
    int failures = kl_test_goldens("radix", v, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/radix");
    cr_assert_eq(failures, 0, "%s: %d golden traces failed (lines above)", v->name, failures);
}

ParameterizedTestParameters(radix, every_mutant_is_flagged)
{
    return variant_params(true);
}

ParameterizedTest(int *i, radix, every_mutant_is_flagged)
{
    const struct kl_variant *v = variant(*i, true);
    cr_log_info("mutant %s", v->name);
    FILE *devnull = fopen("/dev/null", "w");
    int golden = kl_test_goldens("radix", v, devnull);
    int check = kl_module_find("radix")->check(v, 1, devnull);
    fclose(devnull);
    cr_assert_gt(golden, 0, "mutant %s passed every golden trace", v->name);
    cr_assert_gt(check, 0, "mutant %s passed the whole check catalogue", v->name);
}

Test(radix, there_are_at_least_three_mutants)
{
    cr_assert_geq(kl_variant_count("radix", true) - kl_variant_count("radix", false), 3);
}

Test(radix, the_module_is_registered_as_a_cpu_module_with_its_hooks)
{
    const struct kl_module *m = kl_module_find("radix");
    cr_assert(m && m->min_cc == 0 && m->verify && m->check && m->bench && kl_guide_text("radix", "semantics"));
    cr_assert_geq(kl_variant_count("radix", false), 2);
    for (int i = 0; i < kl_variant_count("radix", false); i++)
        cr_assert_eq(variant(i, false)->min_cc, 0);
}

/* ---- malformed traces ---- */

static char tmp_root[256];

static void make_tmp_root(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/kl_radix_test_XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_root));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tmp_root(void)
{
    nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes a case directory (meta with this page_size; trace text, or no trace if NULL) and
 * returns the verdict of v (NULL: the reference) on it. */
static struct kl_verdict run_case(const char *name, const char *meta, const char *trace, const struct kl_variant *v,
                                  char *dir, size_t dlen)
{
    snprintf(dir, dlen, "%s/%s", tmp_root, name);
    mkdir(dir, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    fputs(meta, f);
    fclose(f);
    if (trace) {
        snprintf(path, sizeof path, "%s/trace.jsonl", dir);
        f = fopen(path, "w");
        fputs(trace, f);
        fclose(f);
    }
    struct kl_case c;
    struct kl_err err = {{0}};
    struct kl_verdict vd = {0};
    cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
    kl_module_find("radix")->verify(&c, v, &vd);
    kl_case_close(&c);
    return vd;
}

#define META(page) "{\"module\":\"radix\",\"case\":\"t\",\"dtype\":\"i4\",\"params\":{\"page_size\":" #page "}}"

Test(radix, malformed_traces_fail_with_the_file_and_line)
{
    make_tmp_root();
    static const struct {
        const char *name, *trace, *want; /* want: the expected "trace.jsonl:<line>: <what>" piece */
    } cases[] = {
        {"bad_json", "{\"op\":\"size\",\"expect\":{\"total\":0,\"evictable\":0}}\n\n{\"op\":\"match\",\"key\":[1,2\n",
         "trace.jsonl:3: bad JSON"},
        {"trailing_garbage", "{\"op\":\"match\",\"key\":[],\"expect\":0} x\n", "trace.jsonl:1: bad JSON"},
        {"not_an_object", "[1,2,3]\n", "trace.jsonl:1: not a JSON object"},
        {"unknown_op", "{\"op\":\"match\",\"key\":[],\"expect\":0}\n{\"op\":\"delete\",\"key\":[1]}\n",
         "trace.jsonl:2: unknown op \"delete\""},
        {"no_op", "{\"key\":[1]}\n", "trace.jsonl:1: missing or non-string \"op\""},
        {"key_not_array", "{\"op\":\"insert\",\"key\":\"1 2 3\",\"expect\":0}\n",
         "trace.jsonl:1: insert needs \"key\""},
        {"token_not_int", "{\"op\":\"insert\",\"key\":[1,2.5],\"expect\":0}\n", "trace.jsonl:1: insert key[1] is not"},
        {"token_too_big", "{\"op\":\"match\",\"key\":[2147483648],\"expect\":0}\n", "trace.jsonl:1: match key[0]"},
        {"token_string", "{\"op\":\"lock\",\"key\":[\"7\"]}\n", "trace.jsonl:1: lock key[0]"},
        {"missing_expect", "{\"op\":\"match\",\"key\":[1]}\n", "trace.jsonl:1: match needs \"expect\""},
        {"negative_expect", "{\"op\":\"insert\",\"key\":[1],\"expect\":-1}\n",
         "trace.jsonl:1: insert needs \"expect\""},
        {"evict_no_tokens", "{\"op\":\"evict\",\"expect\":0}\n", "trace.jsonl:1: evict needs \"tokens\""},
        {"evict_negative", "{\"op\":\"evict\",\"tokens\":-3,\"expect\":0}\n", "trace.jsonl:1: evict needs \"tokens\""},
        {"size_flat", "{\"op\":\"size\",\"expect\":3}\n", "trace.jsonl:1: size needs \"expect\""},
        {"size_partial", "{\"op\":\"size\",\"expect\":{\"total\":3}}\n", "trace.jsonl:1: size needs \"expect\""},
        /* well-formed lines whose expectations are wrong: the replay names them */
        {"wrong_match",
         "{\"op\":\"insert\",\"key\":[1,2,3],\"expect\":0}\n{\"op\":\"match\",\"key\":[1,2,3,4],\"expect\":4}\n",
         "trace.jsonl:2: match expected 4, got 3"},
        {"wrong_insert", "{\"op\":\"insert\",\"key\":[1],\"expect\":1}\n", "trace.jsonl:1: insert expected 1, got 0"},
        {"wrong_evict",
         "{\"op\":\"insert\",\"key\":[1,2],\"expect\":0}\n{\"op\":\"evict\",\"tokens\":1,\"expect\":1}\n",
         "trace.jsonl:2: evict expected 1, got 2"},
        {"wrong_size",
         "{\"op\":\"insert\",\"key\":[1,2],\"expect\":0}\n{\"op\":\"lock\",\"key\":[1,2]}\n"
         "{\"op\":\"size\",\"expect\":{\"total\":2,\"evictable\":2}}\n",
         "trace.jsonl:3: size evictable expected 2, got 0"},
        {"unlock_unlocked", "{\"op\":\"insert\",\"key\":[1,2],\"expect\":0}\n{\"op\":\"unlock\",\"key\":[1,2]}\n",
         "trace.jsonl:2: unlock of a path that holds no lock"},
        {"empty_file", "", "trace.jsonl: no operations"},
        {"only_blank_lines", "\n  \n\r\n", "trace.jsonl: no operations"},
    };
    int nv = kl_variant_count("radix", false);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char dir[512];
        for (int vi = -1; vi < nv; vi++) {
            const struct kl_variant *v = vi < 0 ? NULL : variant(vi, false);
            struct kl_verdict vd;
            vd = run_case(cases[k].name, META(1), cases[k].trace, v, dir, sizeof dir);
            cr_expect_eq(vd.status, KL_FAIL, "%s (%s) passed", cases[k].name, v ? v->name : "reference");
            cr_expect(strstr(vd.why, cases[k].want) != NULL, "%s (%s): why = \"%s\", expected it to contain \"%s\"",
                      cases[k].name, v ? v->name : "reference", vd.why, cases[k].want);
            cr_expect(strstr(vd.why, dir) != NULL, "%s: why = \"%s\" does not name the case's file", cases[k].name,
                      vd.why);
        }
    }
    rm_tmp_root();
}

Test(radix, a_nul_byte_inside_a_line_is_bad_json_not_a_truncated_line)
{
    make_tmp_root();
    static const char text[] = "{\"op\":\"size\",\"expect\":{\"total\":0,\"evictable\":0}}\n{\"op\":\"size\"\0}\n";
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/nul", tmp_root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/trace.jsonl", dir);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, sizeof text - 1, f);
    fclose(f);
    struct kl_radix_trace tr;
    struct kl_err err = {{0}};
    cr_assert_neq(kl_radix_trace_load(path, 1, &tr, &err), 0);
    rm_tmp_root();
    cr_assert(strstr(err.msg, "trace.jsonl:2: bad JSON") != NULL, "why = \"%s\"", err.msg);
}

Test(radix, a_missing_trace_a_bad_page_size_or_dtype_fail_cleanly)
{
    make_tmp_root();
    char dir[512];
    const char *ok = "{\"op\":\"match\",\"key\":[],\"expect\":0}\n";
    struct kl_verdict vd = run_case("missing", META(1), NULL, NULL, dir, sizeof dir);
    cr_expect_eq(vd.status, KL_FAIL);
    cr_expect(strstr(vd.why, "trace.jsonl: cannot open") != NULL, "why = \"%s\"", vd.why);
    vd = run_case("page0", META(0), ok, NULL, dir, sizeof dir);
    cr_expect_eq(vd.status, KL_FAIL);
    cr_expect(strstr(vd.why, "meta.json: page_size") != NULL, "why = \"%s\"", vd.why);
    vd = run_case("page_str", META("4"), ok, NULL, dir, sizeof dir);
    cr_expect_eq(vd.status, KL_FAIL);
    cr_expect(strstr(vd.why, "meta.json") != NULL, "why = \"%s\"", vd.why);
    vd = run_case("fp32", "{\"module\":\"radix\",\"dtype\":\"fp32\"}", ok, NULL, dir, sizeof dir);
    cr_expect_eq(vd.status, KL_FAIL);
    cr_expect(strstr(vd.why, "dtype") != NULL, "why = \"%s\"", vd.why);
    /* No params at all: page_size defaults to 1; unknown keys are ignored; a UTF-8 BOM and
     * CRLF line ends (an editor's doing) are not errors. */
    vd = run_case("defaults", "{\"module\":\"radix\",\"dtype\":\"i4\",\"novel\":1}",
                  "\xEF\xBB\xBF{\"op\":\"insert\",\"key\":[1,2,3],\"expect\":0,\"note\":\"extra keys are ignored\"}\n"
                  "{\"op\":\"match\",\"key\":[],\"expect\":0}\n"
                  "{\"op\":\"match\",\"key\":[1,2],\"expect\":2}\r\n",
                  NULL, dir, sizeof dir);
    cr_expect_eq(vd.status, KL_PASS, "why = \"%s\"", vd.why);
    rm_tmp_root();
}

/* A trace is a regular file of bounded size with bounded lines: a directory (or a FIFO, a
 * device: tests in lab/tests/cli.sh) is refused, and one line is never parsed past 4 MiB. */
Test(radix, a_trace_that_is_not_a_file_or_has_a_huge_line_fails_naming_it)
{
    struct kl_radix_trace tr;
    struct kl_err err = {{0}};
    cr_assert_neq(kl_radix_trace_load("golden/radix", 1, &tr, &err), 0);
    cr_expect(strstr(err.msg, "golden/radix: is a directory") != NULL, "%s", err.msg);
    size_t n = (5u << 20) + 2;
    char *text = malloc(n);
    cr_assert(text);
    memset(text, ' ', n);
    text[0] = '{', text[n - 2] = '}', text[n - 1] = '\n';
    cr_assert_neq(kl_radix_trace_parse(text, n, "big.jsonl", 1, &tr, &err), 0);
    cr_expect(strstr(err.msg, "big.jsonl:1: line of") != NULL, "%s", err.msg);
    free(text);
}

/* ---- the semantics, by hand ---- */

Test(radix, prefix_of_itself_matches_fully)
{
    const int32_t k[] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    for (int page = 1; page <= 4; page++) {
        struct kl_radix *t = kl_radix_new(page, kl_radix_cmp_simd);
        size_t whole = 9 - 9 % page;
        cr_assert_eq(kl_radix_insert(t, k, 9), 0);
        for (size_t n = 0; n <= 9; n++)
            cr_assert_eq(kl_radix_match(t, k, n), n - n % page, "page %d n %zu", page, n);
        cr_assert_eq(kl_radix_insert(t, k, 9), whole);
        char msg[256];
        cr_assert_eq(kl_radix_validate(t, msg, sizeof msg), 0, "%s", msg);
        kl_radix_free(t);
    }
}

Test(radix, a_split_keeps_both_halves_and_the_lru_order)
{
    struct kl_radix *t = kl_radix_new(1, NULL);
    const int32_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 5, 6}, c[] = {9};
    kl_radix_insert(t, a, 4);
    kl_radix_insert(t, b, 4); /* [1,2] -> {[3,4], [5,6]}, all stamped by this op */
    kl_radix_insert(t, c, 1);
    cr_assert_eq(kl_radix_node_count(t), 4);
    cr_assert_eq(kl_radix_evict(t, 1), 2); /* [3,4]: stamped by the walk, before the split made [5,6] */
    cr_assert_eq(kl_radix_match(t, a, 4), 2);
    cr_assert_eq(kl_radix_match(t, b, 4), 4);
    cr_assert_eq(kl_radix_evict(t, 1), 1); /* [9] is now the least recent */
    cr_assert_eq(kl_radix_evict(t, 3), 4); /* [5,6], then [1,2] became a leaf: same call */
    size_t total, ev;
    kl_radix_size(t, &total, &ev);
    cr_assert(total == 0 && ev == 0 && kl_radix_node_count(t) == 0);
    kl_radix_free(t);
}

Test(radix, unlock_without_a_lock_is_refused_and_changes_no_count)
{
    struct kl_radix *t = kl_radix_new(1, NULL);
    const int32_t a[] = {1, 2, 3, 4};
    kl_radix_insert(t, a, 2);
    cr_assert_eq(kl_radix_lock(t, a, 2), 2);
    kl_radix_insert(t, a, 4);                   /* [3,4] hangs below the locked [1,2], unlocked */
    cr_assert_eq(kl_radix_unlock(t, a, 4), -1); /* its path includes [3,4], which holds none */
    size_t total, ev;
    kl_radix_size(t, &total, &ev);
    cr_assert(total == 4 && ev == 2, "total %zu evictable %zu", total, ev);
    cr_assert_eq(kl_radix_unlock(t, a, 2), 2);
    kl_radix_size(t, &total, &ev);
    cr_assert_eq(ev, 4);
    kl_radix_free(t);
}

/* ---- property tests ---- */

struct prop {
    int variant; /* index into the list with mutants */
    int page;
};

ParameterizedTestParameters(radix, tree_agrees_with_the_reference_after_every_random_op)
{
    static struct prop p[128];
    int n = kl_variant_count("radix", true), m = 0;
    for (int i = 0; i < n && m < 126; i++)
        if (!variant(i, true)->mutant)
            for (int page = 1; page <= 4; page *= 4)
                p[m++] = (struct prop){i, page};
    return cr_make_param_array(struct prop, p, (size_t)m);
}

ParameterizedTest(struct prop *p, radix, tree_agrees_with_the_reference_after_every_random_op)
{
    const struct kl_variant *v = variant(p->variant, true);
    uint64_t seeds[5] = {1, 2, 3, 0xdecafbad, kl_test_seed(stderr)};
    for (int s = 0; s < 5; s++) {
        cr_log_info("variant %s page %d seed %llu", v->name, p->page, (unsigned long long)seeds[s]);
        struct kl_radix_trace tr;
        kl_radix_trace_random(&tr, seeds[s], p->page, 3000);
        struct kl_radix_impl ref, var;
        struct kl_err err = {{0}};
        kl_radix_impl_open(&ref, "reference", NULL, p->page, &err);
        kl_radix_impl_open_variant(&var, v, p->page, &err);
        kl_radix_debug_force_move(var.state, s & 1); /* odd seeds: every split's shrink moves the node */
        int rc = kl_radix_trace_diff(&tr, &ref, &var, true, &err);
        kl_radix_impl_close(&ref);
        kl_radix_impl_close(&var);
        kl_radix_trace_free(&tr);
        cr_assert_eq(rc, 0, "%s page %d seed %llu: %s", v->name, p->page, (unsigned long long)seeds[s], err.msg);
    }
}

Test(radix, the_check_hook_passes_every_variant)
{
    FILE *log = fopen("/dev/null", "w");
    int failures = kl_module_find("radix")->check(NULL, 7, log);
    fclose(log);
    cr_assert_eq(failures, 0, "kernlab check radix --seed 7: %d failures", failures);
}

/* ---- compare paths ---- */

Test(radix, compare_paths_agree_with_the_scalar_loop_at_every_length_and_offset)
{
    kl_radix_cmp_fn paths[4] = {kl_radix_cmp_simd, kl_radix_cmp_sse2, NULL, NULL};
    const char *names[4] = {"simd", "sse2", "avx2", NULL};
    if (kl_radix_cpu_has_avx2())
        paths[2] = kl_radix_cmp_avx2;
    else
        cr_log_warn("no AVX2 on this CPU: its path is not tested");
    cr_log_info("v1_simd runs the %s path here", kl_radix_cmp_simd_path());
    enum { MAX = 300 };
    /* Exactly sized heap buffers: ASan/valgrind catch a read past the end. */
    for (size_t n = 0; n <= MAX; n += n < 80 ? 1 : 37) {
        for (size_t shift = 0; shift < 4; shift++) {
            int32_t *a = malloc((n + shift) * sizeof *a + 1), *b = malloc(n * sizeof *b + 1);
            for (size_t i = 0; i < n; i++)
                a[shift + i] = b[i] = (int32_t)(i * 2654435761u);
            for (size_t diff = 0; diff <= n; diff++) { /* diff == n: all equal */
                if (diff < n) b[diff] ^= (int32_t)(1u << (diff % 32));
                size_t want = kl_radix_cmp_scalar(a + shift, b, n);
                cr_assert_eq(want, diff, "scalar n %zu diff %zu", n, diff);
                for (int k = 0; k < 3; k++)
                    if (paths[k])
                        cr_assert_eq(paths[k](a + shift, b, n), want, "%s: n %zu shift %zu diff %zu", names[k], n,
                                     shift, diff);
                if (diff < n) b[diff] = a[shift + diff];
            }
            free(a);
            free(b);
        }
    }
}

/* ---- memory ---- */

Test(radix, evict_gives_back_every_byte_the_tree_took)
{
    for (int page = 1; page <= 16; page *= 4) {
        struct kl_radix *t = kl_radix_new(page, kl_radix_cmp_simd);
        size_t empty = kl_radix_bytes(t);
        struct kl_radix_trace tr;
        kl_radix_trace_random(&tr, 99, page, 4000);
        for (size_t i = 0; i < tr.nops; i++) { /* the ops without the locks: everything evictable */
            const struct kl_radix_op *op = &tr.ops[i];
            if (op->code == KL_RADIX_INSERT) kl_radix_insert(t, tr.tok + op->key_off, op->n);
            if (op->code == KL_RADIX_MATCH) kl_radix_match(t, tr.tok + op->key_off, op->n);
            if (op->code == KL_RADIX_EVICT) kl_radix_evict(t, (size_t)op->tokens);
        }
        kl_radix_trace_free(&tr);
        kl_radix_evict(t, (size_t)-1);
        size_t total;
        kl_radix_size(t, &total, NULL);
        cr_assert_eq(total, 0);
        cr_assert_eq(kl_radix_node_count(t), 0);
        /* The eviction heap keeps its array (it is reused); everything else must be back. */
        cr_assert_leq(kl_radix_bytes(t) - empty, 64 * 1024, "page %d: %zu bytes still held", page,
                      kl_radix_bytes(t) - empty);
        kl_radix_free(t);
    }
}

/* What ctest radix_leaks runs under valgrind / ASan: every path that allocates (splits with
 * moves, child tables growing and shrinking, the heap, traces, the reference), then frees. */
Test(radix, churn_then_free_leaks_nothing)
{
    for (int page = 1; page <= 4; page *= 4) {
        struct kl_radix_trace tr;
        kl_radix_trace_random(&tr, 4242, page, 1500);
        struct kl_radix_impl ref, var;
        struct kl_err err = {{0}};
        kl_radix_impl_open(&ref, "reference", NULL, page, &err);
        kl_radix_impl_open(&var, "v1_simd", kl_radix_cmp_simd, page, &err);
        cr_assert_eq(kl_radix_trace_diff(&tr, &ref, &var, false, &err), 0, "%s", err.msg);
        kl_radix_impl_close(&ref);
        kl_radix_impl_close(&var);
        kl_radix_trace_free(&tr);
    }
    /* A wide node (table growth past inline, then back) and a deep chain. */
    struct kl_radix *t = kl_radix_new(1, NULL);
    int32_t key[2];
    for (int32_t i = 0; i < 500; i++)
        key[0] = 7, key[1] = i, kl_radix_insert(t, key, 2);
    kl_radix_evict(t, 499);
    int32_t chain[600];
    for (int i = 0; i < 600; i++)
        chain[i] = i;
    for (size_t n = 1; n <= 600; n++)
        kl_radix_insert(t, chain, n);
    kl_radix_free(t);
}

/* ---- scale ---- */

/* Suite radix_scale runs on its own as ctest radix_evict_scale, whose TIMEOUT is what fails an
 * evict that went quadratic again (it took well over 20 s on this tree; the heap well under a
 * second): nothing here measures time. 60^3 keys of three tokens make 216000 one-token leaves
 * under 3660 inner nodes, each with at most 60 children, so the inserts stay cheap. */
Test(radix_scale, the_reference_evicts_216k_leaves_oldest_first)
{
    enum { FAN = 60 };
    struct kl_radix_trace tr = {0};
    snprintf(tr.name, sizeof tr.name, "216k leaves");
    tr.page_size = 1;
    for (int32_t a = 0; a < FAN; a++)
        for (int32_t b = 0; b < FAN; b++)
            for (int32_t c = 0; c < FAN; c++)
                kl_radix_trace_add(&tr, KL_RADIX_INSERT, (int32_t[]){a, b, c}, 3, 0);
    const long long leaves = FAN * FAN * FAN, tokens = leaves + FAN * FAN + FAN;
    /* Least recently stamped first: the leaves in insert order, and each inner node [0, b] as
     * soon as its 60 leaves are gone (its stamp, from the insert of [0, b, 59] or the split
     * that made the leaf [0, b + 1, 0], is not newer than that leaf, and within that op it was
     * stamped first). 1000 tokens = 16 x (60 leaves + [0, b]) + the leaves [0, 16, 0..23]. */
    kl_radix_trace_add(&tr, KL_RADIX_EVICT, NULL, 0, 1000);
    tr.ops[tr.nops - 1].expect = 1000;
    kl_radix_trace_add(&tr, KL_RADIX_MATCH, (int32_t[]){0, 15, 59}, 3, 0);
    tr.ops[tr.nops - 1].expect = 1; /* [0, 15] went with its leaves */
    kl_radix_trace_add(&tr, KL_RADIX_MATCH, (int32_t[]){0, 16, 23}, 3, 0);
    tr.ops[tr.nops - 1].expect = 2; /* the last leaf freed */
    kl_radix_trace_add(&tr, KL_RADIX_MATCH, (int32_t[]){0, 16, 24}, 3, 0);
    tr.ops[tr.nops - 1].expect = 3; /* the first leaf kept */
    kl_radix_trace_add(&tr, KL_RADIX_EVICT, NULL, 0, (long long)1 << 40);
    tr.ops[tr.nops - 1].expect = tokens - 1000;
    kl_radix_trace_add(&tr, KL_RADIX_SIZE, NULL, 0, 0);
    tr.ops[tr.nops - 1].expect_total = tr.ops[tr.nops - 1].expect_evictable = 0;

    struct kl_radix_impl im;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_radix_impl_open(&im, "reference", NULL, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(kl_radix_trace_replay(&tr, &im, &err, NULL, NULL), 0, "%s", err.msg);
    kl_radix_impl_close(&im);
    kl_radix_trace_free(&tr);
}
