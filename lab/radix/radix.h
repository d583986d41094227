/* A radix tree of token ids: SGLang's RadixAttention prefix cache, in C.
 *
 * A serving engine keeps the KV of every computed prefix; a new request walks this tree to
 * find the longest cached prefix of its tokens and prefills only the rest. The walk runs on
 * the CPU between GPU steps, so its cost is latency added to every request.
 *
 * Semantics (lab/CONTRACTS.md section 4, as in SGLang's RadixCache; reference/radix.c is the model):
 * - Keys are cut to whole pages (len - len % page_size). A node holds >= 1 whole pages; the
 *   children of a node are told apart by their first page.
 * - match, insert, lock and unlock walk the longest cached prefix of the key, splitting the
 *   node where that prefix ends inside one (at a page boundary), so the prefix is a path of
 *   whole nodes. insert adds the rest of the key as one new leaf.
 * - Every call advances a logical clock by one (queries included: one trace line, one tick)
 *   and stamps every node it walks with the new time; a new leaf is stamped too.
 * - Split: the ORIGINAL node becomes the suffix half (it keeps its lock count, its children
 *   and its place in the eviction queue); the prefix half is a new node with a copy of the
 *   lock count. Both halves carry the op's time: SGLang stamps the child it walks before
 *   splitting it, and its new prefix node is born "now".
 * - Within one op, stamps are ordered as the op makes them, because SGLang's clock
 *   (time.monotonic(), read once per node) orders them so: the walk from the root down, then a
 *   split's new prefix, then the new leaf. A node's seq is its stamp's place among all stamps.
 * - evict frees unlocked leaves, smallest (stamp, seq) first: least recently used, and among
 *   leaves stamped by the same op the one stamped first. (Only two leaves can share a stamp:
 *   the suffix half of a split and the new leaf of the insert that split it; the suffix half,
 *   stamped by the walk, goes first.) A parent left childless and unlocked becomes a leaf and
 *   can be evicted by the same call.
 *
 * Layout, chosen for the match walk (each step is: hash the key's next page, find the child,
 * compare its tokens):
 * - A node is ONE allocation: an 80-byte header followed by its tokens, so the compare starts
 *   on lines the header fetch already brought in and then streams forward (prefetch-friendly);
 *   no second pointer chase per node.
 * - Children live in a table keyed by a 64-bit hash of their first page, stored next to the
 *   child pointer: finding a child never touches the siblings. Up to two children (most
 *   internal nodes: a split makes exactly two) sit inline in the parent's header; more go to
 *   an open-addressing table (linear probing, load <= 1/2).
 * - Eviction order is a lazy min-heap of (stamp, seq, node) entries: a walk only writes
 *   the stamps of the nodes it passes, never touches the heap. evict pops; an entry whose
 *   node was restamped since is pushed back with the new stamp, one whose node is no longer
 *   an unlocked leaf is dropped. Each node has at most one entry, so the heap never points
 *   at freed memory.
 * - evict frees the node (header and tokens) at once.
 * Not thread-safe: one tree belongs to one thread (SGLang's scheduler loop). */
#ifndef KL_RADIX_H
#define KL_RADIX_H

#include <stddef.h>
#include <stdint.h>

#include "../../kernels/radix/radix_compare.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_radix;

/* What the walks did, summed since kl_radix_new (or kl_radix_stats_reset): the match-walk
 * story the guide tells. */
struct kl_radix_stats {
    uint64_t walks;           /* insert/match/lock/unlock calls */
    uint64_t nodes_visited;   /* child nodes entered (their first page matched) */
    uint64_t tokens_compared; /* tokens handed to the compare function, first pages included */
    uint64_t probes;          /* child-table slots examined */
    uint64_t lines_touched;   /* estimate: distinct 64-byte lines of headers, tokens and child
                                 tables the walks read (a cold tree misses on each) */
    uint64_t splits;
    uint64_t evicted_nodes;
};

/* page_size >= 1; cmp is the key comparison (a radix variant; NULL = kl_radix_cmp_scalar).
 * Returns NULL for page_size < 1. Dies on out-of-memory. */
struct kl_radix *kl_radix_new(int page_size, kl_radix_cmp_fn cmp);
void kl_radix_free(struct kl_radix *t);

/* Adds key; returns how many tokens of the (page-cut) key were already cached. */
size_t kl_radix_insert(struct kl_radix *t, const int32_t *key, size_t n);
/* Returns the length of the longest cached prefix of the (page-cut) key. */
size_t kl_radix_match(struct kl_radix *t, const int32_t *key, size_t n);
/* Adds / removes one reference on every node of the walked path; returns the path's length in
 * tokens. unlock returns -1 (and changes no lock count) when a node on the path has none. */
long kl_radix_lock(struct kl_radix *t, const int32_t *key, size_t n);
long kl_radix_unlock(struct kl_radix *t, const int32_t *key, size_t n);
/* Frees unlocked leaves, least recently used first, until >= tokens are freed or none is
 * left; returns the tokens freed. */
size_t kl_radix_evict(struct kl_radix *t, size_t tokens);
/* Tokens in the tree, and in nodes whose lock count is zero. */
void kl_radix_size(struct kl_radix *t, size_t *total, size_t *evictable);

/* The pieces match would compare for key, read-only: no stamps, no splits, no clock tick.
 * Fills up to max segments (a node's tokens, where in the key they start, how many match);
 * returns how many it found, *matched = the prefix length. The bench times memcmp over
 * exactly these bytes: memcmp_frac's denominator. */
struct kl_radix_seg {
    const int32_t *tokens;
    size_t key_off, len;
};
size_t kl_radix_peek(const struct kl_radix *t, const int32_t *key, size_t n, struct kl_radix_seg *segs, size_t max,
                     size_t *matched);
/* Swaps the compare function (the bench runs every variant over one tree). */
void kl_radix_set_cmp(struct kl_radix *t, kl_radix_cmp_fn cmp);

int kl_radix_page_size(const struct kl_radix *t);
size_t kl_radix_node_count(const struct kl_radix *t); /* root excluded */
size_t kl_radix_bytes(const struct kl_radix *t);      /* heap bytes held (nodes, tables, queue) */
void kl_radix_stats(const struct kl_radix *t, struct kl_radix_stats *out);
void kl_radix_stats_reset(struct kl_radix *t);

/* Calls fn for every node but the root, parents before children: path = the tokens from the
 * root to the end of this node (path_len of them), node_len = this node's share. */
typedef void (*kl_radix_visit_fn)(void *ctx, const int32_t *path, size_t path_len, size_t node_len, long lock,
                                  uint64_t stamp, uint64_t seq);
void kl_radix_visit(const struct kl_radix *t, kl_radix_visit_fn fn, void *ctx);

/* Checks every invariant (child tables, parent links, counters, queue entries); returns 0, or
 * -1 with a description in msg. For the tests and the fuzzer. */
int kl_radix_validate(const struct kl_radix *t, char *msg, size_t len);

/* Tests only: make every split's shrink of the suffix node move it (as realloc may), so the
 * relinking path runs. */
void kl_radix_debug_force_move(struct kl_radix *t, int on);

#ifdef __cplusplus
}
#endif
#endif
