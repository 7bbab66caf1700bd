/* Collectives through a node's shared segment (shm.h describes the phases).
 *
 * A region starts with its header: the phase it holds (the flag, written last with a release
 * store), a tag word (error flag, collective, field count, algorithm) and the fields of the
 * call's fingerprint; the phase's data follows the fields, so a small payload shares the
 * flag's cache line.  Every combine goes in rank order, x0 op x1 op ... op x(p-1), so every
 * rank gets the same bits whichever rank computes a block, and the direct and split
 * all-reduces agree bit for bit. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reduce.h"
#include "shm.h"

/* A field a rank cannot know (collectives._engine's UNKNOWN): left out of the fold. */
#define UNKNOWN (-(INT64_C(1) << 62))
#define HEAD_WORDS 2

typedef struct {
    _Atomic uint64_t phase;
    int64_t tag;
    int64_t f[];
} head_t;

static inline head_t *head(const shm_seg *s, int r, uint64_t n)
{
    return (head_t *)(s->base + ((size_t)r * 2 + (n & 1)) * s->region);
}

/* Where phase n's data lies in rank r's region, after ``nf`` fields. */
static inline char *data(const shm_seg *s, int r, uint64_t n, int nf)
{
    return (char *)head(s, r, n) + 8 * (HEAD_WORDS + (size_t)nf);
}

static inline size_t header_bytes(int size)
{
    return 8 * (HEAD_WORDS + 4 + (size_t)size);
}

size_t shm_region_bytes(int size, size_t cap)
{
    size_t n = header_bytes(size) + cap;
    return (n + SHM_LINE - 1) / SHM_LINE * SHM_LINE;
}

int shm_map(shm_seg *s, const char *name, int create, size_t bytes, int rank, int size, size_t region)
{
    int fd, rc;
    void *at;
    memset(s, 0, sizeof(*s));
    fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
    if (fd < 0)
        return errno;
    if (create) {
        if (ftruncate(fd, (off_t)bytes) != 0 || (rc = posix_fallocate(fd, 0, (off_t)bytes)) != 0) {
            rc = errno ? errno : ENOSPC;
            close(fd);
            shm_unlink(name);
            return rc;
        }
    }
    at = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    rc = errno;
    close(fd);
    if (at == MAP_FAILED)
        return rc ? rc : ENOMEM;
    s->work = malloc(sizeof(void *) * (size_t)size);
    if (!s->work) {
        munmap(at, bytes);
        return ENOMEM;
    }
    s->base = at;
    s->bytes = bytes;
    s->rank = rank;
    s->size = size;
    s->region = region;
    s->cap = region - header_bytes(size);
    s->late = -1;
    return 0;
}

void shm_init_own(shm_seg *s)
{
    memset(s->base + (size_t)s->rank * 2 * s->region, 0, 2 * s->region);
    s->phase = 0;
    atomic_thread_fence(memory_order_seq_cst);
}

int shm_unlink_name(const char *name)
{
    return shm_unlink(name) == 0 ? 0 : errno;
}

void shm_unmap(shm_seg *s)
{
    if (s->base)
        munmap(s->base, s->bytes);
    free(s->work);
    s->base = NULL;
    s->work = NULL;
}

/* ---- phases -------------------------------------------------------------------------- */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int arrived(const shm_seg *s, int r, uint64_t n)
{
    return atomic_load_explicit(&head(s, r, n)->phase, memory_order_acquire) >= n;
}

/* The tag word of fingerprint ``vec``: [error, collective, algorithm, fields...]. */
static inline int64_t tag_of(const int64_t *vec, int nf)
{
    return (vec[0] ? 1 : 0) | (vec[1] & 0xff) << 8 | ((int64_t)nf & 0xffff) << 16 | vec[2] << 32;
}

/* This rank's fingerprint into its header of phase n. */
static inline void put_fp(shm_seg *s, uint64_t n, const int64_t *vec, int nf)
{
    head_t *h = head(s, s->rank, n);
    int k;
    h->tag = tag_of(vec, nf);
    for (k = 0; k < nf; k++)
        h->f[k] = vec[3 + k];
}

static int wait_slow(shm_seg *s, uint64_t n, int step, int r);

