/*
 * ops_copy.c - kernels that move data between layouts and types: dup, cont
 * and cpy (one kernel), get_rows and concat.
 *
 * dup/cont/cpy copy src0 into the node's own layout (for cpy that layout is
 * the destination view's, possibly strided: a KV-cache slot). Elements are
 * matched in flat row-major order, so shapes may differ as long as the
 * element counts agree. Three paths, fastest first:
 *  - same type: bytes move unchanged (block by block for quantized types, so
 *    a Q4_0 tensor is never requantized); a memcpy when both sides are dense;
 *  - same shape, converting: each row (or a column chunk of it when there
 *    are fewer rows than threads) is turned into floats, then into the
 *    destination type with the SIMD table's converters or the reference
 *    quantizer (tsl_quantize), so results are bit-identical to quantizing
 *    the same values directly;
 *  - different shapes, converting: each destination row gathers its floats
 *    from the source rows it spans (one source row cached as floats).
 *
 * A transpose-like copy (one side strided along its rows but dense along
 * another dimension, e.g. cont(transpose(x)) or a cpy into a transposed V
 * cache) goes block by block through per-thread scratch instead, reading
 * and writing each side along its dense dimension; element by element along
 * the strided side it ran at a third of the speed (a tenth out of cache).
 *
 * get_rows converts whole table rows to F32 and checks every index: an index
 * outside the table fails the compute (cpu_kernel_fail) naming the index, its
 * position and the row count, instead of reading out of bounds.
 */
#include <string.h>

#include "cpu/ops.h"

#define CP_TILE 1024 /* floats; a multiple of every block length */

static inline char *cp_row(const tsl_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

static bool cp_convertible(tsl_type t) {
    return t == TSL_TYPE_F32 || t == TSL_TYPE_F16 || t == TSL_TYPE_BF16 || t == TSL_TYPE_Q8_0 ||
           t == TSL_TYPE_Q4_0;
}

bool cpu_dup_supported(const tsl_tensor *node) {
    const tsl_tensor *a = node->src[0];
    if (!a || tsl_nelements(a) != tsl_nelements(node)) return false;
    if (a->type == node->type) return true;
    return cp_convertible(a->type) && cp_convertible(node->type);
}

static size_t cp_floats_bytes(int64_t n) { return ((size_t)n * sizeof(float) + 63) / 64 * 64; }

/* ---- row conversions ------------------------------------------------------ */

/* n floats from a row of type t starting at element c0 (a multiple of the
 * block length for quantized types), element stride s bytes. Returns a
 * pointer to the floats: the row itself when it is dense F32, else out. */
static const float *cp_to_f32(const cpu_simd *simd, tsl_type t, const char *row, size_t s, int64_t c0, int64_t n,
                              float *out) {
    switch (t) {
    case TSL_TYPE_F32:
        if (s == sizeof(float)) return (const float *)row + c0;
        for (int64_t i = 0; i < n; i++) memcpy(&out[i], row + (size_t)(c0 + i) * s, sizeof(float));
        return out;
    case TSL_TYPE_F16:
        if (s == sizeof(tsl_fp16_t)) {
            simd->f16_to_f32(n, (const tsl_fp16_t *)row + c0, out);
        } else {
            for (int64_t i = 0; i < n; i++) {
                tsl_fp16_t h;
                memcpy(&h, row + (size_t)(c0 + i) * s, sizeof h);
                out[i] = tsl_fp16_to_fp32(h);
            }
        }
        return out;
    case TSL_TYPE_BF16:
        if (s == sizeof(tsl_bf16_t)) {
            simd->bf16_to_f32(n, (const tsl_bf16_t *)row + c0, out);
        } else {
            for (int64_t i = 0; i < n; i++) {
                tsl_bf16_t h;
                memcpy(&h, row + (size_t)(c0 + i) * s, sizeof h);
                out[i] = tsl_bf16_to_fp32(h);
            }
        }
        return out;
    default: { /* block formats: rows are dense by construction */
        int64_t bl = tsl_type_block_len(t);
        tsl_dequantize(t, row + (size_t)(c0 / bl) * tsl_type_block_size(t), out, n);
        return out;
    }
    }
}

/* Write n floats as elements [c0, c0 + n) of a row of type t, stride s. */
static void cp_from_f32(const cpu_simd *simd, tsl_type t, const float *src, char *row, size_t s, int64_t c0,
                        int64_t n) {
    switch (t) {
    case TSL_TYPE_F32:
        if (s == sizeof(float))
            memmove((float *)row + c0, src, (size_t)n * sizeof(float));
        else
            for (int64_t i = 0; i < n; i++) memcpy(row + (size_t)(c0 + i) * s, &src[i], sizeof(float));
        return;
    case TSL_TYPE_F16:
        if (s == sizeof(tsl_fp16_t)) {
            simd->f32_to_f16(n, src, (tsl_fp16_t *)row + c0);
        } else {
            for (int64_t i = 0; i < n; i++) {
                tsl_fp16_t h = tsl_fp32_to_fp16(src[i]);
                memcpy(row + (size_t)(c0 + i) * s, &h, sizeof h);
            }
        }
        return;
    case TSL_TYPE_BF16:
        if (s == sizeof(tsl_bf16_t)) {
            simd->f32_to_bf16(n, src, (tsl_bf16_t *)row + c0);
        } else {
            for (int64_t i = 0; i < n; i++) {
                tsl_bf16_t h = tsl_fp32_to_bf16(src[i]);
                memcpy(row + (size_t)(c0 + i) * s, &h, sizeof h);
            }
        }
        return;
    case TSL_TYPE_Q8_0:
        simd->quantize_q8_0(n, src, (tsl_block_q8_0 *)row + c0 / TSL_QK8_0);
        return;
    default: {
        int64_t bl = tsl_type_block_len(t);
        tsl_quantize(t, src, row + (size_t)(c0 / bl) * tsl_type_block_size(t), n);
        return;
    }
    }
}

/* n units of us bytes from stride ss to stride ds. */
static void cp_units(char *dst, size_t ds, const char *src, size_t ss, int64_t n, size_t us) {
    if (ds == us && ss == us) {
        memmove(dst, src, (size_t)n * us);
        return;
    }
    switch (us) {
    case 4:
        for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * ds, src + (size_t)i * ss, 4);
        break;
    case 2:
        for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * ds, src + (size_t)i * ss, 2);
        break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * ds, src + (size_t)i * ss, us);
        break;
    }
}

