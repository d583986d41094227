/* The radix tree (see radix.h for the semantics and the layout, and why).
 *
 * Hot path: walk(). Per node it does one hash of the key's next page (computed from the key,
 * which is already in cache), one child-table probe (inline in the parent's header for <= 2
 * children, else one line of the parent's table), then the variant's compare over the
 * child's tokens, which start right after the child's 80-byte header. Nothing else is read
 * or written but the child's stamp. */
#include "radix.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node;

struct slot {
    uint64_t hash;      /* hash of the child's first page (page_hash) */
    struct node *child; /* NULL: empty */
};

struct node {
    uint32_t len; /* tokens, a multiple of page_size (root: 0) */
    int32_t lock; /* references from lock() */
    uint32_t nchild;
    uint32_t cap;     /* 0: children inline (at most 2); else table size, a power of two */
    uint32_t in_heap; /* 1: the eviction heap holds (exactly) one entry for this node */
    uint32_t pad_;
    uint64_t stamp; /* logical time of the last op that walked it */
    uint64_t seq;   /* the place of that stamp among all stamps: the tie-break within one op */
    struct node *parent;
    union {
        struct slot inl[2];
        struct slot *table;
    } kids;
    int32_t tokens[]; /* len tokens, right after the header */
};

#define NODE_BYTES(len) (offsetof(struct node, tokens) + (size_t)(len) * sizeof(int32_t))

struct hent { /* an eviction-heap entry: the key it was pushed with, and the node */
    uint64_t stamp, seq;
    struct node *n;
};

struct kl_radix {
    struct node *root;
    int page;
    kl_radix_cmp_fn cmp;
    uint64_t clock, next_seq;
    size_t total, evictable, nodes, bytes;
    struct hent *heap;
    size_t heap_n, heap_cap;
    struct kl_radix_stats st;
    int force_move;
};

/* ---- memory ---- */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "kernlab: radix: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "kernlab: radix: out of memory (%zu bytes)\n", n * size);
        abort();
    }
    return p;
}

static struct node *node_new(struct kl_radix *t, const int32_t *tokens, size_t len)
{
    struct node *x = xmalloc(NODE_BYTES(len));
    memset(x, 0, offsetof(struct node, tokens));
    x->len = (uint32_t)len;
    if (len) memcpy(x->tokens, tokens, len * sizeof(int32_t));
    t->bytes += NODE_BYTES(len);
    return x;
}

static void node_free(struct kl_radix *t, struct node *x)
{
    if (x->cap) {
        free(x->kids.table);
        t->bytes -= x->cap * sizeof(struct slot);
    }
    t->bytes -= NODE_BYTES(x->len);
    free(x);
}

/* ---- hashing the first page ---- */

/* murmur3's finalizer: a bijection on 64-bit values, so for page_size 1 (a zero-extended
 * token) distinct first tokens never collide. */
static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Pages of more than one token: two tokens per 64-bit word, four independent multiply chains
 * (a page of 16 costs two dependent multiplies, not sixteen), folded by the finalizer. Each
 * step (h ^ w) * odd is a bijection of w, so pages that differ in one word never collide;
 * the rest is left to page_eq, which settles every hash hit. */
static inline uint64_t page_hash(const int32_t *p, int page)
{
    if (page == 1) return mix64((uint32_t)p[0]);
    uint64_t a = 0x9e3779b97f4a7c15ULL, b = 0xbf58476d1ce4e5b9ULL, c = 0x94d049bb133111ebULL, d = 0x2545f4914f6cdd1dULL;
    int i = 0;
    for (; i + 8 <= page; i += 8) {
        uint64_t w[4];
        memcpy(w, p + i, sizeof w);
        a = (a ^ w[0]) * 0xff51afd7ed558ccdULL;
        b = (b ^ w[1]) * 0xc4ceb9fe1a85ec53ULL;
        c = (c ^ w[2]) * 0x880355f21e6d1965ULL;
        d = (d ^ w[3]) * 0xd6e8feb86659fd93ULL;
    }
    for (; i < page; i++)
        a = (a ^ (uint32_t)p[i]) * 0x100000001b3ULL + (a >> 29);
    return mix64(a ^ ((b << 17) | (b >> 47)) ^ ((c << 31) | (c >> 33)) ^ ((d << 47) | (d >> 17)));
}