/* Every rank's flag of phase n, spun on briefly before the watched wait takes over. */
static inline int wait_all(shm_seg *s, uint64_t n, int step)
{
    int r = 0, i;
    for (i = 0; i < 64; i++) {
        while (r < s->size && arrived(s, r, n))
            r++;
        if (r == s->size)
            return 0;
        relax();
    }
    return wait_slow(s, n, step, r);
}

static inline void post(shm_seg *s, uint64_t n)
{
    atomic_store_explicit(&head(s, s->rank, n)->phase, n, memory_order_release);
}

/* Until every rank has published phase n; the watchdog's clock restarts whenever one arrives. */
static int wait_slow(shm_seg *s, uint64_t n, int step, int r)
{
    int i, parked = 0;
    double start = -1, pause = 1e-6, t, waited;
    struct timespec ts;
    for (;;) {
        while (r < s->size && arrived(s, r, n)) {
            r++;
            start = -1;
        }
        if (r == s->size) {
            if (parked && s->unpark)
                s->unpark(s);
            return 0;
        }
        for (i = 0; i < 16 && !arrived(s, r, n); i++)
            relax();
        if (i < 16)
            continue;
        t = now();
        if (start < 0) {
            start = t;
            pause = 1e-6;
            continue;
        }
        waited = t - start;
        if (waited > s->limit) {
            if (parked && s->unpark)
                s->unpark(s);
            s->waited = waited;
            s->late = r;
            s->step = step;
            return SHM_TIMED_OUT;
        }
        if (waited > s->spin_s && !parked) {
            parked = 1;
            if (s->park)
                s->park(s);
        }
        if (waited > s->spin_s && s->poke)
            s->poke(s);
        if (waited > s->yield_s) {
            ts.tv_sec = 0;
            ts.tv_nsec = (long)(pause * 1e9);
            nanosleep(&ts, NULL);
            pause = pause * 2 < s->max_pause_s ? pause * 2 : s->max_pause_s;
        } else if (waited > s->spin_s) {
            sched_yield();
        }
    }
}

/* Every rank's fingerprint of phase n folded into ``vec`` (w fields): [error, max of
 * (collective, algorithm, fields), max of their negations], unknown fields left out. */
static void fold(const shm_seg *s, uint64_t n, int64_t *vec, int w)
{
    int m = 2 + w, r, k, nf;
    int64_t err = 0, tag, v, neg;
    for (k = 0; k < m; k++)
        vec[1 + k] = vec[1 + m + k] = INT64_MIN;
    for (r = 0; r < s->size; r++) {
        const head_t *h = head(s, r, n);
        tag = h->tag;
        nf = (int)((tag >> 16) & 0xffff);
        err |= tag & 1;
        for (k = 0; k < m; k++) {
            v = k == 0 ? (tag >> 8) & 0xff : k == 1 ? tag >> 32 : (k - 2 < nf ? h->f[k - 2] : 0);
            neg = v == UNKNOWN ? UNKNOWN : -v;
            if (v > vec[1 + k])
                vec[1 + k] = v;
            if (neg > vec[1 + m + k])
                vec[1 + m + k] = neg;
        }
    }
    vec[0] = err;
}

static int agrees(const int64_t *vec, int w)
{
    int m = 2 + w, k;
    if (vec[0])
        return 0;
    for (k = 0; k < m; k++)
        if (vec[1 + k] != -vec[1 + m + k])
            return 0;
    return 1;
}

/* Whether every rank published this rank's fingerprint ``vec`` of phase n exactly, without an
 * error: the fold's common case, which it need not run.  This rank's own is compared from
 * ``vec``, not from its header: reading that line back while the others are fetching it
 * stalls until they have (about 50 ns a phase here). */
static int alike(const shm_seg *s, uint64_t n, const int64_t *vec, int nf)
{
    int64_t tag = tag_of(vec, nf);
    int r, k;
    if (tag & 1)
        return 0;
    for (r = 0; r < s->size; r++) {
        const head_t *h = head(s, r, n);
        if (r == s->rank)
            continue;
        if (h->tag != tag)
            return 0;
        for (k = 0; k < nf; k++)
            if (h->f[k] != vec[3 + k])
                return 0;
    }
    return 1;
}

/* A call's first phase n, its data already in place: the fingerprint, the flag, the wait
 * and, with ``check``, the fold. */
