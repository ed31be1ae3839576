/*
 * test_ops_copy.c - the data-movement ops on the CPU backend: dup, cpy
 * (into strided destination views, between shapes of the same element
 * count), cont, get_rows, concat, and views/reshape/permute/transpose of
 * computed tensors composed with compute ops (with arena data and through
 * the graph allocator, where views of intermediates resolve lazily).
 *
 * Every type pair of F32, F16, BF16, Q8_0, Q4_0 is covered, and copies of
 * the integer types between themselves. These ops move
 * values, so every check is exact:
 *   - a float destination holds exactly the scalar conversion of the source
 *     value (tsl_fp32_to_fp16 / tsl_fp32_to_bf16 of the float the source
 *     holds; a quantized source is read through tsl_dequantize);
 *   - a quantized destination holds, block for block, the bytes tsl_quantize
 *     gives for the same values (the library's own quantizer, tested
 *     bit-exact elsewhere);
 *   - a quantized source copied to its own type (dup, cont) keeps its bytes.
 * cpy also checks that nothing outside the destination view changed.
 * Two layouts may be refused at build time with a message naming the op
 * (counted as "refused" in the summary, and never silently computed wrong):
 * a cpy with a quantized side whose row lengths differ unless both tensors
 * are contiguous with rows of whole blocks, and a get_rows table whose rows
 * are not dense.
 * The only tolerance here is in the composed-graph check (a sum of squares):
 * m = sum |terms|, atol 1e-6, rtol 1e-5.
 */
#include "ref.h"

static const tsl_type TYPES[5] = {TSL_TYPE_F32, TSL_TYPE_F16, TSL_TYPE_BF16, TSL_TYPE_Q8_0, TSL_TYPE_Q4_0};

static void describe_shape(char *buf, size_t n, const int64_t ne[4]) {
    snprintf(buf, n, "[%lld,%lld,%lld,%lld]", (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]);
}

/* Every block of out equals, byte for byte, the block of src at the same
 * logical position (same type, same shape). */
static bool blocks_equal(ref_stats *st, const tsl_tensor *out, const tsl_tensor *src, int nth) {
    const int64_t bl = tsl_type_block_len(out->type);
    const size_t bs = tsl_type_block_size(out->type);
    long long bad = 0, n = 0;
    tsl_tensor shadow;
    void *mem;
    out = ref_readable(out, &shadow, &mem);
    for (int64_t i3 = 0; i3 < out->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < out->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < out->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < out->ne[0]; i0 += bl) {
                    n += bl;
                    if (memcmp(ref_addr(out, i0, i1, i2, i3), ref_addr(src, i0, i1, i2, i3), bs) != 0 && ++bad <= 5)
                        fprintf(stderr, "    %s, %s: block at [%lld,%lld,%lld,%lld] differs from the source\n",
                                ref_case, ref_where(nth), (long long)i0, (long long)i1, (long long)i2, (long long)i3);
                }
    free(mem);
    st->values += n;
    st->runs++;
    if (bad) st->failed_runs++;
    CHECKF(bad == 0, "%s: %lld blocks differ from the source on %s", ref_case, bad, ref_where(nth));
    return bad == 0;
}

/* Run g on every backend and check that out's blocks equal src's. */
static void run_blocks_equal(ref_stats *st, tsl_graph *g, tsl_tensor *out, const tsl_tensor *src) {
    st->cases++;
    if (!g) {
        st->failed_runs++;
        return;
    }
    for (int bi = 0; bi < REF_NB; bi++) {
        ref_poison(out);
        const int r = ref_compute_st(st, bi, g);
        if (r != REF_RAN) {
            if (r == REF_FAILED) st->runs++, st->failed_runs++;
            continue;
        }
        blocks_equal(st, out, src, REF_NTH(bi));
    }
}

/* The reference for a copy into type dt: the values as dt stores them
 * (quantized destinations are compared against tsl_quantize of the values
 * themselves, so they pass through unchanged). */
static double *converted(const double *vals, int64_t n, tsl_type dt) {
    double *r = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) r[i] = tsl_type_is_quantized(dt) ? vals[i] : ref_round(dt, vals[i]);
    return r;
}

/* ---- dup ----------------------------------------------------------------- */

static void test_dup(void) {
    ref_stats st = {.op = "dup (5x5 types)", .tol = "exact"};
    unsigned long long rng = ref_seed(1212);
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 5; di++)
            for (int rep = 0; rep < 3; rep++) {
                const tsl_type stype = TYPES[si], dtype = TYPES[di];
                tsl_context *ctx = ref_ctx(8);
                if (!ctx) return;
                const bool blocky = tsl_type_is_quantized(stype) || tsl_type_is_quantized(dtype);
                int64_t ne[4];
                ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), blocky ? 32 : 1, 8000, ne);
                ref_layout l = rep == 0 ? REF_CONTIG : (ref_layout)ref_rand_int(&rng, 1, REF_NLAYOUT - 1);
                tsl_tensor *src = ref_tensor(ctx, stype, ne, l, &rng, -3.0f, 3.0f);
                char sh[96];
                describe_shape(sh, sizeof sh, ne);
                ref_describe("dup %s -> %s, %s %s", tsl_type_name(stype), tsl_type_name(dtype), sh,
                             ref_layout_name(src && src->nb[0] != tsl_type_block_size(stype) ? REF_TRANSPOSED : l));
                if (!src) {
                    CHECKF(0, "%s: cannot make the source: %s", ref_case, tsl_ctx_error(ctx));
                    tsl_ctx_free(ctx);
                    continue;
                }
                tsl_tensor *out = tsl_dup(ctx, src, dtype);
                if (out) CHECK(out->type == dtype && tsl_is_contiguous(out) && tsl_same_shape(out, src));
                if (stype == dtype && tsl_type_is_quantized(stype)) {
                    run_blocks_equal(&st, ref_graph(ctx, out), out, src);
                } else {
                    double *vals = ref_load(src);
                    double *ref = converted(vals, ref_nel(ne), dtype);
                    ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 0, 0, NULL);
                    free(vals);
                    free(ref);
                }
                tsl_ctx_free(ctx);
            }
    ref_stats_print(&st);
}