static inline bool page_eq(const int32_t *a, const int32_t *b, int page)
{
    for (int i = 0; i < page; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* ---- child tables ---- */

static inline struct slot *kids_slots(struct node *x)
{
    return x->cap ? x->kids.table : x->kids.inl;
}

/* The child whose first page equals key[0, page), or NULL. The hash filters; the page compare
 * settles collisions (impossible for page_size 1, rare otherwise). */
static struct node *kids_find(struct kl_radix *t, struct node *x, uint64_t h, const int32_t *key)
{
    if (x->cap == 0) {
        for (uint32_t i = 0; i < x->nchild; i++) {
            t->st.probes++;
            if (x->kids.inl[i].hash == h && page_eq(x->kids.inl[i].child->tokens, key, t->page))
                return x->kids.inl[i].child;
        }
        return NULL;
    }
    t->st.lines_touched++; /* the table line the probe lands on */
    size_t mask = x->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct slot *s = &x->kids.table[i];
        t->st.probes++;
        if (!s->child) return NULL;
        if (s->hash == h && page_eq(s->child->tokens, key, t->page)) return s->child;
    }
}

static void table_put(struct slot *table, size_t cap, uint64_t h, struct node *child)
{
    size_t mask = cap - 1, i = h & mask;
    while (table[i].child)
        i = (i + 1) & mask;
    table[i].hash = h;
    table[i].child = child;
}

static void kids_rehash(struct kl_radix *t, struct node *x, size_t cap)
{
    struct slot *old = kids_slots(x);
    size_t old_cap = x->cap ? x->cap : 2, n = x->nchild;
    struct slot *table = xcalloc(cap, sizeof *table);
    for (size_t i = 0, moved = 0; i < old_cap && moved < n; i++)
        if (old[i].child) table_put(table, cap, old[i].hash, old[i].child), moved++;
    if (x->cap) {
        free(x->kids.table);
        t->bytes -= x->cap * sizeof(struct slot);
    }
    x->kids.table = table;
    x->cap = (uint32_t)cap;
    t->bytes += cap * sizeof(struct slot);
}

static void kids_add(struct kl_radix *t, struct node *x, uint64_t h, struct node *child)
{
    if (x->cap == 0 && x->nchild < 2) {
        x->kids.inl[x->nchild].hash = h;
        x->kids.inl[x->nchild].child = child;
        x->nchild++;
        return;
    }
    /* Load factor <= 1/2 keeps probe runs short (expected ~1.5 slots per hit). */
    if (x->cap == 0)
        kids_rehash(t, x, 8);
    else if ((x->nchild + 1) * 2 > x->cap)
        kids_rehash(t, x, (size_t)x->cap * 2);
    table_put(x->kids.table, x->cap, h, child);
    x->nchild++;
}

static struct slot *kids_slot_of(struct node *x, uint64_t h, const struct node *child)
{
    if (x->cap == 0) {
        for (uint32_t i = 0; i < x->nchild; i++)
            if (x->kids.inl[i].child == child) return &x->kids.inl[i];
        return NULL;
    }
    size_t mask = x->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        if (!x->kids.table[i].child) return NULL;
        if (x->kids.table[i].child == child) return &x->kids.table[i];
    }
}

static void kids_del(struct kl_radix *t, struct node *x, uint64_t h, const struct node *child)
{
    struct slot *s = kids_slot_of(x, h, child);
    if (x->cap == 0) {
        *s = x->kids.inl[--x->nchild];
        x->kids.inl[x->nchild].child = NULL;
        return;
    }
    /* Backward-shift deletion (no tombstones): pull later entries of the probe run into the
     * hole when their home slot is not inside (hole, entry]. */
    struct slot *tab = x->kids.table;
    size_t mask = x->cap - 1, i = (size_t)(s - tab);
    for (size_t j = (i + 1) & mask; tab[j].child; j = (j + 1) & mask) {
        size_t home = tab[j].hash & mask;
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            tab[i] = tab[j];
            i = j;
        }
    }
    tab[i].child = NULL;
    x->nchild--;
    if (x->nchild <= 1) { /* back to inline: a leaf holds no table (hysteresis: grown at 3) */
        struct slot keep = {0, NULL};
        for (size_t k = 0; k < x->cap && x->nchild; k++)
            if (tab[k].child) keep = tab[k];
        free(tab);
        t->bytes -= x->cap * sizeof(struct slot);
        x->cap = 0;
        x->kids.inl[0] = keep;
        x->kids.inl[1].child = NULL;
    }
}

