/* Tests of the lab runtime: dtype conversions on the edge values, .npy round trips and
 * rejections, meta.json errors, the comparison policy, the registry. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/core/args.h"
#include "lab/core/compare.h"
#include "lab/core/golden.h"
#include "lab/core/registry.h"
#include "lab/core/testing.h"
#include "perf/bench.h"

/* bf16: round to nearest even on the edge values. */
Test(core, bf16_rounds_to_nearest_even)
{
    cr_assert_eq(kl_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(kl_f32_to_bf16(-2.0f), 0xc000);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0). */
    cr_assert_eq(kl_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): up. */
    cr_assert_eq(kl_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    cr_assert_eq(kl_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* just above halfway: up */
    cr_assert_eq(kl_f32_to_bf16(3.3895314e38f), 0x7f7f);             /* largest finite bf16 */
    cr_assert_eq(kl_f32_to_bf16(3.40282347e38f), 0x7f80);            /* float max rounds to Inf */
    cr_assert_eq(kl_f32_to_bf16(INFINITY), 0x7f80);
    cr_assert_eq(kl_f32_to_bf16(0x1p-133f), 0x0001); /* smallest bf16 subnormal */
    cr_assert(isnan(kl_bf16_to_f32(kl_f32_to_bf16(NAN))));
    cr_assert_eq(kl_bf16_to_f32(0x3f81), 1.0f + 0x1p-7f);
}

Test(core, fp16_rounds_to_nearest_even_with_subnormals_and_overflow)
{
    cr_assert_eq(kl_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(kl_f32_to_f16(65504.0f), 0x7bff);   /* largest finite */
    cr_assert_eq(kl_f32_to_f16(65519.0f), 0x7bff);   /* below the halfway point to 65536 */
    cr_assert_eq(kl_f32_to_f16(65520.0f), 0x7c00);   /* halfway: ties to even is Inf */
    cr_assert_eq(kl_f32_to_f16(0x1p-24f), 0x0001);   /* smallest subnormal */
    cr_assert_eq(kl_f32_to_f16(0x1p-25f), 0x0000);   /* halfway to zero: even (0) */
    cr_assert_eq(kl_f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 x smallest: ties to even (2) */
    cr_assert_eq(kl_f32_to_f16(0x1p-14f), 0x0400);   /* smallest normal */
    cr_assert_eq(kl_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    cr_assert_eq(kl_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    cr_assert_eq(kl_f32_to_f16(-0.0f), 0x8000);
    cr_assert(isnan(kl_f16_to_f32(kl_f32_to_f16(NAN))));
    for (uint32_t h = 0; h < 0x7c00; h++) /* every finite positive half survives the round trip */
        cr_assert_eq(kl_f32_to_f16(kl_f16_to_f32((uint16_t)h)), h, "half 0x%04x", h);
}

static char tmpdir[256];

static void make_tmp(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kl_core_XXXXXX");
    cr_assert(mkdtemp(tmpdir));
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(data, 1, n, f);
    fclose(f);
}

Test(core, npy_round_trips_every_stored_dtype)
{
    make_tmp();
    enum kl_dtype types[] = {KL_F32, KL_F64, KL_I32, KL_I64, KL_U8};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        struct kl_tensor t, back;
        int64_t dims[3] = {2, 3, 5};
        kl_tensor_alloc(&t, types[k], 3, dims);
        for (int i = 0; i < 30; i++) kl_store_elem(types[k], t.data, (size_t)i, i * 7 % 31);
        char path[300];
        snprintf(path, sizeof path, "%s/t%zu.npy", tmpdir, k);
        struct kl_err err;
        cr_assert_eq(kl_npy_write(path, &t, &err), 0, "%s", err.msg);
        cr_assert_eq(kl_npy_read(path, &back, &err), 0, "%s", err.msg);
        cr_assert_eq(back.dtype, types[k]);
        cr_assert_eq(back.ndim, 3);
        cr_assert_eq(back.dims[2], 5);
        cr_assert_eq(memcmp(t.data, back.data, kl_nbytes(&t)), 0);
        kl_tensor_free(&t), kl_tensor_free(&back);
    }
}

/* A .npy 1.0 header holding dict, padded to 64 bytes as numpy writes it. */
static size_t npy_raw_header(char *buf, const char *dict)
{
    int n = (int)strlen(dict);
    int pad = (64 - (10 + n + 1) % 64) % 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(n + pad + 1), buf[9] = 0;
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', (size_t)pad);
    buf[10 + n + pad] = '\n';
    return (size_t)(10 + n + pad + 1);
}

/* A valid header for an array of this descr and shape. */
static size_t npy_header(char *buf, const char *descr, const char *shape)
{
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    return npy_raw_header(buf, dict);
}

static void expect_npy_error(const char *name, const void *data, size_t n, const char *needle)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    write_bytes(path, data, n);
    struct kl_tensor t;
    struct kl_err err = {{0}};
    cr_assert_neq(kl_npy_read(path, &t, &err), 0, "%s was accepted", name);
    cr_assert(strstr(err.msg, path), "message does not name the file: %s", err.msg);
    cr_assert(strstr(err.msg, needle), "message '%s' does not say '%s'", err.msg, needle);
}

Test(core, npy_rejects_bad_files_naming_the_file)
{
    make_tmp();
    char buf[256];
    size_t h = npy_header(buf, "<f4", "(4,)");
    memset(buf + h, 0, 20);
    expect_npy_error("truncated.npy", buf, h + 10, "truncated");
    expect_npy_error("extra.npy", buf, h + 20, "size mismatch");
    char bad[256];
    memcpy(bad, buf, h + 16);
    bad[1] = 'X';
    expect_npy_error("magic.npy", bad, h + 16, "bad magic");
    h = npy_header(buf, ">f4", "(4,)");
    expect_npy_error("bigendian.npy", buf, h + 16, "unsupported dtype");
    h = npy_header(buf, "<c8", "(4,)");
    expect_npy_error("complex.npy", buf, h + 16, "unsupported dtype");
    expect_npy_error("empty.npy", "", 0, "bad magic");
}

/* Each header a lenient scan accepted, with exactly the data it then read: every one must fail
 * now, naming the file and the problem. */
Test(core, npy_header_is_parsed_strictly)
{
    make_tmp();
    static const struct {
        const char *name, *dict, *needle;
        size_t data;
    } kbad[] = {
        {"falsey", "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (4,), }", "fortran_order", 16},
        {"no_comma", "{'descr': '<f4', 'fortran_order': False, 'shape': (4 64), }", "shape", 1024},
        {"not_tuple", "{'descr': '<f4', 'fortran_order': False, 'shape': (4), }", "shape", 16},
        {"nested", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': {'descr': '<i4'}}", "unknown key", 16},
        {"in_string", "{'fortran_order': False, 'shape': (4,), 'note': \"'descr': '<f4'\"}", "unknown key", 16},
        {"twice", "{'descr': '<f4', 'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", "twice", 16},
        {"after", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } junk", "after the closing", 16},
        {"no_descr", "{'fortran_order': False, 'shape': (4,), }", "no 'descr'", 16},
    };
    for (size_t i = 0; i < sizeof kbad / sizeof kbad[0]; i++) {
        char buf[512] = {0}, name[64];
        size_t h = npy_raw_header(buf, kbad[i].dict);
        snprintf(name, sizeof name, "%s.npy", kbad[i].name);
        expect_npy_error(name, buf, h + kbad[i].data, kbad[i].needle);
    }
    char buf[256] = {0};
    size_t h = npy_raw_header(buf, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 2,)}");
    char path[300];
    snprintf(path, sizeof path, "%s/double_quotes.npy", tmpdir);
    write_bytes(path, buf, h + 16);
    struct kl_tensor t;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_npy_read(path, &t, &err), 0, "a Python literal with double quotes is a header too: %s", err.msg);
    cr_assert_eq(t.ndim, 2);
    kl_tensor_free(&t);
}

/* The size is checked, for overflow and against the file, before anything is allocated: a
 * shape whose byte count wraps to 0 is not an empty array, and one far larger than the file
 * is an error, not an exit for want of memory. */
Test(core, npy_shapes_larger_than_the_file_are_refused_before_allocating)
{
    make_tmp();
    char buf[256] = {0};
    size_t h = npy_header(buf, "<f4", "(1099511627776, 4194304)"); /* 2^40 x 2^22 x 4 bytes = 2^64 */
    expect_npy_error("wraps.npy", buf, h, "too large");
    h = npy_header(buf, "<f4", "(0, 1099511627776, 1099511627776)"); /* empty, yet a product past 2^64 */
    expect_npy_error("empty_wraps.npy", buf, h, "too large");
    h = npy_header(buf, "<f4", "(1099511627776, 64)"); /* 2^48 bytes declared, 64 present */
    expect_npy_error("huge.npy", buf, h + 64, "too large");
    h = npy_header(buf, "<f4", "(1048576, 64)"); /* 2^28 bytes declared, 64 present */
    expect_npy_error("short.npy", buf, h + 64, "truncated");
    h = npy_header(buf, "<f4", "(0, 4096)");
    char path[300];
    snprintf(path, sizeof path, "%s/empty.npy", tmpdir);
    write_bytes(path, buf, h);
    struct kl_tensor t;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_npy_read(path, &t, &err), 0, "an empty array is fine: %s", err.msg);
    kl_tensor_free(&t);
    cr_assert_neq(kl_npy_read(tmpdir, &t, &err), 0);
    cr_assert(strstr(err.msg, "directory"), "%s", err.msg);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    write_bytes(path, text, strlen(text));
}

Test(core, meta_json_errors_name_the_file)
{
    make_tmp();
    struct kl_case c;
    struct kl_err err = {{0}};
    cr_assert_neq(kl_case_open(&c, tmpdir, &err), 0);
    cr_assert(strstr(err.msg, "meta.json"), "%s", err.msg);
    write_text(tmpdir, "meta.json", "{\"module\": \"rmsnorm\", ");
    cr_assert_neq(kl_case_open(&c, tmpdir, &err), 0);
    cr_assert(strstr(err.msg, "bad JSON"), "%s", err.msg);
    write_text(tmpdir, "meta.json", "{\"case\": \"x\"}");
    cr_assert_neq(kl_case_open(&c, tmpdir, &err), 0);
    cr_assert(strstr(err.msg, "module"), "%s", err.msg);
    write_text(tmpdir, "meta.json", "{\"module\": \"rmsnorm\", \"dtype\": \"fp8\"}");
    cr_assert_neq(kl_case_open(&c, tmpdir, &err), 0);
    cr_assert(strstr(err.msg, "fp8"), "%s", err.msg);
    write_text(tmpdir, "meta.json", "{\"module\": \"rmsnorm\", \"dtype\": \"bf16\", \"params\": {\"eps\": \"big\"}, "
                                    "\"unknown_key\": 1}");
    cr_assert_eq(kl_case_open(&c, tmpdir, &err), 0, "%s", err.msg);
    double eps;
    cr_assert_neq(kl_case_param_double(&c, "eps", 1e-6, &eps, &err), 0);
    cr_assert(strstr(err.msg, "eps"), "%s", err.msg);
    cr_assert_eq(kl_case_param_double(&c, "absent", 0.5, &eps, &err), 0);
    cr_assert_eq(eps, 0.5);
    kl_case_close(&c);
}

/* meta.json is one object and nothing after it; the names it gives are printed into verify's
 * lines, so a control character (a newline forging a line of its own) is refused. */
Test(core, meta_json_is_one_object_with_plain_names)
{
    make_tmp();
    static const struct {
        const char *text, *needle;
    } kbad[] = {
        {"{\"module\": \"rmsnorm\"} garbage", "bad JSON"},
        {"{\"module\": \"rmsnorm\"}{\"module\": \"rmsnorm\"}", "bad JSON"},
        {"{\"module\": \"rmsnorm\", \"case\": \"x\\nPASS rmsnorm forged reference\"}", "control character"},
        {"{\"module\": \"rms\\tnorm\"}", "control character"},
        {"{\"module\": \"rmsnorm\", \"dtype\": \"bf16\\u0007\"}", "control character"},
        {"{\"module\": \"rmsnorm\", \"case\": 7}", "\"case\" must be a string"},
        {"{\"module\": \"rmsnorm\", \"params\": [1e-6]}", "\"params\" must be an object"},
    };
    for (size_t i = 0; i < sizeof kbad / sizeof kbad[0]; i++) {
        struct kl_case c;
        struct kl_err err = {{0}};
        write_text(tmpdir, "meta.json", kbad[i].text);
        cr_assert_neq(kl_case_open(&c, tmpdir, &err), 0, "accepted: %s", kbad[i].text);
        cr_assert(strstr(err.msg, "meta.json") && strstr(err.msg, kbad[i].needle), "%s: %s", kbad[i].text, err.msg);
    }
    struct kl_case c;
    struct kl_err err = {{0}};
    write_text(tmpdir, "meta.json", "{\"module\": \"rmsnorm\", \"seed\": 1e300, \"params\": {\"n\": 1e300}}\n\n");
    cr_assert_eq(kl_case_open(&c, tmpdir, &err), 0, "trailing white space is fine: %s", err.msg);
    long long n;
    cr_assert_neq(kl_case_param_int(&c, "n", 0, &n, &err), 0, "1e300 is no long long");
    kl_case_close(&c);
}

Test(core, compare_fails_nan_and_poison_and_passes_rounding)
{
    double want[4] = {1, 2, 3, 4}, got[4] = {1, 2, 3, 4};
    struct kl_cmp c;
    kl_compare(got, want, 4, kl_policy_for(KL_BF16, false), &c);
    cr_assert(c.pass);
    got[2] = NAN;
    kl_compare(got, want, 4, kl_policy_for(KL_BF16, false), &c);
    cr_assert(!c.pass);
    cr_assert_eq(c.n_bad, 1);
    cr_assert_eq(c.first[0].index, 2);
    got[2] = INFINITY;
    kl_compare(got, want, 4, kl_policy_for(KL_BF16, false), &c);
    cr_assert(!c.pass);
    /* One bf16 rounding of each element passes; an error of 3 units of roundoff does not. */
    for (int i = 0; i < 4; i++) got[i] = kl_round_to(KL_BF16, want[i] * (1 + 0x1p-9));
    kl_compare(got, want, 4, kl_policy_for(KL_BF16, false), &c);
    cr_assert(c.pass);
    got[3] = want[3] * (1 + 3 * 0x1p-8);
    kl_compare(got, want, 4, kl_policy_for(KL_BF16, false), &c);
    cr_assert(!c.pass);
    /* Exact comparison: any difference fails. */
    double a[2] = {1, 2}, b[2] = {1, nextafter(2, 3)};
    kl_compare(b, a, 2, kl_policy_for(KL_BF16, true), &c);
    cr_assert(!c.pass);
}

Test(core, compare_catches_a_systematic_error_inside_the_element_bound)
{
    /* Every element 1.5 units of bf16 roundoff too large: inside rtol = 2u per element, but a
     * systematic shift, which rel_l2 <= u must reject. */
    enum { N = 1000 };
    double want[N], got[N];
    for (int i = 0; i < N; i++) want[i] = 1 + i * 1e-3, got[i] = want[i] * (1 + 1.5 * 0x1p-8);
    struct kl_cmp c;
    kl_compare(got, want, N, kl_policy_for(KL_BF16, false), &c);
    cr_assert_eq(c.n_bad, 0);
    cr_assert(!c.pass, "rel_l2 %.3g passed", c.rel_l2);
}

/* Exact compares compare bits: values equal as numbers (-0 == +0, a NaN against any NaN) but not
 * as bits fail, which a comparison of values (the old one) let through. */
Test(core, exact_compare_compares_bits)
{
    struct kl_cmp c;
    const struct kl_policy exact = kl_policy_for(KL_BF16, true);
    double zero[2] = {0.0, 1}, negzero[2] = {-0.0, 1};
    kl_compare(zero, negzero, 2, exact, &c);
    cr_assert(!c.pass && c.n_bad == 1 && c.first[0].index == 0, "+0 passed for -0");
    kl_compare(negzero, zero, 2, exact, &c);
    cr_assert(!c.pass, "-0 passed for +0");
    kl_compare(negzero, negzero, 2, exact, &c);
    cr_assert(c.pass && c.max_abs == 0);
    /* Two quiet NaNs of other payloads, as a bf16 0x7fc1 and 0x7fff load. */
    double nan_a[1] = {kl_bf16_to_f32(0x7fc1)}, nan_b[1] = {kl_bf16_to_f32(0x7fff)};
    double nan_a2[1] = {kl_bf16_to_f32(0x7fc1)};
    kl_compare(nan_b, nan_a, 1, exact, &c);
    cr_assert(!c.pass, "a NaN with another payload passed");
    kl_compare(nan_a2, nan_a, 1, exact, &c);
    cr_assert(c.pass && c.max_abs == 0, "the same NaN failed");
    double neg_nan[1] = {kl_bf16_to_f32(0xffc1)};
    kl_compare(neg_nan, nan_a, 1, exact, &c);
    cr_assert(!c.pass, "a NaN of the other sign passed");
    /* What a comparison of values does with the same pairs: the reason for comparing bits. */
    kl_compare(zero, negzero, 2, kl_policy_for(KL_BF16, false), &c);
    cr_assert(c.pass);
    kl_compare(nan_b, nan_a, 1, kl_policy_for(KL_BF16, false), &c);
    cr_assert(c.pass);
}

/* bf16 values, each rounded to bf16 after an error of `err(i)` units of roundoff. */
static void bf16_outputs(double *want, double *got, int n, double (*err)(int))
{
    struct kl_rng rng;
    kl_rng_seed(&rng, 3);
    for (int i = 0; i < n; i++) {
        want[i] = kl_rng_normal(&rng) * (1 + 0.5 * kl_rng_normal(&rng));
        got[i] = kl_round_to(KL_BF16, want[i] * (1 + err(i) * 0x1p-8));
    }
}
static double no_error(int i) { return (void)i, 0; }
static double shift_u_8(int i) { return (void)i, 0.125; }
static double plus_minus_1_5u(int i) { return i * 2654435761u % 2 ? 1.5 : -1.5; }

/* compare.c's claims for the bias check: a correct rounding passes, a shift of u/8 on every
 * element (inside every element's bound and under rel_l2's limit) does not. */
Test(core, compare_bias_catches_a_shift_of_an_eighth_of_a_rounding)
{
    enum { N = 1 << 16 };
    static double want[N], got[N];
    struct kl_cmp c;
    bf16_outputs(want, got, N, no_error);
    kl_compare(got, want, N, kl_policy_for(KL_BF16, false), &c);
    cr_assert(c.pass, "one rounding: rel_l2 %.3g bias %.3g (limit %.3g)", c.rel_l2, c.bias, c.bias_limit);
    bf16_outputs(want, got, N, shift_u_8);
    kl_compare(got, want, N, kl_policy_for(KL_BF16, false), &c);
    cr_log_info("u/8 shift: rel_l2 %.3g (limit 2^-8), bias %.3g (limit %.3g)", c.rel_l2, c.bias, c.bias_limit);
    cr_assert_eq(c.n_bad, 0);
    cr_assert_leq(c.rel_l2, 0x1p-8);
    cr_assert(!c.pass && c.bias > c.bias_limit, "bias %.3g, limit %.3g", c.bias, c.bias_limit);
    /* No bias check for fp32 (compare.c: the float32 arithmetic's shared error is the error). */
    cr_assert_eq(kl_policy_for(KL_F32, false).bias_u, 0);
}

/* compare.c's claim for rel_l2: every element 1.5u off with a random sign, zero-mean, inside
 * every element's 2u bound: caught by rel_l2 only. */
Test(core, compare_rel_l2_catches_errors_near_every_element_bound)
{
    enum { N = 4096 };
    static double want[N], got[N];
    struct kl_cmp c;
    bf16_outputs(want, got, N, plus_minus_1_5u);
    kl_compare(got, want, N, kl_policy_for(KL_BF16, false), &c);
    cr_log_info("+-1.5u: rel_l2 %.3g (limit 2^-8), bias %.3g (limit %.3g)", c.rel_l2, c.bias, c.bias_limit);
    cr_assert_eq(c.n_bad, 0);
    cr_assert_leq(fabs(c.bias), c.bias_limit);
    cr_assert(!c.pass && c.rel_l2 > 0x1p-8);
    /* What the rationale says it lets through: out rounded to one significant bit fewer (7). */
    for (int i = 0; i < N; i++) {
        const double q = ldexp(1.0, ilogb(want[i]) - 6); /* bf16's spacing is 2^(e-7) */
        got[i] = nearbyint(want[i] / q) * q;
    }
    kl_compare(got, want, N, kl_policy_for(KL_BF16, false), &c);
    cr_log_info("7 bits: rel_l2 %.3g (limit 2^-8), bias %.3g (limit %.3g)", c.rel_l2, c.bias, c.bias_limit);
    cr_assert(c.pass, "one bit fewer was caught: rel_l2 %.3g", c.rel_l2);
}

/* The reference against a golden: one float32 rounding of float64 values passes, a float32
 * computation (a few roundings, here two) does not. */
Test(core, reference_policy_allows_one_float32_rounding)
{
    enum { N = 1000 };
    double want[N], one[N], two[N];
    struct kl_rng rng;
    kl_rng_seed(&rng, 5);
    for (int i = 0; i < N; i++) {
        const double x = kl_rng_normal(&rng);
        want[i] = (float)x, one[i] = x, two[i] = (float)((float)x * (1 + 0x1p-23));
    }
    struct kl_cmp c;
    kl_compare(one, want, N, kl_policy_reference(false), &c);
    cr_assert(c.pass, "%lld bad, rel_l2 %.3g", (long long)c.n_bad, c.rel_l2);
    kl_compare(two, want, N, kl_policy_reference(false), &c);
    cr_assert(!c.pass);
}

Test(core, attention_bound_scales_with_the_values_not_the_output)
{
    /* An average of 1000 values of size 1 is about 0.03: an error of 0.003 in it is one bf16 P
     * rounding at the scale of |v| (allowed), but ten times the output's own size would allow. */
    enum { N = 4 };
    double want[N] = {0.03, -0.02, 0.01, 0.025}, got[N];
    struct kl_policy p = kl_policy_attention_out(KL_BF16, 128, 1000, 10, 1.0, 0);
    for (int i = 0; i < N; i++) got[i] = want[i] + (i % 2 ? -0.002 : 0.002);
    struct kl_cmp c;
    kl_compare(got, want, N, p, &c);
    cr_assert_eq(c.n_bad, 0, "an error of half a bf16 roundoff of max|v| failed");
    kl_compare(got, want, N, kl_policy_for(KL_BF16, false), &c);
    cr_assert_gt(c.n_bad, 0, "the plain bf16 row would have passed it too: the test shows nothing");
    /* A whole unit of |v| off is far outside. */
    got[0] = want[0] + 0.05;
    kl_compare(got, want, N, p, &c);
    cr_assert_eq(c.n_bad, 1);
    /* lse in log2 instead of ln is 1.44x: caught. */
    double lse[2] = {5.0, 7.5}, lse2[2] = {5.0 / 0.6931471805599453, 7.5 / 0.6931471805599453};
    kl_compare(lse2, lse, 2, kl_policy_attention_lse(128, 1000, 10), &c);
    cr_assert(!c.pass);
}

Test(core, registry_lists_modules_and_variants_sorted)
{
    cr_assert_geq(kl_module_count(), 1);
    for (int i = 1; i < kl_module_count(); i++)
        cr_assert_lt(strcmp(kl_module_at(i - 1)->name, kl_module_at(i)->name), 0);
    const struct kl_module *m = kl_module_find("rmsnorm");
    cr_assert(m);
    cr_assert_geq(kl_variant_count("rmsnorm", false), 2);
    cr_assert(kl_variant_find("rmsnorm", "v0_naive"));
    cr_assert_null(kl_variant_find("rmsnorm", "no_such_variant"));
    cr_assert_null(kl_module_find("no_such_module"));
}

/* Variants of a module that exists only here, registered in an order that string sorting gets
 * wrong: the registry orders them by the N of vN_. */
static void no_launch(void) {}
KL_VARIANT(zz_order, v9_nine, no_launch, .min_cc = 0, .summary = "order test");
KL_VARIANT(zz_order, v10_ten, no_launch, .min_cc = 0, .summary = "order test");
KL_VARIANT(zz_order, v2_two, no_launch, .min_cc = 0, .summary = "order test");
KL_VARIANT(zz_order, v10_a_sibling, no_launch, .min_cc = 0, .summary = "order test");

Test(core, variants_sort_by_their_number_not_as_strings)
{
    static const char *want[] = {"v2_two", "v9_nine", "v10_a_sibling", "v10_ten"};
    cr_assert_eq(kl_variant_count("zz_order", false), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_str_eq(kl_variant_at("zz_order", i, false)->name, want[i], "position %d", i);
    cr_assert_lt(kl_variant_name_cmp("v9_x", "v10_x"), 0);
    cr_assert_lt(kl_variant_name_cmp("v10_x", "mutant_x"), 0, "numbered variants come before the rest");
    cr_assert_lt(kl_variant_name_cmp("v02_x", "v3_x"), 0);
}

/* The gate judges the variant each targets file names, never "the highest number": a learner's
 * new variant must not take the gated one's place. */
Test(core, every_benched_module_names_its_gated_variant_per_architecture)
{
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        if (!m->perf && !m->bench) continue;
        const int ccs[] = {m->min_cc == 0 ? 0 : 90, m->min_cc == 0 ? 0 : 80};
        for (int k = 0; k < 2; k++) {
            struct kl_err err = {{0}};
            const struct kl_variant *v = kl_gated_variant(m->name, ccs[k], &err);
            cr_assert(v, "%s on sm_%d: %s", m->name, ccs[k], err.msg);
            cr_assert_leq(v->min_cc, ccs[k] ? ccs[k] : 0, "%s's gated variant %s cannot run on sm_%d", m->name, v->name,
                          ccs[k]);
        }
    }
}

Test(core, a_gated_variant_row_names_one_variant_per_module_and_workload_pattern)
{
    char dir[] = "/tmp/kl_targets_XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/sm_90.csv", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "module,workload,metric,target,source\nm,fused-*,gated_variant,v3_f,x\nm,*,gated_variant,v1_a,x\n"
               "m,fused-2,gated_variant,v4_g,x\nm,w,bw_frac,0.5,y\n");
    fclose(f);
    struct kl_targets t;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_load(&t, dir, 90, &err), 0, "%s", err.msg);
    cr_assert_str_eq(kl_targets_gated(&t, "m"), "v1_a", "the module's gated variant is its '*' row, wherever it is");
    cr_assert_null(kl_targets_gated(&t, "other"));
    cr_assert_str_eq(kl_targets_gated_for(&t, "m", "w"), "v1_a");
    cr_assert_str_eq(kl_targets_gated_for(&t, "m", "fused-1"), "v3_f", "a workload its pattern matches");
    cr_assert_str_eq(kl_targets_gated_for(&t, "m", "fused-2"), "v4_g", "an exact row wins over a pattern");
    cr_assert_null(kl_targets_gated_for(&t, "other", "fused-1"));
    cr_assert_eq(t.count, 1, "the gated_variant rows are not numeric targets");
    kl_targets_free(&t);
    f = fopen(path, "a");
    fprintf(f, "m,*,gated_variant,v2_b,twice\n");
    fclose(f);
    cr_assert_neq(kl_targets_load(&t, dir, 90, &err), 0, "two gated variants for one module load");
    cr_assert(strstr(err.msg, ":6:"), "the error names the line: %s", err.msg);
    f = fopen(path, "w");
    fprintf(f, "module,workload,metric,target,source\nm,fused-*,gated_variant,v3_f,x\nm,fused-*,gated_variant,v4_g,x\n");
    fclose(f);
    cr_assert_neq(kl_targets_load(&t, dir, 90, &err), 0, "two gated variants for one pattern load");
    cr_assert(strstr(err.msg, ":3:"), "the error names the line: %s", err.msg);
    remove(path);
    rmdir(dir);
}

