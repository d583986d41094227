/* The all-reduce bench's workload catalogue (lab/allreduce/workloads.c): size s of the catalogue is a
 * plain size (s < KL_AR_PLAIN_SIZES: 8KB .. 256MB of bf16) or a fused add + RMSNorm shape (tokens x
 * hidden of bf16), and a workload is a size at a world (8KB-world2, add-rmsnorm-t1-h4096-world2). */
#ifndef KL_ALLREDUCE_WORKLOADS_H
#define KL_ALLREDUCE_WORKLOADS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_AR_PLAIN_SIZES 8
#define KL_AR_SIZES (KL_AR_PLAIN_SIZES + 6)

struct kl_bench_args;

/* Size s's workload name at this world, into buf. */
const char *kl_ar_workload_name(char *buf, size_t len, int s, int world);
/* Bytes of one rank's x at size s, and the hidden of a fused shape (0: a plain size). */
int64_t kl_ar_size_bytes(int s);
int64_t kl_ar_size_hidden(int s);
/* A plain size's name without its world ("64KB"); "" past the plain sizes. */
const char *kl_ar_plain_size_name(int s);
/* The sizes whose calls the bench traces for the guide's stories (catalogue indices): the plain
 * decode-size call of the execution story (64KB), the fused call of one token of hidden 4096, and the
 * plain size of that fused call's bytes (8KB), traced so the guide can set their phases side by side;
 * kl_ar_size_traced adds every other fused shape and the plain size of its bytes where the catalogue
 * has one (kl_ar_plain_size_of_fused), so the fused phase table covers every fused workload. */
int kl_ar_story_size(void);
int kl_ar_fused_story_size(void);
int kl_ar_fused_story_plain_size(void);
int kl_ar_plain_size_of_fused(int s); /* the plain size of fused size s's bytes, or -1 */
bool kl_ar_size_traced(int s);
/* Whether size s at this world is one --workload asks for: a comma-separated list of names, each a full
 * workload name or one without its world (8KB: every world); true without --workload. */
bool kl_ar_wanted(const struct kl_bench_args *a, int s, int world);
/* The first name of --workload that no size names at any world (copied into buf), or NULL. */
const char *kl_ar_unknown_workload(const struct kl_bench_args *a, char *buf, size_t len);

#endif
