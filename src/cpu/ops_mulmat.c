/*
 * ops_mulmat.c - mul_mat and out_prod on the CPU.
 *
 * mul_mat(a, b): a [K, M, A2, A3] weights (F32, F16, BF16, Q8_0, Q4_0, rows
 * dense), b [K, N, B2, B3] activations (F32, or F16 when a is F16, any byte
 * strides), a broadcast over b's batches; r[m, n] = sum_k a[k, m] * b[k, n].
 *
 * Two shapes of work need two algorithms:
 *
 *  - Few columns (decode, small batches): phase 1 converts b's columns into
 *    the weights' dot type (Q8_0 for quantized weights, so the inner loop is
 *    an integer dot; F16 / BF16 for those weights) in shared scratch, split
 *    over threads; then, after a barrier, each thread takes a disjoint range
 *    of weight rows and computes every output those rows feed (all columns,
 *    all broadcast batches). Each weight byte is read from memory once and by
 *    one thread, which is what a bandwidth-bound op wants. A single column
 *    uses the SIMD table's row dots; several go through 4-row x 4-column
 *    register tiles (gemm_avx512.c) over blocks of rows held in L2, which
 *    load each weight vector once for four columns (and unpack Q4_0 once).
 *
 *  - Many columns: a blocked GEMM (gemm.c) reuses each loaded value across
 *    a 32x12 register tile. Quantized weights are dequantized to F32 while
 *    the GEMM packs them, O(M*K) once per column block against O(M*N*K)
 *    multiply-adds; measured, this beats integer-dot tiles only once the
 *    transposing copy of A is amortized over ~100 columns.
 *
 * The switch point is a column count per weight type (MM_GEMM_MIN_N_*,
 * measured; see there).
 *
 * out_prod(a, b): a [M, K], b [N, K], r[m, n] = sum_k a[m, k] * b[n, k] is
 * the same product with the operands' strides swapped, so it always runs on
 * the GEMM, whose packing accepts any strides (and quantized blocks along m).
 *
 * Precision: everything accumulates in F32, so results match a double
 * reference to float tolerance relative to sum |a||b|. On the dot path
 * F16/BF16 weights see b rounded to F16/BF16 and quantized weights see b
 * quantized to Q8_0, as in ggml; the GEMM keeps b in F32.
 */
#include <string.h>

#include "cpu/ops.h"

/* Below these column counts the row-dot path wins. Measured on AVX-512
 * (Zen 5, 1 and 2 threads, weights of 1024^2 and 4096^2): the register-tiled
 * dots run at 160-200 GFLOP/s per core for every type and never pay the
 * GEMM's transposing copy of A, which the GEMM (230-240 per core) amortizes
 * only over many columns; the crossover is near 48-64 columns for F32 (its
 * dots load twice the bytes), 64-128 for F16/BF16, 96-160 for quantized
 * weights (integer dots). */
#ifndef MM_GEMM_MIN_N_F32
#define MM_GEMM_MIN_N_F32 64
#endif
#ifndef MM_GEMM_MIN_N_HALF
#define MM_GEMM_MIN_N_HALF 96
#endif
#ifndef MM_GEMM_MIN_N_QUANT
#define MM_GEMM_MIN_N_QUANT 128
#endif

/* Without the tiles (AVX2, portable), single row dots reload every weight
 * vector per column, and the GEMM wins from a handful of columns on. */
#define MM_GEMM_MIN_N_UNTILED_FLOAT 8
#define MM_GEMM_MIN_N_UNTILED_QUANT 16

static int64_t mm_gemm_min_n(tsl_type t) {
    const bool quant = tsl_type_is_quantized(t);
    if (!cpu_gemm_dot_tile(t)) return quant ? MM_GEMM_MIN_N_UNTILED_QUANT : MM_GEMM_MIN_N_UNTILED_FLOAT;
    switch (t) {
    case TSL_TYPE_F32: return MM_GEMM_MIN_N_F32;
    case TSL_TYPE_F16:
    case TSL_TYPE_BF16: return MM_GEMM_MIN_N_HALF;
    default: return MM_GEMM_MIN_N_QUANT;
    }
}

/* Weight rows per block on the dot path: every column is run past the rows
 * of a block while they sit in L2 (128 KB of rows, 4..16 of them: at least
 * one full 4-row tile). */
#define MM_BLOCK_BYTES (128 * 1024)
#define MM_BLOCK_MAX_ROWS 16