Test(core, numbers_on_the_command_line_are_digits_only)
{
    uint64_t v = 7;
    cr_assert(kl_parse_u64("0", &v) && v == 0);
    cr_assert(kl_parse_u64("18446744073709551615", &v) && v == UINT64_MAX);
    static const char *kbad[] = {"", "-1", "+1", " 1", "1 ", "abc", "1e3", "18446744073709551616"};
    for (size_t i = 0; i < sizeof kbad / sizeof kbad[0]; i++) cr_assert(!kl_parse_u64(kbad[i], &v), "'%s' accepted", kbad[i]);
}

/* ---- the command line (lab/core/args.h) ---- */

enum { T_FLAG, T_NAME, T_COUNT };
static const struct kl_opt ktest_opts[] = {
    [T_FLAG] = {"--flag", KL_OPT_FLAG, NULL, "a flag"},
    [T_NAME] = {"--name", KL_OPT_VALUE, "NAME", "a value"},
    [T_COUNT] = {"--count", KL_OPT_NUMBER, "N", "a number from 2 to 9", 2, 9},
    {0},
};
static const struct kl_command ktest_command = {
    .name = "test", .operands = "A [B]", .min_operands = 1, .max_operands = 2, .summary = "s", .opts = ktest_opts};

/* Parses the words of line; returns kl_args_parse's status. */
static int parse_line(const char *line, struct kl_optval *opt, const char **ops, int *nops)
{
    static char copy[256];
    static char *argv[16];
    snprintf(copy, sizeof copy, "%s", line);
    int argc = 0;
    for (char *w = strtok(copy, " "); w && argc < 16; w = strtok(NULL, " ")) argv[argc++] = strcmp(w, "''") ? w : (char *)"";
    return kl_args_parse(&ktest_command, argc, argv, opt, ops, nops);
}

