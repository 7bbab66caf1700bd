"""The text example behind ``python -m collectives ml``: the lectures' pipeline on a labelled corpus.

Documents are read by byte range (collectives.ml.corpus), a seeded share of them is held
out for testing by document number (collectives.train.data.split, so the split is the same at
any rank count), and ``Pipeline([LabelIndexer(), Tokenizer(), HashingTF(), IDF(), Classifier()])``
is fitted over every rank's training documents; the classifier is multinomial logistic
regression by L-BFGS.  Rank 0 prints the test accuracy and each stage's time (the slowest
rank's).  Errors are one line, ``collectives ml: error: ...``, on every rank's behalf, as for
``train`` (collectives.__main__).
"""
import contextlib
import json
import os
import time

import numpy as np
from mpi4py import MPI

from .. import functional
from ..train import data as D
from ..train.checkpoint import write_file
from ..train.errors import DataError, together
from ..train.estimator import AGREED, Classifier
from ..train.job import Parser, _at_least, _fraction
from .corpus import CORPUS, read_documents
from .labels import LabelIndexer
from .pipeline import Pipeline
from .text import IDF, HashingTF, Tokenizer


def parser():
    """The argument parser of ``python -m collectives ml``."""
    p = Parser(prog="python -m collectives ml",
               description="Fit the text pipeline Tokenizer -> HashingTF -> IDF -> logistic regression over MPI "
                           "ranks and report its test accuracy (run under mpiexec).")
    a = p.add_argument
    a("--data", default=CORPUS, help="label<TAB>text file, one document a line (default: the bundled "
      "docstrings of NumPy, SciPy and scikit-learn, labelled by module)")
    a("--features", type=_at_least(1, int), default=2 ** 12, help="HashingTF columns (default 4096)")
    a("--no-idf", action="store_true", help="leave out the IDF stage (the lectures' three stages)")
    a("--lam", type=float, default=1e-4, help="L2 regularisation of the logistic regression (mean loss + lam/2 |W|^2)")
    a("--epochs", type=_at_least(1, int), default=100, help="L-BFGS iterations at most")
    a("--test-fraction", type=_fraction, default=0.2, help="share of documents held out for testing, in [0, 1)")
    a("--seed", type=_at_least(0, int), default=0, help="seed of the test split")
    a("--save", default=None, help="write the fitted PipelineModel (.npz, no pickle) here")
    a("--metrics", default=None, help="write the accuracy, counts and stage times as JSON here")
    a("--debug", action="store_true", help="on an error, print the traceback too (or set COLLECTIVES_DEBUG=1)")
    return p


def stages(args):
    """The pipeline's stages for the options ``args``."""
    idf = [] if args.no_idf else [IDF()]
    return [LabelIndexer(), Tokenizer(), HashingTF(n_features=args.features), *idf,
            Classifier(standardize=False, lam=args.lam, epochs=args.epochs)]


@contextlib.contextmanager
def _data_errors(prefix):
    """The block's errors as DataError, ``prefix`` first: the pipeline raises them on every rank
    (collectives.train.estimator.errors_together), as a ValueError where another rank failed."""
    try:
        yield
    except DataError:
        raise
    except AGREED as exc:
        raise DataError(f"{prefix}{exc}") from exc


def main(argv=None):
    """Run the example; returns 0, or raises UsageError / DataError on every rank."""
    args = parser().parse_args(argv)
    comm = MPI.COMM_WORLD
    part = read_documents(args.data, comm)
    n = comm.allreduce(len(part))
    if n == 0:
        raise DataError(f"{args.data}: no documents")
    train, test = D.split(comm, part, args.test_fraction, args.seed)
    n_train, n_test = comm.allreduce(np.array([len(train), len(test)]))
    if n_train == 0:
        raise DataError(f"{args.data}: test fraction {args.test_fraction} of {n} documents leaves none for training")
    with _data_errors(f"{args.data}: "):
        model = Pipeline(stages(args), comm).fit(train.X, train.y)
    names, seconds = [type(stage).__name__ for stage in model.stages], list(model.seconds)
    accuracy = None
    if n_test:
        start = time.perf_counter()
        with _data_errors(f"{args.data}: the test documents: "):
            accuracy = model.score(test.X, test.y)
        names.append("score (test)")
        seconds.append(time.perf_counter() - start)
    if args.save:
        with _data_errors(f"{args.save}: "):
            model.save(args.save)
    seconds = functional.allreduce(comm, np.array(seconds), op="max")
    labels = len(model.stages[0].classes_)
    with together(comm):  # rank 0 alone writes, and every rank learns if it could not
        if comm.Get_rank() == 0:
            _report(args, names, seconds, dict(documents=n, labels=labels, train=int(n_train), test=int(n_test),
                                               ranks=comm.Get_size(), accuracy=accuracy))
    return 0


def _report(args, names, seconds, counts):
    """Rank 0's lines and metrics file."""
    print(f"{os.path.basename(args.data)}: {counts['documents']} documents, {counts['labels']} labels; "
          f"{counts['train']} training, {counts['test']} test; {counts['ranks']} rank{'s' * (counts['ranks'] > 1)}")
    print(f"{'stage':<14} {'seconds':>8}")
    for name, s in zip(names, seconds):
        print(f"{name:<14} {s:>8.3f}")
    print(f"test accuracy: {counts['accuracy']:.4f}" if counts["test"] else "no test set (no documents held out)")
    if args.metrics:
        metrics = dict(counts, seconds=dict(zip(names, seconds.tolist())),
                       options={k: v for k, v in vars(args).items() if k != "debug"})
        write_file(args.metrics, lambda f: f.write(json.dumps(metrics, indent=1).encode()))
