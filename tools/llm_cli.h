/*
 * llm_cli.h - small helpers shared by the model commands (run, eval,
 * gen-model, bench model): strict number parsing, the --backend choice,
 * printing an error record, JSON strings. Static inline so each command
 * stays one self-contained file.
 */
#ifndef TSL_LLM_CLI_H
#define TSL_LLM_CLI_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensile/backend.h"
#include "tensile/model.h"

static inline double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The whole of s as an integer in [lo, hi]. */
static inline bool cli_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static inline bool cli_u64(const char *s, unsigned long long *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static inline bool cli_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* Make the backend --backend names. Returns NULL after printing why (and
 * sets *code to the exit code: 1 for a backend that cannot be had, 2 for a
 * name that is not one). "auto" is the CPU until a GPU backend is built. */
static inline tsl_backend *cli_backend(const char *cmd, const char *name, int threads, int *code) {
    if (!strcmp(name, "vulkan")) {
        fprintf(stderr, "tensile %s: vulkan backend not built\n", cmd);
        *code = 1;
        return NULL;
    }
    if (strcmp(name, "cpu") != 0 && strcmp(name, "auto") != 0) {
        fprintf(stderr, "tensile %s: unknown backend '%s' (cpu, vulkan, auto)\n", cmd, name);
        *code = 2;
        return NULL;
    }
    tsl_error err;
    tsl_backend *be = tsl_backend_cpu_new(threads, &err);
    if (!be) {
        char line[768];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "tensile %s: %s\n", cmd, line);
        *code = 1;
    }
    return be;
}

/* The error record's one line, prefixed with the command. */
static inline void cli_error(const char *cmd, const tsl_error *e) {
    char line[1024];
    tsl_error_format(e, line, sizeof line);
    fprintf(stderr, "tensile %s: %s\n", cmd, line);
}

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0. */
static inline size_t cli_utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 2 && c < 0xC2) return 0; /* overlong */
    if (len == 3) {
        unsigned cp = ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    }
    if (len == 4) {
        unsigned cp = ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (cp < 0x10000 || cp > 0x10FFFF) return 0;
    }
    return len;
}

/* s (n bytes) as a JSON string; bytes that are not valid UTF-8 become U+FFFD. */
static inline void cli_json_str(FILE *f, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        if (c < 0x80) {
            if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
            else if (c == '\n') fputs("\\n", f);
            else if (c == '\r') fputs("\\r", f);
            else if (c == '\t') fputs("\\t", f);
            else if (c < 0x20 || c == 0x7F) fprintf(f, "\\u%04x", c);
            else fputc((int)c, f);
            i++;
            continue;
        }
        size_t len = cli_utf8_len(u + i, n - i);
        if (len == 0) {
            fputs("\xEF\xBF\xBD", f);
            i++;
        } else {
            fwrite(u + i, 1, len, f);
            i += len;
        }
    }
    fputc('"', f);
}

#endif
