/*
 * simd.c - picks the SIMD kernel table once per process.
 *
 * One binary runs on any CPU of its architecture: each instruction set's
 * kernels live in their own file, built with that set's flags, and this file
 * (built with baseline flags) asks the CPU what it can run before handing a
 * table out. Nothing here executes an instruction the CPU may lack.
 *
 * Trade-offs:
 *  - The choice is made once (pthread_once) and kept in one pointer, the
 *    only mutable global of the module; every later call is a load. Kernels
 *    therefore cannot switch tables mid-run, which keeps results of one
 *    process reproducible.
 *  - TSL_SIMD=generic|avx2|avx512|neon forces a table (for tests, benchmarks
 *    and bug reports). A table the CPU cannot run is refused with a warning
 *    rather than obeyed: a forced illegal instruction would kill the process.
 *  - AVX-512 is only used with VNNI (vpdpbusd is what makes its quantized
 *    dots worth having); an AVX-512 CPU without VNNI (Skylake-SP) gets the
 *    AVX2 table, which is close on those parts.
 */
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

#include "core/simd.h"

static const cpu_simd *simd_table; /* written once, under simd_once */
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
#include <cpuid.h>

/* CPU features read with cpuid, and the register state the OS saves
 * (xgetbv): a CPU with AVX-512 under an OS that does not save zmm state
 * must not run it. Read directly because the compilers' feature-name lists
 * for __builtin_cpu_supports differ (clang 14 lacks "f16c"). */
typedef struct {
    bool avx2, avx512;
} simd_x86;

static simd_x86 simd_x86_features(void) {
    simd_x86 f = {false, false};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!(osxsave && avx && fma && f16c)) return f;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    if ((xlo & 0x6u) != 0x6u) return f; /* xmm and ymm state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    f.avx2 = b & (1u << 5);
    const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
               avx512vl = b & (1u << 31), vnni = c & (1u << 11);
    const bool zmm_state = (xlo & 0xe6u) == 0xe6u; /* opmask, upper zmm0-15, zmm16-31 */
    f.avx512 = f.avx2 && avx512f && avx512dq && avx512bw && avx512vl && vnni && zmm_state;
    return f;
}
static bool simd_have_avx2(void) { return simd_x86_features().avx2; }
static bool simd_have_avx512(void) { return simd_x86_features().avx512; }
#endif

/* The table called `name` if this build has it and this CPU runs it. */
static const cpu_simd *simd_by_name(const char *name) {
    if (strcasecmp(name, "generic") == 0) return &cpu_simd_generic;
#if defined(__x86_64__)
    if (strcasecmp(name, "avx2") == 0) return simd_have_avx2() ? cpu_simd_avx2() : NULL;
    if (strcasecmp(name, "avx512") == 0) return simd_have_avx512() ? cpu_simd_avx512() : NULL;
#endif
#if defined(__aarch64__)
    if (strcasecmp(name, "neon") == 0) return cpu_simd_neon();
#endif
    return NULL;
}

static const cpu_simd *simd_best(void) {
#if defined(__x86_64__)
    if (simd_have_avx512()) return cpu_simd_avx512();
    if (simd_have_avx2()) return cpu_simd_avx2();
#endif
#if defined(__aarch64__)
    return cpu_simd_neon(); /* Advanced SIMD is part of the AArch64 base */
#endif
    return &cpu_simd_generic;
}

static void simd_select(void) {
    const char *want = getenv("TSL_SIMD");
    const cpu_simd *t = NULL;
    if (want && *want) {
        t = simd_by_name(want);
        if (!t) TSL_LOGW("TSL_SIMD=%s is unknown or not supported by this CPU; choosing automatically", want);
    }
    simd_table = t ? t : simd_best();
    TSL_LOGD("cpu: SIMD kernels: %s", simd_table->name);
}

const cpu_simd *cpu_simd_get(void) {
    pthread_once(&simd_once, simd_select);
    return simd_table;
}

const char *tsl_cpu_simd_name(void) { return cpu_simd_get()->name; }

#if !defined(__x86_64__)
/* The x86 tables are not built on other targets. */
const cpu_simd *cpu_simd_avx2(void) { return NULL; }
const cpu_simd *cpu_simd_avx512(void) { return NULL; }
#endif
#if !defined(__aarch64__)
const cpu_simd *cpu_simd_neon(void) { return NULL; }
#endif
