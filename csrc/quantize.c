/* Quantizers: float16 with scale, int8 per bucket, QSGD s-level, 1-bit sign (see compress.h).
 *
 * Definitions, which collectives/_compress_numpy.py states again in NumPy, bit for bit:
 *   fp16:  h = half(v * scale), overflow when some h is not finite; decompress h / scale
 *          as float(h) * (1 / scale).
 *   int8:  amax = max |v| over the bucket, inv = 127 / amax (0 when amax is 0 or 127 / amax
 *          overflows), q = rint(v * inv) or floor(v * inv + u), clamped to [-127, 127]
 *          (a NaN product, from a non-finite v, converts to INT_MIN and so gives -127);
 *          decompress q * (amax / 127).
 *   qsgd:  norm = ||v||_2 over the bucket (squares summed in double over 32 interleaved
 *          lanes, lane j taking elements j, j+32, ..., then folded, see FOLD), inv = s / norm,
 *          q = sign(v) * min(floor(|v| * inv + u), s); decompress q * (norm / s).
 *   sign:  mag = mean |v| over the bucket, |v| summed the same way but in the element type,
 *          bit i = (v_i >= 0), bits packed 8 per byte, element 8j+k in bit k of byte j;
 *          decompress +mag or -mag.
 * u is element i's uniform from rng.h.  Arithmetic is in the element type, products are
 * never contracted into fused multiply-adds, so the NumPy statement gives the same bits.
 * (no-trapping-math only lets floor() vectorise; it changes no result.)
 * float16 conversion uses F16C when the CPU has it, else GCC's _Float16.  F16C only converts
 * float, so double -> half goes through a float rounded to odd (cut to 24 bits, lowest bit set
 * when inexact), which makes F16C's rounding to nearest give the once-rounded half.
 * The bucketed entry points are cloned for AVX-512, AVX2 and baseline x86-64 (picked at load
 * time) with their per-bucket steps inlined into every clone.  For floats, deterministic int8
 * packing (AVX-512), sign packing fused with the sum of |v| and unpacking (AVX2 and AVX-512)
 * are written with intrinsics, which reach what the vectoriser does not: masked tails,
 * movemask, one fused pass. */
#pragma GCC optimize("fp-contract=off", "no-trapping-math")
#include <math.h>
#include <string.h>
#include <immintrin.h>
#include "compress.h"
#include "cpu.h"
#include "rng.h"

#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define INLINE static inline __attribute__((always_inline))

/* ---- float16 conversion: F16C when the CPU has it, else GCC's _Float16 (same rounding) -- */

static inline uint16_t half_bits(_Float16 h)
{
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

static inline _Float16 bits_half(uint16_t b)
{
    _Float16 h;
    memcpy(&h, &b, 2);
    return h;
}

#define FP16(SUF, T)                                                                         \
    static int fp16_pack_generic_##SUF(const T *restrict x, size_t n, T scale,               \
                                       uint16_t *restrict h, T *restrict res)                \
    {                                                                                        \
        int overflow = 0;                                                                    \
        T inv = (T)1 / scale;                                                                \
        for (size_t i = 0; i < n; i++) {                                                     \
            T v = res ? x[i] + res[i] : x[i];                                                \
            _Float16 q = (_Float16)(v * scale);                                              \
            h[i] = half_bits(q);                                                             \
            overflow |= (h[i] & 0x7c00) == 0x7c00;                                           \
            if (res)                                                                         \
                res[i] = v - (T)q * inv;                                                     \
        }                                                                                    \
        return overflow;                                                                     \
    }                                                                                        \
    static void fp16_unpack_generic_##SUF(const uint16_t *restrict h, size_t n, T scale,     \
                                          T *restrict d, int accumulate)                     \
    {                                                                                        \
        T inv = (T)1 / scale;                                                                \
        for (size_t i = 0; i < n; i++) {                                                     \
            T v = (T)bits_half(h[i]) * inv;                                                  \
            d[i] = accumulate ? d[i] + v : v;                                                \
        }                                                                                    \
    }

FP16(f32, float)
FP16(f64, double)

/* One AVX register as a GCC vector, so that one source below serves float and double. */
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));

/* narrow_T: v[0..K-1] (v * scale, K registers of T) as eight floats that F16C rounds to the
 * half v * scale rounds to.  widen_T: floats 4k .. 4k+3 (all eight for float) of f as T. */
__attribute__((target("avx")))
static inline f32x8 narrow_f32(const f32x8 *v)
{
    return v[0];
}

__attribute__((target("avx")))
static inline f32x8 widen_f32(f32x8 f, int k)
{
    (void)k;
    return f;
}

/* Doubles to floats rounded to odd: the significand cut to float's 24 bits (the low 29 of
 * double's 53 cleared), its lowest kept bit set when the cut dropped anything, which also
 * keeps NaNs NaN.  In float's range the conversion is then exact.  Below it (|d| < 2^-126)
 * it may round again, but keeps the sign and stays under 2^-25, so half gives the same +-0
 * as from d; beyond it the float is FLT_MAX or inf, and the half inf as from d. */