/* ---- dup / cont / cpy ----------------------------------------------------- */

#define CP_B 256 /* block edge of the transposing copy: a block stays in L2 */

/* one element of a plain float type (core.h) */
static inline float cp_load(tsl_type t, const char *p) { return core_load_f32(t, p); }
static inline void cp_store(tsl_type t, char *p, float f) { core_store_f32(t, p, f); }

/* For a same-shape copy between plain (non-block) types: the dimension k
 * (1..3) along which the side with strided rows is dense, or 0 when rows
 * are dense on both sides or no such dimension exists. */
static int cp_tile_dim(const tsl_tensor *a, const tsl_tensor *d) {
    if (tsl_type_is_quantized(a->type) || tsl_type_is_quantized(d->type) || !tsl_same_shape(a, d)) return 0;
    size_t ea = tsl_type_block_size(a->type), ed = tsl_type_block_size(d->type);
    const tsl_tensor *t = a->nb[0] != ea ? a : d->nb[0] != ed ? d : NULL;
    if (!t || t->ne[0] < 2) return 0;
    size_t e = t == a ? ea : ed;
    for (int k = 1; k < TSL_MAX_DIMS; k++)
        if (t->nb[k] == e && t->ne[k] > 1) return k;
    return 0;
}

/* Copy over dimensions 0 and k block by block: a CP_B x CP_B block is read
 * into per-thread scratch along the dimension the source is dense in (runs
 * of CP_B elements, which the prefetchers follow), then written out along
 * the dimension the destination is dense in. The scratch (272 KiB) stays in
 * L2; its rows are padded so a column walk does not pile onto one cache set.
 * Converts between F32/F16/BF16 or moves the bytes of one type (2 or 4 wide;
 * other widths go straight across). */
