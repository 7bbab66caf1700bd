"""Fuzzing the LIBSVM reader with hypothesis: every input parses, or raises ValueError naming
the file (and, for a malformed line, a line that exists); no other exception, hang or crash.

Runs in one process (the parallel split is exercised by reading the same bytes as several
byte ranges and assembling them, as the ranks of a job would).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from collectives.train.libsvm import assemble, byte_range, read_range
from tests.launch import own_jobs

pytestmark = own_jobs

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

NUMBER = st.one_of(st.integers(-10**30, 10**30).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(["", "-", "+", "1e", "0x10", "nan", "inf", "1_0", "١"]))
INDEX = st.one_of(st.integers(-5, 40).map(str), st.integers(-2**70, 2**70).map(str),
                  st.sampled_from(["", "qid", "a", "1.5", " 3"]))
PAIR = st.one_of(st.tuples(INDEX, NUMBER).map(":".join), st.text(max_size=6))
LINE = st.one_of(
    st.tuples(NUMBER, st.lists(PAIR, max_size=5)).map(lambda t: " ".join([t[0], *t[1]])),
    st.text(max_size=20),
    st.sampled_from(["", "# comment", "1 qid:3 1:2", "1 1:2 qid:3", "1 2:1 2:3", "\t1\t1:1 ", "1 0:1"]),
)
ENDING = st.sampled_from(["\n", "\r\n", ""])


def _read(path, parts):
    """Datasets of ``path`` read as ``parts`` byte ranges, as ``parts`` ranks would."""
    size = path.stat().st_size
    chunks = [read_range(str(path), *byte_range(size, r, parts)) for r in range(parts)]
    return assemble(chunks, str(path))


def _lines(data):
    return data.split(b"\n") if data else []


def _check(path, data):
    outcomes = []
    for parts in (1, 3):
        try:
            got = _read(path, parts)
        except ValueError as exc:
            text = str(exc)
            assert text.startswith(str(path)), text
            if ", line " in text:
                line = int(text.split(", line ", 1)[1].split(":", 1)[0])
                assert 1 <= line <= len(_lines(data)), text
            outcomes.append(("error", text))
        else:
            X = [d.X for d in got]
            outcomes.append(("rows", sum(x.shape[0] for x in X), np.concatenate([d.y for d in got]).tolist()))
    # The split is invisible: one range or three give the same rows, or the same error.
    assert outcomes[0][0] == outcomes[1][0], outcomes
    if outcomes[0][0] == "error":
        assert outcomes[0] == outcomes[1]
    else:
        assert outcomes[0][1] == outcomes[1][1]
        np.testing.assert_array_equal(outcomes[0][2], outcomes[1][2])


@FUZZ
@given(lines=st.lists(st.tuples(LINE, ENDING).map("".join), max_size=8))
@example(lines=["1 1:1\n", "2 99999999999999999999999:1"])
@example(lines=["1 qid:99999999999999999999999 1:1"])
def test_near_valid_lines(tmp_path, lines):
    data = "".join(lines).encode("utf-8", "surrogatepass")
    path = tmp_path / "fuzz.svm"
    path.write_bytes(data)
    _check(path, data)


@FUZZ
@given(data=st.binary(max_size=200))
@example(data=b"\x1c")  # a blank to Python's str.split, not to C's isspace: a malformed line
@example(data=b"1 1:2\x1f3:4\n")
def test_arbitrary_bytes(tmp_path, data):
    path = tmp_path / "fuzz.svm"
    path.write_bytes(data)
    _check(path, data)