Test(core, one_parser_reads_flags_values_numbers_and_operands_anywhere)
{
    struct kl_optval o[3];
    const char *ops[2];
    int n;
    cr_assert_eq(parse_line("a --count 3 --flag b --name=x", o, ops, &n), -1);
    cr_assert(o[T_FLAG].set && o[T_COUNT].number == 3 && strcmp(o[T_NAME].value, "x") == 0);
    cr_assert(n == 2 && strcmp(ops[0], "a") == 0 && strcmp(ops[1], "b") == 0);
    cr_assert_eq(parse_line("-- --flag", o, ops, &n), -1, "after --, an operand");
    cr_assert(n == 1 && strcmp(ops[0], "--flag") == 0 && !o[T_FLAG].set);
    cr_assert_eq(parse_line("a --bogus --help", o, ops, &n), 0, "--help wins wherever it stands");
    cr_assert_eq(parse_line("-h", o, ops, &n), 0);
}

Test(core, usage_errors_exit_2)
{
    struct kl_optval o[3];
    const char *ops[2];
    int n;
    static const char *kbad[] = {
        "",                 /* A missing */
        "a b c",            /* one operand too many */
        "a --bogus",        /* unknown option */
        "a --name",         /* no value */
        "a --name --flag",  /* a forgotten value, not a name "--flag" */
        "a --name ''",      /* an empty value */
        "a --count 1",      /* below the range */
        "a --count 10",     /* above it */
        "a --count -3",     /* not digits */
        "a --count 3x",     /* not digits */
        "a --flag=1",       /* a flag takes no value */
    };
    for (size_t i = 0; i < sizeof kbad / sizeof kbad[0]; i++)
        cr_assert_eq(parse_line(kbad[i], o, ops, &n), 2, "'%s' parsed", kbad[i]);
}

