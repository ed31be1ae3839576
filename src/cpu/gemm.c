/*
 * gemm.c - the blocked F32 matrix multiply behind mul_mat and out_prod when
 * the activation has many columns.
 *
 * Both ops are "NT" products: every output element is a dot product along K
 * of a row of A (the weights, M rows) and a row of B (the activations, N
 * rows). The dot-product form cannot reuse loaded data across outputs, so
 * for more than a few columns we run a GotoBLAS/BLIS-style GEMM instead:
 *
 *   for each NC-wide block of B columns           (B panel lives in L3)
 *     for each KC-deep slice of K                 pack B: KC x NC, NR-wide
 *       for each MC-tall block of A rows          pack A: MC x KC, MR-wide (L2)
 *         for each NR micro-panel of B            (stays in L1)
 *           for each MR micro-panel of A
 *             micro-kernel: C[MR x NR] += A~ * B~ (registers)
 *
 * Packing is where every layout and type question is answered once: A is
 * converted to F32 while it is packed (F16, BF16, and Q8_0/Q4_0 dequantized),
 * B may be F32 or F16 with any byte strides, and out_prod's transposed
 * operands are just other strides. The micro-kernels then see one layout:
 * A~ as [k][MR] (vectors along M, which is also C's contiguous dimension, so
 * results are stored with plain vector stores) and B~ as [k][NR] (broadcast).
 * The cost is one transposing copy of each operand per block, O(MK + NK)
 * against O(MNK) multiply-adds.
 *
 * Micro-kernels exist per instruction set (gemm_avx512.c: 32x12, gemm_avx2.c:
 * 16x6, a portable 8x4 here); the set follows the SIMD table in use, so
 * TSL_SIMD=generic exercises the portable path everywhere.
 *
 * Threads: each thread does whole batches when there are enough of them
 * (no sharing, no barriers). Otherwise one product is split: over M when it
 * is tall enough (the B panel is packed once, cooperatively, into shared
 * scratch; threads meet at a barrier before and after using it), else over N
 * (each thread packs its own columns and all of the short A). The plan is a
 * pure function of the shapes and the thread count, so the scratch size
 * computed before the compute matches what the compute uses, and every
 * thread calls cpu_barrier the same number of times.
 */
#include <stdint.h>
#include <string.h>

#include "cpu/cpu.h"

/* ---- per-ISA micro-kernels (gemm_avx512.c, gemm_avx2.c) ------------------
 * kernel: C[n][m] (+)= sum_k ap[k*MR + m] * bp[k*NR + n] for m < mr, n < nr,
 *         C element (m, n) at c[n*ldc + m]; acc = 0 stores, 1 accumulates.
 * transpose: out[k*width + i] = rows[i][k] for i < nvalid, 0 for
 *         nvalid <= i < width, k < kc. */
typedef void (*gemm_kernel_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr,
                               int nr, int acc);
typedef void (*gemm_transpose_fn)(const float *const *rows, int nvalid, int width, int64_t kc, float *out);

#if defined(__x86_64__) || defined(_M_X64)
#define GEMM_X86 1
void gemm_avx512_kernel(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                        int acc);
void gemm_avx512_transpose(const float *const *rows, int nvalid, int width, int64_t kc, float *out);
void gemm_avx512_dot_tile(tsl_type t, int64_t k, const void *const *rows, const void *const *cols, int nc,
                          const void *pf, int64_t pf_len, float *out);
void gemm_avx2_kernel(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                      int acc);
void gemm_avx2_transpose(const float *const *rows, int nvalid, int width, int64_t kc, float *out);
#endif

#define GEMM_MAX_MR 32
#define GEMM_ALIGN 64

typedef struct gemm_isa {
    int mr, nr;
    int64_t kc, mc, nc; /* cache blocking: mc a multiple of mr, nc of nr */
    gemm_kernel_fn kernel;
    gemm_transpose_fn transpose;
} gemm_isa;

/* ---- portable micro-kernel ------------------------------------------------ */

#define GEN_MR 8
#define GEN_NR 4

