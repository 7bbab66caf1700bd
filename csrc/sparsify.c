/* Sparsifiers: exact top-k, sampled-threshold top-k, fixed threshold, random-k, scatter-add.
 *
 * Every selection scans x 16 elements at a time into bit masks (AVX-512 or AVX2 when the CPU
 * has them), 4096 elements per chunk, then visits the set bits in index order: at 1% kept
 * most 16-element blocks have an empty mask and cost no branch per element.  The comparisons
 * run on the bit patterns of |x|, whose order for non-negative floats is that of the values.
 * Exact top-k first estimates a threshold from a sample at fixed positions, at a rank chosen
 * so that at least k elements survive it with high probability; when they do, every element
 * at or above the k-th largest is among the survivors, and quickselect on their bit patterns
 * finds the k-th largest.  When fewer than k survive (or far more than expected), a radix
 * select does it instead: one pass builds a histogram of the top 16 bits, the bucket holding
 * the k-th largest is copied out and finished by quickselect.  Either way a last step
 * collects the winners in index order, ties at the k-th magnitude going to the lowest
 * indices, so the result does not depend on the sample.  Inputs must be free of NaN (the
 * NumPy twin and the C kernel may then disagree on which elements win).
 * The approximate top-k (Deep Gradient Compression) takes its threshold from a sample of
 * nsample elements drawn with replacement at rng.h positions (bits mod n), keeps the
 * elements at or above it, and runs the exact top-k on those when more than k survive.
 * Random-k keeps element i when its rng.h bits fall below a threshold; its masks come from
 * those bits instead of the data. */
#pragma GCC optimize("fp-contract=off")
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "compress.h"
#include "cpu.h"
#include "rng.h"

#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define HBITS 16

typedef uint32_t __attribute__((may_alias)) alias_u32;
typedef uint64_t __attribute__((may_alias)) alias_u64;

/* ---- random-k selection masks -------------------------------------------------------- */

/* Bit j of masks[b] is set when element i0 + 16 b + j is kept (its bits < thr), b < nb. */
static void randk_masks_generic(uint64_t seed, uint32_t thr, size_t i0, size_t nb,
                                uint16_t *masks)
{
    for (size_t b = 0; b < nb; b++) {
        unsigned m = 0;
        for (unsigned j = 0; j < 16; j++)
            m |= (unsigned)(ck_rng_bits(seed, (uint32_t)(i0 + 16 * b + j)) < thr) << j;
        masks[b] = (uint16_t)m;
    }
}

/* ck_mix32 on 16 lanes. */
__attribute__((target("avx512f"))) static inline __m512i mix32_avx512(__m512i x)
{
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bU));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

__attribute__((target("avx512f")))
static void randk_masks_avx512(uint64_t seed, uint32_t thr, size_t i0, size_t nb,
                               uint16_t *masks)
{
    const __m512i lo = _mm512_set1_epi32((int)(uint32_t)seed);
    const __m512i hi = _mm512_set1_epi32((int)(uint32_t)(seed >> 32));
    const __m512i t = _mm512_set1_epi32((int)thr), step = _mm512_set1_epi32(16);
    const __m512i lane =
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i i = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)i0), lane);
    for (size_t b = 0; b < nb; b++, i = _mm512_add_epi32(i, step))
        masks[b] = _mm512_cmplt_epu32_mask(
            mix32_avx512(_mm512_xor_si512(mix32_avx512(_mm512_xor_si512(i, lo)), hi)), t);
}

static void randk_masks(uint64_t seed, uint32_t thr, size_t i0, size_t nb, uint16_t *masks)
{
    if (ck_simd_level() == 2)
        randk_masks_avx512(seed, thr, i0, nb, masks);
    else
        randk_masks_generic(seed, thr, i0, nb, masks);
}

/* ---- visiting the selected elements, 16 mask bits at a time ------------------------- */

#define CHUNK 4096 /* elements whose masks are made at a time */

/* Run BODY with i set to each index below n whose mask bit is set, in increasing order.  FILL
 * is a statement that sets masks_[b] for b < nb_, bit j for element c0_ + 16 b + j, from the
 * len_ elements starting at c0_ (bits past them may be set; they are ignored). */