__attribute__((target("avx")))
static inline f32x8 narrow_f64(const f64x4 *d)
{
    const __m256d cut = _mm256_castsi256_pd(_mm256_set1_epi64x(-((int64_t)1 << 29)));
    const __m256d lowest = _mm256_castsi256_pd(_mm256_set1_epi64x((int64_t)1 << 29));
    __m128 f[2];
    for (int k = 0; k < 2; k++) {
        __m256d t = _mm256_and_pd((__m256d)d[k], cut);
        __m256d inexact = _mm256_cmp_pd(t, (__m256d)d[k], _CMP_NEQ_UQ);
        f[k] = _mm256_cvtpd_ps(_mm256_or_pd(t, _mm256_and_pd(inexact, lowest)));
    }
    return (f32x8)_mm256_set_m128(f[1], f[0]);
}

__attribute__((target("avx")))
static inline f64x4 widen_f64(f32x8 f, int k)
{
    return (f64x4)_mm256_cvtps_pd(k ? _mm256_extractf128_ps((__m256)f, 1)
                                    : _mm256_castps256_ps128((__m256)f));
}

/* h[0..7] = half(f) rounded to nearest-even, returned too; *bad collects the lanes that came
 * out inf or NaN. */
__attribute__((target("avx,f16c")))
static inline __m128i half8(f32x8 f, uint16_t *h, __m128i *bad)
{
    const __m128i expo = _mm_set1_epi16(0x7c00);
    __m128i p = _mm256_cvtps_ph((__m256)f, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)h, p);
    *bad = _mm_or_si128(*bad, _mm_cmpeq_epi16(_mm_and_si128(p, expo), expo));
    return p;
}

/* Pack and unpack with F16C, eight elements (K registers of L lanes) at a time, the rest
 * (under eight) left to the generic loops, which round the same way.  double -> half must
 * round once, as NumPy does, but F16C only converts float, and through floats rounded to
 * nearest 1 + 2^-11 + 2^-40 would round twice, to 1 instead of 1 + 2^-10.  A float rounded
 * to odd, which has 13 more bits than half (also in half's subnormal range), rounds to
 * nearest-even as the double would (Boldo and Melquiond, "Emulation of FMA and correctly
 * rounded sums: proved algorithms using rounding to odd", IEEE TC 2008).  half -> float -> T
 * is exact.  memcpy moves the registers from and to unaligned memory. */
#define FP16_F16C(SUF, T, VEC)                                                               \
    __attribute__((target("avx,f16c")))                                                      \
    static int fp16_pack_f16c_##SUF(const T *restrict x, size_t n, T scale,                  \
                                    uint16_t *restrict h, T *restrict res)                   \
    {                                                                                        \
        enum { L = sizeof(VEC) / sizeof(T), K = 8 / L };                                     \
        const T inv = (T)1 / scale;                                                          \
        __m128i bad = _mm_setzero_si128();                                                   \
        size_t i = 0;                                                                        \
        for (; i + 8 <= n; i += 8) {                                                         \
            VEC v[K], s[K], r;                                                               \
            for (int k = 0; k < K; k++) {                                                    \
                memcpy(&v[k], x + i + k * L, sizeof r);                                      \
                if (res) {                                                                   \
                    memcpy(&r, res + i + k * L, sizeof r);                                   \
                    v[k] += r;                                                               \
                }                                                                            \
                s[k] = v[k] * scale;                                                         \
            }                                                                                \
            f32x8 back = (f32x8)_mm256_cvtph_ps(half8(narrow_##SUF(s), h + i, &bad));       \
            for (int k = 0; res && k < K; k++) {                                             \
                r = v[k] - widen_##SUF(back, k) * inv;                                       \
                memcpy(res + i + k * L, &r, sizeof r);                                       \
            }                                                                                \
        }                                                                                    \
        int overflow = !_mm_testz_si128(bad, bad);                                           \
        return fp16_pack_generic_##SUF(x + i, n - i, scale, h + i, res ? res + i : NULL) |   \
               overflow;                                                                     \
    }                                                                                        \
    __attribute__((target("avx,f16c")))                                                      \
    static void fp16_unpack_f16c_##SUF(const uint16_t *restrict h, size_t n, T scale,        \
                                       T *restrict d, int accumulate)                        \
    {                                                                                        \
        enum { L = sizeof(VEC) / sizeof(T), K = 8 / L };                                     \
        const T inv = (T)1 / scale;                                                          \
        size_t i = 0;                                                                        \
        for (; i + 8 <= n; i += 8) {                                                         \
            f32x8 f = (f32x8)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i)));     \
            for (int k = 0; k < K; k++) {                                                    \
                VEC v = widen_##SUF(f, k) * inv, old;                                        \
                if (accumulate) {                                                            \
                    memcpy(&old, d + i + k * L, sizeof old);                                 \
                    v = old + v;                                                             \
                }                                                                            \
                memcpy(d + i + k * L, &v, sizeof v);                                         \
            }                                                                                \
        }                                                                                    \
        fp16_unpack_generic_##SUF(h + i, n - i, scale, d + i, accumulate);                   \
    }