static void gemm_generic_kernel(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr,
                                int nr, int acc) {
    float t[GEN_NR][GEN_MR] = {{0}};
    for (int64_t k = 0; k < kc; k++) {
        const float *a = ap + k * GEN_MR, *b = bp + k * GEN_NR;
        for (int j = 0; j < GEN_NR; j++)
            for (int i = 0; i < GEN_MR; i++) t[j][i] += a[i] * b[j];
    }
    for (int j = 0; j < nr; j++) {
        float *cj = c + j * ldc;
        if (acc)
            for (int i = 0; i < mr; i++) cj[i] += t[j][i];
        else
            for (int i = 0; i < mr; i++) cj[i] = t[j][i];
    }
}

static void gemm_generic_transpose(const float *const *rows, int nvalid, int width, int64_t kc, float *out) {
    /* Blocks of 8 k keep the reads of each row within a cache line or two. */
    for (int64_t k0 = 0; k0 < kc; k0 += 8) {
        int64_t k1 = k0 + 8 < kc ? k0 + 8 : kc;
        for (int i = 0; i < width; i++) {
            const float *r = i < nvalid ? rows[i] : NULL;
            for (int64_t k = k0; k < k1; k++) out[k * width + i] = r ? r[k] : 0.0f;
        }
    }
}

static gemm_isa gemm_pick_isa(void) {
    gemm_isa g = {GEN_MR, GEN_NR, 256, 128, 1024, gemm_generic_kernel, gemm_generic_transpose};
#ifdef GEMM_X86
    const char *name = cpu_simd_get()->name;
    if (name && !strcmp(name, "avx512") && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq")) {
        gemm_isa x = {32, 12, 256, 256, 1200, gemm_avx512_kernel, gemm_avx512_transpose};
        return x;
    }
    if (name && (!strcmp(name, "avx2") || !strcmp(name, "avx512")) && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma")) {
        gemm_isa x = {16, 6, 256, 128, 1200, gemm_avx2_kernel, gemm_avx2_transpose};
        return x;
    }
#endif
    return g;
}

/* The register-tiled row dots (4 weight rows x up to 4 columns) for the
 * few-column path of mul_mat, where this instruction set has them: rows of
 * type t, columns in t's dot type. NULL means use the SIMD table's single
 * dots. Follows the same ISA choice as the GEMM. */
cpu_dot_tile_fn cpu_gemm_dot_tile(tsl_type t) {
#ifdef GEMM_X86
    if (gemm_pick_isa().kernel != gemm_avx512_kernel) return NULL;
    switch (t) {
    case TSL_TYPE_F32:
    case TSL_TYPE_F16:
    case TSL_TYPE_BF16: return gemm_avx512_dot_tile;
    case TSL_TYPE_Q8_0:
    case TSL_TYPE_Q4_0: return __builtin_cpu_supports("avx512vnni") ? gemm_avx512_dot_tile : NULL;
    default: return NULL;
    }
#else
    (void)t;
    return NULL;
#endif
}

/* ---- operands --------------------------------------------------------------
 * One operand of the product, A (x = m) or B (x = n): element (x, k) of batch
 * (i2, i3) lives at data + i2*s2 + i3*s3 + x*sx + k*sk. Quantized operands
 * are stored in blocks along one dimension: along k (mul_mat weights, rows
 * x at x*sx) or along x (out_prod, rows k at k*sk). */
typedef struct gemm_src {
    const char *data;
    tsl_type type;
    size_t sx, sk, s2, s3;
    int blocks_along_x;
} gemm_src;

typedef struct gemm_job {
    gemm_src a, b;
    int64_t M, N, K;
    int64_t n2, n3; /* batches of B and C */
    int64_t r2, r3; /* B batch i2 uses A batch i2 / r2 */
    char *c;
    size_t cn, c2, c3; /* C element (m, n) at c + m*4 + n*cn */
} gemm_job;