#define FOR_SET(i, n, FILL, BODY)                                                            \
    for (size_t c0_ = 0; c0_ < (n); c0_ += CHUNK) {                                          \
        uint16_t masks_[CHUNK / 16];                                                         \
        size_t len_ = (n) - c0_ < CHUNK ? (n) - c0_ : CHUNK, nb_ = (len_ + 15) / 16;         \
        FILL;                                                                                \
        for (size_t b_ = 0; b_ < nb_; b_++)                                                  \
            for (unsigned m_ = masks_[b_]; m_; m_ &= m_ - 1) {                               \
                size_t i = c0_ + 16 * b_ + (size_t)__builtin_ctz(m_);                        \
                if (i >= (n))                                                                \
                    break;                                                                   \
                BODY                                                                         \
            }                                                                                \
    }

/* Run BODY with i set to each kept index below n, in increasing order. */
#define FOR_KEPT(i, n, thr, seed, BODY)                                                      \
    FOR_SET(i, n, randk_masks(seed, thr, c0_, nb_, masks_), BODY)

/* Run BODY with i set to each index below n with lo <= (bits of |x[i]|) <= hi, in order.
 * A non-NULL add is added into x chunk by chunk just before the chunk's masks are made, while
 * it is in cache; added then counts the leading elements of x that hold their sum. */
#define FOR_IN_RANGE(SUF, i, x, add, added, n, lo, hi, BODY)                                 \
    FOR_SET(i, n,                                                                            \
            {                                                                                \
                if (add) {                                                                   \
                    add_##SUF((x) + c0_, (add) + c0_, len_);                                 \
                    (added) = c0_ + len_;                                                    \
                }                                                                            \
                range_masks_##SUF((x) + c0_, len_, lo, hi, masks_);                          \
            },                                                                               \
            BODY)

/* The hand-vectorised range masks: blocks b < nb of 16 elements of the unsigned W-bit bit
 * patterns at u, bit j set when ((u[16 b + j] & ABS) - lo) <= span (unsigned, so it tests
 * lo <= |x| <= lo + span).  AVX2 has only signed compares: flipping the sign bit of both
 * sides turns the unsigned one into a signed one.  P is ps or pd: the movemask of W-bit lanes. */