/* ---- cpy ----------------------------------------------------------------- */

/* Mark the bytes of t's root that t covers. */
static unsigned char *coverage(const tsl_tensor *t) {
    const tsl_tensor *root = ref_root(t);
    const size_t nbytes = tsl_nbytes(root);
    unsigned char *m = (unsigned char *)calloc(nbytes, 1);
    const int64_t bl = tsl_type_block_len(t->type);
    const size_t bs = tsl_type_block_size(t->type);
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0 += bl) {
                    size_t off = (size_t)(ref_addr(t, i0, i1, i2, i3) - (char *)root->data);
                    if (off + bs <= nbytes) memset(m + off, 1, bs);
                }
    return m;
}

static void test_cpy(void) {
    ref_stats st = {.op = "cpy (5x5 types, views)", .tol = "exact"};
    unsigned long long rng = ref_seed(1313);
    int c = 0;
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 5; di++)
            for (int rep = 0; rep < 3; rep++, c++) {
                const tsl_type stype = TYPES[si], dtype = TYPES[di];
                const bool squant = tsl_type_is_quantized(stype), dquant = tsl_type_is_quantized(dtype);
                tsl_context *ctx = ref_ctx(8);
                if (!ctx) return;
                int64_t dne[4], sne[4];
                ref_rand_shape(&rng, (int)ref_rand_int(&rng, 1, 4), squant || dquant ? 32 : 1, 8000, dne);
                /* the source: same element count, often another shape */
                int variant = (int)ref_rand_int(&rng, 0, squant ? 2 : 4);
                if (variant == 4 && dne[0] % 2) variant = 3;
                memcpy(sne, dne, sizeof sne);
                switch (variant) {
                case 1: sne[0] = dne[0] * dne[1]; sne[1] = dne[2]; sne[2] = dne[3]; sne[3] = 1; break;
                case 2: sne[1] = dne[1] * dne[2] * dne[3]; sne[2] = sne[3] = 1; break;
                case 3: sne[0] = ref_nel(dne); sne[1] = sne[2] = sne[3] = 1; break;
                case 4: sne[0] = dne[0] / 2; sne[1] = dne[1] * 2; break;
                default: break;
                }
                /* destinations are mostly views with strides: a KV-cache slot, a transposed V cache */
                ref_layout dl = rep == 0 ? REF_STRIDED : (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
                ref_layout sl = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
                /* a quantized side with another row length converts whole blocks only between
                 * contiguous tensors (a [head_dim, n_head, n_tokens] into a flat cache view):
                 * mostly stay within that rule, sometimes step out to see the clean refusal */
                if ((squant || dquant) && sne[0] != dne[0] && ref_rand_int(&rng, 0, 3) != 0) sl = dl = REF_CONTIG;
                tsl_tensor *src = ref_tensor(ctx, stype, sne, sl, &rng, -3.0f, 3.0f);
                tsl_tensor *dst = ref_tensor(ctx, dtype, dne, dl, &rng, -3.0f, 3.0f);
                char s1[96], s2[96];
                describe_shape(s1, sizeof s1, sne);
                describe_shape(s2, sizeof s2, dne);
                ref_describe("cpy case %d: %s %s %s -> %s %s %s", c, tsl_type_name(stype), s1,
                             src && src->nb[0] != tsl_type_block_size(stype) ? "transposed" : ref_layout_name(sl),
                             tsl_type_name(dtype), s2,
                             dst && dst->nb[0] != tsl_type_block_size(dtype) ? "transposed"
                             : dst && !tsl_is_contiguous(dst)                  ? "strided view"
                                                                                : "contig");
                if (!src || !dst) {
                    CHECKF(0, "%s: cannot make operands: %s", ref_case, tsl_ctx_error(ctx));
                    tsl_ctx_free(ctx);
                    continue;
                }
                tsl_tensor *out = tsl_cpy(ctx, src, dst);
                const bool in_rule = !(squant || dquant) || sne[0] == dne[0] ||
                                     (tsl_is_contiguous(src) && tsl_is_contiguous(dst) && sne[0] % 32 == 0 &&
                                      dne[0] % 32 == 0);
                if (!out && !in_rule) {
                    const char *e = tsl_ctx_error(ctx);
                    CHECKF(e && strstr(e, "cpy"), "%s: refused without an error naming cpy: %s", ref_case,
                           e ? e : "(none)");
                    st.cases++;
                    st.rejected++;
                    tsl_ctx_free(ctx);
                    continue;
                }
                tsl_graph *g = ref_graph(ctx, out);
                st.cases++;
                if (!g) st.failed_runs++;
                if (out) CHECK(out->data == dst->data && tsl_same_shape(out, dst) && out->type == dtype);
                double *vals = ref_load(src);
                double *ref = converted(vals, ref_nel(dne), dtype);
                tsl_tensor *root = ref_root(dst);
                const size_t nbytes = tsl_nbytes(root);
                unsigned char *cov = coverage(dst);
                unsigned char *before = (unsigned char *)malloc(nbytes);
                memcpy(before, root->data, nbytes);
                for (int bi = 0; g && bi < REF_NB; bi++) {
                    ref_poison(dst);
                    const int r = ref_compute_st(&st, bi, g);
                    if (r != REF_RAN) {
                        if (r == REF_FAILED) st.runs++, st.failed_runs++;
                        continue;
                    }
                    ref_check_out(&st, out, ref, NULL, 0, 0, REF_NTH(bi));
                    size_t changed = 0;
                    for (size_t i = 0; i < nbytes; i++)
                        if (!cov[i] && ((unsigned char *)root->data)[i] != before[i]) changed++;
                    CHECKF(changed == 0, "%s: %zu bytes outside the destination view changed (%s)", ref_case,
                           changed, ref_where(REF_NTH(bi)));
                }
                free(vals);
                free(ref);
                free(cov);
                free(before);
                tsl_ctx_free(ctx);
            }
    ref_stats_print(&st);
}

