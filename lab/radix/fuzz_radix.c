/* libFuzzer target for the radix trace parser and the tree.
 *
 * An input is either
 *   - trace text (what golden/radix/<case>/trace.jsonl holds): it must parse or fail with a
 *     "file:line: ..." message, never crash; a trace that parses is replayed on the
 *     reference and on the library (v1_simd at page 1, v0_scalar at page 4), op by op,
 *     comparing results, sizes and whole-tree digests and checking the tree's invariants
 *     after every op: any difference aborts (a finding);
 *   - or, when it starts with the byte 0xB1, a compact op stream (page size, then ops of a
 *     few bytes over a 4-token alphabet), which reaches deep tree states in few bytes.
 *
 * Build (extra.cmake does it, option KL_FUZZ):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined ... lab/radix/fuzz_radix.c ...
 * Run:  build/radix_fuzzer -max_total_time=60 build/radix_fuzz_corpus golden/radix/<case>...
 *
 * Built with -DKL_FUZZ_STANDALONE instead, it is a plain program (ctest radix_leaks, under
 * ASan/LeakSanitizer or valgrind): it runs each file named on the command line through the
 * same entry point, then long random traces and a churn, and frees everything. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/radix/radix.h"
#include "lab/radix/trace.h"

static void diff_or_die(const struct kl_radix_trace *tr, int page, const char *name, kl_radix_cmp_fn cmp)
{
    struct kl_radix_impl ref, lib;
    struct kl_err err = {{0}};
    kl_radix_impl_open(&ref, "reference", NULL, page, &err);
    kl_radix_impl_open(&lib, name, cmp, page, &err);
    kl_radix_debug_force_move(lib.state, page > 1); /* exercise the relinking of moved nodes */
    int rc = kl_radix_trace_diff(tr, &ref, &lib, true, &err);
    kl_radix_impl_close(&ref);
    kl_radix_impl_close(&lib);
    if (rc) {
        fprintf(stderr, "fuzz_radix: page %d: %s\n", page, err.msg);
        abort();
    }
}

static int binary_ops(const uint8_t *d, size_t n)
{
    if (n < 2) return 0;
    int page = 1 + d[1] % 5;
    struct kl_radix_trace tr;
    memset(&tr, 0, sizeof tr);
    snprintf(tr.name, sizeof tr.name, "fuzz");
    tr.page_size = page;
    int32_t key[64];
    static const int32_t alphabet[4] = {0, 1, -1, 65536};
    for (size_t i = 2; i + 1 < n && tr.nops < 4096;) {
        uint8_t op = d[i++] % 6, len = d[i++] % 64;
        size_t k = 0;
        for (; k < len && i < n; k++, i++)
            key[k] = alphabet[d[i] & 3];
        kl_radix_trace_add(&tr, (enum kl_radix_opcode)op, key, op <= KL_RADIX_UNLOCK ? k : 0, (long long)len);
    }
    diff_or_die(&tr, page, "v1_simd", kl_radix_cmp_simd);
    kl_radix_trace_free(&tr);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size && data[0] == 0xB1) return binary_ops(data, size);
    struct kl_radix_trace tr;
    struct kl_err err = {{0}};
    if (kl_radix_trace_parse((const char *)data, size, "fuzz.jsonl", 1, &tr, &err) != 0) {
        if (strncmp(err.msg, "fuzz.jsonl:", 11) != 0) { /* every parse error names file:line */
            fprintf(stderr, "fuzz_radix: parse error without a line: %s\n", err.msg);
            abort();
        }
        return 0;
    }
    /* Replay with the expectations too (the message path), then the op-by-op diffs. */
    struct kl_radix_impl lib;
    kl_radix_impl_open(&lib, "v1_simd", kl_radix_cmp_simd, 1, &err);
    long long got, want;
    if (kl_radix_trace_replay(&tr, &lib, &err, &got, &want) != 0 && strncmp(err.msg, "fuzz.jsonl:", 11) != 0) abort();
    kl_radix_impl_close(&lib);
    tr.page_size = 1;
    diff_or_die(&tr, 1, "v1_simd", kl_radix_cmp_simd);
    tr.page_size = 4;
    diff_or_die(&tr, 4, "v0_scalar", kl_radix_cmp_scalar);
    kl_radix_trace_free(&tr);
    return 0;
}

#ifdef KL_FUZZ_STANDALONE
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "fuzz_radix: %s: cannot open\n", argv[i]);
            return 2;
        }
        size_t cap = 1 << 16, n = 0, got;
        uint8_t *buf = malloc(cap);
        while ((got = fread(buf + n, 1, cap - n, f)) > 0)
            if ((n += got) == cap) buf = realloc(buf, cap *= 2);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    /* Long random traces at several page sizes: splits, moves, table growth, the heap. */
    for (int page = 1; page <= 16; page *= 2) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            struct kl_radix_trace tr;
            kl_radix_trace_random(&tr, seed * 77 + (uint64_t)page, page, 3000);
            diff_or_die(&tr, page, "v1_simd", kl_radix_cmp_simd);
            kl_radix_trace_free(&tr);
        }
    }
    /* Churn on a wider tree: 2000 keys under 16 shared prefixes, evicting as it goes. */
    struct kl_radix *t = kl_radix_new(1, kl_radix_cmp_simd);
    int32_t key[200];
    for (int i = 0; i < 2000; i++) {
        for (int k = 0; k < 200; k++)
            key[k] = k < 100 ? (i % 16) * 1000 + k : i * 7 + k;
        kl_radix_insert(t, key, 100 + (size_t)(i % 100));
        if (i % 3 == 0) kl_radix_lock(t, key, 120);
        if (i % 3 == 0 && i >= 30) {
            for (int k = 0; k < 200; k++)
                key[k] = k < 100 ? ((i - 30) % 16) * 1000 + k : (i - 30) * 7 + k;
            kl_radix_unlock(t, key, 120);
        }
        kl_radix_evict(t, (size_t)(i % 50));
    }
    char msg[256];
    int rc = kl_radix_validate(t, msg, sizeof msg);
    if (rc) fprintf(stderr, "fuzz_radix: churn: %s\n", msg);
    kl_radix_free(t);
    printf("fuzz_radix: %d files, random traces and churn: %s\n", argc - 1, rc ? "FAIL" : "ok");
    return rc ? 1 : 0;
}
#endif
