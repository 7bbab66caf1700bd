"""The recursive-doubling prefix reduction shared by scan and exscan (MPICH's
MPIR_Scan_intra_recursive_doubling and MPIR_Exscan_intra_recursive_doubling).

In step k = 0, 1, ... rank r swaps its partial result with rank r ^ 2^k when that rank
exists: the partial result is the combination of the aligned group of 2^k ranks holding r,
cut at p, so any p works and a step without a partner is skipped.  A partner below r sent
the combination of ranks wholly below r: it goes on the left of both the partial result and
r's prefix.  A partner above r sent ranks wholly above: it goes on the right of the partial
result only, which only a later step reads, so the higher rank of a pair sends only when the
lower one has a later step: a pair's last step is one way, up (at 2 ranks the whole scan is
one message).  Every combine is op(lower ranks' data, higher ranks'), the order MPI defines
for Scan and Exscan.

A combine writes dst = op(left, src) (collectives.schedule), and a received block goes on
the left, so the results rotate through three scratch slots, and ACC when a slot is not
free, instead of being combined in place: in place the kernel's dst is its left operand.
IN is read until the prefix and the partial result have left it; ACC is written only then,
or earlier when it is not IN's memory (``apart``); an exclusive prefix that is one lower
partner's block as it arrives is received straight into ACC then.  The last step's partial
result is never sent, so it is not computed.
"""
from ..schedule import ACC, IN, TMP


def prefix(s, count, apart, exclusive):
    """Append rank ``s.rank``'s steps of an inclusive (or ``exclusive``) prefix reduction of
    ``count`` elements from IN into ACC; ``apart``: IN and ACC are different memory.  The
    exclusive form leaves rank 0's ACC untouched."""
    rank, p = s.rank, s.size
    if not count:
        return  # the slots below would coincide; no rank has anything to send
    slots = [(TMP, i * count) for i in range(3)]
    bits = max(p - 1, 0).bit_length()
    steps = [(k, rank ^ (1 << k)) for k in range(bits) if rank ^ (1 << k) < p]
    lower = [i for i, (_, peer) in enumerate(steps) if peer < rank]
    mine = (IN, 0)
    partial = mine
    prefix_of = None if exclusive else mine

    def region(at):
        return (*at, count)

    def free(*used):
        return next((slot for slot in slots if slot not in used), None)

    def later(r, k):
        """Whether rank r has a partner after step k (and so reads what it receives in k)."""
        return any(r ^ (1 << j) < p for j in range(k + 1, bits))

    for i, (k, peer) in enumerate(steps):
        last = i == len(steps) - 1
        if peer > rank and last:
            s.send(peer, *region(partial))
            continue
        if prefix_of is None and apart and lower and i == lower[-1]:
            got = (ACC, 0)  # this block is the whole exclusive prefix
        else:
            got = free(prefix_of, partial)
        if peer < rank and not later(peer, k):
            s.recv(peer, *region(got))
        else:
            s.sendrecv(peer, region(partial), peer, region(got))
        if peer > rank:
            if partial[0] == TMP:
                s.reduce(region(partial), region(got))
            else:
                into = free(prefix_of, got)
                s.reduce(region(into), region(got), left=partial)
                partial = into
            continue
        if prefix_of is None:
            prefix_of = got  # the first block from below is the exclusive prefix as it is
        else:
            # The final prefix goes straight to ACC unless it is read from there, or ACC is
            # IN's memory and IN is still the prefix being read; before that, to a free slot,
            # or to ACC when IN is no longer read (the prefix and the partial result are both
            # in scratch).
            final = i == lower[-1] and prefix_of != (ACC, 0) and (apart or prefix_of != mine)
            into = (ACC, 0) if final else free(prefix_of, partial, got) or (ACC, 0)
            s.reduce(region(into), region(prefix_of), left=got)
            prefix_of = into
        if not last:
            into = got if prefix_of != got else free(prefix_of, partial)
            s.reduce(region(into), region(partial), left=got)
            partial = into
    if prefix_of is not None:
        s.copy((ACC, 0, count), region(prefix_of))
