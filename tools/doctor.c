/*
 * doctor.c - `tensile doctor`: can this machine run tensile, and how well?
 *
 * For every backend built in (the CPU, and the default Vulkan device when
 * the library has Vulkan and the machine a device) it:
 *
 *  1. makes the backend and lists what it is: the CPU's model, threads and
 *     SIMD kernel set; for Vulkan every device with its driver and features;
 *  2. builds every kernel the backend has (tsl_backend_build_kernels) and
 *     lists each failure with the driver's text, and how many built;
 *  3. runs a short drill (`tensile drill --quick --json`) in a fresh
 *     process (fork, then exec of this program), so a crash there is a
 *     finding, not the end of the report, and the drill starts without the
 *     driver state this process made building kernels (NVIDIA's Vulkan
 *     driver does not survive a fork of a process that has an instance);
 *  4. ends with one verdict line per backend:
 *       cpu: ready
 *       cpu: degraded: <reasons>      (kernels that failed: their ops run on
 *                                      another backend; fault handling that
 *                                      the drill found wrong)
 *       cpu: unusable: <reason>       (no backend, no kernel at all, or the
 *                                      fault-free compute itself failed)
 *
 * Exit status: 0 when every backend is ready or degraded, 1 when one is
 * unusable, 2 for a usage error. --json prints one JSON object instead.
 * --backend cpu|vulkan examines one backend only (a Vulkan backend asked
 * for and absent is unusable; with the default, all, a machine without a
 * Vulkan device only gets a note).
 *
 * Kernel failures come from the environment as well as from the driver: the
 * backends made here read TSL_FAULT, so `TSL_FAULT=kernel@name=X tensile
 * doctor` shows what a broken kernel X looks like. The drill ignores
 * TSL_FAULT (it injects its own faults).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "tensile/backend.h"

extern char **environ;

#define DOC_MAX_BACKENDS 4
#define DOC_MAX_FAILS 32

typedef struct doc_fail {
    char kernel[64];
    char text[400];
} doc_fail;

typedef struct doc_backend {
    char kind[16];  /* "cpu", "vulkan": what `tensile drill --backend` takes */
    char name[32];  /* "cpu", "vulkan0" */
    char device[96];
    int threads;    /* CPU only */
    bool created;
    char create_err[400];
    int built, failed, build_rc;
    doc_fail fails[DOC_MAX_FAILS];
    int n_fails;
    /* the drill */
    bool drill_ok;  /* a summary came back */
    int d_injected, d_handled, d_crashed, d_wrong, d_leaked;
    char drill_line[200];
    char drill_err[200];
    /* the verdict */
    const char *verdict;
    char reasons[600];
} doc_backend;

/* ---- kernels ------------------------------------------------------------------ */

static void doc_kernel_cb(const char *name, tsl_status status, const tsl_error *err, void *user) {
    doc_backend *b = user;
    if (status == TSL_SUCCESS) {
        b->built++;
        return;
    }
    b->failed++;
    if (b->n_fails == DOC_MAX_FAILS) return;
    doc_fail *f = &b->fails[b->n_fails++];
    snprintf(f->kernel, sizeof f->kernel, "%s", name);
    if (err) {
        tsl_error_format(err, f->text, sizeof f->text);
    } else {
        snprintf(f->text, sizeof f->text, "%s", tsl_status_str(status));
    }
}

static void doc_probe(doc_backend *b, tsl_backend *be) {
    b->created = true;
    snprintf(b->name, sizeof b->name, "%s", tsl_backend_name(be));
    snprintf(b->device, sizeof b->device, "%s", tsl_backend_device(be));
    b->threads = tsl_backend_cpu_threads(be);
    b->build_rc = tsl_backend_build_kernels(be, doc_kernel_cb, b);
}

/* ---- the drill, in a child process --------------------------------------------------- */

static int doc_json_int(const char *s, const char *key) {
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(s, pat);
    return p ? atoi(p + strlen(pat)) : -1;
}

