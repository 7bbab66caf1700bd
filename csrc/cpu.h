/* Which x86-64 SIMD extensions this CPU has, asked once and cached; the kernels pick their
 * hand-vectorised paths with these. */
#ifndef COLLECTIVES_CPU_H
#define COLLECTIVES_CPU_H

#include <stdlib.h>
#include <string.h>

/* 1 when the CPU converts float16 in hardware (AVX + F16C), else 0 (or with
 * COLLECTIVES_SIMD=none). */
static inline int ck_have_f16c(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
        const char *cap = getenv("COLLECTIVES_SIMD");
        if (cap && !strcmp(cap, "none"))
            cached = 0;
    }
    return cached;
}

/* 2 with AVX-512 F and BW (every AVX-512 CPU but Xeon Phi), 1 with AVX2, else 0; lowered by
 * COLLECTIVES_SIMD=avx2 or =none, so the tests can run every hand-written path on one CPU.
 * (The compiler's clones of the plain loops still follow the CPU.) */
static inline int ck_simd_level(void)
{
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        int level = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? 2
                    : __builtin_cpu_supports("avx2")                                        ? 1
                                                                                            : 0;
        const char *cap = getenv("COLLECTIVES_SIMD");
        if (cap && !strcmp(cap, "avx2"))
            level = level < 1 ? level : 1;
        else if (cap && !strcmp(cap, "none"))
            level = 0;
        cached = level;
    }
    return cached;
}

#endif
