/* The story's KV cache bookkeeping (cache.h). */
#include "lab/story/cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the free list ---- */

int kl_story_pages_init(struct kl_story_pages *p, int capacity)
{
    memset(p, 0, sizeof *p);
    p->free = malloc(sizeof(int32_t) * (size_t)(capacity > 0 ? capacity : 1));
    p->used = calloc((size_t)(capacity > 0 ? capacity : 1), 1);
    if (!p->free || !p->used) return kl_story_pages_release(p), -1;
    p->capacity = capacity;
    /* highest first on the stack, so the first pages handed out are 0, 1, 2, ... */
    for (int i = 0; i < capacity; i++)
        p->free[i] = capacity - 1 - i;
    p->n_free = capacity;
    return 0;
}

void kl_story_pages_release(struct kl_story_pages *p)
{
    free(p->free), free(p->used);
    memset(p, 0, sizeof *p);
}

int kl_story_pages_alloc(struct kl_story_pages *p, int n, int32_t *out)
{
    if (n < 0 || n > p->n_free) return -1;
    for (int i = 0; i < n; i++) {
        out[i] = p->free[--p->n_free];
        p->used[out[i]] = 1;
    }
    return 0;
}

int kl_story_pages_free(struct kl_story_pages *p, const int32_t *pages, int n)
{
    for (int i = 0; i < n; i++) {
        if (pages[i] < 0 || pages[i] >= p->capacity || !p->used[pages[i]]) return -1;
        p->used[pages[i]] = 0;
        p->free[p->n_free++] = pages[i];
    }
    return 0;
}

/* ---- the prefix chain -> page map ---- */

static uint64_t mix(uint64_t h)
{
    h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29, h *= 0x94D049BB133111EBull, h ^= h >> 32;
    return h;
}

#define KL_CHAIN_ROOT 0x5851F42D4C957F2Dull /* the hash of the empty prefix */

/* The hash of the prefix that ends with this page, from the hash of the one before it. */
static uint64_t chain(uint64_t parent, const int32_t *tokens, int page_size)
{
    uint64_t h = mix(parent ^ 0x9E3779B97F4A7C15ull);
    for (int i = 0; i < page_size; i++)
        h = mix(h ^ (uint32_t)tokens[i]) + (uint64_t)i;
    return h | 1; /* never 0 */
}

static struct kl_story_page_entry *find(const struct kl_story_cache *c, uint64_t h, uint64_t parent,
                                        const int32_t *tokens)
{
    for (size_t i = h & (c->map_cap - 1);; i = (i + 1) & (c->map_cap - 1)) {
        struct kl_story_page_entry *e = &c->map[i];
        if (!e->tokens) return NULL;
        if (e->hash == h && e->parent == parent &&
            memcmp(e->tokens, tokens, sizeof(int32_t) * (size_t)c->page_size) == 0)
            return e;
    }
}

static struct kl_story_page_entry *slot_for(struct kl_story_page_entry *map, size_t cap, uint64_t h)
{
    size_t i = h & (cap - 1);
    while (map[i].tokens)
        i = (i + 1) & (cap - 1);
    return &map[i];
}

/* Rebuilds the table with room for `want` entries at load <= 1/2, keeping the live ones. */
static int rehash(struct kl_story_cache *c, size_t want)
{
    size_t cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    struct kl_story_page_entry *map = calloc(cap, sizeof *map);
    if (!map) return -1;
    size_t used = 0;
    for (size_t i = 0; i < c->map_cap; i++) {
        if (!c->map[i].tokens) continue;
        if (!c->map[i].live) {
            free(c->map[i].tokens);
            continue;
        }
        *slot_for(map, cap, c->map[i].hash) = c->map[i];
        used++;
    }
    free(c->map);
    c->map = map, c->map_cap = cap, c->map_used = used;
    return 0;
}

static int add(struct kl_story_cache *c, uint64_t h, uint64_t parent, const int32_t *tokens, int32_t page)
{
    if (2 * (c->map_used + 1) > c->map_cap && rehash(c, c->map_used + 1)) return -1;
    int32_t *copy = malloc(sizeof(int32_t) * (size_t)c->page_size);
    if (!copy) return -1;
    memcpy(copy, tokens, sizeof(int32_t) * (size_t)c->page_size);
    *slot_for(c->map, c->map_cap, h) =
        (struct kl_story_page_entry){.hash = h, .parent = parent, .page = page, .live = true, .tokens = copy};
    c->map_used++;
    return 0;
}

/* ---- the cache ---- */

int kl_story_cache_init(struct kl_story_cache *c, int page_size, int pages)
{
    memset(c, 0, sizeof *c);
    c->page_size = page_size;
    if (page_size < 1 || kl_story_pages_init(&c->pages, pages)) return -1;
    c->tree = kl_radix_new(page_size, NULL);
    if (!c->tree || rehash(c, 0)) return kl_story_cache_release(c), -1;
    return 0;
}