static int gemm_job_from_node(const tsl_tensor *node, gemm_job *j) {
    const tsl_tensor *a = node->src[0], *b = node->src[1];
    if (!a || !b) return 0;
    memset(j, 0, sizeof *j);
    j->a.data = a->data;
    j->a.type = a->type;
    j->a.s2 = a->nb[2];
    j->a.s3 = a->nb[3];
    j->b.data = b->data;
    j->b.type = b->type;
    j->b.s2 = b->nb[2];
    j->b.s3 = b->nb[3];
    if (node->op == TSL_OP_OUT_PROD) {
        /* a [M, K], b [N, K]: the product's x runs along dim 0 */
        j->M = a->ne[0];
        j->K = a->ne[1];
        j->N = b->ne[0];
        j->a.sx = a->nb[0];
        j->a.sk = a->nb[1];
        j->a.blocks_along_x = 1;
        j->b.sx = b->nb[0];
        j->b.sk = b->nb[1];
    } else {
        /* a [K, M], b [K, N] */
        j->K = a->ne[0];
        j->M = a->ne[1];
        j->N = b->ne[1];
        j->a.sk = a->nb[0];
        j->a.sx = a->nb[1];
        j->b.sk = b->nb[0];
        j->b.sx = b->nb[1];
    }
    j->n2 = b->ne[2];
    j->n3 = b->ne[3];
    j->r2 = a->ne[2] > 0 ? b->ne[2] / a->ne[2] : 1;
    j->r3 = a->ne[3] > 0 ? b->ne[3] / a->ne[3] : 1;
    if (j->r2 < 1) j->r2 = 1;
    if (j->r3 < 1) j->r3 = 1;
    j->c = node->data;
    j->cn = node->nb[1];
    j->c2 = node->nb[2];
    j->c3 = node->nb[3];
    return 1;
}

/* ---- plan -------------------------------------------------------------------- */

enum { GEMM_BY_BATCH, GEMM_SPLIT_M, GEMM_SPLIT_N };

typedef struct gemm_plan {
    gemm_isa isa;
    int mode;
    int64_t mc, nc;        /* effective blocks (clamped to the problem) */
    size_t shared_bytes;   /* shared B panel (SPLIT_M) */
    size_t thread_bytes;   /* per thread: A block, private B panel, conversion rows */
    size_t off_b, off_tmp; /* within a thread's area (A block at 0) */
} gemm_plan;

static size_t gemm_align(size_t n) { return (n + GEMM_ALIGN - 1) & ~(size_t)(GEMM_ALIGN - 1); }
static int64_t gemm_round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
static int64_t gemm_min(int64_t a, int64_t b) { return a < b ? a : b; }

static gemm_plan gemm_make_plan(const gemm_job *j, int nth) {
    gemm_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.isa = gemm_pick_isa();
    const gemm_isa *g = &pl.isa;
    int64_t nbatch = j->n2 * j->n3;
    int64_t m_panels = (j->M + g->mr - 1) / g->mr;
    if (nth <= 1 || (nbatch >= nth && (nbatch % nth == 0 || nbatch >= 4 * (int64_t)nth)))
        pl.mode = GEMM_BY_BATCH;
    else if (m_panels >= 2 * (int64_t)nth || j->M >= j->N)
        pl.mode = GEMM_SPLIT_M;
    else
        pl.mode = GEMM_SPLIT_N;
    pl.mc = gemm_min(g->mc, gemm_round_up(j->M > 0 ? j->M : 1, g->mr));
    pl.nc = gemm_min(g->nc, gemm_round_up(j->N > 0 ? j->N : 1, g->nr));
    int64_t kc = gemm_min(g->kc, j->K > 0 ? j->K : 1);
    size_t a_bytes = gemm_align((size_t)(pl.mc * kc) * sizeof(float));
    size_t b_bytes = gemm_align((size_t)(pl.nc * kc) * sizeof(float));
    size_t tmp_bytes = gemm_align((size_t)(GEMM_MAX_MR * kc) * sizeof(float));
    pl.shared_bytes = pl.mode == GEMM_SPLIT_M ? b_bytes : 0;
    pl.off_b = a_bytes;
    pl.off_tmp = a_bytes + (pl.mode == GEMM_SPLIT_M ? 0 : b_bytes);
    pl.thread_bytes = pl.off_tmp + tmp_bytes;
    return pl;
}

/* ---- packing -------------------------------------------------------------- */

/* Elements [i0, i0+n) of a row of type t (a quantized row starts at its
 * first block) as F32. */
