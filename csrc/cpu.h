/* Which x86-64 SIMD extensions this CPU has, asked once and cached; the kernels pick their
 * hand-vectorised paths with these. */
#ifndef COLLECTIVES_CPU_H
#define COLLECTIVES_CPU_H

#include <stdlib.h>
#include <string.h>

/* The cap COLLECTIVES_SIMD puts on the hand-written paths: 0 for "none", 1 for "avx2", else
 * 2 (no cap), so the tests can run every path on one CPU. */
static inline int ck_simd_cap(void)
{
    const char *cap = getenv("COLLECTIVES_SIMD");
    return !cap ? 2 : !strcmp(cap, "none") ? 0 : !strcmp(cap, "avx2") ? 1 : 2;
}

/* 1 when the CPU converts float16 in hardware (AVX + F16C), else 0 (or under a cap of none). */
static inline int ck_have_f16c(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c") && ck_simd_cap();
    }
    return cached;
}

/* 2 with AVX-512 F and BW (every AVX-512 CPU but Xeon Phi), 1 with AVX2, else 0; at most
 * ck_simd_cap().  (The compiler's clones of the plain loops still follow the CPU.) */
static inline int ck_simd_level(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        int level = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? 2
                    : __builtin_cpu_supports("avx2")                                        ? 1
                                                                                            : 0;
        int cap = ck_simd_cap();
        cached = level < cap ? level : cap;
    }
    return cached;
}

#endif
