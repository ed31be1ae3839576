/*
 * test_simd.c - every SIMD kernel table this CPU can run, against the
 * generic table and a double-precision reference.
 *
 * For each table: float dots over many lengths (including ones that are not
 * a multiple of any vector width) and misaligned pointers; quantized dots
 * over random blocks (the full int8 and nibble ranges, random scales);
 * conversions against the scalar ones over every fp16/bf16 value and a sweep
 * of float bit patterns; quantize_q8_0 byte-identical to tsl_quantize; axpy
 * and scale. Rows are also placed so that they end at a page boundary with
 * an inaccessible page after it, so a kernel that reads past n crashes here.
 *
 * Which tables run is decided the way the library decides: the binary
 * re-runs itself with TSL_SIMD=<name> --simd-name and sees whether the
 * library accepted the name (that also tests the TSL_SIMD override).
 *
 *   core_test_simd --bench   prints kernel and mat-vec throughput (not a test)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <float.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/simd.h"
#include "tensile/backend.h"
#include "test.h"

static const char *self_path;
static const cpu_simd *tables[4];
static int n_tables;
static const cpu_simd *cur; /* table under test */

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- the simd table chosen under TSL_SIMD=name, as the child reports it --- */

/* TSL_TEST_WRAPPER (e.g. "qemu-aarch64 -cpu max") runs the child of a
 * cross-built test under an emulator. */
static void child_simd_name(const char *env, char *out, size_t n) {
    char cmd[1024];
    const char *wrap = getenv("TSL_TEST_WRAPPER");
    if (!wrap) wrap = "";
    if (env) snprintf(cmd, sizeof cmd, "TSL_SIMD='%s' %s '%s' --simd-name 2>/dev/null", env, wrap, self_path);
    else snprintf(cmd, sizeof cmd, "env -u TSL_SIMD %s '%s' --simd-name 2>/dev/null", wrap, self_path);
    out[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (!fgets(out, (int)n, p)) out[0] = 0;
    pclose(p);
    out[strcspn(out, "\n")] = 0;
}

static void find_tables(void) {
    tables[n_tables++] = &cpu_simd_generic;
    const char *names[] = {"avx2", "avx512", "neon"};
    const cpu_simd *(*get[])(void) = {cpu_simd_avx2, cpu_simd_avx512, cpu_simd_neon};
    for (int i = 0; i < 3; i++) {
        char got[64];
        child_simd_name(names[i], got, sizeof got);
        if (strcmp(got, names[i]) == 0 && get[i]() != NULL) {
            tables[n_tables++] = get[i]();
        } else {
            printf("note: %s table not run here (%s)\n", names[i],
                   get[i]() ? "CPU lacks it" : "not built for this target");
        }
    }
}

static void test_selection(void) {
    char def[64], got[64];
    child_simd_name(NULL, def, sizeof def);
    CHECK(def[0] != 0);
    /* the automatic choice is the best table that runs */
    CHECK(strcmp(def, tables[n_tables - 1]->name) == 0);
    child_simd_name("generic", got, sizeof got);
    CHECK(strcmp(got, "generic") == 0);
    child_simd_name("GENERIC", got, sizeof got);
    CHECK(strcmp(got, "generic") == 0);
    /* unknown names are refused with a warning, not obeyed */
    child_simd_name("sse9000", got, sizeof got);
    CHECK(strcmp(got, def) == 0);
    /* this process: the table in use is the one named */
    CHECK(strcmp(tsl_cpu_simd_name(), cpu_simd_get()->name) == 0);
    CHECK(cpu_simd_get() == cpu_simd_get());
}

/* ---- guarded memory: bytes [p, p + size) end exactly at a PROT_NONE page --- */

typedef struct {
    uint8_t *map;
    size_t map_size;
} guard;

static void *guard_alloc(guard *g, size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (size + page - 1) / page;
    g->map_size = (data_pages + 1) * page;
    g->map = mmap(NULL, g->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) {
        g->map = NULL;
        return NULL;
    }
    mprotect(g->map + data_pages * page, page, PROT_NONE);
    return g->map + data_pages * page - size;
}
static void guard_free(guard *g) {
    if (g->map) munmap(g->map, g->map_size);
    g->map = NULL;
}

/* ---- float dots ---------------------------------------------------------- */

static double tol_for(int64_t n, double mag) { return ((double)n / 16 + 16) * FLT_EPSILON * mag + 1e-30; }

static void check_float_dots(int64_t n, const float *a, const float *b, const uint16_t *ha, const uint16_t *hb,
                             const uint16_t *ba, const uint16_t *bb) {
    double r32 = 0, m32 = 0, r16 = 0, m16 = 0, rb = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        double p = (double)a[i] * b[i];
        r32 += p, m32 += fabs(p);
        p = (double)tsl_fp16_to_fp32(ha[i]) * tsl_fp16_to_fp32(hb[i]);
        r16 += p, m16 += fabs(p);
        p = (double)tsl_bf16_to_fp32(ba[i]) * tsl_bf16_to_fp32(bb[i]);
        rb += p, mb += fabs(p);
    }
    float g32 = cur->dot_f32(n, a, b), g16 = cur->dot_f16(n, ha, hb), gb = cur->dot_bf16(n, ba, bb);
    CHECKF(fabs(g32 - r32) <= tol_for(n, m32), "%s dot_f32 n=%lld got %.9g ref %.9g", cur->name, (long long)n,
           g32, r32);
    CHECKF(fabs(g16 - r16) <= tol_for(n, m16), "%s dot_f16 n=%lld got %.9g ref %.9g", cur->name, (long long)n,
           g16, r16);
    CHECKF(fabs(gb - rb) <= tol_for(n, mb), "%s dot_bf16 n=%lld got %.9g ref %.9g", cur->name, (long long)n, gb,
           rb);
    /* and the generic table agrees to the same tolerance */
    CHECK(fabs(g32 - cpu_simd_generic.dot_f32(n, a, b)) <= 2 * tol_for(n, m32));
    CHECK(fabs(g16 - cpu_simd_generic.dot_f16(n, ha, hb)) <= 2 * tol_for(n, m16));
    CHECK(fabs(gb - cpu_simd_generic.dot_bf16(n, ba, bb)) <= 2 * tol_for(n, mb));
}