#define MM_ALIGN 64

static size_t mm_align(size_t n) { return (n + MM_ALIGN - 1) & ~(size_t)(MM_ALIGN - 1); }

static bool mm_weight_type_ok(tsl_type t) {
    return t == TSL_TYPE_F32 || t == TSL_TYPE_F16 || t == TSL_TYPE_BF16 || t == TSL_TYPE_Q8_0 ||
           t == TSL_TYPE_Q4_0;
}

/* The type b's columns are converted to for the row dots. */
static tsl_type mm_dot_type(tsl_type t) {
    switch (t) {
    case TSL_TYPE_F16: return TSL_TYPE_F16;
    case TSL_TYPE_BF16: return TSL_TYPE_BF16;
    case TSL_TYPE_Q8_0:
    case TSL_TYPE_Q4_0: return TSL_TYPE_Q8_0;
    default: return TSL_TYPE_F32;
    }
}

bool cpu_mul_mat_supported(const tsl_tensor *node) {
    if (!node || (node->op != TSL_OP_MUL_MAT && node->op != TSL_OP_OUT_PROD)) return false;
    const tsl_tensor *a = node->src[0], *b = node->src[1];
    if (!a || !b || node->type != TSL_TYPE_F32 || node->nb[0] != sizeof(float)) return false;
    if (!mm_weight_type_ok(a->type)) return false;
    if (a->ne[2] <= 0 || a->ne[3] <= 0 || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) return false;
    const bool quant = tsl_type_is_quantized(a->type);
    if (node->op == TSL_OP_MUL_MAT) {
        if (!(b->type == TSL_TYPE_F32 || (b->type == TSL_TYPE_F16 && a->type == TSL_TYPE_F16))) return false;
        if (a->nb[0] != tsl_type_block_size(a->type)) return false; /* rows dense */
        if (a->ne[0] != b->ne[0] || (quant && a->ne[0] % tsl_type_block_len(a->type) != 0)) return false;
        if (node->ne[0] != a->ne[1] || node->ne[1] != b->ne[1]) return false;
    } else {
        if (b->type != TSL_TYPE_F32) return false;
        /* quantized a is stored in blocks along m (its rows) */
        if (quant && (a->nb[0] != tsl_type_block_size(a->type) || a->ne[0] % tsl_type_block_len(a->type) != 0))
            return false;
        if (a->ne[1] != b->ne[1] || node->ne[0] != a->ne[0] || node->ne[1] != b->ne[0]) return false;
    }
    return node->ne[2] == b->ne[2] && node->ne[3] == b->ne[3];
}

/* ---- the few-column (row dot) path -------------------------------------- */

typedef struct mm_plan {
    bool gemm;
    tsl_type vdt;     /* dot type of b's columns */
    bool convert;     /* columns converted into scratch */
    bool gather;      /* columns are strided: gathered to F32 first */
    size_t col_bytes; /* bytes of one converted column (64-aligned) */
    int64_t ncols;    /* N * B2 * B3 */
    size_t tmp_off;   /* per-thread gather buffers (K floats) */
    size_t tmp_bytes;
    size_t wsize;
} mm_plan;

static mm_plan mm_make_plan(const tsl_tensor *node, int nth) {
    mm_plan pl;
    memset(&pl, 0, sizeof pl);
    const tsl_tensor *a = node->src[0], *b = node->src[1];
    if (nth < 1) nth = 1;
    if (node->op == TSL_OP_OUT_PROD) {
        pl.gemm = true;
        pl.wsize = cpu_gemm_wsize(node, nth);
        return pl;
    }
    const int64_t K = a->ne[0], N = b->ne[1];
    if (N >= mm_gemm_min_n(a->type)) {
        pl.gemm = true;
        pl.wsize = cpu_gemm_wsize(node, nth);
        return pl;
    }
    pl.vdt = mm_dot_type(a->type);
    const size_t bes = tsl_type_block_size(b->type);
    pl.gather = b->nb[0] != bes;
    pl.convert = pl.gather || pl.vdt != b->type;
    pl.ncols = N * b->ne[2] * b->ne[3];
    if (pl.convert) {
        pl.col_bytes = mm_align(tsl_row_size(pl.vdt, K));
        pl.tmp_off = (size_t)pl.ncols * pl.col_bytes;
        pl.tmp_bytes = pl.gather ? mm_align((size_t)K * sizeof(float)) : 0;
        pl.wsize = pl.tmp_off + (size_t)nth * pl.tmp_bytes;
    }
    return pl;
}

