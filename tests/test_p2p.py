"""Point-to-point primitives: rings of pushes, pulls answered by a server, isolation from user traffic."""
import time

import numpy as np
import pytest
from mpi4py import MPI

from collectives import constants, p2p

SIZES = (0, 1, 1000, 10**6 + 3)  # the last one goes by rendezvous, not eagerly


@pytest.mark.serial
def test_tags_are_reserved():
    """Every kind of message on a Comm's private communicator has a tag of its own
    (collectives.constants declares them all), the primitives' among them."""
    tags = [v for k, v in vars(constants).items() if k.startswith("TAG_") and k != "TAG_SCHEDULE"]
    tags += list(constants.TAGS.values())
    assert len(set(tags)) == len(tags), sorted(tags)
    assert set(p2p.TAG.values()) <= set(tags)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8])
def test_ring_of_pushes(comm, n, dtype):
    p, r = comm.size, comm.rank
    right, left = (r + 1) % p, (r - 1) % p
    send = (np.arange(n) % 97 + 1000 * r).astype(dtype)
    got = np.zeros(n, dtype)
    receiving = comm.Receive(got)
    sending = comm.Push(send, right)
    assert comm.Wait([receiving, sending]) == [left, right]
    np.testing.assert_array_equal(got, (np.arange(n) % 97 + 1000 * left).astype(dtype))


def test_module_functions_on_an_mpi4py_communicator(mpi_comm):
    p, r = mpi_comm.size, mpi_comm.rank
    got = np.zeros((3, 4))
    reqs = [p2p.receive(mpi_comm, got, source=(r - 1) % p),
            p2p.push(mpi_comm, np.full((3, 4), float(r)), (r + 1) % p)]
    p2p.wait(reqs)
    np.testing.assert_array_equal(got, np.full((3, 4), float((r - 1) % p)))


def test_pulls_served_in_order(comm):
    """Every rank pulls twice from the last rank, which serves a different buffer each time."""
    p, r = comm.size, comm.rank
    server, n = p - 1, 5000
    got = [np.zeros(n), np.zeros(n)]
    pulls = [comm.Pull(buf, server) for buf in got]
    if r == server:
        askers = [comm.Serve(np.full(n, float(k))) for k in range(2 * p)]
        assert sorted(askers) == sorted(list(range(p)) * 2)
        served = {}
        for k, asker in enumerate(askers):
            served.setdefault(asker, []).append(k)
    else:
        served = None
    assert comm.Wait(pulls) == [server, server]
    served = comm.comm.bcast(served, root=server)
    # A rank's two pulls are answered in the order it sent them.
    for buf, k in zip(got, served[r]):
        np.testing.assert_array_equal(buf, np.full(n, float(k)))


def test_test_polls_until_done(comm):
    p, r = comm.size, comm.rank
    got = np.zeros(100)
    receiving = comm.Receive(got, source=(r - 1) % p)
    comm.Barrier()
    assert not receiving.test()  # nothing was pushed yet
    comm.Barrier()
    sending = comm.Push(np.full(100, float(r)), (r + 1) % p)
    for _ in range(30000):  # bounded: about 30 s at most, normally a few iterations
        if receiving.test():
            break
        time.sleep(0.001)
    assert receiving.test()
    sending.wait()
    assert got[0] == (r - 1) % p


def test_user_messages_with_the_same_tags_never_mix(comm, mpi_comm):
    """User traffic with our tag numbers, and a collective in flight, beside pushes and pulls."""
    p, r = comm.size, comm.rank
    right, left = (r + 1) % p, (r - 1) % p
    tags = list(p2p.TAG.values()) + list(constants.TAGS.values()) + [constants.TAG_EXCHANGE]
    user_out = [np.full(8, -1.0 - t) for t in tags]
    user_in = [np.zeros(8) for _ in tags]
    user = [mpi_comm.Irecv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG) for buf in user_in]
    user += [mpi_comm.Isend(buf, right, t) for buf, t in zip(user_out, tags)]
    vector = np.arange(10000, dtype=np.float64) + r
    total = np.zeros_like(vector)
    collective = comm.Iallreduce(vector, total)
    ours = np.zeros(8)
    pulled = np.zeros(8)
    reqs = [comm.Receive(ours), comm.Push(np.full(8, float(r)), right), comm.Pull(pulled, left)]
    assert comm.Serve(np.full(8, 100.0 + r)) == right
    comm.Wait(reqs + [collective])
    statuses = [MPI.Status() for _ in user]
    MPI.Request.Waitall(user, statuses)
    np.testing.assert_array_equal(ours, np.full(8, float(left)))
    np.testing.assert_array_equal(pulled, np.full(8, 100.0 + left))
    np.testing.assert_array_equal(total, sum(np.arange(10000.0) + i for i in range(p)))
    got = sorted((st.Get_tag(), buf[0]) for st, buf in zip(statuses, user_in))
    assert got == sorted((t, -1.0 - t) for t in tags)


def test_size_mismatches_raise_on_the_side_that_sees_them(comm):
    p, r = comm.size, comm.rank
    right = (r + 1) % p
    for n_recv in (3, 5):  # shorter and longer than the 4 elements pushed
        receiving = comm.Receive(np.zeros(n_recv))
        sending = comm.Push(np.ones(4), right)
        with pytest.raises(ValueError, match="larger than the buffer|pushed 32 bytes into a (24|40)-byte"):
            receiving.wait()
        sending.wait()
    # Pulls: the server and the puller both raise, neither waits forever.
    for n_pull in (0, 3):
        pulling = comm.Pull(np.zeros(n_pull), right)
        with pytest.raises(ValueError, match="serve: rank .* pulls .* bytes but this rank serves 32"):
            comm.Serve(np.ones(4))
        with pytest.raises(ValueError, match="pull: rank .* serves a buffer whose size differs"):
            pulling.wait()


def test_invalid_peers(comm):
    with pytest.raises(ValueError, match="push: invalid rank"):
        comm.Push(np.ones(2), comm.size)
    with pytest.raises(ValueError, match="pull: invalid rank"):
        comm.Pull(np.ones(2), -1)
    with pytest.raises(ValueError, match="non-contiguous"):
        comm.Receive(np.zeros((4, 4))[:, 0])
