"""The fault-injection suite: each case of bench/faults.py is a job of its own that must end
within bench.faults.BOUND_S seconds with a non-zero exit status and its expected message,
never hang.  Checkpoint faults (a write interrupted by SIGKILL, SIGTERM then resume) are in
tests/test_checkpoint.py.  Under the suite's mpiexec each case runs on one rank."""
import pytest

from bench import faults
from tests.single_process import one_rank  # noqa: F401 (autouse fixture: each test on one rank)


@pytest.mark.parametrize("name", list(faults.CASES))
def test_fault_ends_the_job_with_a_clear_error(name):
    seconds, status, output = faults.run(name)
    assert status != 0, output
    assert seconds < faults.BOUND_S, f"{name} took {seconds:.1f} s to end: {output}"
    assert faults.message(name, output), f"{name}: expected {faults.CASES[name][3]!r} in:\n{output}"
    if name.startswith("skip"):
        # the ranks that waited name the one that skipped, and only it
        assert "for rank(s) 2 (receive from 2)" in output, output
