/* The radix cache reference: the semantics of lab/CONTRACTS.md section 4 in the plainest C.
 *
 * Deliberately naive, so that it is easy to believe: children are a linked list scanned in
 * order, keys are compared one token at a time, the tree's sizes are recounted by walking it.
 * Most of it is O(tree) where the library is O(path). Evict alone is not naive: looking at
 * every node once per leaf freed made it quadratic (216k leaves: well over 20 s), too slow to
 * verify a big trace, so it keeps the evictable leaves in a binary heap ordered by the very
 * rule below, and the sibling list is doubly linked so a leaf leaves it in O(1).
 *
 * The rules (the same words as lab/radix/radix.h):
 * - keys are cut to whole pages; a node holds whole pages; siblings differ in their first page;
 * - a walk follows the longest cached prefix and splits the node where it ends inside one;
 *   insert hangs the rest of the key under the walk's last node as one new leaf;
 * - every op advances the clock by one; every node a walk enters is stamped with the new
 *   time, and so are both halves of a split and the new leaf;
 * - within one op, stamps are ordered as the op makes them (SGLang reads its monotonic clock
 *   once per node): the walk from the root down, then a split's new prefix half, then the new
 *   leaf; seq numbers every stamp in that order, across ops;
 * - a split keeps the original node as the suffix half (lock, children); the prefix half is a
 *   new node with a copy of the lock count;
 * - evict frees, one at a time, the unlocked leaf with the smallest (stamp, seq): least
 *   recently stamped, and of two stamped by one op the one stamped first, until enough tokens
 *   are freed or none is left. */
#include "radix.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rnode {
    int32_t *tokens;
    size_t len;
    long lock;
    uint64_t stamp, seq;
    struct rnode *parent, *first_child, *next_sibling, *prev_sibling;
};

struct kl_radix_ref {
    struct rnode root;
    size_t page;
    uint64_t clock, next_seq;
};

static void *must(void *p)
{
    if (!p) {
        fprintf(stderr, "kernlab: reference radix: out of memory\n");
        abort();
    }
    return p;
}

static struct rnode *new_node(const int32_t *tokens, size_t len)
{
    struct rnode *x = must(calloc(1, sizeof *x));
    x->tokens = must(malloc(len * sizeof(int32_t) + 1));
    memcpy(x->tokens, tokens, len * sizeof(int32_t));
    x->len = len;
    return x;
}

static void add_child(struct rnode *parent, struct rnode *child)
{
    child->parent = parent;
    child->prev_sibling = NULL;
    child->next_sibling = parent->first_child;
    if (parent->first_child) parent->first_child->prev_sibling = child;
    parent->first_child = child;
}

static void remove_child(struct rnode *parent, struct rnode *child)
{
    if (child->prev_sibling) child->prev_sibling->next_sibling = child->next_sibling;
    else parent->first_child = child->next_sibling;
    if (child->next_sibling) child->next_sibling->prev_sibling = child->prev_sibling;
    child->prev_sibling = child->next_sibling = NULL;
}

/* Number of leading tokens equal in a and b, counting whole pages only. */
static size_t common_pages(const int32_t *a, const int32_t *b, size_t n, size_t page)
{
    size_t i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i - i % page;
}

/* The prefix half becomes a new node in `child`'s place; `child` keeps the suffix. */
static struct rnode *split(struct kl_radix_ref *t, struct rnode *child, size_t at, uint64_t now)
{
    struct rnode *prefix = new_node(child->tokens, at);
    prefix->lock = child->lock;
    prefix->stamp = now;
    prefix->seq = t->next_seq++;
    struct rnode *parent = child->parent;
    remove_child(parent, child);
    add_child(parent, prefix);

    int32_t *rest = must(malloc((child->len - at) * sizeof(int32_t)));
    memcpy(rest, child->tokens + at, (child->len - at) * sizeof(int32_t));
    free(child->tokens);
    child->tokens = rest;
    child->len -= at;
    child->stamp = now;
    add_child(prefix, child);
    return prefix;
}

/* The walk every op but evict and size shares: follow the longest cached prefix, stamping
 * each node entered; split where the prefix ends inside a node. */
static size_t walk(struct kl_radix_ref *t, const int32_t *key, size_t n, uint64_t now, struct rnode **last)
{
    struct rnode *node = &t->root;
    size_t done = 0;
    while (done < n) {
        struct rnode *next = NULL;
        for (struct rnode *c = node->first_child; c; c = c->next_sibling)
            if (common_pages(c->tokens, key + done, t->page, t->page) == t->page) next = c;
        if (!next) break;
        size_t rest = n - done;
        size_t m = common_pages(next->tokens, key + done, next->len < rest ? next->len : rest, t->page);
        next->stamp = now;
        next->seq = t->next_seq++;
        done += m;
        if (m < next->len) {
            node = split(t, next, m, now);
            break;
        }
        node = next;
    }
    *last = node;
    return done;
}

struct kl_radix_ref *kl_radix_ref_new(int page_size)
{
    if (page_size < 1) return NULL;
    struct kl_radix_ref *t = must(calloc(1, sizeof *t));
    t->page = (size_t)page_size;
    t->next_seq = 1;
    return t;
}

static void free_subtree(struct rnode *x)
{
    /* Iterative: unhook children one at a time, so depth costs no stack. */
    while (x->first_child) {
        struct rnode *c = x->first_child;
        if (c->first_child) { /* descend: move c's children up to x, then free c */
            struct rnode *last = c->first_child;
            while (last->next_sibling)
                last = last->next_sibling;
            last->next_sibling = c->next_sibling;
            x->first_child = c->first_child;
        } else {
            x->first_child = c->next_sibling;
        }
        free(c->tokens);
        free(c);
    }
}