FP16_F16C(f32, float, f32x8)
FP16_F16C(f64, double, f64x4)

#define FP16_ENTRY(SUF, T)                                                                   \
    int ck_fp16_pack_##SUF(const T *x, size_t n, T scale, uint16_t *h, T *res)               \
    {                                                                                        \
        return ck_have_f16c() ? fp16_pack_f16c_##SUF(x, n, scale, h, res)                    \
                              : fp16_pack_generic_##SUF(x, n, scale, h, res);                \
    }                                                                                        \
    void ck_fp16_unpack_##SUF(const uint16_t *h, size_t n, T scale, T *dst, int accumulate)  \
    {                                                                                        \
        if (ck_have_f16c())                                                                  \
            fp16_unpack_f16c_##SUF(h, n, scale, dst, accumulate);                            \
        else                                                                                 \
            fp16_unpack_generic_##SUF(h, n, scale, dst, accumulate);                         \
    }

FP16_ENTRY(f32, float)
FP16_ENTRY(f64, double)

/* ---- bucketed quantizers: per-bucket steps in the element type T -------------------------- */

/* Bucket sums run over LANES interleaved accumulators (independent add chains), lane j
 * taking elements j, j + LANES, ... in turn; then halves are added, l[j] += l[j + w] for
 * w = 16, 8, 4, 2, 1, which is also how SIMD registers fold. */
#define LANES 32

#define FOLD(SUF, A)                                                                         \
    static inline A fold_##SUF(A *l)                                                         \
    {                                                                                        \
        for (int w = LANES / 2; w >= 1; w /= 2)                                              \
            for (int j = 0; j < w; j++)                                                      \
                l[j] += l[j + w];                                                            \
        return l[0];                                                                         \
    }
FOLD(f32, float)
FOLD(f64, double)

typedef uint32_t __attribute__((may_alias)) alias_u32;
typedef uint64_t __attribute__((may_alias)) alias_u64;

/* Sum of TERM(v) over LANES lanes of type A, folded. */
#define LANESUM(NAME, T, A, TERM, FOLD)                                                      \
    INLINE A NAME(const T *restrict v, size_t m)                                             \
    {                                                                                        \
        A l[LANES] = {0};                                                                    \
        size_t i = 0;                                                                        \
        for (; i + LANES <= m; i += LANES)                                                   \
            for (int j = 0; j < LANES; j++)                                                  \
                l[j] += TERM(v[i + j]);                                                      \
        for (int j = 0; i < m; i++, j++)                                                     \
            l[j] += TERM(v[i]);                                                              \
        return FOLD(l);                                                                      \
    }
#define SQUARE(e) ((double)(e) * (double)(e))
#define ABS(e) ((e) < 0 ? -(e) : (e))

