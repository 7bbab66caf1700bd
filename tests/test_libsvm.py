"""The parallel LIBSVM reader: real files against scikit-learn's loader, every byte split, bad lines."""
import os

import numpy as np
import pytest
import scipy.sparse as sp

from collectives.train.data import DIGITS
from collectives.train.libsvm import assemble, byte_range, read_libsvm, read_range

HERE = os.path.join(os.path.dirname(__file__), "data")
FILES = [os.path.join(HERE, name) for name in
         ("sample_libsvm_data.txt", "sample_multiclass_classification_data.txt")] + [DIGITS]

# Everything real files contain: comments, qid:, CRLF, tabs, trailing blanks, label-only rows,
# blank and comment-only lines, indices out of order, exponents, no final newline.
AWKWARD = (b"# a header comment\n"
           b"1 qid:3 1:0.5 3:-2 # trailing comment\r\n"
           b"-1\t2:1e-3\t7:4 \n"
           b"\n"
           b"+1\n"
           b"   # only a comment\n"
           b"0 5:1 2:2.5   \r\n"
           b"2 qid:1 7:.25\n"
           b"3 1:1 2:2 3:3 4:4 5:5 6:6 7:7")
WANT = np.array([[0.5, 0, -2, 0, 0, 0, 0],
                 [0, 1e-3, 0, 0, 0, 0, 4],
                 [0, 0, 0, 0, 0, 0, 0],
                 [0, 2.5, 0, 0, 1, 0, 0],
                 [0, 0, 0, 0, 0, 0, 0.25],
                 [1, 2, 3, 4, 5, 6, 7]])


def _write(tmp_path, content, name="f.svm"):
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


def _stack(parts):
    return (sp.vstack([p.X for p in parts]).toarray(), np.concatenate([p.y for p in parts]),
            np.concatenate([p.qid for p in parts]), [p.offset for p in parts])


def _splits(path, cuts):
    """Datasets of the ranges between ``cuts`` (simulated ranks, one process)."""
    bounds = [0, *cuts, os.path.getsize(path)]
    return assemble([read_range(path, a, b) for a, b in zip(bounds, bounds[1:])], path)


@pytest.mark.serial
def test_awkward_file(tmp_path):
    path = _write(tmp_path, AWKWARD)
    X, y, qid, _ = _stack(_splits(path, []))
    np.testing.assert_array_equal(X, WANT)
    np.testing.assert_array_equal(y, [1, -1, 1, 0, 2, 3])
    np.testing.assert_array_equal(qid, [3, -1, -1, -1, 1, -1])


@pytest.mark.serial
@pytest.mark.parametrize("content", [AWKWARD, AWKWARD + b"\n", b"1 1:1\n2 2:2\n", b"", b"\n\n"],
                         ids=["awkward", "final-newline", "small", "empty", "blank"])
def test_every_byte_split(tmp_path, content):
    """Two simulated ranks split at every byte, three at every pair of bytes: same rows."""
    path = _write(tmp_path, content)
    X, y, qid, _ = _stack(_splits(path, []))
    size = len(content)
    cuts = [[a] for a in range(size + 1)]
    cuts += [[a, b] for a in range(0, size + 1, 17) for b in range(a, size + 1, 3)]
    for cut in cuts:
        parts = _splits(path, cut)
        Xs, ys, qs, offsets = _stack(parts)
        np.testing.assert_array_equal(Xs, X, err_msg=f"split at {cut}")
        np.testing.assert_array_equal(ys, y)
        np.testing.assert_array_equal(qs, qid)
        np.testing.assert_array_equal(offsets, np.cumsum([0] + [len(p.y) for p in parts[:-1]]))


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_real_files_against_sklearn(mpi_comm, path):
    """Read in parallel, gathered, equals scikit-learn's load_svmlight_file."""
    datasets = pytest.importorskip("sklearn.datasets")
    X_ref, y_ref = datasets.load_svmlight_file(path)
    mine = read_libsvm(path, mpi_comm)
    assert mine.n_total == X_ref.shape[0]
    pieces = mpi_comm.allgather((mine.X, mine.y, mine.offset))
    X = sp.vstack([p[0] for p in pieces]).toarray()
    np.testing.assert_array_equal(X, X_ref.toarray())
    np.testing.assert_array_equal(np.concatenate([p[1] for p in pieces]), y_ref)
    np.testing.assert_array_equal([p[2] for p in pieces],
                                  np.cumsum([0] + [p[0].shape[0] for p in pieces[:-1]]))


