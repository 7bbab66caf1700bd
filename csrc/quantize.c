/* Quantizers: float16 with scale, int8 per bucket, QSGD s-level, 1-bit sign (see compress.h).
 *
 * Definitions, which collectives/_compress_numpy.py states again in NumPy, bit for bit:
 *   fp16:  h = half(v * scale), overflow when some h is not finite; decompress h / scale
 *          as float(h) * (1 / scale).
 *   int8:  amax = max |v| over the bucket, inv = 127 / amax (0 when amax is 0 or 127 / amax
 *          overflows), q = rint(v * inv) or floor(v * inv + u), clamped to [-127, 127];
 *          decompress q * (amax / 127).
 *   qsgd:  norm = ||v||_2 over the bucket (squares summed in double over 32 interleaved
 *          lanes, lane j taking elements j, j+32, ..., see fold()), inv = s / norm,
 *          q = sign(v) * min(floor(|v| * inv + u), s); decompress q * (norm / s).
 *   sign:  mag = mean |v| over the bucket (same summation), bit i = (v_i >= 0), bits packed
 *          8 per byte, element 8j+k in bit k of byte j; decompress +mag or -mag.
 * u is element i's uniform from rng.h.  Arithmetic is in the element type, products are
 * never contracted into fused multiply-adds, so the NumPy statement gives the same bits.
 * (no-trapping-math only lets floor() vectorise; it changes no result.)
 * Each entry point is cloned for AVX-512, AVX2 and baseline x86-64 (picked at load time) with
 * its per-bucket loops inlined into every clone; sign packing (fused with the sum of |v|)
 * and unpacking of floats use AVX2 movemask/blend directly, which the vectoriser does not find. */
#pragma GCC optimize("fp-contract=off", "no-trapping-math")
#include <math.h>
#include <string.h>
#include <immintrin.h>
#include "compress.h"
#include "rng.h"

#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define INLINE static inline __attribute__((always_inline))

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

/* Bucket sums run over LANES interleaved double accumulators (independent add chains), lane
 * j taking elements j, j + LANES, ...; then halves are added, l[j] += l[j + w] for
 * w = 16, 8, 4, 2, 1 (whole vectors first, which is cheap in SIMD registers). */
#define LANES 32

static double fold(double *l)
{
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            l[j] += l[j + w];
    return l[0];
}

typedef uint32_t __attribute__((may_alias)) alias_u32;
typedef uint64_t __attribute__((may_alias)) alias_u64;

