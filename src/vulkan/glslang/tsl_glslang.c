/*
 * tsl_glslang.c - a build-time GLSL compiler for the kernels that need
 * GL_NV_cooperative_matrix2 (workgroup-scope cooperative matrices with
 * tensor addressing), which Debian 12's glslc and glslangValidator, and the
 * glslang 13 PyPI has, predate.
 *
 * It drives a newer glslang through the shared library that PyPI's slangpy
 * wheel carries (libslang-glslang-*.so: glslang and SPIRV-Tools behind a C
 * entry point, glslang_compile_1_2). tools/install-deps.sh extracts that
 * one library from the wheel into .venv/lib/tensile/; src/vulkan/
 * kernels_mm.cmake builds this program at configure time and uses it only
 * for those kernels. The command line is glslangValidator's, as far as the
 * build uses it:
 *
 *   tsl_glslang --lib LIB -S comp --target-env vulkan1.3 [-DNAME[=VALUE]]...
 *               [-IDIR]... FILE -o OUT
 *
 * The library's entry point takes one source string and has no include
 * callback and no macro list, so this program gives it the file with every
 * `#include "name"` replaced by the named file (looked up beside FILE, then
 * in each -I folder) and the -D macros defined after the #version line;
 * #line directives keep diagnostics pointing at the right file and line.
 * Exit status 0 with OUT written, or non-zero with the compiler's
 * diagnostics on stderr (and OUT removed).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* glslang_CompileRequest_1_2 of slang's glslang wrapper (source/slang-glslang/slang-glslang.h) */
typedef void (*tg_output_fn)(const void *data, size_t size, void *user);
typedef struct {
    int major, minor, patch;
} tg_spirv_version;
typedef struct {
    size_t size_in_bytes;
    const char *source_path;
    const void *input_begin, *input_end;
    tg_output_fn diagnostic_fn;
    void *diagnostic_user;
    tg_output_fn output_fn;
    void *output_user;
    int stage;             /* SlangStage: 6 is compute */
    unsigned action;       /* 0: GLSL to SPIR-V */
    unsigned optimization; /* SlangOptimizationLevel: 2 is high (spirv-opt -O) */
    unsigned debug_info;   /* 0: none */
    const char *spirv_target_name;
    tg_spirv_version spirv_version;
    const char *entry_point_name;
} tg_request;

enum { TG_STAGE_COMPUTE = 6, TG_OPT_HIGH = 2, TG_MAX_DIRS = 16, TG_MAX_DEPTH = 16 };

typedef struct {
    char *p;
    size_t n, cap;
} tg_buf;

static void tg_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tsl_glslang: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void tg_put(tg_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) tg_die("out of memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void tg_putf(tg_buf *b, const char *fmt, ...) {
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) tg_die("line too long");
    tg_put(b, tmp, (size_t)n);
}

static char *tg_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    tg_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) tg_put(&b, chunk, n);
    fclose(f);
    if (!b.p) tg_put(&b, "", 0);
    return b.p;
}

static const char *dirs[TG_MAX_DIRS];
static int n_dirs;

/* Open `name` beside `from`, then in the -I folders; the path found in *out. */
static char *tg_find(const char *from, const char *name, char *out, size_t cap) {
    const char *slash = strrchr(from, '/');
    if (slash) {
        snprintf(out, cap, "%.*s/%s", (int)(slash - from), from, name);
        char *s = tg_read(out);
        if (s) return s;
    }
    for (int i = 0; i < n_dirs; i++) {
        snprintf(out, cap, "%s/%s", dirs[i], name);
        char *s = tg_read(out);
        if (s) return s;
    }
    return NULL;
}

/* Append `text` (from `path`) to b with its includes inlined; `defines`
 * go after the #version line of the top file. */
