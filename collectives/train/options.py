"""The options of a training run: their defaults, and the checks that reject a combination
before any data is read (``check_options``)."""
from .. import config
from ..compression import COMPRESSORS
from . import dataserver, gossip, optim, straggler as stragglers
from .errors import UsageError
from .sync import STRATEGIES

DEFAULTS = dict(
    optimizer="lbfgs", sync="sync", lam=1e-3, epochs=None, batch=64, lr=None, momentum=0.9,
    schedule="const", adam_decay=False, history=10, tol=1e-8, allreduce=None, compress="none", error_feedback=None,
    local_steps=8, client_fraction=1.0, local_epochs=1, servers=1, tau=0, bucket_kb=16.0,
    seed=0, log_every=1, checkpoint=None, checkpoint_every=0, resume=False, max_steps=None,
    progress=None, reproducible=None, straggler=(), measure_wait=None, topology=None, data_servers=0,
)
SYNCS = tuple(STRATEGIES)
COMPRESSIBLE = tuple(name for name, strategy in STRATEGIES.items() if strategy.compressible)
DEFAULT_EPOCHS = {"lbfgs": 300, "newton": 30, "sgd": 30, "adam": 30}
DEFAULT_LR = {"sgd": 0.1, "adam": 0.01}


def check_options(options, model, size):
    """The full options (DEFAULTS updated by ``options``), or UsageError naming what is wrong.

    ``model`` is the model or its class; ``size`` the number of ranks.  Needs no data, so a
    command line can check its options before reading any.
    """
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown training options: {', '.join(sorted(unknown))}")
    o = dict(DEFAULTS, **options)
    if o["optimizer"] not in optim.OPTIMIZERS:
        raise UsageError(f"unknown optimizer {o['optimizer']!r}; one of {', '.join(optim.OPTIMIZERS)}")
    if o["sync"] not in SYNCS:
        raise UsageError(f"unknown synchronisation {o['sync']!r}; one of {', '.join(SYNCS)}")
    if o["optimizer"] in optim.BATCH and o["sync"] != "sync":
        raise UsageError(f"optimizer {o['optimizer']} needs full gradients: use --sync sync")
    if o["optimizer"] == "newton" and not hasattr(model, "hessian"):
        raise UsageError("Newton's method needs a model with a Hessian (not the MLP)")
    if o["compress"] != "none" and (o["optimizer"] in optim.BATCH or o["sync"] not in COMPRESSIBLE):
        raise UsageError(f"--compress applies to stochastic gradients with --sync {', '.join(COMPRESSIBLE)}")
    if o["compress"] != "none" and o["sync"] == "ddp" and o["checkpoint"]:
        raise UsageError("--checkpoint does not hold ddp's per-bucket error-feedback state: "
                         "with --compress, checkpoint under --sync sync or local")
    if o["compress"] not in COMPRESSORS:
        raise UsageError(f"unknown compressor {o['compress']!r}; one of {', '.join(COMPRESSORS)}")
    if o["sync"] == "ps" and not 1 <= o["servers"] < size:
        raise UsageError(f"the parameter server needs 1 <= servers < ranks, got servers={o['servers']} "
                         f"with {size} ranks")
    if o["reproducible"] is None:
        o["reproducible"] = config.get("COLLECTIVES_REPRODUCIBLE")
    if o["reproducible"]:
        # the other models exchange whole models or stale gradients, whose sums follow the ranks
        if o["sync"] != "sync":
            raise UsageError(f"--reproducible supports --sync sync only, not {o['sync']}")
        if o["optimizer"] == "newton":
            raise UsageError("--reproducible supports sgd, adam and lbfgs, not newton")
        if o["compress"] != "none":
            raise UsageError("--reproducible cannot --compress (compressed sums depend on the ranks)")
    _check_extensions(o, size)
    if o["epochs"] is None:
        o["epochs"] = DEFAULT_EPOCHS[o["optimizer"]]
    if o["lr"] is None:
        o["lr"] = DEFAULT_LR.get(o["optimizer"])
    if o["seed"] < 0:
        raise UsageError(f"seed must be non-negative, got {o['seed']}")
    if o["batch"] < 1:
        raise UsageError(f"batch must be positive, got {o['batch']}")
    return o


def _check_extensions(o, size):
    """Check and normalise the straggler, wait, topology and data-server options in ``o``."""
    o["straggler"] = stragglers.check(o["straggler"], size)
    if o["measure_wait"] is None:
        o["measure_wait"] = bool(o["straggler"]) and o["sync"] != "ddp"
    if o["measure_wait"] and o["sync"] == "ddp":
        raise UsageError("--measure-wait does not apply to --sync ddp: a barrier before the backward pass "
                         "would undo the overlap it measures")
    if o["topology"] is None:
        o["topology"] = "ring" if o["sync"] == "gossip" else None
    elif o["sync"] != "gossip":
        raise UsageError(f"--topology applies to --sync gossip, not {o['sync']}")
    elif o["topology"] not in gossip.TOPOLOGIES:
        raise UsageError(f"unknown topology {o['topology']!r}; one of {', '.join(gossip.TOPOLOGIES)}")
    if o["data_servers"]:
        dataserver.check(o, size)