#define BUCKET_STEPS(SUF, T, UT, ALIAS, ABSMASK, RINT, FLOOR)                                \
    /* max |v| through the bit patterns: an integer max reduction vectorises, a float one    \
     * does not without -ffast-math, and the order of non-negative floats is their bits'. */ \
    INLINE T amax_##SUF(const T *restrict v, size_t m)                                       \
    {                                                                                        \
        const ALIAS *b = (const ALIAS *)v;                                                   \
        UT hi = 0;                                                                           \
        for (size_t i = 0; i < m; i++) {                                                     \
            UT a = b[i] & ABSMASK;                                                           \
            hi = a > hi ? a : hi;                                                            \
        }                                                                                    \
        T r;                                                                                 \
        memcpy(&r, &hi, sizeof r);                                                           \
        return r;                                                                            \
    }                                                                                        \
    /* inv = top / *amax; both it and *amax become 0 when *amax is 0 or inv overflows. */    \
    INLINE T safe_inv_##SUF(T *amax, T top)                                                  \
    {                                                                                        \
        T inv = top / *amax;                                                                 \
        if (*amax == 0 || isinf(inv))                                                        \
            *amax = 0, inv = 0;                                                              \
        return inv;                                                                          \
    }                                                                                        \
    /* Sums of v^2 in double lanes (QSGD's norm) and of |v| in lanes of T (sign's mean). */ \
    LANESUM(sumsq_##SUF, T, double, SQUARE, fold_f64)                                        \
    LANESUM(sumabs_##SUF, T, T, ABS, fold_##SUF)                                             \
    INLINE void add_##SUF(T *restrict r, const T *restrict x, size_t m)                      \
    {                                                                                        \
        for (size_t i = 0; i < m; i++)                                                       \
            r[i] += x[i];                                                                    \
    }                                                                                        \
    /* v = x, or x + res kept in res under error feedback. */                                \
    INLINE const T *source_##SUF(const T *x, T *res, size_t m)                               \
    {                                                                                        \
        if (!res)                                                                            \
            return x;                                                                        \
        add_##SUF(res, x, m);                                                                \
        return res;                                                                          \
    }                                                                                        \
    INLINE void qround_##SUF(const T *restrict v, size_t m, T inv, int8_t *restrict q)       \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            int32_t t = (int32_t)RINT(v[i] * inv);                                           \
            t = t > 127 ? 127 : t;                                                           \
            q[i] = (int8_t)(t < -127 ? -127 : t);                                            \
        }                                                                                    \
    }                                                                                        \
    INLINE void qstoch_##SUF(const T *restrict v, size_t m, T inv, uint64_t seed,            \
                             uint64_t first, int8_t *restrict q)                             \
    {                                                                                        \
        uint32_t c0 = (uint32_t)first;                                                       \
        for (uint32_t i = 0; i < (uint32_t)m; i++) {                                         \
            T u = (T)(int32_t)(ck_rng_bits(seed, c0 + i) >> 8) * (T)CK_U24;                  \
            int32_t t = (int32_t)FLOOR(v[i] * inv + u);                                      \
            t = t > 127 ? 127 : t;                                                           \
            q[i] = (int8_t)(t < -127 ? -127 : t);                                            \
        }                                                                                    \
    }                                                                                        \
    INLINE void qsgd_levels_##SUF(const T *restrict v, size_t m, T inv, int32_t levels,      \
                                  uint64_t seed, uint64_t first, int8_t *restrict q)         \
    {                                                                                        \
        uint32_t c0 = (uint32_t)first;                                                       \
        for (uint32_t i = 0; i < (uint32_t)m; i++) {                                         \
            T u = (T)(int32_t)(ck_rng_bits(seed, c0 + i) >> 8) * (T)CK_U24;                  \
            T a = v[i] < 0 ? -v[i] : v[i];                                                   \
            int32_t t = (int32_t)FLOOR(a * inv + u);                                         \
            t = t > levels ? levels : t;                                                     \
            q[i] = (int8_t)(v[i] < 0 ? -t : t);                                              \
        }                                                                                    \
    }                                                                                        \
    /* d = q * scale, d += q * scale (accumulate > 0) or d -= q * scale (accumulate < 0). */ \
    INLINE void deq_##SUF(const int8_t *restrict q, size_t m, T scale, T *restrict d,        \
                          int accumulate)                                                    \
    {                                                                                        \
        if (accumulate > 0)                                                                  \
            for (size_t i = 0; i < m; i++)                                                   \
                d[i] += (T)q[i] * scale;                                                     \
        else if (accumulate < 0)                                                             \
            for (size_t i = 0; i < m; i++)                                                   \
                d[i] -= (T)q[i] * scale;                                                     \
        else                                                                                 \
            for (size_t i = 0; i < m; i++)                                                   \
                d[i] = (T)q[i] * scale;                                                      \
    }                                                                                        \
    /* One int8 bucket: v = x (+ res, kept in res), scale and q, then res -= q * scale. */   \
    INLINE void int8_bucket_##SUF(const T *x, T *res, size_t m, int stochastic,              \
                                  uint64_t seed, uint64_t first, T *scale, int8_t *q)        \
    {                                                                                        \
        const T *v = source_##SUF(x, res, m);                                                \
        T amax = amax_##SUF(v, m), inv = safe_inv_##SUF(&amax, (T)127);                      \
        *scale = amax / 127;                                                                 \
        if (stochastic)                                                                      \
            qstoch_##SUF(v, m, inv, seed, first, q);                                         \
        else                                                                                 \
            qround_##SUF(v, m, inv, q);                                                      \
        if (res)                                                                             \
            deq_##SUF(q, m, *scale, res, -1);                                                \
    }                                                                                        \
    /* Sign bits of v and the sum of |v|. */                                                 \
    INLINE T signpack_##SUF(const T *restrict v, size_t m, uint8_t *restrict bits)           \
    {                                                                                        \
        for (size_t j = 0; 8 * j < m; j++) {                                                 \
            unsigned b = 0;                                                                  \
            for (size_t k = 0; k < 8 && 8 * j + k < m; k++)                                  \
                b |= (unsigned)(v[8 * j + k] >= 0) << k;                                     \
            bits[j] = (uint8_t)b;                                                            \
        }                                                                                    \
        return sumabs_##SUF(v, m);                                                           \
    }                                                                                        \
    /* d = +-mag, d += +-mag (accumulate > 0), d -= +-mag (accumulate < 0). */               \
    INLINE void signvals_##SUF(const uint8_t *restrict bits, size_t m, T mag,                \
                               T *restrict d, int accumulate)                                \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            T s = (bits[i >> 3] >> (i & 7)) & 1 ? mag : -mag;                                \
            d[i] = accumulate > 0 ? d[i] + s : accumulate < 0 ? d[i] - s : s;                \
        }                                                                                    \
    }

BUCKET_STEPS(f32, float, uint32_t, alias_u32, 0x7fffffffU, rintf, floorf)
BUCKET_STEPS(f64, double, uint64_t, alias_u64, 0x7fffffffffffffffULL, rint, floor)

/* ---- hand-vectorised float steps ------------------------------------------------------ */

static inline __mmask16 tail16(size_t r)
{
    return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1);
}

/* One int8 bucket of floats, deterministic rounding, with AVX-512 (F and BW).  Pass 1 forms
 * v (into res under error feedback) and max |v|, an integer max of bit patterns; pass 2, over
 * the bucket now in L1, rounds in the default nearest-even mode (rintf's), clamps, updates
 * res, and narrows 64 at a time with two saturating packs and one lane permutation.  The same
 * numbers as int8_bucket_f32; short remainders use masked loads and stores. */