static void tg_expand(tg_buf *b, const char *path, const char *text, int depth, const tg_buf *defines) {
    if (depth > TG_MAX_DEPTH) tg_die("%s: includes nested deeper than %d", path, TG_MAX_DEPTH);
    int line = 1;
    const char *s = text;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const char *t = s;
        while (t < s + len && (*t == ' ' || *t == '\t')) t++;
        if (len - (size_t)(t - s) >= 8 && strncmp(t, "#include", 8) == 0) {
            const char *q = memchr(t, '"', len - (size_t)(t - s));
            const char *q2 = q ? memchr(q + 1, '"', (size_t)(s + len - q - 1)) : NULL;
            if (!q || !q2) tg_die("%s:%d: #include without a quoted name", path, line);
            char name[512], found[1024];
            snprintf(name, sizeof name, "%.*s", (int)(q2 - q - 1), q + 1);
            char *inc = tg_find(path, name, found, sizeof found);
            if (!inc) tg_die("%s:%d: cannot find include \"%s\"", path, line, name);
            tg_putf(b, "#line 1 \"%s\"\n", found);
            tg_expand(b, found, inc, depth + 1, NULL);
            free(inc);
            tg_putf(b, "#line %d \"%s\"\n", line + 1, path);
        } else {
            tg_put(b, s, len);
            tg_put(b, "\n", 1);
            if (defines && depth == 0 && len - (size_t)(t - s) >= 8 && strncmp(t, "#version", 8) == 0) {
                tg_put(b, defines->p ? defines->p : "", defines->n);
                tg_putf(b, "#line %d \"%s\"\n", line + 1, path);
                defines = NULL;
            }
        }
        line++;
        s = e ? e + 1 : s + len;
    }
}

static void tg_diag(const void *data, size_t size, void *user) {
    (void)user;
    fwrite(data, 1, size, stderr);
}

static void tg_out(const void *data, size_t size, void *user) {
    tg_buf *b = user;
    tg_put(b, data, size);
}

int main(int argc, char **argv) {
    const char *lib = NULL, *in = NULL, *out = NULL, *env = "vulkan1.3";
    tg_buf defines = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--lib") == 0 && i + 1 < argc) lib = argv[++i];
        else if (strcmp(a, "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(a, "-S") == 0 && i + 1 < argc) {
            if (strcmp(argv[++i], "comp") != 0) tg_die("only compute shaders (-S comp)");
        } else if (strcmp(a, "--target-env") == 0 && i + 1 < argc) env = argv[++i];
        else if (strncmp(a, "-D", 2) == 0 && a[2]) {
            const char *eq = strchr(a + 2, '=');
            if (eq) tg_putf(&defines, "#define %.*s %s\n", (int)(eq - a - 2), a + 2, eq + 1);
            else tg_putf(&defines, "#define %s 1\n", a + 2);
        } else if (strncmp(a, "-I", 2) == 0) {
            const char *d = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
            if (!d || n_dirs == TG_MAX_DIRS) tg_die("bad or too many -I folders");
            dirs[n_dirs++] = d;
        } else if (a[0] != '-' && !in) in = a;
        else tg_die("unknown argument '%s'", a);
    }
    if (!lib || !in || !out) tg_die("usage: --lib LIB -S comp --target-env vulkan1.3 [-D..] [-I..] FILE -o OUT");
    /* SPIR-V 1.6 for Vulkan 1.3, 1.5 for 1.2 */
    tg_spirv_version ver = {1, 6, 0};
    if (strcmp(env, "vulkan1.2") == 0) ver.minor = 5;
    else if (strcmp(env, "vulkan1.3") != 0) tg_die("unknown --target-env '%s' (vulkan1.2 or vulkan1.3)", env);

    char *text = tg_read(in);
    if (!text) tg_die("cannot read %s", in);
    tg_buf src = {0};
    tg_expand(&src, in, text, 0, &defines);
    free(text);

    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) tg_die("cannot load %s: %s", lib, dlerror());
    int (*compile)(tg_request *) = (int (*)(tg_request *))dlsym(h, "glslang_compile_1_2");
    if (!compile) tg_die("%s has no glslang_compile_1_2", lib);

    tg_buf spv = {0};
    tg_request r = {
        .size_in_bytes = sizeof r,
        .source_path = in,
        .input_begin = src.p,
        .input_end = src.p + src.n,
        .diagnostic_fn = tg_diag,
        .output_fn = tg_out,
        .output_user = &spv,
        .stage = TG_STAGE_COMPUTE,
        .action = 0,
        .optimization = TG_OPT_HIGH,
        .debug_info = 0,
        .spirv_version = ver,
        .entry_point_name = "main",
    };
    int rc = compile(&r);
    if (rc != 0 || spv.n < 20 || spv.n % 4 != 0) {
        remove(out);
        fprintf(stderr, "tsl_glslang: %s: compilation failed\n", in);
        return 1;
    }
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(spv.p, 1, spv.n, f) != spv.n || fclose(f) != 0) {
        remove(out);
        tg_die("cannot write %s", out);
    }
    free(spv.p);
    free(src.p);
    free(defines.p);
    return 0;
}
