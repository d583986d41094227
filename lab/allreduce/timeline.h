/* One call inside a graph replay, phase by phase (lab/allreduce/timeline.c): from the stamps each of a
 * graph's calls wrote (KL_AR_T_* of kernels/allreduce/allreduce.h, one row per call: block 0's, and the
 * last block's exit), the median and the mean of each phase over the calls that have a previous one. */
#ifndef KL_ALLREDUCE_TIMELINE_H
#define KL_ALLREDUCE_TIMELINE_H

#include "kernels/allreduce/allreduce.h"

/* The boundary (the previous call's exit stamp to this call's release from griddepcontrol.wait, or to
 * its entry stamp where the variant does not stamp the release), the start (release to entry: x's first
 * unit and the call number), the send (entry to copied), the wait (copied to reduced), the exit (reduced
 * to exit), the tail (block 0's exit to the last block's: how long the grid outlasts block 0) and the
 * period (the previous call's entry to this one's). */
enum {
    KL_AR_GRAPH_BOUNDARY,
    KL_AR_GRAPH_START,
    KL_AR_GRAPH_SEND,
    KL_AR_GRAPH_WAIT,
    KL_AR_GRAPH_EXIT,
    KL_AR_GRAPH_TAIL,
    KL_AR_GRAPH_PERIOD,
    KL_AR_GRAPH_PHASES
};
/* The phases' names in a results row's story.graph. */
extern const char *const kl_ar_graph_names[KL_AR_GRAPH_PHASES];

/* rows: calls x KL_AR_TRACE_STAMPS stamps (0: not stamped). ns[q]: phase q's median over calls 1 ..
 * calls - 1 whose two stamps are there and in order, NAN where none is; mean[q] (unless mean is NULL):
 * its mean over the same calls. Where every call stamped every phase, the means of boundary, start,
 * send, wait and exit add up to the mean time from one call's exit to the next's, the mean period but
 * for the first and last calls' difference in length spread over the calls; their medians need not add
 * up when the calls vary. Returns how many calls the period is over (0: nothing to tell). */
int kl_ar_graph_phases(const unsigned long long *rows, int calls, double ns[KL_AR_GRAPH_PHASES],
                       double mean[KL_AR_GRAPH_PHASES]);

#endif