static void cp_tiled(const cpu_params *p, const tsl_tensor *a, tsl_tensor *d, int k, float *buf) {
    int o[2], no = 0;
    for (int i = 1; i < TSL_MAX_DIMS; i++)
        if (i != k) o[no++] = i;
    const bool same = a->type == d->type;
    const size_t es = tsl_type_block_size(d->type);
    const bool a_dense0 = a->nb[0] == tsl_type_block_size(a->type); /* else dense along k */
    const bool d_dense0 = d->nb[0] == es;
    const int64_t ne0 = d->ne[0], nek = d->ne[k];
    const int64_t nb0 = (ne0 + CP_B - 1) / CP_B, nbk = (nek + CP_B - 1) / CP_B;
    const size_t ld = CP_B + 16; /* scratch row stride, in 4-byte slots */
    /* strides in locals: with -fno-strict-aliasing every store could
     * otherwise change them, and they would be reloaded per element */
    const int64_t sa0 = (int64_t)a->nb[0], sak = (int64_t)a->nb[k];
    const int64_t sd0 = (int64_t)d->nb[0], sdk = (int64_t)d->nb[k];
    const tsl_type ta = a->type, td = d->type;
    uint32_t *raw = (uint32_t *)buf;
    uint16_t *raw16 = (uint16_t *)buf; /* same slots, half used */
    int64_t u0, u1;
    cpu_split_rows(d->ne[o[0]] * d->ne[o[1]] * nbk * nb0, p->ith, p->nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t b0 = u % nb0, bk = (u / nb0) % nbk, rest = u / (nb0 * nbk);
        int64_t j0 = rest % d->ne[o[0]], j1 = rest / d->ne[o[0]];
        const char *sa = (const char *)a->data + j0 * a->nb[o[0]] + j1 * a->nb[o[1]];
        char *sd = (char *)d->data + j0 * d->nb[o[0]] + j1 * d->nb[o[1]];
        const int64_t c0 = b0 * CP_B, c1 = c0 + CP_B < ne0 ? c0 + CP_B : ne0;
        const int64_t k0 = bk * CP_B, k1 = k0 + CP_B < nek ? k0 + CP_B : nek;
        if (same && es != 2 && es != 4) {
            for (int64_t i = c0; i < c1; i++)
                for (int64_t j = k0; j < k1; j++)
                    memcpy(sd + i * d->nb[0] + j * d->nb[k], sa + i * a->nb[0] + j * a->nb[k], es);
            continue;
        }
        /* read: slot(i, j) <- a(i, j), walking a's dense dimension innermost;
         * then write d(i, j) <- slot(i, j) along d's dense dimension. The
         * slots are laid out in d's order, so the write pass streams (and
         * vectorizes) and the transposition happens in the scattered stores
         * of the read pass, which store forwarding handles well. Each element
         * width gets its own loops so every copy is a plain load and store. */
#define CP_LOOPS(OUTER, INNER, BODY)                                                          \
    for (int64_t OUTER = OUTER##0_; OUTER < OUTER##1_; OUTER++)                               \
        for (int64_t INNER = INNER##0_; INNER < INNER##1_; INNER++) BODY
#define CP_BLOCK(RD, WR)                                                                      \
    do {                                                                                      \
        const int64_t i0_ = c0, i1_ = c1, j0_ = k0, j1_ = k1;                                 \
        if (a_dense0)                                                                         \
            CP_LOOPS(j, i, RD);                                                               \
        else                                                                                  \
            CP_LOOPS(i, j, RD);                                                               \
        if (d_dense0)                                                                         \
            CP_LOOPS(j, i, WR);                                                               \
        else                                                                                  \
            CP_LOOPS(i, j, WR);                                                               \
    } while (0)
#define CP_SRC (sa + i * sa0 + j * sak)
#define CP_DST (sd + i * sd0 + j * sdk)
#define CP_AT (d_dense0 ? (size_t)(j - k0) * ld + (size_t)(i - c0) : (size_t)(i - c0) * ld + (size_t)(j - k0))
        if (same && es == 4)
            CP_BLOCK(memcpy(&raw[CP_AT], CP_SRC, 4), memcpy(CP_DST, &raw[CP_AT], 4));
        else if (same && es == 2)
            CP_BLOCK(memcpy(&raw16[CP_AT], CP_SRC, 2), memcpy(CP_DST, &raw16[CP_AT], 2));
        else
            CP_BLOCK(buf[CP_AT] = cp_load(ta, CP_SRC), cp_store(td, CP_DST, buf[CP_AT]));
#undef CP_AT
#undef CP_DST
#undef CP_SRC
#undef CP_BLOCK
#undef CP_LOOPS
    }
}

/* Per-thread scratch of the blocked transposing copy. */
static size_t cp_tile_bytes(void) { return (size_t)CP_B * (CP_B + 16) * sizeof(float); }

/* Same type: move units (elements, or blocks of quantized types) in flat
 * order. */
static void cp_same_type(const cpu_params *p, const tsl_tensor *a, tsl_tensor *d) {
    const size_t us = tsl_type_block_size(d->type);
    const int64_t bl = tsl_type_block_len(d->type);
    if (tsl_is_contiguous(a) && tsl_is_contiguous(d)) {
        /* one flat range, split by bytes in whole units */
        int64_t nu = tsl_nelements(d) / bl, u0, u1;
        cpu_split_rows(nu, p->ith, p->nth, &u0, &u1);
        if (u1 > u0) memmove((char *)d->data + (size_t)u0 * us, (const char *)a->data + (size_t)u0 * us,
                             (size_t)(u1 - u0) * us);
        return;
    }
    const int64_t nud = d->ne[0] / bl, nus = a->ne[0] / bl; /* units per row */
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(d), p->ith, p->nth, &r0, &r1);
    if (tsl_same_shape(a, d)) {
        for (int64_t r = r0; r < r1; r++) {
            int64_t i1 = r % d->ne[1], i2 = (r / d->ne[1]) % d->ne[2], i3 = r / (d->ne[1] * d->ne[2]);
            cp_units(cp_row(d, i1, i2, i3), d->nb[0], cp_row(a, i1, i2, i3), a->nb[0], nud, us);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1 = r % d->ne[1], i2 = (r / d->ne[1]) % d->ne[2], i3 = r / (d->ne[1] * d->ne[2]);
        char *drow = cp_row(d, i1, i2, i3);
        int64_t k = r * nud, done = 0; /* flat unit index of this row's first unit */
        while (done < nud) {
            int64_t sr = k / nus, sc = k % nus;
            int64_t n = nus - sc < nud - done ? nus - sc : nud - done;
            int64_t s1 = sr % a->ne[1], s2 = (sr / a->ne[1]) % a->ne[2], s3 = sr / (a->ne[1] * a->ne[2]);
            cp_units(drow + (size_t)done * d->nb[0], d->nb[0], cp_row(a, s1, s2, s3) + (size_t)sc * a->nb[0],
                     a->nb[0], n, us);
            done += n;
            k += n;
        }
    }
}

/* Same shape, converting: (row, column chunk) units split over threads. */
static void cp_convert_same_shape(const cpu_params *p, const tsl_tensor *a, tsl_tensor *d, float *tsrc) {
    const cpu_simd *simd = cpu_simd_get();
    const int64_t ne0 = d->ne[0], nr = tsl_nrows(d);
    int64_t chunk = ne0 > 0 ? ne0 : 1, nchunk = 1;
    if (p->nth > 1 && nr < 4 * (int64_t)p->nth && ne0 >= 4096) {
        int64_t want = (4 * (int64_t)p->nth + nr - 1) / nr;
        chunk = ((ne0 + want - 1) / want + CP_TILE - 1) / CP_TILE * CP_TILE; /* keeps blocks whole */
        nchunk = (ne0 + chunk - 1) / chunk;
    }
    int64_t u0, u1;
    cpu_split_rows(nr * nchunk, p->ith, p->nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u / nchunk, c0 = (u % nchunk) * chunk, c1 = c0 + chunk < ne0 ? c0 + chunk : ne0;
        int64_t i1 = r % d->ne[1], i2 = (r / d->ne[1]) % d->ne[2], i3 = r / (d->ne[1] * d->ne[2]);
        const float *f = cp_to_f32(simd, a->type, cp_row(a, i1, i2, i3), a->nb[0], c0, c1 - c0, tsrc);
        cp_from_f32(simd, d->type, f, cp_row(d, i1, i2, i3), d->nb[0], c0, c1 - c0);
    }
}

/* Different shapes, converting: gather each destination row in flat order. */
static void cp_convert_reshape(const cpu_params *p, const tsl_tensor *a, tsl_tensor *d, float *tsrc, float *tdst) {
    const cpu_simd *simd = cpu_simd_get();
    const int64_t ne0d = d->ne[0], ne0s = a->ne[0];
    int64_t cached = -1;
    const float *srow = NULL;
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(d), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t k = r * ne0d, done = 0;
        while (done < ne0d) {
            int64_t sr = k / ne0s, sc = k % ne0s;
            int64_t n = ne0s - sc < ne0d - done ? ne0s - sc : ne0d - done;
            if (sr != cached) {
                int64_t s1 = sr % a->ne[1], s2 = (sr / a->ne[1]) % a->ne[2], s3 = sr / (a->ne[1] * a->ne[2]);
                srow = cp_to_f32(simd, a->type, cp_row(a, s1, s2, s3), a->nb[0], 0, ne0s, tsrc);
                cached = sr;
            }
            memcpy(tdst + done, srow + sc, (size_t)n * sizeof(float));
            done += n;
            k += n;
        }
        int64_t i1 = r % d->ne[1], i2 = (r / d->ne[1]) % d->ne[2], i3 = r / (d->ne[1] * d->ne[2]);
        cp_from_f32(simd, d->type, tdst, cp_row(d, i1, i2, i3), d->nb[0], 0, ne0d);
    }
}

/* Per thread: a block of the transposing copy, or one source row and one
 * destination row as floats for a converting copy. */
size_t cpu_dup_wsize(const tsl_tensor *node, int nth) {
    const tsl_tensor *a = node->src[0];
    if (cp_tile_dim(a, node)) return (size_t)nth * cp_tile_bytes();
    if (a->type == node->type) return 0;
    return (size_t)nth * (cp_floats_bytes(a->ne[0]) + cp_floats_bytes(node->ne[0]));
}

void cpu_op_dup(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *a = dst->src[0];
    if (tsl_nelements(dst) == 0) return;
    int k = cp_tile_dim(a, dst);
    if (k) {
        cp_tiled(p, a, dst, k, (float *)((char *)p->wdata + (size_t)p->ith * cp_tile_bytes()));
        return;
    }
    if (a->type == dst->type) {
        cp_same_type(p, a, dst);
        return;
    }
    char *ws = (char *)p->wdata + (size_t)p->ith * (cp_floats_bytes(a->ne[0]) + cp_floats_bytes(dst->ne[0]));
    float *tsrc = (float *)ws, *tdst = (float *)(ws + cp_floats_bytes(a->ne[0]));
    if (tsl_same_shape(a, dst))
        cp_convert_same_shape(p, a, dst, tsrc);
    else
        cp_convert_reshape(p, a, dst, tsrc, tdst);
}

/* ---- get_rows ------------------------------------------------------------- */

void cpu_op_get_rows(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *a = dst->src[0], *idx = dst->src[1];
    const cpu_simd *simd = cpu_simd_get();
    const int64_t ne0 = dst->ne[0], n = dst->ne[1], ne2 = dst->ne[2];
    const bool dense = dst->nb[0] == sizeof(float);
    float tile[CP_TILE];
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i = r % n, i2 = (r / n) % ne2, i3 = r / (n * ne2);
        int32_t row;
        memcpy(&row, (const char *)idx->data + i * idx->nb[0] + i2 * idx->nb[1] + i3 * idx->nb[2], sizeof row);
        if (row < 0 || row >= a->ne[1]) {
            cpu_kernel_fail(p,
                            "get_rows: index %d at position %lld of '%s' is out of range (table '%s' has %lld rows)",
                            (int)row, (long long)i, idx->name, a->name, (long long)a->ne[1]);
            return;
        }
        const char *src = cp_row(a, row, i2, i3);
        char *out = cp_row(dst, i, i2, i3);
        if (dense) {
            const float *f = cp_to_f32(simd, a->type, src, a->nb[0], 0, ne0, (float *)out);
            if (f != (const float *)out) memcpy(out, f, (size_t)ne0 * sizeof(float));
            continue;
        }
        for (int64_t c = 0; c < ne0; c += CP_TILE) {
            int64_t m = ne0 - c < CP_TILE ? ne0 - c : CP_TILE;
            const float *f = cp_to_f32(simd, a->type, src, a->nb[0], c, m, tile);
            for (int64_t k = 0; k < m; k++) memcpy(out + (size_t)(c + k) * dst->nb[0], &f[k], sizeof(float));
        }
    }
}