#define RANGE_SIMD(SUF, UT, W, ABS, SET256, P)                                               \
    __attribute__((target("avx512f"))) static void range_avx512_##SUF(                       \
        const UT *u, size_t nb, UT lo, UT span, uint16_t *m)                                 \
    {                                                                                        \
        const __m512i a = _mm512_set1_epi##W((UT)(ABS)), l = _mm512_set1_epi##W(lo),        \
                      s = _mm512_set1_epi##W(span);                                          \
        for (size_t b = 0; b < nb; b++) {                                                    \
            unsigned bits = 0;                                                               \
            for (unsigned j = 0; j < 16; j += 512 / W) {                                     \
                __m512i v = _mm512_and_si512(_mm512_loadu_si512(u + 16 * b + j), a);         \
                bits |= (unsigned)_mm512_cmple_epu##W##_mask(_mm512_sub_epi##W(v, l), s) << j; \
            }                                                                                \
            m[b] = (uint16_t)bits;                                                           \
        }                                                                                    \
    }                                                                                        \
    __attribute__((target("avx2"))) static void range_avx2_##SUF(const UT *u, size_t nb,     \
                                                                  UT lo, UT span, uint16_t *m) \
    {                                                                                        \
        const UT sign = (UT)1 << (W - 1);                                                    \
        const __m256i a = SET256((UT)(ABS)), l = SET256(lo), f = SET256(sign),               \
                      s = SET256(span ^ sign);                                               \
        for (size_t b = 0; b < nb; b++) {                                                    \
            unsigned out = 0;                                                                \
            for (unsigned j = 0; j < 16; j += 256 / W) {                                     \
                __m256i v = _mm256_loadu_si256((const __m256i *)(u + 16 * b + j));           \
                v = _mm256_and_si256(v, a);                                                  \
                __m256i d = _mm256_xor_si256(_mm256_sub_epi##W(v, l), f);                    \
                out |= (unsigned)_mm256_movemask_##P(                                        \
                           _mm256_castsi256_##P(_mm256_cmpgt_epi##W(d, s))) << j;             \
            }                                                                                \
            m[b] = (uint16_t)~out;                                                           \
        }                                                                                    \
    }                                                                                        \
    /* Masks for the len elements at x (ceil(len / 16) blocks, bits past len clear). */      \
    static void range_masks_##SUF(const void *x, size_t len, UT lo, UT hi, uint16_t *m)      \
    {                                                                                        \
        const UT *u = (const UT *)x, span = hi - lo;                                         \
        size_t done = len / 16;                                                              \
        int level = ck_simd_level();                                                         \
        if (level == 2)                                                                      \
            range_avx512_##SUF(u, done, lo, span, m);                                        \
        else if (level == 1)                                                                 \
            range_avx2_##SUF(u, done, lo, span, m);                                          \
        else                                                                                 \
            done = 0;                                                                        \
        for (size_t b = done; 16 * b < len; b++) {                                           \
            unsigned bits = 0;                                                               \
            for (size_t j = 0; j < 16 && 16 * b + j < len; j++)                              \
                bits |= (unsigned)((UT)((u[16 * b + j] & (UT)(ABS)) - lo) <= span) << j;     \
            m[b] = (uint16_t)bits;                                                           \
        }                                                                                    \
    }

RANGE_SIMD(f32, alias_u32, 32, 0x7fffffffU, _mm256_set1_epi32, ps)
RANGE_SIMD(f64, alias_u64, 64, 0x7fffffffffffffffULL, _mm256_set1_epi64x, pd)

/* Exact top-k's sample: TOPK_SAMPLE elements at fixed positions (rng.h, seed TOPK_SEED); it is
 * taken when n >= TOPK_MIN_N and k <= n / TOPK_MAX_FRACTION, where it pays for itself. */
#define TOPK_SAMPLE 8192
#define TOPK_SEED 0x746f706bU
#define TOPK_MIN_N 65536
#define TOPK_MAX_FRACTION 16
/* Sample elements fetched ahead of the one being read (sample_kth). */
#define SAMPLE_AHEAD 32

/* A block of at least `bytes` kept by this thread across calls, or NULL when out of memory.
 * The sampled top-k's survivors take about 2 MB at 4 Mi float32; a fresh block per call paid
 * its page faults on every call (a tenth of the kernel's time).  The largest block asked for
 * stays until the thread ends. */
static void *kept_block(size_t bytes)
{
    static __thread void *block;
    static __thread size_t size;
    if (bytes > size) {
        free(block);
        block = malloc(bytes);
        size = block ? bytes : 0;
    }
    return block;
}

#define SPARSE(SUF, T, UT, ALIAS, ABSMASK, INFKEY)                                           \
    /* The r-th largest (r >= 1) of a[0..m), reordering a; Hoare partition, median of 3. */  \
    static UT select_##SUF(UT *a, size_t m, size_t r)                                        \
    {                                                                                        \
        size_t lo = 0, hi = m - 1, want = m - r;                                             \
        while (lo < hi) {                                                                    \
            size_t mid = lo + (hi - lo) / 2;                                                 \
            UT x = a[lo], y = a[mid], z = a[hi];                                             \
            UT p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));    \
            size_t i = lo, j = hi;                                                           \
            while (i <= j) {                                                                 \
                while (a[i] < p)                                                             \
                    i++;                                                                     \
                while (a[j] > p)                                                             \
                    j--;                                                                     \
                if (i <= j) {                                                                \
                    UT t = a[i];                                                             \
                    a[i] = a[j];                                                             \
                    a[j] = t;                                                                \
                    i++;                                                                     \
                    if (j == 0)                                                              \
                        break;                                                               \
                    j--;                                                                     \
                }                                                                            \
            }                                                                                \
            if (want <= j)                                                                   \
                hi = j;                                                                      \
            else if (want >= i)                                                              \
                lo = i;                                                                      \
            else                                                                             \
                return a[want];                                                              \
        }                                                                                    \
        return a[want];                                                                      \
    }                                                                                        \
    /* x += a, the error feedback's residual update fused into a selection's first pass. */  \
    CLONES static void add_##SUF(T *restrict x, const T *restrict a, size_t n)               \
    {                                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            x[i] += a[i];                                                                    \
    }                                                                                        \
    CLONES static void histogram_##SUF(const ALIAS *b, size_t n, uint32_t *hist)             \
    {                                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            hist[(b[i] & ABSMASK) >> (8 * sizeof(UT) - 1 - HBITS)]++;                        \
    }                                                                                        \
    /* The r-th largest t of cand[0..m) (reordered); *ties = how many of the r equal t. */   \
    static UT kth_##SUF(UT *cand, size_t m, size_t r, size_t *ties)                          \
    {                                                                                        \
        UT t = select_##SUF(cand, m, r);                                                     \
        size_t greater = 0;                                                                  \
        for (size_t i = 0; i < m; i++)                                                       \
            greater += cand[i] > t;                                                          \
        *ties = r - greater;                                                                 \
        return t;                                                                            \
    }                                                                                        \
    /* Whether key a is among the top k: above t, or equal to t while ties are left. */      \
    static inline int take_##SUF(UT a, UT t, size_t *ties)                                   \
    {                                                                                        \
        return a > t || (a == t && *ties && (--*ties, 1));                                   \
    }                                                                                        \
    /* Keep x[i] as the c-th selected (its index too unless idx is NULL) while c < cap. */   \
    static inline void keep_##SUF(T *x, size_t i, int64_t *idx, T *vals, size_t *c,          \
                                  size_t cap, int zero)                                      \
    {                                                                                        \
        if (*c < cap) {                                                                      \
            if (idx)                                                                         \
                idx[*c] = (int64_t)i;                                                        \
            vals[*c] = x[i];                                                                 \
            if (zero)                                                                        \
                x[i] = 0;                                                                    \
        }                                                                                    \
        ++*c;                                                                                \
    }                                                                                        \
    /* Put back the c values cv at positions ci of x (survivors cleared but not selected). */ \
    static void restore_##SUF(T *x, const int64_t *ci, const T *cv, size_t c)                \
    {                                                                                        \
        for (size_t j = 0; j < c; j++)                                                       \
            x[ci[j]] = cv[j];                                                                \
    }                                                                                        \
    /* The radix select: the k-th largest key from a histogram of the top HBITS bits, made   \
     * after adding add (unless NULL) into x chunk by chunk. */                              \
    static int topk_radix_##SUF(T *x, const T *add, size_t n, size_t k, UT *t, size_t *ties) \
    {                                                                                        \
        const ALIAS *b = (const ALIAS *)x;                                                   \
        uint32_t *hist = calloc((size_t)1 << HBITS, sizeof *hist);                           \
        if (!hist)                                                                           \
            return -1;                                                                       \
        for (size_t c0 = 0; c0 < n; c0 += CHUNK) {                                           \
            size_t len = n - c0 < CHUNK ? n - c0 : CHUNK;                                    \
            if (add)                                                                         \
                add_##SUF(x + c0, add + c0, len);                                            \
            histogram_##SUF(b + c0, len, hist);                                              \
        }                                                                                    \
        size_t above = 0, bin = ((size_t)1 << HBITS) - 1;                                    \
        while (above + hist[bin] < k)                                                        \
            above += hist[bin--];                                                            \
        size_t m = hist[bin], shift = 8 * sizeof(UT) - 1 - HBITS;                            \
        free(hist);                                                                          \
        UT *cand = malloc(m * sizeof *cand);                                                 \
        if (!cand)                                                                           \
            return -1;                                                                       \
        for (size_t i = 0, c = 0; c < m; i++) {                                              \
            UT a = b[i] & ABSMASK;                                                           \
            if ((a >> shift) == bin)                                                         \
                cand[c++] = a;                                                               \
        }                                                                                    \
        *t = kth_##SUF(cand, m, k - above, ties);                                            \
        free(cand);                                                                          \
        return 0;                                                                            \
    }                                                                                        \
    /* *key = the r-th largest |x + add| bits (|x| when add is NULL) of ns drawn at rng.h    \
     * positions (bits mod n); -1 out of memory. */                                          \
    static int sample_kth_##SUF(const T *x, const T *add, size_t n, size_t ns, uint64_t seed, \
                                size_t r, UT *key)                                           \
    {                                                                                        \
        UT *s = malloc(ns * sizeof *s);                                                      \
        if (!s)                                                                              \
            return -1;                                                                       \
        for (size_t j = 0; j < ns; j++) {                                                    \
            /* The positions are scattered over x: fetch ahead, or each read waits alone. */ \
            if (j + SAMPLE_AHEAD < ns) {                                                     \
                size_t a = ck_rng_bits(seed, (uint32_t)(j + SAMPLE_AHEAD)) % n;              \
                __builtin_prefetch(x + a);                                                   \
                if (add)                                                                     \
                    __builtin_prefetch(add + a);                                             \
            }                                                                                \
            size_t i = ck_rng_bits(seed, (uint32_t)j) % n;                                   \
            T v = add ? x[i] + add[i] : x[i];                                                \
            memcpy(&s[j], &v, sizeof v);                                                     \
            s[j] &= ABSMASK;                                                                 \
        }                                                                                    \
        *key = select_##SUF(s, ns, r);                                                       \
        free(s);                                                                             \
        return 0;                                                                            \
    }                                                                                        \
    /* The sampled select: 1 when it wrote the top k, 0 when the sample missed (survivors    \
     * fewer than k or more than planned), -1 out of memory.  A non-NULL add is added into x \
     * in the scan; *added counts the leading elements of x that hold their sum on return. */ \
    static int topk_sampled_##SUF(T *x, const T *add, size_t *added, size_t n, size_t k,     \
                                  int64_t *idx, T *vals, int zero)                           \
    {                                                                                        \
        /* e sample elements are expected at or above the k-th largest, with sd <= sqrt(e):  \
         * the sample's (e + 4 sqrt(e) + 1)-th largest is below it but for ~4 sd. */         \
        size_t e = (size_t)(((unsigned __int128)k * TOPK_SAMPLE + n - 1) / n), q = 0;        \
        while ((q + 1) * (q + 1) <= e)                                                       \
            q++;                                                                             \
        size_t r = e + 4 * q + 1;                                                            \
        UT lo;                                                                               \
        if (r > TOPK_SAMPLE)                                                                 \
            return 0;                                                                        \
        if (sample_kth_##SUF(x, add, n, TOPK_SAMPLE, TOPK_SEED, r, &lo))                     \
            return -1;                                                                       \
        /* About r n / TOPK_SAMPLE survive; twice that leaves room for the sample's error. */ \
        size_t cap = (size_t)(((unsigned __int128)2 * r * n) / TOPK_SAMPLE) + 64, c = 0;     \
        int64_t *ci = kept_block(cap * (sizeof *ci + sizeof(T) + sizeof(UT)));               \
        if (!ci)                                                                             \
            return -1;                                                                       \
        T *cv = (T *)(ci + cap);                                                             \
        UT *cand = (UT *)(cv + cap);                                                         \
        int rc = 0;                                                                          \
        /* Survivors are cleared as they are read (their cache lines are at hand then); the  \
         * ones not selected are put back afterwards, fewer writes than clearing the top k. */ \
        if (!rc)                                                                             \
            FOR_IN_RANGE(SUF, i, x, add, *added, n, lo, (UT)ABSMASK, {                       \
                if (c == cap)                                                                \
                    goto scanned; /* far more survive than planned: the sample missed */     \
                keep_##SUF(x, i, ci, cv, &c, cap, zero);                                     \
            })                                                                               \
        if (c >= k) {                                                                        \
            const ALIAS *cb = (const ALIAS *)cv;                                             \
            size_t ties, o = 0;                                                              \
            for (size_t j = 0; j < c; j++)                                                   \
                cand[j] = cb[j] & ABSMASK;                                                   \
            UT t = kth_##SUF(cand, c, k, &ties);                                             \
            for (size_t j = 0; j < c; j++)                                                   \
                if (take_##SUF(cb[j] & ABSMASK, t, &ties)) {                                 \
                    idx[o] = ci[j];                                                          \
                    vals[o++] = cv[j];                                                       \
                } else if (zero)                                                             \
                    x[ci[j]] = cv[j];                                                        \
            rc = 1;                                                                          \
        }                                                                                    \
    scanned:                                                                                 \
        if (rc < 1 && zero)                                                                  \
            restore_##SUF(x, ci, cv, c);                                                     \
        return rc;                                                                           \
    }                                                                                        \
    int ck_topk_##SUF(T *x, const T *add, size_t n, size_t k, int64_t *idx, T *vals, int zero) \
    {                                                                                        \
        size_t added = 0;                                                                    \
        if (k >= n) {                                                                        \
            for (size_t i = 0; i < n; i++) {                                                 \
                T v = add ? x[i] + add[i] : x[i];                                            \
                idx[i] = (int64_t)i;                                                         \
                vals[i] = v;                                                                 \
                x[i] = zero ? 0 : v;                                                         \
            }                                                                                \
            return 0;                                                                        \
        }                                                                                    \
        if (k == 0) {                                                                        \
            if (add)                                                                         \
                add_##SUF(x, add, n);                                                        \
            return 0;                                                                        \
        }                                                                                    \
        if (n >= TOPK_MIN_N && k <= n / TOPK_MAX_FRACTION) {                                 \
            int rc = topk_sampled_##SUF(x, add, &added, n, k, idx, vals, zero);              \
            if (rc > 0)                                                                      \
                return 0;                                                                    \
            /* A miss may have left the scan part way: the radix select needs all of x summed. */ \
            if (add && added) {                                                              \
                add_##SUF(x + added, add + added, n - added);                                \
                add = NULL;                                                                  \
            }                                                                                \
            if (rc < 0)                                                                      \
                return -1;                                                                   \
        }                                                                                    \
        UT t;                                                                                \
        size_t ties, c = 0;                                                                  \
        if (topk_radix_##SUF(x, add, n, k, &t, &ties))                                       \
            return -1;                                                                       \
        add = NULL; /* x holds the sum now */                                                \
        FOR_IN_RANGE(SUF, i, x, add, added, n, t, (UT)ABSMASK, {                             \
            if (take_##SUF(((const ALIAS *)x)[i] & ABSMASK, t, &ties))                       \
                keep_##SUF(x, i, idx, vals, &c, k, zero);                                    \
        })                                                                                   \
        return 0;                                                                            \
    }                                                                                        \
    CLONES static size_t count_##SUF(const T *x, size_t n, T thr)                             \
    {                                                                                        \
        size_t c = 0;                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            c += (x[i] < 0 ? -x[i] : x[i]) >= thr;                                           \
        return c;                                                                            \
    }                                                                                        \
    size_t ck_threshold_count_##SUF(T *x, const T *add, size_t n, T thr)                     \
    {                                                                                        \
        size_t c = 0;                                                                        \
        if (!add)                                                                            \
            return count_##SUF(x, n, thr);                                                   \
        for (size_t c0 = 0; c0 < n; c0 += CHUNK) {                                           \
            size_t len = n - c0 < CHUNK ? n - c0 : CHUNK;                                    \
            add_##SUF(x + c0, add + c0, len);                                                \
            c += count_##SUF(x + c0, len, thr);                                              \
        }                                                                                    \
        return c;                                                                            \
    }                                                                                        \
    /* |x| >= thr is lo <= bits of |x| <= INFKEY (NaN above it) with lo the bits of thr, or  \
     * of 0 when thr <= 0; a NaN threshold keeps nothing. */                                 \
    size_t ck_threshold_##SUF(T *x, const T *add, size_t n, T thr, int64_t *idx, T *vals,    \
                              size_t cap, int zero)                                          \
    {                                                                                        \
        UT lo = 0;                                                                           \
        size_t c = 0;                                                                        \
        size_t added __attribute__((unused)); /* the scan runs to the end: not needed */     \
        if (thr != thr) {                                                                    \
            if (add)                                                                         \
                add_##SUF(x, add, n);                                                        \
            return 0;                                                                        \
        }                                                                                    \
        if (thr > 0)                                                                         \
            memcpy(&lo, &thr, sizeof lo);                                                    \
        FOR_IN_RANGE(SUF, i, x, add, added, n, lo, (UT)INFKEY,                               \
                     { keep_##SUF(x, i, idx, vals, &c, cap, zero); })                        \
        return c;                                                                            \
    }                                                                                        \
    int64_t ck_approx_topk_##SUF(T *x, const T *add, size_t n, size_t k, size_t nsample,     \
                                 uint64_t seed, int64_t *idx, T *vals, int zero)             \
    {                                                                                        \
        if (nsample == 0 || k == 0 || k >= n)                                                \
            return ck_topk_##SUF(x, add, n, k < n ? k : n, idx, vals, zero) ? -1             \
                                                                       : (int64_t)(k < n ? k : n); \
        /* The sample's ceil(k * nsample / n)-th largest estimates the k-th largest. */      \
        size_t r = (size_t)(((unsigned __int128)k * nsample + n - 1) / n);                   \
        UT key;                                                                              \
        if (sample_kth_##SUF(x, add, n, nsample, seed, r, &key))                             \
            return -1;                                                                       \
        T thr;                                                                               \
        memcpy(&thr, &key, sizeof thr);                                                      \
        /* About k survive; with room for twice that the scan is done once but for a miss. */ \
        int64_t *ci;                                                                         \
        T *cv;                                                                               \
        size_t c;                                                                            \
        for (size_t cap = 2 * k + 64;; cap = c) {                                            \
            ci = malloc(cap * sizeof *ci);                                                   \
            cv = malloc(cap * sizeof *cv);                                                   \
            if (!ci || !cv) {                                                                \
                free(ci);                                                                    \
                free(cv);                                                                    \
                return -1;                                                                   \
            }                                                                                \
            c = ck_threshold_##SUF(x, add, n, thr, ci, cv, cap, zero);                       \
            add = NULL; /* x holds the sum now: a rescan must not add again */               \
            if (c <= cap)                                                                    \
                break;                                                                       \
            if (zero)                                                                        \
                restore_##SUF(x, ci, cv, cap);                                               \
            free(ci);                                                                        \
            free(cv);                                                                        \
        }                                                                                    \
        int rc = 0;                                                                          \
        if (c <= k) {                                                                        \
            memcpy(idx, ci, c * sizeof *ci);                                                 \
            memcpy(vals, cv, c * sizeof *cv);                                                \
        } else if ((rc = ck_topk_##SUF(cv, NULL, c, k, idx, vals, 0)) != 0) {                \
            if (zero)                                                                        \
                restore_##SUF(x, ci, cv, c);                                                 \
        } else                                                                               \
            /* idx holds positions among the survivors, ascending: map them to x, and put    \
             * back the survivors not selected. */                                           \
            for (size_t j = 0, o = 0; j < c; j++)                                            \
                if (o < k && idx[o] == (int64_t)j)                                           \
                    idx[o++] = ci[j];                                                        \
                else if (zero)                                                               \
                    x[ci[j]] = cv[j];                                                        \
        free(ci);                                                                            \
        free(cv);                                                                            \
        return rc ? -1 : (int64_t)(c < k ? c : k);                                           \
    }                                                                                        \
    size_t ck_randk_##SUF(T *x, size_t n, uint32_t thr, uint64_t seed, T *vals, size_t cap,  \
                          int zero)                                                          \
    {                                                                                        \
        size_t c = 0;                                                                        \
        FOR_KEPT(i, n, thr, seed, { keep_##SUF(x, i, NULL, vals, &c, cap, zero); })          \
        return c;                                                                            \
    }                                                                                        \
    void ck_randk_scatter_add_##SUF(T *dst, size_t n, uint32_t thr, uint64_t seed,           \
                                    const T *vals, size_t m, T scale)                        \
    {                                                                                        \
        size_t c = 0;                                                                        \
        FOR_KEPT(i, n, thr, seed, {                                                          \
            if (c < m)                                                                       \
                dst[i] += vals[c++] * scale;                                                 \
        })                                                                                   \
    }                                                                                        \
    int ck_scatter_add_##SUF(T *dst, size_t n, const int64_t *idx, const T *vals, size_t m,  \
                             T scale)                                                        \
    {                                                                                        \
        for (size_t j = 0; j < m; j++)                                                       \
            if (idx[j] < 0 || (uint64_t)idx[j] >= n)                                         \
                return -1;                                                                   \
        for (size_t j = 0; j < m; j++)                                                       \
            dst[idx[j]] += vals[j] * scale;                                                  \
        return 0;                                                                            \
    }

SPARSE(f32, float, uint32_t, alias_u32, 0x7fffffffU, 0x7f800000U)
SPARSE(f64, double, uint64_t, alias_u64, 0x7fffffffffffffffULL, 0x7ff0000000000000ULL)

size_t ck_randk_indices(size_t n, uint32_t thr, uint64_t seed, int64_t *idx, size_t cap)
{
    size_t c = 0;
    FOR_KEPT(i, n, thr, seed, {
        if (c < cap)
            idx[c] = (int64_t)i;
        c++;
    })
    return c;
}