static void test_float_dots(void) {
    enum { N = 12345 + 8 };
    static float a[N], b[N];
    static uint16_t ha[N], hb[N], ba[N], bb[N];
    unsigned long long s = 1;
    for (int i = 0; i < N; i++) {
        a[i] = test_rand_f(&s, -2.0f, 2.0f);
        b[i] = test_rand_f(&s, -1.0f, 3.0f);
        ha[i] = tsl_fp32_to_fp16(a[i]);
        hb[i] = tsl_fp32_to_fp16(b[i]);
        ba[i] = tsl_fp32_to_bf16(a[i]);
        bb[i] = tsl_fp32_to_bf16(b[i]);
    }
    for (int t = 0; t < n_tables; t++) {
        cur = tables[t];
        for (int64_t n = 0; n <= 200; n++)
            for (int oa = 0; oa < 3; oa++) {
                int ob = (oa * 5 + (int)n) % 4; /* misaligned, and a and b differently */
                check_float_dots(n, a + oa, b + ob, ha + oa, hb + ob, ba + oa, bb + ob);
            }
        const int64_t big[] = {255, 256, 257, 1000, 4096, 4097, 12345};
        for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) check_float_dots(big[k], a + 1, b + 3, ha + 1, hb + 3, ba + 1, bb + 3);
    }
}

