/* The story's bookkeeping (suite `story`, part of test_story; test_story.c lists the files): the page
 * allocator, the radix bookkeeping, and the metadata of a prefill, an extend and a decode step. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "lab/story/cache.h"
#include "lab/story/scheduler.h"
#include "lab/story/story.h"
#include "lab/story/test_story.h"

/* ---- pages and the radix bookkeeping ---- */

Test(story, pages_come_from_the_free_list_and_go_back)
{
    struct kl_story_pages p;
    cr_assert_eq(kl_story_pages_init(&p, 8), 0);
    int32_t a[8];
    cr_assert_eq(kl_story_pages_alloc(&p, 3, a), 0);
    cr_assert(a[0] == 0 && a[1] == 1 && a[2] == 2, "pages are handed out from 0 up: %d %d %d", a[0], a[1], a[2]);
    cr_assert_eq(kl_story_pages_alloc(&p, 6, a + 3), -1, "6 of the 5 free pages were handed out");
    cr_assert_eq(p.n_free, 5, "a refused allocation took pages");
    cr_assert_eq(kl_story_pages_free(&p, a + 1, 1), 0);
    cr_assert_eq(kl_story_pages_free(&p, a + 1, 1), -1, "a double free went unnoticed");
    const int32_t foreign = 42;
    cr_assert_eq(kl_story_pages_free(&p, &foreign, 1), -1, "a page number outside the pool was accepted");
    int32_t b;
    cr_assert_eq(kl_story_pages_alloc(&p, 1, &b), 0);
    cr_assert_eq(b, 1, "the most recently freed page is reused first (got %d)", b);
    kl_story_pages_release(&p);
}

void kl_story_test_fill_tokens(int32_t *t, int n, int seed)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((i * 7919 + seed * 104729) % 1000);
}

static void assert_valid(const struct kl_story_cache *c)
{
    char msg[256];
    cr_assert_eq(kl_story_cache_validate(c, msg, sizeof msg), 0, "cache bookkeeping: %s", msg);
}

Test(story, a_hit_returns_the_pages_of_the_miss)
{
    struct kl_story_cache c;
    cr_assert_eq(kl_story_cache_init(&c, 16, 64), 0);
    int32_t p1[64], p2[64], pages1[4], pages2[4];
    kl_story_test_fill_tokens(p1, 64, 1);
    memcpy(p2, p1, sizeof p1);
    kl_story_test_fill_tokens(p2 + 48, 16, 2); /* shares 48 tokens = 3 pages */
    cr_assert_eq(kl_story_cache_match(&c, p1, 64, pages1), 0, "an empty cache matched something");
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 4, pages1), 0);
    int freed;
    cr_assert_eq(kl_story_cache_insert(&c, p1, 64, pages1, &freed), 0);
    cr_assert_eq(freed, 0);
    assert_valid(&c);
    cr_assert_eq(kl_story_cache_match(&c, p2, 64, pages2), 48);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(pages2[k], pages1[k], "page %d of the hit is %d, the miss wrote %d", k, pages2[k], pages1[k]);
    /* a prefix that ends inside a page counts whole pages only */
    p2[40] ^= 1;
    cr_assert_eq(kl_story_cache_match(&c, p2, 64, pages2), 32);
    assert_valid(&c);
    kl_story_cache_release(&c);
}

Test(story, a_prefix_computed_twice_keeps_the_cached_pages_and_frees_the_copy)
{
    struct kl_story_cache c;
    cr_assert_eq(kl_story_cache_init(&c, 16, 16), 0);
    int32_t key[40], a[2], b[2];
    kl_story_test_fill_tokens(key, 40, 3);
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 2, a), 0);
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 2, b), 0);
    int freed;
    kl_story_cache_insert(&c, key, 40, a, &freed); /* 40 tokens: 2 whole pages, 8 left out */
    cr_assert_eq(kl_story_cache_pages_held(&c), 2);
    const int before = c.pages.n_free;
    cr_assert_eq(kl_story_cache_insert(&c, key, 40, b, &freed), 32);
    cr_assert_eq(freed, 2, "the duplicate pages were not freed");
    cr_assert_eq(c.pages.n_free, before + 2);
    int32_t got[2];
    cr_assert_eq(kl_story_cache_match(&c, key, 40, got), 32);
    cr_assert(got[0] == a[0] && got[1] == a[1], "the cached copy was replaced");
    assert_valid(&c);
    kl_story_cache_release(&c);
}

