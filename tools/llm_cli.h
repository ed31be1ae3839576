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

#include "cli.h"
#include "tensile/backend.h"
#include "tensile/model.h"


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



#endif