/* Rows ending at a page boundary: reading element n faults. */
static void test_no_overread(void) {
    for (int t = 0; t < n_tables; t++) {
        cur = tables[t];
        for (int64_t n = 1; n <= 80; n++) {
            guard g1, g2, g3, g4;
            float *a = guard_alloc(&g1, (size_t)n * 4), *b = guard_alloc(&g2, (size_t)n * 4);
            uint16_t *h = guard_alloc(&g3, (size_t)n * 2), *k = guard_alloc(&g4, (size_t)n * 2);
            if (!a || !b || !h || !k) {
                CHECK(0);
                return;
            }
            for (int64_t i = 0; i < n; i++) a[i] = b[i] = 1.0f, h[i] = k[i] = 0x3c00;
            CHECK(cur->dot_f32(n, a, b) == (float)n);
            CHECK(cur->dot_f16(n, h, k) == (float)n);
            for (int64_t i = 0; i < n; i++) h[i] = k[i] = 0x3f80;
            CHECK(cur->dot_bf16(n, h, k) == (float)n);
            cur->f32_to_f16(n, a, h);
            cur->f16_to_f32(n, h, b);
            cur->f32_to_bf16(n, a, h);
            cur->bf16_to_f32(n, h, b);
            cur->axpy_f32(n, 2.0f, a, b);
            cur->scale_f32(n, 3.0f, a, b);
            CHECK(b[n - 1] == 3.0f);
            guard_free(&g1), guard_free(&g2), guard_free(&g3), guard_free(&g4);
        }
        for (int64_t nb = 1; nb <= 12; nb++) {
            guard g1, g2, g3, g4;
            tsl_block_q8_0 *x = guard_alloc(&g1, (size_t)nb * sizeof *x), *y = guard_alloc(&g2, (size_t)nb * sizeof *y);
            tsl_block_q4_0 *w = guard_alloc(&g3, (size_t)nb * sizeof *w);
            float *f = guard_alloc(&g4, (size_t)nb * 32 * 4);
            if (!x || !y || !w || !f) {
                CHECK(0);
                return;
            }
            for (int64_t i = 0; i < nb * 32; i++) f[i] = 1.0f;
            cur->quantize_q8_0(nb * 32, f, x);
            tsl_quantize(TSL_TYPE_Q8_0, f, y, nb * 32);
            CHECK(memcmp(x, y, (size_t)nb * sizeof *x) == 0);
            for (int64_t i = 0; i < nb; i++) {
                w[i].d = 0x3c00;
                memset(w[i].qs, 0x99, sizeof w[i].qs); /* every element 1 */
            }
            /* every element of x and y is 127 with d = 1/127 (fp16) */
            double d = tsl_fp16_to_fp32(x[0].d);
            CHECK(fabs(cur->dot_q8_0_q8_0(nb * 32, x, y) - nb * 32 * (127 * d) * (127 * d)) < 1e-3 * nb);
            CHECK(fabs(cur->dot_q4_0_q8_0(nb * 32, w, y) - nb * 32 * 127 * d) < 1e-3 * nb);
            guard_free(&g1), guard_free(&g2), guard_free(&g3), guard_free(&g4);
        }
    }
}

/* ---- quantized dots --------------------------------------------------------- */

static uint16_t rand_scale(unsigned long long *s) {
    /* magnitudes 2^-10 .. 2^2, either sign */
    float v = ldexpf(test_rand_f(s, 1.0f, 2.0f), (int)(test_rand_u64(s) % 13) - 10);
    return tsl_fp32_to_fp16(test_rand_u64(s) & 1 ? -v : v);
}