void kl_story_cache_release(struct kl_story_cache *c)
{
    for (size_t i = 0; i < c->map_cap; i++)
        free(c->map[i].tokens);
    free(c->map);
    if (c->tree) kl_radix_free(c->tree);
    kl_story_pages_release(&c->pages);
    memset(c, 0, sizeof *c);
}

size_t kl_story_cache_match(struct kl_story_cache *c, const int32_t *key, size_t n, int32_t *pages_out)
{
    const size_t matched = kl_radix_match(c->tree, key, n), ps = (size_t)c->page_size;
    uint64_t h = KL_CHAIN_ROOT;
    for (size_t k = 0; k < matched / ps; k++) {
        const uint64_t next = chain(h, key + k * ps, c->page_size);
        const struct kl_story_page_entry *e = find(c, next, h, key + k * ps);
        if (!e) return k * ps; /* the map lost a page the tree has: only what both hold is usable */
        pages_out[k] = e->page;
        h = next;
    }
    return matched;
}

size_t kl_story_cache_insert(struct kl_story_cache *c, const int32_t *key, size_t n, const int32_t *pages, int *freed)
{
    const size_t ps = (size_t)c->page_size, whole = n - n % ps;
    const size_t before = kl_radix_insert(c->tree, key, whole);
    uint64_t h = KL_CHAIN_ROOT;
    *freed = 0;
    for (size_t k = 0; k < whole / ps; k++) {
        const uint64_t next = chain(h, key + k * ps, c->page_size);
        const struct kl_story_page_entry *e = find(c, next, h, key + k * ps);
        if (e && e->page != pages[k]) { /* computed twice: keep the cached copy, free this one */
            kl_story_pages_free(&c->pages, &pages[k], 1);
            ++*freed;
        } else if (!e) {
            add(c, next, h, key + k * ps, pages[k]);
        }
        h = next;
    }
    return before;
}

long kl_story_cache_lock(struct kl_story_cache *c, const int32_t *key, size_t n)
{
    return kl_radix_lock(c->tree, key, n);
}
long kl_story_cache_unlock(struct kl_story_cache *c, const int32_t *key, size_t n)
{
    return kl_radix_unlock(c->tree, key, n);
}

/* kl_radix_visit's callback: marks the chain entries of every page on a node's path as live. */
static void mark_path(void *ctx, const int32_t *path, size_t path_len, size_t node_len, long lock, uint64_t stamp,
                      uint64_t seq)
{
    struct kl_story_cache *c = ctx;
    const size_t ps = (size_t)c->page_size;
    uint64_t h = KL_CHAIN_ROOT;
    for (size_t k = 0; k < path_len / ps; k++) {
        const uint64_t next = chain(h, path + k * ps, c->page_size);
        struct kl_story_page_entry *e = find(c, next, h, path + k * ps);
        if (e) e->live = true;
        h = next;
    }
}

size_t kl_story_cache_evict(struct kl_story_cache *c, size_t tokens)
{
    const size_t freed = kl_radix_evict(c->tree, tokens);
    if (!freed) return 0;
    for (size_t i = 0; i < c->map_cap; i++)
        c->map[i].live = false;
    kl_radix_visit(c->tree, mark_path, c);
    for (size_t i = 0; i < c->map_cap; i++)
        if (c->map[i].tokens && !c->map[i].live) kl_story_pages_free(&c->pages, &c->map[i].page, 1);
    rehash(c, c->map_used); /* drops the dead entries */
    return freed;
}

size_t kl_story_cache_pages_held(const struct kl_story_cache *c)
{
    return c->map_used;
}

int kl_story_cache_validate(const struct kl_story_cache *c, char *msg, size_t len)
{
    size_t total, evictable;
    kl_radix_size(c->tree, &total, &evictable);
    if (total != c->map_used * (size_t)c->page_size)
        return snprintf(msg, len, "the tree holds %zu tokens, the page map %zu pages of %d", total, c->map_used,
                        c->page_size),
               -1;
    uint8_t *seen = calloc((size_t)(c->pages.capacity > 0 ? c->pages.capacity : 1), 1);
    if (!seen) return snprintf(msg, len, "out of memory"), -1;
    int rc = 0;
    for (size_t i = 0; !rc && i < c->map_cap; i++) {
        const struct kl_story_page_entry *e = &c->map[i];
        if (!e->tokens) continue;
        if (e->page < 0 || e->page >= c->pages.capacity || !c->pages.used[e->page])
            rc = (snprintf(msg, len, "cached page %d is not allocated", e->page), -1);
        else if (seen[e->page]++)
            rc = (snprintf(msg, len, "page %d is cached twice", e->page), -1);
    }
    for (int i = 0; !rc && i < c->pages.n_free; i++)
        if (seen[c->pages.free[i]]) rc = (snprintf(msg, len, "page %d is both free and cached", c->pages.free[i]), -1);
    free(seen);
    if (!rc && kl_radix_validate(c->tree, msg, len)) rc = -1;
    return rc;
}
