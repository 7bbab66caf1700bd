/* Sparsifiers: exact top-k, sampled-threshold top-k, fixed threshold, random-k, scatter-add.
 *
 * Exact top-k is a radix select on the bit patterns of |x| (for non-negative floats the
 * order of the bits is the order of the values): one pass builds a histogram of the top 16
 * bits, the bucket holding the k-th largest is copied out and finished by quickselect, and a
 * last pass collects the winners in index order.  Three streaming passes and no sort.
 * Ties at the k-th magnitude go to the lowest indices.  Inputs must be free of NaN (the
 * NumPy twin and the C kernel may then disagree on which elements win).
 * The approximate top-k (Deep Gradient Compression) takes its threshold from a sample of
 * nsample elements drawn with replacement at rng.h positions (bits mod n), keeps the
 * elements at or above it, and runs the exact top-k on those when more than k survive.
 * Random-k keeps element i when its rng.h bits fall below a threshold; the bits are drawn
 * 16 elements at a time (AVX-512 when the CPU has it) into masks, whose set bits are then
 * visited in index order, so the 99% of elements not kept cost no branch each. */
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

#define RANDK_CHUNK 4096 /* elements whose masks are drawn at a time */

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

/* Run BODY with i set to each kept index below n, in increasing order. */
#define FOR_KEPT(i, n, thr, seed, BODY)                                                      \
    for (size_t c0_ = 0; c0_ < (n); c0_ += RANDK_CHUNK) {                                    \
        uint16_t masks_[RANDK_CHUNK / 16];                                                   \
        size_t nb_ = (((n) - c0_ < RANDK_CHUNK ? (n) - c0_ : RANDK_CHUNK) + 15) / 16;        \
        randk_masks(seed, thr, c0_, nb_, masks_);                                            \
        for (size_t b_ = 0; b_ < nb_; b_++)                                                  \
            for (unsigned m_ = masks_[b_]; m_; m_ &= m_ - 1) {                               \
                size_t i = c0_ + 16 * b_ + (size_t)__builtin_ctz(m_);                        \
                if (i >= (n))                                                                \
                    break;                                                                   \
                BODY                                                                         \
            }                                                                                \
    }

