"""Nonblocking collectives in OSU's terms: how much of a collective's time computation hides.

    mpiexec -n 2 collectives-bench iallreduce ibcast -m 8:1M       # cli.py: the command line

The tests are the blocking collectives' nonblocking forms, named as OSU 7's osu_iallreduce,
osu_ibcast, ... name theirs: ``i`` and the collective.  A test has the blocking one's buffers,
exact results and contenders (cases.py): native is mpi4py's ``I`` method (``Iallreduce``) on the
plain communicator, ours ``collectives.Comm``'s of the same name.  Per size and contender, as
OSU's nonblocking tests measure (osu_util_mpi.c's calculate_and_print_stats):

1. pure communication: post the collective and wait for it at once, nothing between;
2. post it, compute for the pure communication time, wait: ``overall`` is post + compute +
   wait, ``compute`` the time spent computing, and overlap = 100 (1 - (overall - compute) /
   pure), clipped to [0, 100]: the share of the communication the compute hid (100: the call
   cost nothing beyond the compute; 0: it cost all of its pure time, or more).

Every time is the average per call over a rank's timed calls, then the mean over the ranks, as
OSU averages; the compute runs for that mean pure time on every rank, and the overlap comes from
the means.  Each call is a sample of its own, after a Barrier (a batch of calls would overlap one
call's wait with the next one's post); within a phase the contenders are interleaved, every
repetition in a fresh random order the same on every rank, as harness.py interleaves blocking
calls.  Each phase has OSU's iterations after OSU's warm-up, and half the time budget per size.

The compute is a busy loop of NumPy multiplications over COMPUTE_ELEMENTS doubles until its time
is up, and calls no MPI (OSU's may call MPI_Test to push the collective on; this one never does).
NumPy releases the GIL inside each multiplication, as a program's NumPy work does, so our
progress thread runs beside it; a loop of Python bytecode would hold the GIL and let that thread
in only at the interpreter's switch interval (5 ms).

What the overlap can be: ``collectives.Comm`` runs a nonblocking collective on its progress
thread at MPI_THREAD_MULTIPLE, and below that completes it inside the post, where our overlap is
0 by construction (MPI4PY_RC_THREAD_LEVEL=single: the post's time is the collective's).  MPICH
moves a nonblocking collective only inside MPI calls, here its post and its wait, unless its
asynchronous progress thread is on (MPIR_CVAR_ASYNC_PROGRESS=1).
"""
import time

import numpy as np
from mpi4py import MPI

from .cases import (AUTO, DEFAULT, MALLOC, NATIVE_LABEL, NO_IN_PLACE, REDUCING, ROOTED, SPEC, TYPE_NAMES, Case,
                    contenders, counts_for, handles)
from .common import blocking, human
from .harness import add_ratios, binding, header as blocking_header, osu_counts

COLUMNS = [("size", 10, "d"), ("count", 9, "d"), ("type", 6, "s"), ("redop", 5, "s"),
           ("algorithm", 34, "s"), ("place", 5, "s"), ("overall(us)", 11, ".2f"), ("compute(us)", 11, ".2f"),
           ("pure_comm(us)", 13, ".2f"), ("overlap(%)", 10, ".1f"), ("init(us)", 10, ".2f"), ("wait(us)", 10, ".2f"),
           ("#wrong", 6, "d"), ("native/ours", 11, ".2f"), ("iters", 6, "d"), ("comm_iters", 10, "d")]
# Per size: native's overall time and overlap, then each of ours beside it (the ratio native
# overall / ours overall, and its overlap): default, auto and the named algorithm of the least
# overall time (its ``speedup``).
SUMMARY = [("size", 10, "d"), ("native(us)", 10, ".2f"), ("native overlap(%)", 17, ".1f"),
           ("default", 7, ".2f"), ("default overlap(%)", 18, ".1f"), ("auto", 7, ".2f"),
           ("auto overlap(%)", 15, ".1f"), ("best", 34, "s"), ("speedup", 7, ".2f"), ("best overlap(%)", 15, ".1f")]
TIMES = ("overall(us)", "compute(us)", "pure_comm(us)", "overlap(%)", "init(us)", "wait(us)")
# NumPy releases the GIL inside a ufunc over more than 500 elements; 1024 doubles take well
# under a microsecond, so the compute ends within about that of its time.
COMPUTE_ELEMENTS = 1024
_OPERAND, _PRODUCT = np.ones(COMPUTE_ELEMENTS), np.empty(COMPUTE_ELEMENTS)


def overlap(overall, compute, pure):
    """OSU's overlap in percent: the share of the pure communication time ``pure`` that
    ``compute`` hid, from the ``overall`` time of post + compute + wait: 100 (1 - (overall -
    compute) / pure), clipped to [0, 100]; 0 where ``pure`` is not positive."""
    if pure <= 0:
        return 0.0
    return min(100.0, max(0.0, 100.0 * (1.0 - (overall - compute) / pure)))


