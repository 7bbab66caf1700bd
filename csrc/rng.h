/* Counter-based random numbers: element i of a stream seeded with `seed` is a pure function
 * of (seed, i), so any element can be drawn in any order, by C or by vectorised NumPy
 * (collectives/_compress_numpy.py computes the same numbers), and a run is reproducible.
 *
 * The mixer is a 32-bit integer finaliser (xorshift-multiply, two rounds), chosen over a
 * 64-bit one because 32-bit multiplies vectorise on every x86-64 SIMD level. */
#ifndef COLLECTIVES_RNG_H
#define COLLECTIVES_RNG_H

#include <stdint.h>

static inline uint32_t ck_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* The 32 random bits of element i (counters are 32-bit: a stream
 * repeats after 2^32 elements; the wrappers refuse longer stochastic inputs). */
static inline uint32_t ck_rng_bits(uint64_t seed, uint32_t i)
{
    return ck_mix32(ck_mix32(i ^ (uint32_t)seed) ^ (uint32_t)(seed >> 32));
}

/* Uniform in [0, 1) on a 2^-24 grid: exact in float and double alike. */
#define CK_U24 (1.0f / 16777216.0f)

#endif
