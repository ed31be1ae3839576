/*
 * hang_wild_write.c - the wild-write hang run (FAULTS.md section 4).
 *
 * A kernel that writes through a wild device address hangs an NVIDIA GPU:
 * its fence never signals, the driver logs Xid 109, and vkDeviceWaitIdle
 * never returns. This program checks, step by step and with times, that the
 * Vulkan backend turns that into a precise, bounded failure and comes back:
 *
 *   1  two backends (two contexts on one device), each with its own graph in
 *      persistent buffers, compute and match the CPU reference; the GPU
 *      time of a compute is there (where the queue has timestamps) and
 *      within its wall time; 40 MiB and odd-sized parts go up and down
 *      through tensor set/get byte-exact (the staging pipeline where the
 *      device stages; TSL_VULKAN_STAGING=1 forces it on lavapipe);
 *   2  sqr_f32's SPIR-V is replaced (vk_test_set_kernel) by wild_write.comp,
 *      which writes through the address held in its input;
 *   3  with the watchdog at W ms, that compute returns DEVICE_LOST with
 *      "GPU hang: no progress in N s" within W plus a margin;
 *   4  every later compute, on this backend and on the other one, returns
 *      DEVICE_LOST with that cause at once (under 10 ms);
 *   5  tsl_backend_recover returns SUCCESS without waiting for the hung
 *      device (a new VkDevice; the old one is never waited on);
 *   6  the real sqr_f32 is back; every graph computes again and matches the
 *      CPU reference and its own result from before the hang, bit for bit;
 *   7  everything is freed in bounded time.
 *
 * One line per step with its time; exit 0 only if every step held. The whole
 * run, the process's exit included, is bounded by an alarm: a wait without
 * bound anywhere (a vkDeviceWaitIdle on the hung device, a driver's exit
 * handler) ends it with exit status 3 and a line saying so, not a hang.
 *
 * --dry-run runs the same steps with spin.comp, a kernel that runs several
 * times the watchdog and then finishes, in place of the wild write. On
 * lavapipe (a CPU device) a wild write is a SIGSEGV of this process, a case
 * for isolated worker processes rather than for this program; the dry run
 * is its ctest test and runs on any device.
 *
 * --build-only has the driver build the fault kernel (wild_write.comp, or
 * spin.comp with --dry-run) and dispatches nothing: a check of its SPIR-V and
 * of the device features it needs that is safe on any device.
 *
 * Options: --dry-run, --build-only, --watchdog-ms N (default 2000; 500
 * dry), --address HEX (default 0x7f0000000000), --recover-limit-ms N
 * (default 8000: on the H200 the driver takes 4.8-5.0 s to make a new device
 * after the hang, bench/RESULTS.md runs 58-73), --deadline-s N (the alarm;
 * default 180).
 * TSL_VULKAN_DEVICE picks the device.
 */
#include <stdio.h>
#include <stdlib.h>

#ifndef TSL_HAVE_VULKAN
#include "vulkan/vk_no_vulkan.h"
#else

#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "spin_spv.h"
#include "tensile/backend.h"
#include "vulkan/vk_harness.h"
#include "vulkan/vk_test.h"
#include "wild_write_spv.h"

/* lavapipe keeps allocations of a device that never finished its work
 * (the dry run leaves one, by design: it is never waited on) */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\nleak:vk_device_create\n"; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int g_failed, g_steps;

