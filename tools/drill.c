/*
 * drill.c - `tensile drill`: fault drills, in the spirit of SQLite's anomaly
 * testing (FAULTS.md section 10).
 *
 * A small llama-shaped graph (two layers: embeddings, attention with rope and
 * a masked soft_max, a swiglu FFN, the vocabulary projection; weights of
 * several types from a seeded generator) is computed once without faults;
 * that is the reference. Every class runs twice: on the graph of an
 * 8-token prompt, then of one token (a decode step, "1 token:" in the rows),
 * whose one-column products a GPU backend computes with other kernels (the
 * integer-dot mat-vecs and their quantized column, with its own scratch),
 * each pass on backends and a model of its own. Then, for each fault class, one fault is injected
 * at each injection point in turn, through the public injection API
 * (tsl_backend_inject), so it takes the same path a real fault takes:
 *
 *   retry   the compute                      -> RETRY, nothing latched
 *   lost    the compute                      -> DEVICE_LOST, latched with the
 *                                              original cause until recover
 *   nobuf   every compute node, every leaf   -> FAILED naming the node and
 *           (weights and inputs)                the tensor
 *   kernel  every distinct kernel the graph  -> FAILED naming the kernel;
 *           uses                                then the scheduler moves its
 *                                              ops to the CPU fallback
 *   alloc   the weights buffer, the graph    -> ALLOC_FAILED
 *           allocator's buffer, the first
 *           allocation inside a compute
 *   abort   between every two compute nodes  -> ABORTED naming the next node
 *   copylost the completion of a copy: small -> DEVICE_LOST naming the copy
 *           uploads left in flight, found by    (op "copy" and its tensor),
 *           the next compute, read or set;      latched until recover
 *           a read, found by its own call       (GPU only: the CPU waits for
 *                                              no copy, and has no row)
 *
 * Each row checks: the fault fired exactly once; the status; that the
 * record names the injected node, tensor or kernel; that the next compute
 * (after recover for lost) equals the reference bit for bit; and that the
 * backends hold as many buffers as before the row. A row that passes every
 * check is "handled"; one with a wrong status, record or result is "wrong";
 * one that left a buffer behind is "leaked". Heap leaks are the sanitizer's
 * job: CI runs the drill in the ASan/LSan build too.
 *
 * The kernel rows' reference. After a kernel failure the scheduler runs the
 * ops of that kernel on the CPU fallback, which sums in another order (and
 * quantizes activations in quantized products) than a GPU: the result of
 * the mixed placement is not the all-GPU result, and comparing the two
 * would blame the backend for arithmetic. So each kernel row computes,
 * with no fault anywhere, the same graph with the same placement (the
 * moved nodes pinned to the fallback through memory the drill places them
 * in, see drill_pinned_reference) and requires the recovered run to equal
 * it bit for bit; it also checks that exactly the nodes of the failed
 * kernel moved, and that the mixed result stays near the all-GPU one (a
 * loose bound, against a fallback broken the same way in both runs). Every
 * other row compares with the one fault-free reference, bit for bit.
 *
 * Leak accounting. A row counts the buffers of the backend under test and
 * of the fallback before the fault and after everything the row made is
 * freed; the kernel rows free their scheduler (whose graph allocators keep
 * buffers by design) before counting. A hidden flag, --plant-leak, keeps
 * one buffer of the first kernel row alive until the end of the class, so a
 * test proves such a buffer is reported.
 *
 * Each class runs in a fresh process: fork, then exec of this program
 * (/proc/self/exe) in a hidden child mode (`drill --child KIND CLASS --fd
 * N`), never a bare fork. A forked child would inherit the parent's driver
 * state (a Vulkan instance made while looking for devices, or by `tensile
 * doctor` building kernels), and NVIDIA's driver does not survive that: the
 * child cannot make an instance at all. The CPU drill runs the same way, so
 * both backends are drilled alike. A crash costs that class's remaining
 * rows, reported as "crashed" with the signal, and the other classes still
 * run. A child that ends through a sanitizer report counts as crashed
 * (ASan, UBSan) or leaked (LSan's exit code 23). Rows go back to the parent
 * through a pipe as they finish. Neither the children nor the parent use an
 * ambient TSL_FAULT: the drill injects its own faults.
 *
 * Injection points are found through the public API too: kernel names by
 * injecting a kernel fault at each node in turn and reading the name from
 * the record (recover between: it clears the kernel-failure cache), the
 * allocation sizes from the buffers a clean run made. Rules use times=1, so
 * exactly one fault fires whatever the backend's compute count is.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "tensile/backend.h"

enum { DR_EMBD = 64, DR_HEAD = 4, DR_HDIM = 16, DR_FF = 128, DR_VOCAB = 64, DR_TOK = 8, DR_LAYERS = 2 };
#define DR_QUICK_POINTS 3 /* injection points per list with --quick */
#define DR_MAX_KERNELS 64

typedef struct drill_opts {
    const char *backend; /* "cpu", "vulkan", "all" */
    bool json, quick, verbose;
    bool plant_leak; /* hidden self-check: the first kernel row leaves a buffer */
    int threads;
} drill_opts;

typedef struct drill_counts {
    int injected, handled, crashed, wrong, leaked;
} drill_counts;

/* ---- the model --------------------------------------------------------------- */

typedef struct drill_layer {
    tsl_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
} drill_layer;

typedef struct drill_model {
    int n_tok;        /* tokens a compute: DR_TOK (a prompt) or 1 (a decode step) */
    tsl_context *ctx; /* weights and inputs; no_alloc */
    tsl_buffer *buf;  /* all of them, on the backend under test; persistent */
    tsl_tensor *tok_embd, *out_norm, *output, *tokens, *pos, *mask;
    drill_layer l[DR_LAYERS];
} drill_model;

typedef struct drill_graph {
    tsl_context *ctx;
    tsl_graph *g;
    tsl_tensor *out;
} drill_graph;

static tsl_tensor *drill_w(tsl_context *c, tsl_type type, int64_t ne0, int64_t ne1, int il, const char *what) {
    tsl_tensor *t = ne1 > 0 ? tsl_new_tensor_2d(c, type, ne0, ne1) : tsl_new_tensor_1d(c, type, ne0);
    if (!t) return NULL;
    return il >= 0 ? tsl_tensor_format_name(t, "blk.%d.%s.weight", il, what) : tsl_tensor_set_name(t, what);
}

static uint64_t drill_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Seeded values for every tensor of the model, then the inputs. */
static tsl_status drill_model_fill(drill_model *m, tsl_error *err) {
    uint64_t s = 0x5eed5eed12345ULL;
    tsl_status st = TSL_SUCCESS;
    for (tsl_tensor *t = tsl_ctx_first_tensor(m->ctx); t && st == TSL_SUCCESS; t = tsl_ctx_next_tensor(m->ctx, t)) {
        if (t == m->tokens || t == m->pos || t == m->mask) continue;
        int64_t n = tsl_nelements(t);
        float *f = malloc((size_t)n * sizeof *f);
        void *q = malloc(tsl_nbytes(t));
        bool norm = strstr(t->name, "norm") != NULL;
        for (int64_t i = 0; f && i < n; i++) {
            float u = (float)((drill_rand(&s) >> 40) * (1.0 / 16777216.0));
            f[i] = norm ? 0.8f + 0.4f * u : 0.5f * u - 0.25f;
        }
        if (!f || !q || tsl_quantize(t->type, f, q, n) != tsl_nbytes(t))
            st = TSL_ALLOC_FAILED;
        else
            st = tsl_tensor_set(t, q, 0, tsl_nbytes(t), err);
        free(f);
        free(q);
    }
    const int n = m->n_tok;
    int32_t tok[DR_TOK], pos[DR_TOK];
    float mask[DR_TOK * DR_TOK];
    for (int i = 0; i < n; i++) {
        tok[i] = (i * 29 + 5) % DR_VOCAB;
        pos[i] = n == 1 ? 5 : i; /* a decode step past the prompt's start */
        for (int k = 0; k < n; k++) mask[i * n + k] = k <= i ? 0.0f : -INFINITY;
    }
    if (st == TSL_SUCCESS) st = tsl_tensor_set(m->tokens, tok, 0, (size_t)n * sizeof tok[0], err);
    if (st == TSL_SUCCESS) st = tsl_tensor_set(m->pos, pos, 0, (size_t)n * sizeof pos[0], err);
    if (st == TSL_SUCCESS) st = tsl_tensor_set(m->mask, mask, 0, (size_t)n * n * sizeof mask[0], err);
    return st;
}

static void drill_model_free(drill_model *m) {
    tsl_buffer_free(m->buf);
    tsl_ctx_free(m->ctx);
    memset(m, 0, sizeof *m);
}

/* Weights and inputs in one persistent buffer of be (restored from the
 * backend's host copy after a recovery). */