static void test_quantized_dots(void) {
    enum { NB = 200 };
    /* byte buffers so rows can start at any even offset (block alignment is 2) */
    static uint8_t xbuf[NB * sizeof(tsl_block_q8_0) + 8], ybuf[NB * sizeof(tsl_block_q8_0) + 8],
        wbuf[NB * sizeof(tsl_block_q4_0) + 8];
    unsigned long long s = 5;
    const int64_t counts[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 64, 129, NB};
    for (int round = 0; round < 3; round++) {
        size_t ox = (size_t)(round * 2), oy = (size_t)((2 - round) * 2), ow = (size_t)(round * 2 + 2);
        tsl_block_q8_0 *x = (tsl_block_q8_0 *)(xbuf + ox), *y = (tsl_block_q8_0 *)(ybuf + oy);
        tsl_block_q4_0 *w = (tsl_block_q4_0 *)(wbuf + ow);
        for (int ib = 0; ib < NB; ib++) {
            x[ib].d = rand_scale(&s), y[ib].d = rand_scale(&s), w[ib].d = rand_scale(&s);
            for (int j = 0; j < 32; j++) {
                x[ib].qs[j] = (int8_t)(int)(test_rand_u64(&s) % 256 - 128); /* weights: full range */
                y[ib].qs[j] = (int8_t)(int)(test_rand_u64(&s) % 255 - 127); /* activations: +-127 */
            }
            for (int j = 0; j < 16; j++) w[ib].qs[j] = (uint8_t)test_rand_u64(&s);
            if (round == 2 && ib % 3 == 0) { /* the extremes */
                memset(x[ib].qs, 0x80, 32);
                memset(y[ib].qs, ib % 2 ? 0x81 : 0x7f, 32);
                memset(w[ib].qs, ib % 2 ? 0x00 : 0xff, 16);
            }
        }
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            int64_t nb = counts[k], n = nb * 32;
            double r8 = 0, m8 = 0, r4 = 0, m4 = 0;
            for (int64_t ib = 0; ib < nb; ib++) {
                int64_t i8 = 0, i4 = 0;
                for (int j = 0; j < 32; j++) i8 += (int64_t)x[ib].qs[j] * y[ib].qs[j];
                for (int j = 0; j < 16; j++) {
                    i4 += (int64_t)((w[ib].qs[j] & 15) - 8) * y[ib].qs[j];
                    i4 += (int64_t)((w[ib].qs[j] >> 4) - 8) * y[ib].qs[j + 16];
                }
                double dy = tsl_fp16_to_fp32(y[ib].d);
                r8 += (double)i8 * tsl_fp16_to_fp32(x[ib].d) * dy, m8 += fabs((double)i8 * tsl_fp16_to_fp32(x[ib].d) * dy);
                r4 += (double)i4 * tsl_fp16_to_fp32(w[ib].d) * dy, m4 += fabs((double)i4 * tsl_fp16_to_fp32(w[ib].d) * dy);
            }
            for (int t = 0; t < n_tables; t++) {
                cur = tables[t];
                float g8 = cur->dot_q8_0_q8_0(n, x, y), g4 = cur->dot_q4_0_q8_0(n, w, y);
                /* integer sums are exact; only nb float products and adds round */
                double t8 = (nb + 4) * 2 * FLT_EPSILON * m8 + 1e-30, t4 = (nb + 4) * 2 * FLT_EPSILON * m4 + 1e-30;
                CHECKF(fabs(g8 - r8) <= t8, "%s q8_0 nb=%lld got %.9g ref %.9g", cur->name, (long long)nb, g8, r8);
                CHECKF(fabs(g4 - r4) <= t4, "%s q4_0 nb=%lld got %.9g ref %.9g", cur->name, (long long)nb, g4, r4);
                CHECK(fabs(g8 - cpu_simd_generic.dot_q8_0_q8_0(n, x, y)) <= 2 * t8);
                CHECK(fabs(g4 - cpu_simd_generic.dot_q4_0_q8_0(n, w, y)) <= 2 * t4);
            }
        }
    }
}

/* ---- conversions -------------------------------------------------------------- */

static void test_conversions(void) {
    enum { M = 65536 + 3 };
    static uint16_t h[M], h2[M];
    static float f[M], g[M];
    for (int t = 0; t < n_tables; t++) {
        cur = tables[t];
        int bad = 0;
        /* every fp16 / bf16 value, at an odd offset */
        for (uint32_t i = 0; i < 65536; i++) h[i + 1] = (uint16_t)i;
        cur->f16_to_f32(65536, h + 1, f + 3);
        for (uint32_t i = 0; i < 65536; i++) {
            float want = tsl_fp16_to_fp32((uint16_t)i);
            bad += isnan(want) ? !isnan(f[i + 3]) : f2u(f[i + 3]) != f2u(want);
        }
        cur->bf16_to_f32(65536, h + 1, f + 3);
        for (uint32_t i = 0; i < 65536; i++) bad += f2u(f[i + 3]) != f2u(tsl_bf16_to_fp32((uint16_t)i));
        /* a sweep of float bit patterns, and the round-trip of every half */
        for (uint64_t base = 0; base < 0x100000000ull; base += 0x100000000ull / 256) {
            for (int i = 0; i < 4096; i++) f[i + 1] = u2f((uint32_t)(base + (uint64_t)i * 7919u));
            cur->f32_to_f16(4096, f + 1, h + 3);
            cur->f32_to_bf16(4096, f + 1, h2 + 1);
            for (int i = 0; i < 4096; i++) {
                bad += h[i + 3] != tsl_fp32_to_fp16(f[i + 1]);
                bad += h2[i + 1] != tsl_fp32_to_bf16(f[i + 1]);
            }
        }
        for (uint32_t i = 0; i < 65536; i++) g[i] = tsl_fp16_to_fp32((uint16_t)i);
        cur->f32_to_f16(65536, g, h);
        for (uint32_t i = 0; i < 65536; i++) bad += h[i] != tsl_fp32_to_fp16(g[i]);
        /* odd lengths */
        for (int n = 0; n < 40; n++) {
            for (int i = 0; i < 48; i++) f[i] = (float)i * 0.37f - 5.0f, h[i] = 0xabcd;
            cur->f32_to_f16(n, f, h);
            for (int i = 0; i < n; i++) bad += h[i] != tsl_fp32_to_fp16(f[i]);
            for (int i = n; i < 48; i++) bad += h[i] != 0xabcd; /* nothing written past n */
        }
        CHECKF(bad == 0, "%s: %d conversion mismatches", cur->name, bad);
    }
}