def test_index_base_and_width(tmp_path, mpi_comm):
    """Ranks agree on zero-based indexing and the width even when their own rows say otherwise."""
    lines = [f"{i % 2} {i + 1}:1\n" for i in range(40)]
    lines[37] = "1 0:5\n"  # only one rank sees index 0
    path = str(tmp_path / f"base{mpi_comm.rank}.svm")
    with open(path, "w") as f:
        f.writelines(lines)
    mine = read_libsvm(path, mpi_comm)
    assert mine.X.shape[1] == 41
    rows = np.concatenate(mpi_comm.allgather(mine.X.toarray()))
    assert rows[37, 0] == 5 and rows[0, 1] == 1
    assert read_libsvm(path, mpi_comm, n_features=50).X.shape[1] == 50
    with pytest.raises(ValueError, match="one-based"):
        read_libsvm(path, mpi_comm, zero_based=False)
    with pytest.raises(ValueError, match="n_features=10"):
        read_libsvm(path, mpi_comm, n_features=10)


BAD = [(b"1 1:2\n1 1:x\n", 2, "could not convert"), (b"1 1:2\n\n# c\nfoo 1:1\n", 4, "could not convert"),
       (b"1 1:2 3\n", 1, "index:value"), (b"1 2:1 2:3\n", 1, "twice"), (b"1 1:1 qid:2\n", 1, "qid"),
       (b"1 -1:4\n", 1, "outside 0..2147483647"), (b"1 1:1\r\n2 2:2\r\n3 a:1", 3, "invalid literal"),
       # Found by fuzzing (tests/test_fuzz_libsvm.py): these raised OverflowError or read as
       # non-finite numbers that training would silently turn into NaN.
       (b"1 1:1\n1 99999999999999999999999:1\n", 2, "feature index 9+ outside"),
       (b"1 qid:99999999999999999999999 1:1\n", 1, "qid .* 64 bits"),
       (b"1 1:1\n1e400 1:1\n", 2, "label '1e400' is not a finite"),
       (b"1 1:nan\n", 1, "value of feature 1 'nan' is not a finite"),
       # \x1c-\x1f are blanks to Python's str.split but not to C's isspace: these raised IndexError.
       (b"1 1:1\n\x1c\n", 2, "could not convert"), (b"1 1:2\x1f3:4\n", 1, "could not convert")]


@pytest.mark.parametrize("content,line,what", BAD, ids=[str(i) for i in range(len(BAD))])
def test_malformed_lines(tmp_path, mpi_comm, content, line, what):
    """ValueError naming the file and the line, numbered over the whole file, at every split."""
    path = _write(tmp_path, content, f"bad{mpi_comm.rank}.svm")
    for cut in range(len(content) + 1):
        with pytest.raises(ValueError, match=f"{path}, line {line}: .*{what}"):
            _splits(path, [cut])
    with pytest.raises(ValueError, match=f"{path}, line {line}: .*{what}"):
        read_libsvm(path, mpi_comm)


def test_missing_file(mpi_comm):
    with pytest.raises(ValueError, match="no such file"):
        read_libsvm("/nonexistent/data.svm", mpi_comm)


@pytest.mark.serial
def test_byte_ranges_cover_the_file():
    for size in (0, 1, 7, 1000):
        for p in (1, 2, 3, 8):
            ranges = [byte_range(size, r, p) for r in range(p)]
            assert ranges[0][0] == 0 and ranges[-1][1] == size
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