/* One line per check: the step, what was seen, and whether it held. */
static bool step(bool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool step(bool ok, const char *name, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g_steps++;
    if (!ok) g_failed++;
    printf("%-4s %-10s %s\n", ok ? "ok" : "FAIL", name, msg);
    fflush(stdout);
    return ok;
}

static void record_text(const tsl_error *e, char *buf, size_t n) { tsl_error_format(e, buf, n); }

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL deadline   the run (exit included) did not finish in time: something waited "
                              "without bound\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

/* ---- graphs -------------------------------------------------------------------- */

/* out = scale(silu(mul_mat(w, x) + bias)) in persistent device memory, and
 * its inputs kept on the host for the CPU reference. */
typedef struct job {
    tsl_context *ctx;
    tsl_buffer *buf;
    tsl_graph *g;
    tsl_tensor *w, *x, *bias, *out;
    float *hw, *hx, *hb;
    int64_t k, m, n;
} job;

static bool job_build(job *j, tsl_backend *be, int64_t k, int64_t m, int64_t n, unsigned seed, char *why, size_t wn) {
    memset(j, 0, sizeof *j);
    j->k = k, j->m = m, j->n = n;
    j->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    if (!j->ctx) return snprintf(why, wn, "no context") < 0;
    j->w = tsl_new_tensor_2d(j->ctx, TSL_TYPE_F32, k, m);
    j->x = tsl_new_tensor_2d(j->ctx, TSL_TYPE_F32, k, n);
    j->bias = tsl_new_tensor_1d(j->ctx, TSL_TYPE_F32, m);
    tsl_tensor *y = tsl_silu(j->ctx, tsl_add(j->ctx, tsl_mul_mat(j->ctx, j->w, j->x), j->bias));
    j->out = tsl_scale(j->ctx, y, 0.5f);
    j->g = j->out ? tsl_graph_build(j->ctx, &j->out, 1) : NULL;
    if (!j->g) {
        snprintf(why, wn, "graph: %s", tsl_ctx_error(j->ctx) ? tsl_ctx_error(j->ctx) : "?");
        return false;
    }
    tsl_error err;
    j->buf = tsl_buffer_alloc_ctx(be, j->ctx, &err);
    if (!j->buf) {
        record_text(&err, why, wn);
        return false;
    }
    j->hw = malloc((size_t)(k * m) * sizeof(float));
    j->hx = malloc((size_t)(k * n) * sizeof(float));
    j->hb = malloc((size_t)m * sizeof(float));
    if (!j->hw || !j->hx || !j->hb) return snprintf(why, wn, "out of host memory") < 0;
    uint64_t s = 0x9E3779B97F4A7C15ULL ^ seed;
    float *all[3] = {j->hw, j->hx, j->hb};
    size_t cnt[3] = {(size_t)(k * m), (size_t)(k * n), (size_t)m};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < cnt[a]; i++) {
            s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
            all[a][i] = (float)((s * 2685821657736338717ULL) >> 40) / 16777216.0f - 0.5f;
        }
    tsl_tensor *t[3] = {j->w, j->x, j->bias};
    for (int a = 0; a < 3; a++)
        if (tsl_tensor_set(t[a], all[a], 0, cnt[a] * sizeof(float), &err) != TSL_SUCCESS) {
            record_text(&err, why, wn);
            return false;
        }
    /* weights and inputs come back after a loss (from the host copy kept
     * for a persistent buffer) */
    tsl_buffer_set_persistent(j->buf, true);
    return true;
}

static void job_free(job *j) {
    tsl_buffer_free(j->buf);
    tsl_ctx_free(j->ctx);
    free(j->hw);
    free(j->hx);
    free(j->hb);
    memset(j, 0, sizeof *j);
}

/* Compute j on be; the result into out (m * n floats). */
static tsl_status job_run(job *j, tsl_backend *be, float *out, double *secs, tsl_error *err) {
    double t0 = now_s();
    tsl_status s = tsl_backend_graph_compute(be, j->g, err);
    *secs = now_s() - t0;
    if (s != TSL_SUCCESS) return s;
    return tsl_tensor_get(j->out, out, 0, (size_t)(j->m * j->n) * sizeof(float), err);
}