/* ---- quantize_q8_0: same bytes as the reference ---------------------------------- */

static void fill_case(int kind, float *x, int n, unsigned long long *s) {
    for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = test_rand_f(s, -1.0f, 1.0f); break;
        case 1: x[i] = test_rand_f(s, -1.0f, 1.0f) * 1e4f; break;
        case 2: x[i] = test_rand_f(s, -1.0f, 1.0f) * 1e-5f; break;
        case 3: x[i] = (i % 32 == 0) ? 127.0f : (float)(i % 64 - 32) + 0.5f; break; /* id = 1: exact ties */
        case 4: x[i] = (i % 32 == 0) ? 127.0f * 0.125f : ((float)(i % 64 - 32) + 0.5f) * 0.125f; break;
        case 5: x[i] = 0.0f; break;
        case 6: x[i] = (i % 7 == 0) ? -0.0f : 0.0f; break;
        case 7: x[i] = test_rand_f(s, -1.0f, 1.0f) * 2e-39f; break; /* 1/d overflows */
        case 8: x[i] = test_rand_f(s, -1.0f, 1.0f) * 1e30f; break;
        case 9: x[i] = (i % 37 == 5) ? INFINITY : (i % 41 == 7 ? -INFINITY : test_rand_f(s, -3.0f, 3.0f)); break;
        case 10: { /* half-steps of d: x * (1/d) and x / d round differently */
            float amax = test_rand_f(s, 1.0f, 2.0f), d = amax / 127.0f;
            x[i] = (i % 32 == 0) ? amax : fminf(fmaxf(((float)(int)(test_rand_u64(s) % 254) - 127 + 0.5f) * d, -amax), amax);
            break;
        }
        default: x[i] = (float)(i % 32) * ((i / 32) % 2 ? -1.0f : 1.0f); break;
        }
    }
}

static void test_quantize_q8_0_matches_reference(void) {
    enum { NB = 67 };
    static float xbuf[NB * 32 + 4];
    static uint8_t got[NB * 34 + 4], want[NB * 34 + 4];
    unsigned long long s = 11;
    for (int t = 0; t < n_tables; t++) {
        cur = tables[t];
        for (int kind = 0; kind <= 11; kind++) {
            for (int nb = 0; nb <= NB; nb += (nb < 10 ? 1 : 19)) {
                float *x = xbuf + (kind % 3); /* misaligned sources */
                fill_case(kind, x, nb * 32, &s);
                tsl_block_q8_0 *q = (tsl_block_q8_0 *)(got + 2 * (kind % 2)); /* and destinations */
                memset(got, 0x5a, sizeof got);
                cur->quantize_q8_0(nb * 32, x, q);
                tsl_quantize(TSL_TYPE_Q8_0, x, want, nb * 32);
                CHECKF(memcmp(q, want, (size_t)nb * 34) == 0, "%s quantize_q8_0 case %d nb=%d differs", cur->name,
                       kind, nb);
                CHECK(got[2 * (kind % 2) + (size_t)nb * 34] == 0x5a); /* nothing written past the end */
            }
        }
    }
}

/* ---- axpy / scale -------------------------------------------------------------- */