static void gemm_row_to_f32(const cpu_simd *s, tsl_type t, const char *row, int64_t i0, int64_t n, float *out) {
    switch (t) {
    case TSL_TYPE_F32: memcpy(out, (const float *)row + i0, (size_t)n * sizeof(float)); return;
    case TSL_TYPE_F16: s->f16_to_f32(n, (const tsl_fp16_t *)row + i0, out); return;
    case TSL_TYPE_BF16: s->bf16_to_f32(n, (const tsl_bf16_t *)row + i0, out); return;
    default: break;
    }
    const int64_t bl = tsl_type_block_len(t);
    const size_t bs = tsl_type_block_size(t);
    while (n > 0) {
        int64_t blk = i0 / bl, off = i0 % bl;
        if (off == 0 && n >= bl) {
            int64_t nb = n / bl;
            tsl_dequantize(t, row + blk * bs, out, nb * bl);
            out += nb * bl;
            i0 += nb * bl;
            n -= nb * bl;
        } else {
            float tmp[64];
            int64_t take = gemm_min(bl - off, n);
            tsl_dequantize(t, row + blk * bs, tmp, bl);
            memcpy(out, tmp + off, (size_t)take * sizeof(float));
            out += take;
            i0 += take;
            n -= take;
        }
    }
}

static float gemm_load_f32(tsl_type t, const char *p) {
    switch (t) {
    case TSL_TYPE_F16: return tsl_fp16_to_fp32(*(const tsl_fp16_t *)p);
    case TSL_TYPE_BF16: return tsl_bf16_to_fp32(*(const tsl_bf16_t *)p);
    default: {
        float f;
        memcpy(&f, p, sizeof f);
        return f;
    }
    }
}

/* Pack rows x0..x0+nv of src (one batch, base) over k0..k0+kc into
 * out[k*width + i], zero-padding to width. tmp holds width*kc floats. */
static void gemm_pack(const gemm_isa *g, const cpu_simd *s, const gemm_src *src, const char *base, int64_t x0,
                      int nv, int width, int64_t k0, int64_t kc, float *tmp, float *out) {
    const bool quant = tsl_type_is_quantized(src->type);
    const size_t es = quant ? 0 : tsl_type_block_size(src->type);
    if ((quant && !src->blocks_along_x) || (!quant && src->sk == es)) {
        /* rows along k (mul_mat weights, activations): convert, then transpose */
        const float *rows[GEMM_MAX_MR];
        for (int i = 0; i < nv; i++) {
            const char *row = base + (size_t)(x0 + i) * src->sx;
            if (src->type == TSL_TYPE_F32) {
                rows[i] = (const float *)row + k0;
            } else {
                gemm_row_to_f32(s, src->type, row, k0, kc, tmp + (size_t)i * kc);
                rows[i] = tmp + (size_t)i * kc;
            }
        }
        g->transpose(rows, nv, width, kc, out);
    } else if (quant || src->sx == es) {
        /* rows along x (out_prod operands): each k gives a contiguous run */
        for (int64_t k = 0; k < kc; k++) {
            float *o = out + k * width;
            gemm_row_to_f32(s, src->type, base + (size_t)(k0 + k) * src->sk, x0, nv, o);
            for (int i = nv; i < width; i++) o[i] = 0.0f;
        }
    } else {
        /* neither dimension dense: element by element */
        for (int64_t k = 0; k < kc; k++) {
            float *o = out + k * width;
            const char *pk = base + (size_t)(k0 + k) * src->sk;
            for (int i = 0; i < nv; i++) o[i] = gemm_load_f32(src->type, pk + (size_t)(x0 + i) * src->sx);
            for (int i = nv; i < width; i++) o[i] = 0.0f;
        }
    }
}

/* ---- the blocked loops ---------------------------------------------------- */

typedef struct gemm_batch {
    const char *a, *b;
    char *c;
} gemm_batch;

static gemm_batch gemm_batch_at(const gemm_job *j, int64_t ib) {
    int64_t i2 = ib % j->n2, i3 = ib / j->n2;
    gemm_batch bt;
    bt.a = j->a.data + (size_t)(i2 / j->r2) * j->a.s2 + (size_t)(i3 / j->r3) * j->a.s3;
    bt.b = j->b.data + (size_t)i2 * j->b.s2 + (size_t)i3 * j->b.s3;
    bt.c = j->c + (size_t)i2 * j->c2 + (size_t)i3 * j->c3;
    return bt;
}

/* C[m0..m1, n0..n1] of one batch for a packed B block (bpack, columns
 * jc..jc+nc) over k slice pc..pc+kc. */
