/* Quantizers: float16 with scale, int8 per bucket, QSGD s-level, 1-bit sign (see compress.h).
 *
 * Definitions, which collectives/_compress_numpy.py states again in NumPy, bit for bit:
 *   fp16:  h = half(v * scale), overflow when some h is not finite; decompress h / scale
 *          as float(h) * (1 / scale).
 *   int8:  amax = max |v| over the bucket, inv = 127 / amax (0 when amax is 0 or 127 / amax
 *          overflows), q = rint(v * inv) or floor(v * inv + u), clamped to [-127, 127];
 *          decompress q * (amax / 127).
 *   qsgd:  norm = ||v||_2 over the bucket (squares summed in double over 8 interleaved
 *          lanes, lane j taking elements j, j+8, ..., lanes added pairwise), inv = s / norm,
 *          q = sign(v) * min(floor(|v| * inv + u), s); decompress q * (norm / s).
 *   sign:  mag = mean |v| over the bucket (same summation), bit i = (v_i >= 0), bits packed
 *          8 per byte, element 8j+k in bit k of byte j; decompress +mag or -mag.
 * u is element i's uniform from rng.h.  Arithmetic is in the element type, products are
 * never contracted into fused multiply-adds, so the NumPy statement gives the same bits.
 * Hot loops are cloned for AVX-512, AVX2 and baseline x86-64 and picked at load time. */
#pragma GCC optimize("fp-contract=off")
#include <math.h>
#include <string.h>
#include <immintrin.h>
#include "compress.h"
#include "rng.h"

#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* ---- float16 conversion: F16C when the CPU has it, else GCC's _Float16 (same rounding) -- */

__attribute__((target("avx,f16c")))
static int fp16_pack_f16c(const float *restrict x, size_t n, float scale, uint16_t *restrict h,
                          float *restrict res)
{
    const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.0f / scale);
    const __m128i expo = _mm_set1_epi16(0x7c00);
    __m128i bad = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (res)
            v = _mm256_add_ps(v, _mm256_loadu_ps(res + i));
        __m128i p = _mm256_cvtps_ph(_mm256_mul_ps(v, s), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(h + i), p);
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(p, expo), expo));
        if (res)
            _mm256_storeu_ps(res + i, _mm256_sub_ps(v, _mm256_mul_ps(_mm256_cvtph_ps(p), inv)));
    }
    int overflow = !_mm_testz_si128(bad, bad);
    for (; i < n; i++) {
        float v = res ? x[i] + res[i] : x[i];
        __m128i p = _mm_cvtps_ph(_mm_set_ss(v * scale), _MM_FROUND_TO_NEAREST_INT);
        h[i] = (uint16_t)_mm_extract_epi16(p, 0);
        overflow |= (h[i] & 0x7c00) == 0x7c00;
        if (res)
            res[i] = v - _mm_cvtss_f32(_mm_cvtph_ps(p)) * (1.0f / scale);
    }
    return overflow;
}

__attribute__((target("avx,f16c")))
static void fp16_unpack_f16c(const uint16_t *restrict h, size_t n, float scale, float *restrict d,
                             int accumulate)
{
    const float inv1 = 1.0f / scale;
    const __m256 inv = _mm256_set1_ps(inv1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))), inv);
        if (accumulate)
            v = _mm256_add_ps(_mm256_loadu_ps(d + i), v);
        _mm256_storeu_ps(d + i, v);
    }
    for (; i < n; i++) {
        float v = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h[i]))) * inv1;
        d[i] = accumulate ? d[i] + v : v;
    }
}

static int have_f16c(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    }
    return cached;
}

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

int ck_fp16_pack_f32(const float *x, size_t n, float scale, uint16_t *h, float *res)
{
    return have_f16c() ? fp16_pack_f16c(x, n, scale, h, res)
                       : fp16_pack_generic_f32(x, n, scale, h, res);
}

void ck_fp16_unpack_f32(const uint16_t *h, size_t n, float scale, float *dst, int accumulate)
{
    if (have_f16c())
        fp16_unpack_f16c(h, n, scale, dst, accumulate);
    else
        fp16_unpack_generic_f32(h, n, scale, dst, accumulate);
}

/* double -> half rounds once, directly (NumPy's rule), which F16C cannot do. */
int ck_fp16_pack_f64(const double *x, size_t n, double scale, uint16_t *h, double *res)
{
    return fp16_pack_generic_f64(x, n, scale, h, res);
}

void ck_fp16_unpack_f64(const uint16_t *h, size_t n, double scale, double *dst, int accumulate)
{
    fp16_unpack_generic_f64(h, n, scale, dst, accumulate);
}