#define BUCKETED(SUF, T, UT, ALIAS, ABSMASK, RINT, FLOOR, SIGNPACK, SIGNVALS)                                     \
    /* max |v| through the bit patterns: an integer max reduction vectorises, a float one    \
     * does not without -ffast-math, and the order of non-negative floats is their bits'. */ \
    INLINE T amax_##SUF(const T *restrict v, size_t m)                                \
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
    /* Sum of |v| (square = 0) or of v^2 (square = 1) in double, in the order fixed above. */ \
    INLINE double lanesum_##SUF(const T *restrict v, size_t m, int square)            \
    {                                                                                        \
        double l[LANES] = {0};                                                               \
        size_t i = 0;                                                                        \
        if (square)                                                                          \
            for (; i + LANES <= m; i += LANES)                                               \
                for (int j = 0; j < LANES; j++)                                              \
                    l[j] += (double)v[i + j] * (double)v[i + j];                             \
        else                                                                                 \
            for (; i + LANES <= m; i += LANES)                                               \
                for (int j = 0; j < LANES; j++)                                              \
                    l[j] += fabs((double)v[i + j]);                                          \
        for (int j = 0; i < m; i++, j++)                                                     \
            l[j] += square ? (double)v[i] * (double)v[i] : fabs((double)v[i]);               \
        return fold(l);                                                                      \
    }                                                                                        \
    INLINE void add_##SUF(T *restrict r, const T *restrict x, size_t m)               \
    {                                                                                        \
        for (size_t i = 0; i < m; i++)                                                       \
            r[i] += x[i];                                                                    \
    }                                                                                        \
    INLINE void qround_##SUF(const T *restrict v, size_t m, T inv, int8_t *restrict q) \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            int32_t t = (int32_t)RINT(v[i] * inv);                                           \
            t = t > 127 ? 127 : t;                                                           \
            q[i] = (int8_t)(t < -127 ? -127 : t);                                            \
        }                                                                                    \
    }                                                                                        \
    INLINE void qstoch_##SUF(const T *restrict v, size_t m, T inv, uint64_t seed,     \
                                    uint64_t first, int8_t *restrict q)                      \
    {                                                                                        \
        uint32_t c0 = (uint32_t)first;                                                       \
        for (uint32_t i = 0; i < (uint32_t)m; i++) {                                         \
            T u = (T)(int32_t)(ck_rng_bits(seed, c0 + i) >> 8) * (T)CK_U24;                  \
            int32_t t = (int32_t)FLOOR(v[i] * inv + u);                                      \
            t = t > 127 ? 127 : t;                                                           \
            q[i] = (int8_t)(t < -127 ? -127 : t);                                            \
        }                                                                                    \
    }                                                                                        \
    INLINE void qsgd_levels_##SUF(const T *restrict v, size_t m, T inv, int32_t levels,\
                                         uint64_t seed, uint64_t first, int8_t *restrict q)  \
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
    INLINE void deq_##SUF(const int8_t *restrict q, size_t m, T scale, T *restrict d, \
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
    INLINE void signbits_##SUF(const T *restrict v, size_t m, uint8_t *restrict bits) \
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
    INLINE void signvals_##SUF(const uint8_t *restrict bits, size_t m, T mag,         \
                                      T *restrict d, int accumulate)                         \
    {                                                                                        \
        for (size_t i = 0; i < m; i++) {                                                     \
            T s = (bits[i >> 3] >> (i & 7)) & 1 ? mag : -mag;                                \
            d[i] = accumulate > 0 ? d[i] + s : accumulate < 0 ? d[i] - s : s;                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    CLONES void ck_int8_pack_##SUF(const T *x, size_t n, size_t bucket, int stochastic,             \
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
    CLONES void ck_int8_unpack_##SUF(const int8_t *q, const T *scales, size_t n, size_t bucket,     \
                              T *dst, int accumulate)                                        \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            deq_##SUF(q + b0, n - b0 < bucket ? n - b0 : bucket, scales[k], dst + b0,        \
                      accumulate);                                                           \
    }                                                                                        \
    CLONES void ck_qsgd_pack_##SUF(const T *x, size_t n, size_t bucket, int levels, uint64_t seed,  \
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
            qsgd_levels_##SUF(v, m, inv, levels, seed, b0, q + b0);                          \
            if (res)                                                                         \
                deq_##SUF(q + b0, m, norm / s, res + b0, -1);                                \
        }                                                                                    \
    }                                                                                        \
    CLONES void ck_qsgd_unpack_##SUF(const int8_t *q, const T *norms, size_t n, size_t bucket,      \
                              int levels, T *dst, int accumulate)                            \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            deq_##SUF(q + b0, n - b0 < bucket ? n - b0 : bucket, norms[k] / (T)levels,       \
                      dst + b0, accumulate);                                                 \
    }                                                                                        \
    CLONES void ck_sign_pack_##SUF(const T *x, size_t n, size_t bucket, uint8_t *bits, T *mags,     \
                            T *res)                                                          \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++) {                              \
            size_t m = n - b0 < bucket ? n - b0 : bucket;                                    \
            const T *v = x + b0;                                                             \
            if (res) {                                                                       \
                add_##SUF(res + b0, x + b0, m);                                              \
                v = res + b0;                                                                \
            }                                                                                \
            mags[k] = (T)(SIGNPACK(v, m, bits + b0 / 8) / (double)m);                        \
            if (res)                                                                         \
                SIGNVALS(bits + b0 / 8, m, mags[k], res + b0, -1);                           \
        }                                                                                    \
    }                                                                                        \
    CLONES void ck_sign_unpack_##SUF(const uint8_t *bits, const T *mags, size_t n, size_t bucket,   \
                              T *dst, int accumulate)                                        \
    {                                                                                        \
        for (size_t b0 = 0, k = 0; b0 < n; b0 += bucket, k++)                                \
            SIGNVALS(bits + b0 / 8, n - b0 < bucket ? n - b0 : bucket, mags[k], dst + b0,    \
                     accumulate);                                                            \
    }

/* Sign bits and the lane sums of |v| for floats in one pass, 32 at a time: a compare and a
 * movemask per byte; |v| widened into eight 4-double accumulators, the lanes lanesum fixes. */