static void gemm_block_rows(const gemm_plan *pl, const cpu_simd *s, const gemm_job *j, const gemm_batch *bt,
                            int64_t m0, int64_t m1, int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                            const float *bpack, float *apack, float *tmp) {
    const gemm_isa *g = &pl->isa;
    const int64_t ldc = (int64_t)(j->cn / sizeof(float));
    for (int64_t ic = m0; ic < m1; ic += pl->mc) {
        int64_t mc = gemm_min(pl->mc, m1 - ic);
        for (int64_t ir = 0; ir < mc; ir += g->mr)
            gemm_pack(g, s, &j->a, bt->a, ic + ir, (int)gemm_min(g->mr, mc - ir), g->mr, pc, kc, tmp,
                      apack + ir * kc);
        for (int64_t jr = 0; jr < nc; jr += g->nr) {
            int nr = (int)gemm_min(g->nr, nc - jr);
            float *cc = (float *)(bt->c + (size_t)(jc + jr) * j->cn) + ic;
            for (int64_t ir = 0; ir < mc; ir += g->mr)
                g->kernel(kc, apack + ir * kc, bpack + jr * kc, cc + ir, ldc, (int)gemm_min(g->mr, mc - ir), nr,
                          pc > 0);
        }
    }
}

/* A region of one batch done by one thread alone: no sharing, no barrier. */
static void gemm_region(const gemm_plan *pl, const cpu_simd *s, const gemm_job *j, const gemm_batch *bt,
                        int64_t m0, int64_t m1, int64_t n0, int64_t n1, char *area) {
    const gemm_isa *g = &pl->isa;
    float *apack = (float *)area, *bpack = (float *)(area + pl->off_b), *tmp = (float *)(area + pl->off_tmp);
    for (int64_t jc = n0; jc < n1; jc += pl->nc) {
        int64_t nc = gemm_min(pl->nc, n1 - jc);
        for (int64_t pc = 0; pc < j->K; pc += g->kc) {
            int64_t kc = gemm_min(g->kc, j->K - pc);
            for (int64_t jr = 0; jr < nc; jr += g->nr)
                gemm_pack(g, s, &j->b, bt->b, jc + jr, (int)gemm_min(g->nr, nc - jr), g->nr, pc, kc, tmp,
                          bpack + jr * kc);
            gemm_block_rows(pl, s, j, bt, m0, m1, jc, nc, pc, kc, bpack, apack, tmp);
        }
    }
}

static void gemm_zero(const gemm_job *j, int ith, int nth) {
    int64_t nb = j->n2 * j->n3, r0, r1;
    cpu_split_rows(j->N * nb, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        gemm_batch bt = gemm_batch_at(j, r / j->N);
        memset(bt.c + (size_t)(r % j->N) * j->cn, 0, (size_t)j->M * sizeof(float));
    }
}

size_t cpu_gemm_wsize(const tsl_tensor *node, int nth) {
    gemm_job j;
    if (nth < 1) nth = 1;
    if (!gemm_job_from_node(node, &j)) return 0;
    gemm_plan pl = gemm_make_plan(&j, nth);
    return pl.shared_bytes + (size_t)nth * pl.thread_bytes;
}

