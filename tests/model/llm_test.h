/*
 * llm_test.h - what the LLM test programs (test_llm.c, test_llm_vk.c)
 * share: a small ASan quarantine (the RSS checks would count a large one as
 * ours), a scratch directory for the model files they write, loading without
 * a progress bar, the relative difference of two logit rows, and resident
 * memory from /proc. Header-only; each program includes it once.
 */
#ifndef TSL_TEST_LLM_TEST_H
#define TSL_TEST_LLM_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensile/model.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#ifdef TEST_ASAN
/* ASan keeps freed memory in a quarantine (256 MB by default), which the
 * RSS checks would count as ours: keep it small for these tests. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=4"; }
#endif

/* the scratch directory (made by the program's main with mkdtemp) */
static char test_dir[64];

/* name inside the scratch directory; eight results may be live at once */
static inline const char *tpath(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", test_dir, name);
    return p;
}

static inline tsl_model *load(const char *path) {
    tsl_model_params mp = tsl_model_default_params();
    mp.progress = false;
    tsl_error err;
    tsl_model *m = tsl_model_load(path, &mp, &err);
    if (!m) fprintf(stderr, "load %s: %s\n", path, err.message);
    return m;
}

/* max |a - b| / max |b|; infinite where either is missing (the logits of
 * a decode that failed) */
static inline double rel_diff(const float *a, const float *b, int n) {
    if (!a || !b) return INFINITY;
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

/* resident memory of this process in bytes, -1 when unknown */
static inline long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atoll(line + 6);
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

#endif /* TSL_TEST_LLM_TEST_H */
