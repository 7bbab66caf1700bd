/* Gradient compression kernels: quantizers (quantize.c) and sparsifiers (sparsify.c).
 *
 * Every kernel comes in a float (_f32) and a double (_f64) form; n counts elements.
 * Quantizers work on buckets of `bucket` consecutive elements (the last one may be short)
 * with one scale per bucket.  A non-NULL `res` fuses error feedback into the same pass:
 * the kernel compresses v = x + res and leaves res = v - decompress(payload).
 * Decompressors write dst = decompress(payload), or dst += decompress(payload) when
 * `accumulate` is set, so a receiver never materialises a temporary.
 * Stochastic kernels draw element i's uniform from rng.h's stream (seed, i).
 * Sparsifiers emit indices in increasing order; with `zero` set they also clear the selected
 * entries of x, which is the error-feedback residual update of a sparsifier.  Top-k, approximate
 * top-k and threshold take a non-NULL `add` as the new gradient: they set x += add in their
 * first pass over x and select from the sum (x is then the residual).  Out of memory (-1)
 * leaves x either as it was or holding the sum. */
#ifndef COLLECTIVES_COMPRESS_H
#define COLLECTIVES_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#define CK_DECLARE(SUF, T)                                                                   \
    int ck_fp16_pack_##SUF(const T *x, size_t n, T scale, uint16_t *h, T *res);             \
    void ck_fp16_unpack_##SUF(const uint16_t *h, size_t n, T scale, T *dst, int accumulate); \
    void ck_int8_pack_##SUF(const T *x, size_t n, size_t bucket, int stochastic,            \
                            uint64_t seed, int8_t *q, T *scales, T *res);                   \
    void ck_int8_unpack_##SUF(const int8_t *q, const T *scales, size_t n, size_t bucket,    \
                              T *dst, int accumulate);                                      \
    void ck_qsgd_pack_##SUF(const T *x, size_t n, size_t bucket, int levels, uint64_t seed, \
                            int8_t *q, T *norms, T *res);                                   \
    void ck_qsgd_unpack_##SUF(const int8_t *q, const T *norms, size_t n, size_t bucket,     \
                              int levels, T *dst, int accumulate);                          \
    void ck_sign_pack_##SUF(const T *x, size_t n, size_t bucket, uint8_t *bits, T *mags,    \
                            T *res);                                                        \
    void ck_sign_unpack_##SUF(const uint8_t *bits, const T *mags, size_t n, size_t bucket,  \
                              T *dst, int accumulate);                                      \
    int ck_topk_##SUF(T *x, const T *add, size_t n, size_t k, int64_t *idx, T *vals,        \
                      int zero);                                                            \
    int64_t ck_approx_topk_##SUF(T *x, const T *add, size_t n, size_t k, size_t nsample,    \
                                 uint64_t seed, int64_t *idx, T *vals, int zero);           \
    size_t ck_threshold_count_##SUF(T *x, const T *add, size_t n, T thr);                   \
    size_t ck_threshold_##SUF(T *x, const T *add, size_t n, T thr, int64_t *idx, T *vals,   \
                              size_t cap, int zero);                                        \
    size_t ck_randk_##SUF(T *x, size_t n, uint32_t thr, uint64_t seed, T *vals, size_t cap, \
                          int zero);                                                        \
    void ck_randk_scatter_add_##SUF(T *dst, size_t n, uint32_t thr, uint64_t seed,          \
                                    const T *vals, size_t m, T scale);                      \
    int ck_scatter_add_##SUF(T *dst, size_t n, const int64_t *idx, const T *vals, size_t m, \
                             T scale);

CK_DECLARE(f32, float)
CK_DECLARE(f64, double)
#undef CK_DECLARE

/* Random-k: element i is kept when its 32 random bits fall below thr (probability thr/2^32). */
size_t ck_randk_indices(size_t n, uint32_t thr, uint64_t seed, int64_t *idx, size_t cap);

#endif
