/*
 * cli.h - helpers every command shares: a monotonic clock, JSON strings for
 * --json output (written by hand: output only, no parsing), and the L3 size
 * the benchmarks size their data by. Static inline: each command stays one
 * self-contained file.
 */
#ifndef TSL_CLI_H
#define TSL_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* The L3 this machine reports for cpu0: sysfs first (a VM's sysfs says what
 * the guest gets; the CPUID figure that sysconf reads can be the whole host
 * socket's), then sysconf, then 32 MiB. */
static inline size_t cli_l3_bytes(void) {
    long v = -1;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f) {
        char buf[32] = {0};
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            long k = strtol(buf, &end, 10);
            if (k > 0) v = *end == 'M' ? k << 20 : *end == 'K' ? k << 10 : k;
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (v <= 0) v = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return v > 0 ? (size_t)v : (size_t)32 << 20;
}

#endif /* TSL_CLI_H */