/* ---- the eviction heap: min (stamp, seq), lazy (see radix.h) ---- */

static inline bool hless(const struct hent *a, const struct hent *b)
{
    return a->stamp < b->stamp || (a->stamp == b->stamp && a->seq < b->seq);
}

static void heap_push(struct kl_radix *t, struct node *x)
{
    if (t->heap_n == t->heap_cap) {
        size_t cap = t->heap_cap ? t->heap_cap * 2 : 64;
        struct hent *h = realloc(t->heap, cap * sizeof *h);
        if (!h) {
            fprintf(stderr, "kernlab: radix: out of memory (eviction heap)\n");
            abort();
        }
        t->bytes += (cap - t->heap_cap) * sizeof *h;
        t->heap = h;
        t->heap_cap = cap;
    }
    struct hent e = {x->stamp, x->seq, x};
    size_t i = t->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &t->heap[p])) break;
        t->heap[i] = t->heap[p];
        i = p;
    }
    t->heap[i] = e;
    x->in_heap = 1;
}

static struct hent heap_pop(struct kl_radix *t)
{
    struct hent top = t->heap[0], e = t->heap[--t->heap_n];
    size_t n = t->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hless(&t->heap[c + 1], &t->heap[c])) c++;
        if (!hless(&t->heap[c], &e)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n) t->heap[i] = e;
    return top;
}

/* ---- walking ---- */

static inline uint64_t lines_spanned(const void *begin, const void *end)
{
    uintptr_t b = (uintptr_t)begin, e = (uintptr_t)end;
    return e > b ? ((e - 1) >> 6) - (b >> 6) + 1 : 0;
}

/* After a split shortened `o`, give back its tail. realloc may move it: then every pointer to
 * it is fixed here (its children's parent links, its eviction-heap entry). glibc shrinks in
 * place; ASan and valgrind always move, and so does force_move in the tests. */
static struct node *node_shrink(struct kl_radix *t, struct node *o, size_t old_len)
{
    size_t want = NODE_BYTES(o->len);
    struct node *o2;
    if (t->force_move) {
        o2 = xmalloc(want);
        memcpy(o2, o, want);
        free(o);
    } else {
        o2 = realloc(o, want);
        if (!o2) return o; /* a failed shrink leaves the block as it was */
    }
    t->bytes -= NODE_BYTES(old_len) - want;
    if (o2 == o) return o;
    struct slot *s = kids_slots(o2);
    for (size_t i = 0, seen = 0; seen < o2->nchild; i++)
        if (s[i].child) s[i].child->parent = o2, seen++;
    if (o2->in_heap) /* rare (moves only): a linear search of the heap */
        for (size_t i = 0; i < t->heap_n; i++)
            if (t->heap[i].n == o) t->heap[i].n = o2;
    return o2;
}

/* Splits o after `at` tokens (a whole number of pages, 0 < at < o->len). The original node
 * keeps the suffix (and with it its identity: children, stamp, heap entry); the prefix becomes
 * a new node that takes o's place under o's parent, stamped after o. */
static struct node *split(struct kl_radix *t, struct node *o, size_t at, uint64_t now)
{
    struct node *p = node_new(t, o->tokens, at);
    p->lock = o->lock;
    p->parent = o->parent;
    p->stamp = now;
    p->seq = t->next_seq++;
    /* p's first page is o's: same hash, so p takes o's slot in place. */
    kids_slot_of(o->parent, page_hash(o->tokens, t->page), o)->child = p;

    size_t old_len = o->len;
    memmove(o->tokens, o->tokens + at, (old_len - at) * sizeof(int32_t));
    o->len = (uint32_t)(old_len - at);
    o->parent = p;
    o->stamp = now;
    o = node_shrink(t, o, old_len);
    kids_add(t, p, page_hash(o->tokens, t->page), o);
    t->nodes++;
    t->st.splits++;
    return p;
}

/* Walks the longest cached prefix of key[0, n) (n a multiple of the page size), stamping
 * every node entered with `now` and splitting the last one where the prefix ends inside it.
 * Returns the prefix length; *last = the path's last node (the root for an empty path). */