/* The quantized KV-cache write: k [head_dim, n_head, n_tokens] F32 into a
 * flat 1-D view of a quantized cache at a block-aligned offset (and the
 * reverse read into F32), nothing else in the cache touched. */
static void test_cpy_flat_quant(void) {
    ref_stats st = {.op = "cpy f32 <-> flat quant view", .tol = "exact"};
    unsigned long long rng = ref_seed(1331);
    for (int c = 0; c < 8; c++) {
        const tsl_type qt = c & 1 ? TSL_TYPE_Q4_0 : TSL_TYPE_Q8_0;
        tsl_context *ctx = ref_ctx(8);
        if (!ctx) return;
        const int64_t hd = 32 * ref_rand_int(&rng, 1, 4), nh = ref_rand_int(&rng, 1, 5), nt = ref_rand_int(&rng, 1, 7);
        const int64_t n = hd * nh * nt, slots = ref_rand_int(&rng, 1, 4);
        tsl_tensor *k = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, hd, nh, nt);
        tsl_tensor *cache = tsl_new_tensor_1d(ctx, qt, n * (slots + 1));
        if (!k || !cache) {
            CHECKF(0, "cannot make operands: %s", tsl_ctx_error(ctx));
            tsl_ctx_free(ctx);
            continue;
        }
        ref_fill(k, &rng, -2, 2);
        ref_fill(cache, &rng, -2, 2);
        const int64_t slot = ref_rand_int(&rng, 0, slots);
        tsl_tensor *view = tsl_view_1d(ctx, cache, n, tsl_row_size(qt, n * slot));
        ref_describe("cpy f32 [%lld,%lld,%lld] -> %s cache view of %lld at slot %lld", (long long)hd, (long long)nh,
                     (long long)nt, tsl_type_name(qt), (long long)n, (long long)slot);
        tsl_tensor *out = view ? tsl_cpy(ctx, k, view) : NULL;
        double *vals = ref_load(k);
        const size_t nbytes = tsl_nbytes(cache);
        unsigned char *before = (unsigned char *)malloc(nbytes);
        memcpy(before, cache->data, nbytes);
        tsl_graph *g = ref_graph(ctx, out);
        st.cases++;
        for (int bi = 0; g && bi < REF_NB; bi++) {
            ref_poison(view);
            const int r = ref_compute_st(&st, bi, g);
            if (r != REF_RAN) {
                if (r == REF_FAILED) st.runs++, st.failed_runs++;
                continue;
            }
            ref_check_out(&st, view, vals, NULL, 0, 0, REF_NTH(bi));
            const size_t v0 = tsl_row_size(qt, n * slot), v1 = v0 + tsl_row_size(qt, n);
            size_t changed = 0;
            for (size_t i = 0; i < nbytes; i++)
                if ((i < v0 || i >= v1) && ((unsigned char *)cache->data)[i] != before[i]) changed++;
            CHECKF(changed == 0, "%s: %zu cache bytes outside the view changed", ref_case, changed);
        }
        /* and back: the view read into F32 [hd, nh, nt] is the dequantized slot */
        tsl_tensor *back = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, hd, nh, nt);
        tsl_tensor *out2 = back && out ? tsl_cpy(ctx, view, back) : NULL;
        if (g && out2) {
            tsl_graph *g2 = ref_graph(ctx, out2);
            double *q = ref_load(view);
            ref_run(&st, g2, back, q, NULL, 0, 0, NULL);
            free(q);
        } else {
            CHECKF(out2 != NULL, "%s: the reverse cpy did not build: %s", ref_case, tsl_ctx_error(ctx));
        }
        free(vals);
        free(before);
        tsl_ctx_free(ctx);
    }
    ref_stats_print(&st);
}

/* ---- copies of the other types ------------------------------------------ */

/* Element k of out in its flat order holds, byte for byte, element k of src
 * in src's flat order (the rule of a copy between shapes). */
static bool flat_equal(ref_stats *st, const tsl_tensor *out, const tsl_tensor *src, int nth) {
    const size_t es = tsl_type_block_size(out->type);
    const int64_t n = tsl_nelements(out);
    long long bad = 0;
    tsl_tensor shadow;
    void *mem;
    out = ref_readable(out, &shadow, &mem);
    for (int64_t k = 0; k < n; k++) {
        const int64_t o0 = k % out->ne[0], o1 = (k / out->ne[0]) % out->ne[1],
                      o2 = (k / (out->ne[0] * out->ne[1])) % out->ne[2], o3 = k / (out->ne[0] * out->ne[1] * out->ne[2]);
        const int64_t s0 = k % src->ne[0], s1 = (k / src->ne[0]) % src->ne[1],
                      s2 = (k / (src->ne[0] * src->ne[1])) % src->ne[2], s3 = k / (src->ne[0] * src->ne[1] * src->ne[2]);
        if (memcmp(ref_addr(out, o0, o1, o2, o3), ref_addr(src, s0, s1, s2, s3), es) != 0 && ++bad <= 5)
            fprintf(stderr, "    %s, %s: element %lld differs from the source\n", ref_case, ref_where(nth), (long long)k);
    }
    free(mem);
    st->values += n;
    st->runs++;
    if (bad) st->failed_runs++;
    CHECKF(bad == 0, "%s: %lld elements differ from the source on %s", ref_case, bad, ref_where(nth));
    return bad == 0;
}