__attribute__((target("avx2")))
static double signpack_avx2(const float *restrict v, size_t m, uint8_t *restrict bits)
{
    const __m256 zero = _mm256_setzero_ps();
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256d acc[8];
    for (int a = 0; a < 8; a++)
        acc[a] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + LANES <= m; i += LANES)
        for (int g = 0; g < 4; g++) {
            __m256 x = _mm256_loadu_ps(v + i + 8 * g);
            bits[(i >> 3) + g] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(x, zero, _CMP_GE_OQ));
            __m256 a = _mm256_and_ps(x, absmask);
            acc[2 * g] = _mm256_add_pd(acc[2 * g], _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
            acc[2 * g + 1] = _mm256_add_pd(acc[2 * g + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
        }
    double l[LANES];
    for (int a = 0; a < 8; a++)
        _mm256_storeu_pd(l + 4 * a, acc[a]);
    for (int j = 0; i < m; i++, j++) {
        if (!(i & 7))
            bits[i >> 3] = 0;
        bits[i >> 3] |= (uint8_t)((v[i] >= 0) << (i & 7));
        l[j] += fabs((double)v[i]);
    }
    return fold(l);
}

/* The same with AVX-512: a mask compare gives 16 sign bits, 8 floats widen in one go. */
__attribute__((target("avx512f")))
static double signpack_avx512(const float *restrict v, size_t m, uint8_t *restrict bits)
{
    const __m512 zero = _mm512_setzero_ps();
    __m512d acc[4];
    for (int a = 0; a < 4; a++)
        acc[a] = _mm512_setzero_pd();
    size_t i = 0;
    for (; i + LANES <= m; i += LANES)
        for (int g = 0; g < 2; g++) {
            __m512 x = _mm512_loadu_ps(v + i + 16 * g);
            uint16_t mask = (uint16_t)_mm512_cmp_ps_mask(x, zero, _CMP_GE_OQ);
            memcpy(bits + (i >> 3) + 2 * g, &mask, 2);
            __m512 a = _mm512_abs_ps(x);
            __m256 top = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
            acc[2 * g] = _mm512_add_pd(acc[2 * g], _mm512_cvtps_pd(_mm512_castps512_ps256(a)));
            acc[2 * g + 1] = _mm512_add_pd(acc[2 * g + 1], _mm512_cvtps_pd(top));
        }
    if (i == m) {
        __m512d h = _mm512_add_pd(_mm512_add_pd(acc[0], acc[2]), _mm512_add_pd(acc[1], acc[3]));
        __m256d q = _mm256_add_pd(_mm512_castpd512_pd256(h), _mm512_extractf64x4_pd(h, 1));
        __m128d d = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
        return _mm_cvtsd_f64(_mm_add_sd(d, _mm_unpackhi_pd(d, d)));
    }
    double l[LANES];
    for (int a = 0; a < 4; a++)
        _mm512_storeu_pd(l + 8 * a, acc[a]);
    for (int j = 0; i < m; i++, j++) {
        if (!(i & 7))
            bits[i >> 3] = 0;
        bits[i >> 3] |= (uint8_t)((v[i] >= 0) << (i & 7));
        l[j] += fabs((double)v[i]);
    }
    return fold(l);
}

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
    for (; i < m; i++) {
        float s = (bits[i >> 3] >> (i & 7)) & 1 ? mag : -mag;
        d[i] = accumulate > 0 ? d[i] + s : accumulate < 0 ? d[i] - s : s;
    }
}

/* 2 with AVX-512F, 1 with AVX2, else 0. */
static int simd_level(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return cached;
}

#define SIGNPACK_GENERIC(SUF, v, m, bits) (signbits_##SUF(v, m, bits), lanesum_##SUF(v, m, 0))
#define SIGNPACK_F32(v, m, bits)                                                             \
    (simd_level() == 2 ? signpack_avx512(v, m, bits)                                         \
     : simd_level() == 1 ? signpack_avx2(v, m, bits) : SIGNPACK_GENERIC(f32, v, m, bits))
#define SIGNPACK_F64(v, m, bits) SIGNPACK_GENERIC(f64, v, m, bits)
#define SIGNVALS_F32(bits, m, mag, d, acc)                                                   \
    (simd_level() ? signvals_avx2(bits, m, mag, d, acc) : signvals_f32(bits, m, mag, d, acc))

BUCKETED(f32, float, uint32_t, alias_u32, 0x7fffffffU, rintf, floorf, SIGNPACK_F32, SIGNVALS_F32)
BUCKETED(f64, double, uint64_t, alias_u64, 0x7fffffffffffffffULL, rint, floor, SIGNPACK_F64,
         signvals_f64)