static int first(shm_seg *s, uint64_t n, int64_t *vec, int nf, int w, int check)
{
    int rc;
    put_fp(s, n, vec, nf);
    post(s, n);
    if ((rc = wait_all(s, n, 0)) != 0)
        return rc;
    if (check && !alike(s, n, vec, nf)) {
        fold(s, n, vec, w);
        if (!agrees(vec, w))
            return SHM_DISAGREED;
    }
    return 0;
}

/* A later phase n of a call (``step`` counts from 0 at the first). */
static int next(shm_seg *s, uint64_t n, int step)
{
    post(s, n);
    return wait_all(s, n, step);
}

/* The phase that starts a call, or a later one. */
static int phase(shm_seg *s, uint64_t n, int step, int64_t *vec, int nf, int w, int check)
{
    return step ? next(s, n, step) : first(s, n, vec, nf, w, check);
}

int shm_agree(shm_seg *s, int64_t *vec, int nf, int w)
{
    uint64_t n = ++s->phase;
    int rc;
    put_fp(s, n, vec, nf);
    post(s, n);
    if ((rc = wait_all(s, n, 0)) != 0)
        return rc;
    fold(s, n, vec, w);
    return 0;
}

int shm_barrier(shm_seg *s, int64_t *vec, int nf, int w, int check)
{
    return first(s, ++s->phase, vec, nf, w, check);
}

/* ---- the split of a vector into rounds ------------------------------------------------- */

/* Block b of ``n`` items in ``k`` near-equal blocks: its length, and its start in *at. */
static inline size_t part(size_t n, size_t k, size_t b, size_t *at)
{
    size_t q = n / k, rem = n % k;
    *at = b * q + (b < rem ? b : rem);
    return q + (b < rem);
}

/* Rounds that keep each round's share of ``total`` items within ``budget`` items, with up to
 * ``pieces`` of rounding (one per block). */
static size_t rounds_for(size_t total, size_t budget, size_t pieces)
{
    size_t room = budget > pieces ? budget - pieces : 1;
    size_t k = (total + room - 1) / room;
    return k ? k : 1;
}

/* ---- all-reduce, reduce, reduce-scatter -------------------------------------------------- */

/* Bytes of a combine's piece: the piece of the result and of each source stay in L1 while the
 * piece is reduced from every source and copied on, so the result is read from memory once
 * instead of once per source. */
#define PIECE 16384

/* Combine in rank order into ``dst`` the ``n`` elements at ``src[r]`` of every rank r, and
 * copy the result to ``copy`` too unless it is NULL. */
static int combine(void *dst, const void *const *src, int p, size_t n, int dtype, int op, void *copy)
{
    size_t e = ck_itemsize(dtype), step = PIECE / e, at, len;
    int r;
    for (at = 0; at < n; at += len) {
        char *d = (char *)dst + at * e;
        len = n - at < step ? n - at : step;
        if (dst != src[0])
            memmove(d, (const char *)src[0] + at * e, len * e);
        for (r = 1; r < p; r++)
            if (ck_reduce(d, (const char *)src[r] + at * e, len, dtype, op) != 0)
                return SHM_BAD_OP;
        if (copy)
            memcpy((char *)copy + at * e, d, len * e);
    }
    return 0;
}

/* Where each rank's data for a combine lies: its region, or this rank's own input when the
 * output cannot have overwritten it. */
static const void **sources(shm_seg *s, uint64_t n, int nf, size_t at, const char *own)
{
    const void **src = s->work;
    int r;
    for (r = 0; r < s->size; r++)
        src[r] = r == s->rank && own ? own : data(s, r, n, nf) + at;
    return src;
}

int shm_allreduce(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
                  size_t count, int dtype, int op, size_t slice)
{
    return shm_reduce(s, vec, nf, w, check, in, out, count, dtype, op, -1, slice);
}

