/* In-place chunk reduction, dst[i] = op(dst[i], src[i]): the one combine step that every
 * collective algorithm calls on what it receives.  Plain C99 + GCC's _Float16, no Python. */
#ifndef COLLECTIVES_REDUCE_H
#define COLLECTIVES_REDUCE_H

#include <stddef.h>

/* Element types.  The numbering is part of the Python interface (collectives/ops.py). */
enum ck_dtype {
    CK_BOOL = 0,
    CK_INT8, CK_INT16, CK_INT32, CK_INT64,
    CK_UINT8, CK_UINT16, CK_UINT32, CK_UINT64,
    CK_FLOAT16, CK_FLOAT32, CK_FLOAT64,
    CK_COMPLEX64, CK_COMPLEX128,
    CK_NDTYPES
};

/* Reduction operations, with MPI's meaning: logical ops yield 0/1, integer MIN/MAX keep dst on
 * ties.  Floating MIN/MAX are IEEE 754-2019 minimum/maximum (NaN if either operand is NaN,
 * -0 < +0), with every NaN result the canonical quiet NaN, so their bits never depend on the
 * order in which values are combined. */
enum ck_op {
    CK_SUM = 0, CK_PROD, CK_MIN, CK_MAX,
    CK_LAND, CK_LOR, CK_LXOR, CK_BAND, CK_BOR, CK_BXOR,
    CK_NOPS
};

/* Returns 0, or -1 when op is not defined on dtype (nothing is written then). */
int ck_reduce(void *dst, const void *src, size_t n, int dtype, int op);

/* dst = op(dst, src) over nblocks blocks of blocklen elements, block b starting at element
 * b * dst_stride of dst and b * src_stride of src: strided chunks without a temporary.
 * Returns -1 when op is not defined on dtype. */
int ck_reduce_blocks(void *dst, const void *src, size_t nblocks, size_t blocklen,
                     size_t dst_stride, size_t src_stride, int dtype, int op);

/* dst = (dst + src) * scale for float16 (computed in float, rounded once), float32 and
 * float64, e.g. the last step of an average.  Returns -1 for other dtypes. */
int ck_reduce_scaled(void *dst, const void *src, size_t n, int dtype, double scale);

/* acc += src: float16 values summed into a float32 accumulator (no rounding to half). */
void ck_sum_f16_f32(float *acc, const void *src, size_t n);

/* Bytes per element of dtype, 0 for an unknown code. */
size_t ck_itemsize(int dtype);

/* 1 when op is defined on dtype, else 0. */
int ck_supported(int dtype, int op);

#endif