/* The same graph on the CPU backend, from the host copies. */
static bool job_reference(job *j, tsl_backend *cpu, float *out, char *why, size_t wn) {
    job c;
    memset(&c, 0, sizeof c);
    c.ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *w = tsl_new_tensor_2d(c.ctx, TSL_TYPE_F32, j->k, j->m);
    tsl_tensor *x = tsl_new_tensor_2d(c.ctx, TSL_TYPE_F32, j->k, j->n);
    tsl_tensor *b = tsl_new_tensor_1d(c.ctx, TSL_TYPE_F32, j->m);
    tsl_tensor *o = tsl_scale(c.ctx, tsl_silu(c.ctx, tsl_add(c.ctx, tsl_mul_mat(c.ctx, w, x), b)), 0.5f);
    tsl_graph *g = o ? tsl_graph_build(c.ctx, &o, 1) : NULL;
    tsl_error err;
    tsl_buffer *buf = g ? tsl_buffer_alloc_ctx(cpu, c.ctx, &err) : NULL;
    bool ok = buf && tsl_tensor_set(w, j->hw, 0, tsl_nbytes(w), &err) == TSL_SUCCESS &&
              tsl_tensor_set(x, j->hx, 0, tsl_nbytes(x), &err) == TSL_SUCCESS &&
              tsl_tensor_set(b, j->hb, 0, tsl_nbytes(b), &err) == TSL_SUCCESS &&
              tsl_backend_graph_compute(cpu, g, &err) == TSL_SUCCESS &&
              tsl_tensor_get(o, out, 0, tsl_nbytes(o), &err) == TSL_SUCCESS;
    if (!ok) {
        if (g) record_text(&err, why, wn);
        else snprintf(why, wn, "reference graph: %s", tsl_ctx_error(c.ctx) ? tsl_ctx_error(c.ctx) : "?");
    }
    tsl_buffer_free(buf);
    tsl_ctx_free(c.ctx);
    return ok;
}

/* Largest difference to the reference, relative to 1 + |reference|. */
static double max_rel_diff(const float *a, const float *ref, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]) / (1.0 + fabs((double)ref[i]));
        if (!(d <= m)) m = d; /* NaN counts as a difference */
    }
    return m;
}

/* ---- copies --------------------------------------------------------------------- */

/* Host <-> device copies, as model loading and every result read use them:
 * 40 MiB up and back (several staging chunks, split over helper threads
 * where the device stages), then a part at an odd offset and of an odd
 * size each way; every byte compared with a host model of the buffer. */
static bool copies_check(tsl_backend *be) {
    const size_t n = ((size_t)40 << 20) + 4;
    tsl_error err;
    char why[512] = "";
    tsl_vulkan_stats s0, s1;
    tsl_backend_vulkan_stats(be, &s0);
    tsl_context *ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 16, .no_alloc = true});
    tsl_tensor *t = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, (int64_t)(n / 4));
    tsl_buffer *buf = tsl_buffer_alloc(be, n, &err);
    unsigned char *model = malloc(n), *back = malloc(n), *part = malloc((size_t)3 << 20);
    bool ok = buf && model && back && part && tsl_buffer_place(buf, t, 0, &err) == TSL_SUCCESS;
    double up = 0, down = 0;
    if (ok) {
        uint64_t x = 0x243F6A8885A308D3ULL;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            model[i] = (unsigned char)x;
        }
        for (size_t i = 0; i < ((size_t)3 << 20); i++) part[i] = (unsigned char)(i * 31u + 7u);
        double t0 = now_s();
        ok = tsl_tensor_set(t, model, 0, n, &err) == TSL_SUCCESS;
        up = now_s() - t0;
        t0 = now_s();
        ok = ok && tsl_tensor_get(t, back, 0, n, &err) == TSL_SUCCESS;
        down = now_s() - t0;
        if (ok && memcmp(back, model, n) != 0) ok = !snprintf(why, sizeof why, "the 40 MiB came back different");
        /* a part at an odd place, up; the whole buffer back */
        const size_t off = ((size_t)7 << 20) + 5, len = ((size_t)3 << 20) - 3;
        ok = ok && tsl_tensor_set(t, part, off, len, &err) == TSL_SUCCESS;
        memcpy(model + off, part, len);
        ok = ok && tsl_tensor_get(t, back, 0, n, &err) == TSL_SUCCESS;
        if (ok && memcmp(back, model, n) != 0) ok = !snprintf(why, sizeof why, "a write at an odd offset went wrong");
        /* and a part at another odd place, down */
        const size_t off2 = ((size_t)25 << 20) + 3, len2 = ((size_t)2 << 20) + 1;
        memset(back, 0, len2);
        ok = ok && tsl_tensor_get(t, back, off2, len2, &err) == TSL_SUCCESS;
        if (ok && memcmp(back, model + off2, len2) != 0) ok = !snprintf(why, sizeof why, "a read at an odd offset went wrong");
    }
    if (!ok && !why[0]) record_text(&err, why, sizeof why);
    tsl_backend_vulkan_stats(be, &s1);
    uint64_t counted = s1.upload_bytes - s0.upload_bytes;
    size_t written = n + ((size_t)3 << 20) - 3;
    bool counts = counted == written;
    step(ok && counts, "copies",
         "40 MiB up in %.1f ms (%.1f GB/s) and back in %.1f ms (%.1f GB/s), %llu staging copies; odd offsets and "
         "sizes both ways; every byte right; uploads counted %s%s%s",
         up * 1e3, up > 0 ? (double)n / up / 1e9 : 0, down * 1e3, down > 0 ? (double)n / down / 1e9 : 0,
         (unsigned long long)(s1.transfers - s0.transfers), counts ? "exactly" : "WRONG", why[0] ? ": " : "", why);
    tsl_buffer_free(buf);
    tsl_ctx_free(ctx);
    free(model);
    free(back);
    free(part);
    return ok && counts;
}

