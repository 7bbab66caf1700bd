"""Data x model process grids, and the model-parallel layouts of ``python -m collectives train``.

``Grid(comm, data, model)`` arranges the ranks of ``comm`` as ``data`` rows of ``model``
ranks, model ranks adjacent (rank = d * model + m, as Megatron-LM places tensor ranks on one
node): ``grid.model`` is this rank's row (the ranks that share one model), ``grid.data``
its column (the ranks holding the same shard of every data-parallel replica), both
collectives.Comm made by Split.  The trainer runs over ``grid.data``, so its gradient
all-reduce, with our algorithms, is the data axis; the model's own collectives and
push/receive run over ``grid.model``.

``layout(comm, args, options)`` reads --data-parallel, --tensor-parallel and
--pipeline-parallel (and --layers, --micro-batches, --pipeline-schedule) and gives the Grid
and the model to train on it, or UsageError naming what does not fit.
"""
from ..train.errors import UsageError
from .pipeline import PipelineMLP
from .tensor import FeatureParallelSoftmax, TensorParallelMLP

# The trainer's options that a sharded model supports: elementwise optimizers (L-BFGS and
# Newton take dot products over the whole vector, which a shard does not have) and plain
# data-parallel synchronisation; the options below are off (no single-file outputs written
# by every data replica, no shard-by-shard sums).
OPTIMIZERS = ("sgd", "adam")
UNSUPPORTED = ("checkpoint", "reproducible", "data_servers", "straggler")


class Grid:
    """``data`` x ``model`` ranks of collectives.Comm ``comm``, with a Comm along each axis."""

    def __init__(self, comm, data, model):
        if data < 1 or model < 1 or data * model != comm.size:
            raise ValueError(f"a {data} x {model} grid does not fit {comm.size} ranks")
        self.shape = (data, model)
        self.data_index, self.model_index = divmod(comm.rank, model)
        self.model = comm.Split(self.data_index, self.model_index)
        self.data = comm.Split(self.model_index, self.data_index)

    def Free(self):
        """Free both sub-communicators."""
        self.model.Free()
        self.data.Free()


def _axes(args, size):
    """(data, tensor, pipeline) sizes from the command line, checked against ``size`` ranks."""
    tensor, pipeline = args.tensor_parallel, args.pipeline_parallel
    if tensor > 1 and pipeline > 1:
        raise UsageError("--tensor-parallel and --pipeline-parallel together are not supported; "
                         "pick one model axis (each combines with --data-parallel)")
    model = tensor * pipeline
    if args.data_parallel is None and size % model:
        raise UsageError(f"--tensor-parallel {tensor} x --pipeline-parallel {pipeline} model ranks do not divide "
                         f"the job's {size} ranks")
    data = args.data_parallel or size // model
    if data * model != size:
        raise UsageError(f"--data-parallel {data} x --tensor-parallel {tensor} x --pipeline-parallel {pipeline} "
                         f"is {data * model} ranks, but the job has {size}")
    return data, tensor, pipeline


def model_parallel(args, size):
    """Whether the command line asks for a model-parallel layout (or a deeper MLP than models.MLP);
    UsageError if its axes do not fit ``size`` ranks."""
    _, tensor, pipeline = _axes(args, size)
    return tensor > 1 or pipeline > 1 or args.layers != 2


def layout(comm, args, options):
    """The Grid of ``args``' layout over ``comm``, and ``net(n_features, n_classes)`` making the
    model to train on it; UsageError if the layout or the options do not fit."""
    data, tensor, pipeline = _axes(args, comm.size)
    if not (args.model == "mlp" or (args.model == "softmax" and pipeline == 1 and args.layers == 2)):
        raise UsageError(f"model parallelism trains --model mlp (tensor, pipeline or --layers) or softmax "
                         f"(tensor parallel, features split), not {args.model} with this layout")
    if tensor > 1 and args.layers != 2:
        raise UsageError(f"the tensor-parallel MLP has 2 layers, not --layers {args.layers}")
    if args.layers < pipeline:
        raise UsageError(f"--pipeline-parallel {pipeline} needs --layers {pipeline} or more, got {args.layers}")
    if options["optimizer"] not in OPTIMIZERS or options["sync"] != "sync":
        raise UsageError(f"model parallelism trains with --optimizer sgd or adam and --sync sync, not "
                         f"{options['optimizer']} / {options['sync']}")
    for key in UNSUPPORTED:
        if options[key]:
            raise UsageError(f"--{key.replace('_', '-')} is not supported with model parallelism")
    if args.save:
        raise UsageError("--save is not supported with model parallelism (each model rank holds a shard)")
    grid = Grid(comm, data, tensor * pipeline)
    algorithm = options["allreduce"]

    def net(n_features, n_classes):
        if args.model == "softmax":
            return FeatureParallelSoftmax(grid.model, n_features, n_classes, algorithm)
        if tensor > 1:
            return TensorParallelMLP(grid.model, n_features, n_classes, args.hidden, algorithm)
        sizes = [n_features] + [args.hidden] * (args.layers - 1) + [n_classes]
        return PipelineMLP(grid.model, sizes, args.micro_batches, args.pipeline_schedule)
    return grid, net