/* ---- checks that check nothing, and modules that cannot be checked (lab/core/verify.c) ---- */

/* A module of two outputs that the tests below fake: a CPU variant that agrees with the
 * reference, a variant no machine runs, and names as long as a module may give them. */
static char klong_a[700], klong_b[700];
static void *fake_make(int i, uint64_t seed, char *label, size_t len)
{
    if (i >= 2) return NULL;
    snprintf(label, len, "problem=%d", i);
    return calloc(1, 8);
}
static void fake_fill(struct kl_outputs *o, double base, const char *a, const char *b, bool with_b)
{
    kl_outputs_set(o, 0, a, KL_F32, false, 4);
    for (int k = 0; k < 4; k++) o->o[0].v[k] = base + k;
    if (!with_b) return;
    kl_outputs_set(o, 1, b, KL_F32, false, 4);
    for (int k = 0; k < 4; k++) o->o[1].v[k] = base - k;
}
static int fake_reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    return fake_fill(out, 1, "out", "lse", true), 0;
}
static int fake_run(const struct kl_variant *v, const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    return fake_fill(out, 1, "out", "lse", true), 0;
}
static void *fake_load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    fake_fill(expected, 1, "out", "lse", true);
    return calloc(1, 8);
}
static const struct kl_tensor_ops kfake_ops = {.load = fake_load, .make = fake_make, .reference = fake_reference,
                                              .run = fake_run, .free = free};
