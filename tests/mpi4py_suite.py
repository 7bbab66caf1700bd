"""Run mpi4py's own collective tests with their communicator replaced by ``collectives.Comm``.

Usage: ``mpiexec -n N python tests/mpi4py_suite.py MPI4PY_TEST_DIR`` where the directory is
``test/`` of mpi4py's source distribution at the pinned version (``make test-mpi4py`` fetches
it into the virtualenv; nothing of it is copied into this repository).

Their test classes are mixins reading the communicator from ``self.COMM``; here each of
``MODULES``' classes (buffers, in place, v-forms, blocking and nonblocking, objects and the
neighbourhood collectives on the topologies made from the communicator) runs over ``collectives.Comm`` of COMM_WORLD, of a duplicate of it and of
COMM_SELF.  Their buffer tests loop over every array backend ``arrayimpl.py`` registers
(array, NumPy, DLPack, fake GPU, ...); the buffer classes run once per backend, with
``arrayimpl.ArrayBackends`` cut down to that one, so the counts are reported per backend.
Rank 0 prints one line per module and backend, with how many of its calls Comm handed to
MPI's own implementation (``last_algorithm == "native"``, logged with the reason); the exit
status is non-zero if any test failed on any rank.
"""
import argparse
import collections
import importlib
import io
import logging
import sys
import unittest

from mpi4py import MPI

import collectives

WORLD = MPI.COMM_WORLD



def _dup():
    """A duplicate of COMM_WORLD made by Comm.Dup (a Comm owning the new communicator)."""
    parent = collectives.Comm(WORLD)
    comm = parent.Dup()
    parent.Free()
    return comm


COMMUNICATORS = {
    "world": lambda: collectives.Comm(WORLD),
    "dup": _dup,
    "self": lambda: collectives.Comm(MPI.COMM_SELF),
}
MODULES = {
    "test_cco_buf": ("BaseTestCCOBuf", "BaseTestCCOBufInplace"),
    "test_cco_nb_buf": ("BaseTestCCOBuf", "BaseTestCCOBufInplace"),
    "test_cco_obj": ("BaseTestCCOObj",),
    "test_cco_vec": ("BaseTestCCOVec", "BaseTestCCOVecInplace"),
    "test_cco_nb_vec": ("BaseTestCCOVec", "BaseTestCCOVecInplace"),
    # Their topologies are made from the Comm, so they are our Cartcomm, Graphcomm and
    # Distgraphcomm and their neighbourhood collectives ours (the lower-case ones stay MPI's).
    "test_cco_ngh_buf": ("BaseTestCCONghBuf",),
    "test_cco_ngh_obj": ("BaseTestCCONghObj",),
}


def _case(base, comm_name):
    """A TestCase running mixin ``base`` over the collectives.Comm named ``comm_name``."""

    @classmethod
    def setUpClass(cls):
        cls.COMM = COMMUNICATORS[comm_name]()

    @classmethod
    def tearDownClass(cls):
        # A Comm made by Dup owns its communicator; the others only their private duplicate.
        cls.COMM.Free()

    return type(f"{base.__name__}_{comm_name}", (base, unittest.TestCase),
                {"setUpClass": setUpClass, "tearDownClass": tearDownClass})


class Counts(unittest.TextTestResult):
    """A result that also counts tests that passed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0
        self._bad = set()

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._bad.add(test.id())

    def addSuccess(self, test):
        super().addSuccess(test)
        if test.id() not in self._bad:
            self.passed += 1


class Delegations(logging.Handler):
    """Counts the calls Comm delegated to MPI (its "native MPI call" log records)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record):
        self.count += "native MPI call" in record.getMessage()


def run(module, label, verbosity):
    """Run ``module``'s collective mixins over every communicator; (passed, skipped, failed)."""
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for base in MODULES[module.__name__]:
        for comm_name in COMMUNICATORS:
            suite.addTests(loader.loadTestsFromTestCase(_case(getattr(module, base), comm_name)))
    stream = sys.stderr if verbosity else io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=verbosity, resultclass=Counts).run(suite)
    failed = len(result.failures) + len(result.errors)
    for test, trace in result.failures + result.errors:
        sys.stderr.write(f"---- rank {WORLD.rank}: {test.id()} ({label}) ----\n{trace}\n")
    sys.stderr.flush()
    return result.passed, len(result.skipped), failed


def main():
    """Run the suite and print passed/skipped/failed per module and backend."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("testdir", help="test/ of mpi4py's source distribution")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("--module", action="append", choices=list(MODULES),
                        help="run only this module (repeatable)")
    parser.add_argument("--backend", action="append",
                        help="run only the backend with this class name, e.g. ArrayNumPy (repeatable)")
    args = parser.parse_args()
    sys.path.insert(0, args.testdir)
    arrayimpl = importlib.import_module("arrayimpl")
    backends = [b for b in arrayimpl.ArrayBackends if not args.backend or b.__name__ in args.backend]
    totals = collections.Counter()
    delegations = Delegations()
    logger = logging.getLogger("collectives")
    logger.addHandler(delegations)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for name in args.module or MODULES:
        module = importlib.import_module(name)
        for backend in backends if not name.endswith("_obj") else [None]:
            if backend is not None:
                arrayimpl.ArrayBackends[:] = [backend]
            label = "objects" if backend is None else f"{backend.__name__} ({backend.backend})"
            delegations.count = 0
            counts = run(module, label, args.verbose)
            failed = WORLD.allreduce(counts[2], op=MPI.SUM)
            if WORLD.rank == 0:
                print(f"mpi4py suite np={WORLD.size} {name:16s} {label:32s} passed {counts[0]:3d}  "
                      f"skipped {counts[1]:3d}  failed (all ranks) {failed}  "
                      f"(calls delegated to MPI: {delegations.count})", flush=True)
            totals.update(passed=counts[0], skipped=counts[1], failed=failed)
    if WORLD.rank == 0:
        print(f"mpi4py suite np={WORLD.size} total: passed {totals['passed']}, skipped "
              f"{totals['skipped']}, failed {totals['failed']}", flush=True)
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
