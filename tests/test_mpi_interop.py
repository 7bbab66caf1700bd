"""A Comm is an mpi4py communicator: what takes one takes it (MPI-IO, RMA windows, pkl5,
mpi4py.futures), every constructor returns a Comm of its kind, and Free releases what the
Comm owns only."""
import numpy as np
import pytest
from mpi4py import MPI
from mpi4py.util import pkl5

import collectives
from collectives import Comm
from collectives.comm import Cartcomm, Distgraphcomm, Graphcomm


def test_a_comm_is_an_intracomm_sharing_the_handle(mpi_comm):
    with Comm(mpi_comm) as c:
        assert isinstance(c, MPI.Intracomm) and c == mpi_comm and c.handle == mpi_comm.handle
        assert (c.rank, c.size) == (mpi_comm.rank, mpi_comm.size)
        plain = MPI.Intracomm(c)
        assert type(plain) is MPI.Intracomm and plain == mpi_comm
        assert collectives.wrap(c) is c


def test_making_a_comm_keeps_mpis_thread_level(mpi_comm):
    """A Comm reads MPI's control variables through MPI_T when it is made; the thread level
    MPI reports stays the one it was initialised with (Open MPI 5 took MPI_T's as its own)."""
    before = MPI.Query_thread()
    with Comm(mpi_comm) as comm:
        comm.Barrier()
    assert MPI.Query_thread() == before


def test_mpi_io_writes_and_reads_back(mpi_comm, tmp_path):
    path = mpi_comm.bcast(str(tmp_path / "blocks.bin"))
    with Comm(mpi_comm) as c:
        block = np.arange(5, dtype=np.int32) + 10 * c.rank
        f = MPI.File.Open(c, path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
        f.Write_at_all(c.rank * block.nbytes, block)
        f.Close()
        c.Barrier()
        back = np.empty(5 * c.size, np.int32)
        f = MPI.File.Open(c, path, MPI.MODE_RDONLY)
        f.Read_at_all(0, back)
        f.Close()
        want = np.concatenate([np.arange(5, dtype=np.int32) + 10 * r for r in range(c.size)])
        np.testing.assert_array_equal(back, want)
        c.Barrier()
        if c.rank == 0:
            MPI.File.Delete(path)


def test_rma_window_put_and_get(mpi_comm):
    with Comm(mpi_comm) as c:
        p, r = c.size, c.rank
        win = MPI.Win.Allocate(8, disp_unit=8, comm=c)
        mine = np.frombuffer(win.tomemory(), np.int64)
        mine[0] = -1
        win.Fence()
        win.Put(np.array([100 + r], np.int64), (r + 1) % p)
        win.Fence()
        assert mine[0] == 100 + (r - 1) % p
        got = np.zeros(1, np.int64)
        win.Fence()
        win.Get(got, (r + 1) % p)
        win.Fence()
        assert got[0] == 100 + r
        win.Free()


def test_pkl5_allreduce_of_a_large_object(mpi_comm):
    with Comm(mpi_comm) as c:
        big = {"rank": c.rank, "data": np.full(1 << 20, c.rank, np.float64)}  # 8 MiB pickled
        total = pkl5.Intracomm(c).allreduce(big["data"])
        np.testing.assert_array_equal(total, np.full(1 << 20, sum(range(c.size)), np.float64))
        assert pkl5.Intracomm(c).bcast(big if c.rank == 0 else None)["rank"] == 0


def _square(x):
    return x * x


def test_futures_executor_maps(mpi_comm):
    from mpi4py.futures import MPICommExecutor

    with Comm(mpi_comm) as c:
        with MPICommExecutor(c, root=0) as executor:
            if executor is not None:
                assert list(executor.map(_square, range(12))) == [x * x for x in range(12)]


CONSTRUCTORS = {
    "Dup": lambda c: c.Dup(),
    "Clone": lambda c: c.Clone(),
    "Dup_with_info": lambda c: c.Dup_with_info(MPI.INFO_NULL),
    "Idup": lambda c: c.Idup()[0],
    "Split": lambda c: c.Split(c.rank % 2, -c.rank),
    "Split_type": lambda c: c.Split_type(MPI.COMM_TYPE_SHARED),
    "Create": lambda c: c.Create(c.Get_group()),
    "Create_group": lambda c: c.Create_group(c.Get_group()),
    "Create_cart": lambda c: c.Create_cart([c.size], periods=[True]),
    "Create_graph": lambda c: c.Create_graph(list(range(1, c.size + 1)), list(range(c.size))),
    "Create_dist_graph_adjacent": lambda c: c.Create_dist_graph_adjacent([(c.rank - 1) % c.size],
                                                                         [(c.rank + 1) % c.size]),
    "Create_dist_graph": lambda c: c.Create_dist_graph([c.rank], [1], [(c.rank + 1) % c.size]),
    "Sub": lambda c: c.Create_cart([c.size]).Sub([True]),
}
KIND = {"Create_cart": Cartcomm, "Create_graph": Graphcomm, "Create_dist_graph_adjacent": Distgraphcomm,
        "Create_dist_graph": Distgraphcomm, "Sub": Cartcomm}


@pytest.mark.parametrize("name", list(CONSTRUCTORS))
def test_every_constructor_returns_our_kind_with_our_settings(mpi_comm, name):
    with Comm(mpi_comm, algorithms={"allreduce": "ring"}, check=False, timeout=30) as parent:
        made = CONSTRUCTORS[name](parent)
        assert type(made) is KIND.get(name, Comm), type(made)
        assert isinstance(made, MPI.Intracomm) and made._owned
        assert made.algorithms == {"allreduce": "allreduce_ring"} and made.check is False and made.timeout == 30
        x = np.arange(4, dtype=np.float64) + made.rank
        got, want = np.empty(4), np.empty(4)
        made.Allreduce(x, got)
        made.comm.Allreduce(x, want)  # MPI's own, on the same handle
        np.testing.assert_array_equal(got, want)
        assert made.last_algorithm == ("allreduce_ring" if made.size > 1 else made.last_algorithm)
        made.Free()
        assert made == MPI.COMM_NULL  # it owned its communicator


def test_free_releases_only_what_the_comm_owns(mpi_comm):
    raw = mpi_comm.Dup()
    c = Comm(raw)
    private = c._coll
    c.Free()
    assert private == MPI.COMM_NULL and not c._owned
    assert raw != MPI.COMM_NULL and c == raw  # the program's handle is the program's
    assert raw.allreduce(1) == raw.size
    with pytest.raises(RuntimeError, match="freed"):
        c.Allreduce(np.ones(1), np.empty(1))
    c.Free()  # a second Free does nothing
    world = Comm(MPI.COMM_WORLD)
    world.Free()  # never MPI_Comm_free on COMM_WORLD
    assert MPI.COMM_WORLD != MPI.COMM_NULL
    raw.Free()


def test_the_comm_of_a_topology_is_of_its_kind(mpi_comm):
    cart = mpi_comm.Create_cart([mpi_comm.size])
    with Comm(cart) as c:
        assert type(c) is Cartcomm and c.Get_coords(c.rank) == cart.Get_coords(cart.rank)
        assert c.Shift(0, 1) == cart.Shift(0, 1)
    cart.Free()