KL_MODULE(zz_fake, .summary = "check test", .min_cc = 0, .tensor = &kfake_ops);
KL_VARIANT(zz_fake, v0_cpu, no_launch, .min_cc = 0, .summary = "runs on the CPU");
KL_VARIANT(zz_fake, v1_future, no_launch, .min_cc = 1000, .summary = "needs an sm_1000");
KL_MODULE(zz_no_checker, .summary = "a module with neither tensor ops nor a checker", .min_cc = 0);
/* A module's own checker, writing what each variant gave. */
static int hook_skips(const struct kl_variant *v, uint64_t seed, FILE *log)
{
    fprintf(log, "SKIP zz_hook all %s needs 3 GPUs\n", v ? v->name : "v0_x");
    return 0;
}
KL_MODULE(zz_hook, .summary = "own checker", .min_cc = 0, .check = hook_skips);

/* The log's last line (lines are short here). */
static const char *last_line(FILE *f, char *line, size_t len)
{
    rewind(f);
    line[0] = 0;
    while (fgets(line, (int)len, f)) /* at the end fgets leaves the last line in place */
        ;
    return line;
}

Test(core, a_check_that_ran_no_variant_says_nothing_checked_last)
{
    struct kl_check_tally t;
    char line[1024];
    FILE *log = tmpfile();
    kl_check_run(kl_module_find("zz_fake"), NULL, 1, log, &t);
    cr_assert_eq(t.failures, 0);
    cr_assert_eq(t.judged, 2, "v0_cpu's two problems are judged, got %d", t.judged);
    cr_assert_eq(t.skipped, 1, "v1_future is one SKIP line");

    const struct kl_variant *future = kl_variant_find("zz_fake", "v1_future");
    cr_assert_eq(kl_check_module(kl_module_find("zz_fake"), future, 1, log), 0);
    const char want[] = "nothing checked: zz_fake/v1_future could not run here: ";
    cr_assert(strncmp(last_line(log, line, sizeof line), want, sizeof want - 1) == 0, "last line: %s", line);
    kl_check_run(kl_module_find("zz_fake"), future, 1, log, &t);
    cr_assert_eq(t.judged, 0);

    /* a module's own checker is counted by its lines: SKIP alone is nothing checked */
    kl_check_run(kl_module_find("zz_hook"), NULL, 1, log, &t);
    cr_assert(t.judged == 0 && t.skipped == 1 && strstr(t.why, "needs 3 GPUs"), "%d %d %s", t.judged, t.skipped, t.why);
    fclose(log);
}