static tsl_status drill_model_new(drill_model *m, tsl_backend *be, int n_tok, tsl_error *err) {
    memset(m, 0, sizeof *m);
    m->n_tok = n_tok;
    m->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 256u << 10, .no_alloc = true});
    if (!m->ctx) {
        if (err) snprintf(err->message, sizeof err->message, "out of memory for the model context");
        return TSL_ALLOC_FAILED;
    }
    tsl_context *c = m->ctx;
    m->tok_embd = drill_w(c, TSL_TYPE_Q8_0, DR_EMBD, DR_VOCAB, -1, "token_embd.weight");
    for (int il = 0; il < DR_LAYERS; il++) {
        drill_layer *l = &m->l[il];
        l->attn_norm = drill_w(c, TSL_TYPE_F32, DR_EMBD, 0, il, "attn_norm");
        l->wq = drill_w(c, TSL_TYPE_Q8_0, DR_EMBD, DR_EMBD, il, "attn_q");
        l->wk = drill_w(c, TSL_TYPE_Q4_0, DR_EMBD, DR_EMBD, il, "attn_k");
        l->wv = drill_w(c, TSL_TYPE_F16, DR_EMBD, DR_EMBD, il, "attn_v");
        l->wo = drill_w(c, TSL_TYPE_Q8_0, DR_EMBD, DR_EMBD, il, "attn_output");
        l->ffn_norm = drill_w(c, TSL_TYPE_F32, DR_EMBD, 0, il, "ffn_norm");
        l->gate = drill_w(c, TSL_TYPE_Q4_0, DR_EMBD, DR_FF, il, "ffn_gate");
        l->up = drill_w(c, TSL_TYPE_Q8_0, DR_EMBD, DR_FF, il, "ffn_up");
        l->down = drill_w(c, TSL_TYPE_F16, DR_FF, DR_EMBD, il, "ffn_down");
    }
    m->out_norm = drill_w(c, TSL_TYPE_F32, DR_EMBD, 0, -1, "output_norm.weight");
    m->output = drill_w(c, TSL_TYPE_F32, DR_EMBD, DR_VOCAB, -1, "output.weight");
    m->tokens = tsl_tensor_set_name(tsl_new_tensor_1d(c, TSL_TYPE_I32, n_tok), "inp_tokens");
    m->pos = tsl_tensor_set_name(tsl_new_tensor_1d(c, TSL_TYPE_I32, n_tok), "inp_pos");
    m->mask = tsl_tensor_set_name(tsl_new_tensor_2d(c, TSL_TYPE_F32, n_tok, n_tok), "kq_mask");
    if (tsl_ctx_error(c)) {
        if (err) snprintf(err->message, sizeof err->message, "model: %.200s", tsl_ctx_error(c));
        drill_model_free(m);
        return TSL_FAILED;
    }
    m->buf = tsl_buffer_alloc_ctx(be, c, err);
    if (!m->buf) {
        tsl_status st = err ? err->status : TSL_ALLOC_FAILED;
        drill_model_free(m);
        return st;
    }
    /* persistent before the uploads: the backend's host copy follows them */
    tsl_buffer_set_persistent(m->buf, true);
    tsl_status st = drill_model_fill(m, err);
    if (st != TSL_SUCCESS) drill_model_free(m);
    return st;
}

static tsl_tensor *drill_nm(tsl_tensor *t, int il, const char *what) {
    if (!t) return NULL;
    return il >= 0 ? tsl_tensor_format_name(t, "blk.%d.%s", il, what) : tsl_tensor_set_name(t, what);
}

/* The forward graph over m, every node named (the rules name them). */
static bool drill_graph_build(drill_graph *G, const drill_model *m) {
    memset(G, 0, sizeof *G);
    G->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = 1u << 20, .no_alloc = true});
    if (!G->ctx) return false;
    tsl_context *c = G->ctx;
    const float scale = 1.0f / sqrtf((float)DR_HDIM);
    tsl_rope_params rp = tsl_rope_default(DR_HDIM);
    const int64_t T = m->n_tok;
    tsl_tensor *x = drill_nm(tsl_get_rows(c, m->tok_embd, m->tokens), -1, "inp_embd");
    for (int il = 0; il < DR_LAYERS; il++) {
        const drill_layer *l = &m->l[il];
        tsl_tensor *h = drill_nm(tsl_rms_norm(c, x, 1e-5f), il, "attn_rms");
        h = drill_nm(tsl_mul(c, h, l->attn_norm), il, "attn_normed");
        tsl_tensor *q = drill_nm(tsl_mul_mat(c, l->wq, h), il, "q");
        tsl_tensor *k = drill_nm(tsl_mul_mat(c, l->wk, h), il, "k");
        tsl_tensor *v = drill_nm(tsl_mul_mat(c, l->wv, h), il, "v");
        q = drill_nm(tsl_reshape_3d(c, q, DR_HDIM, DR_HEAD, T), il, "q3");
        k = drill_nm(tsl_reshape_3d(c, k, DR_HDIM, DR_HEAD, T), il, "k3");
        q = drill_nm(tsl_rope(c, q, m->pos, NULL, &rp), il, "q_rope");
        k = drill_nm(tsl_rope(c, k, m->pos, NULL, &rp), il, "k_rope");
        tsl_tensor *Q = drill_nm(tsl_permute(c, q, 0, 2, 1, 3), il, "Q");
        tsl_tensor *K = drill_nm(tsl_permute(c, k, 0, 2, 1, 3), il, "K");
        tsl_tensor *kq = drill_nm(tsl_mul_mat(c, K, Q), il, "kq");
        kq = drill_nm(tsl_soft_max(c, kq, m->mask, scale), il, "kq_soft_max");
        v = drill_nm(tsl_reshape_3d(c, v, DR_HDIM, DR_HEAD, T), il, "v3");
        v = drill_nm(tsl_permute(c, v, 1, 2, 0, 3), il, "vT_view");
        v = drill_nm(tsl_cont(c, v), il, "vT");
        tsl_tensor *kqv = drill_nm(tsl_mul_mat(c, v, kq), il, "kqv");
        kqv = drill_nm(tsl_permute(c, kqv, 0, 2, 1, 3), il, "kqv_perm");
        kqv = drill_nm(tsl_cont(c, kqv), il, "kqv_cont");
        kqv = drill_nm(tsl_reshape_2d(c, kqv, DR_EMBD, T), il, "kqv_merged");
        tsl_tensor *o = drill_nm(tsl_mul_mat(c, l->wo, kqv), il, "attn_out");
        x = drill_nm(tsl_add(c, o, x), il, "ffn_inp");
        h = drill_nm(tsl_rms_norm(c, x, 1e-5f), il, "ffn_rms");
        h = drill_nm(tsl_mul(c, h, l->ffn_norm), il, "ffn_normed");
        tsl_tensor *g = drill_nm(tsl_mul_mat(c, l->gate, h), il, "ffn_gate");
        tsl_tensor *u = drill_nm(tsl_mul_mat(c, l->up, h), il, "ffn_up");
        tsl_tensor *a = drill_nm(tsl_swiglu(c, g, u), il, "ffn_swiglu");
        tsl_tensor *d = drill_nm(tsl_mul_mat(c, l->down, a), il, "ffn_out");
        x = drill_nm(tsl_add(c, d, x), il, "l_out");
    }
    tsl_tensor *h = drill_nm(tsl_rms_norm(c, x, 1e-5f), -1, "result_rms");
    h = drill_nm(tsl_mul(c, h, m->out_norm), -1, "result_norm");
    G->out = drill_nm(tsl_mul_mat(c, m->output, h), -1, "result_output");
    if (!G->out) return false;
    G->g = tsl_graph_build(c, &G->out, 1);
    return G->g != NULL;
}

static void drill_graph_free(drill_graph *G) {
    tsl_ctx_free(G->ctx);
    memset(G, 0, sizeof *G);
}

/* ---- one class, in its own process --------------------------------------------- */

typedef struct drill {
    drill_opts o;
    const char *kind;  /* "cpu", "vulkan" */
    tsl_fault_class cls;
    tsl_backend *be;   /* the backend under test */
    tsl_backend *fb;   /* the CPU fallback of the kernel rows */
    drill_model m;
    drill_graph g1;    /* computed directly on be */
    tsl_gallocr *ga;
    float *ref;        /* the fault-free output */
    size_t ref_bytes;
    FILE *detail;      /* per-row lines (-v) and failures */
    int fd;            /* pipe to the parent, -1 in-process */
    int n_tok;         /* the graph's tokens: DR_TOK, then 1 (drill_class_run) */
    drill_counts c;
    int n_skipped;     /* points that do not exist on this backend */
    tsl_buffer *planted; /* --plant-leak: kept from its row until teardown */
    char note[160];      /* what a row found besides its record (printed with -v) */
} drill;

/* Pipe messages: a plan (how many rows will come) and one per row. */
typedef struct drill_msg {
    int kind; /* 0: plan, 1: row */
    int n, handled, wrong, leaked;
} drill_msg;

static void drill_send(drill *d, drill_msg msg) {
    if (d->fd < 0) return;
    const char *p = (const char *)&msg;
    size_t left = sizeof msg;
    while (left > 0) {
        ssize_t w = write(d->fd, p, left);
        if (w <= 0) return;
        p += w;
        left -= (size_t)w;
    }
}

static void drill_plan(drill *d, int n) { drill_send(d, (drill_msg){.kind = 0, .n = n}); }

static tsl_backend *drill_backend_new(const char *kind, int threads, tsl_error *err) {
    if (!strcmp(kind, "cpu")) return tsl_backend_cpu_new(threads, err);
#ifdef TSL_HAVE_VULKAN
    if (!strcmp(kind, "vulkan")) return tsl_backend_vulkan_new(-1, err);
#endif
    if (err) {
        tsl_error_clear(err);
        err->status = TSL_FAILED;
        snprintf(err->message, sizeof err->message, "%s backend not built", kind);
    }
    return NULL;
}

static int drill_live(const tsl_backend *be) { return tsl_backend_n_buffers(be, NULL); }

