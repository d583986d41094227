/* Radix traces (lab/CONTRACTS.md section 4): trace.jsonl, one operation a line with its expectation.
 *
 *   {"op":"insert","key":[..],"expect":P}   P = tokens of the key already cached
 *   {"op":"match","key":[..],"expect":M}    M = longest cached prefix
 *   {"op":"lock","key":[..]}  {"op":"unlock","key":[..]}
 *   {"op":"evict","tokens":N,"expect":E}    E = tokens freed
 *   {"op":"size","expect":{"total":T,"evictable":V}}
 *
 * Parsing is strict: a line that is not a JSON object, an unknown op, a missing or mistyped
 * field, a token outside int32, a negative count: each is an error naming the file and line
 * ("golden/radix/x/trace.jsonl:12: bad JSON"). Blank lines are skipped; keys the format does
 * not name are ignored. Replaying checks every expectation and stops at the first miss
 * ("...trace.jsonl:12: match expected 8, got 4"); an unlock of a path that holds no lock is
 * a miss too. */
#ifndef KL_RADIX_TRACE_H
#define KL_RADIX_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../kernels/radix/radix_compare.h"
#include "../core/check.h"
#include "../core/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kl_radix_opcode { KL_RADIX_INSERT, KL_RADIX_MATCH, KL_RADIX_LOCK, KL_RADIX_UNLOCK, KL_RADIX_EVICT, KL_RADIX_SIZE };

struct kl_radix_op {
    enum kl_radix_opcode code;
    int line;                                 /* 1-based line in the file */
    size_t key_off, n;                        /* the key: tokens[key_off, key_off + n) of the trace's pool */
    long long tokens;                         /* evict: tokens asked for */
    long long expect;                         /* insert/match/evict; -1 where the op has none */
    long long expect_total, expect_evictable; /* size */
};

struct kl_radix_trace {
    char name[1024]; /* file name used in messages */
    int page_size;
    size_t nops, cap_ops;
    struct kl_radix_op *ops;
    size_t ntok, cap_tok;
    int32_t *tok; /* every key's tokens, back to back */
};

/* Parses text (need not be NUL-terminated). Returns 0, or -1 with "<name>:<line>: <problem>". */
int kl_radix_trace_parse(const char *text, size_t len, const char *name, int page_size, struct kl_radix_trace *tr,
                         struct kl_err *err);
/* Reads and parses a file (the message names the path): a regular file of at most 256 MiB,
 * lines of at most 4 MiB; a FIFO, a device or a directory is an error, never a wait. */
int kl_radix_trace_load(const char *path, int page_size, struct kl_radix_trace *tr, struct kl_err *err);
void kl_radix_trace_free(struct kl_radix_trace *tr);
/* Appends an op (the generator and the fuzzer build traces in memory). */
void kl_radix_trace_add(struct kl_radix_trace *tr, enum kl_radix_opcode code, const int32_t *key, size_t n,
                        long long tokens);

/* One implementation of the radix cache behind a common face: the reference, or the library
 * driven by one variant's compare. */
struct kl_radix_impl {
    const char *name; /* "reference" or the variant's name */
    void *state;
    int page_size;
    kl_radix_cmp_fn cmp; /* NULL for the reference */
};
/* cmp == NULL: the reference (reference/radix.c); else the library driven by cmp. name is
 * kept for messages. Fails only for page_size < 1. */
int kl_radix_impl_open(struct kl_radix_impl *im, const char *name, kl_radix_cmp_fn cmp, int page_size,
                       struct kl_err *err);
/* The same for a registered variant (v == NULL: the reference). */
int kl_radix_impl_open_variant(struct kl_radix_impl *im, const struct kl_variant *v, int page_size, struct kl_err *err);
void kl_radix_impl_close(struct kl_radix_impl *im);

/* What one op returned: insert/match/lock/unlock: tokens (unlock: -1 = not locked);
 * evict: tokens freed; size: total and evictable. */
struct kl_radix_result {
    long long value, total, evictable;
};
void kl_radix_impl_apply(struct kl_radix_impl *im, const struct kl_radix_trace *tr, const struct kl_radix_op *op,
                         struct kl_radix_result *r);
/* An order-independent hash of the whole tree: every node's full path, length, lock count,
 * stamp and stamp order (seq). Two implementations agree on it iff their trees are equal. */
uint64_t kl_radix_impl_digest(const struct kl_radix_impl *im);
/* kl_radix_validate for the library (0 for the reference). */
int kl_radix_impl_validate(const struct kl_radix_impl *im, char *msg, size_t len);

/* Replays tr on im, checking each expectation. Returns 0, or -1 with "<name>:<line>: ..."; *got and
 * *want (if not NULL) get the first mismatching values. */
int kl_radix_trace_replay(const struct kl_radix_trace *tr, struct kl_radix_impl *im, struct kl_err *err, long long *got,
                          long long *want);
/* Replays tr on a and b side by side, ignoring expectations: after every op both must return
 * the same, hold trees with the same digest, and (when validate) pass kl_radix_validate.
 * Returns 0, or -1 naming the op ("op 17 (line 17, match): reference 8, v1_simd 4"). */
int kl_radix_trace_diff(const struct kl_radix_trace *tr, struct kl_radix_impl *a, struct kl_radix_impl *b,
                        bool validate, struct kl_err *err);

/* A seeded random trace for the property tests and `kernlab check`: requests that share
 * prefixes from a small vocabulary (so splits, page-boundary divergences and repeats are
 * common), locked while they "run" and unlocked later, matches, evictions of every size,
 * empty and sub-page keys, and a few stray locks/unlocks. Expectations are left at -1. */
void kl_radix_trace_random(struct kl_radix_trace *tr, uint64_t seed, int page_size, size_t nops);

/* verify hook of the module: replays <case>/trace.jsonl on the reference (v == NULL) or on v. */
void kl_radix_verify(const struct kl_case *c, const struct kl_variant *v, struct kl_verdict *out);

#ifdef __cplusplus
}
#endif
#endif