static inline float mm_dot(const cpu_simd *s, tsl_type t, int64_t n, const void *x, const void *y) {
    switch (t) {
    case TSL_TYPE_F32: return s->dot_f32(n, (const float *)x, (const float *)y);
    case TSL_TYPE_F16: return s->dot_f16(n, (const tsl_fp16_t *)x, (const tsl_fp16_t *)y);
    case TSL_TYPE_BF16: return s->dot_bf16(n, (const tsl_bf16_t *)x, (const tsl_bf16_t *)y);
    case TSL_TYPE_Q8_0: return s->dot_q8_0_q8_0(n, (const tsl_block_q8_0 *)x, (const tsl_block_q8_0 *)y);
    case TSL_TYPE_Q4_0: return s->dot_q4_0_q8_0(n, (const tsl_block_q4_0 *)x, (const tsl_block_q8_0 *)y);
    default: return 0.0f;
    }
}

/* Phase 1: column c = n + N*(i2 + B2*i3) of b, converted to the dot type. */
static void mm_convert_columns(const cpu_params *p, const tsl_tensor *b, const mm_plan *pl, int64_t K) {
    const cpu_simd *s = cpu_simd_get();
    const int64_t N = b->ne[1], B2 = b->ne[2];
    float *tmp = pl->gather ? (float *)((char *)p->wdata + pl->tmp_off + (size_t)p->ith * pl->tmp_bytes) : NULL;
    int64_t c0, c1;
    cpu_split_rows(pl->ncols, p->ith, p->nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        const int64_t n = c % N, i2 = (c / N) % B2, i3 = c / (N * B2);
        const char *col = (const char *)b->data + (size_t)n * b->nb[1] + (size_t)i2 * b->nb[2] + (size_t)i3 * b->nb[3];
        char *out = (char *)p->wdata + (size_t)c * pl->col_bytes;
        const float *src;
        if (pl->gather) {
            for (int64_t k = 0; k < K; k++) {
                const char *e = col + (size_t)k * b->nb[0];
                if (b->type == TSL_TYPE_F16) {
                    tmp[k] = tsl_fp16_to_fp32(*(const tsl_fp16_t *)e);
                } else {
                    memcpy(&tmp[k], e, sizeof(float));
                }
            }
            src = tmp;
        } else if (b->type == TSL_TYPE_F32) {
            src = (const float *)col;
        } else {
            /* F16 dense columns only reach here when they need no conversion */
            src = NULL;
        }
        switch (pl->vdt) {
        case TSL_TYPE_F32: memcpy(out, src, (size_t)K * sizeof(float)); break;
        case TSL_TYPE_F16: s->f32_to_f16(K, src, (tsl_fp16_t *)out); break;
        case TSL_TYPE_BF16: s->f32_to_bf16(K, src, (tsl_bf16_t *)out); break;
        case TSL_TYPE_Q8_0: s->quantize_q8_0(K, src, (tsl_block_q8_0 *)out); break;
        default: break;
        }
    }
}

/* Column n of b batch (i2, i3) in the dot type: converted in scratch, or b
 * itself when it is already dense and of the right type. */
static const void *mm_col(const cpu_params *p, const tsl_tensor *b, const mm_plan *pl, int64_t n, int64_t i2,
                          int64_t i3) {
    if (pl->convert)
        return (const char *)p->wdata + (size_t)((i3 * b->ne[2] + i2) * b->ne[1] + n) * pl->col_bytes;
    return (const char *)b->data + (size_t)n * b->nb[1] + (size_t)i2 * b->nb[2] + (size_t)i3 * b->nb[3];
}

/* Phase 2: thread ith computes every output fed by its weight rows: for
 * each weight row, the "virtual columns" are all (n, broadcast batch) pairs
 * that read it. With one virtual column (plain mat-vec) the SIMD table's row
 * dot streams the row; with several, 4-row x 4-column register tiles reuse
 * each loaded row and column vector across the tile. */