Test(core, a_module_with_no_checker_is_a_failure)
{
    struct kl_check_tally t;
    FILE *log = tmpfile();
    kl_check_run(kl_module_find("zz_no_checker"), NULL, 1, log, &t);
    cr_assert_eq(t.failures, 1);
    cr_assert(strstr(t.why, "no checker"), "%s", t.why);
    fclose(log);
    struct kl_case c;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_case_open(&c, KL_SOURCE_DIR "/golden/rmsnorm/fp32_small", &err), 0, "%s", err.msg);
    struct kl_verdict v;
    kl_verify_case(kl_module_find("zz_no_checker"), &c, NULL, &v);
    cr_assert_eq(v.status, KL_FAIL, "a case nobody can judge is not a pass, nor a skip");
    kl_case_close(&c);
}

/* The verdict's message: long output names, one output wrong and one missing, must stay within
 * the buffer (a canary after it stays whole) and end in a terminated string. */
static int long_reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    return fake_fill(out, 50, klong_a, klong_b, false), 0; /* a wrong, b not produced */
}
static void *long_load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    memset(klong_a, 'a', sizeof klong_a - 1);
    memset(klong_b, 'b', sizeof klong_b - 1);
    fake_fill(expected, 1, klong_a, klong_b, true);
    return calloc(1, 8);
}
static const struct kl_tensor_ops klong_ops = {.load = long_load, .make = fake_make, .reference = long_reference,
                                              .run = fake_run, .free = free};