static void test_axpy_scale(void) {
    enum { N = 300 };
    static float x[N + 4], y[N + 4], r[N + 4], y0[N + 4];
    unsigned long long s = 3;
    for (int i = 0; i < N + 4; i++) x[i] = test_rand_f(&s, -3, 3), y0[i] = test_rand_f(&s, -3, 3);
    for (int t = 0; t < n_tables; t++) {
        cur = tables[t];
        for (int n = 0; n <= N; n += (n < 70 ? 1 : 23)) {
            memcpy(y, y0, sizeof y);
            cur->axpy_f32(n, 1.75f, x + 1, y + 2);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                double want = (double)y0[i + 2] + 1.75 * x[i + 1];
                bad += fabs(y[i + 2] - want) > 2 * FLT_EPSILON * (fabs(want) + fabs(1.75 * x[i + 1]));
            }
            bad += y[0] != y0[0] || y[1] != y0[1] || y[n + 2] != y0[n + 2];
            memcpy(r, y0, sizeof r);
            cur->scale_f32(n, -0.3f, x + 1, r + 2);
            for (int i = 0; i < n; i++) bad += r[i + 2] != x[i + 1] * -0.3f; /* one rounding: exact */
            bad += r[1] != y0[1] || r[n + 2] != y0[n + 2];
            /* in place */
            memcpy(r, x, sizeof r);
            cur->scale_f32(n, 2.0f, r, r);
            for (int i = 0; i < n; i++) bad += r[i] != 2.0f * x[i];
            CHECKF(bad == 0, "%s axpy/scale n=%d: %d bad", cur->name, n, bad);
        }
    }
}

/* ---- benchmark --------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const cpu_simd *t;
    int type; /* 0 q4_0, 1 q8_0, 2 f16, 3 memcpy */
    const void *w;
    const void *act;
    void *dst;
    int64_t k, r0, r1;
    int reps; /* passes over the rows (in-cache runs) */
    float *out;
} bench_job;

static void *bench_run(void *arg) {
    bench_job *j = arg;
    if (j->type == 3) {
        memcpy((char *)j->dst + j->r0, (const char *)j->w + j->r0, (size_t)(j->r1 - j->r0));
        return NULL;
    }
    size_t rs = j->type == 0 ? tsl_row_size(TSL_TYPE_Q4_0, j->k)
                : j->type == 1 ? tsl_row_size(TSL_TYPE_Q8_0, j->k) : (size_t)j->k * 2;
    for (int rep = 0; rep < (j->reps > 0 ? j->reps : 1); rep++) {
        for (int64_t r = j->r0; r < j->r1; r++) {
            const void *row = (const char *)j->w + (size_t)r * rs;
            if (j->type == 0) j->out[r] = j->t->dot_q4_0_q8_0(j->k, row, j->act);
            else if (j->type == 1) j->out[r] = j->t->dot_q8_0_q8_0(j->k, row, j->act);
            else j->out[r] = j->t->dot_f16(j->k, row, j->act);
        }
    }
    return NULL;
}

/* Bytes/s of running the job over rows [0, m) (or bytes [0, m) for memcpy)
 * on nth threads, best of reps. */
static double bench_rate(bench_job base, int64_t m, int nth, size_t bytes, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        pthread_t th[8];
        bench_job jobs[8];
        double t0 = now_s();
        for (int i = 0; i < nth; i++) {
            jobs[i] = base;
            jobs[i].r0 = m * i / nth;
            jobs[i].r1 = m * (i + 1) / nth;
            pthread_create(&th[i], NULL, bench_run, &jobs[i]);
        }
        for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return (double)bytes / best;
}