static size_t walk(struct kl_radix *t, const int32_t *key, size_t n, uint64_t now, struct node **last)
{
    const size_t page = (size_t)t->page;
    struct node *x = t->root;
    size_t off = 0;
    t->st.walks++;
    while (off < n) {
        struct node *c = kids_find(t, x, page_hash(key + off, t->page), key + off);
        if (!c) break;
        size_t rem = n - off, lim = c->len < rem ? c->len : rem;
        /* The first page is known equal (kids_find checked it); the variant does the rest. */
        size_t eq = page + t->cmp(c->tokens + page, key + off + page, lim - page);
        size_t seen = eq < lim ? eq + 1 : lim; /* tokens the compare had to read */
        t->st.nodes_visited++;
        t->st.tokens_compared += seen;
        t->st.lines_touched += lines_spanned(c, c->tokens + seen);
        c->stamp = now;
        c->seq = t->next_seq++;
        size_t m = eq - eq % page; /* whole pages only */
        off += m;
        if (m < c->len) {
            x = split(t, c, m, now);
            break;
        }
        x = c;
    }
    *last = x;
    return off;
}

/* ---- the API ---- */

struct kl_radix *kl_radix_new(int page_size, kl_radix_cmp_fn cmp)
{
    if (page_size < 1) return NULL;
    struct kl_radix *t = xcalloc(1, sizeof *t);
    t->page = page_size;
    t->cmp = cmp ? cmp : kl_radix_cmp_scalar;
    t->root = node_new(t, NULL, 0);
    t->next_seq = 1; /* the root is 0 */
    return t;
}

void kl_radix_free(struct kl_radix *t)
{
    if (!t) return;
    /* Iterative (a page_size-1 tree can be as deep as its longest key). */
    size_t cap = 64, n = 0;
    struct node **stack = xmalloc(cap * sizeof *stack);
    stack[n++] = t->root;
    while (n) {
        struct node *x = stack[--n];
        struct slot *s = kids_slots(x);
        for (size_t i = 0, seen = 0; seen < x->nchild; i++) {
            if (!s[i].child) continue;
            if (n == cap) stack = realloc(stack, (cap *= 2) * sizeof *stack);
            if (!stack) abort();
            stack[n++] = s[i].child;
            seen++;
        }
        node_free(t, x);
    }
    free(stack);
    free(t->heap);
    free(t);
}

size_t kl_radix_insert(struct kl_radix *t, const int32_t *key, size_t n)
{
    n -= n % (size_t)t->page;
    uint64_t now = ++t->clock;
    struct node *last;
    size_t m = walk(t, key, n, now, &last);
    if (m < n) {
        struct node *c = node_new(t, key + m, n - m);
        c->parent = last;
        c->stamp = now;
        c->seq = t->next_seq++;
        kids_add(t, last, page_hash(c->tokens, t->page), c);
        t->total += n - m;
        t->evictable += n - m;
        t->nodes++;
        heap_push(t, c); /* `last` may have been a queued leaf: its entry is now stale */
    }
    return m;
}

size_t kl_radix_match(struct kl_radix *t, const int32_t *key, size_t n)
{
    n -= n % (size_t)t->page;
    struct node *last;
    return walk(t, key, n, ++t->clock, &last);
}

long kl_radix_lock(struct kl_radix *t, const int32_t *key, size_t n)
{
    n -= n % (size_t)t->page;
    struct node *last;
    size_t m = walk(t, key, n, ++t->clock, &last);
    for (struct node *x = last; x != t->root; x = x->parent) {
        if (x->lock == 0) t->evictable -= x->len; /* its queue entry goes stale: dropped on pop */
        x->lock++;
    }
    return (long)m;
}

long kl_radix_unlock(struct kl_radix *t, const int32_t *key, size_t n)
{
    n -= n % (size_t)t->page;
    struct node *last;
    size_t m = walk(t, key, n, ++t->clock, &last);
    for (struct node *x = last; x != t->root; x = x->parent)
        if (x->lock <= 0) return -1;
    for (struct node *x = last; x != t->root; x = x->parent) {
        if (--x->lock == 0) {
            t->evictable += x->len;
            if (x->nchild == 0 && !x->in_heap) heap_push(t, x);
        }
    }
    return (long)m;
}