/* ---- set_rows ------------------------------------------------------------- */

/* src (F32) into dst (a view of the destination, F32 or F16) at the
 * positions idx gives along dim: threads split src's rows. Every index is
 * checked before anything is written, so a bad one fails the node with the
 * destination as it was. */
void cpu_op_set_rows(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *src = dst->src[0], *idx = dst->src[1];
    const int dim = op_get_i32(dst, 0);
    const int64_t n = idx->ne[0], lim = dst->ne[dim];
    for (int64_t j = 0; j < n; j++) {
        int32_t v;
        memcpy(&v, (const char *)idx->data + j * idx->nb[0], sizeof v);
        if (v < 0 || v >= lim) {
            if (p->ith == 0)
                cpu_kernel_fail(p,
                                "set_rows: index %d at position %lld of '%s' is out of range ('%s' has %lld %s)",
                                (int)v, (long long)j, idx->name, dst->src[2] ? dst->src[2]->name : dst->name,
                                (long long)lim, dim == 1 ? "rows" : "columns");
            return;
        }
    }
    const bool f16 = dst->type == TSL_TYPE_F16;
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(src), p->ith, p->nth, &r0, &r1);
    const int64_t ne1 = src->ne[1], ne2 = src->ne[2];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
        const char *s = (const char *)src->data + i1 * src->nb[1] + i2 * src->nb[2] + i3 * src->nb[3];
        int32_t row = 0;
        if (dim == 1) memcpy(&row, (const char *)idx->data + i1 * idx->nb[0], sizeof row);
        char *d = (char *)dst->data + (dim == 1 ? row : i1) * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3];
        for (int64_t i0 = 0; i0 < src->ne[0]; i0++) {
            int32_t col = (int32_t)i0;
            if (dim == 0) memcpy(&col, (const char *)idx->data + i0 * idx->nb[0], sizeof col);
            float f;
            memcpy(&f, s + i0 * src->nb[0], sizeof f);
            char *e = d + (size_t)col * dst->nb[0];
            if (f16) {
                tsl_fp16_t h = tsl_fp32_to_fp16(f);
                memcpy(e, &h, sizeof h);
            } else {
                memcpy(e, &f, sizeof f);
            }
        }
    }
}