/* cont and cpy (into views, between shapes) of the types that are not
 * numbers to convert: I32, I16, I8, I64, F64 move their bytes unchanged. */
static void test_copy_other_types(void) {
    static const tsl_type OTHER[5] = {TSL_TYPE_I32, TSL_TYPE_I16, TSL_TYPE_I8, TSL_TYPE_I64, TSL_TYPE_F64};
    ref_stats st = {.op = "cont/cpy i32 i16 i8 i64 f64", .tol = "exact bytes"};
    unsigned long long rng = ref_seed(1349);
    for (int ti = 0; ti < 5; ti++)
        for (int rep = 0; rep < 6; rep++) {
            const tsl_type type = OTHER[ti];
            tsl_context *ctx = ref_ctx(8);
            if (!ctx) return;
            int64_t ne[4], sne[4];
            ref_rand_shape(&rng, (int)ref_rand_int(&rng, 2, 4), 1, 6000, ne);
            memcpy(sne, ne, sizeof sne);
            const bool reshape = rep % 3 == 2;
            if (reshape) { /* the source as one long row: flat order decides */
                sne[0] = ref_nel(ne);
                sne[1] = sne[2] = sne[3] = 1;
            }
            const ref_layout sl = (ref_layout)ref_rand_int(&rng, 1, REF_NLAYOUT - 1);
            tsl_tensor *src = ref_tensor(ctx, type, sne, reshape ? REF_CONTIG : sl, &rng, -100.0f, 100.0f);
            tsl_tensor *out = NULL;
            char sh[96];
            describe_shape(sh, sizeof sh, ne);
            if (rep % 3 == 0) {
                ref_describe("cont %s %s %s", tsl_type_name(type), sh, ref_layout_name(sl));
                out = src ? tsl_cont(ctx, src) : NULL;
            } else {
                const ref_layout dl = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
                tsl_tensor *dst = ref_tensor(ctx, type, ne, dl, &rng, -100.0f, 100.0f);
                ref_describe("cpy %s %s %s -> %s", tsl_type_name(type), reshape ? "(one row)" : sh,
                             reshape ? "contig" : ref_layout_name(sl), ref_layout_name(dl));
                out = src && dst ? tsl_cpy(ctx, src, dst) : NULL;
            }
            tsl_graph *g = ref_graph(ctx, out);
            st.cases++;
            for (int bi = 0; g && bi < REF_NB; bi++) {
                ref_poison(out);
                const int r = ref_compute_st(&st, bi, g);
                if (r != REF_RAN) {
                    if (r == REF_FAILED) st.runs++, st.failed_runs++;
                    continue;
                }
                flat_equal(&st, out, src, REF_NTH(bi));
            }
            tsl_ctx_free(ctx);
        }
    ref_stats_print(&st);
}

/* ---- cont ---------------------------------------------------------------- */

static void test_cont(void) {
    ref_stats st = {.op = "cont", .tol = "exact"};
    unsigned long long rng = ref_seed(1414);
    for (int ti = 0; ti < 5; ti++)
        for (int rep = 0; rep < 6; rep++) {
            const tsl_type type = TYPES[ti];
            tsl_context *ctx = ref_ctx(8);
            if (!ctx) return;
            int64_t ne[4];
            ref_rand_shape(&rng, (int)ref_rand_int(&rng, 2, 4), tsl_type_is_quantized(type) ? 32 : 1, 10000, ne);
            ref_layout l = (ref_layout)(1 + rep % 3);
            tsl_tensor *src = ref_tensor(ctx, type, ne, l, &rng, -3.0f, 3.0f);
            char sh[96];
            describe_shape(sh, sizeof sh, ne);
            ref_describe("cont %s %s %s", tsl_type_name(type), sh, ref_layout_name(l));
            if (!src) {
                CHECKF(0, "%s: cannot make the source: %s", ref_case, tsl_ctx_error(ctx));
                tsl_ctx_free(ctx);
                continue;
            }
            tsl_tensor *out = tsl_cont(ctx, src);
            if (out) CHECK(out->type == type && tsl_is_contiguous(out) && tsl_same_shape(out, src));
            if (tsl_type_is_quantized(type)) {
                run_blocks_equal(&st, ref_graph(ctx, out), out, src);
            } else {
                double *vals = ref_load(src);
                ref_run(&st, ref_graph(ctx, out), out, vals, NULL, 0, 0, NULL);
                free(vals);
            }
            tsl_ctx_free(ctx);
        }
    ref_stats_print(&st);
}

/* ---- get_rows ------------------------------------------------------------ */

