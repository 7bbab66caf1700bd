# Declarations of the C kernels in csrc/, once, for every Cython wrapper that calls them.
from libc.stdint cimport int8_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "reduce.h" nogil:
    int ck_reduce(void *dst, const void *src, size_t n, int dtype, int op)
    int ck_reduce_blocks(void *dst, const void *src, size_t nblocks, size_t blocklen,
                         size_t dst_stride, size_t src_stride, int dtype, int op)
    int ck_reduce_scaled(void *dst, const void *src, size_t n, int dtype, double scale)
    void ck_sum_f16_f32(float *acc, const void *src, size_t n)
    size_t ck_itemsize(int dtype)

cdef extern from "compress.h" nogil:
    int ck_fp16_pack_f32(const float *x, size_t n, float scale, uint16_t *h, float *res)
    int ck_fp16_pack_f64(const double *x, size_t n, double scale, uint16_t *h, double *res)
    void ck_fp16_unpack_f32(const uint16_t *h, size_t n, float scale, float *dst, int accumulate)
    void ck_fp16_unpack_f64(const uint16_t *h, size_t n, double scale, double *dst, int accumulate)
    void ck_int8_pack_f32(const float *x, size_t n, size_t bucket, int stochastic, uint64_t seed,
                          int8_t *q, float *scales, float *res)
    void ck_int8_pack_f64(const double *x, size_t n, size_t bucket, int stochastic, uint64_t seed,
                          int8_t *q, double *scales, double *res)
    void ck_int8_unpack_f32(const int8_t *q, const float *scales, size_t n, size_t bucket,
                            float *dst, int accumulate)
    void ck_int8_unpack_f64(const int8_t *q, const double *scales, size_t n, size_t bucket,
                            double *dst, int accumulate)
    void ck_qsgd_pack_f32(const float *x, size_t n, size_t bucket, int levels, uint64_t seed,
                          int8_t *q, float *norms, float *res)
    void ck_qsgd_pack_f64(const double *x, size_t n, size_t bucket, int levels, uint64_t seed,
                          int8_t *q, double *norms, double *res)
    void ck_qsgd_unpack_f32(const int8_t *q, const float *norms, size_t n, size_t bucket,
                            int levels, float *dst, int accumulate)
    void ck_qsgd_unpack_f64(const int8_t *q, const double *norms, size_t n, size_t bucket,
                            int levels, double *dst, int accumulate)
    void ck_sign_pack_f32(const float *x, size_t n, size_t bucket, uint8_t *bits, float *mags,
                          float *res)
    void ck_sign_pack_f64(const double *x, size_t n, size_t bucket, uint8_t *bits, double *mags,
                          double *res)
    void ck_sign_unpack_f32(const uint8_t *bits, const float *mags, size_t n, size_t bucket,
                            float *dst, int accumulate)
    void ck_sign_unpack_f64(const uint8_t *bits, const double *mags, size_t n, size_t bucket,
                            double *dst, int accumulate)
    int ck_topk_f32(float *x, const float *add, size_t n, size_t k, int64_t *idx, float *vals,
                    int zero)
    int ck_topk_f64(double *x, const double *add, size_t n, size_t k, int64_t *idx,
                    double *vals, int zero)
    int64_t ck_approx_topk_f32(float *x, const float *add, size_t n, size_t k, size_t nsample,
                               uint64_t seed, int64_t *idx, float *vals, int zero)
    int64_t ck_approx_topk_f64(double *x, const double *add, size_t n, size_t k, size_t nsample,
                               uint64_t seed, int64_t *idx, double *vals, int zero)
    size_t ck_threshold_count_f32(float *x, const float *add, size_t n, float thr)
    size_t ck_threshold_count_f64(double *x, const double *add, size_t n, double thr)
    size_t ck_threshold_f32(float *x, const float *add, size_t n, float thr, int64_t *idx,
                            float *vals, size_t cap, int zero)
    size_t ck_threshold_f64(double *x, const double *add, size_t n, double thr, int64_t *idx,
                            double *vals, size_t cap, int zero)
    size_t ck_randk_f32(float *x, size_t n, uint32_t thr, uint64_t seed, float *vals, size_t cap,
                        int zero)
    size_t ck_randk_f64(double *x, size_t n, uint32_t thr, uint64_t seed, double *vals,
                        size_t cap, int zero)
    void ck_randk_scatter_add_f32(float *dst, size_t n, uint32_t thr, uint64_t seed,
                                  const float *vals, size_t m, float scale)
    void ck_randk_scatter_add_f64(double *dst, size_t n, uint32_t thr, uint64_t seed,
                                  const double *vals, size_t m, double scale)
    int ck_scatter_add_f32(float *dst, size_t n, const int64_t *idx, const float *vals, size_t m,
                           float scale)
    int ck_scatter_add_f64(double *dst, size_t n, const int64_t *idx, const double *vals,
                           size_t m, double scale)
    size_t ck_randk_indices(size_t n, uint32_t thr, uint64_t seed, int64_t *idx, size_t cap)