static void mm_dot_rows(const cpu_params *p, const tsl_tensor *a, const tsl_tensor *b, tsl_tensor *dst,
                        const mm_plan *pl) {
    const cpu_simd *s = cpu_simd_get();
    const int64_t K = a->ne[0], M = a->ne[1], A2 = a->ne[2], A3 = a->ne[3];
    const int64_t N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const int64_t r2 = B2 / A2, r3 = B3 / A3, V = N * r2 * r3;
    const cpu_dot_tile_fn tile = V > 1 ? cpu_gemm_dot_tile(a->type) : NULL;
    const size_t arow = tsl_row_size(a->type, K);
    int64_t rb = (int64_t)(MM_BLOCK_BYTES / (arow ? arow : 1));
    if (rb > MM_BLOCK_MAX_ROWS) rb = MM_BLOCK_MAX_ROWS;
    rb = rb < 4 ? 4 : rb & ~(int64_t)3; /* whole tiles */

    int64_t r0, r1;
    cpu_split_rows(M * A2 * A3, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1;) {
        const int64_t ia = r / M, m = r % M;
        int64_t cnt = rb;
        if (cnt > M - m) cnt = M - m;
        if (cnt > r1 - r) cnt = r1 - r;
        const int64_t ia2 = ia % A2, ia3 = ia / A2;
        const char *a0 = (const char *)a->data + (size_t)m * a->nb[1] + (size_t)ia2 * a->nb[2] + (size_t)ia3 * a->nb[3];
        for (int64_t v0 = 0; v0 < V; v0 += 4) {
            const int nc = V - v0 < 4 ? (int)(V - v0) : 4;
            const void *cols[4];
            float *outs[4];
            for (int j = 0; j < nc; j++) {
                const int64_t v = v0 + j, n = v % N, i2 = ia2 * r2 + (v / N) % r2, i3 = ia3 * r3 + v / (N * r2);
                cols[j] = mm_col(p, b, pl, n, i2, i3);
                outs[j] = (float *)((char *)dst->data + (size_t)n * dst->nb[1] + (size_t)i2 * dst->nb[2] +
                                    (size_t)i3 * dst->nb[3]) + m;
            }
            if (!tile) {
                for (int j = 0; j < nc; j++)
                    for (int64_t t = 0; t < cnt; t++)
                        outs[j][t] = mm_dot(s, a->type, K, a0 + (size_t)t * a->nb[1], cols[j]);
                continue;
            }
            for (int64_t t = 0; t < cnt; t += 4) {
                const int nr = cnt - t < 4 ? (int)(cnt - t) : 4;
                const void *rows[4];
                float res[16];
                for (int i = 0; i < 4; i++) rows[i] = a0 + (size_t)(t + (i < nr ? i : nr - 1)) * a->nb[1];
                /* on the first pass over a block the rows come from memory:
                 * fetch the 4 rows after this tile as one stream */
                const char *pf = v0 == 0 ? a0 + (size_t)(t + nr) * a->nb[1] : NULL;
                tile(a->type, K, rows, cols, nc, pf, (int64_t)(4 * arow), res);
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < nc; j++) outs[j][t + i] = res[i * 4 + j];
            }
        }
        r += cnt;
    }
}

size_t cpu_mul_mat_wsize(const tsl_tensor *node, int nth) {
    if (!cpu_mul_mat_supported(node)) return 0;
    return mm_make_plan(node, nth).wsize;
}

static bool mm_check(const cpu_params *p, const tsl_tensor *dst) {
    if (cpu_mul_mat_supported(dst)) return true;
    if (p->ith == 0) {
        char sa[96] = "?", sb[96] = "?";
        if (dst && dst->src[0]) tsl_shape_str(dst->src[0], sa, sizeof sa);
        if (dst && dst->src[1]) tsl_shape_str(dst->src[1], sb, sizeof sb);
        cpu_kernel_fail(p, "%s: no CPU kernel for a %s, b %s", dst ? tsl_op_name(dst->op) : "MUL_MAT", sa, sb);
    }
    return false;
}

void cpu_op_mul_mat(const cpu_params *p, tsl_tensor *dst) {
    if (!mm_check(p, dst)) return;
    const mm_plan pl = mm_make_plan(dst, p->nth);
    if (pl.gemm) {
        cpu_gemm(p, dst);
        return;
    }
    const tsl_tensor *a = dst->src[0], *b = dst->src[1];
    if (pl.convert) {
        mm_convert_columns(p, b, &pl, a->ne[0]);
        if (p->nth > 1) cpu_barrier(p);
    }
    mm_dot_rows(p, a, b, dst, &pl);
}

void cpu_op_out_prod(const cpu_params *p, tsl_tensor *dst) {
    if (!mm_check(p, dst)) return;
    cpu_gemm(p, dst);
}