KL_MODULE(zz_long, .summary = "long names", .min_cc = 0, .tensor = &klong_ops);

Test(core, a_verdicts_message_never_overflows_whatever_the_names)
{
    struct kl_case c;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_case_open(&c, KL_SOURCE_DIR "/golden/rmsnorm/fp32_small", &err), 0, "%s", err.msg);
    struct {
        struct kl_verdict v;
        char canary[4096];
    } s;
    memset(s.canary, 0x5a, sizeof s.canary);
    kl_verify_case(kl_module_find("zz_long"), &c, NULL, &s.v);
    kl_case_close(&c);
    cr_assert_eq(s.v.status, KL_FAIL);
    cr_assert_lt(strlen(s.v.why), sizeof s.v.why);
    cr_assert(strstr(s.v.why, "aaaa"), "the first wrong output is named");
    for (size_t i = 0; i < sizeof s.canary; i++) cr_assert_eq((unsigned char)s.canary[i], 0x5a, "byte %zu past the verdict written", i);
}

/* KL_TEST_ONLY runs a suite in parts: a listed text anywhere in a name keeps it, the rest are skips
 * with the reason (kl_test_skip_reason, which every variant test asks first), and an unset or empty
 * list keeps everything. A CPU variant (min_cc 0) is left out the same way. */