Test(story, locked_prefixes_survive_eviction_and_evicted_pages_are_free_again)
{
    struct kl_story_cache c;
    cr_assert_eq(kl_story_cache_init(&c, 16, 32), 0);
    int32_t k1[64], k2[64], p1[4], p2[4], got[4];
    kl_story_test_fill_tokens(k1, 64, 4);
    memcpy(k2, k1, sizeof k1);
    kl_story_test_fill_tokens(k2 + 32, 32, 5); /* shares 2 pages */
    int freed;
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 4, p1), 0);
    kl_story_cache_insert(&c, k1, 64, p1, &freed);
    cr_assert_eq(kl_story_cache_match(&c, k2, 64, p2), 32);
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 2, p2 + 2), 0);
    kl_story_cache_insert(&c, k2, 64, p2, &freed);
    kl_story_cache_lock(&c, k2, 64); /* request 2 runs */
    assert_valid(&c);
    const int free_before = c.pages.n_free;
    cr_assert_eq(kl_story_cache_evict(&c, 1000), 32, "only request 1's own 2 pages are evictable");
    cr_assert_eq(c.pages.n_free, free_before + 2, "evicted pages did not return to the free list");
    cr_assert_eq(kl_story_cache_match(&c, k2, 64, got), 64, "the locked request lost its prefix");
    for (int i = 0; i < 4; i++)
        cr_assert_eq(got[i], p2[i]);
    assert_valid(&c);
    cr_assert_geq(kl_story_cache_unlock(&c, k2, 64), 0);
    cr_assert_eq(kl_story_cache_evict(&c, 1000), 64);
    cr_assert_eq(c.pages.n_free, 32, "every page is free once everything is evicted");
    assert_valid(&c);
    kl_story_cache_release(&c);
}

/* ---- forward-pass metadata ---- */

Test(story, metadata_of_a_prefill_an_extend_and_a_decode_step)
{
    int32_t t1[40], t2[40], pg1[3] = {7, 3, 9}, pg2[3] = {7, 3, 5};
    kl_story_test_fill_tokens(t1, 40, 6);
    kl_story_test_fill_tokens(t2, 40, 7);
    struct kl_story_req r1 = {.id = 1, .tokens = t1, .len = 40, .cached = 0, .pages = pg1, .n_pages = 3};
    struct kl_story_req r2 = {.id = 2, .tokens = t2, .len = 40, .cached = 32, .pages = pg2, .n_pages = 3};
    struct kl_story_meta m;
    kl_story_meta_layout(40, 2, 8, &m);
    char *img = calloc(1, m.bytes);
    struct kl_story_req *one[1] = {&r1};
    int q = 40;
    cr_assert_eq(kl_story_meta_build(one, &q, 1, 16, true, img, &m), 40);
    const int64_t *pos = (int64_t *)(img + m.positions), *slots = (int64_t *)(img + m.slots);
    const int32_t *ids = (int32_t *)(img + m.ids), *qo = (int32_t *)(img + m.qo_indptr);
    const int32_t *kvp = (int32_t *)(img + m.kv_indptr), *last = (int32_t *)(img + m.kv_last_page_len);
    const int32_t *idx = (int32_t *)(img + m.kv_indices);
    cr_assert(pos[17] == 17 && slots[17] == 3 * 16 + 1 && ids[17] == t1[17], "prefill token 17: page 3, row 1");
    cr_assert(qo[1] == 40 && kvp[1] == 3 && last[0] == 8 && idx[2] == 9, "prefill indptrs / last page");
    /* request 2's extend: 8 new tokens over 40 keys, its first 2 pages shared with request 1 */
    one[0] = &r2, q = 8;
    cr_assert_eq(kl_story_meta_build(one, &q, 1, 16, true, img, &m), 40);
    cr_assert(pos[0] == 32 && slots[0] == 5 * 16 && ids[0] == t2[32], "extend starts at position 32 in page 5");
    cr_assert(qo[1] == 8 && kvp[1] == 3 && idx[0] == 7 && idx[1] == 3 && last[0] == 8, "extend sees all 3 pages");
    /* a decode step of both: one token each; request 1 at position 40 needs a 4th page */
    int32_t pg1b[4] = {7, 3, 9, 11};
    r1.pages = pg1b, r1.n_pages = 4, r1.cached = 40, r1.len = 41, r2.cached = 40, r2.len = 41;
    struct kl_story_req *both[2] = {&r1, &r2};
    const int ones[2] = {1, 1};
    cr_assert_eq(kl_story_meta_build(both, ones, 2, 16, false, img, &m), 41);
    cr_assert(pos[0] == 40 && pos[1] == 40 && slots[0] == 9 * 16 + 8 && slots[1] == 5 * 16 + 8, "decode slots");
    cr_assert(qo[1] == 1 && qo[2] == 2 && kvp[1] == 3 && kvp[2] == 6 && last[0] == 9 && last[1] == 9, "decode indptrs");
    /* pages that do not cover the tokens are refused */
    r1.n_pages = 2;
    cr_assert_eq(kl_story_meta_build(both, ones, 2, 16, false, img, &m), -1);
    free(img);
}