static void test_get_rows(void) {
    ref_stats st = {.op = "get_rows (5 types)", .tol = "exact vs tsl_dequantize rows"};
    unsigned long long rng = ref_seed(1515);
    for (int ti = 0; ti < 5; ti++)
        for (int rep = 0; rep < 6; rep++) {
            const tsl_type type = TYPES[ti];
            tsl_context *ctx = ref_ctx(8);
            if (!ctx) return;
            int64_t ane[4] = {tsl_type_is_quantized(type) ? 32 * ref_rand_int(&rng, 1, 3) : ref_rand_int(&rng, 1, 70),
                              ref_rand_int(&rng, 1, 40), ref_rand_int(&rng, 1, 3), ref_rand_int(&rng, 1, 2)};
            const int64_t n = ref_rand_int(&rng, 1, 20);
            const int64_t ine[4] = {n, ane[2], ane[3], 1};
            ref_layout al = (ref_layout)(rep % REF_NLAYOUT), il = (ref_layout)(rep % 3);
            tsl_tensor *a = ref_tensor(ctx, type, ane, al, &rng, -3.0f, 3.0f);
            tsl_tensor *idx = ref_tensor(ctx, TSL_TYPE_I32, ine, il, &rng, 0.0f, 1.0f);
            char sh[96];
            describe_shape(sh, sizeof sh, ane);
            ref_describe("get_rows %s table %s %s, %lld indices, idx %s", tsl_type_name(type), sh,
                         a && a->nb[0] != tsl_type_block_size(type) ? "transposed" : ref_layout_name(al), (long long)n,
                         ref_layout_name(il));
            if (!a || !idx) {
                CHECKF(0, "%s: cannot make operands: %s", ref_case, tsl_ctx_error(ctx));
                tsl_ctx_free(ctx);
                continue;
            }
            for (int64_t i2 = 0; i2 < ine[2]; i2++)
                for (int64_t i1 = 0; i1 < ine[1]; i1++)
                    for (int64_t i0 = 0; i0 < n; i0++)
                        ref_set(idx, i0, i1, i2, 0, (double)ref_rand_int(&rng, 0, ane[1] - 1));
            tsl_tensor *out = tsl_get_rows(ctx, a, idx);
            if (!out && a->nb[0] != tsl_type_block_size(type)) {
                /* a table whose rows are not dense may be refused, with a message */
                const char *e = tsl_ctx_error(ctx);
                CHECKF(e && strstr(e, "get_rows"), "%s: refused without an error naming get_rows: %s", ref_case,
                       e ? e : "(none)");
                st.cases++;
                st.rejected++;
                tsl_ctx_free(ctx);
                continue;
            }
            const int64_t one[4] = {ane[0], n, ane[2], ane[3]};
            if (out)
                CHECK(out->type == TSL_TYPE_F32 && out->ne[0] == one[0] && out->ne[1] == one[1] &&
                      out->ne[2] == one[2] && out->ne[3] == one[3]);
            double *ref = (double *)malloc((size_t)ref_nel(one) * sizeof(double));
            for (int64_t i3 = 0; i3 < one[3]; i3++)
                for (int64_t i2 = 0; i2 < one[2]; i2++)
                    for (int64_t i1 = 0; i1 < n; i1++) {
                        const int64_t row = (int64_t)ref_get(idx, i1, i2, i3, 0);
                        for (int64_t i0 = 0; i0 < one[0]; i0++)
                            ref[ref_ix(one, i0, i1, i2, i3)] = ref_get(a, i0, row, i2, i3);
                    }
            ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 0, 0, NULL);
            free(ref);
            tsl_ctx_free(ctx);
        }
    ref_stats_print(&st);
}

/* An index past the table (or negative) fails the compute with FAILED and a
 * message; nothing latches: the same backend then computes a good graph. */
static void test_get_rows_out_of_range(void) {
    static const int32_t bad[2] = {5, -1};
    for (int k = 0; k < 2; k++)
        for (int bi = 0; bi < REF_NB; bi++) {
            tsl_context *ctx = ref_ctx(1);
            if (!ctx) return;
            unsigned long long rng = ref_seed(1616);
            tsl_tensor *a = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 8, 5);
            tsl_tensor *idx = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 3);
            tsl_tensor *idx_ok = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 3);
            if (!a || !idx || !idx_ok) {
                CHECKF(0, "cannot make operands: %s", tsl_ctx_error(ctx));
                tsl_ctx_free(ctx);
                return;
            }
            ref_fill(a, &rng, -1, 1);
            int32_t *iv = (int32_t *)idx->data, *ok = (int32_t *)idx_ok->data;
            iv[0] = 0;
            iv[1] = bad[k];
            iv[2] = 1;
            ok[0] = 4;
            ok[1] = 0;
            ok[2] = 4;
            tsl_tensor *out = tsl_get_rows(ctx, a, idx);
            tsl_tensor *out_ok = tsl_get_rows(ctx, a, idx_ok);
            tsl_graph *g = out ? tsl_graph_build(ctx, &out, 1) : NULL;
            tsl_graph *g_ok = out_ok ? tsl_graph_build(ctx, &out_ok, 1) : NULL;
            CHECK(g && g_ok);
            if (g && g_ok) {
                tsl_error err;
                tsl_error_clear(&err);
                tsl_status s = ref_compute_status(bi, g, &err);
                CHECKF(s == TSL_FAILED, "get_rows index %d of 5 rows, %s: status %s, want FAILED", bad[k],
                       ref_where(REF_NTH(bi)), tsl_status_str(s));
                CHECK(err.status == TSL_FAILED && err.message[0] != '\0');
                CHECK_STR_CONTAINS(err.message, "out of range");
                s = ref_compute_status(bi, g_ok, &err);
                CHECKF(s == TSL_SUCCESS, "a good get_rows after a failed one: %s", tsl_status_str(s));
                if (s == TSL_SUCCESS)
                    for (int i = 0; i < 8; i++) {
                        CHECK(tsl_get_f32_nd(out_ok, i, 0, 0, 0) == tsl_get_f32_nd(a, i, 4, 0, 0));
                        CHECK(tsl_get_f32_nd(out_ok, i, 1, 0, 0) == tsl_get_f32_nd(a, i, 0, 0, 0));
                    }
            }
            tsl_ctx_free(ctx);
        }
}