/* root -1: every rank gets the result (all-reduce). */
int shm_reduce(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
               size_t count, int dtype, int op, int root, size_t slice)
{
    size_t e = ck_itemsize(dtype), k, rounds, b, at = 0, mine_at, len, off, pos, cnt;
    int p = s->size, i = s->rank, r, rc, all = root < 0, inplace = in == out;
    uint64_t n;
    char *mine;
    const char *own;
    if (!ck_supported(dtype, op))
        return SHM_BAD_OP;
    if (!slice) {
        /* Direct: every rank's vector in its region; the root (every rank) combines them all. */
        n = ++s->phase;
        memcpy(data(s, i, n, nf), in, count * e);
        if ((rc = first(s, n, vec, nf, w, check)) != 0)
            return rc;
        if (!all && i != root)
            return 0;
        return combine(out, sources(s, n, nf, 0, inplace ? NULL : in), p, count, dtype, op, NULL);
    }
    /* Split: block b of the vector is rank b's to combine, ``rounds`` slices of it per call;
     * each round, every rank puts the slices of the blocks others combine in its region
     * (packed in block order), combines its own slice, and the slices are gathered. */
    rounds = rounds_for(count, slice / e, (size_t)p);
    for (k = 0; k < rounds; k++) {
        int step = (int)(2 * k);
        n = ++s->phase;
        mine = data(s, i, n, step ? 0 : nf);
        pos = mine_at = 0;
        len = 0;
        for (r = 0; r < p; r++) {
            cnt = part(part(count, (size_t)p, (size_t)r, &b), rounds, k, &off);
            if (r == i) {
                mine_at = pos;
                len = cnt;
                at = b + off;
            }
            if (r != i || inplace)
                memcpy(mine + pos * e, (const char *)in + (b + off) * e, cnt * e);
            pos += cnt;
        }
        if ((rc = phase(s, n, step, vec, nf, w, check)) != 0)
            return rc;
        /* This rank's slice: into the output at the root (its own block there), else into the
         * region of the next phase, which every rank may overwrite now. */
        own = inplace ? NULL : (const char *)in + at * e;
        char *next_region = data(s, i, n + 1, 0);
        char *dst = (all || i == root) ? (char *)out + at * e : next_region;
        rc = combine(dst, sources(s, n, step ? 0 : nf, mine_at * e, own), p, len, dtype, op,
                     (all || i == root) && p > 1 ? next_region : NULL);
        if (rc != 0)
            return rc;
        n = ++s->phase;
        if ((rc = next(s, n, step + 1)) != 0)
            return rc;
        if (!all && i != root)
            continue;
        for (r = 0; r < p; r++) {
            if (r == i)
                continue;
            cnt = part(part(count, (size_t)p, (size_t)r, &b), rounds, k, &off);
            memcpy((char *)out + (b + off) * e, data(s, r, n, 0), cnt * e);
        }
    }
    return 0;
}

