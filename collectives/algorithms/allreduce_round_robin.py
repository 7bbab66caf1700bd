"""Round-robin all-reduce: every rank broadcasts its vector in turn, every rank folds it in.

Steps: each rank r > 0 first saves its input to scratch, since ACC becomes the running
result.  In round k = 0 .. p-1 rank k broadcasts its input down a binomial tree rooted at k
(bcast_binomial); every rank folds it into ACC.  Round 0 lands in ACC directly.  All ranks
thus compute ((x0 op x1) op x2) ... in the same order, with no result sent anywhere.

Restrictions: none.  p broadcasts of the whole vector: a baseline for identical-everywhere
reduction, not for speed.

Cost: p ceil(lg p) (alpha + n beta) + (p-1) n gamma.
"""
from ..schedule import ACC, TMP
from .bcast_binomial import bcast_binomial


def allreduce_round_robin(s, count):
    """All-reduce ACC in place: p binomial broadcasts, each folded into every rank's ACC."""
    r = s.rank
    if r:
        s.copy((TMP, 0, count), (ACC, 0, count))
    bcast_binomial(s, count, 0)
    for k in range(1, s.size):
        # Own input sits at TMP[0] until round r, after which that room is free again.
        at = (TMP, 0 if k >= r else count)
        bcast_binomial(s, count, k, at=at)
        s.reduce((ACC, 0, count), (*at, count))