/* ---- set_rows ------------------------------------------------------------ */

/* src (F32, any layout) into dst (F32 or F16) at distinct random positions
 * along dim 0 and 1; everything else of dst kept. Exact: the written values
 * are src rounded to dst's type (tsl_fp32_to_fp16, nearest even). */
static void test_set_rows(void) {
    ref_stats st = {.op = "set_rows (f32, f16; dims 0, 1)", .tol = "exact"};
    unsigned long long rng = ref_seed(1717);
    static const tsl_type dt[2] = {TSL_TYPE_F32, TSL_TYPE_F16};
    for (int ti = 0; ti < 2; ti++)
        for (int dim = 0; dim < 2; dim++)
            for (int rep = 0; rep < 4; rep++) {
                tsl_context *ctx = ref_ctx(8);
                if (!ctx) return;
                int64_t dne[4] = {ref_rand_int(&rng, 1, 70), ref_rand_int(&rng, 1, 40), ref_rand_int(&rng, 1, 3),
                                  ref_rand_int(&rng, 1, 2)};
                const int64_t n = ref_rand_int(&rng, 1, dne[dim]);
                int64_t sne[4] = {dne[0], dne[1], dne[2], dne[3]};
                sne[dim] = n;
                const int64_t ine[4] = {n, 1, 1, 1};
                ref_layout sl = (ref_layout)(rep % REF_NLAYOUT);
                tsl_tensor *dst = ref_tensor(ctx, dt[ti], dne, REF_CONTIG, &rng, -3.0f, 3.0f);
                tsl_tensor *src = ref_tensor(ctx, TSL_TYPE_F32, sne, sl, &rng, -1e4f, 1e4f);
                tsl_tensor *idx = ref_tensor(ctx, TSL_TYPE_I32, ine, REF_CONTIG, &rng, 0.0f, 1.0f);
                char sh[96];
                describe_shape(sh, sizeof sh, dne);
                ref_describe("set_rows %s dst %s, dim %d, %lld positions, src %s", tsl_type_name(dt[ti]), sh, dim,
                             (long long)n, ref_layout_name(sl));
                if (!dst || !src || !idx) {
                    CHECKF(0, "%s: cannot make operands: %s", ref_case, tsl_ctx_error(ctx));
                    tsl_ctx_free(ctx);
                    continue;
                }
                /* distinct positions: the first n of a shuffle */
                int64_t *perm = malloc((size_t)dne[dim] * sizeof *perm);
                for (int64_t i = 0; i < dne[dim]; i++) perm[i] = i;
                for (int64_t i = dne[dim] - 1; i > 0; i--) {
                    int64_t j = ref_rand_int(&rng, 0, i), t = perm[i];
                    perm[i] = perm[j];
                    perm[j] = t;
                }
                for (int64_t j = 0; j < n; j++) ref_set(idx, j, 0, 0, 0, (double)perm[j]);
                tsl_tensor *out = tsl_set_rows(ctx, dst, src, idx, dim);
                CHECKF(out != NULL, "%s: %s", ref_case, tsl_ctx_error(ctx));
                double *ref = (double *)malloc((size_t)ref_nel(dne) * sizeof(double));
                for (int64_t i3 = 0; i3 < dne[3]; i3++)
                    for (int64_t i2 = 0; i2 < dne[2]; i2++)
                        for (int64_t i1 = 0; i1 < dne[1]; i1++)
                            for (int64_t i0 = 0; i0 < dne[0]; i0++)
                                ref[ref_ix(dne, i0, i1, i2, i3)] = ref_get(dst, i0, i1, i2, i3);
                for (int64_t i3 = 0; i3 < sne[3]; i3++)
                    for (int64_t i2 = 0; i2 < sne[2]; i2++)
                        for (int64_t i1 = 0; i1 < sne[1]; i1++)
                            for (int64_t i0 = 0; i0 < sne[0]; i0++) {
                                float v = (float)ref_get(src, i0, i1, i2, i3);
                                if (dt[ti] == TSL_TYPE_F16) v = tsl_fp16_to_fp32(tsl_fp32_to_fp16(v));
                                const int64_t o0 = dim == 0 ? perm[i0] : i0, o1 = dim == 1 ? perm[i1] : i1;
                                ref[ref_ix(dne, o0, o1, i2, i3)] = v;
                            }
                /* each run starts from dst as it was */
                void *saved = malloc(tsl_nbytes(dst));
                memcpy(saved, dst->data, tsl_nbytes(dst));
                ref_restore rs = {dst->data, saved, tsl_nbytes(dst)};
                if (out) ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 0, 0, &rs);
                free(saved);
                free(ref);
                free(perm);
                tsl_ctx_free(ctx);
            }
    ref_stats_print(&st);
}

/* A position outside dst fails the compute (FAILED, "out of range"), and
 * dst is left as it was; the next good graph on the same backend runs. */
