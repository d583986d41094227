/* The scheduler's host-side pieces that the tests reach without a GPU: a request's state and the
 * metadata image of one forward pass (lab/story/scheduler.c runs the story with them). */
#ifndef KL_STORY_SCHEDULER_H
#define KL_STORY_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lab/story/story.h"
#include "lab/story/timeline.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* One request as a serving engine tracks it: its tokens, how many have K/V in the cache, and the
 * pages (in token order) that hold them. */
struct kl_story_req {
    int id;
    int32_t *tokens; /* prompt, then generated tokens as they are fed back */
    int len, cap;    /* tokens known; capacity */
    int cached;      /* tokens whose K/V are in the pages (the prefix the next forward starts from) */
    int32_t *pages;
    int n_pages, cap_pages;
    int prompt_len, matched; /* the radix hit, in tokens */
};

/* Where each array sits in a forward pass's metadata: one host image, uploaded with one copy. */
struct kl_story_meta {
    int64_t tokens, batch, pages;
    size_t ids, positions, slots, qo_indptr, kv_indptr, kv_last_page_len, kv_indices, bytes; /* byte offsets */
};
void kl_story_meta_layout(int64_t tokens, int64_t batch, int64_t pages, struct kl_story_meta *m);

/* The image of a forward pass over requests reqs[0..n), each computing q_len[b] new tokens from
 * position reqs[b]->cached on (their pages must already cover them): ids (the new tokens; left
 * alone when with_ids is false), positions, slots (page * page_size + offset), qo_indptr,
 * kv_indptr, kv_indices (each request's pages, in order), kv_last_page_len. Returns the longest
 * kv_len, or -1 when a request's pages do not cover its tokens or the image is too small. */
int64_t kl_story_meta_build(struct kl_story_req *const *reqs, const int *q_len, int n, int page_size, bool with_ids,
                            void *image, const struct kl_story_meta *m);

/* Everything of the results document that is not in the timeline (story.h gives the format). */
struct kl_story_doc_info {
    const char *commit, *date;
    const struct kl_story_options *o;
    const struct kl_story_config *model; /* the model as run (its layers) */
    struct {
        const char *name;
        int cc, sms, sm_mhz, mem_mhz;
        double l2_bytes, memory_bytes;
    } device;
    const char *variants[6]; /* index, rmsnorm, rope, store, attention_prefill, attention_decode */
    const char *gemm;
    struct kl_story_memory mem;
    double weights_bytes, free_bytes, weights_ms;
    double matched, match_us, insert_us;
    bool control; /* the control ran: the three logits fields below are set */
    double logits_max_abs_diff, logits_rel_l2;
    bool same_token;
    double tree_total, tree_evictable, tree_nodes;
    const int32_t *tokens; /* [steps + 1][2]: the prefill's and the extend's picks, then each step's */
    bool graph, graph_identical;
};
struct cJSON *kl_story_document(const struct kl_story_doc_info *in, const struct kl_story_timeline *tl);

#ifdef __cplusplus
}
#endif
#endif
