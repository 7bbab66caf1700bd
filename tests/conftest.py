"""Run the suite under mpiexec: a communicator fixture, and one report from rank 0.

pytest-mpi's words where it has them: ``make test`` launches ``mpiexec -n N python -m pytest
--with-mpi``; a test that needs N ranks of COMM_WORLD is marked ``@pytest.mark.mpi(min_size=N)``
and skips with pytest-mpi's reason below that (and, without ``--with-mpi``, in a plain
``pytest``, which runs everything else); ranks that share a file use its ``mpi_tmp_path``.
A test that needs ranks of its communicator fixture (COMM_SELF has one at any launch size)
skips inside, since ``min_size`` counts COMM_WORLD.  What pytest-mpi has no word for stays
here, one line each:

* per-rank temporary roots: ranks sharing pytest's one root race to clean it up;
* one report, from rank 0: the other ranks print theirs only when they failed;
* a failure on one rank aborts the launch (pytest_runtest_makereport): the others would wait
  for it in the test's next collective until the launch's timeout;
* ``--serial`` and the ``serial`` marker, shared out across the ranks of a launch;
* ``--matrix``, the communicators and dtypes a launch adds to the others.

Two options shape a launch, so that ``make test`` runs each test where it can find bugs:

* ``--serial=run|skip|only|alone``: tests marked ``serial`` do not depend on the launch's
  rank count (kernels, schedule simulations, cost models, command lines, jobs of their own).
  With ``run`` (the default) each runs once, on one rank of the launch; ``skip`` leaves them
  out, ``only`` runs nothing else; ``alone`` keeps only those marked ``serial(alone=True)``,
  which need a launch of one rank to themselves, so that a 1-rank launch runs them while a
  larger one shares out the rest.
* ``--matrix=full|dtypes|reduced``: what a launch adds to the others.  ``full`` runs every
  test on every communicator of ``COMMS`` and, in the tests marked ``matrix``, every dtype.
  ``dtypes`` runs every dtype on the communicator of all ranks, and the uneven halves with
  the dtypes of ``REDUCED_DTYPES``, one per element size, which take every code path of the
  algorithms (the counts, roots and in-place forms that choose those paths all stay): what a
  dtype changes is the same on every communicator.  It leaves out COMM_SELF, a communicator
  of one rank that the 1-rank launch runs with those dtypes.  ``reduced`` keeps what the
  launch's rank count alone brings: the communicator of all its ranks (COMM_SELF and the
  uneven halves have sizes that smaller launches cover whole) with those dtypes.  The op x
  dtype pairs the thinned matrices drop are properties of the reduction kernels, which the
  serial kernel tests cover for every pair.
* ``--configurations=both|check``: the modules of ``BOTH_CONFIGURATIONS`` run their tests
  with the cross-rank check on and off (``both``, the default), or on only (``check``).  Off,
  a collective runs its schedule without the agreement's exchange, the same schedule at every
  rank count, so a launch whose rank count the others already meet unchecked can leave it out.
"""
import io
import os
import shutil
import sys
import tempfile
import zlib

import numpy as np
import pytest
from mpi4py import MPI

WORLD = MPI.COMM_WORLD


class _PerRankTmp:
    """One temporary-directory root per rank, set before pytest's tmp_path plugin reads it:
    ranks sharing the default one race to clean it up."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        if WORLD.size > 1 and not config.option.basetemp:
            # Named after the launch too (rank 0's pid): two launches at once on one machine
            # (CI beside a developer's run) would otherwise clean up each other's files.
            launch = WORLD.bcast(os.getpid())
            config.option.basetemp = os.path.join(
                tempfile.gettempdir(), f"pytest-collectives-{os.getuid()}-{launch}-rank{WORLD.rank}")
            self.made = config.option.basetemp

    def pytest_unconfigure(self, config):
        # A name per launch is never reused, so nothing else would remove it.
        if getattr(self, "made", None):
            shutil.rmtree(self.made, ignore_errors=True)


def pytest_addoption(parser, pluginmanager):
    pluginmanager.register(_PerRankTmp())
    group = parser.getgroup("collectives")
    group.addoption("--serial", choices=("run", "skip", "only", "alone"), default="run",
                    help="tests marked serial: run each once on one rank (default), skip them, run only them, "
                         "or run only those marked serial(alone=True)")
    group.addoption("--matrix", choices=("full", "dtypes", "reduced"), default="full",
                    help="every communicator and, in tests marked matrix, every dtype (default); every "
                         "dtype on the communicator of all ranks and one dtype per element size on its "
                         "uneven halves, COMM_SELF left out (dtypes); or only the communicator of all ranks "
                         "and one dtype per element size (reduced)")
    group.addoption("--configurations", choices=("both", "check"), default="both",
                    help="run the modules of BOTH_CONFIGURATIONS with the cross-rank check on and off "
                         "(default), or on only")


# One dtype per element size: 1, 4, 8 and 16 bytes, integer, real and complex.
REDUCED_DTYPES = {"int8", "float32", "float64", "complex128"}


def pytest_collection_modifyitems(config, items):
    """Leave out what --serial and --matrix exclude (the same on every rank)."""
    serial, matrix = config.getoption("serial"), config.getoption("matrix")
    keep, drop = [], []
    for item in items:
        mark = item.get_closest_marker("serial")
        is_serial = mark is not None and not (serial == "alone" and mark.kwargs.get("alone"))
        params = getattr(getattr(item, "callspec", None), "params", {})
        comm = params.get("mpi_comm", "world")
        other_comm = (matrix == "reduced" and comm != "world") or (matrix == "dtypes" and comm == "self")
        other_dtype = (matrix != "full" and not (matrix == "dtypes" and comm == "world")
                       and item.get_closest_marker("matrix") is not None
                       and str(params.get("dtype")) not in REDUCED_DTYPES)
        thinned = other_comm or other_dtype
        out = (serial in ("skip", "alone") and is_serial) or (serial == "only" and not is_serial) or thinned
        (drop if out else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A serial test runs on one rank of the launch, chosen by a stable hash of its id, so a
    launch of several ranks shares them out instead of running each on every rank."""
    mark = item.get_closest_marker("serial")
    if WORLD.size > 1 and mark is not None:
        if mark.kwargs.get("alone"):
            pytest.skip("needs the launch to itself; runs in a 1-rank launch")
        owner = zlib.crc32(item.nodeid.encode()) % WORLD.size
        if owner != WORLD.rank:
            pytest.skip(f"serial: runs on rank {owner}")


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.addinivalue_line("markers", "serial(alone=False): independent of the launch's rank count; runs on "
                            "one rank, and with alone=True only in a launch of one rank")
    config.addinivalue_line("markers", "matrix: an algorithm x dtype matrix that --matrix other than full thins")
    if WORLD.rank:
        config._rank_report = io.StringIO()
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter._tw = type(reporter._tw)(file=config._rank_report)