static int drill_live_all(const drill *d) { return drill_live(d->be) + drill_live(d->fb); }

static void drill_line(const tsl_error *e, char *buf, size_t n) {
    if (e && e->status != TSL_SUCCESS)
        tsl_error_format(e, buf, n);
    else
        snprintf(buf, n, "SUCCESS");
}

/* Record a reason the row is wrong (the first one is kept). */
static void drill_why(char *why, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void drill_why(char *why, size_t n, const char *fmt, ...) {
    if (why[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

static void drill_row(drill *d, const char *rule, const char *why, bool leaked, const tsl_error *e) {
    bool ok = !why[0] && !leaked;
    d->c.injected++;
    if (ok) d->c.handled++;
    if (why[0]) d->c.wrong++;
    if (leaked) d->c.leaked++;
    drill_send(d, (drill_msg){.kind = 1, .n = 1, .handled = ok, .wrong = why[0] != 0, .leaked = leaked});
    if (ok && !d->o.verbose) {
        d->note[0] = 0;
        return;
    }
    char line[700], lab[96];
    drill_line(e, line, sizeof line);
    snprintf(lab, sizeof lab, "%s%s", d->n_tok == 1 ? "1 token: " : "", rule); /* the decode-shaped pass */
    rule = lab;
    if (d->note[0]) fprintf(d->detail, "  %-8s %-44s %s\n", tsl_fault_class_name(d->cls), rule, d->note);
    d->note[0] = 0;
    if (ok)
        fprintf(d->detail, "  %-8s %-44s ok: %s\n", tsl_fault_class_name(d->cls), rule, line);
    else
        fprintf(d->detail, "  %-8s %-44s %s: %s%s%s\n    record: %s\n", tsl_fault_class_name(d->cls), rule,
                why[0] ? "WRONG" : "LEAKED", why, why[0] && leaked ? "; " : "", leaked ? "buffers leaked" : "",
                line);
}

/* Allocate g1 with the graph allocator and compute it on be. */
static tsl_status drill_direct(drill *d, tsl_error *e) {
    tsl_status st = tsl_gallocr_alloc_graph(d->ga, d->g1.g, e);
    if (st != TSL_SUCCESS) return st;
    return tsl_backend_graph_compute(d->be, d->g1.g, e);
}

/* Does out hold the reference? Says why not in why. */
static bool drill_same(drill *d, const tsl_tensor *out, char *why, size_t n) {
    size_t nb = tsl_nbytes(out);
    if (nb != d->ref_bytes) {
        drill_why(why, n, "output has %zu bytes, the reference %zu", nb, d->ref_bytes);
        return false;
    }
    float *r = malloc(nb);
    tsl_error e;
    bool same = r && tsl_tensor_get(out, r, 0, nb, &e) == TSL_SUCCESS;
    if (!same) {
        drill_why(why, n, "could not read the output: %s", r ? e.message : "out of memory");
    } else if (memcmp(r, d->ref, nb) != 0) {
        size_t bad = 0, first = 0, cnt = nb / sizeof(float);
        for (size_t i = cnt; i-- > 0;)
            if (memcmp(&r[i], &d->ref[i], sizeof(float)) != 0) bad++, first = i;
        drill_why(why, n, "wrong result: %zu of %zu values differ from the fault-free run (first at %zu: %g, not %g)",
                  bad, cnt, first, (double)r[first], (double)d->ref[first]);
        same = false;
    }
    free(r);
    return same;
}

/* A loss latched: the backend says so, the next compute refuses at once
 * with the original cause (e's message), and recover brings it back. */
static void drill_check_latched(drill *d, const tsl_error *e, char *why, size_t n) {
    tsl_error e2;
    tsl_error_clear(&e2);
    if (!tsl_backend_is_lost(d->be)) drill_why(why, n, "the loss did not latch");
    tsl_status s2 = tsl_backend_graph_compute(d->be, d->g1.g, &e2);
    if (s2 != TSL_DEVICE_LOST)
        drill_why(why, n, "the compute after the loss returned %s", tsl_status_str(s2));
    else if (strcmp(e2.message, e->message) != 0)
        drill_why(why, n, "the compute after the loss does not carry the original cause");
    s2 = tsl_backend_recover(d->be, &e2);
    if (s2 != TSL_SUCCESS) drill_why(why, n, "recover returned %s: %s", tsl_status_str(s2), e2.message);
}

/* After a row: the next compute is clean and right. */
static void drill_check_next(drill *d, char *why, size_t n) {
    tsl_error e;
    tsl_error_clear(&e);
    tsl_status st = drill_direct(d, &e);
    if (st != TSL_SUCCESS) {
        char line[600];
        drill_line(&e, line, sizeof line);
        drill_why(why, n, "the next compute failed: %s", line);
        return;
    }
    drill_same(d, d->g1.out, why, n);
}

static bool drill_is_compute(const tsl_tensor *t) { return !tsl_op_is_view(t->op) && t->op != TSL_OP_NONE; }

/* A point that turned out not to exist on this backend: the rule did not
 * fire and the compute succeeded (a GPU asks the abort callback between
 * command buffers only, not between every two nodes). Not counted. */
static void drill_skip(drill *d, const char *rule, const char *why) {
    if (d->o.verbose) fprintf(d->detail, "  %-8s %-44s skipped: %s\n", tsl_fault_class_name(d->cls), rule, why);
    d->n_skipped++;
    drill_send(d, (drill_msg){.kind = 0, .n = -1});
}

/* One row on the graph computed directly on be: inject, compute, check
 * status and record, check the next compute and the buffers. want_node -1
 * and NULL strings check nothing. An optional point that does not fire is
 * skipped (drill_skip). */
static void drill_direct_row(drill *d, const char *rule, tsl_status want, int want_node, const char *want_tensor,
                             bool optional) {
    char why[512] = "";
    int live0 = drill_live_all(d);
    uint64_t fired0 = tsl_backend_injected(d->be, d->cls);
    tsl_error e;
    tsl_error_clear(&e);
    if (tsl_backend_inject(d->be, rule, &e) != TSL_SUCCESS) {
        drill_why(why, sizeof why, "the rule was refused: %s", e.message);
    } else {
        tsl_status st = drill_direct(d, &e);
        uint64_t fired = tsl_backend_injected(d->be, d->cls) - fired0;
        tsl_backend_inject_clear(d->be);
        if (optional && fired == 0 && st == TSL_SUCCESS) {
            drill_skip(d, rule, "not an injection point on this backend");
            return;
        }
        if (fired != 1) drill_why(why, sizeof why, "the fault fired %llu times, not once", (unsigned long long)fired);
        if (st != want)
            drill_why(why, sizeof why, "status %s, expected %s", tsl_status_str(st), tsl_status_str(want));
        if (want_node >= 0 && e.node != want_node)
            drill_why(why, sizeof why, "the record names node %d, not %d", e.node, want_node);
        if (want_tensor && strcmp(e.tensor, want_tensor) != 0)
            drill_why(why, sizeof why, "the record names tensor '%s', not '%s'", e.tensor, want_tensor);
        if (!e.backend[0]) drill_why(why, sizeof why, "the record names no backend");
        if (d->cls == TSL_FAULT_LOST && st == TSL_DEVICE_LOST) drill_check_latched(d, &e, why, sizeof why);
        if (tsl_backend_is_lost(d->be)) drill_why(why, sizeof why, "the backend is still lost");
        drill_check_next(d, why, sizeof why);
    }
    tsl_backend_inject_clear(d->be);
    drill_row(d, rule, why, drill_live_all(d) != live0, &e);
}

/* At most DR_QUICK_POINTS of n points with --quick: first, middle, last. */
static bool drill_pick(const drill *d, int k, int n) {
    if (!d->o.quick || n <= DR_QUICK_POINTS) return true;
    return k == 0 || k == n - 1 || k == n / 2;
}

static int drill_count_picks(const drill *d, int n) {
    int c = 0;
    for (int k = 0; k < n; k++) c += drill_pick(d, k, n);
    return c;
}

static void drill_retry(drill *d) {
    drill_plan(d, 1);
    drill_direct_row(d, "retry@times=1", TSL_RETRY, -1, NULL, false);
}

static void drill_lost(drill *d) {
    drill_plan(d, 1);
    drill_direct_row(d, "lost@times=1", TSL_DEVICE_LOST, -1, NULL, false);
}

/* How a copy's completion is reached in a copylost row. */
enum { DC_BY_COMPUTE, DC_BY_READ, DC_BY_SET, DC_OWN_READ };

/* One copylost row: a small upload of t (its own bytes again), left in
 * flight by tsl_tensor_set, whose completion is then waited for by the
 * next compute, read (of the output) or set (of other); or (DC_OWN_READ)
 * a read of t, waited for by its own call. The call that waits must
 * return DEVICE_LOST with a record naming the copy (op "copy", the tensor,
 * no node), latched with that cause; after recover the next compute gives
 * the reference. */
static void drill_copy_row(drill *d, int how, tsl_tensor *t, tsl_tensor *other) {
    static const char *const HOW[] = {"the next compute", "the next read", "the next set", "its own read"};
    char why[512] = "", rule[160];
    snprintf(rule, sizeof rule, "copylost@times=1 (%s %s)", t->name, HOW[how]);
    int live0 = drill_live_all(d);
    uint64_t fired0 = tsl_backend_injected(d->be, TSL_FAULT_COPYLOST);
    tsl_error e;
    tsl_error_clear(&e);
    size_t nb = tsl_nbytes(t), nb2 = other ? tsl_nbytes(other) : 0;
    void *host = malloc(nb), *host2 = malloc(nb2 ? nb2 : 1);
    tsl_status st = TSL_FAILED;
    if (!host || !host2) {
        drill_why(why, sizeof why, "out of memory");
    } else if (tsl_tensor_get(t, host, 0, nb, &e) != TSL_SUCCESS ||
               (other && tsl_tensor_get(other, host2, 0, nb2, &e) != TSL_SUCCESS)) {
        drill_why(why, sizeof why, "could not read the tensors before the fault: %s", e.message);
    } else if (tsl_backend_inject(d->be, "copylost@times=1", &e) != TSL_SUCCESS) {
        drill_why(why, sizeof why, "the rule was refused: %s", e.message);
    } else {
        if (how != DC_OWN_READ) {
            /* the rule is in place: a set that waited for its copy would fire it */
            if (tsl_tensor_set(t, host, 0, nb, &e) != TSL_SUCCESS)
                drill_why(why, sizeof why, "the upload itself failed: %s", e.message);
            else if (tsl_backend_injected(d->be, TSL_FAULT_COPYLOST) != fired0)
                drill_why(why, sizeof why, "the upload waited for its copy (it should be left in flight)");
        }
        tsl_error_clear(&e);
        if (how == DC_BY_COMPUTE) {
            st = drill_direct(d, &e);
        } else if (how == DC_BY_SET) {
            st = tsl_tensor_set(other, host2, 0, nb2, &e);
        } else {
            size_t no = tsl_nbytes(d->g1.out);
            void *o = malloc(no);
            st = o ? tsl_tensor_get(how == DC_OWN_READ ? t : d->g1.out, how == DC_OWN_READ ? host : o, 0,
                                    how == DC_OWN_READ ? nb : no, &e)
                   : TSL_ALLOC_FAILED;
            free(o);
        }
        uint64_t fired = tsl_backend_injected(d->be, TSL_FAULT_COPYLOST) - fired0;
        tsl_backend_inject_clear(d->be);
        if (fired != 1) drill_why(why, sizeof why, "the fault fired %llu times, not once", (unsigned long long)fired);
        if (st != TSL_DEVICE_LOST)
            drill_why(why, sizeof why, "status %s, expected DEVICE_LOST", tsl_status_str(st));
        if (strcmp(e.op, "copy") != 0 || strcmp(e.tensor, t->name) != 0 || e.node != -1)
            drill_why(why, sizeof why, "the record names '%s' '%s' node %d, not the copy of '%s'", e.op, e.tensor,
                      e.node, t->name);
        if (!e.backend[0]) drill_why(why, sizeof why, "the record names no backend");
        if (st == TSL_DEVICE_LOST) drill_check_latched(d, &e, why, sizeof why);
        if (tsl_backend_is_lost(d->be)) drill_why(why, sizeof why, "the backend is still lost");
        drill_check_next(d, why, sizeof why);
    }
    tsl_backend_inject_clear(d->be);
    free(host);
    free(host2);
    drill_row(d, rule, why, drill_live_all(d) != live0, &e);
}

/* copylost: a device lost where a copy's completion is waited for. Only a
 * backend that copies through staging waits for copies (drill_class_run
 * forces that path on a device whose memory the host maps); the CPU
 * copies with memcpy and has no such point (drill_class_applies). Each
 * input and the output projection's weight uploaded and found by the next
 * compute; one upload found by the next read, one by the next set; and a
 * read of the output, found by its own call. */
static void drill_copylost(drill *d) {
    drill_model *m = &d->m;
    tsl_tensor *up[] = {m->tokens, m->pos, m->mask, m->output};
    int n = (int)(sizeof up / sizeof up[0]);
    drill_plan(d, drill_count_picks(d, n) + 3);
    for (int k = 0; k < n; k++)
        if (drill_pick(d, k, n)) drill_copy_row(d, DC_BY_COMPUTE, up[k], NULL);
    drill_copy_row(d, DC_BY_READ, m->mask, NULL);
    drill_copy_row(d, DC_BY_SET, m->pos, m->tokens);
    drill_copy_row(d, DC_OWN_READ, d->g1.out, NULL);
}

static void drill_abort(drill *d) {
    const tsl_graph *g = d->g1.g;
    int n = 0, first = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (drill_is_compute(g->nodes[i])) {
            if (first < 0)
                first = i; /* asked between nodes: nothing before the first */
            else
                n++;
        }
    drill_plan(d, drill_count_picks(d, n));
    char rule[96];
    for (int i = first + 1, k = 0; i < g->n_nodes; i++) {
        if (!drill_is_compute(g->nodes[i])) continue;
        if (drill_pick(d, k++, n)) {
            snprintf(rule, sizeof rule, "abort@node=%d,times=1", i);
            drill_direct_row(d, rule, TSL_ABORTED, i, NULL, true);
        }
    }
}

static void drill_nobuf(drill *d) {
    const tsl_graph *g = d->g1.g;
    int nn = 0;
    for (int i = 0; i < g->n_nodes; i++) nn += drill_is_compute(g->nodes[i]);
    drill_plan(d, drill_count_picks(d, nn) + drill_count_picks(d, g->n_leafs));
    char rule[160];
    for (int i = 0, k = 0; i < g->n_nodes; i++) {
        const tsl_tensor *t = g->nodes[i];
        if (!drill_is_compute(t) || !drill_pick(d, k++, nn)) continue;
        snprintf(rule, sizeof rule, "nobuf@tensor=%s,times=1", t->name);
        drill_direct_row(d, rule, TSL_FAILED, i, t->name, false);
    }
    /* leafs: weights and inputs, missing at their first reader */
    for (int j = 0; j < g->n_leafs; j++) {
        const tsl_tensor *w = g->leafs[j];
        if (!drill_pick(d, j, g->n_leafs)) continue;
        int reader = -1;
        for (int i = 0; i < g->n_nodes && reader < 0; i++)
            for (int s = 0; s < TSL_MAX_SRC; s++)
                if (g->nodes[i]->src[s] == w) reader = i;
        snprintf(rule, sizeof rule, "nobuf@tensor=%s,times=1", w->name);
        drill_direct_row(d, rule, TSL_FAILED, reader, w->name, false);
    }
}

/* A fresh backend of the kind under test, a model and a graph on it: for
 * allocations that happen once per backend. */
typedef struct drill_fresh {
    tsl_backend *be;
    drill_model m;
    drill_graph g;
    tsl_gallocr *ga;
} drill_fresh;

static void drill_fresh_free(drill_fresh *f) {
    tsl_gallocr_free(f->ga);
    drill_graph_free(&f->g);
    drill_model_free(&f->m);
    tsl_backend_free(f->be);
    memset(f, 0, sizeof *f);
}

static void drill_alloc(drill *d) {
    drill_plan(d, 3);
    char rule[96], why[512];
    tsl_error e, e2;

    /* 1. the weights buffer */
    why[0] = 0;
    tsl_error_clear(&e);
    int live0 = drill_live_all(d);
    uint64_t fired0 = tsl_backend_injected(d->be, TSL_FAULT_ALLOC);
    snprintf(rule, sizeof rule, "alloc@bytes=%zu,times=1", tsl_buffer_size(d->m.buf));
    if (tsl_backend_inject(d->be, rule, &e) != TSL_SUCCESS) drill_why(why, sizeof why, "rule refused: %s", e.message);
    drill_model m2;
    tsl_status st = why[0] ? TSL_FAILED : drill_model_new(&m2, d->be, d->n_tok, &e);
    tsl_backend_inject_clear(d->be);
    if (st == TSL_SUCCESS) drill_model_free(&m2);
    if (!why[0]) {
        if (tsl_backend_injected(d->be, TSL_FAULT_ALLOC) - fired0 != 1)
            drill_why(why, sizeof why, "the fault did not fire once");
        if (st != TSL_ALLOC_FAILED)
            drill_why(why, sizeof why, "status %s, expected ALLOC_FAILED", tsl_status_str(st));
        drill_graph g2;
        memset(&g2, 0, sizeof g2);
        tsl_gallocr *ga2 = tsl_gallocr_new(d->be);
        tsl_error_clear(&e2);
        st = drill_model_new(&m2, d->be, d->n_tok, &e2);
        if (st != TSL_SUCCESS) {
            drill_why(why, sizeof why, "the next model allocation failed: %s", e2.message);
        } else {
            if (!ga2 || !drill_graph_build(&g2, &m2))
                drill_why(why, sizeof why, "could not build the graph");
            else if ((st = tsl_gallocr_alloc_graph(ga2, g2.g, &e2)) != TSL_SUCCESS ||
                     (st = tsl_backend_graph_compute(d->be, g2.g, &e2)) != TSL_SUCCESS)
                drill_why(why, sizeof why, "the next compute failed: %s", e2.message);
            else
                drill_same(d, g2.out, why, sizeof why);
            drill_graph_free(&g2);
            drill_model_free(&m2);
        }
        tsl_gallocr_free(ga2);
    }
    drill_row(d, rule, why, drill_live_all(d) != live0, &e);

    /* 2. the graph allocator's buffer */
    why[0] = 0;
    tsl_error_clear(&e);
    live0 = drill_live_all(d);
    fired0 = tsl_backend_injected(d->be, TSL_FAULT_ALLOC);
    snprintf(rule, sizeof rule, "alloc@bytes=%zu,times=1", tsl_gallocr_peak(d->ga));
    drill_graph g2;
    memset(&g2, 0, sizeof g2);
    tsl_gallocr *ga2 = tsl_gallocr_new(d->be);
    if (!ga2 || !drill_graph_build(&g2, &d->m)) {
        drill_why(why, sizeof why, "could not build the graph");
    } else if (tsl_backend_inject(d->be, rule, &e) != TSL_SUCCESS) {
        drill_why(why, sizeof why, "rule refused: %s", e.message);
    } else {
        st = tsl_gallocr_alloc_graph(ga2, g2.g, &e);
        tsl_backend_inject_clear(d->be);
        if (tsl_backend_injected(d->be, TSL_FAULT_ALLOC) - fired0 != 1)
            drill_why(why, sizeof why, "the fault did not fire once");
        if (st != TSL_ALLOC_FAILED)
            drill_why(why, sizeof why, "status %s, expected ALLOC_FAILED", tsl_status_str(st));
        tsl_error_clear(&e2);
        if ((st = tsl_gallocr_alloc_graph(ga2, g2.g, &e2)) != TSL_SUCCESS ||
            (st = tsl_backend_graph_compute(d->be, g2.g, &e2)) != TSL_SUCCESS)
            drill_why(why, sizeof why, "the next compute failed: %s", e2.message);
        else
            drill_same(d, g2.out, why, sizeof why);
    }
    tsl_backend_inject_clear(d->be);
    tsl_gallocr_free(ga2);
    drill_graph_free(&g2);
    drill_row(d, rule, why, drill_live_all(d) != live0, &e);

    /* 3. the first allocation inside a compute (the CPU's scratch): on a
     * fresh backend, where the first compute has to make it */
    why[0] = 0;
    tsl_error_clear(&e);
    snprintf(rule, sizeof rule, "alloc@compute=1,times=1");
    drill_fresh f;
    memset(&f, 0, sizeof f);
    f.be = drill_backend_new(d->kind, d->o.threads, &e);
    bool leaked = false;
    if (!f.be || drill_model_new(&f.m, f.be, d->n_tok, &e) != TSL_SUCCESS || !drill_graph_build(&f.g, &f.m) ||
        !(f.ga = tsl_gallocr_new(f.be)) || tsl_gallocr_alloc_graph(f.ga, f.g.g, &e) != TSL_SUCCESS) {
        drill_why(why, sizeof why, "could not set up a fresh backend: %s", e.message);
    } else if (tsl_backend_inject(f.be, rule, &e) != TSL_SUCCESS) {
        drill_why(why, sizeof why, "rule refused: %s", e.message);
    } else {
        st = tsl_backend_graph_compute(f.be, f.g.g, &e);
        tsl_backend_inject_clear(f.be);
        uint64_t fired = tsl_backend_injected(f.be, TSL_FAULT_ALLOC);
        if (fired == 0 && st == TSL_SUCCESS) {
            drill_fresh_free(&f);
            drill_skip(d, rule, "this backend allocates nothing inside a compute");
            return;
        }
        if (fired != 1) drill_why(why, sizeof why, "the fault fired %llu times, not once", (unsigned long long)fired);
        if (st != TSL_ALLOC_FAILED)
            drill_why(why, sizeof why, "status %s, expected ALLOC_FAILED", tsl_status_str(st));
        tsl_error_clear(&e2);
        if ((st = tsl_gallocr_alloc_graph(f.ga, f.g.g, &e2)) != TSL_SUCCESS ||
            (st = tsl_backend_graph_compute(f.be, f.g.g, &e2)) != TSL_SUCCESS)
            drill_why(why, sizeof why, "the next compute failed: %s", e2.message);
        else
            drill_same(d, f.g.out, why, sizeof why);
    }
    if (f.be) {
        tsl_gallocr_free(f.ga);
        f.ga = NULL;
        drill_graph_free(&f.g);
        drill_model_free(&f.m);
        leaked = drill_live(f.be) != 0;
    }
    drill_fresh_free(&f);
    drill_row(d, rule, why, leaked, &e);
}

/* Kernel names the graph uses, and the first node needing each: inject a
 * kernel fault at each compute node in turn and read the record. */
static int drill_find_kernels(drill *d, char (*names)[64], int *first) {
    const tsl_graph *g = d->g1.g;
    int n = 0;
    char rule[160];
    for (int i = 0; i < g->n_nodes && n < DR_MAX_KERNELS; i++) {
        if (!drill_is_compute(g->nodes[i])) continue;
        snprintf(rule, sizeof rule, "kernel@tensor=%s,times=1", g->nodes[i]->name);
        tsl_error e;
        tsl_error_clear(&e);
        uint64_t fired0 = tsl_backend_injected(d->be, TSL_FAULT_KERNEL);
        tsl_status st = tsl_backend_inject(d->be, rule, &e);
        if (st == TSL_SUCCESS) st = drill_direct(d, &e);
        tsl_backend_inject_clear(d->be);
        bool fired = tsl_backend_injected(d->be, TSL_FAULT_KERNEL) != fired0;
        tsl_error r;
        tsl_backend_recover(d->be, &r); /* forget the failure: kernels are rebuilt */
        /* a backend that builds a kernel once per compute built this node's
         * kernel at an earlier node, whose probe named it already */
        if (!fired && st == TSL_SUCCESS) continue;
        if (st != TSL_FAILED || !e.kernel[0]) {
            char line[600];
            drill_line(&e, line, sizeof line);
            fprintf(d->detail, "  kernel %-44s could not learn the kernel of node %d: %s\n", rule, i, line);
            return -1;
        }
        bool seen = false;
        for (int k = 0; k < n && !seen; k++) seen = strcmp(names[k], e.kernel) == 0;
        if (seen) continue;
        snprintf(names[n], 64, "%s", e.kernel);
        first[n++] = i;
    }
    return n;
}

/* Where each node of the scheduler's last plan ran: DR_ON_BE, DR_ON_FB, or
 * DR_ON_NONE for a node no split covers. */
enum { DR_ON_NONE = 0, DR_ON_BE = 1, DR_ON_FB = 2 };

static void drill_placement(const drill *d, const tsl_sched *s, int n_nodes, signed char *where) {
    memset(where, DR_ON_NONE, (size_t)n_nodes);
    for (int sp = 0; sp < tsl_sched_n_splits(s); sp++) {
        int fn = 0, nn = 0;
        tsl_backend *b = tsl_sched_split_backend(s, sp, &fn, &nn);
        signed char on = b == d->be ? DR_ON_BE : b == d->fb ? DR_ON_FB : DR_ON_NONE;
        for (int i = fn; i < fn + nn && i < n_nodes; i++)
            if (i >= 0) where[i] = on;
    }
}

/* What computed a node placed on `on`, for comparing placements: a backend
 * under test that is a twin of the fallback (a second CPU backend with as
 * many threads: same kernels, same arithmetic) counts as the fallback. Host
 * memory does not tell those two apart, so for them "the same placement"
 * can only mean the same engine. */
static int drill_engine(const drill *d, signed char on) {
    bool twin = !strcmp(tsl_backend_name(d->be), tsl_backend_name(d->fb)) &&
                tsl_backend_cpu_threads(d->be) == tsl_backend_cpu_threads(d->fb);
    return on == DR_ON_BE && twin ? DR_ON_FB : on;
}

/* The output of the scheduler's last compute, or NULL (why says why). */
static float *drill_read(const tsl_tensor *out, char *why, size_t n) {
    size_t nb = tsl_nbytes(out);
    float *r = malloc(nb);
    tsl_error e;
    tsl_error_clear(&e);
    if (!r || tsl_tensor_get(out, r, 0, nb, &e) != TSL_SUCCESS) {
        drill_why(why, n, "could not read the output: %s", r ? e.message : "out of memory");
        free(r);
        return NULL;
    }
    return r;
}

/* The fault-free result of the graph with a given placement, for the kernel
 * rows. After a kernel failure the scheduler runs that kernel's ops on the
 * CPU, and the CPU sums in another order (and quantizes activations for
 * quantized products), so the honest reference is the same placement
 * without any fault, not the all-GPU run. The placement is made by a means
 * other than the fault: every compute node `where` puts on the fallback is
 * placed by the drill in a buffer of the fallback (host memory), and the
 * scheduler runs a node its owner placed where its memory can be used; the
 * other nodes go where they would anyway. The plan that results must be
 * `where`, node for node (up to twins, drill_engine), or the reference is
 * refused. Everything made here is freed before returning. Returns the
 * output (malloc'd) or NULL. */
static float *drill_pinned_reference(drill *d, const signed char *where, char *why, size_t n) {
    drill_graph g3;
    tsl_buffer *pin = NULL;
    tsl_sched *s3 = NULL;
    float *r = NULL;
    tsl_error e;
    tsl_error_clear(&e);
    if (!drill_graph_build(&g3, &d->m)) {
        drill_why(why, n, "could not build the graph of the reference");
        drill_graph_free(&g3);
        return NULL;
    }
    const tsl_graph *g = g3.g;
    size_t align = tsl_backend_alignment(d->fb), total = 0;
    if (align == 0) align = 64;
    for (int i = 0; i < g->n_nodes; i++)
        if (where[i] == DR_ON_FB && drill_is_compute(g->nodes[i]) && !g->nodes[i]->view_src)
            total += (tsl_nbytes(g->nodes[i]) + align - 1) / align * align;
    if (total > 0 && !(pin = tsl_buffer_alloc(d->fb, total, &e))) {
        drill_why(why, n, "could not allocate the reference's fallback buffer: %s", e.message);
        goto done;
    }
    size_t off = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        tsl_tensor *t = g->nodes[i];
        if (where[i] != DR_ON_FB || !drill_is_compute(t) || t->view_src) continue;
        if (tsl_buffer_place(pin, t, off, &e) != TSL_SUCCESS) {
            drill_why(why, n, "could not place '%s' for the reference: %s", t->name, e.message);
            goto done;
        }
        off += (tsl_nbytes(t) + align - 1) / align * align;
    }
    tsl_backend *list[2] = {d->be, d->fb};
    s3 = tsl_sched_new(list, 2, (tsl_sched_params){0}, &e);
    if (!s3 || tsl_sched_compute(s3, g3.g, &e) != TSL_SUCCESS) {
        char line[600];
        drill_line(&e, line, sizeof line);
        drill_why(why, n, "the fault-free compute with the same placement failed: %s", line);
        goto done;
    }
    signed char *w3 = malloc((size_t)g->n_nodes);
    if (!w3) {
        drill_why(why, n, "out of memory");
        goto done;
    }
    drill_placement(d, s3, g->n_nodes, w3);
    int differ = -1;
    for (int i = 0; i < g->n_nodes && differ < 0; i++)
        if (drill_engine(d, w3[i]) != drill_engine(d, where[i])) differ = i;
    free(w3);
    if (differ >= 0)
        drill_why(why, n, "the reference could not be given the same placement (node %d '%s')", differ,
                  g->nodes[differ]->name);
    else
        r = drill_read(g3.out, why, n);
done:
    tsl_sched_free(s3);
    tsl_buffer_free(pin);
    drill_graph_free(&g3);
    return r;
}

/* A loose check that a mixed-placement result is still the same function
 * of the inputs: within DR_MIXED_TOL of the all-GPU reference's largest
 * magnitude. It only guards against a fallback path that is broken the same
 * way in both runs compared bit for bit; the bit-for-bit comparison with the
 * same-placement reference is the check. (Measured on lavapipe: at most
 * 1.3% of the largest magnitude, from the CPU's quantized activations in
 * Q4_0/Q8_0 products.) */
#define DR_MIXED_TOL 0.05
static void drill_near_ref(const drill *d, const float *r, char *why, size_t n) {
    size_t cnt = d->ref_bytes / sizeof(float);
    double big = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < cnt; i++) big = fmax(big, fabs((double)d->ref[i]));
    for (size_t i = 0; i < cnt; i++) {
        double diff = fabs((double)r[i] - (double)d->ref[i]);
        if (!(diff <= worst)) worst = diff, at = i; /* NaN counts as worst */
    }
    if (!(worst <= DR_MIXED_TOL * big))
        drill_why(why, n, "the mixed-placement result is far from the all-GPU one (at %zu: %g, not %g)", at,
                  (double)r[at], (double)d->ref[at]);
}

/* A scheduler over (be, fb) and a graph of its own: a graph whose nodes
 * hold addresses from a scheduler freed since is not reused. */
typedef struct drill_sched {
    drill_graph g;
    tsl_sched *s;
} drill_sched;

static bool drill_sched_new(drill *d, drill_sched *ds, tsl_error *e) {
    memset(ds, 0, sizeof *ds);
    if (!drill_graph_build(&ds->g, &d->m)) {
        snprintf(e->message, sizeof e->message, "could not build the graph");
        return false;
    }
    tsl_backend *list[2] = {d->be, d->fb};
    ds->s = tsl_sched_new(list, 2, (tsl_sched_params){0}, e);
    return ds->s != NULL;
}

static void drill_sched_free(drill_sched *ds) {
    tsl_sched_free(ds->s);
    drill_graph_free(&ds->g);
    memset(ds, 0, sizeof *ds);
}

/* One kernel row: break kernel `name` (first needed by node `first`), check
 * the failure, then the scheduler's next compute: it must succeed, with
 * exactly the ops whose kernel failed on the fallback, and equal the
 * fault-free compute of that same placement bit for bit. The scheduler is
 * freed before the buffers are counted: its allocators' buffers are its
 * own, not the row's. */
static void drill_kernel_row(drill *d, const char *name, int first) {
    char rule[128], why[512] = "";
    snprintf(rule, sizeof rule, "kernel@name=%s,times=1", name);
    tsl_error e, r;
    tsl_error_clear(&e);
    int live0 = drill_live_all(d);
    if (d->o.plant_leak && !d->planted && d->n_tok == DR_TOK) /* the self-check: this row must be reported leaked */
        d->planted = tsl_buffer_alloc(d->fb, 4096, &r);
    uint64_t fired0 = tsl_backend_injected(d->be, TSL_FAULT_KERNEL);
    tsl_backend_recover(d->be, &r); /* built kernels are dropped: the next use builds */
    drill_sched ds;
    if (!drill_sched_new(d, &ds, &e)) {
        drill_why(why, sizeof why, "could not make the scheduler: %s", e.message);
        drill_sched_free(&ds);
        drill_row(d, rule, why, drill_live_all(d) != live0, &e);
        return;
    }
    tsl_sched *s = ds.s;
    const tsl_graph *g = ds.g.g; /* gone with ds */
    tsl_status st = tsl_backend_inject(d->be, rule, &e);
    if (st == TSL_SUCCESS) st = tsl_sched_compute(s, ds.g.g, &e);
    tsl_backend_inject_clear(d->be);
    if (tsl_backend_injected(d->be, TSL_FAULT_KERNEL) - fired0 != 1)
        drill_why(why, sizeof why, "the fault did not fire once");
    if (st != TSL_FAILED) drill_why(why, sizeof why, "status %s, expected FAILED", tsl_status_str(st));
    if (strcmp(e.kernel, name) != 0)
        drill_why(why, sizeof why, "the record names kernel '%s', not '%s'", e.kernel, name);
    if (e.node != first) drill_why(why, sizeof why, "the record names node %d, not %d", e.node, first);
    if (e.split < 0 || tsl_sched_split_backend(s, e.split, NULL, NULL) != d->be)
        drill_why(why, sizeof why, "the record names split %d, not a split of the backend under test", e.split);
    /* the failure is cached: the next compute runs those ops on the fallback */
    tsl_error e2;
    tsl_error_clear(&e2);
    signed char *where = malloc((size_t)g->n_nodes);
    float *got = NULL;
    int moved = 0; /* compute nodes on the fallback */
    st = tsl_sched_compute(s, ds.g.g, &e2);
    if (!where) {
        drill_why(why, sizeof why, "out of memory");
    } else if (st != TSL_SUCCESS) {
        char line[600];
        drill_line(&e2, line, sizeof line);
        drill_why(why, sizeof why, "the next compute through the scheduler failed: %s", line);
    } else {
        drill_placement(d, s, g->n_nodes, where);
        if (where[first] != DR_ON_FB) drill_why(why, sizeof why, "node %d did not move to the fallback", first);
        /* exactly the ops the backend now refuses moved, nothing else */
        for (int i = 0; i < g->n_nodes; i++) {
            if (!drill_is_compute(g->nodes[i])) continue;
            moved += where[i] == DR_ON_FB;
            bool refused = !tsl_backend_supports_op(d->be, g->nodes[i]);
            if (refused != (where[i] == DR_ON_FB))
                drill_why(why, sizeof why, "node %d '%s' ran on the %s although the backend %s it", i,
                          g->nodes[i]->name, where[i] == DR_ON_FB ? "fallback" : "backend under test",
                          refused ? "refuses" : "supports");
        }
        got = drill_read(ds.g.out, why, sizeof why);
    }
    drill_sched_free(&ds);
    if (tsl_backend_recover(d->be, &r) != TSL_SUCCESS) /* forgets the failure */
        drill_why(why, sizeof why, "recover failed: %s", r.message);
    if (got && !why[0]) {
        float *want = drill_pinned_reference(d, where, why, sizeof why);
        if (want && memcmp(got, want, d->ref_bytes) != 0) {
            size_t bad = 0, at = 0, cnt = d->ref_bytes / sizeof(float);
            for (size_t i = cnt; i-- > 0;)
                if (memcmp(&got[i], &want[i], sizeof(float)) != 0) bad++, at = i;
            drill_why(why, sizeof why,
                      "wrong result: %zu of %zu values differ from the fault-free run with the same placement "
                      "(first at %zu: %g, not %g)",
                      bad, cnt, at, (double)got[at], (double)want[at]);
        }
        if (want) {
            drill_near_ref(d, got, why, sizeof why);
            size_t differ = 0, cnt = d->ref_bytes / sizeof(float);
            for (size_t i = 0; i < cnt; i++) differ += memcmp(&got[i], &d->ref[i], sizeof(float)) != 0;
            snprintf(d->note, sizeof d->note,
                     "%d node(s) on the fallback; the result equals that placement's fault-free run, and "
                     "differs from the all-%s run in %zu of %zu values", moved, d->kind, differ, cnt);
        }
        free(want);
    }
    free(got);
    free(where);
    drill_row(d, rule, why, drill_live_all(d) != live0, &e);
}

static void drill_kernel(drill *d) {
    char names[DR_MAX_KERNELS][64];
    int first[DR_MAX_KERNELS];
    int n = drill_find_kernels(d, names, first);
    char why[512] = "";
    tsl_error e;
    tsl_error_clear(&e);
    if (n > 0) {
        /* the scheduler's clean compute puts everything on the backend under
         * test and is the direct compute's result */
        drill_sched ds;
        tsl_status st = drill_sched_new(d, &ds, &e) ? tsl_sched_compute(ds.s, ds.g.g, &e) : TSL_FAILED;
        if (st != TSL_SUCCESS) {
            char line[600];
            drill_line(&e, line, sizeof line);
            drill_why(why, sizeof why, "the scheduler's clean compute failed: %s", line);
        } else {
            drill_same(d, ds.g.out, why, sizeof why);
            for (int sp = 0; sp < tsl_sched_n_splits(ds.s); sp++)
                if (tsl_sched_split_backend(ds.s, sp, NULL, NULL) != d->be)
                    drill_why(why, sizeof why, "the scheduler's clean compute used the fallback (split %d)", sp);
        }
        drill_sched_free(&ds);
    }
    if (n <= 0 || why[0]) {
        /* counted as one wrong row: the class could not run */
        drill_plan(d, 1);
        if (n <= 0) drill_why(why, sizeof why, "no kernel names found");
        drill_row(d, "kernel", why, false, &e);
        return;
    }
    drill_plan(d, drill_count_picks(d, n));
    for (int k = 0; k < n; k++)
        if (drill_pick(d, k, n)) drill_kernel_row(d, names[k], first[k]);
}

/* Free everything; returns how many buffers were still alive once the
 * drill's own were freed (each is a leak). */
static int drill_teardown(drill *d) {
    tsl_buffer_free(d->planted);
    d->planted = NULL;
    tsl_gallocr_free(d->ga);
    drill_graph_free(&d->g1);
    drill_model_free(&d->m);
    int left = drill_live(d->be) + drill_live(d->fb);
    if (left > 0) return left; /* freeing a backend with live buffers is refused */
    tsl_backend_free(d->fb);
    tsl_backend_free(d->be);
    free(d->ref);
    d->ga = NULL;
    d->fb = d->be = NULL;
    d->ref = NULL;
    return 0;
}

/* Backends, model, graph and the fault-free reference. */
static bool drill_setup(drill *d) {
    tsl_error e;
    tsl_error_clear(&e);
    d->be = drill_backend_new(d->kind, d->o.threads, &e);
    if (!d->be) goto fail;
    d->fb = tsl_backend_cpu_new(d->o.threads, &e);
    if (!d->fb) goto fail;
    if (drill_model_new(&d->m, d->be, d->n_tok, &e) != TSL_SUCCESS) goto fail;
    if (!drill_graph_build(&d->g1, &d->m)) {
        snprintf(e.message, sizeof e.message, "graph: %.200s", tsl_ctx_error(d->g1.ctx));
        goto fail;
    }
    d->ga = tsl_gallocr_new(d->be);
    if (!d->ga || drill_direct(d, &e) != TSL_SUCCESS) goto fail;
    d->ref_bytes = tsl_nbytes(d->g1.out);
    d->ref = malloc(d->ref_bytes);
    if (!d->ref || tsl_tensor_get(d->g1.out, d->ref, 0, d->ref_bytes, &e) != TSL_SUCCESS) goto fail;
    for (size_t i = 0; i < d->ref_bytes / sizeof(float); i++)
        if (!isfinite(d->ref[i])) {
            snprintf(e.message, sizeof e.message, "the fault-free output is not finite at %zu", i);
            goto fail;
        }
    return true;
fail:;
    char line[700];
    drill_line(&e, line, sizeof line);
    fprintf(stderr, "tensile drill: %s: the fault-free setup failed: %s\n", d->kind, line);
    drill_teardown(d);
    return false;
}

static void (*const DRILL_CLASS_FN[TSL_FAULT_CLASS_COUNT])(drill *) = {
    [TSL_FAULT_RETRY] = drill_retry, [TSL_FAULT_LOST] = drill_lost,   [TSL_FAULT_NOBUF] = drill_nobuf,
    [TSL_FAULT_KERNEL] = drill_kernel, [TSL_FAULT_ALLOC] = drill_alloc, [TSL_FAULT_ABORT] = drill_abort,
    [TSL_FAULT_COPYLOST] = drill_copylost,
};

/* Does the class have injection points on this kind of backend? The CPU
 * waits for no copy (its copies are memcpy): copylost rules never fire
 * there, and its drill has no copylost row. */
static bool drill_class_applies(const char *kind, tsl_fault_class cls) {
    return cls != TSL_FAULT_COPYLOST || strcmp(kind, "cpu") != 0;
}

/* Run one class here. Returns false if the setup failed. */
static bool drill_class_run(const drill_opts *o, const char *kind, tsl_fault_class cls, int fd, drill_counts *out) {
    drill d;
    memset(&d, 0, sizeof d);
    d.o = *o;
    d.kind = kind;
    d.cls = cls;
    d.fd = fd;
    d.detail = o->json ? stderr : stdout;
    /* copies wait for their completion only through staging: force it where
     * the host maps device memory (lavapipe, an integrated GPU), as a
     * discrete GPU copies anyway; this process runs the one class */
    if (cls == TSL_FAULT_COPYLOST) setenv("TSL_VULKAN_STAGING", "1", 1);
    /* the graph of a prompt, then of one token (a decode step: one-column
     * products, which a GPU backend computes with other kernels and fusions),
     * each on backends of its own */
    static const int shapes[] = {DR_TOK, 1};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        d.n_tok = shapes[si];
        d.n_skipped = 0;
        const int injected = d.c.injected;
        if (!drill_setup(&d)) return false;
        DRILL_CLASS_FN[cls](&d);
        if (d.c.injected == injected) {
            /* every point was skipped: the injection site itself is broken */
            char why[128];
            snprintf(why, sizeof why, "no injection point of this class fired (%d skipped)", d.n_skipped);
            drill_row(&d, tsl_fault_class_name(cls), why, false, NULL);
        }
        int left = drill_teardown(&d);
        if (left > 0) {
            fprintf(d.detail, "  %s: %d buffer(s) still alive after the drill freed its own\n",
                    tsl_fault_class_name(cls), left);
            d.c.leaked++;
            drill_send(&d, (drill_msg){.kind = 1, .n = 0, .leaked = 1});
            break; /* its backends are still held */
        }
    }
    fflush(d.detail);
    *out = d.c;
    return true;
}

/* LeakSanitizer, when the build has it: check for leaks before the child
 * exits, so a leak is told apart from a sanitizer's report of a crash (both
 * would otherwise end the process with the same status). */
#if defined(__GNUC__)
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));
#endif
#define DRILL_EXIT_SETUP 3
#define DRILL_EXIT_LEAKS 4
#define DRILL_EXIT_EXEC 5  /* the child could not exec the drill */

static bool drill_heap_leaked(void) {
#if defined(__GNUC__)
    if (__lsan_do_recoverable_leak_check) return __lsan_do_recoverable_leak_check() != 0;
#endif
    return false;
}

static bool drill_kind_built(const char *kind) {
    if (!strcmp(kind, "cpu")) return true;
#ifdef TSL_HAVE_VULKAN
    if (!strcmp(kind, "vulkan")) return true;
#endif
    return false;
}

/* The hidden child mode (`tensile drill --child KIND CLASS --fd N ...`):
 * run one class, rows to fd, and end the process with the status the parent
 * reads. Never returns. */
static void drill_child_main(const drill_opts *o, const char *kind, const char *cls_name, int fd) {
    /* a closed stdout (`| head`) is not a crash of the drill */
    signal(SIGPIPE, SIG_IGN);
    unsetenv("TSL_FAULT"); /* the parent dropped it; never inherit one */
    int cls = -1;
    for (int c = 0; c < TSL_FAULT_CLASS_COUNT; c++)
        if (!strcmp(cls_name, tsl_fault_class_name((tsl_fault_class)c))) cls = c;
    bool ok = false;
    if (cls < 0 || !drill_kind_built(kind) || fd < 0 || !drill_class_applies(kind, (tsl_fault_class)cls))
        fprintf(stderr, "tensile drill: bad child arguments (%s %s, fd %d)\n", kind, cls_name, fd);
    else {
        drill_counts c;
        ok = drill_class_run(o, kind, (tsl_fault_class)cls, fd, &c);
    }
    if (fd >= 0) close(fd);
    tsl_log_set(NULL, NULL);
    fflush(stdout);
    fflush(stderr);
    if (drill_heap_leaked()) _exit(DRILL_EXIT_LEAKS); /* reported; skip the check at exit */
    exit(ok ? 0 : DRILL_EXIT_SETUP);
}

/* Run one class in a fresh process: fork, then exec this same program in
 * the hidden child mode. A plain fork would hand the child the parent's
 * driver state (a Vulkan instance made by an earlier look at the devices,
 * or by `tensile doctor` building kernels), which NVIDIA's driver does not
 * survive; a fresh image starts with none. A crash there is counted, not
 * fatal. */
static void drill_class_spawn(const drill_opts *o, const char *kind, tsl_fault_class cls, drill_counts *out) {
    memset(out, 0, sizeof *out);
    int p[2];
    fflush(stdout);
    fflush(stderr);
    if (pipe(p) != 0) {
        fprintf(stderr, "tensile drill: %s %s: could not make a pipe\n", kind, tsl_fault_class_name(cls));
        out->injected = out->wrong = 1;
        return;
    }
    /* the read end must not reach the child: it would keep the pipe open */
    fcntl(p[0], F_SETFD, FD_CLOEXEC);
    /* everything the child needs is made before the fork: between fork and
     * exec only async-signal-safe calls are made */
    char a_kind[16], a_cls[16], a_fd[16], a_thr[16];
    snprintf(a_kind, sizeof a_kind, "%s", kind);
    snprintf(a_cls, sizeof a_cls, "%s", tsl_fault_class_name(cls));
    snprintf(a_fd, sizeof a_fd, "%d", p[1]);
    snprintf(a_thr, sizeof a_thr, "%d", o->threads);
    char a_tensile[] = "tensile", a_drill[] = "drill", a_child[] = "--child", a_fdopt[] = "--fd",
         a_thropt[] = "--threads", a_quick[] = "--quick", a_v[] = "-v", a_json[] = "--json",
         a_plant[] = "--plant-leak";
    char *argv[16];
    int n = 0;
    argv[n++] = a_tensile;
    argv[n++] = a_drill;
    argv[n++] = a_child;
    argv[n++] = a_kind;
    argv[n++] = a_cls;
    argv[n++] = a_fdopt;
    argv[n++] = a_fd;
    argv[n++] = a_thropt;
    argv[n++] = a_thr;
    if (o->quick) argv[n++] = a_quick;
    if (o->verbose) argv[n++] = a_v;
    if (o->json) argv[n++] = a_json;
    if (o->plant_leak) argv[n++] = a_plant;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        execv("/proc/self/exe", argv);
        static const char msg[] = "tensile drill: could not exec /proc/self/exe for a drill process\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(DRILL_EXIT_EXEC);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        fprintf(stderr, "tensile drill: %s %s: could not start a drill process\n", kind, tsl_fault_class_name(cls));
        out->injected = out->wrong = 1;
        return;
    }
    int planned = -1, got = 0;
    drill_msg m;
    size_t have = 0;
    for (;;) {
        ssize_t r = read(p[0], (char *)&m + have, sizeof m - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        have += (size_t)r;
        if (have < sizeof m) continue;
        have = 0;
        if (m.kind == 0) {
            if (m.n >= 0)
                planned = (planned < 0 ? 0 : planned) + m.n;
            else
                planned += m.n; /* a point that turned out not to exist */
            continue;
        }
        got += m.n;
        out->injected += m.n;
        out->handled += m.handled;
        out->wrong += m.wrong;
        out->leaked += m.leaked;
    }
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int missing = planned > got ? planned - got : 0;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        out->crashed += missing > 0 ? missing : 1;
        out->injected += missing > 0 ? missing : 1;
        fprintf(stderr, "tensile drill: %s %s: the drill process died of signal %d (%s) after %d of %d rows\n",
                kind, tsl_fault_class_name(cls), sig, strsignal(sig), got, planned);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        int code = WEXITSTATUS(status);
        int n = missing > 0 ? missing : 1;
        if (code == DRILL_EXIT_SETUP || code == DRILL_EXIT_EXEC) {
            out->wrong += n; /* setup failed, or no process could run it; said why */
            out->injected += n;
        } else if ((code == DRILL_EXIT_LEAKS || code == 23) && missing == 0) {
            out->leaked += 1; /* the leak checker's report is above */
            fprintf(stderr, "tensile drill: %s %s: the leak checker found heap leaks\n", kind,
                    tsl_fault_class_name(cls));
        } else {
            out->crashed += n;
            out->injected += missing;
            fprintf(stderr, "tensile drill: %s %s: the drill process ended with status %d after %d of %d rows\n",
                    kind, tsl_fault_class_name(cls), code, got, planned);
        }
    }
}

/* ---- the command ------------------------------------------------------------------ */

static void drill_json_str(const char *s) { cli_json_str(stdout, s, strlen(s)); }

/* The library logs every injected fault as it would a real one; the drill
 * reports each row itself, so those lines only show with -v. */
static void drill_log(tsl_log_level level, const char *line, void *user) {
    fprintf((FILE *)user, "    log: %s\n", line);
}

static void drill_log_quiet(tsl_log_level level, const char *line, void *user) {}

static int drill_usage(FILE *f) {
    fprintf(f,
            "usage: tensile drill [--backend cpu|vulkan|all] [--json] [--quick] [-v] [--threads N]\n"
            "  inject every fault class at every injection point of a small llama-shaped graph and\n"
            "  check status, record, the next result (bit for bit) and buffers; one row per class.\n"
            "  --backend B  cpu (default), vulkan, or all backends built\n"
            "  --json       one JSON object per class and one summary object\n"
            "  --quick      at most %d injection points per list\n"
            "  -v           a line per injection\n"
            "  --threads N  CPU threads (default 2)\n"
            "exit: 0 when every injection was handled, 1 otherwise, 2 usage or backend not built\n",
            DR_QUICK_POINTS);
    return 2;
}

int cmd_drill(int argc, char **argv) {
    drill_opts o = {.backend = "cpu", .threads = 2};
    const char *child_kind = NULL, *child_cls = NULL;
    int child_fd = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            o.backend = argv[++i];
        else if (!strcmp(argv[i], "--child") && i + 2 < argc) { /* hidden: one class, see drill_class_spawn */
            child_kind = argv[++i];
            child_cls = argv[++i];
        } else if (!strcmp(argv[i], "--fd") && i + 1 < argc) /* hidden: the child's pipe */
            child_fd = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plant-leak")) /* hidden: proves a leaked buffer is counted */
            o.plant_leak = true;
        else if (!strcmp(argv[i], "--json"))
            o.json = true;
        else if (!strcmp(argv[i], "--quick"))
            o.quick = true;
        else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose"))
            o.verbose = true;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            o.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            drill_usage(stdout);
            return 0;
        } else
            return drill_usage(stderr);
    }
    if (o.threads < 1) o.threads = 1;
    if (child_kind) {
        if (o.verbose)
            tsl_log_set(drill_log, o.json ? stderr : stdout);
        else
            tsl_log_set(drill_log_quiet, NULL);
        drill_child_main(&o, child_kind, child_cls, child_fd);
    }
    /* before anything is made: the class processes inherit the environment */
    if (getenv("TSL_FAULT")) {
        fprintf(stderr, "tensile drill: ignoring TSL_FAULT: the drill injects its own faults\n");
        unsetenv("TSL_FAULT");
    }
    const char *kinds[2];
    int n_kinds = 0;
    if (!strcmp(o.backend, "all")) {
        kinds[n_kinds++] = "cpu";
#ifdef TSL_HAVE_VULKAN
        if (tsl_vulkan_device_count() > 0)
            kinds[n_kinds++] = "vulkan";
        else
            fprintf(stderr, "tensile drill: vulkan is built but no Vulkan device was found; skipping it\n");
#endif
    } else if (!strcmp(o.backend, "cpu") || !strcmp(o.backend, "vulkan")) {
        if (!drill_kind_built(o.backend)) {
            fprintf(stderr, "tensile drill: %s backend not built\n", o.backend);
            return 2;
        }
        kinds[n_kinds++] = o.backend;
    } else {
        fprintf(stderr, "tensile drill: unknown backend '%s' (cpu, vulkan, all)\n", o.backend);
        return 2;
    }

    if (o.verbose)
        tsl_log_set(drill_log, o.json ? stderr : stdout);
    else
        tsl_log_set(drill_log_quiet, NULL);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    drill_counts total = {0};
    if (!o.json) printf("%-8s %-8s %9s %8s %8s %6s %7s\n", "backend", "class", "injected", "handled", "crashed",
                        "wrong", "leaked");
    for (int b = 0; b < n_kinds; b++) {
        for (int c = 0; c < TSL_FAULT_CLASS_COUNT; c++) {
            if (!drill_class_applies(kinds[b], (tsl_fault_class)c)) continue;
            drill_counts r;
            drill_class_spawn(&o, kinds[b], (tsl_fault_class)c, &r);
            total.injected += r.injected;
            total.handled += r.handled;
            total.crashed += r.crashed;
            total.wrong += r.wrong;
            total.leaked += r.leaked;
            if (o.json) {
                printf("{\"backend\":");
                drill_json_str(kinds[b]);
                printf(",\"class\":");
                drill_json_str(tsl_fault_class_name((tsl_fault_class)c));
                printf(",\"injected\":%d,\"handled\":%d,\"crashed\":%d,\"wrong\":%d,\"leaked\":%d}\n", r.injected,
                       r.handled, r.crashed, r.wrong, r.leaked);
            } else {
                printf("%-8s %-8s %9d %8d %8d %6d %7d\n", kinds[b], tsl_fault_class_name((tsl_fault_class)c),
                       r.injected, r.handled, r.crashed, r.wrong, r.leaked);
            }
            fflush(stdout);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    char line[200];
    snprintf(line, sizeof line, "drills: %d injected, %d handled, %d crashed, %d wrong results, %d leaked",
             total.injected, total.handled, total.crashed, total.wrong, total.leaked);
    bool ok = total.injected > 0 && total.handled == total.injected && total.crashed == 0 && total.wrong == 0 &&
              total.leaked == 0;
    if (o.json) {
        printf("{\"summary\":");
        drill_json_str(line);
        printf(",\"injected\":%d,\"handled\":%d,\"crashed\":%d,\"wrong\":%d,\"leaked\":%d,\"seconds\":%.3f,"
               "\"ok\":%s}\n",
               total.injected, total.handled, total.crashed, total.wrong, total.leaked, secs, ok ? "true" : "false");
    } else {
        printf("%s\n", line);
    }
    fflush(stdout);
    tsl_log_set(NULL, NULL);
    return ok ? 0 : 1;
}
