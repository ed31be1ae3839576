/*
 * log.c - the library's one logger.
 *
 * Lines go to a user callback or, by default, to stderr prefixed "tensile: ".
 * The default threshold is WARN, overridden once by the TSL_LOG environment
 * variable (debug, info, warn, error, off) read on first use; a callback
 * gets every level and filters as it likes, since a caller that installs one
 * usually wants to see what the library says.
 *
 * This is the one piece of global mutable state the project allows. A mutex
 * guards the (callback, user) pair so a reader never sees one without the
 * other; it is released before the line is emitted so a callback may itself
 * log (or call tsl_log_set) without deadlocking. Each line is formatted once
 * into a stack buffer (long lines are truncated, not allocated) and written
 * with a single fprintf, which stdio locks, so lines from threads do not
 * interleave.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

#include "core/core.h"

#define LOG_LINE_MAX 1024
#define LOG_LEVEL_OFF (TSL_LOG_ERROR + 1)

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static tsl_log_fn log_fn;
static void *log_user;
static int log_threshold = TSL_LOG_WARN;

static void log_read_env(void) {
    const char *v = getenv("TSL_LOG");
    if (!v || !*v) return;
    if (strcasecmp(v, "debug") == 0) log_threshold = TSL_LOG_DEBUG;
    else if (strcasecmp(v, "info") == 0) log_threshold = TSL_LOG_INFO;
    else if (strcasecmp(v, "warn") == 0 || strcasecmp(v, "warning") == 0) log_threshold = TSL_LOG_WARN;
    else if (strcasecmp(v, "error") == 0) log_threshold = TSL_LOG_ERROR;
    else if (strcasecmp(v, "off") == 0 || strcasecmp(v, "none") == 0) log_threshold = LOG_LEVEL_OFF;
}

void tsl_log_set(tsl_log_fn fn, void *user) {
    pthread_mutex_lock(&log_mutex);
    log_fn = fn;
    log_user = fn ? user : NULL;
    pthread_mutex_unlock(&log_mutex);
}

void tsl_log(tsl_log_level level, const char *fmt, ...) {
    if (!fmt) return;
    pthread_once(&log_once, log_read_env);
    pthread_mutex_lock(&log_mutex);
    tsl_log_fn fn = log_fn;
    void *user = log_user;
    pthread_mutex_unlock(&log_mutex);
    if (!fn && (int)level < log_threshold) return;
    char line[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (fn)
        fn(level, line, user);
    else
        fprintf(stderr, "tensile: %s\n", line);
}

uint64_t core_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
