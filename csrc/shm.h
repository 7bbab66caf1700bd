/* Collectives through a segment of memory shared by the ranks of one node: no MPI on the path.
 *
 * The segment holds two regions per rank.  A collective runs as phases; in phase n each rank
 * writes only its own region n % 2 (a header, then data), publishes n in the header's first
 * word with a release store, waits until every rank has published n (acquire loads), and may
 * then read every rank's region n % 2.  A rank writes region n % 2 again only in phase n + 2,
 * after it has seen every rank publish n + 1, which each did only once done reading phase n:
 * two regions per rank are all the buffering a sequence of phases needs, with one flag per
 * rank per phase.  A call's first phase carries its fingerprint in the header, beside the
 * data, so the cross-rank check costs no phase of its own.
 *
 * Plain C11 with <stdatomic.h>; the reductions are ck_reduce's (reduce.h). */
#ifndef COLLECTIVES_SHM_H
#define COLLECTIVES_SHM_H

#include <stddef.h>
#include <stdint.h>

#define SHM_DISAGREED 1    /* the ranks' fingerprints differ: the call did nothing */
#define SHM_TIMED_OUT (-2) /* a wait outlived its limit; ``late`` names a rank not arrived */
#define SHM_BAD_OP (-1)    /* the op is not defined on the dtype */
#define SHM_LINE 64

typedef struct shm_seg {
    char *base;        /* the mapping: ``size`` parts of two regions each */
    size_t bytes;
    int rank, size;
    size_t region;     /* bytes of one region, a multiple of SHM_LINE */
    size_t cap;        /* data bytes a phase may always put in a region (the header aside) */
    uint64_t phase;    /* the phases this rank has published */
    /* Waiting (collectives.watchdog's policy): spin, then yield, then sleep with a doubling
     * pause; give up after ``limit`` seconds without a rank arriving. */
    double spin_s, yield_s, max_pause_s, limit;
    double waited;     /* on SHM_TIMED_OUT: how long the wait had made no progress */
    int late;          /* on SHM_TIMED_OUT: the first rank not arrived */
    int step;          /* on SHM_TIMED_OUT: the call's phase that waited, from 0 */
    const void **work; /* room for a pointer per rank */
    /* Called once a wait has spun ``spin_s`` and is about to yield, and when it ends: a caller
     * that holds a lock others need while it waits (Python's GIL) lets go of it there, so a
     * phase that completes at once costs no release.  NULL: nothing to do. */
    void (*park)(struct shm_seg *s);
    void (*unpark)(struct shm_seg *s);
    void *parked;
    /* Called on every turn of a wait past ``spin_s``: lets the MPI library progress what a
     * peer waits for from this rank outside the collective (a passive-target lock, a
     * rendezvous), as a rank blocked in MPI's own collective would.  NULL: nothing to do. */
    void (*poke)(struct shm_seg *s);
    void *poke_arg;
} shm_seg;

/* Region bytes for ``cap`` bytes of data beside a header of up to 4 + size fields. */
size_t shm_region_bytes(int size, size_t cap);

/* Map the POSIX shared-memory object ``name`` of ``bytes`` (``create``: make it, reserve its
 * pages so that a full /dev/shm fails here rather than at a later touch).  0, or an errno. */
int shm_map(shm_seg *s, const char *name, int create, size_t bytes, int rank, int size, size_t region);
/* Zero this rank's own regions (they are placed on its NUMA node at first touch). */
void shm_init_own(shm_seg *s);
int shm_unlink_name(const char *name);
void shm_unmap(shm_seg *s);

/* Every algorithm's first phase publishes the fingerprint ``vec`` (collectives._engine's
 * layout: error, collective, algorithm, then ``nf`` of ``w`` fields) and, with ``check``,
 * folds every rank's into ``vec`` as the checked exchange does (the maximum of each value
 * and of its negation, unknown fields aside).  They return 0, SHM_DISAGREED (some rank's
 * fingerprint differs, or one rank flagged an error: nothing was written to the caller's
 * buffers), SHM_TIMED_OUT or SHM_BAD_OP.  Counts are elements, of dtype's ck_itemsize. */
int shm_agree(shm_seg *s, int64_t *vec, int nf, int w);
int shm_barrier(shm_seg *s, int64_t *vec, int nf, int w, int check);
/* slice 0: every rank combines every rank's vector (count * itemsize <= cap); else the
 * vector's blocks are reduced by their owners and gathered, ``slice`` bytes per round. */
int shm_allreduce(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
                  size_t count, int dtype, int op, size_t slice);
int shm_reduce(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
               size_t count, int dtype, int op, int root, size_t slice);
int shm_bcast(shm_seg *s, int64_t *vec, int nf, int w, int check, void *buf, size_t nbytes, int root,
              size_t chunk);
/* Rank r's block: ``bytes[r]`` at byte ``displs[r]`` of ``out``; ``in`` NULL: this rank's is
 * there already. */
int shm_allgather(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
                  const int64_t *bytes, const int64_t *displs, size_t chunk);
/* Rank r's block of the result: ``counts[r]`` elements, the blocks in rank order. */
int shm_reduce_scatter(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
                       const int64_t *counts, int dtype, int op, size_t slice);

/* Equal blocks of ``block`` bytes, in rank order in the root's buffer (``in`` at the root of a
 * gather and ``out`` at the root of a scatter NULL: its own block stays where it is). */
int shm_gather(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out, size_t block,
               int root, size_t chunk);
int shm_scatter(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out, size_t block,
                int root, size_t chunk);
/* Whether rank r has published this rank's latest phase (a stalled wait's missing ranks). */
int shm_arrived(const shm_seg *s, int r);

#endif