__attribute__((target("avx512f,avx512bw")))
static inline __m512 v16_avx512(const float *x, float *res, __mmask16 k)
{
    __m512 v = _mm512_maskz_loadu_ps(k, x);
    if (res) {
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, res));
        _mm512_mask_storeu_ps(res, k, v);
    }
    return v;
}

__attribute__((target("avx512f,avx512bw")))
static inline __m512i q16_avx512(const float *v, __m512 inv, __m512 scale, float *res,
                                 __mmask16 k)
{
    __m512 y = _mm512_maskz_loadu_ps(k, v);
    __m512i t = _mm512_cvtps_epi32(_mm512_mul_ps(y, inv));
    t = _mm512_max_epi32(t, _mm512_set1_epi32(-127));
    if (res) {
        t = _mm512_min_epi32(t, _mm512_set1_epi32(127));
        __m512 back = _mm512_mul_ps(_mm512_cvtepi32_ps(t), scale);
        _mm512_mask_storeu_ps(res, k, _mm512_sub_ps(y, back));
    }
    return t; /* without res, above 127 only where the narrowing saturates */
}

__attribute__((target("avx512f,avx512bw"))) INLINE void
int8_bucket_avx512_body(const float *x, float *res, size_t m, float *scale, int8_t *q)
{
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    __m512i h0 = _mm512_setzero_si512(), h1 = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 32 <= m; i += 32) {
        __m512 a = v16_avx512(x + i, res ? res + i : NULL, 0xffff);
        __m512 b = v16_avx512(x + i + 16, res ? res + i + 16 : NULL, 0xffff);
        h0 = _mm512_max_epu32(h0, _mm512_and_si512(_mm512_castps_si512(a), absmask));
        h1 = _mm512_max_epu32(h1, _mm512_and_si512(_mm512_castps_si512(b), absmask));
    }
    for (; i < m; i += 16) {
        __m512 a = v16_avx512(x + i, res ? res + i : NULL, tail16(m - i));
        h0 = _mm512_max_epu32(h0, _mm512_and_si512(_mm512_castps_si512(a), absmask));
    }
    uint32_t top = _mm512_reduce_max_epu32(_mm512_max_epu32(h0, h1));
    float amax;
    memcpy(&amax, &top, sizeof amax);
    float inv1 = safe_inv_f32(&amax, 127);
    *scale = amax / 127;
    const float *v = res ? res : x;
    const __m512 inv = _mm512_set1_ps(inv1), sc = _mm512_set1_ps(*scale);
    /* packs interleave 128-bit lanes: dword j of the result holds bytes of group j % 4 */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (i = 0; i + 64 <= m; i += 64) {
        __m512i t[4];
        for (int g = 0; g < 4; g++)
            t[g] = q16_avx512(v + i + 16 * g, inv, sc, res ? res + i + 16 * g : NULL, 0xffff);
        __m512i w = _mm512_packs_epi16(_mm512_packs_epi32(t[0], t[1]),
                                       _mm512_packs_epi32(t[2], t[3]));
        _mm512_storeu_si512(q + i, _mm512_permutexvar_epi32(order, w));
    }
    for (; i < m; i += 16) {
        __mmask16 k = tail16(m - i);
        __m512i t = q16_avx512(v + i, inv, sc, res ? res + i : NULL, k);
        _mm512_mask_cvtsepi32_storeu_epi8(q + i, k, t);
    }
}

/* int8_bucket_<name>: the body compiled twice, with and without error feedback. */
#define INT8_BUCKET_SIMD(NAME, TARGET)                                                       \
    __attribute__((target(TARGET)))                                                          \
    static void int8_bucket_##NAME(const float *x, float *res, size_t m, float *scale,       \
                                   int8_t *q)                                                \
    {                                                                                        \
        if (res)                                                                             \
            int8_bucket_##NAME##_body(x, res, m, scale, q);                                  \
        else                                                                                 \
            int8_bucket_##NAME##_body(x, NULL, m, scale, q);                                 \
    }

INT8_BUCKET_SIMD(avx512, "avx512f,avx512bw")

/* The same bucket with AVX2: 8 floats a vector, 32 narrowed at a time (two saturating packs
 * interleave the 128-bit lanes, one permutation restores the order); the last m % 32 go
 * through the portable steps. */
