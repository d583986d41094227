/* The peer copy ceiling (lab/CONTRACTS.md section 6): how fast one GPU's SMs move bytes to and from
 * another GPU's memory, per direction, measured on this machine. All-reduce busbw is judged
 * against it: a ring or two-shot moves every byte over each direction of the link at most once
 * per busbw byte, so busbw cannot beat the per-direction rate with both directions busy. */
#ifndef KL_PEER_H
#define KL_PEER_H

#include <stdio.h>

#include "lab/core/check.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* The sizes of the exchange floor: one 16-byte unit, then the all-reduce's decode sizes (8 KB to 1 MB). */
#define KL_PEER_FLOOR_SIZES 6

struct kl_peer_bw {
    int a, b;               /* the two GPUs */
    double bytes;           /* moved per direction per timed copy */
    double read_gbs;        /* a's SMs read b's memory (b -> a), nothing else on the link */
    double write_gbs;       /* a's SMs write into b's memory (a -> b) */
    double read_both_gbs;   /* a reads b while b reads a, per direction (what an all-reduce does) */
    double copy_engine_gbs; /* cudaMemcpyPeerAsync b -> a (copy engines, no SMs) */
    /* The exchange floor (perf/peer.cu): a and b each store floor_bytes[i] into the other and poll
     * until the other's have landed, one launch a call, in a CUDA graph; floor_us[i] is the slower
     * GPU's median per call. What no barrier-free all-reduce at world 2 can go under. */
    double floor_bytes[KL_PEER_FLOOR_SIZES], floor_us[KL_PEER_FLOOR_SIZES];
};

/* Measures GPUs a and b (peer access enabled both ways, 256 MB copies, median of 10; the exchange
 * floor at each of its sizes, median of 20 graph replays of 20 calls). */
int kl_peer_bw_measure(int a, int b, struct kl_peer_bw *out, struct kl_err *err);
void kl_peer_bw_print(FILE *f, const struct kl_peer_bw *p);
struct cJSON *kl_peer_bw_json(const struct kl_peer_bw *p);
/* `kernlab ceilings` on a machine with two GPUs or more: GPUs 0 and 1 both ways, printed, and
 * added to `ceil_json` as "peer": [...]. Nothing (0) with fewer than two GPUs. */
int kl_peer_ceilings(FILE *f, struct cJSON *ceil_json, struct kl_err *err);

#ifdef __cplusplus
}
#endif
#endif