void kl_radix_ref_free(struct kl_radix_ref *t)
{
    if (!t) return;
    free_subtree(&t->root);
    free(t);
}

size_t kl_radix_ref_insert(struct kl_radix_ref *t, const int32_t *key, size_t n)
{
    n -= n % t->page;
    uint64_t now = ++t->clock;
    struct rnode *last;
    size_t m = walk(t, key, n, now, &last);
    if (m < n) {
        struct rnode *leaf = new_node(key + m, n - m);
        leaf->stamp = now;
        leaf->seq = t->next_seq++;
        add_child(last, leaf);
    }
    return m;
}

size_t kl_radix_ref_match(struct kl_radix_ref *t, const int32_t *key, size_t n)
{
    n -= n % t->page;
    struct rnode *last;
    return walk(t, key, n, ++t->clock, &last);
}

long kl_radix_ref_lock(struct kl_radix_ref *t, const int32_t *key, size_t n)
{
    n -= n % t->page;
    struct rnode *last;
    size_t m = walk(t, key, n, ++t->clock, &last);
    for (struct rnode *x = last; x != &t->root; x = x->parent)
        x->lock++;
    return (long)m;
}

long kl_radix_ref_unlock(struct kl_radix_ref *t, const int32_t *key, size_t n)
{
    n -= n % t->page;
    struct rnode *last;
    size_t m = walk(t, key, n, ++t->clock, &last);
    for (struct rnode *x = last; x != &t->root; x = x->parent)
        if (x->lock == 0) return -1; /* nothing changes: not even one count */
    for (struct rnode *x = last; x != &t->root; x = x->parent)
        x->lock--;
    return (long)m;
}

/* Evict's order: a before b when a was stamped earlier, or by the same op and earlier in it.
 * Stamp numbers are unique, so this is a total order and the heap's choice is exactly "the
 * unlocked leaf with the smallest (stamp, seq)". */
static bool older(const struct rnode *a, const struct rnode *b)
{
    return a->stamp < b->stamp || (a->stamp == b->stamp && a->seq < b->seq);
}

/* A binary min-heap of evictable leaves under `older`. */
struct heap {
    struct rnode **x;
    size_t n, cap;
};

static void heap_push(struct heap *h, struct rnode *node)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->x = must(realloc(h->x, h->cap * sizeof *h->x));
    }
    size_t i = h->n++;
    for (; i > 0 && older(node, h->x[(i - 1) / 2]); i = (i - 1) / 2)
        h->x[i] = h->x[(i - 1) / 2];
    h->x[i] = node;
}

static struct rnode *heap_pop(struct heap *h)
{
    if (h->n == 0) return NULL;
    struct rnode *top = h->x[0], *last = h->x[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && older(h->x[c + 1], h->x[c])) c++;
        if (!older(h->x[c], last)) break;
        h->x[i] = h->x[c];
        i = c;
    }
    if (h->n) h->x[i] = last;
    return top;
}

static bool evictable(const struct rnode *x) { return !x->first_child && x->lock == 0; }

static void push_evictable_leaves(struct rnode *x, struct heap *h)
{
    for (struct rnode *c = x->first_child; c; c = c->next_sibling) {
        if (evictable(c)) heap_push(h, c);
        push_evictable_leaves(c, h);
    }
}

size_t kl_radix_ref_evict(struct kl_radix_ref *t, size_t tokens)
{
    ++t->clock;
    size_t freed = 0;
    struct heap h = {0};
    if (tokens > 0) push_evictable_leaves(&t->root, &h);
    while (freed < tokens) {
        struct rnode *victim = heap_pop(&h);
        if (!victim) break;
        struct rnode *parent = victim->parent;
        freed += victim->len;
        remove_child(parent, victim);
        free(victim->tokens);
        free(victim);
        /* Evict stamps nothing and locks nothing, so the only leaf it can add is a parent it
         * left childless. */
        if (parent != &t->root && evictable(parent)) heap_push(&h, parent);
    }
    free(h.x);
    return freed;
}

static void count(const struct rnode *x, size_t *total, size_t *evictable)
{
    for (const struct rnode *c = x->first_child; c; c = c->next_sibling) {
        *total += c->len;
        if (c->lock == 0) *evictable += c->len;
        count(c, total, evictable);
    }
}

void kl_radix_ref_size(struct kl_radix_ref *t, size_t *total, size_t *evictable)
{
    ++t->clock;
    size_t tot = 0, ev = 0;
    count(&t->root, &tot, &ev);
    if (total) *total = tot;
    if (evictable) *evictable = ev;
}

struct visit_ctx {
    void (*fn)(void *, const int32_t *, size_t, size_t, long, uint64_t, uint64_t);
    void *ctx;
    int32_t *path;
    size_t cap;
};

static void visit(const struct rnode *x, size_t plen, struct visit_ctx *v)
{
    for (const struct rnode *c = x->first_child; c; c = c->next_sibling) {
        size_t end = plen + c->len;
        if (end > v->cap) {
            v->cap = end * 2;
            v->path = must(realloc(v->path, v->cap * sizeof(int32_t)));
        }
        memcpy(v->path + plen, c->tokens, c->len * sizeof(int32_t));
        v->fn(v->ctx, v->path, end, c->len, c->lock, c->stamp, c->seq);
        visit(c, end, v);
    }
}

void kl_radix_ref_visit(const struct kl_radix_ref *t,
                        void (*fn)(void *ctx, const int32_t *path, size_t path_len, size_t node_len, long lock,
                                   uint64_t stamp, uint64_t seq),
                        void *ctx)
{
    struct visit_ctx v = {fn, ctx, NULL, 0};
    visit(&t->root, 0, &v);
    free(v.path);
}