__attribute__((target("avx2"))) INLINE void
int8_bucket_avx2_body(const float *x, float *res, size_t m, float *scale, int8_t *q)
{
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    const size_t m32 = m / 32 * 32;
    __m256i h0 = _mm256_setzero_si256(), h1 = _mm256_setzero_si256();
    for (size_t i = 0; i < m32; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        if (res) {
            a = _mm256_add_ps(a, _mm256_loadu_ps(res + i));
            b = _mm256_add_ps(b, _mm256_loadu_ps(res + i + 8));
            _mm256_storeu_ps(res + i, a);
            _mm256_storeu_ps(res + i + 8, b);
        }
        h0 = _mm256_max_epu32(h0, _mm256_and_si256(_mm256_castps_si256(a), absmask));
        h1 = _mm256_max_epu32(h1, _mm256_and_si256(_mm256_castps_si256(b), absmask));
    }
    __m128i h = _mm_max_epu32(_mm256_castsi256_si128(_mm256_max_epu32(h0, h1)),
                              _mm256_extracti128_si256(_mm256_max_epu32(h0, h1), 1));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    if (res)
        add_f32(res + m32, x + m32, m - m32);
    const float *v = res ? res : x;
    float amax = amax_f32(v + m32, m - m32);
    uint32_t top = (uint32_t)_mm_cvtsi128_si32(h), last;
    memcpy(&last, &amax, sizeof last);
    top = last > top ? last : top; /* the larger bit pattern, as amax_f32 compares */
    memcpy(&amax, &top, sizeof amax);
    float inv1 = safe_inv_f32(&amax, 127);
    *scale = amax / 127;
    const __m256 inv = _mm256_set1_ps(inv1), sc = _mm256_set1_ps(*scale);
    const __m256i lo = _mm256_set1_epi32(-127), up = _mm256_set1_epi32(127);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t i = 0; i < m32; i += 32) {
        __m256i t[4];
        for (int g = 0; g < 4; g++) {
            __m256 y = _mm256_loadu_ps(v + i + 8 * g);
            t[g] = _mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(y, inv)), lo);
            if (res) {
                t[g] = _mm256_min_epi32(t[g], up);
                _mm256_storeu_ps(res + i + 8 * g,
                                 _mm256_sub_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(t[g]), sc)));
            }
        }
        __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(t[0], t[1]),
                                       _mm256_packs_epi32(t[2], t[3]));
        _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(w, order));
    }
    qround_f32(v + m32, m - m32, inv1, q + m32);
    if (res)
        deq_f32(q + m32, m - m32, *scale, res + m32, -1);
}

INT8_BUCKET_SIMD(avx2, "avx2")

/* One element of deq_f32. */
static inline float deq1(float d, int8_t q, float scale, int accumulate)
{
    return accumulate > 0 ? d + q * scale : accumulate < 0 ? d - q * scale : q * scale;
}

/* deq_f32 with AVX2, 8 at a time, from where d is 64-byte aligned: the few elements before
 * and after go one at a time (a short scalar loop beats deq_f32's vector prologue there), so
 * that no store straddles two cache lines: large NumPy arrays start 16 bytes past one.
 * Masked stores would do the ends in one step, but they are slow on Zen 4.  (With AVX-512,
 * unpack_avx512 below sweeps all buckets at once.) */
__attribute__((target("avx2")))
static void deq_avx2(const int8_t *restrict q, size_t m, float scale, float *restrict d,
                     int accumulate)
{
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = ((64 - ((uintptr_t)d & 63)) & 63) / sizeof *d;
    i = i < m ? i : m;
    for (size_t j = 0; j < i; j++)
        d[j] = deq1(d[j], q[j], scale, accumulate);
    for (; i + 8 <= m; i += 8) {
        __m256i q8 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(q8), s);
        if (accumulate > 0)
            v = _mm256_add_ps(_mm256_loadu_ps(d + i), v);
        else if (accumulate < 0)
            v = _mm256_sub_ps(_mm256_loadu_ps(d + i), v);
        _mm256_storeu_ps(d + i, v);
    }
    for (; i < m; i++)
        d[i] = deq1(d[i], q[i], scale, accumulate);
}

/* Sign packing of floats fused with the lane sums of |v|, one group of LANES = 32 floats at
 * a time: signgroup_<isa> writes the group's 4 bytes of bits and adds |v| into the lane
 * accumulators, fold_<isa> adds the lanes in fold_f32's order.  A short last group is run
 * on a copy padded with +0, which leaves every sum as it is, and only its real bits are kept. */
__attribute__((target("avx2")))
static inline void signgroup_avx2(const float *v, uint8_t *bits, __m256 *acc)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int g = 0; g < 4; g++) {
        __m256 x = _mm256_loadu_ps(v + 8 * g);
        bits[g] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
        acc[g] = _mm256_add_ps(acc[g], _mm256_and_ps(x, absmask));
    }
}

/* Lanes 0..7 folded: w = 4, 2, 1. */
__attribute__((target("avx2")))
static inline float fold8(__m256 s)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

/* acc[g] holds lanes 8g..8g+7: w = 16 adds acc[2], acc[3] into acc[0], acc[1]; w = 8 adds those. */
__attribute__((target("avx2")))
static inline float fold_avx2(__m256 *acc)
{
    return fold8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3])));
}

__attribute__((target("avx512f")))
static inline void signgroup_avx512f(const float *v, uint8_t *bits, __m512 *acc)
{
    for (int g = 0; g < 2; g++) {
        __m512 x = _mm512_loadu_ps(v + 16 * g);
        uint16_t mask = (uint16_t)_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
        memcpy(bits + 2 * g, &mask, 2);
        acc[g] = _mm512_add_ps(acc[g], _mm512_abs_ps(x));
    }
}