static void doc_drill(doc_backend *b) {
    int p[2];
    fflush(stdout);
    fflush(stderr);
    if (pipe(p) != 0) {
        snprintf(b->drill_err, sizeof b->drill_err, "could not make a pipe for the drill");
        return;
    }
    /* the environment without TSL_FAULT (the drill injects its own faults),
     * and the arguments, made before the fork: between fork and exec only
     * async-signal-safe calls are made */
    size_t n_env = 0;
    while (environ[n_env]) n_env++;
    char **envp = malloc((n_env + 1) * sizeof *envp);
    if (!envp) {
        close(p[0]);
        close(p[1]);
        snprintf(b->drill_err, sizeof b->drill_err, "out of memory starting the drill");
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "TSL_FAULT=", 10) != 0) envp[k++] = environ[i];
    envp[k] = NULL;
    char a0[] = "tensile", a1[] = "drill", a2[] = "--backend", a4[] = "--quick", a5[] = "--json";
    char *argv[] = {a0, a1, a2, b->kind, a4, a5, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        if (dup2(p[1], STDOUT_FILENO) < 0) _exit(2);
        close(p[1]);
        execve("/proc/self/exe", argv, envp);
        static const char msg[] = "tensile doctor: could not exec /proc/self/exe for the drill\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    free(envp);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        snprintf(b->drill_err, sizeof b->drill_err, "could not start the drill process");
        return;
    }
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    for (;;) {
        if (out && len + 4096 > cap) {
            char *o2 = realloc(out, cap * 2);
            if (!o2) break;
            out = o2;
            cap *= 2;
        }
        char tmp[4096];
        ssize_t r = read(p[0], out ? out + len : tmp, 4096);
        if (r <= 0) break;
        if (out) len += (size_t)r;
    }
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    if (!out) {
        snprintf(b->drill_err, sizeof b->drill_err, "out of memory reading the drill");
        return;
    }
    out[len] = 0;
    const char *sum = strstr(out, "{\"summary\":");
    if (sum) {
        b->drill_ok = true;
        b->d_injected = doc_json_int(sum, "injected");
        b->d_handled = doc_json_int(sum, "handled");
        b->d_crashed = doc_json_int(sum, "crashed");
        b->d_wrong = doc_json_int(sum, "wrong");
        b->d_leaked = doc_json_int(sum, "leaked");
        snprintf(b->drill_line, sizeof b->drill_line, "drills: %d injected, %d handled, %d crashed, %d wrong results, %d leaked",
                 b->d_injected, b->d_handled, b->d_crashed, b->d_wrong, b->d_leaked);
    } else if (WIFSIGNALED(status)) {
        snprintf(b->drill_err, sizeof b->drill_err, "the drill died of signal %d", WTERMSIG(status));
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        snprintf(b->drill_err, sizeof b->drill_err, "the drill process could not be started (exec failed)");
    } else {
        snprintf(b->drill_err, sizeof b->drill_err, "the drill's fault-free compute failed (exit %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    free(out);
}

/* ---- verdicts ------------------------------------------------------------------- */

static void doc_reason(doc_backend *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void doc_reason(doc_backend *b, const char *fmt, ...) {
    size_t n = strlen(b->reasons);
    if (n && n + 2 < sizeof b->reasons) {
        memcpy(b->reasons + n, "; ", 3);
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->reasons + n, sizeof b->reasons - n, fmt, ap);
    va_end(ap);
}

static void doc_verdict(doc_backend *b) {
    if (!b->created) {
        b->verdict = "unusable";
        doc_reason(b, "%s", b->create_err);
        return;
    }
    if (b->build_rc < 0) {
        b->verdict = "unusable";
        doc_reason(b, "its kernels could not be built (the device is lost or out of memory)");
        return;
    }
    if (b->built == 0 && b->failed > 0) {
        b->verdict = "unusable";
        doc_reason(b, "none of its %d kernels could be built", b->failed);
        return;
    }
    if (!b->drill_ok) {
        b->verdict = "unusable";
        doc_reason(b, "%s", b->drill_err[0] ? b->drill_err : "the drill did not run");
        return;
    }
    if (b->failed > 0) {
        char names[300] = "";
        size_t n = 0;
        for (int i = 0; i < b->n_fails && n < sizeof names - 70; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", b->fails[i].kernel);
        doc_reason(b, "%d kernel%s failed to build (%s%s); their ops run on another backend", b->failed,
                   b->failed == 1 ? "" : "s", names, b->failed > b->n_fails ? ", ..." : "");
    }
    if (b->d_crashed || b->d_wrong || b->d_leaked || b->d_handled != b->d_injected)
        doc_reason(b, "fault drill: %d crashed, %d wrong results, %d leaked of %d injected", b->d_crashed,
                   b->d_wrong, b->d_leaked, b->d_injected);
    b->verdict = b->reasons[0] ? "degraded" : "ready";
}

/* ---- output ----------------------------------------------------------------------- */

static void doc_json_str(const char *s) { cli_json_str(stdout, s, strlen(s)); }

static void doc_print_json(const doc_backend *bs, int n, const char *vk_note) {
    printf("{\"version\":");
    doc_json_str(TSL_VERSION_STRING);
    if (vk_note) {
        printf(",\"vulkan\":");
        doc_json_str(vk_note);
    }
    printf(",\"simd\":");
    doc_json_str(tsl_cpu_simd_name());
    printf(",\"backends\":[");
    for (int i = 0; i < n; i++) {
        const doc_backend *b = &bs[i];
        printf("%s{\"name\":", i ? "," : "");
        doc_json_str(b->name[0] ? b->name : b->kind);
        printf(",\"kind\":");
        doc_json_str(b->kind);
        printf(",\"device\":");
        doc_json_str(b->device);
        if (b->threads > 0) printf(",\"threads\":%d", b->threads);
        printf(",\"kernels_built\":%d,\"kernels_failed\":%d,\"kernel_failures\":[", b->built, b->failed);
        for (int k = 0; k < b->n_fails; k++) {
            printf("%s{\"kernel\":", k ? "," : "");
            doc_json_str(b->fails[k].kernel);
            printf(",\"error\":");
            doc_json_str(b->fails[k].text);
            printf("}");
        }
        printf("]");
        if (b->drill_ok)
            printf(",\"drill\":{\"injected\":%d,\"handled\":%d,\"crashed\":%d,\"wrong\":%d,\"leaked\":%d}",
                   b->d_injected, b->d_handled, b->d_crashed, b->d_wrong, b->d_leaked);
        else
            printf(",\"drill\":null");
        printf(",\"verdict\":");
        doc_json_str(b->verdict);
        printf(",\"reasons\":");
        doc_json_str(b->reasons);
        printf(",\"line\":");
        char line[700];
        if (b->reasons[0])
            snprintf(line, sizeof line, "%s: %s: %s", b->name[0] ? b->name : b->kind, b->verdict, b->reasons);
        else
            snprintf(line, sizeof line, "%s: %s", b->name[0] ? b->name : b->kind, b->verdict);
        doc_json_str(line);
        printf("}");
    }
    printf("]}\n");
}

static void doc_print_text(const doc_backend *bs, int n, const char *vk_note, bool list_vk) {
    printf("tensile %s doctor\n\nbackends\n", TSL_VERSION_STRING);
    for (int i = 0; i < n; i++) {
        const doc_backend *b = &bs[i];
        if (!b->created) {
            printf("  %-9s could not be made: %s\n", b->kind, b->create_err);
            continue;
        }
        printf("  %-9s %s\n", b->name, b->device);
        if (b->threads > 0) printf("  %-9s threads: %d, SIMD kernels: %s\n", "", b->threads, tsl_cpu_simd_name());
    }
#ifdef TSL_HAVE_VULKAN
    int nd = list_vk ? tsl_vulkan_device_count() : 0;
    for (int i = 0; i < nd; i++) {
        tsl_vulkan_device_info info;
        tsl_error e;
        if (tsl_vulkan_device_info_get(i, &info, &e) != TSL_SUCCESS) continue;
        printf("  vulkan device %d: %s (%s), %s, Vulkan %u.%u, %.1f GiB device-local\n", i, info.name, info.type,
               info.driver, (info.api_version >> 22) & 0x7f, (info.api_version >> 12) & 0x3ff,
               (double)info.device_local_bytes / (1024.0 * 1024.0 * 1024.0));
        printf("    subgroup %u%s, 16-bit storage %s, float16 %s, int8 %s, cooperative matrix %s, device fault %s, "
               "NV checkpoints %s, robustness2 %s, integer dot %s\n",
               info.subgroup_size, info.subgroup_arithmetic ? " (arithmetic)" : "", info.storage_16bit ? "yes" : "no",
               info.float16 ? "yes" : "no", info.int8 ? "yes" : "no",
               info.cooperative_matrix ? (info.cooperative_matrix2 ? "yes (and workgroup scope)" : "yes") : "no",
               info.device_fault ? "yes" : "no", info.nv_checkpoints ? "yes" : "no", info.robustness2 ? "yes" : "no",
               info.integer_dot ? (info.integer_dot_fast ? "yes" : "yes (emulated)") : "no");
    }
#endif
    if (vk_note) printf("  vulkan    %s\n", vk_note);

    printf("\nkernels\n");
    for (int i = 0; i < n; i++) {
        const doc_backend *b = &bs[i];
        if (!b->created) continue;
        if (b->build_rc < 0) {
            printf("  %s: kernels could not be built\n", b->name);
            continue;
        }
        printf("  %s: %d built, %d failed\n", b->name, b->built, b->failed);
        for (int k = 0; k < b->n_fails; k++) printf("    FAILED %s: %s\n", b->fails[k].kernel, b->fails[k].text);
        if (b->failed > b->n_fails) printf("    ... and %d more\n", b->failed - b->n_fails);
    }

    printf("\ndrill (quick)\n");
    for (int i = 0; i < n; i++) {
        const doc_backend *b = &bs[i];
        if (!b->created) continue;
        printf("  %s: %s\n", b->name, b->drill_ok ? b->drill_line : b->drill_err);
    }
    printf("\n");
    for (int i = 0; i < n; i++) {
        const doc_backend *b = &bs[i];
        if (b->reasons[0])
            printf("%s: %s: %s\n", b->name[0] ? b->name : b->kind, b->verdict, b->reasons);
        else
            printf("%s: %s\n", b->name[0] ? b->name : b->kind, b->verdict);
    }
}

int cmd_doctor(int argc, char **argv) {
    bool json = false;
    const char *only = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tensile doctor [--json] [--backend cpu|vulkan|all]\n"
                   "  list backends and devices, build every kernel, run a short fault drill, and give one\n"
                   "  verdict per backend: ready, degraded: <reasons>, or unusable: <reason>.\n"
                   "  --backend B  examine only that backend (default: every backend built)\n"
                   "exit: 0 when every backend is ready or degraded, 1 when one is unusable\n");
            return 0;
        } else {
            fprintf(stderr, "usage: tensile doctor [--json] [--backend cpu|vulkan|all]\n");
            return 2;
        }
    }
    bool want_cpu = !strcmp(only, "all") || !strcmp(only, "cpu");
    bool want_vk = !strcmp(only, "all") || !strcmp(only, "vulkan");
    if (!want_cpu && !want_vk) {
        fprintf(stderr, "tensile doctor: unknown backend '%s' (cpu, vulkan, all)\n", only);
        return 2;
    }
    doc_backend *bs = calloc(DOC_MAX_BACKENDS, sizeof *bs);
    if (!bs) {
        fprintf(stderr, "tensile doctor: out of memory\n");
        return 1;
    }
    int n = 0;
    const char *vk_note = "not built";

    /* 1-2: make each backend, build its kernels, and let it go again before
     * the drill starts (no threads of ours live across its fork) */
    doc_backend *b;
    tsl_error e;
    tsl_backend *be;
    if (want_cpu) {
        b = &bs[n++];
        snprintf(b->kind, sizeof b->kind, "cpu");
        tsl_error_clear(&e);
        be = tsl_backend_cpu_new(0, &e);
        if (be) {
            doc_probe(b, be);
            tsl_backend_free(be);
        } else {
            tsl_error_format(&e, b->create_err, sizeof b->create_err);
        }
    }
    if (!want_vk) vk_note = NULL;
#ifdef TSL_HAVE_VULKAN
    else if (tsl_vulkan_device_count() == 0) {
        vk_note = "built, but no Vulkan device was found";
    } else {
        vk_note = NULL;
        b = &bs[n++];
        snprintf(b->kind, sizeof b->kind, "vulkan");
        tsl_error_clear(&e);
        be = tsl_backend_vulkan_new(-1, &e);
        if (be) {
            doc_probe(b, be);
            tsl_backend_free(be);
        } else {
            tsl_error_format(&e, b->create_err, sizeof b->create_err);
        }
    }
#endif
    if (!want_cpu && vk_note) {
        /* asked for Vulkan alone, and there is none: that is the verdict */
        b = &bs[n++];
        snprintf(b->kind, sizeof b->kind, "vulkan");
        snprintf(b->create_err, sizeof b->create_err, "Vulkan backend %s", vk_note);
        vk_note = NULL; /* said once, in the verdict */
    }

    /* 3: the drill, then 4: the verdicts */
    for (int i = 0; i < n; i++)
        if (bs[i].created) doc_drill(&bs[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        doc_verdict(&bs[i]);
        if (!strcmp(bs[i].verdict, "unusable")) rc = 1;
    }
    if (json)
        doc_print_json(bs, n, vk_note);
    else
        doc_print_text(bs, n, vk_note, want_vk);
    fflush(stdout);
    free(bs);
    return rc;
}
