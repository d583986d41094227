/* What the story's test files (test_story*.c, one binary) share. */
#ifndef KL_TEST_STORY_H
#define KL_TEST_STORY_H

#include <stdint.h>

/* Tokens 0..999 in a fixed pattern per seed (test_story_cache.c). */
void kl_story_test_fill_tokens(int32_t *t, int n, int seed);
/* rm -rf dir, asserting it worked (test_story_recorder.c). */
void kl_story_test_remove_dir(const char *dir);

#endif