/* ---- concat --------------------------------------------------------------- */

void cpu_op_concat(const cpu_params *p, tsl_tensor *dst) {
    const tsl_tensor *a = dst->src[0], *b = dst->src[1];
    const int dim = op_get_i32(dst, 0);
    const size_t es = tsl_type_block_size(dst->type);
    const int64_t ne1 = dst->ne[1], ne2 = dst->ne[2];
    int64_t r0, r1;
    cpu_split_rows(tsl_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i[4] = {0, r % ne1, (r / ne1) % ne2, r / (ne1 * ne2)};
        char *out = cp_row(dst, i[1], i[2], i[3]);
        if (dim == 0) {
            cp_units(out, dst->nb[0], cp_row(a, i[1], i[2], i[3]), a->nb[0], a->ne[0], es);
            cp_units(out + (size_t)a->ne[0] * dst->nb[0], dst->nb[0], cp_row(b, i[1], i[2], i[3]), b->nb[0],
                     b->ne[0], es);
            continue;
        }
        const tsl_tensor *s = a;
        if (i[dim] >= a->ne[dim]) {
            s = b;
            i[dim] -= a->ne[dim];
        }
        cp_units(out, dst->nb[0], cp_row(s, i[1], i[2], i[3]), s->nb[0], dst->ne[0], es);
    }
}