void cpu_gemm(const cpu_params *p, tsl_tensor *node) {
    gemm_job j;
    if (!gemm_job_from_node(node, &j)) return;
    const int ith = p->ith, nth = p->nth;
    if (j.M == 0 || j.N == 0) return;
    if (j.K == 0) {
        gemm_zero(&j, ith, nth);
        return;
    }
    const gemm_plan pl = gemm_make_plan(&j, nth);
    const gemm_isa *g = &pl.isa;
    const cpu_simd *s = cpu_simd_get();
    char *shared = (char *)p->wdata;
    char *area = shared + pl.shared_bytes + (size_t)ith * pl.thread_bytes;
    const int64_t nbatch = j.n2 * j.n3;

    if (pl.mode == GEMM_BY_BATCH) {
        int64_t b0, b1;
        cpu_split_rows(nbatch, ith, nth, &b0, &b1);
        for (int64_t ib = b0; ib < b1; ib++) {
            gemm_batch bt = gemm_batch_at(&j, ib);
            gemm_region(&pl, s, &j, &bt, 0, j.M, 0, j.N, area);
        }
        return;
    }
    if (pl.mode == GEMM_SPLIT_N) {
        int64_t np = (j.N + g->nr - 1) / g->nr, p0, p1;
        cpu_split_rows(np, ith, nth, &p0, &p1);
        int64_t n0 = p0 * g->nr, n1 = gemm_min(j.N, p1 * g->nr);
        for (int64_t ib = 0; ib < nbatch; ib++) {
            gemm_batch bt = gemm_batch_at(&j, ib);
            if (n0 < n1) gemm_region(&pl, s, &j, &bt, 0, j.M, n0, n1, area);
        }
        return;
    }

    /* GEMM_SPLIT_M: B packed once into shared scratch, A rows split. */
    int64_t mp = (j.M + g->mr - 1) / g->mr, q0, q1;
    cpu_split_rows(mp, ith, nth, &q0, &q1);
    const int64_t m0 = q0 * g->mr, m1 = gemm_min(j.M, q1 * g->mr);
    float *bpack = (float *)shared, *apack = (float *)area, *tmp = (float *)(area + pl.off_tmp);
    for (int64_t ib = 0; ib < nbatch; ib++) {
        gemm_batch bt = gemm_batch_at(&j, ib);
        for (int64_t jc = 0; jc < j.N; jc += pl.nc) {
            int64_t nc = gemm_min(pl.nc, j.N - jc);
            int64_t np = (nc + g->nr - 1) / g->nr;
            for (int64_t pc = 0; pc < j.K; pc += g->kc) {
                int64_t kc = gemm_min(g->kc, j.K - pc), p0, p1;
                cpu_split_rows(np, ith, nth, &p0, &p1);
                for (int64_t pj = p0; pj < p1; pj++) {
                    int64_t jr = pj * g->nr;
                    gemm_pack(g, s, &j.b, bt.b, jc + jr, (int)gemm_min(g->nr, nc - jr), g->nr, pc, kc, tmp,
                              bpack + jr * kc);
                }
                cpu_barrier(p);
                if (m0 < m1) gemm_block_rows(&pl, s, &j, &bt, m0, m1, jc, nc, pc, kc, bpack, apack, tmp);
                cpu_barrier(p);
            }
        }
    }
}

/* The plain F32 entry point of cpu.h: C[n*ldc + m] = sum_k A[m*lda + k] *
 * B[n*ldb + k] (leading dimensions in elements), run by every thread of the
 * pool like a kernel. p->wdata must hold cpu_gemm_f32_wsize(M, N, K, nth)
 * bytes, 64-byte aligned. */
static void gemm_f32_node(int64_t M, int64_t N, int64_t K, const float *A, size_t lda, const float *B, size_t ldb,
                          float *C, size_t ldc, tsl_tensor *a, tsl_tensor *b, tsl_tensor *c) {
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    memset(c, 0, sizeof *c);
    a->type = b->type = c->type = TSL_TYPE_F32;
    a->ne[0] = K, a->ne[1] = M, a->ne[2] = a->ne[3] = 1;
    a->nb[0] = 4, a->nb[1] = lda * 4, a->nb[2] = a->nb[3] = a->nb[1] * (size_t)M;
    b->ne[0] = K, b->ne[1] = N, b->ne[2] = b->ne[3] = 1;
    b->nb[0] = 4, b->nb[1] = ldb * 4, b->nb[2] = b->nb[3] = b->nb[1] * (size_t)N;
    c->ne[0] = M, c->ne[1] = N, c->ne[2] = c->ne[3] = 1;
    c->nb[0] = 4, c->nb[1] = ldc * 4, c->nb[2] = c->nb[3] = c->nb[1] * (size_t)N;
    a->data = (void *)A;
    b->data = (void *)B;
    c->data = C;
    c->op = TSL_OP_MUL_MAT;
    c->src[0] = a;
    c->src[1] = b;
}

size_t cpu_gemm_f32_wsize(int64_t M, int64_t N, int64_t K, int nth) {
    tsl_tensor a, b, c;
    gemm_f32_node(M, N, K, NULL, (size_t)K, NULL, (size_t)K, NULL, (size_t)M, &a, &b, &c);
    return cpu_gemm_wsize(&c, nth);
}

void cpu_gemm_f32(const cpu_params *p, int64_t M, int64_t N, int64_t K, const float *A, size_t lda,
                  const float *B, size_t ldb, float *C, size_t ldc) {
    tsl_tensor a, b, c;
    gemm_f32_node(M, N, K, A, lda, B, ldb, C, ldc, &a, &b, &c);
    cpu_gemm(p, &c);
}