int shm_reduce_scatter(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
                       const int64_t *counts, int dtype, int op, size_t slice)
{
    size_t e = ck_itemsize(dtype), k, rounds, total = 0, start = 0, b, off, pos, cnt, mine_at = 0, len = 0, at = 0;
    int p = s->size, i = s->rank, r, rc;
    uint64_t n;
    char *mine;
    if (!ck_supported(dtype, op))
        return SHM_BAD_OP;
    for (r = 0; r < p; r++) {
        total += (size_t)counts[r];
        if (r < i)
            start += (size_t)counts[r];
    }
    /* Each round carries a slice of every block: ``rounds`` keeps it within the region. */
    rounds = rounds_for(total, (slice ? slice : s->cap) / e, (size_t)p);
    for (k = 0; k < rounds; k++) {
        int step = (int)k;
        n = ++s->phase;
        mine = data(s, i, n, step ? 0 : nf);
        pos = b = 0;
        for (r = 0; r < p; r++) {
            cnt = part((size_t)counts[r], rounds, k, &off);
            if (r == i) {
                mine_at = pos;
                len = cnt;
                at = off;
            } else {
                memcpy(mine + pos * e, (const char *)in + (b + off) * e, cnt * e);
            }
            pos += cnt;
            b += (size_t)counts[r];
        }
        if ((rc = phase(s, n, step, vec, nf, w, check)) != 0)
            return rc;
        rc = combine((char *)out + at * e, sources(s, n, step ? 0 : nf, mine_at * e,
                                                    (const char *)in + (start + at) * e), p, len, dtype, op, NULL);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- broadcast and all-gather ------------------------------------------------------------- */

int shm_bcast(shm_seg *s, int64_t *vec, int nf, int w, int check, void *buf, size_t nbytes, int root,
              size_t chunk)
{
    size_t k, rounds, at, len;
    int rc, mine = s->rank == root;
    uint64_t n;
    if (!chunk || chunk > s->cap)
        chunk = s->cap;
    rounds = nbytes ? (nbytes + chunk - 1) / chunk : 1;
    for (k = 0; k < rounds; k++) {
        int step = (int)k;
        n = ++s->phase;
        len = part(nbytes, rounds, k, &at);
        if (mine)
            memcpy(data(s, root, n, step ? 0 : nf), (char *)buf + at, len);
        if ((rc = phase(s, n, step, vec, nf, w, check)) != 0)
            return rc;
        if (!mine)
            memcpy((char *)buf + at, data(s, root, n, step ? 0 : nf), len);
    }
    return 0;
}

int shm_allgather(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out,
                  const int64_t *bytes, const int64_t *displs, size_t chunk)
{
    size_t k, rounds, most = 0, at, len;
    int p = s->size, i = s->rank, r, rc;
    uint64_t n;
    const char *own = in ? (const char *)in : (const char *)out + displs[i];
    if (!chunk || chunk > s->cap)
        chunk = s->cap;
    for (r = 0; r < p; r++)
        if ((size_t)bytes[r] > most)
            most = (size_t)bytes[r];
    rounds = most ? (most + chunk - 1) / chunk : 1;
    for (k = 0; k < rounds; k++) {
        int step = (int)k;
        n = ++s->phase;
        len = part((size_t)bytes[i], rounds, k, &at);
        memcpy(data(s, i, n, step ? 0 : nf), own + at, len);
        if ((rc = phase(s, n, step, vec, nf, w, check)) != 0)
            return rc;
        if (k == 0 && in)
            memmove((char *)out + displs[i], in, (size_t)bytes[i]);
        for (r = 0; r < p; r++) {
            if (r == i)
                continue;
            len = part((size_t)bytes[r], rounds, k, &at);
            memcpy((char *)out + displs[r] + at, data(s, r, n, step ? 0 : nf), len);
        }
    }
    return 0;
}

/* ---- gather and scatter (equal blocks) ------------------------------------------------------ */

int shm_gather(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out, size_t block,
               int root, size_t chunk)
{
    size_t k, rounds, at, len;
    int p = s->size, i = s->rank, r, rc;
    uint64_t n;
    if (!chunk || chunk > s->cap)
        chunk = s->cap;
    rounds = block ? (block + chunk - 1) / chunk : 1;
    for (k = 0; k < rounds; k++) {
        int step = (int)k;
        n = ++s->phase;
        len = part(block, rounds, k, &at);
        if (i != root)
            memcpy(data(s, i, n, step ? 0 : nf), (const char *)in + at, len);
        if ((rc = phase(s, n, step, vec, nf, w, check)) != 0)
            return rc;
        if (i != root)
            continue;
        if (k == 0 && in)
            memmove((char *)out + (size_t)root * block, in, block);
        for (r = 0; r < p; r++)
            if (r != root)
                memcpy((char *)out + (size_t)r * block + at, data(s, r, n, step ? 0 : nf), len);
    }
    return 0;
}

int shm_scatter(shm_seg *s, int64_t *vec, int nf, int w, int check, const void *in, void *out, size_t block,
                int root, size_t chunk)
{
    size_t k, rounds, at, len;
    int p = s->size, i = s->rank, r, rc;
    uint64_t n;
    char *mine;
    if (!chunk || chunk > s->cap)
        chunk = s->cap;
    /* Each round, the root's region holds a slice of every block, in rank order. */
    rounds = rounds_for((size_t)p * block, chunk, (size_t)p);
    if (rounds > block && block)
        rounds = block;
    for (k = 0; k < rounds; k++) {
        int step = (int)k;
        n = ++s->phase;
        len = part(block, rounds, k, &at);
        if (i == root) {
            mine = data(s, root, n, step ? 0 : nf);
            for (r = 0; r < p; r++)
                memcpy(mine + (size_t)r * len, (const char *)in + (size_t)r * block + at, len);
        }
        if ((rc = phase(s, n, step, vec, nf, w, check)) != 0)
            return rc;
        if (i == root) {
            if (out)
                memmove((char *)out + at, (const char *)in + (size_t)root * block + at, len);
        } else {
            memcpy((char *)out + at, data(s, root, n, step ? 0 : nf) + (size_t)i * len, len);
        }
    }
    return 0;
}

int shm_arrived(const shm_seg *s, int r)
{
    return arrived(s, r, s->phase);
}