/* acc[0] holds lanes 0..15, acc[1] lanes 16..31. */
__attribute__((target("avx512f")))
static inline float fold_avx512f(__m512 *acc)
{
    __m512 s = _mm512_add_ps(acc[0], acc[1]);
    __m256 top = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    return fold8(_mm256_add_ps(_mm512_castps512_ps256(s), top));
}

#define SIGNPACK_SIMD(ISA, VEC, NACC, ZERO)                                                  \
    __attribute__((target(#ISA)))                                                            \
    static float signpack_##ISA(const float *restrict v, size_t m, uint8_t *restrict bits)   \
    {                                                                                        \
        VEC acc[NACC];                                                                       \
        for (int a = 0; a < NACC; a++)                                                       \
            acc[a] = ZERO();                                                                 \
        size_t i = 0;                                                                        \
        for (; i + LANES <= m; i += LANES)                                                   \
            signgroup_##ISA(v + i, bits + i / 8, acc);                                       \
        if (i < m) {                                                                         \
            float pad[LANES] = {0};                                                          \
            uint8_t last[LANES / 8];                                                         \
            memcpy(pad, v + i, (m - i) * sizeof *pad);                                       \
            signgroup_##ISA(pad, last, acc);                                                 \
            for (size_t b = 0; 8 * b < m - i; b++)                                           \
                bits[i / 8 + b] = 8 * b + 8 <= m - i ? last[b]                               \
                                  : (uint8_t)(last[b] & ((1u << (m - i - 8 * b)) - 1));      \
        }                                                                                    \
        return fold_##ISA(acc);                                                              \
    }

SIGNPACK_SIMD(avx2, __m256, 4, _mm256_setzero_ps)
SIGNPACK_SIMD(avx512f, __m512, 2, _mm512_setzero_ps)

/* +-mag from one byte: broadcast it, test bit k in lane k, blend. */
__attribute__((target("avx2")))
static void signvals_avx2(const uint8_t *restrict bits, size_t m, float mag, float *restrict d,
                          int accumulate)
{
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 pos = _mm256_set1_ps(mag), neg = _mm256_set1_ps(-mag);
    size_t i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256i b = _mm256_and_si256(_mm256_set1_epi32(bits[i >> 3]), lane);
        __m256 s = _mm256_blendv_ps(neg, pos, _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, lane)));
        if (accumulate > 0)
            s = _mm256_add_ps(_mm256_loadu_ps(d + i), s);
        else if (accumulate < 0)
            s = _mm256_sub_ps(_mm256_loadu_ps(d + i), s);
        _mm256_storeu_ps(d + i, s);
    }
    signvals_f32(bits + i / 8, m - i, mag, d + i, accumulate);
}

/* Per-bucket steps for each element type: floats take the hand-vectorised ones when the CPU
 * has them (the stochastic int8 rounding vectorises well as it is). */
#define INT8_BUCKET_F32(x, res, m, stochastic, seed, first, scale, q)                        \
    (stochastic              ? int8_bucket_f32(x, res, m, stochastic, seed, first, scale, q)  \
     : ck_simd_level() == 2 ? int8_bucket_avx512(x, res, m, scale, q)                        \
     : ck_simd_level() == 1 ? int8_bucket_avx2(x, res, m, scale, q)                          \
                            : int8_bucket_f32(x, res, m, stochastic, seed, first, scale, q))
#define DEQ_F32(q, m, scale, d, acc)                                                         \
    (ck_simd_level() ? deq_avx2(q, m, scale, d, acc) : deq_f32(q, m, scale, d, acc))

/* d = / += q * (scale of its bucket), scale k being scales[k] / div: div is 1 for int8 (the
 * quotient is then scales[k] exactly) and the number of levels for QSGD.  Bucket by bucket. */
#define UNPACK_BUCKETS(SUF, T, DEQ)                                                          \
    static void unpack_buckets_##SUF(const int8_t *q, const T *scales, T div, size_t n,      \
                                     size_t bucket, T *d, int accumulate)                    \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            DEQ(q + b0, n - b0 < bucket ? n - b0 : bucket, scales[k] / div, d + b0,          \
                accumulate);                                                                 \
    }
UNPACK_BUCKETS(f32, float, DEQ_F32)
UNPACK_BUCKETS(f64, double, deq_f64)

/* The same for floats with AVX-512 in one sweep from where d is 64-byte aligned, buckets of
 * at least 16: no head and tail per bucket, and a vector that straddles two buckets blends
 * their scales (lanes before the boundary keep the old one). */
__attribute__((target("avx512f")))
static void unpack_avx512(const int8_t *q, const float *scales, float div, size_t n,
                          size_t bucket, float *d, int accumulate)
{
    size_t i = ((64 - ((uintptr_t)d & 63)) & 63) / sizeof *d, nb = (n + bucket - 1) / bucket;
    i = i < n ? i : n;
    for (size_t j = 0; j < i; j++)
        d[j] = deq1(d[j], q[j], scales[j / bucket] / div, accumulate);
    size_t k = i / bucket, next = (k + 1) * bucket;
    __m512 s = _mm512_set1_ps(k < nb ? scales[k] / div : 0);
    for (; i + 16 <= n; i += 16) {
        __m512 sv = s;
        if (i + 16 >= next) {
            size_t r = next - i; /* 1..16 lanes still in bucket k */
            k++, next += bucket;
            if (k < nb)
                s = _mm512_set1_ps(scales[k] / div);
            if (r < 16)
                sv = _mm512_mask_blend_ps(tail16(r), s, sv);
        }
        __m512i q16 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + i)));
        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(q16), sv);
        if (accumulate > 0)
            v = _mm512_add_ps(_mm512_loadu_ps(d + i), v);
        else if (accumulate < 0)
            v = _mm512_sub_ps(_mm512_loadu_ps(d + i), v);
        _mm512_storeu_ps(d + i, v);
    }
    for (; i < n; i++)
        d[i] = deq1(d[i], q[i], scales[i / bucket] / div, accumulate);
}

#define UNPACK_F32(q, scales, div, n, bucket, d, acc)                                        \
    (ck_simd_level() == 2 && (bucket) >= 16                                                  \
         ? unpack_avx512(q, scales, div, n, bucket, d, acc)                                  \
         : unpack_buckets_f32(q, scales, div, n, bucket, d, acc))
#define SIGNPACK_F32(v, m, bits)                                                             \
    (ck_simd_level() == 2   ? signpack_avx512f(v, m, bits)                                   \
     : ck_simd_level() == 1 ? signpack_avx2(v, m, bits)                                      \
                            : signpack_f32(v, m, bits))
#define SIGNVALS_F32(bits, m, mag, d, acc)                                                   \
    (ck_simd_level() ? signvals_avx2(bits, m, mag, d, acc) : signvals_f32(bits, m, mag, d, acc))

/* ---- entry points ----------------------------------------------------------------------- */

#define BUCKETED(SUF, T, INT8_BUCKET, UNPACK, SIGNPACK, SIGNVALS)                          \
    CLONES void ck_int8_pack_##SUF(const T *x, size_t n, size_t bucket, int stochastic,      \
                                   uint64_t seed, int8_t *q, T *scales, T *res)              \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            INT8_BUCKET(x + b0, res ? res + b0 : NULL, n - b0 < bucket ? n - b0 : bucket,    \
                        stochastic, seed, b0, scales + k, q + b0);                           \
    }                                                                                        \
    CLONES void ck_int8_unpack_##SUF(const int8_t *q, const T *scales, size_t n,             \
                                     size_t bucket, T *dst, int accumulate)                  \
    {                                                                                        \
        UNPACK(q, scales, (T)1, n, bucket, dst, accumulate);                                 \
    }                                                                                        \
    CLONES void ck_qsgd_pack_##SUF(const T *x, size_t n, size_t bucket, int levels,          \
                                   uint64_t seed, int8_t *q, T *norms, T *res)               \
    {                                                                                        \
        T s = (T)levels;                                                                     \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {                              \
            size_t m = n - b0 < bucket ? n - b0 : bucket;                                    \
            const T *v = source_##SUF(x + b0, res ? res + b0 : NULL, m);                     \
            T norm = (T)sqrt(sumsq_##SUF(v, m)), inv = safe_inv_##SUF(&norm, s);             \
            norms[k] = norm;                                                                 \
            qsgd_levels_##SUF(v, m, inv, levels, seed, b0, q + b0);                          \
            if (res)                                                                         \
                deq_##SUF(q + b0, m, norm / s, res + b0, -1);                                \
        }                                                                                    \
    }                                                                                        \
    CLONES void ck_qsgd_unpack_##SUF(const int8_t *q, const T *norms, size_t n,              \
                                     size_t bucket, int levels, T *dst, int accumulate)      \
    {                                                                                        \
        UNPACK(q, norms, (T)levels, n, bucket, dst, accumulate);                             \
    }                                                                                        \
    CLONES void ck_sign_pack_##SUF(const T *x, size_t n, size_t bucket, uint8_t *bits,       \
                                   T *mags, T *res)                                          \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {                              \
            size_t m = n - b0 < bucket ? n - b0 : bucket;                                    \
            const T *v = source_##SUF(x + b0, res ? res + b0 : NULL, m);                     \
            mags[k] = (T)((double)SIGNPACK(v, m, bits + b0 / 8) / (double)m);                \
            if (res)                                                                         \
                SIGNVALS(bits + b0 / 8, m, mags[k], res + b0, -1);                           \
        }                                                                                    \
    }                                                                                        \
    CLONES void ck_sign_unpack_##SUF(const uint8_t *bits, const T *mags, size_t n,           \
                                     size_t bucket, T *dst, int accumulate)                  \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            SIGNVALS(bits + b0 / 8, n - b0 < bucket ? n - b0 : bucket, mags[k], dst + b0,    \
                     accumulate);                                                            \
    }

BUCKETED(f32, float, INT8_BUCKET_F32, UNPACK_F32, SIGNPACK_F32, SIGNVALS_F32)
BUCKETED(f64, double, int8_bucket_f64, unpack_buckets_f64, signpack_f64, signvals_f64)
