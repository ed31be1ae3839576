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

/* A Vulkan device that is a real GPU (discrete or integrated), not a CPU
 * implementation such as Mesa's lavapipe: the first one, or -1. */
static inline int cli_first_gpu(void) {
    int n = tsl_vulkan_device_count();
    for (int i = 0; i < n; i++) {
        tsl_vulkan_device_info info;
        if (tsl_vulkan_device_info_get(i, &info, NULL) != TSL_SUCCESS) continue;
        if (!strcmp(info.type, "discrete") || !strcmp(info.type, "integrated")) return i;
    }
    return -1;
}

/* Make the backend --backend names: "cpu"; "vulkan" (device `device`, or
 * with -1 the one TSL_VULKAN_DEVICE names, else the first GPU, else any
 * Vulkan device, lavapipe included); "auto" (the first Vulkan GPU when there
 * is one, or the device asked for, else the CPU). Returns NULL after
 * printing why (and sets *code to the exit code: 1 for a backend that
 * cannot be had, 2 for a name that is not one). */
static inline tsl_backend *cli_backend_dev(const char *cmd, const char *name, int device, int threads, int *code) {
    const bool vk = !strcmp(name, "vulkan"), aut = !strcmp(name, "auto");
    if (!vk && !aut && strcmp(name, "cpu") != 0) {
        fprintf(stderr, "tensile %s: unknown backend '%s' (cpu, vulkan, auto)\n", cmd, name);
        *code = 2;
        return NULL;
    }
    tsl_error err;
    tsl_error_clear(&err);
    tsl_backend *be = NULL;
    int idx = vk || device >= 0 ? device : aut ? cli_first_gpu() : -2;
    if (vk || idx >= 0) {
        if (tsl_vulkan_device_count() == 0) {
            fprintf(stderr, "tensile %s: no Vulkan device (the library was built without Vulkan, or no driver "
                            "or device is present)\n",
                    cmd);
            *code = 1;
            return NULL;
        }
        be = tsl_backend_vulkan_new(idx, &err);
    } else {
        be = tsl_backend_cpu_new(threads, &err);
    }
    if (!be) {
        char line[768];
        tsl_error_format(&err, line, sizeof line);
        fprintf(stderr, "tensile %s: %s\n", cmd, line);
        *code = 1;
    }
    return be;
}

static inline tsl_backend *cli_backend(const char *cmd, const char *name, int threads, int *code) {
    return cli_backend_dev(cmd, name, -1, threads, code);
}

/* The CPU threads a context on be uses: be's own pool, or (on a device) the
 * fallback's, which has `threads` (<= 0: online cores). */
static inline int cli_threads(const tsl_backend *be, int threads) {
    if (tsl_backend_cpu_threads(be) > 0) return tsl_backend_cpu_threads(be);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return threads > 0 ? threads : n > 0 ? (int)n : 1;
}

/* The error record's one line, prefixed with the command. */
static inline void cli_error(const char *cmd, const tsl_error *e) {
    char line[1024];
    tsl_error_format(e, line, sizeof line);
    fprintf(stderr, "tensile %s: %s\n", cmd, line);
}



#endif
