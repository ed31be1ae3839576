/*
 * error.c - statuses and error records (FAULTS.md sections 1-3).
 *
 * A record is plain fixed-size data owned by the caller, so it can be copied,
 * kept, and sent across a process boundary as bytes. One formatting call makes
 * the line that logs, HTTP errors and the CLI all print.
 */
#include <stdarg.h>
#include <stdio.h>

#include "core/core.h"

const char *tsl_status_str(tsl_status s) {
    switch (s) {
    case TSL_SUCCESS: return "SUCCESS";
    case TSL_ABORTED: return "ABORTED";
    case TSL_RETRY: return "RETRY";
    case TSL_FAILED: return "FAILED";
    case TSL_ALLOC_FAILED: return "ALLOC_FAILED";
    case TSL_DEVICE_LOST: return "DEVICE_LOST";
    }
    return "UNKNOWN";
}

void tsl_error_clear(tsl_error *e) {
    if (!e) return;
    memset(e, 0, sizeof *e);
    e->status = TSL_SUCCESS;
    e->node = -1;
    e->split = -1;
}

static void copy_str(char *dst, size_t n, const char *src) {
    if (!src) src = "";
    snprintf(dst, n, "%s", src);
}

void error_default_hint(tsl_error *e) {
    const char *h = "";
    switch (e->status) {
    case TSL_SUCCESS: h = ""; break;
    case TSL_ABORTED: h = "run again when wanted"; break;
    case TSL_RETRY: h = "retry later or on another backend"; break;
    case TSL_FAILED: h = "fix the graph or its input"; break;
    case TSL_ALLOC_FAILED: h = "free memory or shrink the batch, then run again"; break;
    case TSL_DEVICE_LOST: h = "recover the backend, then run again"; break;
    }
    copy_str(e->hint, sizeof e->hint, h);
}

tsl_status error_set(tsl_error *e, tsl_status s, const char *backend, const char *device, int node,
                     const tsl_tensor *t, const char *kernel, const char *fmt, ...) {
    if (!e) return s;
    tsl_error_clear(e);
    e->status = s;
    copy_str(e->backend, sizeof e->backend, backend);
    copy_str(e->device, sizeof e->device, device);
    e->node = node;
    if (t) {
        copy_str(e->op, sizeof e->op, tsl_op_name(t->op));
        copy_str(e->tensor, sizeof e->tensor, t->name);
    }
    copy_str(e->kernel, sizeof e->kernel, kernel);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof e->message, fmt, ap);
        va_end(ap);
    }
    error_default_hint(e);
    return s;
}

size_t tsl_error_format(const tsl_error *e, char *buf, size_t n) {
    char tmp[1024];
    size_t len = 0;
#define PUT(...)                                                                       \
    do {                                                                               \
        int w_ = snprintf(tmp + len, len < sizeof tmp ? sizeof tmp - len : 0, __VA_ARGS__); \
        if (w_ > 0) len += (size_t)w_;                                                 \
        if (len >= sizeof tmp) len = sizeof tmp - 1;                                   \
    } while (0)
    if (!e) {
        PUT("(no error record)");
    } else {
        PUT("%s", e->backend[0] ? e->backend : "tensile");
        if (e->device[0]) PUT(" (%s)", e->device);
        PUT(": %s", tsl_status_str(e->status));
        if (e->split >= 0) PUT(" in split %d", (int)e->split);
        if (e->node >= 0) PUT(" at node %d", (int)e->node);
        if (e->op[0]) PUT(" %s", e->op);
        if (e->tensor[0]) PUT(" '%s'", e->tensor);
        PUT(":");
        if (e->kernel[0]) PUT(" kernel %s", e->kernel);
        if (e->message[0]) PUT(" %s", e->message);
        if (e->driver_domain[0] || e->driver_text[0]) {
            /* a driver code is printed only when a driver domain gave one */
            if (e->driver_domain[0] && (e->driver_code != 0 || strcmp(e->driver_domain, "cpu") != 0)) {
                PUT(" (%s %lld", e->driver_domain, (long long)e->driver_code);
                if (e->driver_text[0]) PUT(": %s", e->driver_text);
            } else {
                PUT(" (%s", e->driver_text[0] ? e->driver_text : e->driver_domain);
            }
            PUT(")");
        }
        if (e->hint[0]) PUT(" - %s", e->hint);
    }
#undef PUT
    if (buf && n) snprintf(buf, n, "%s", tmp);
    return len;
}