#define SPARSE(SUF, T, UT, ALIAS, ABSMASK)                                                   \
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
    CLONES static void histogram_##SUF(const ALIAS *b, size_t n, uint32_t *hist)             \
    {                                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            hist[(b[i] & ABSMASK) >> (8 * sizeof(UT) - 1 - HBITS)]++;                        \
    }                                                                                        \
    /* Collect key > t, then the first `ties` keys == t, in index order. */                  \
    static void collect_##SUF(T *x, size_t n, UT t, size_t ties, int64_t *idx, T *vals,      \
                              int zero)                                                      \
    {                                                                                        \
        const ALIAS *b = (const ALIAS *)x;                                                   \
        size_t c = 0;                                                                        \
        for (size_t i = 0; i < n; i++) {                                                     \
            UT a = b[i] & ABSMASK;                                                           \
            if (a < t || (a == t && !ties))                                                  \
                continue;                                                                    \
            ties -= a == t;                                                                  \
            idx[c] = (int64_t)i;                                                             \
            vals[c++] = x[i];                                                                \
            if (zero)                                                                        \
                x[i] = 0;                                                                    \
        }                                                                                    \
    }                                                                                        \
    int ck_topk_##SUF(T *x, size_t n, size_t k, int64_t *idx, T *vals, int zero)             \
    {                                                                                        \
        const ALIAS *b = (const ALIAS *)x;                                                   \
        if (k == 0)                                                                          \
            return 0;                                                                        \
        if (k >= n) {                                                                        \
            collect_##SUF(x, n, 0, n, idx, vals, zero);                                      \
            return 0;                                                                        \
        }                                                                                    \
        uint32_t *hist = calloc((size_t)1 << HBITS, sizeof *hist);                           \
        if (!hist)                                                                           \
            return -1;                                                                       \
        histogram_##SUF(b, n, hist);                                                         \
        size_t above = 0, bin = ((size_t)1 << HBITS) - 1;                                    \
        while (above + hist[bin] < k)                                                        \
            above += hist[bin--];                                                            \
        size_t m = hist[bin], r = k - above, shift = 8 * sizeof(UT) - 1 - HBITS;             \
        free(hist);                                                                          \
        UT *cand = malloc(m * sizeof *cand);                                                 \
        if (!cand)                                                                           \
            return -1;                                                                       \
        for (size_t i = 0, c = 0; c < m; i++) {                                              \
            UT a = b[i] & ABSMASK;                                                           \
            if ((a >> shift) == bin)                                                         \
                cand[c++] = a;                                                               \
        }                                                                                    \
        UT t = select_##SUF(cand, m, r);                                                     \
        size_t greater = 0;                                                                  \
        for (size_t i = 0; i < m; i++)                                                       \
            greater += cand[i] > t;                                                          \
        free(cand);                                                                          \
        collect_##SUF(x, n, t, r - greater, idx, vals, zero);                                \
        return 0;                                                                            \
    }                                                                                        \
    CLONES size_t ck_threshold_count_##SUF(const T *x, size_t n, T thr)                      \
    {                                                                                        \
        size_t c = 0;                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            c += (x[i] < 0 ? -x[i] : x[i]) >= thr;                                           \
        return c;                                                                            \
    }                                                                                        \
    /* Branch-free compaction: every element is written at slot c, which advances only when  \
     * the element qualifies, so a data-dependent branch never mispredicts. */               \
    size_t ck_threshold_##SUF(T *x, size_t n, T thr, int64_t *idx, T *vals, size_t cap,      \
                              int zero)                                                      \
    {                                                                                        \
        size_t c = 0, i = 0;                                                                 \
        for (; i < n && c < cap; i++) {                                                      \
            T v = x[i];                                                                      \
            size_t keep = (v < 0 ? -v : v) >= thr;                                           \
            idx[c] = (int64_t)i;                                                             \
            vals[c] = v;                                                                     \
            if (zero)                                                                        \
                x[i] = keep ? 0 : v;                                                         \
            c += keep;                                                                       \
        }                                                                                    \
        return c + (i < n ? ck_threshold_count_##SUF(x + i, n - i, thr) : 0);                \
    }                                                                                        \
    int64_t ck_approx_topk_##SUF(T *x, size_t n, size_t k, size_t nsample, uint64_t seed,    \
                                 int64_t *idx, T *vals, int zero)                            \
    {                                                                                        \
        if (k == 0 || n == 0)                                                                \
            return 0;                                                                        \
        if (nsample == 0 || k >= n)                                                          \
            return ck_topk_##SUF(x, n, k < n ? k : n, idx, vals, zero) ? -1                  \
                                                                       : (int64_t)(k < n ? k : n); \
        const ALIAS *b = (const ALIAS *)x;                                                   \
        UT *s = malloc(nsample * sizeof *s);                                                 \
        if (!s)                                                                              \
            return -1;                                                                       \
        for (size_t j = 0; j < nsample; j++)                                                 \
            s[j] = b[ck_rng_bits(seed, j) % n] & ABSMASK;                                    \
        /* The sample's ceil(k * nsample / n)-th largest estimates the k-th largest. */      \
        size_t r = (size_t)(((unsigned __int128)k * nsample + n - 1) / n);                   \
        UT key = select_##SUF(s, nsample, r);                                                \
        free(s);                                                                             \
        T thr;                                                                               \
        memcpy(&thr, &key, sizeof thr);                                                      \
        size_t c = ck_threshold_count_##SUF(x, n, thr);                                      \
        if (c <= k)                                                                          \
            return (int64_t)ck_threshold_##SUF(x, n, thr, idx, vals, c, zero);               \
        int64_t *ci = malloc(c * sizeof *ci);                                                \
        T *cv = malloc(c * sizeof *cv);                                                      \
        int rc = !ci || !cv;                                                                 \
        if (!rc) {                                                                           \
            ck_threshold_##SUF(x, n, thr, ci, cv, c, 0);                                     \
            rc = ck_topk_##SUF(cv, c, k, idx, vals, 0);                                      \
        }                                                                                    \
        if (!rc)                                                                             \
            for (size_t j = 0; j < k; j++) {                                                 \
                idx[j] = ci[idx[j]];                                                         \
                if (zero)                                                                    \
                    x[idx[j]] = 0;                                                           \
            }                                                                                \
        free(ci);                                                                            \
        free(cv);                                                                            \
        return rc ? -1 : (int64_t)k;                                                         \
    }                                                                                        \
    size_t ck_randk_##SUF(T *x, size_t n, uint32_t thr, uint64_t seed, T *vals, size_t cap,  \
                          int zero)                                                          \
    {                                                                                        \
        size_t c = 0;                                                                        \
        FOR_KEPT(i, n, thr, seed, {                                                          \
            if (c < cap) {                                                                   \
                vals[c] = x[i];                                                              \
                if (zero)                                                                    \
                    x[i] = 0;                                                                \
            }                                                                                \
            c++;                                                                             \
        })                                                                                   \
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

SPARSE(f32, float, uint32_t, alias_u32, 0x7fffffffU)
SPARSE(f64, double, uint64_t, alias_u64, 0x7fffffffffffffffULL)

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
