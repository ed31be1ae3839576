/*
 * test.h - the tiny test harness every C test uses.
 *
 *   static void test_something(void) { CHECK(x == 1); CHECK_NEAR(a, b, 1e-6); }
 *   int main(void) { RUN(test_something); return test_summary(); }
 *
 * A failed check prints file:line and the expression and marks the current
 * test failed; the test goes on so one run shows every failure. test_summary
 * prints "N passed, N failed" and returns the exit code.
 */
#ifndef TSL_TEST_H
#define TSL_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_n_passed, test_n_failed, test_cur_failed;
static const char *test_cur_name = "";

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: %s: CHECK failed: %s\n", __FILE__, __LINE__, test_cur_name, #cond); \
            test_cur_failed = 1;                                                             \
        }                                                                                    \
    } while (0)

#define CHECKF(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: %s: CHECK failed: %s: ", __FILE__, __LINE__, test_cur_name, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            test_cur_failed = 1;                                                             \
        }                                                                                    \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                \
    do {                                                                                     \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                       \
        if (!(fabs(a_ - b_) <= t_)) {                                                        \
            fprintf(stderr, "%s:%d: %s: CHECK_NEAR failed: %s = %.9g, %s = %.9g, tol %.3g\n", \
                    __FILE__, __LINE__, test_cur_name, #a, a_, #b, b_, t_);                  \
            test_cur_failed = 1;                                                             \
        }                                                                                    \
    } while (0)

#define CHECK_STR_CONTAINS(s, sub)                                                           \
    do {                                                                                     \
        const char *s_ = (s);                                                                \
        if (!s_ || !strstr(s_, (sub))) {                                                     \
            fprintf(stderr, "%s:%d: %s: expected \"%s\" to contain \"%s\"\n", __FILE__, __LINE__, \
                    test_cur_name, s_ ? s_ : "(null)", (sub));                               \
            test_cur_failed = 1;                                                             \
        }                                                                                    \
    } while (0)

/* TSL_TEST_ONLY=name runs only the tests whose names contain it (for working
 * on one; a run with it set says so in its summary) */
#define RUN(fn)                                                                              \
    do {                                                                                     \
        if (getenv("TSL_TEST_ONLY") && !strstr(#fn, getenv("TSL_TEST_ONLY"))) break;       \
        test_cur_name = #fn;                                                                 \
        test_cur_failed = 0;                                                                 \
        fn();                                                                                \
        if (test_cur_failed) {                                                               \
            test_n_failed++;                                                                 \
            fprintf(stderr, "FAIL %s\n", #fn);                                               \
        } else {                                                                             \
            test_n_passed++;                                                                 \
            printf("ok   %s\n", #fn);                                                        \
        }                                                                                    \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed%s\n", test_n_passed, test_n_failed,
           getenv("TSL_TEST_ONLY") ? " (only the tests TSL_TEST_ONLY names)" : "");
    return test_n_failed ? 1 : 0;
}

/* Deterministic PRNG for test data (xorshift64*). */
static inline unsigned long long test_rand_u64(unsigned long long *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}
/* Uniform in [lo, hi). */
static inline float test_rand_f(unsigned long long *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rand_u64(s) >> 40) * (1.0 / 16777216.0));
}

#endif
