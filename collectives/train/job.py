"""The training job behind ``python -m collectives train``: data in, model and metrics out."""
import argparse
import contextlib
import functools
import io
import json
import os
import sys

import numpy as np

from .. import Comm
from ..compression import COMPRESSORS
from ..registry import names
from . import data as D
from .libsvm import read_libsvm
from .models import CLASSIFIERS, MODELS, make_model
from .optim import OPTIMIZERS
from .checkpoint import PREEMPTED, write_file
from .errors import DataError, UsageError, together
from .gossip import TOPOLOGIES
from ..parallel.grid import layout, model_parallel
from .options import DEFAULT_EPOCHS, DEFAULTS, SYNCS, check_options
from .trainer import Trainer


class Prepared:
    """This rank's train and test Parts, the label classes and the feature scaling."""

    def __init__(self, train, test, classes, mean, std, n_features, n_train):
        self.train, self.test = train, test
        self.n_train = n_train  # over every rank
        self.classes, self.mean, self.std = classes, mean, std
        self.n_features = n_features


def prepare(comm, path=D.DIGITS, classify=True, test_fraction=0.2, seed=0, standardize=True,
            partition="iid", shards=2, zero_based="auto", reproducible=False):
    """Read ``path`` in parallel (or generate it: data.synthetic_spec) and make the seeded
    train/test split, scaling and partition.

    ``reproducible`` deals the training rows in fixed shards (data.by_shard) and sums the
    scaling statistics shard by shard, so the scaled data has the same bits at any rank count.

    DataError, on every rank and before any training, when the data cannot be trained on: no
    rows, fewer rows than ranks, a single class for a classifier, no training rows left.
    """
    raw = comm.comm if isinstance(comm, Comm) else comm
    if partition not in ("iid", "skew"):
        raise UsageError(f"unknown partition {partition!r}; 'iid' or 'skew'")
    if reproducible and partition != "iid":
        raise UsageError("--reproducible deals rows in fixed shards: it cannot --partition skew")
    spec = D.synthetic_spec(path)
    if spec:
        part, n_total = D.synthetic(raw, *spec), spec[0]
    else:
        # standardised features are dense anyway: reading them dense spares SciPy's import
        ds = read_libsvm(path, raw, zero_based=zero_based, dense=standardize)
        part, n_total = D.Part(ds.X, ds.y, ds.rows), ds.n_total
    if n_total == 0:
        raise DataError(f"{path}: no data rows")
    if n_total < raw.Get_size():
        raise DataError(f"{path}: {n_total} rows for {raw.Get_size()} ranks; run on at most {n_total}")
    labels = None
    if classify:
        labels = D.classes(raw, part.y)
        if len(labels) < 2:
            raise DataError(f"{path}: a classifier needs two classes or more, every row has label {labels[0]:g}")
        part.y = np.searchsorted(labels, part.y)
    train, test = D.split(raw, part, test_fraction, seed)
    n_train = raw.allreduce(len(train))
    if n_train == 0:
        raise DataError(f"{path}: test fraction {test_fraction} of {ds.n_total} rows leaves no training rows")
    if reproducible:
        train = D.by_shard(raw, train)
    mean = std = None
    if standardize:
        (train, test), mean, std = D.standardize(raw, [train, test], reproducible=reproducible)
    if partition == "skew":
        train = D.label_skew(raw, train, shards, seed)
    return Prepared(train, test, labels, mean, std, part.X.shape[1], n_train)


def make_trainer(comm, prepared, model="softmax", hidden=64, net=None, **options):
    """A Trainer for ``model`` on ``prepared`` data; ``net(n_features, n_classes)``, when given, makes
    the model instead (a model-parallel one, collectives.parallel.grid.layout)."""
    classes = 0 if prepared.classes is None else len(prepared.classes)
    try:
        net = (net or functools.partial(make_model, model, hidden=hidden))(prepared.n_features, classes)
    except ValueError as exc:  # the model does not fit the data (logistic on more than two classes)
        raise DataError(str(exc)) from exc
    return Trainer(comm, net, prepared.train, prepared.test, is_classifier=model in CLASSIFIERS, **options)


class Parser(argparse.ArgumentParser):
    """argparse, but an error is a UsageError and help is printed by rank 0 alone."""

    def error(self, message):
        """Raise UsageError(message) instead of printing usage and exiting."""
        raise UsageError(message)

    def _print_message(self, message, file=None):
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 0:
            super()._print_message(message, file)


