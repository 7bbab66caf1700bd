"""The synchronisation strategies of training, by name (``--sync``): how the ranks cooperate.

=======  ==================================================================  ==========
name     what the ranks do                                                   --compress
=======  ==================================================================  ==========
sync     data parallel: the gradient of a global minibatch all-reduced       yes
         every step (any ``allreduce`` algorithm); L-BFGS and Newton too
ddp      sync, with gradients all-reduced bucket by bucket with nonblocking  yes
         collectives while the backward pass goes on (PyTorch DDP)
local    local SGD: steps on a rank's own rows, models averaged every H      yes
         steps
fedavg   federated averaging: a seeded fraction of clients trains E local    no
         epochs per round from the global model, then a weighted average
ps       parameter server: asynchronous, or stale-synchronous with bound     no
         tau (tau = 0 is synchronous and matches ``sync``)
gossip   mixing with the neighbours of a ``topology`` each step; one global  no
         average at the end
=======  ==================================================================  ==========

``STRATEGIES`` maps each name to its class, one module each; ``choose`` picks the class
that runs a run's options: the table's, except that ``sync`` runs full_batch's with L-BFGS
or Newton and collectives.train.dataserver's with ``data_servers``.  Every class is built
on the run's collectives.train.context.Context and trains with ``run()``, which returns the
final parameters, the same on every rank.
"""
from .. import optim
from ..dataserver import DataServers
from .ddp import DDP
from .fedavg import FedAvg
from .full_batch import FullBatch
from .gossip import Gossip
from .local import Local
from .ps import ParameterServer
from .sync import Sync

STRATEGIES = {s.name: s for s in (Sync, DDP, Local, FedAvg, ParameterServer, Gossip)}


def choose(o):
    """The class that trains with the checked options ``o``."""
    if o["data_servers"]:
        return DataServers
    if o["optimizer"] in optim.BATCH:
        return FullBatch
    return STRATEGIES[o["sync"]]