static void test_set_rows_out_of_range(void) {
    static const int32_t bad[2] = {5, -1};
    for (int k = 0; k < 2; k++)
        for (int bi = 0; bi < REF_NB; bi++) {
            tsl_context *ctx = ref_ctx(1);
            if (!ctx) return;
            tsl_tensor *dst = tsl_new_tensor_2d(ctx, TSL_TYPE_F16, 8, 5);
            tsl_tensor *src = tsl_new_tensor_2d(ctx, TSL_TYPE_F32, 8, 3);
            tsl_tensor *idx = tsl_new_tensor_1d(ctx, TSL_TYPE_I32, 3);
            if (!dst || !src || !idx) {
                CHECKF(0, "cannot make operands: %s", tsl_ctx_error(ctx));
                tsl_ctx_free(ctx);
                return;
            }
            for (int i = 0; i < 40; i++) ((tsl_fp16_t *)dst->data)[i] = tsl_fp32_to_fp16(7.0f);
            for (int i = 0; i < 24; i++) ((float *)src->data)[i] = (float)i;
            int32_t *iv = (int32_t *)idx->data;
            iv[0] = 0;
            iv[1] = bad[k];
            iv[2] = 1;
            tsl_tensor *out = tsl_set_rows(ctx, dst, src, idx, 1);
            tsl_graph *g = out ? tsl_graph_build(ctx, &out, 1) : NULL;
            CHECK(g != NULL);
            if (g) {
                tsl_error err;
                tsl_error_clear(&err);
                tsl_status s = ref_compute_status(bi, g, &err);
                CHECKF(s == TSL_FAILED, "set_rows index %d of 5 rows, %s: status %s, want FAILED", bad[k],
                       ref_where(REF_NTH(bi)), tsl_status_str(s));
                CHECK_STR_CONTAINS(err.message, "out of range");
                CHECK_STR_CONTAINS(err.message, "set_rows");
                iv[1] = 4;
                s = ref_compute_status(bi, g, &err);
                CHECKF(s == TSL_SUCCESS, "a good set_rows after a failed one: %s", tsl_status_str(s));
                if (s == TSL_SUCCESS) {
                    CHECK(tsl_get_f32_nd(out, 3, 4, 0, 0) == 11.0f); /* src row 1, element 3 */
                    CHECK(tsl_get_f32_nd(out, 3, 2, 0, 0) == 7.0f);  /* untouched */
                }
            }
            tsl_ctx_free(ctx);
        }
}

/* ---- concat -------------------------------------------------------------- */

static void test_concat(void) {
    ref_stats st = {.op = "concat (f32 f16 i32)", .tol = "exact"};
    unsigned long long rng = ref_seed(1717);
    for (int dim = 0; dim < 4; dim++)
        for (int c = 0; c < 8; c++) {
            const tsl_type type = c == 6 ? TSL_TYPE_F16 : c == 7 ? TSL_TYPE_I32 : TSL_TYPE_F32;
            tsl_context *ctx = ref_ctx(8);
            if (!ctx) return;
            int64_t ane[4], bne[4];
            ref_rand_shape(&rng, 4, 1, 6000, ane);
            memcpy(bne, ane, sizeof bne);
            bne[dim] = ref_rand_int(&rng, 1, dim < 2 ? 30 : 4);
            ref_layout la = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
            ref_layout lb = (ref_layout)ref_rand_int(&rng, 0, REF_NLAYOUT - 1);
            const float lo = type == TSL_TYPE_I32 ? -1000.0f : -3.0f, hi = -lo;
            tsl_tensor *a = ref_tensor(ctx, type, ane, la, &rng, lo, hi);
            tsl_tensor *b = ref_tensor(ctx, type, bne, lb, &rng, lo, hi);
            char s1[96], s2[96];
            describe_shape(s1, sizeof s1, ane);
            describe_shape(s2, sizeof s2, bne);
            ref_describe("concat dim %d %s: a %s %s, b %s %s", dim, tsl_type_name(type), s1, ref_layout_name(la), s2,
                         ref_layout_name(lb));
            if (!a || !b) {
                CHECKF(0, "%s: cannot make operands: %s", ref_case, tsl_ctx_error(ctx));
                tsl_ctx_free(ctx);
                continue;
            }
            tsl_tensor *out = tsl_concat(ctx, a, b, dim);
            double *av = ref_load(a), *bv = ref_load(b);
            int64_t one[4];
            double *ref = (double *)malloc((size_t)(ref_nel(ane) + ref_nel(bne)) * sizeof(double));
            ref_concat(av, ane, bv, bne, dim, ref, one);
            if (out)
                CHECK(out->type == type && out->ne[0] == one[0] && out->ne[1] == one[1] && out->ne[2] == one[2] &&
                      out->ne[3] == one[3]);
            ref_run(&st, ref_graph(ctx, out), out, ref, NULL, 0, 0, NULL);
            free(av);
            free(bv);
            free(ref);
            tsl_ctx_free(ctx);
        }
    ref_stats_print(&st);
}

/* ---- views of computed tensors composed with compute ops ------------------ */

/* x [A, B, C], s [C]:
 *   y = sqr(x); z = reshape_2d(y, A*B, C); w = transpose(z)  [C, A*B]
 *   r = mul(w, s)  (s broadcast along w's rows)              [C, A*B]
 *   p = permute(reshape_3d(r, C, A, B), 1, 0, 2, 3)          [A, C, B]
 *   out = sum_rows(p)                                        [1, C, B]
 * so out[0, c, b] = s[c] * sum_a x[a, b, c]^2. */