size_t kl_radix_evict(struct kl_radix *t, size_t tokens)
{
    ++t->clock;
    size_t freed = 0;
    while (freed < tokens && t->heap_n) {
        struct hent e = heap_pop(t);
        struct node *x = e.n;
        if (x->nchild || x->lock) { /* no longer an unlocked leaf: requeued if it becomes one */
            x->in_heap = 0;
            continue;
        }
        if (e.stamp != x->stamp || e.seq != x->seq) { /* walked since it was queued */
            x->in_heap = 0;
            heap_push(t, x);
            continue;
        }
        struct node *p = x->parent;
        freed += x->len;
        t->total -= x->len;
        t->evictable -= x->len;
        t->nodes--;
        t->st.evicted_nodes++;
        kids_del(t, p, page_hash(x->tokens, t->page), x);
        node_free(t, x);
        if (p != t->root && p->nchild == 0 && p->lock == 0 && !p->in_heap) heap_push(t, p);
    }
    return freed;
}

void kl_radix_size(struct kl_radix *t, size_t *total, size_t *evictable)
{
    ++t->clock; /* every op line ticks (lab/CONTRACTS.md section 4); no node is walked */
    if (total) *total = t->total;
    if (evictable) *evictable = t->evictable;
}

size_t kl_radix_peek(const struct kl_radix *tc, const int32_t *key, size_t n, struct kl_radix_seg *segs, size_t max,
                     size_t *matched)
{
    struct kl_radix *t = (struct kl_radix *)tc;
    struct kl_radix_stats saved = t->st; /* kids_find counts probes: a peek leaves no trace */
    const size_t page = (size_t)t->page;
    n -= n % page;
    struct node *x = t->root;
    size_t off = 0, k = 0;
    while (off < n) {
        struct node *c = kids_find(t, x, page_hash(key + off, t->page), key + off);
        if (!c) break;
        size_t rem = n - off, lim = c->len < rem ? c->len : rem;
        size_t eq = page + kl_radix_cmp_scalar(c->tokens + page, key + off + page, lim - page);
        size_t m = eq - eq % page;
        if (k < max) segs[k] = (struct kl_radix_seg){c->tokens, off, m};
        k++;
        off += m;
        if (m < c->len) break;
        x = c;
    }
    t->st = saved;
    if (matched) *matched = off;
    return k < max ? k : max;
}

void kl_radix_set_cmp(struct kl_radix *t, kl_radix_cmp_fn cmp)
{
    t->cmp = cmp ? cmp : kl_radix_cmp_scalar;
}

int kl_radix_page_size(const struct kl_radix *t)
{
    return t->page;
}
size_t kl_radix_node_count(const struct kl_radix *t)
{
    return t->nodes;
}
size_t kl_radix_bytes(const struct kl_radix *t)
{
    return t->bytes + sizeof *t;
}
void kl_radix_stats(const struct kl_radix *t, struct kl_radix_stats *out)
{
    *out = t->st;
}
void kl_radix_stats_reset(struct kl_radix *t)
{
    memset(&t->st, 0, sizeof t->st);
}
void kl_radix_debug_force_move(struct kl_radix *t, int on)
{
    t->force_move = on;
}

/* ---- walks over the whole tree (tests, fuzzer, digests) ---- */

struct frame {
    struct node *x;
    size_t plen; /* path tokens above x */
};

struct dfs {
    struct frame *st;
    size_t n, cap;
};

static void dfs_push(struct dfs *d, struct node *x, size_t plen)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->st = realloc(d->st, d->cap * sizeof *d->st);
        if (!d->st) abort();
    }
    d->st[d->n++] = (struct frame){x, plen};
}

static void dfs_push_kids(struct dfs *d, struct node *x, size_t plen)
{
    struct slot *s = kids_slots(x);
    for (size_t i = 0, seen = 0; seen < x->nchild; i++)
        if (s[i].child) dfs_push(d, s[i].child, plen), seen++;
}