static int bench(void) {
    const int64_t K = 4096, M_BIG = 16384 * 4; /* 256 Mi weights: far beyond the caches */
    size_t q4_bytes = tsl_row_size(TSL_TYPE_Q4_0, K) * (size_t)M_BIG;
    size_t q8_bytes = tsl_row_size(TSL_TYPE_Q8_0, K) * (size_t)M_BIG;
    size_t cp_bytes = 256u << 20;
    uint8_t *w = malloc(q8_bytes), *w2 = malloc(cp_bytes);
    float *out = malloc((size_t)M_BIG * 4), *xf = malloc((size_t)K * 4);
    tsl_block_q8_0 *act = malloc(tsl_row_size(TSL_TYPE_Q8_0, K));
    if (!w || !w2 || !out || !xf || !act) return 1;
    unsigned long long s = 1;
    for (size_t i = 0; i < q8_bytes; i++) w[i] = (uint8_t)(test_rand_u64(&s) >> 56);
    for (size_t i = 0; i < q8_bytes; i += 18) w[i + 1] = 0x3c; /* sane-ish scales */
    memset(w2, 1, cp_bytes);
    for (int64_t i = 0; i < K; i++) xf[i] = test_rand_f(&s, -1, 1);
    tsl_quantize(TSL_TYPE_Q8_0, xf, act, K);

    bench_job cp = {.type = 3, .w = w, .dst = w2};
    double copy1 = bench_rate(cp, (int64_t)cp_bytes, 1, cp_bytes, 3);
    double copy2 = bench_rate(cp, (int64_t)cp_bytes, 2, cp_bytes, 3);
    printf("memcpy 256 MiB: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n", copy1 / 1e9, copy2 / 1e9);

    for (int t = 0; t < n_tables; t++) {
        const cpu_simd *tb = tables[t];
        bench_job q4 = {.t = tb, .type = 0, .w = w, .act = act, .k = K, .out = out};
        bench_job q8 = {.t = tb, .type = 1, .w = w, .act = act, .k = K, .out = out};
        /* in cache: 64 rows per thread (~150 KiB of Q4_0) over and over */
        const int64_t mc = 64;
        const int reps = 2000;
        bench_job c4j = q4, c8j = q8;
        c4j.reps = c8j.reps = reps;
        size_t b4 = tsl_row_size(TSL_TYPE_Q4_0, K) * (size_t)mc * reps, b8 = tsl_row_size(TSL_TYPE_Q8_0, K) * (size_t)mc * reps;
        double c4 = bench_rate(c4j, mc, 1, b4, 3), c8 = bench_rate(c8j, mc, 1, b8, 3);
        double c42 = bench_rate(c4j, 2 * mc, 2, b4 * 2, 3);
        /* the machine may be shared: best of several interleaved runs */
        double r4 = 0, r8 = 0, r41 = 0;
        for (int rep = 0; rep < 4; rep++) {
            copy2 = fmax(copy2, bench_rate(cp, (int64_t)cp_bytes, 2, cp_bytes, 1));
            r4 = fmax(r4, bench_rate(q4, M_BIG, 2, q4_bytes, 1));
            r8 = fmax(r8, bench_rate(q8, M_BIG / 2, 2, q8_bytes / 2, 1));
            r41 = fmax(r41, bench_rate(q4, M_BIG, 1, q4_bytes, 1));
        }
        printf("%-8s q4_0 dot: in L2 %.1f GB/s 1 thread, %.1f GB/s 2 threads; mat-vec 4096x%lld: %.1f GB/s 1 thread, %.1f GB/s 2 threads (%.0f%% of 2-thread memcpy)\n",
               tb->name, c4 / 1e9, c42 / 1e9, (long long)M_BIG, r41 / 1e9, r4 / 1e9, 100 * r4 / copy2);
        printf("%-8s q8_0 dot: in L2 %.1f GB/s 1 thread; mat-vec 2 threads %.1f GB/s (%.0f%% of 2-thread memcpy, best %.1f GB/s)\n",
               tb->name, c8 / 1e9, r8 / 1e9, 100 * r8 / copy2, copy2 / 1e9);
        /* quantize_q8_0 over activations in cache */
        enum { QN = 4096 * 8 };
        static float qx[QN];
        static tsl_block_q8_0 qy[QN / 32];
        for (int i = 0; i < QN; i++) qx[i] = test_rand_f(&s, -2, 2);
        double best = 1e30;
        for (int rep = 0; rep < 200; rep++) {
            double t0 = now_s();
            tb->quantize_q8_0(QN, qx, qy);
            best = fmin(best, now_s() - t0);
        }
        printf("%-8s quantize_q8_0: %.2f Gfloat/s (1 thread, in L2)\n", tb->name, QN / best / 1e9);
    }
    free(w), free(w2), free(out), free(xf), free(act);
    return 0;
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc >= 2 && strcmp(argv[1], "--simd-name") == 0) {
        printf("%s\n", tsl_cpu_simd_name());
        return 0;
    }
    find_tables();
    if (argc >= 2 && strcmp(argv[1], "--bench") == 0) return bench();
    printf("tables:");
    for (int t = 0; t < n_tables; t++) printf(" %s", tables[t]->name);
    printf("\n");
    RUN(test_selection);
    RUN(test_float_dots);
    RUN(test_no_overread);
    RUN(test_quantized_dots);
    RUN(test_conversions);
    RUN(test_quantize_q8_0_matches_reference);
    RUN(test_axpy_scale);
    return test_summary();
}