def compute(seconds):
    """The dummy compute: NumPy multiplications back to back until ``seconds`` have passed."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        np.multiply(_OPERAND, _OPERAND, out=_PRODUCT)


def _pure(start):
    """A timed step of phase 1: post and wait at once; seconds."""
    def step():
        t0 = time.perf_counter()
        start().Wait()
        return time.perf_counter() - t0
    return step


def _overlapped(start, seconds):
    """A timed step of phase 2: post, compute ``seconds``, wait; (overall, post, compute, wait)
    seconds."""
    def step():
        t0 = time.perf_counter()
        request = start()
        t1 = time.perf_counter()
        compute(seconds)
        t2 = time.perf_counter()
        request.Wait()
        t3 = time.perf_counter()
        return t3 - t0, t1 - t0, t2 - t1, t3 - t2
    return step


def rounds(comm, steps, target, budget, min_reps):
    """Per step of ``steps``, the list of what its runs returned: each run after a Barrier, every
    step once per repetition in a fresh random order (the same on every rank), until each ran
    ``target`` times or, once each ran ``min_reps`` times, rank 0 has spent ``budget`` seconds."""
    got = [[] for _ in steps]
    orders = np.random.default_rng(0)
    stop = np.zeros(1, np.int32)
    start = MPI.Wtime()
    while steps and not stop[0]:
        for j in orders.permutation(len(steps)):
            comm.Barrier()
            got[j].append(steps[j]())
        ran = len(got[0])
        stop[0] = ran >= target or (ran >= min(min_reps, target) and MPI.Wtime() - start >= budget)
        comm.Bcast(stop, root=0)
    return got


def _over_ranks(comm, values):
    """The mean over ranks of this rank's ``values`` (an array of any shape)."""
    total = np.ascontiguousarray(values, dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
    return total / comm.size


def measure(comm, starts, iterations, warmup, budget, min_reps=1):
    """OSU's two phases over ``starts`` (calls that start a collective and return its request),
    the contenders interleaved in each; per start (pure, overall, post, compute, wait) seconds,
    each the average per call on a rank and then the mean over ranks, and the calls timed in
    phase 1 and in phase 2."""
    if not starts:
        return [], 0, 0
    target = max(1, iterations)
    for start in starts:
        for _ in range(warmup):
            start().Wait()
    alone = rounds(comm, [_pure(start) for start in starts], target, budget / 2, min_reps)
    pure = _over_ranks(comm, [np.mean(runs) for runs in alone])
    steps = [_overlapped(start, seconds) for start, seconds in zip(starts, pure)]
    for step in steps:
        for _ in range(warmup):
            step()
    together = rounds(comm, steps, target, budget / 2, min_reps)
    phases = _over_ranks(comm, [np.mean(runs, axis=0) for runs in together])
    return [(t, *phase) for t, phase in zip(pure, phases)], len(alone[0]), len(together[0])


def wrong_elements(comm, starts, cases):
    """Per start, the elements that differ from its case's exact result after a post and a wait
    at once, over all ranks."""
    wrong = np.array([case.check(lambda start=start: start().Wait()) for start, case in zip(starts, cases)],
                     dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, wrong, op=MPI.SUM)
    return wrong


def result_row(case, name, place, wrong, times=None, comm_iters=0, iters=0):
    """One row: the times of ``times`` (pure, overall, post, compute, wait seconds; None when the
    contender was not timed) in microseconds, and the overlap they give."""
    row = {"size": case.nbytes, "count": case.count, "type": TYPE_NAMES[case.dtype.name], "algorithm": name,
           "place": place, "#wrong": int(wrong), "batch": 1, "iters": iters, "comm_iters": comm_iters}
    if times is None:
        row.update(dict.fromkeys(TIMES), iters=0, comm_iters=0)
        return row
    pure, overall, post, busy, wait = times
    row.update({"overall(us)": overall * 1e6, "compute(us)": busy * 1e6, "pure_comm(us)": pure * 1e6,
                "overlap(%)": overlap(overall, busy, pure), "init(us)": post * 1e6, "wait(us)": wait * 1e6})
    return row


def sweep(comm, test, size_list, *, algorithms=("all",), dtype="float32", op="sum", root=0, places=("out",),
          iterations=None, warmup=None, budget=2.0, min_reps=3, validate=False, progress=None, **_):
    """Measure the nonblocking ``test`` (``iallreduce``, ...) at ``size_list`` bytes on ``comm``,
    native beside ours; the record, as harness.sweep's with this module's row fields.

    ``validate`` checks every contender again after its timed calls.
    """
    collective = blocking(test)
    if collective in NO_IN_PLACE:
        places = ("out",)
    p = comm.size
    rows, skipped, summary = [], [], []
    redop = op if collective in REDUCING else "none"
    itemsize = np.dtype(dtype).itemsize
    with handles(comm, collective) as handle:
        work, ours = handle["native"], handle[AUTO]
        counts = counts_for(collective, size_list, p, itemsize)
        for i, count in enumerate(counts):
            cases = {place: Case(collective, count, work, dtype, op, place == "in", root) for place in places}
            nbytes = cases[places[0]].nbytes
            if progress:
                progress(f"{test} np={p}: size {i + 1}/{len(counts)}, {human(nbytes)}")
            named = contenders(collective, comm, count, algorithms, itemsize,
                               ours._engine.segment.cap if ours._engine.segment is not None else 0)
            skipped += [{"size": nbytes, "algorithm": n, "reason": why} for n, key, why in named if key is None]
            live = [(n, key, place) for n, key, _ in named if key is not None for place in places]
            starts = [cases[place].started(handle[key]) if key in handle else cases[place].started(ours, algorithm=key)
                      for _, key, place in live]
            checks = [cases[place] for _, _, place in live]
            wrong = wrong_elements(comm, starts, checks)
            good = [j for j in range(len(live)) if wrong[j] == 0]
            its, skip = osu_counts(nbytes, iterations, warmup)
            times, comm_iters, iters = measure(comm, [starts[j] for j in good], its, skip, budget, min_reps)
            if validate:
                wrong[good] = wrong_elements(comm, [starts[j] for j in good], [checks[j] for j in good])
            timed = dict(zip(good, times))
            block = []
            for j, (name, _, place) in enumerate(live):
                ok = j in timed and wrong[j] == 0
                block.append(result_row(cases[place], name, place, wrong[j], timed[j] if ok else None,
                                        comm_iters, iters))
                block[-1].update(redop=redop, root=root if collective in ROOTED else -1)
                if name in (DEFAULT, AUTO):
                    block[-1]["ran"] = cases[place].ran(handle[name])
            add_ratios(block, NATIVE_LABEL, "overall(us)")
            rows += block
            summary += _summary(block, places[0])
    return {"collective": test, "np": p, "native": NATIVE_LABEL, "malloc": MALLOC, "dtype": dtype, "op": redop,
            "root": root, "places": list(places), "binding": binding(comm), "rows": rows, "skipped": skipped,
            "summary": summary}


def _summary(block, place):
    """Native's overall time and overlap at one size beside default's, auto's and the fastest
    named algorithm's; [] where native or all of ours went untimed."""
    by_name = {row["algorithm"]: row for row in block if row["place"] == place and row["overall(us)"] is not None}
    native = by_name.get(NATIVE_LABEL)
    if native is None or len(by_name) < 2:
        return []
    named = [row for name, row in by_name.items() if name not in (NATIVE_LABEL, DEFAULT, AUTO)]
    best = min(named, key=lambda row: row["overall(us)"]) if named else {}
    nan = float("nan")
    default, auto = by_name.get(DEFAULT, {}), by_name.get(AUTO, {})
    return [{"size": native["size"], "native(us)": native["overall(us)"], "native overlap(%)": native["overlap(%)"],
             "default": default.get("native/ours", nan), "default overlap(%)": default.get("overlap(%)", nan),
             "auto": auto.get("native/ours", nan), "auto overlap(%)": auto.get("overlap(%)", nan),
             "best": best.get("algorithm", "-"), "speedup": best.get("native/ours", nan),
             "best overlap(%)": best.get("overlap(%)", nan)}]


def header(comm, test, dtype="float32"):
    """harness.header's lines for a nonblocking test: its native call, what native MPI and ours
    do with it at this thread level, and how the columns are measured."""
    method = "I" + SPEC[blocking(test)][0].lower()
    mpich = MPI.Get_library_version().startswith("MPICH")
    ours = ("ours run on the Comm's progress thread (MPI_THREAD_MULTIPLE): the post queues the collective"
            if MPI.Query_thread() == MPI.THREAD_MULTIPLE else
            "ours complete inside the post (below MPI_THREAD_MULTIPLE the Comm has no progress thread): "
            "overlap 0 by construction")
    return blocking_header(
        comm, test, dtype, method=f"{method} and Wait",
        path=("MPICH's nonblocking schedule of point-to-point messages, moved only inside MPI calls (the post "
              "and the wait)" if mpich else None),
        timing=[
            "# per call, as OSU's nonblocking tests: pure comm = post + wait with nothing between; then post,",
            "#   compute for the pure comm time, wait: overall = post + compute + wait, compute = the time computing",
            "#   (NumPy multiplications, no MPI call), init = the post, wait = the wait;",
            "#   overlap(%) = 100 (1 - (overall - compute) / pure comm), clipped to [0, 100]",
            "# every time the average over a rank's timed calls, then the mean over ranks; a call per sample, after",
            "#   a Barrier; iters / comm_iters = calls timed with / without the compute (OSU's counts unless -i, cut",
            "#   short by the time budget per size, half to each); contenders interleaved, in a random order",
            f"# {ours}",
            "# native/ours = native overall / ours overall: > 1.00 means ours is faster"])
