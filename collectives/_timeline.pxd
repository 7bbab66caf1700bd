# The timeline's record ring, written from C by the engine, the executor and the exchange.

# What a record is: a collective call, its argument check, its transfer, a wait inside one of
# them, or a phase of the training loop.
cdef enum:
    CALL = 0
    CHECK = 1
    TRANSFER = 2
    WAIT = 3
    PHASE = 4
    WIDTH = 8  # doubles per record: t0, t1, kind, code, algorithm, bytes, count, peer


cdef struct Ring:
    double *records     # capacity x WIDTH doubles, in a file mapped into memory
    long long *written  # records written so far (the ring keeps the latest ``capacity``)
    long long capacity


cdef void put(Ring *ring, double t0, double t1, int kind, int code, int algorithm, double nbytes,
              double count, double peer) noexcept nogil


cdef class Recorder:
    cdef Ring ring
    cdef object mapping, view
    cdef readonly int rank, size