def _at_least(low, kind):
    """An argparse type: a number of ``kind`` that is at least ``low``."""
    def parse(text):
        value = kind(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _fraction(text):
    """An argparse type: a float in [0, 1)."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def parser(prog="python -m collectives train"):
    """The argument parser of ``python -m collectives train`` (``prog``: the name its usage shows)."""
    d = DEFAULTS
    count = _at_least(1, int)
    p = Parser(prog=prog,
               description="Train a model on LIBSVM data over collectives (run under mpiexec).")
    a = p.add_argument
    a("--data", default=D.DIGITS, help="LIBSVM file (default: the bundled handwritten digits), or "
      "synthetic:ROWSxFEATURESxCLASSES[:SEED], a seeded softmax problem generated in memory")
    a("--zero-based", choices=["auto", "yes", "no"], default="auto", help="index base of the file")
    a("--model", choices=list(MODELS), default="softmax")
    a("--hidden", type=count, default=64, help="hidden units of the MLP")
    a("--optimizer", choices=list(OPTIMIZERS), default=d["optimizer"])
    a("--sync", choices=list(SYNCS), default=d["sync"], help="synchronisation model")
    a("--allreduce", choices=["auto", "native", *names("allreduce"), *(n.split("_", 1)[1] for n in names("allreduce"))],
      default=None, help="all-reduce algorithm, or native (MPI's own; default: COLLECTIVES_ALLREDUCE or auto)")
    a("--compress", choices=list(COMPRESSORS), default="none",
      help="gradient compressor for --sync sync, ddp (per bucket) or local (the change between averages)")
    a("--error-feedback", action=argparse.BooleanOptionalAction, default=None,
      help="keep what compression drops and send it later (default: per compressor, on for sign, topk, randk...)")
    a("--epochs", type=count, default=None, help="epochs (L-BFGS/Newton: iterations); default per optimizer")
    a("--batch", type=count, default=d["batch"], help="global minibatch size")
    a("--lr", type=float, default=None, help="learning rate (default 0.1 SGD, 0.01 Adam)")
    a("--momentum", type=float, default=d["momentum"])
    a("--schedule", choices=["const", "sqrt"], default=d["schedule"], help="SGD step: constant or lr/sqrt(t)")
    a("--adam-decay", action="store_true", help="Adam with alpha_t = alpha/sqrt(t)")
    a("--history", type=count, default=d["history"], help="L-BFGS memory m")
    a("--tol", type=float, default=d["tol"], help="L-BFGS/Newton: stop when max |gradient| < tol")
    a("--lam", type=float, default=d["lam"], help="L2 regularisation lambda")
    a("--local-steps", type=count, default=d["local_steps"], help="local SGD: average every H steps")
    a("--client-fraction", type=float, default=d["client_fraction"], help="fedavg: clients per round")
    a("--local-epochs", type=count, default=d["local_epochs"], help="fedavg: local epochs per round")
    a("--partition", choices=["iid", "skew"], default="iid", help="skew: label-skewed (non-IID) rows per rank")
    a("--shards", type=count, default=2, help="skew: label shards per rank")
    a("--servers", type=count, default=d["servers"], help="ps: number of server ranks")
    a("--tau", type=int, default=d["tau"], help="ps: staleness bound (0 synchronous, negative asynchronous)")
    a("--straggler", action="append", default=None, metavar="RANK:FACTOR",
      help="slow rank RANK's compute down FACTOR times; random:P:FACTOR slows each rank's every gradient "
           "computation with probability P (repeatable)")
    a("--measure-wait", action="store_true", default=None,
      help="time waiting for the slowest peer apart from communication (a barrier before each exchange; "
           "on with --straggler)")
    a("--topology", choices=list(TOPOLOGIES), default=None, help="gossip: neighbour graph (default ring)")
    a("--data-servers", type=_at_least(0, int), default=0,
      help="sync: the last K ranks serve minibatches to the others instead of each reading its own rows")
    a("--data-parallel", type=count, default=None,
      help="ranks along the data axis of a grid with --tensor-parallel or --pipeline-parallel (default: the rest)")
    a("--tensor-parallel", type=count, default=1,
      help="split the MLP's hidden units (Megatron column/row layers) or the softmax's features over N ranks")
    a("--pipeline-parallel", type=count, default=1, help="split the MLP's layers over N pipeline stages")
    a("--layers", type=_at_least(2, int), default=2, help="linear layers of the MLP (ReLU between them)")
    a("--micro-batches", type=count, default=4, help="pipeline: micro-batches per minibatch")
    a("--pipeline-schedule", choices=["gpipe", "1f1b"], default="1f1b", help="pipeline: schedule of the micro-batches")
    a("--bucket-kb", type=float, default=d["bucket_kb"], help="ddp: bucket size in KiB")
    a("--test-fraction", type=_fraction, default=0.2, help="share of rows held out for testing, in [0, 1)")
    a("--no-standardize", action="store_true", help="keep features as read (sparse)")
    a("--seed", type=_at_least(0, int), default=d["seed"])
    a("--reproducible", action="store_true", default=None,
      help="bit-identical parameters at any rank count and all-reduce algorithm (--sync sync; sgd, adam, "
           "lbfgs); also COLLECTIVES_REPRODUCIBLE=1")
    a("--log-every", type=count, default=None, help="table row every N epochs (default: about 20 rows)")
    a("--checkpoint", default=None,
      help=f"checkpoint file (.npz); a SIGTERM then checkpoints at the next step and exits with status {PREEMPTED}")
    a("--checkpoint-every", type=_at_least(0, int), default=0, help="checkpoint every N steps")
    a("--resume", action="store_true", help="continue from --checkpoint if it exists")
    a("--max-steps", type=int, default=None, help="stop after N steps in total")
    a("--metrics", default=None, help="write metrics as JSON here")
    a("--save", default=None, help="write the model (.npz) here")
    a("--timeline", default=None, metavar="PATH",
      help="write a timeline of every rank (Chrome trace JSON) here: the collectives and the training phases; "
           "also COLLECTIVES_TIMELINE")
    a("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar (default: on a tty)")
    a("--debug", action="store_true", help="on an error, print the traceback too (or set COLLECTIVES_DEBUG=1)")
    return p


def main(argv=None, prog="python -m collectives train"):
    """Run the training job; returns 0, or PREEMPTED (75) after a SIGTERM's checkpoint, or raises
    UsageError / DataError on every rank.  ``prog`` is the command's name in its usage."""
    args = parser(prog).parse_args(argv)
    comm = Comm(timeline=args.timeline)
    try:
        status = _run(comm, args)
    except (UsageError, DataError):
        comm.Free()  # every rank raised it (errors.together), so all of them free together
        raise
    comm.Free()
    return status


def _run(comm, args):
    """Check the options, prepare the data, train, report; the exit status."""
    classify = args.model in CLASSIFIERS
    options = {k: getattr(args, k) for k in DEFAULTS if hasattr(args, k)}
    if options["allreduce"] == "auto":
        options["allreduce"] = None
    if args.log_every is None:
        epochs = args.epochs or DEFAULT_EPOCHS[args.optimizer]
        options["log_every"] = max(1, epochs // 20)
    parallel = model_parallel(args, comm.size)
    # before reading any data; the trainer's ranks are the data axis
    options = check_options(options, MODELS[args.model], comm.size // (args.tensor_parallel * args.pipeline_parallel))
    grid, net = layout(comm, args, options) if parallel else (None, None)
    try:
        w, prepared, trainer = _train(grid.data if grid else comm, comm, args, classify, options, net)
    finally:
        if grid:
            grid.Free()
    if trainer.preempted:
        if comm.rank == 0:
            print(f"collectives train: SIGTERM: checkpoint of step {trainer.t} written to {args.checkpoint}; "
                  f"exit status {PREEMPTED}, run again with --resume to continue", file=sys.stderr, flush=True)
        return PREEMPTED
    metrics = trainer.metrics()
    with together(comm.comm):
        trainer.check_finite()
        if comm.rank == 0:
            _report(args, prepared, trainer, w, metrics, classify)
    return 0


def _train(comm, world, args, classify, options, net):
    """Prepare the data over ``comm`` (the data axis of ``world``) and train; (parameters, Prepared, Trainer)."""
    zero_based = {"auto": "auto", "yes": True, "no": False}[args.zero_based]
    prepared = prepare(comm, args.data, classify, args.test_fraction, args.seed, not args.no_standardize,
                       args.partition, args.shards, zero_based, options["reproducible"])
    trainer = make_trainer(comm, prepared, args.model, args.hidden, net=net, **options)
    grid = f" ({comm.size} data x {args.tensor_parallel} tensor x {args.pipeline_parallel} pipeline)" if net else ""
    if world.rank == 0:
        print(f"{os.path.basename(args.data)}: {prepared.n_train} training rows, {prepared.n_features} features; "
              f"{args.model} / {args.optimizer} / {args.sync} on {world.size} ranks{grid}")
    # every model rank of the data axis's rank 0 would print the trainer's table: world rank 0 alone does
    quiet = contextlib.redirect_stdout(io.StringIO()) if world.rank and comm.rank == 0 else contextlib.nullcontext()
    # a run that diverges ends with one error line (Trainer.check_finite), not NumPy's warnings
    with quiet, np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return trainer.fit(), prepared, trainer


def _report(args, prepared, trainer, w, metrics, classify):
    """Rank 0's summary lines and output files."""
    F, train_m, test_m = trainer.final
    what = "accuracy" if classify else "RMSE"
    tm = trainer.clock.total
    print(f"objective {F:.12f}  train {what} {train_m:.4f}  time {trainer.elapsed:.2f} s "
          f"(compute {tm['compute']:.2f} s, communication {tm['comm']:.2f} s"
          + (f", waiting {tm['wait']:.2f} s" if trainer.o["measure_wait"] or tm["wait"] else "")
          + (f", overlap {trainer.overlap:.0%}" if trainer.overlap is not None else "") + ")")
    print(f"test {what}: {test_m:.4f}" if trainer.n_test else "no test set (no rows held out)")
    if args.metrics:
        write_file(args.metrics, lambda f: f.write(json.dumps(metrics, indent=1, default=float).encode()))
    if args.save:
        extra = {k: v for k, v in (("classes", prepared.classes), ("mean", prepared.mean),
                                   ("std", prepared.std)) if v is not None}
        path = args.save if args.save.endswith(".npz") else args.save + ".npz"  # as np.savez names it
        write_file(path, lambda f: np.savez(f, w=w, model=args.model, hidden=args.hidden,
                                                 n_features=prepared.n_features, **extra))