void kl_radix_visit(const struct kl_radix *t, kl_radix_visit_fn fn, void *ctx)
{
    struct dfs d = {0};
    size_t pcap = 256;
    int32_t *path = xmalloc(pcap * sizeof *path);
    dfs_push_kids(&d, t->root, 0);
    /* LIFO order: a node's ancestors' tokens in path[0, plen) are intact when it is popped. */
    while (d.n) {
        struct frame f = d.st[--d.n];
        size_t end = f.plen + f.x->len;
        if (end > pcap) {
            while (end > pcap)
                pcap *= 2;
            path = realloc(path, pcap * sizeof *path);
            if (!path) abort();
        }
        memcpy(path + f.plen, f.x->tokens, f.x->len * sizeof *path);
        fn(ctx, path, end, f.x->len, f.x->lock, f.x->stamp, f.x->seq);
        dfs_push_kids(&d, f.x, end);
    }
    free(path);
    free(d.st);
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

#define BAD(...)                                                                                                       \
    do {                                                                                                               \
        snprintf(msg, len, __VA_ARGS__);                                                                               \
        goto out;                                                                                                      \
    } while (0)

int kl_radix_validate(const struct kl_radix *tc, char *msg, size_t len)
{
    struct kl_radix *t = (struct kl_radix *)tc; /* kids_find counts probes; nothing else changes */
    struct kl_radix_stats saved = t->st;
    int rc = -1;
    struct dfs d = {0};
    size_t nn = 0, total = 0, evictable = 0, queued = 0;
    struct node **all = xmalloc((t->nodes + 1) * sizeof *all);
    dfs_push(&d, t->root, 0);
    while (d.n) {
        struct node *x = d.st[--d.n].x;
        if (x != t->root) {
            if (nn >= t->nodes) BAD("more nodes in the tree than the count (%zu)", t->nodes);
            all[nn++] = x;
            if (x->len == 0 || x->len % (uint32_t)t->page) BAD("node of %u tokens (page %d)", x->len, t->page);
            if (x->lock < 0) BAD("negative lock count");
            if (x->parent != t->root && x->parent->stamp < x->stamp) BAD("a child stamped after its parent");
            total += x->len;
            if (x->lock == 0) evictable += x->len;
            if (x->in_heap) queued++;
            if (x->nchild == 0 && x->lock == 0 && !x->in_heap) BAD("an unlocked leaf missing from the eviction queue");
        }
        if (x->cap && (x->cap & (x->cap - 1))) BAD("table size %u is not a power of two", x->cap);
        if (x->cap == 0 && x->nchild > 2) BAD("%u inline children", x->nchild);
        struct slot *s = kids_slots(x);
        size_t slots = x->cap ? x->cap : x->nchild, used = 0;
        for (size_t i = 0; i < slots; i++) {
            struct node *c = s[i].child;
            if (!c) continue;
            used++;
            if (c->parent != x) BAD("a child whose parent link is wrong");
            if (s[i].hash != page_hash(c->tokens, t->page)) BAD("a child filed under the wrong hash");
            if (kids_find(t, x, s[i].hash, c->tokens) != c) BAD("two children share a first page");
            dfs_push(&d, c, 0);
        }
        if (used != x->nchild) BAD("child count %u, table holds %zu", x->nchild, used);
    }
    if (nn != t->nodes) BAD("node count %zu, tree holds %zu", t->nodes, nn);
    if (total != t->total || evictable != t->evictable)
        BAD("counters total=%zu evictable=%zu, tree holds %zu/%zu", t->total, t->evictable, total, evictable);
    if (queued != t->heap_n) BAD("%zu nodes marked queued, heap holds %zu", queued, t->heap_n);
    qsort(all, nn, sizeof *all, ptr_cmp);
    if (t->heap_n) { /* at most one entry per node: the heap never outlives what it points at */
        struct node **q = xmalloc(t->heap_n * sizeof *q);
        for (size_t i = 0; i < t->heap_n; i++)
            q[i] = t->heap[i].n;
        qsort(q, t->heap_n, sizeof *q, ptr_cmp);
        size_t dup = 0;
        for (size_t i = 1; i < t->heap_n; i++)
            dup += q[i] == q[i - 1];
        free(q);
        if (dup) BAD("%zu nodes have two heap entries", dup);
    }
    for (size_t i = 0; i < t->heap_n; i++) {
        struct hent *e = &t->heap[i];
        if (!bsearch(&e->n, all, nn, sizeof *all, ptr_cmp)) BAD("a heap entry points outside the tree");
        if (!e->n->in_heap) BAD("a heap entry for an unqueued node");
        if (e->stamp > e->n->stamp) BAD("a heap entry newer than its node");
        if (i && hless(e, &t->heap[(i - 1) / 2])) BAD("heap order broken at %zu", i);
    }
    rc = 0;
out:
    t->st = saved;
    free(all);
    free(d.st);
    return rc;
}
