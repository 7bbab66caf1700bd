# cython: language_level=3
"""MPI's control variables (the MPI tool interface, MPI_T), read by name.

A library publishes its tunables as control variables: MPICH its ``MPIR_CVAR_*`` settings,
Open MPI its MCA parameters (``btl_sm_eager_limit``).  ``integers`` reads the integer ones
that exist; ``collectives.eager`` learns the point-to-point protocol switches from them.
"""
from mpi4py.libmpi cimport (MPI_Datatype, MPI_INT, MPI_LONG, MPI_LONG_LONG, MPI_Query_thread, MPI_SUCCESS,
                            MPI_THREAD_SINGLE, MPI_UNSIGNED, MPI_UNSIGNED_LONG, MPI_UNSIGNED_LONG_LONG)

cdef extern from "mpi.h" nogil:
    ctypedef struct _opaque:
        pass
    ctypedef _opaque *MPI_T_cvar_handle
    ctypedef _opaque *MPI_T_enum
    int MPI_T_init_thread(int required, int *provided)
    int MPI_T_finalize()
    int MPI_T_cvar_get_index(const char *name, int *cvar_index)
    int MPI_T_cvar_get_info(int cvar_index, char *name, int *name_len, int *verbosity,
                            MPI_Datatype *datatype, MPI_T_enum *enumtype, char *desc, int *desc_len,
                            int *bind, int *scope)
    int MPI_T_cvar_handle_alloc(int cvar_index, void *obj_handle, MPI_T_cvar_handle *handle, int *count)
    int MPI_T_cvar_handle_free(MPI_T_cvar_handle *handle)
    int MPI_T_cvar_read(MPI_T_cvar_handle handle, void *buf)
    int MPI_T_BIND_NO_OBJECT


cdef union Value:
    int i
    unsigned u
    long l
    unsigned long ul
    long long ll
    unsigned long long ull
    char room[32]


cdef object read_one(bytes name):
    """The value of the integer control variable ``name`` bound to no object, or None."""
    cdef int index, name_len = 0, desc_len = 0, verbosity, bind, scope, count
    cdef MPI_Datatype t
    cdef MPI_T_enum enumtype
    cdef MPI_T_cvar_handle handle
    cdef Value value
    if MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS:
        return None
    if MPI_T_cvar_get_info(index, NULL, &name_len, &verbosity, &t, &enumtype, NULL, &desc_len, &bind,
                           &scope) != MPI_SUCCESS or bind != MPI_T_BIND_NO_OBJECT:
        return None
    if MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) != MPI_SUCCESS:
        return None
    try:
        value.ull = 0
        if count != 1 or MPI_T_cvar_read(handle, &value) != MPI_SUCCESS:
            return None
        if t == MPI_INT:
            return value.i
        if t == MPI_UNSIGNED:
            return value.u
        if t == MPI_LONG:
            return value.l
        if t == MPI_UNSIGNED_LONG:
            return value.ul
        if t == MPI_LONG_LONG:
            return value.ll
        if t == MPI_UNSIGNED_LONG_LONG:
            return value.ull
        return None
    finally:
        MPI_T_cvar_handle_free(&handle)


def integers(names):
    """{name: value} of the integer control variables among ``names`` that this MPI library
    has (a variable it lacks, or of another type, is left out); {} when MPI_T is unavailable."""
    cdef int provided, level = MPI_THREAD_SINGLE
    # The tool interface asks for the level MPI runs at: Open MPI 5 takes MPI_T's level as the
    # process's, and MPI_Query_thread then reports it (single) once MPI_T is finalized.
    MPI_Query_thread(&level)
    if MPI_T_init_thread(level, &provided) != MPI_SUCCESS:
        return {}
    try:
        found = {}
        for name in names:
            value = read_one(name.encode())
            if value is not None:
                found[name] = value
        return found
    finally:
        MPI_T_finalize()