def pytest_unconfigure(config):
    report = getattr(config, "_rank_report", None)
    if report is not None and ("failed" in report.getvalue() or "error" in report.getvalue()):
        sys.stderr.write(f"---- rank {WORLD.rank} ----\n{report.getvalue()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails on some ranks only would leave the others waiting in its next
    collective until the launch's timeout.  With more than one rank, a failing rank prints its
    report on stderr and aborts the whole launch at once instead (exit status non-zero)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and WORLD.size > 1:
        sys.stderr.write(f"---- rank {WORLD.rank}: {report.nodeid} failed ({report.when}); "
                         f"aborting the launch ----\n{report.longreprtext}\n")
        sys.stderr.flush()
        WORLD.Abort(1)


def _split():
    # Two uneven halves, so one launch also covers other communicator sizes.
    color = int(WORLD.rank >= (WORLD.size + 1) // 2)
    return WORLD.Split(color, WORLD.rank)


COMMS = {"self": lambda: MPI.COMM_SELF.Dup(), "world": lambda: WORLD.Dup(), "split": _split}


@pytest.fixture(params=list(COMMS), scope="module")
def mpi_comm(request):
    """A plain mpi4py communicator: SELF, a duplicate of WORLD, or an uneven half of WORLD."""
    comm = COMMS[request.param]()
    yield comm
    comm.Free()


# Modules whose matrices also run with check=False (the benchmarked configuration); the
# others run in the default configuration only, to keep the suite's time down.  Tests of
# the check itself (cross-rank mismatches, errors other ranks must see) keep it on.
BOTH_CONFIGURATIONS = {"test_allreduce", "test_bcast", "test_reduce", "test_allgather",
                       "test_reduce_scatter", "test_gather_scatter", "test_scan", "test_alltoall",
                       "test_alltoallv", "test_neighbor", "test_fast_path", "test_split", "test_shm"}
CHECK_TESTS = ("mismatch", "bad_arguments")


def pytest_generate_tests(metafunc):
    if ("check" in metafunc.fixturenames and metafunc.module.__name__ in BOTH_CONFIGURATIONS
            and metafunc.config.getoption("configurations") == "both"
            and not any(word in metafunc.function.__name__ for word in CHECK_TESTS)):
        metafunc.parametrize("check", [True, False], ids=["check", "nocheck"], scope="module")


@pytest.fixture(scope="module")
def check():
    """Whether ``comm`` agrees on arguments across ranks (parametrised in BOTH_CONFIGURATIONS)."""
    return True


@pytest.fixture(scope="module")
def comm(mpi_comm, check):
    """collectives.Comm over ``mpi_comm``, with the cross-rank check on or off."""
    from collectives import Comm

    c = Comm(mpi_comm, check=check)
    yield c
    c.Free()


@pytest.fixture(scope="module")
def p2p_comm(mpi_comm, check):
    """Like ``comm``, without a shared-memory segment: its collectives and its check go
    through MPI's point-to-point messages, as across nodes."""
    from util import point_to_point

    c = point_to_point(mpi_comm, check=check)
    yield c
    c.Free()


@pytest.fixture
def rng(mpi_comm):
    """A generator seeded by rank, so every rank holds different data."""
    return np.random.default_rng(1234 + mpi_comm.rank)