typedef struct opts {
    bool dry, build_only;
    int watchdog_ms;
    uint64_t address;
    int recover_limit_ms;
    int deadline_s;
} opts;

/* ---- --build-only ---------------------------------------------------------------- */

typedef struct built {
    bool seen;
    tsl_status status;
    char text[512];
} built;

static void on_kernel(const char *name, tsl_status status, const tsl_error *e, void *user) {
    built *k = user;
    if (strcmp(name, "sqr_f32") != 0) return;
    k->seen = true;
    k->status = status;
    if (e) record_text(e, k->text, sizeof k->text);
}

/* The fault kernel built by the driver and nothing dispatched: a check of
 * the SPIR-V and of the device features it needs that is safe anywhere
 * (lavapipe included, where dispatching the wild write would crash). */
static int build_only(tsl_backend *a, tsl_backend *b, tsl_backend *cpu, const opts *o) {
    tsl_error err;
    built k = {0};
    bool set = o->dry ? vk_test_set_kernel(a, "sqr_f32", spin_spv, sizeof spin_spv, NULL, &err) == TSL_SUCCESS
                      : vk_test_set_kernel(a, "sqr_f32", wild_write_spv, sizeof wild_write_spv, NULL, &err) ==
                            TSL_SUCCESS;
    double t0 = now_s();
    int failed = set ? tsl_backend_build_kernels(a, on_kernel, &k) : -1;
    double tb = now_s() - t0;
    step(set && k.seen && k.status == TSL_SUCCESS, "build",
         "sqr_f32 as %s: %s by the driver (%d kernels failed in all, %.0f ms)%s%s", o->dry ? "spin.comp" : "wild_write.comp",
         !k.seen ? "NOT BUILT (the device lacks a feature it needs)" : k.status == TSL_SUCCESS ? "built" : "REFUSED",
         failed, tb * 1e3, k.text[0] ? ": " : "", k.text);
    vk_test_set_kernel(a, "sqr_f32", NULL, 0, NULL, &err);
    tsl_backend_free(b);
    tsl_backend_free(a);
    tsl_backend_free(cpu);
    return g_failed ? 1 : 0;
}

/* ---- the run ------------------------------------------------------------------- */


static int usage(void) {
    fprintf(stderr, "usage: vulkan_hang_wild_write [--dry-run] [--build-only] [--watchdog-ms N] [--address HEX] "
                    "[--recover-limit-ms N] [--deadline-s N]\n");
    return 2;
}

