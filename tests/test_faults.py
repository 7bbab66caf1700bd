"""The fault-injection suite: each case of tests/faults.py is a job of its own that must end
within faults.BOUND_S seconds with a non-zero exit status and its expected message,
never hang.  Checkpoint faults (a write interrupted by SIGKILL, SIGTERM then resume) are in
tests/test_checkpoint.py."""
import pytest

from tests import faults
from tests.launch import OPEN_MPI, own_jobs

pytestmark = own_jobs


@pytest.mark.parametrize("name", list(faults.CASES))
def test_fault_ends_the_job_with_a_clear_error(name):
    if OPEN_MPI and name in faults.HYDRA_ONLY:
        pytest.skip("takes options of MPICH's Hydra")
    seconds, status, output = faults.run(name)
    assert status != 0, output
    assert seconds < faults.BOUND_S, f"{name} took {seconds:.1f} s to end: {output}"
    assert faults.message(name, output), f"{name}: expected {faults.CASES[name][3]!r} in:\n{output}"
    if name in faults.STATUS:
        assert status in faults.STATUS[name], (status, output)
    if "skip" in name:
        # the ranks that waited name the one that skipped, and only it
        assert "for rank(s) 2 (receive from 2)" in output, output