/* ---- bucketed quantizers ---------------------------------------------------------------- */

typedef uint32_t __attribute__((may_alias)) alias_u32;
typedef uint64_t __attribute__((may_alias)) alias_u64;

#define BUCKETED(SUF, T, UT, ALIAS, ABSMASK, RINT, FLOOR)                                    \
    /* max |v| through the bit patterns: an integer max reduction vectorises, a float one    \
     * does not without -ffast-math, and the order of non-negative floats is their bits'. */ \
    CLONES static T amax_##SUF(const T *restrict v, size_t m)                                \
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
    /* Sum of |v| (square = 0) or of v^2 (square = 1) in double, in the order compress.h     \
     * fixes: 8 lanes, then ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). */                        \
    CLONES static double lanesum_##SUF(const T *restrict v, size_t m, int square)            \
    {                                                                                        \
        double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                              \
        size_t i = 0;                                                                        \
        if (square)                                                                          \
            for (; i + 8 <= m; i += 8)                                                       \
                for (int j = 0; j < 8; j++)                                                  \
                    l[j] += (double)v[i + j] * (double)v[i + j];                             \
        else                                                                                 \
            for (; i + 8 <= m; i += 8)                                                       \
                for (int j = 0; j < 8; j++)                                                  \
                    l[j] += fabs((double)v[i + j]);                                          \
        for (int j = 0; i < m; i++, j++)                                                     \
            l[j] += square ? (double)v[i] * (double)v[i] : fabs((double)v[i]);               \
        return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));            \
    }                                                                                        \
    CLONES static void add_##SUF(T *restrict r, const T *restrict x, size_t m)               \
    {                                                                                        \
        for (size_t i = 0; i < m; i++)                                                       \
            r[i] += x[i];                                                                    \
    }                                                                                        \
    CLONES static void qround_##SUF(const T *restrict v, size_t m, T inv, int8_t *restrict q) \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            T t = RINT(v[i] * inv);                                                          \
            t = t > 127 ? 127 : t;                                                           \
            t = t < -127 ? -127 : t;                                                         \
            q[i] = (int8_t)(int32_t)t;                                                       \
        }                                                                                    \
    }                                                                                        \
    CLONES static void qstoch_##SUF(const T *restrict v, size_t m, T inv, uint64_t seed,     \
                                    uint64_t first, int8_t *restrict q)                      \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            T u = (T)(ck_rng_bits(seed, first + i) >> 8) * (T)CK_U24;                        \
            T t = FLOOR(v[i] * inv + u);                                                     \
            t = t > 127 ? 127 : t;                                                           \
            t = t < -127 ? -127 : t;                                                         \
            q[i] = (int8_t)(int32_t)t;                                                       \
        }                                                                                    \
    }                                                                                        \
    CLONES static void qsgd_levels_##SUF(const T *restrict v, size_t m, T inv, T s,          \
                                         uint64_t seed, uint64_t first, int8_t *restrict q)  \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            T u = (T)(ck_rng_bits(seed, first + i) >> 8) * (T)CK_U24;                        \
            T a = v[i] < 0 ? -v[i] : v[i];                                                   \
            T t = FLOOR(a * inv + u);                                                        \
            t = t > s ? s : t;                                                               \
            q[i] = (int8_t)(int32_t)(v[i] < 0 ? -t : t);                                     \
        }                                                                                    \
    }                                                                                        \
    /* d = q * scale, d += q * scale (accumulate > 0) or d -= q * scale (accumulate < 0). */ \
    CLONES static void deq_##SUF(const int8_t *restrict q, size_t m, T scale, T *restrict d, \
                                 int accumulate)                                             \
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
    CLONES static void signbits_##SUF(const T *restrict v, size_t m, uint8_t *restrict bits) \
    {                                                                                        \
        size_t j = 0;                                                                        \
        for (; 8 * j + 8 <= m; j++) {                                                        \
            unsigned b = 0;                                                                  \
            for (int k = 0; k < 8; k++)                                                      \
                b |= (unsigned)(v[8 * j + k] >= 0) << k;                                     \
            bits[j] = (uint8_t)b;                                                            \
        }                                                                                    \
        if (8 * j < m) {                                                                     \
            unsigned b = 0;                                                                  \
            for (int k = 0; 8 * j + k < m; k++)                                              \
                b |= (unsigned)(v[8 * j + k] >= 0) << k;                                     \
            bits[j] = (uint8_t)b;                                                            \
        }                                                                                    \
    }                                                                                        \
    /* d = +-mag, d += +-mag (accumulate > 0), d -= +-mag (accumulate < 0). */               \
    CLONES static void signvals_##SUF(const uint8_t *restrict bits, size_t m, T mag,         \
                                      T *restrict d, int accumulate)                         \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            T s = (bits[i >> 3] >> (i & 7)) & 1 ? mag : -mag;                                \
            d[i] = accumulate > 0 ? d[i] + s : accumulate < 0 ? d[i] - s : s;                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    void ck_int8_pack_##SUF(const T *x, size_t n, size_t bucket, int stochastic,             \
                            uint64_t seed, int8_t *q, T *scales, T *res)                     \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {                              \
            size_t m = n - b0 < bucket ? n - b0 : bucket;                                    \
            const T *v = x + b0;                                                             \
            if (res) {                                                                       \
                add_##SUF(res + b0, x + b0, m);                                              \
                v = res + b0;                                                                \
            }                                                                                \
            T amax = amax_##SUF(v, m), inv = (T)127 / amax;                                  \
            if (amax == 0 || isinf(inv))                                                     \
                inv = 0, amax = 0;                                                           \
            scales[k] = amax / 127;                                                          \
            if (stochastic)                                                                  \
                qstoch_##SUF(v, m, inv, seed, b0, q + b0);                                   \
            else                                                                             \
                qround_##SUF(v, m, inv, q + b0);                                             \
            if (res)                                                                         \
                deq_##SUF(q + b0, m, scales[k], res + b0, -1);                               \
        }                                                                                    \
    }                                                                                        \
    void ck_int8_unpack_##SUF(const int8_t *q, const T *scales, size_t n, size_t bucket,     \
                              T *dst, int accumulate)                                        \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            deq_##SUF(q + b0, n - b0 < bucket ? n - b0 : bucket, scales[k], dst + b0,        \
                      accumulate);                                                           \
    }                                                                                        \
    void ck_qsgd_pack_##SUF(const T *x, size_t n, size_t bucket, int levels, uint64_t seed,  \
                            int8_t *q, T *norms, T *res)                                     \
    {                                                                                        \
        T s = (T)levels;                                                                     \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {                              \
            size_t m = n - b0 < bucket ? n - b0 : bucket;                                    \
            const T *v = x + b0;                                                             \
            if (res) {                                                                       \
                add_##SUF(res + b0, x + b0, m);                                              \
                v = res + b0;                                                                \
            }                                                                                \
            T norm = (T)sqrt(lanesum_##SUF(v, m, 1)), inv = s / norm;                        \
            if (norm == 0 || isinf(inv))                                                     \
                inv = 0, norm = 0;                                                           \
            norms[k] = norm;                                                                 \
            qsgd_levels_##SUF(v, m, inv, s, seed, b0, q + b0);                               \
            if (res)                                                                         \
                deq_##SUF(q + b0, m, norm / s, res + b0, -1);                                \
        }                                                                                    \
    }                                                                                        \
    void ck_qsgd_unpack_##SUF(const int8_t *q, const T *norms, size_t n, size_t bucket,      \
                              int levels, T *dst, int accumulate)                            \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            deq_##SUF(q + b0, n - b0 < bucket ? n - b0 : bucket, norms[k] / (T)levels,       \
                      dst + b0, accumulate);                                                 \
    }                                                                                        \
    void ck_sign_pack_##SUF(const T *x, size_t n, size_t bucket, uint8_t *bits, T *mags,     \
                            T *res)                                                          \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {                              \
            size_t m = n - b0 < bucket ? n - b0 : bucket;                                    \
            const T *v = x + b0;                                                             \
            if (res) {                                                                       \
                add_##SUF(res + b0, x + b0, m);                                              \
                v = res + b0;                                                                \
            }                                                                                \
            mags[k] = (T)(lanesum_##SUF(v, m, 0) / (double)m);                               \
            signbits_##SUF(v, m, bits + b0 / 8);                                             \
            if (res)                                                                         \
                signvals_##SUF(bits + b0 / 8, m, mags[k], res + b0, -1);                     \
        }                                                                                    \
    }                                                                                        \
    void ck_sign_unpack_##SUF(const uint8_t *bits, const T *mags, size_t n, size_t bucket,   \
                              T *dst, int accumulate)                                        \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            signvals_##SUF(bits + b0 / 8, n - b0 < bucket ? n - b0 : bucket, mags[k],        \
                           dst + b0, accumulate);                                            \
    }

BUCKETED(f32, float, uint32_t, alias_u32, 0x7fffffffU, rintf, floorf)
BUCKETED(f64, double, uint64_t, alias_u64, 0x7fffffffffffffffULL, rint, floor)