int main(int argc, char **argv) {
    opts o = {.dry = false, .watchdog_ms = 0, .address = 0x7f0000000000ull, .recover_limit_ms = 8000,
              .deadline_s = 180};
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--dry-run")) {
            o.dry = true;
        } else if (!strcmp(argv[i], "--build-only")) {
            o.build_only = true;
        } else if (!strcmp(argv[i], "--watchdog-ms") && i + 1 < argc) {
            o.watchdog_ms = (int)strtol(argv[++i], &end, 10);
            if (*end || o.watchdog_ms < 50 || o.watchdog_ms > 600000) return usage();
        } else if (!strcmp(argv[i], "--address") && i + 1 < argc) {
            o.address = strtoull(argv[++i], &end, 16);
            if (*end) return usage();
        } else if (!strcmp(argv[i], "--recover-limit-ms") && i + 1 < argc) {
            o.recover_limit_ms = (int)strtol(argv[++i], &end, 10);
            if (*end || o.recover_limit_ms < 1) return usage();
        } else if (!strcmp(argv[i], "--deadline-s") && i + 1 < argc) {
            o.deadline_s = (int)strtol(argv[++i], &end, 10);
            if (*end || o.deadline_s < 1) return usage();
        } else {
            return usage();
        }
    }
    if (!o.watchdog_ms) o.watchdog_ms = o.dry ? 500 : 2000;
    const double W = o.watchdog_ms / 1000.0;
    signal(SIGALRM, on_alarm);
    alarm((unsigned)o.deadline_s);
    setvbuf(stdout, NULL, _IOLBF, 0);
    double t_start = now_s();

    if (vkh_devices() <= 0) { /* lavapipe where no driver is named: the dry run runs anywhere */
        printf("skipped: no Vulkan device\n");
        return getenv("TSL_REQUIRE_VULKAN") ? 1 : 0;
    }
    tsl_error err;
    char rec[768], why[512] = "";
    tsl_backend *cpu = tsl_backend_cpu_new(1, &err);
    tsl_backend *a = tsl_backend_vulkan_new(-1, &err);
    tsl_vulkan_device_info info;
    if (!cpu || !a || tsl_backend_vulkan_info(a, &info, &err) != TSL_SUCCESS) {
        record_text(&err, rec, sizeof rec);
        printf("FAIL setup      cannot make the backends: %s\n", rec);
        return 1;
    }
    tsl_backend *b = tsl_backend_vulkan_new(info.index, &err);
    printf("device: %s %s (%s; %s), bufferDeviceAddress %s; %s, watchdog %d ms\n", tsl_backend_name(a), info.name,
           info.type, info.driver, info.buffer_device_address ? "yes" : "no",
           o.dry ? "dry run (a long, finite kernel in place of the wild write)" : "wild write", o.watchdog_ms);
    if (!b) {
        record_text(&err, rec, sizeof rec);
        printf("FAIL setup      cannot make the second backend: %s\n", rec);
        return 1;
    }
    if (o.build_only) return build_only(a, b, cpu, &o);
    if (!o.dry && !strcmp(info.type, "cpu")) {
        printf("FAIL setup      %s is a CPU device: the wild write would be a SIGSEGV of this process, not a GPU "
               "hang; run --dry-run here\n",
               info.name);
        return 1;
    }
    if (!o.dry && !info.buffer_device_address) {
        printf("FAIL setup      the device has no bufferDeviceAddress: the wild-write kernel cannot run\n");
        return 1;
    }
    tsl_backend_vulkan_set_watchdog_ms(a, o.watchdog_ms);
    tsl_backend_vulkan_set_watchdog_ms(b, o.watchdog_ms);

    /* 1: both contexts compute, right */
    job ja, jb;
    bool okb = job_build(&ja, a, 256, 96, 3, 1, why, sizeof why) && job_build(&jb, b, 128, 64, 5, 2, why, sizeof why);
    if (!step(okb, "setup", "two graphs in persistent buffers on %s and a second backend %s%s%s",
              tsl_backend_name(a), tsl_backend_name(b), okb ? "" : ": ", why))
        return 1;
    size_t na = (size_t)(ja.m * ja.n), nb = (size_t)(jb.m * jb.n);
    float *ref_a = calloc(na, 4), *ref_b = calloc(nb, 4), *pre_a = calloc(na, 4), *pre_b = calloc(nb, 4);
    float *got_a = calloc(na, 4), *got_b = calloc(nb, 4);
    if (!ref_a || !ref_b || !pre_a || !pre_b || !got_a || !got_b) return 1;
    bool refs = job_reference(&ja, cpu, ref_a, why, sizeof why) && job_reference(&jb, cpu, ref_b, why, sizeof why);
    double ta = 0, tb = 0;
    tsl_status sa = job_run(&ja, a, pre_a, &ta, &err), sb = sa == TSL_SUCCESS ? job_run(&jb, b, pre_b, &tb, &err) : sa;
    if (sa != TSL_SUCCESS || sb != TSL_SUCCESS) record_text(&err, why, sizeof why);
    double da = sa == TSL_SUCCESS ? max_rel_diff(pre_a, ref_a, na) : INFINITY;
    double db = sb == TSL_SUCCESS ? max_rel_diff(pre_b, ref_b, nb) : INFINITY;
    if (!step(refs && da < 1e-4 && db < 1e-4, "clean",
              "both backends compute their graphs (%.1f ms, %.1f ms, first use: kernel builds); largest difference "
              "to the CPU %.2g, %.2g%s%s",
              ta * 1e3, tb * 1e3, da, db, why[0] ? ": " : "", why))
        return 1;
    /* the GPU time of a compute: there where the queue has timestamps, and
     * inside the compute's wall time */
    tsl_vulkan_stats vs;
    double tw = 0;
    sb = job_run(&jb, b, got_b, &tw, &err);
    bool timed = sb == TSL_SUCCESS && tsl_backend_vulkan_stats(b, &vs) == TSL_SUCCESS;
    step(timed && (!vs.gpu_timing || (vs.last_gpu_us > 0 && vs.last_gpu_us <= tw * 1e6 && vs.gpu_ms > 0)), "gputime",
         "%s: %.1f us of GPU time in a compute of %.1f us wall (%.3f ms GPU time in all)",
         timed && vs.gpu_timing ? "timestamps" : "no timestamps on this queue", timed ? vs.last_gpu_us : 0,
         tw * 1e6, timed ? vs.gpu_ms : 0);
    if (!copies_check(a)) return 1;

    /* 2: the faulty kernel in place of sqr_f32, and a graph that uses it */
    tsl_context *hctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    tsl_tensor *hin = NULL, *hout = NULL;
    tsl_graph *hg = NULL;
    tsl_buffer *hbuf = NULL;
    int64_t hn = 256 * 64; /* sqr_f32's grid: one workgroup per 256 elements */
    double spin_total = 0;
    if (o.dry) {
        /* time a few workgroups of the spin, then size it to 4 watchdogs */
        const float spins = 60000.0f;
        double per = 0;
        for (int pass = 0; pass < 3; pass++) {
            if (pass == 2) hn = (int64_t)(4.0 * W / (per > 1e-7 ? per : 1e-7)) * 256;
            if (hn > ((int64_t)64 << 20)) hn = (int64_t)64 << 20;
            tsl_buffer_free(hbuf);
            tsl_ctx_free(hctx);
            hctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
            hin = tsl_new_tensor_1d(hctx, TSL_TYPE_F32, hn);
            hout = tsl_sqr(hctx, hin);
            hg = tsl_graph_build(hctx, &hout, 1);
            hbuf = hg ? tsl_buffer_alloc_ctx(a, hctx, &err) : NULL;
            if (!hbuf || tsl_tensor_set(hin, &spins, 0, sizeof spins, &err) != TSL_SUCCESS) break;
            if (pass == 0 &&
                vk_test_set_kernel(a, "sqr_f32", spin_spv, sizeof spin_spv, NULL, &err) != TSL_SUCCESS)
                break;
            if (pass == 2) break;
            double t0 = now_s();
            if (tsl_backend_graph_compute(a, hg, &err) != TSL_SUCCESS) {
                hbuf = (tsl_buffer_free(hbuf), NULL);
                break;
            }
            per = (now_s() - t0) / (double)(hn / 256);
        }
        spin_total = per * (double)(hn / 256);
        if (!hbuf) record_text(&err, why, sizeof why);
        if (!step(hbuf != NULL, "fault", "sqr_f32 is now spin.comp, %lld workgroups (about %.1f s of work)%s%s",
                  (long long)(hn / 256), spin_total, hbuf ? "" : ": ", hbuf ? "" : why))
            return 1;
    } else {
        hin = tsl_new_tensor_1d(hctx, TSL_TYPE_F32, hn);
        hout = tsl_sqr(hctx, hin);
        hg = hout ? tsl_graph_build(hctx, &hout, 1) : NULL;
        hbuf = hg ? tsl_buffer_alloc_ctx(a, hctx, &err) : NULL;
        uint32_t words[2] = {(uint32_t)o.address, (uint32_t)(o.address >> 32)};
        bool ok = hbuf && tsl_tensor_set(hin, words, 0, sizeof words, &err) == TSL_SUCCESS &&
                  vk_test_set_kernel(a, "sqr_f32", wild_write_spv, sizeof wild_write_spv, NULL, &err) == TSL_SUCCESS;
        if (!ok) record_text(&err, why, sizeof why);
        if (!step(ok, "fault", "sqr_f32 is now wild_write.comp: %lld writes, 4 KiB apart, from 0x%llx%s%s",
                  (long long)hn / 4, (unsigned long long)o.address, ok ? "" : ": ", ok ? "" : why))
            return 1;
    }

    /* 3: the hang, turned into DEVICE_LOST by the watchdog */
    tsl_error cause;
    double t0 = now_s();
    tsl_status hs = tsl_backend_graph_compute(a, hg, &cause);
    double th = now_s() - t0;
    const double margin = W / 2 > 1.0 ? W / 2 : 1.0;
    record_text(&cause, rec, sizeof rec);
    bool hang = hs == TSL_DEVICE_LOST && strstr(cause.message, "GPU hang: no progress in") != NULL;
    if (hs == TSL_DEVICE_LOST && !hang)
        printf("note       the driver reported the loss itself, not a hang: %s\n", rec);
    step(hs == TSL_DEVICE_LOST && th <= W + margin, "hang",
         "%s after %.3f s (watchdog %.3f s, limit %.3f s%s): %s", tsl_status_str(hs), th, W, W + margin,
         hang ? "; the watchdog's cause" : "", hs == TSL_SUCCESS ? "the kernel finished: no fault" : rec);
    if (hs != TSL_DEVICE_LOST) return 1;

    /* 4: latched for both contexts, answered at once with the cause */
    tsl_error e2;
    t0 = now_s();
    tsl_status s2 = tsl_backend_graph_compute(a, ja.g, &e2);
    double t2 = now_s() - t0;
    step(s2 == TSL_DEVICE_LOST && t2 < 0.010 && strcmp(e2.message, cause.message) == 0, "latched",
         "the same backend: %s in %.3f ms, %s cause", tsl_status_str(s2), t2 * 1e3,
         strcmp(e2.message, cause.message) == 0 ? "the original" : "ANOTHER");
    t0 = now_s();
    s2 = tsl_backend_graph_compute(b, jb.g, &e2);
    t2 = now_s() - t0;
    step(s2 == TSL_DEVICE_LOST && t2 < 0.010 && strcmp(e2.message, cause.message) == 0, "other",
         "the second backend (context) on the device: %s in %.3f ms, %s cause", tsl_status_str(s2), t2 * 1e3,
         strcmp(e2.message, cause.message) == 0 ? "the original" : "ANOTHER");
    float tmp;
    t0 = now_s();
    s2 = tsl_tensor_get(ja.out, &tmp, 0, sizeof tmp, &e2);
    t2 = now_s() - t0;
    step(s2 == TSL_DEVICE_LOST && t2 < 0.010, "copy", "a read from device memory: %s in %.3f ms",
         tsl_status_str(s2), t2 * 1e3);

    /* 5: recovery, without waiting for the hung device */
    t0 = now_s();
    tsl_status rs = tsl_backend_recover(a, &err);
    double tr = now_s() - t0;
    record_text(&err, rec, sizeof rec);
    step(rs == TSL_SUCCESS && tr * 1e3 < o.recover_limit_ms && !tsl_backend_is_lost(a) && !tsl_backend_is_lost(b),
         "recover", "%s in %.1f ms (limit %d ms; tsl_backend_last_recovery_ms %.1f)%s%s", tsl_status_str(rs),
         tr * 1e3, o.recover_limit_ms, tsl_backend_last_recovery_ms(a), rs == TSL_SUCCESS ? "" : ": ",
         rs == TSL_SUCCESS ? "" : rec);
    if (o.dry) printf("           (the spin, left running on the old device, needs about %.1f s in all)\n", spin_total);
    if (rs != TSL_SUCCESS) return 1;

    /* 6: the real kernel back; everything computes right again. The
     * watchdog goes back to its default (scaled to the work): W was this
     * run's setting for the hang, and on a CPU device the new device's work
     * shares its threads with the spin still running on the old one. */
    tsl_backend_vulkan_set_watchdog_ms(a, 0);
    tsl_backend_vulkan_set_watchdog_ms(b, 0);
    why[0] = 0;
    bool restored = vk_test_set_kernel(a, "sqr_f32", NULL, 0, NULL, &err) == TSL_SUCCESS;
    sa = job_run(&ja, a, got_a, &ta, &err);
    if (sa != TSL_SUCCESS) record_text(&err, why, sizeof why);
    sb = job_run(&jb, b, got_b, &tb, &e2);
    if (sb != TSL_SUCCESS) record_text(&e2, why, sizeof why);
    da = sa == TSL_SUCCESS ? max_rel_diff(got_a, ref_a, na) : INFINITY;
    db = sb == TSL_SUCCESS ? max_rel_diff(got_b, ref_b, nb) : INFINITY;
    bool same = sa == TSL_SUCCESS && sb == TSL_SUCCESS && memcmp(got_a, pre_a, na * 4) == 0 &&
                memcmp(got_b, pre_b, nb * 4) == 0;
    step(restored && da < 1e-4 && db < 1e-4 && same, "after",
         "both graphs on the new device: %.1f ms, %.1f ms (kernels rebuilt); largest difference to the CPU %.2g, "
         "%.2g; %s the results before the hang%s%s",
         ta * 1e3, tb * 1e3, da, db, same ? "bit for bit" : "NOT", why[0] ? ": " : "", why);
    /* sqr_f32 itself: the embedded kernel again, on fresh memory (the hang's
     * buffer was not persistent: it came back zeroed and flagged lost) */
    bool lost_flag = tsl_buffer_is_lost(hbuf);
    float sq_in[64], sq_out[64];
    for (int i = 0; i < 64; i++) sq_in[i] = (float)i - 20.5f;
    bool sq_ok = tsl_tensor_set(hin, sq_in, 0, sizeof sq_in, &err) == TSL_SUCCESS &&
                 tsl_backend_graph_compute(a, hg, &err) == TSL_SUCCESS &&
                 tsl_tensor_get(hout, sq_out, 0, sizeof sq_out, &err) == TSL_SUCCESS;
    for (int i = 0; i < 64 && sq_ok; i++) sq_ok = sq_out[i] == sq_in[i] * sq_in[i];
    step(sq_ok && lost_flag, "kernel", "sqr_f32 is the real kernel again (x*x exact on 64 values); the hang's "
         "buffer %s flagged lost", lost_flag ? "was" : "was NOT");

    /* 7: teardown, bounded */
    t0 = now_s();
    tsl_buffer_free(hbuf);
    tsl_ctx_free(hctx);
    job_free(&ja);
    job_free(&jb);
    tsl_backend_free(b);
    tsl_backend_free(a);
    tsl_backend_free(cpu);
    double tt = now_s() - t0;
    step(tt < 5.0, "teardown", "buffers and both backends freed in %.1f ms (limit 5000 ms)", tt * 1e3);
    free(ref_a), free(ref_b), free(pre_a), free(pre_b), free(got_a), free(got_b);

    printf("%s: %d of %d steps held, %.1f s in all; exiting (the alarm still bounds the exit)\n",
           g_failed ? "FAILED" : "PASSED", g_steps - g_failed, g_steps, now_s() - t_start);
    return g_failed ? 1 : 0;
}

#endif /* TSL_HAVE_VULKAN */
