/* The story's KV cache bookkeeping, all on the host: which pages of the GPU's paged cache are
 * free, and which hold the K/V of which token prefix.
 *
 * Pages come from a free list (a stack of page numbers: O(1) allocate and free, the most recently
 * freed page reused first). The lab's radix tree (lab/radix/radix.h) answers "how many tokens of
 * this key are cached", but stores tokens only; which PAGES hold them is kept beside it the way
 * vLLM names its blocks: a full page of tokens is identified by a hash chained over every token
 * before it (h_k = H(h_{k-1}, page k's tokens)), so equal prefixes give equal chains and a page's
 * entry also remembers its tokens and its parent's hash to rule out a collision. A match walks the
 * tree for the length, then the chain for the pages. Requests lock the path they use (the tree's
 * lock counts); eviction frees unlocked leaves in the tree and then returns every page whose chain
 * the tree no longer holds. */
#ifndef KL_STORY_CACHE_H
#define KL_STORY_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lab/radix/radix.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pages ---- */
struct kl_story_pages {
    int32_t *free; /* a stack: free[0 .. n_free) */
    int n_free, capacity;
    uint8_t *used; /* [capacity]: catches a double free or a foreign page number */
};
int kl_story_pages_init(struct kl_story_pages *p, int capacity); /* 0, or -1 out of memory */
void kl_story_pages_release(struct kl_story_pages *p);
/* n pages into out; -1 (nothing taken) when fewer than n are free. */
int kl_story_pages_alloc(struct kl_story_pages *p, int n, int32_t *out);
/* Returns n pages; -1 (and stops at) a page that is not allocated. */
int kl_story_pages_free(struct kl_story_pages *p, const int32_t *pages, int n);

/* ---- the cache: pages + radix tree + prefix-chain -> page map ---- */
struct kl_story_page_entry {
    uint64_t hash, parent; /* chain hash of the prefix ending with this page, and of the one before */
    int32_t page;
    bool live;
    int32_t *tokens; /* page_size tokens */
};

struct kl_story_cache {
    int page_size;
    struct kl_story_pages pages;
    struct kl_radix *tree;
    struct kl_story_page_entry *map; /* open addressing on hash, linear probing, load <= 1/2 */
    size_t map_cap, map_used;
};
int kl_story_cache_init(struct kl_story_cache *c, int page_size, int pages);
void kl_story_cache_release(struct kl_story_cache *c);

/* The longest cached prefix of key (whole pages): its length in tokens, and its pages into
 * pages_out (room for n / page_size). */
size_t kl_story_cache_match(struct kl_story_cache *c, const int32_t *key, size_t n, int32_t *pages_out);
/* Caches key[0 .. n) whose K/V sit in pages[0 .. n / page_size) (whole pages only). Pages of the
 * key that were cached already (under other page numbers: the same tokens computed twice) are
 * returned to the free list; *freed counts them. Returns the tokens that were cached before. */
size_t kl_story_cache_insert(struct kl_story_cache *c, const int32_t *key, size_t n, const int32_t *pages, int *freed);
/* Lock counts on the tree path of key: a locked prefix is never evicted while a request uses it. */
long kl_story_cache_lock(struct kl_story_cache *c, const int32_t *key, size_t n);
long kl_story_cache_unlock(struct kl_story_cache *c, const int32_t *key, size_t n);
/* Evicts unlocked prefixes (least recently used first) until >= tokens are freed; their pages go
 * back to the free list. Returns the tokens freed. */
size_t kl_story_cache_evict(struct kl_story_cache *c, size_t tokens);
/* Pages the map holds (cached prefixes). */
size_t kl_story_cache_pages_held(const struct kl_story_cache *c);
/* Checks that the map holds exactly the pages of the tree's prefixes and that no page is both free
 * and cached. 0, or -1 with msg. */
int kl_story_cache_validate(const struct kl_story_cache *c, char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif
