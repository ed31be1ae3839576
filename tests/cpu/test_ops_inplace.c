/*
 * test_ops_inplace.c - the ops the graph allocator may run in place (ADD SUB
 * MUL DIV SCALE SQR SQRT SILU GELU SWIGLU RMS_NORM NORM SOFT_MAX ROPE, the
 * set core_op_can_inplace names) computed with dst->data == src0->data.
 *
 * Two ways in, for every op:
 *  - by hand: the result tensor is made in a no_alloc context and its data
 *    pointed at src0's before the compute, at 1, 2 and 3 threads (src0 is
 *    restored before each run). A kernel that writes an element before it
 *    has read everything that depends on it (a norm that scales before it
 *    has the sum, a rope that overwrites x0 before reading it for x1, a
 *    soft_max that writes exp() over its input and then re-reads it as a
 *    logit, a row split that lets one thread overwrite another's input)
 *    disagrees with the reference;
 *  - through the graph allocator: x (INPUT) -> t = cont(x) -> y = op(t, ...);
 *    the allocator must place y over t (t's last reader is y), which the
 *    test checks, then the computed y is checked against the reference.
 *
 * Tolerances are those of the op's own test file:
 *   add sub mul div scale sqr sqrt   atol 0,    rtol 1e-6
 *   silu swiglu                      atol 1e-6, rtol 1e-5
 *   gelu                             atol 1e-6, rtol 1e-4
 *   rms_norm                         atol 1e-6, rtol 1e-5
 *   norm                             atol 1e-5, rtol 1e-5 + cancellation term (test_ops_norm.c)
 *   soft_max                         atol 1e-7, rtol 1e-5
 *   rope                             atol 1e-6, rtol 1e-5 + float-angle term (test_ops_attn.c)
 */
#include "core/core.h"
#include "ref.h"

#define N_CASES 6

typedef struct ip_spec {
    tsl_op op;
    const char *name;
    double atol, rtol;
} ip_spec;

static const ip_spec SPECS[] = {
    {TSL_OP_ADD, "add", 0, 1e-6},          {TSL_OP_SUB, "sub", 0, 1e-6},
    {TSL_OP_MUL, "mul", 0, 1e-6},          {TSL_OP_DIV, "div", 0, 1e-6},
    {TSL_OP_SCALE, "scale", 0, 1e-6},      {TSL_OP_SQR, "sqr", 0, 1e-6},
    {TSL_OP_SQRT, "sqrt", 0, 1e-6},        {TSL_OP_SILU, "silu", 1e-6, 1e-5},
    {TSL_OP_GELU, "gelu", 1e-6, 1e-4},     {TSL_OP_SWIGLU, "swiglu", 1e-6, 1e-5},
    {TSL_OP_RMS_NORM, "rms_norm", 1e-6, 1e-5}, {TSL_OP_NORM, "norm", 1e-5, 1e-5},
    {TSL_OP_SOFT_MAX, "soft_max", 1e-7, 1e-5}, {TSL_OP_ROPE, "rope", 1e-6, 1e-5},
};
#define N_SPECS ((int)(sizeof SPECS / sizeof SPECS[0]))

/* One case as host arrays, so the same values can go into a context with
 * data or into tensors the graph allocator places. */
typedef struct ip_case {
    const ip_spec *spec;
    int64_t ne[4];
    float *x;
    int64_t bne[4];
    float *b; /* ADD..DIV: b (broadcast); SWIGLU: up (x's shape) */
    tsl_type mask_type;
    int64_t mne[4];
    float *mask; /* SOFT_MAX, may be NULL; F16 masks hold values already rounded to f16 */
    float scale, eps;
    tsl_rope_params rp;
    int32_t *pos;
    float *ff; /* may be NULL */
} ip_case;

typedef struct ip_tensors {
    tsl_tensor *x, *b, *mask, *pos, *ff;
} ip_tensors;

static float *rand_floats(unsigned long long *rng, int64_t n, float lo, float hi) {
    float *f = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) f[i] = test_rand_f(rng, lo, hi);
    return f;
}

static void ip_case_make(ip_case *ic, const ip_spec *spec, int c, unsigned long long *rng) {
    memset(ic, 0, sizeof *ic);
    ic->spec = spec;
    const tsl_op op = spec->op;
    if (op == TSL_OP_ROPE) {
        const int64_t hd = 2 * ref_rand_int(rng, 1, 40);
        ic->ne[0] = hd;
        ic->ne[1] = ref_rand_int(rng, 1, 8);
        ic->ne[2] = ref_rand_int(rng, 1, 11);
        ic->ne[3] = 1;
        ic->rp = tsl_rope_default((int)hd);
        if (c & 2 && hd > 2) ic->rp.n_dims = 2 * (int)ref_rand_int(rng, 1, hd / 2 - 1);
        ic->rp.mode = c & 1 ? TSL_ROPE_NEOX : TSL_ROPE_NORMAL;
        if (c & 4) {
            ic->rp.freq_scale = 0.25f;
            ic->rp.ext_factor = 1.0f;
            ic->rp.n_ctx_orig = 4096;
            ic->rp.beta_fast = 32.0f;
            ic->rp.beta_slow = 1.0f;
        }
        ic->pos = (int32_t *)malloc((size_t)ic->ne[2] * sizeof(int32_t));
        for (int64_t i = 0; i < ic->ne[2]; i++) ic->pos[i] = (int32_t)ref_rand_int(rng, 0, 100);
        if (c % 3 == 1) ic->ff = rand_floats(rng, ic->rp.n_dims / 2, 1.0f, 4.0f);
    } else {
        ref_rand_shape(rng, (int)ref_rand_int(rng, 1, 4), 1, 20000, ic->ne);
    }
    const int64_t n = ref_nel(ic->ne);
    const float lo = op == TSL_OP_SQRT ? 0.0f : op == TSL_OP_SILU || op == TSL_OP_SWIGLU ? -8.0f : -3.0f;
    ic->x = rand_floats(rng, n, lo, -lo + (op == TSL_OP_SQRT ? 4.0f : 0.0f));
    switch (op) {
    case TSL_OP_ADD: case TSL_OP_SUB: case TSL_OP_MUL: case TSL_OP_DIV:
        for (int i = 0; i < 4; i++) ic->bne[i] = ref_rand_int(rng, 0, 1) ? 1 : ic->ne[i];
        ic->b = rand_floats(rng, ref_nel(ic->bne), -2.0f, 2.0f);
        if (op == TSL_OP_DIV)
            for (int64_t i = 0; i < ref_nel(ic->bne); i++) ic->b[i] += ic->b[i] < 0 ? -0.25f : 0.25f;
        break;
    case TSL_OP_SWIGLU:
        memcpy(ic->bne, ic->ne, sizeof ic->bne);
        ic->b = rand_floats(rng, n, -3.0f, 3.0f);
        break;
    case TSL_OP_SOFT_MAX:
        ic->scale = c % 2 ? 0.125f : 1.0f;
        if (c % 3) {
            ic->mask_type = c % 3 == 1 ? TSL_TYPE_F32 : TSL_TYPE_F16;
            ic->mne[0] = ic->ne[0];
            ic->mne[1] = ic->ne[1];
            ic->mne[2] = ref_rand_int(rng, 0, 1) ? ic->ne[2] : 1;
            ic->mne[3] = ref_rand_int(rng, 0, 1) ? ic->ne[3] : 1;
            const int64_t nm = ref_nel(ic->mne);
            ic->mask = rand_floats(rng, nm, -2.0f, 2.0f);
            for (int64_t i = 0; i < nm; i++) {
                if (ref_rand_int(rng, 0, 4) == 0 || (c == 4 && (i / ic->mne[0]) % 3 == 0)) ic->mask[i] = -INFINITY;
                if (ic->mask_type == TSL_TYPE_F16) ic->mask[i] = (float)ref_round(TSL_TYPE_F16, ic->mask[i]);
            }
        }
        break;
    case TSL_OP_SCALE: ic->scale = c % 2 ? -1.5f : 0.3f; break;
    case TSL_OP_RMS_NORM: case TSL_OP_NORM: ic->eps = c % 2 ? 1e-5f : 0.1f; break;
    default: break;
    }
}

static void ip_case_free(ip_case *ic) {
    free(ic->x);
    free(ic->b);
    free(ic->mask);
    free(ic->pos);
    free(ic->ff);
}

/* The operand tensors of a case in ctx (flagged INPUT when asked). */
static bool ip_tensors_make(tsl_context *ctx, const ip_case *ic, ip_tensors *t, bool input) {
    memset(t, 0, sizeof *t);
    t->x = tsl_new_tensor_4d(ctx, TSL_TYPE_F32, ic->ne[0], ic->ne[1], ic->ne[2], ic->ne[3]);
    bool ok = t->x != NULL;
    if (ic->b) ok = ok && (t->b = tsl_new_tensor_4d(ctx, TSL_TYPE_F32, ic->bne[0], ic->bne[1], ic->bne[2], ic->bne[3]));
    if (ic->mask)
        ok = ok && (t->mask = tsl_new_tensor_4d(ctx, ic->mask_type, ic->mne[0], ic->mne[1], ic->mne[2], ic->mne[3]));
    if (ic->pos) ok = ok && (t->pos = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, ic->ne[2]));
    if (ic->ff) ok = ok && (t->ff = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, ic->rp.n_dims / 2));
    if (ok && input) {
        tsl_tensor *all[5] = {t->x, t->b, t->mask, t->pos, t->ff};
        for (int i = 0; i < 5; i++)
            if (all[i]) all[i]->flags |= TSL_FLAG_INPUT;
    }
    return ok;
}

/* Copy the case's values into the tensors (arena or backend buffer). */
static bool ip_upload(const ip_case *ic, ip_tensors *t) {
    tsl_error err;
    tsl_error_clear(&err);
    bool ok = tsl_tensor_set(t->x, ic->x, 0, (size_t)ref_nel(ic->ne) * sizeof(float), &err) == TSL_SUCCESS;
    if (t->b) ok = ok && tsl_tensor_set(t->b, ic->b, 0, (size_t)ref_nel(ic->bne) * sizeof(float), &err) == TSL_SUCCESS;
    if (t->mask) {
        const int64_t nm = ref_nel(ic->mne);
        if (ic->mask_type == TSL_TYPE_F16) {
            tsl_fp16_t *h = (tsl_fp16_t *)malloc((size_t)nm * sizeof(tsl_fp16_t));
            for (int64_t i = 0; i < nm; i++) h[i] = tsl_fp32_to_fp16(ic->mask[i]);
            ok = ok && tsl_tensor_set(t->mask, h, 0, (size_t)nm * sizeof(tsl_fp16_t), &err) == TSL_SUCCESS;
            free(h);
        } else {
            ok = ok && tsl_tensor_set(t->mask, ic->mask, 0, (size_t)nm * sizeof(float), &err) == TSL_SUCCESS;
        }
    }
    if (t->pos) ok = ok && tsl_tensor_set(t->pos, ic->pos, 0, (size_t)ic->ne[2] * sizeof(int32_t), &err) == TSL_SUCCESS;
    if (t->ff) ok = ok && tsl_tensor_set(t->ff, ic->ff, 0, (size_t)(ic->rp.n_dims / 2) * sizeof(float), &err) == TSL_SUCCESS;
    if (!ok) {
        char line[512];
        tsl_error_format(&err, line, sizeof line);
        CHECKF(0, "%s: tsl_tensor_set failed: %s", ref_case, line);
    }
    return ok;
}

/* The op under test, with src0 as its first operand. */
static tsl_tensor *ip_op(tsl_context *ctx, const ip_case *ic, tsl_tensor *src0, const ip_tensors *t) {
    switch (ic->spec->op) {
    case TSL_OP_ADD: return tsl_add(ctx, src0, t->b);
    case TSL_OP_SUB: return tsl_sub(ctx, src0, t->b);
    case TSL_OP_MUL: return tsl_mul(ctx, src0, t->b);
    case TSL_OP_DIV: return tsl_div(ctx, src0, t->b);
    case TSL_OP_SCALE: return tsl_scale(ctx, src0, ic->scale);
    case TSL_OP_SQR: return tsl_sqr(ctx, src0);
    case TSL_OP_SQRT: return tsl_sqrt(ctx, src0);
    case TSL_OP_SILU: return tsl_silu(ctx, src0);
    case TSL_OP_GELU: return tsl_gelu(ctx, src0);
    case TSL_OP_SWIGLU: return tsl_swiglu(ctx, src0, t->b);
    case TSL_OP_RMS_NORM: return tsl_rms_norm(ctx, src0, ic->eps);
    case TSL_OP_NORM: return tsl_norm(ctx, src0, ic->eps);
    case TSL_OP_SOFT_MAX: return tsl_soft_max(ctx, src0, t->mask, ic->scale);
    case TSL_OP_ROPE: return tsl_rope(ctx, src0, t->pos, t->ff, &ic->rp);
    default: return NULL;
    }
}