static tsl_tensor *composed_graph(tsl_context *ctx, tsl_tensor *x, tsl_tensor *s) {
    const int64_t A = x->ne[0], B = x->ne[1], C = x->ne[2];
    tsl_tensor *y = tsl_sqr(ctx, x);
    tsl_tensor *z = tsl_reshape_2d(ctx, y, A * B, C);
    tsl_tensor *w = tsl_transpose(ctx, z);
    tsl_tensor *r = tsl_mul(ctx, w, s);
    tsl_tensor *p = tsl_permute(ctx, tsl_reshape_3d(ctx, r, C, A, B), 1, 0, 2, 3);
    return tsl_sum_rows(ctx, p);
}

static void composed_ref(const float *xv, const float *sv, int64_t A, int64_t B, int64_t C, double *ref, double *mag) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            double sum = 0, m = 0;
            for (int64_t a = 0; a < A; a++) {
                const double x = xv[a + A * (b + B * c)];
                sum += (double)sv[c] * x * x;
                m += fabs((double)sv[c] * x * x);
            }
            ref[c + C * b] = sum;
            mag[c + C * b] = m;
        }
}

static void test_views_composed(void) {
    ref_stats st = {.op = "views composed", .tol = "m=sum|terms|, atol 1e-6, rtol 1e-5"};
    ref_stats sg = {.op = "views composed (gallocr)", .tol = "m=sum|terms|, atol 1e-6, rtol 1e-5"};
    unsigned long long rng = ref_seed(1818);
    for (int c = 0; c < 8; c++) {
        const int64_t A = ref_rand_int(&rng, 1, 33), B = ref_rand_int(&rng, 1, 9), C = ref_rand_int(&rng, 1, 17);
        float *xv = (float *)malloc((size_t)(A * B * C) * sizeof(float)), *sv = (float *)malloc((size_t)C * sizeof(float));
        for (int64_t i = 0; i < A * B * C; i++) xv[i] = test_rand_f(&rng, -2, 2);
        for (int64_t i = 0; i < C; i++) sv[i] = test_rand_f(&rng, -2, 2);
        double *ref = (double *)malloc((size_t)(B * C) * sizeof(double)), *mag = (double *)malloc((size_t)(B * C) * sizeof(double));
        composed_ref(xv, sv, A, B, C, ref, mag);
        ref_describe("views composed case %d: x [%lld,%lld,%lld]", c, (long long)A, (long long)B, (long long)C);

        /* arena data: views of computed tensors get their data at creation */
        tsl_context *ctx = ref_ctx(4);
        if (!ctx) return;
        tsl_tensor *x = tsl_new_tensor_3d(ctx, TSL_TYPE_F32, A, B, C);
        tsl_tensor *s = tsl_new_tensor_1d(ctx, TSL_TYPE_F32, C);
        if (x && s) {
            memcpy(x->data, xv, (size_t)(A * B * C) * sizeof(float));
            memcpy(s->data, sv, (size_t)C * sizeof(float));
        }
        tsl_tensor *out = x && s ? composed_graph(ctx, x, s) : NULL;
        ref_run(&st, ref_graph(ctx, out), out, ref, mag, 1e-6, 1e-5, NULL);
        tsl_ctx_free(ctx);

        /* the graph allocator: intermediates and their views placed by liveness */
        sg.cases++;
        for (int bi = 0; bi < REF_NB; bi++) {
            tsl_ctx_params mp = {1 << 20, true};
            tsl_context *mc = tsl_ctx_new(mp);
            tsl_gallocr *ga = tsl_gallocr_new(ref_be[bi]);
            CHECK(mc && ga);
            tsl_tensor *gx = mc ? tsl_new_tensor_3d(mc, TSL_TYPE_F32, A, B, C) : NULL;
            tsl_tensor *gs = mc ? tsl_new_tensor_1d(mc, TSL_TYPE_F32, C) : NULL;
            if (gx) gx->flags |= TSL_FLAG_INPUT;
            if (gs) gs->flags |= TSL_FLAG_INPUT;
            tsl_tensor *gout = gx && gs ? composed_graph(mc, gx, gs) : NULL;
            tsl_graph *g = mc ? ref_graph(mc, gout) : NULL;
            tsl_error err;
            tsl_error_clear(&err);
            if (g && ga && tsl_gallocr_alloc_graph(ga, g, &err) == TSL_SUCCESS) {
                CHECK(tsl_tensor_set(gx, xv, 0, (size_t)(A * B * C) * sizeof(float), &err) == TSL_SUCCESS);
                CHECK(tsl_tensor_set(gs, sv, 0, (size_t)C * sizeof(float), &err) == TSL_SUCCESS);
                ref_poison(gout);
                if (ref_compute(bi, g))
                    ref_compare(&sg, gout, ref, mag, 1e-6, 1e-5, REF_NTH(bi));
                else
                    sg.failed_runs++;
            } else {
                char line[512];
                tsl_error_format(&err, line, sizeof line);
                CHECKF(0, "%s: gallocr_alloc_graph failed: %s", ref_case, line);
                sg.failed_runs++;
            }
            tsl_gallocr_free(ga);
            tsl_ctx_free(mc);
        }
        free(xv);
        free(sv);
        free(ref);
        free(mag);
    }
    ref_stats_print(&st);
    ref_stats_print(&sg);
}

int main(void) {
    if (!ref_setup()) return 1;
    printf("copy ops vs exact references, %s\n", ref_mode());
    RUN(test_dup);
    RUN(test_cpy);
    RUN(test_cpy_flat_quant);
    RUN(test_copy_other_types);
    RUN(test_cont);
    RUN(test_get_rows);
    RUN(test_get_rows_out_of_range);
    RUN(test_set_rows);
    RUN(test_set_rows_out_of_range);
    RUN(test_concat);
    RUN(test_views_composed);
    ref_teardown();
    return test_summary();
}