Test(core, kl_test_only_keeps_the_named_variants_and_skips_the_rest)
{
    const struct kl_variant v17 = {.name = "v17_two_gather_warps"}, v16 = {.name = "v16_head_clusters"},
                            m6 = {.name = "mutant_v6_no_k_scale"};
    cr_assert(setenv("KL_TEST_ONLY", "v17_,mutant_v6_", 1) == 0);
    cr_assert(kl_test_wanted(v17.name) && kl_test_wanted(m6.name));
    cr_assert_not(kl_test_wanted(v16.name), "a name no text of the list is part of was kept");
    cr_assert_null(kl_test_skip_reason(&v17));
    const char *why = kl_test_skip_reason(&v16);
    cr_assert(why && strstr(why, "KL_TEST_ONLY"), "v16 left out without saying why: %s", why ? why : "(none)");
    cr_assert(setenv("KL_TEST_ONLY", "", 1) == 0);
    cr_assert(kl_test_wanted(v16.name) && kl_test_skip_reason(&v16) == NULL);
    cr_assert(unsetenv("KL_TEST_ONLY") == 0);
    cr_assert(kl_test_wanted(v16.name));
    cr_assert(setenv("KL_TEST_ONLY", ",v16_", 1) == 0);
    cr_assert(kl_test_wanted(v16.name) && !kl_test_wanted(v17.name), "an empty text before a comma hid the next one");
    cr_assert(unsetenv("KL_TEST_ONLY") == 0);
}

/* kl_rng_normal_pair's two halves are two independent N(0, 1) values: each has mean 0, variance 1 and
 * the normal's fourth moment 3, and the two are uncorrelated, also in their squares (E[a^2 b^2] = 1;
 * halves sharing their angle give 1/2, sharing their radius 2). 2^18 pairs: each statistic's standard
 * error is under 0.01. */
Test(core, a_normal_pair_is_two_independent_standard_normals)
{
    enum { N = 1 << 18 };
    struct kl_rng rng;
    kl_rng_seed(&rng, 11);
    double sum[2] = {0}, sq[2] = {0}, quart[2] = {0}, cross = 0, cross_sq = 0;
    for (int i = 0; i < N; i++) {
        double x[2];
        kl_rng_normal_pair(&rng, &x[0], &x[1]);
        for (int h = 0; h < 2; h++) sum[h] += x[h], sq[h] += x[h] * x[h], quart[h] += x[h] * x[h] * x[h] * x[h];
        cross += x[0] * x[1], cross_sq += x[0] * x[0] * x[1] * x[1];
    }
    for (int h = 0; h < 2; h++) {
        cr_assert(fabs(sum[h] / N) < 0.01, "half %d: mean %.4f", h, sum[h] / N);
        cr_assert(fabs(sq[h] / N - 1) < 0.02, "half %d: variance %.4f", h, sq[h] / N);
        cr_assert(fabs(quart[h] / N - 3) < 0.1, "half %d: fourth moment %.4f", h, quart[h] / N);
    }
    cr_assert(fabs(cross / N) < 0.01, "the halves correlate: E[ab] = %.4f", cross / N);
    cr_assert(fabs(cross_sq / N - 1) < 0.05, "the halves' squares correlate: E[a^2 b^2] = %.4f", cross_sq / N);
}