static double *to_double(const float *f, int64_t n) {
    double *d = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

/* The reference and the per-value magnitude for the rtol term. */
static void ip_ref(const ip_case *ic, double *ref, double *mag) {
    const int64_t n = ref_nel(ic->ne);
    double *x = to_double(ic->x, n);
    double *b = ic->b ? to_double(ic->b, ref_nel(ic->bne)) : NULL;
    const tsl_op op = ic->spec->op;
    switch (op) {
    case TSL_OP_ADD: ref_binary(REF_ADD, x, ic->ne, b, ic->bne, ref); break;
    case TSL_OP_SUB: ref_binary(REF_SUB, x, ic->ne, b, ic->bne, ref); break;
    case TSL_OP_MUL: ref_binary(REF_MUL, x, ic->ne, b, ic->bne, ref); break;
    case TSL_OP_DIV: ref_binary(REF_DIV, x, ic->ne, b, ic->bne, ref); break;
    case TSL_OP_RMS_NORM: ref_rms_norm(x, ic->ne, (double)ic->eps, ref); break;
    case TSL_OP_NORM: ref_norm(x, ic->ne, (double)ic->eps, ref, mag); break;
    case TSL_OP_SOFT_MAX: {
        double *m = ic->mask ? to_double(ic->mask, ref_nel(ic->mne)) : NULL;
        ref_soft_max(x, ic->ne, m, ic->mne, (double)ic->scale, ref);
        free(m);
        break;
    }
    case TSL_OP_ROPE: {
        double *ff = ic->ff ? to_double(ic->ff, ic->rp.n_dims / 2) : NULL;
        ref_rope(x, ic->ne, ic->pos, ff, &ic->rp, ref, mag);
        free(ff);
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) {
            const double v = x[i];
            ref[i] = op == TSL_OP_SCALE  ? v * (double)ic->scale
                     : op == TSL_OP_SQR  ? v * v
                     : op == TSL_OP_SQRT ? sqrt(v)
                     : op == TSL_OP_SILU ? ref_silu(v)
                     : op == TSL_OP_GELU ? ref_gelu(v)
                                         : ref_silu(v) * b[i]; /* SWIGLU */
        }
        break;
    }
    /* rope: fold the float-angle term k |theta| (|x0| + |x1|) mscale into mag (see test_ops_attn.c);
     * norm: the cancellation term 2^-22 (|x| + |mean|) / sqrt(var + eps) (see test_ops_norm.c) */
    const double k = op == TSL_OP_ROPE   ? (double)(ic->rp.n_dims + 8) * 0x1p-24 / ic->spec->rtol
                     : op == TSL_OP_NORM ? 0x1p-22 / ic->spec->rtol
                                         : 0.0;
    for (int64_t i = 0; i < n; i++) mag[i] = fabs(ref[i]) + (k != 0.0 ? mag[i] * k : 0.0);
    free(x);
    free(b);
}

static void describe(const ip_case *ic, int c, const char *how) {
    ref_describe("%s in place (%s) case %d: [%lld,%lld,%lld,%lld]%s%s", ic->spec->name, how, c, (long long)ic->ne[0],
                 (long long)ic->ne[1], (long long)ic->ne[2], (long long)ic->ne[3],
                 ic->mask ? (ic->mask_type == TSL_TYPE_F16 ? " f16 mask" : " f32 mask") : "",
                 ic->spec->op == TSL_OP_ROPE ? (ic->rp.mode == TSL_ROPE_NEOX ? " neox" : " normal") : "");
}

/* By hand: dst->data = src0->data, at 1, 2, 3 threads. */
static void test_inplace_by_hand(void) {
    unsigned long long rng = ref_seed(2121);
    for (int s = 0; s < N_SPECS; s++) {
        const ip_spec *spec = &SPECS[s];
        char name[48], tol[48];
        snprintf(name, sizeof name, "%s in place", spec->name);
        snprintf(tol, sizeof tol, "atol %g, rtol %g", spec->atol, spec->rtol);
        ref_stats st = {.op = name, .tol = tol};
        CHECKF(core_op_can_inplace(spec->op), "core_op_can_inplace(%s) is false", spec->name);
        for (int c = 0; c < N_CASES; c++) {
            ip_case ic;
            ip_case_make(&ic, spec, c, &rng);
            describe(&ic, c, "by hand");
            tsl_context *dc = ref_ctx(8);
            tsl_ctx_params mp = {1 << 20, true};
            tsl_context *mc = tsl_ctx_new(mp);
            ip_tensors t;
            if (!dc || !mc || !ip_tensors_make(dc, &ic, &t, false) || !ip_upload(&ic, &t)) {
                CHECKF(0, "%s: cannot make operands: %s", ref_case, dc ? tsl_ctx_error(dc) : "no context");
                ip_case_free(&ic);
                tsl_ctx_free(dc);
                tsl_ctx_free(mc);
                continue;
            }
            tsl_tensor *out = ip_op(mc, &ic, t.x, &t);
            if (out) {
                CHECK(out->data == NULL && tsl_same_shape(out, t.x) && out->type == TSL_TYPE_F32);
                out->data = t.x->data;
            }
            const int64_t n = ref_nel(ic.ne);
            double *ref = (double *)malloc((size_t)n * sizeof(double)), *mag = (double *)malloc((size_t)n * sizeof(double));
            ip_ref(&ic, ref, mag);
            ref_restore rs = {t.x->data, ic.x, (size_t)n * sizeof(float)};
            ref_run(&st, ref_graph(mc, out), out, ref, mag, spec->atol, spec->rtol, &rs);
            free(ref);
            free(mag);
            ip_case_free(&ic);
            tsl_ctx_free(mc);
            tsl_ctx_free(dc);
        }
        ref_stats_print(&st);
    }
}

/* Through the graph allocator: y = op(cont(x)) must land on cont(x)'s block. */
static void test_inplace_gallocr(void) {
    unsigned long long rng = ref_seed(2222);
    for (int s = 0; s < N_SPECS; s++) {
        const ip_spec *spec = &SPECS[s];
        char name[48], tol[48];
        snprintf(name, sizeof name, "%s in place (gallocr)", spec->name);
        snprintf(tol, sizeof tol, "atol %g, rtol %g", spec->atol, spec->rtol);
        ref_stats st = {.op = name, .tol = tol};
        for (int c = 0; c < 2; c++) {
            ip_case ic;
            ip_case_make(&ic, spec, c + 1, &rng);
            describe(&ic, c, "gallocr");
            const int64_t n = ref_nel(ic.ne);
            double *ref = (double *)malloc((size_t)n * sizeof(double)), *mag = (double *)malloc((size_t)n * sizeof(double));
            ip_ref(&ic, ref, mag);
            st.cases++;
            for (int bi = 0; bi < REF_NB; bi++) {
                tsl_ctx_params mp = {1 << 20, true};
                tsl_context *mc = tsl_ctx_new(mp);
                tsl_gallocr *ga = tsl_gallocr_new(ref_be[bi]);
                ip_tensors t;
                tsl_tensor *tmp = NULL, *y = NULL;
                tsl_graph *g = NULL;
                if (mc && ga && ip_tensors_make(mc, &ic, &t, true)) {
                    tmp = tsl_cont(mc, t.x);
                    y = tmp ? ip_op(mc, &ic, tmp, &t) : NULL;
                    g = ref_graph(mc, y);
                } else {
                    CHECKF(0, "%s: cannot make operands: %s", ref_case, mc ? tsl_ctx_error(mc) : "no context");
                }
                tsl_error err;
                tsl_error_clear(&err);
                tsl_status as = g ? tsl_gallocr_alloc_graph(ga, g, &err) : TSL_FAILED;
                if (g && as != TSL_SUCCESS) {
                    char line[512];
                    tsl_error_format(&err, line, sizeof line);
                    CHECKF(0, "%s: gallocr_alloc_graph: %s", ref_case, line);
                }
                if (as == TSL_SUCCESS) {
                    CHECKF(y->data != NULL && y->data == tmp->data,
                           "%s: the allocator did not run %s in place (y at %p, its input at %p)", ref_case,
                           spec->name, y->data, tmp->data);
                    if (ip_upload(&ic, &t)) {
                        ref_poison(y);
                        if (ref_compute(bi, g))
                            ref_check_out(&st, y, ref, mag, spec->atol, spec->rtol, REF_NTH(bi));
                        else
                            st.failed_runs++;
                    }
                } else {
                    st.failed_runs++;
                }
                tsl_gallocr_free(ga);
                tsl_ctx_free(mc);
            }
            free(ref);
            free(mag);
            ip_case_free(&ic);
        }
        ref_stats_print(&st);
    }
}

int main(void) {
    if (!ref_setup()) return 1;
    printf("in-place ops (dst->data == src0->data) vs double references, %s\n", ref_mode());
    RUN(test_inplace_by_hand);
    RUN(test_inplace_gallocr);
    ref_teardown();
    return test_summary();
}
