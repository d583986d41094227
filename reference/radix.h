#ifndef KL_REFERENCE_RADIX_H
#define KL_REFERENCE_RADIX_H
/* The radix cache as the plainest tree that can be believed (reference/radix.c): the model
 * lab/radix/radix.c is checked against, op by op. Same API and semantics as lab/radix/radix.h. */
#include <stddef.h>
#include <stdint.h>

struct kl_radix_ref;

struct kl_radix_ref *kl_radix_ref_new(int page_size); /* NULL for page_size < 1 */
void kl_radix_ref_free(struct kl_radix_ref *t);
size_t kl_radix_ref_insert(struct kl_radix_ref *t, const int32_t *key, size_t n);
size_t kl_radix_ref_match(struct kl_radix_ref *t, const int32_t *key, size_t n);
long kl_radix_ref_lock(struct kl_radix_ref *t, const int32_t *key, size_t n);
long kl_radix_ref_unlock(struct kl_radix_ref *t, const int32_t *key, size_t n); /* -1: not locked */
size_t kl_radix_ref_evict(struct kl_radix_ref *t, size_t tokens);
void kl_radix_ref_size(struct kl_radix_ref *t, size_t *total, size_t *evictable);
/* Every node but the root, parents first: the tokens from the root to its end, its own length,
 * lock count, stamp and stamp order (the same callback as kl_radix_visit). */
void kl_radix_ref_visit(const struct kl_radix_ref *t,
                        void (*fn)(void *ctx, const int32_t *path, size_t path_len, size_t node_len, long lock,
                                   uint64_t stamp, uint64_t seq),
                        void *ctx);
#endif
