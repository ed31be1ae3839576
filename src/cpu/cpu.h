/*
 * cpu.h - private interface of the CPU backend: the kernel calling
 * convention, the thread pool, and the SIMD function table.
 *
 * Execution model (ggml-like): all threads of the pool run every node; a
 * kernel receives its thread index ith of nth and does its share (usually a
 * range of rows). Threads meet at a barrier after each node. A kernel that
 * needs two phases (convert the activations, then multiply) calls
 * cpu_barrier() between them; every thread must call it the same number of
 * times. (Runs of small nodes execute on thread 0 alone with one barrier
 * after the run: see cpu_backend.c.) Scratch memory (wdata) is planned per node before the compute
 * (cpu_op_wsize) and shared by all threads.
 *
 * Kernels report a data error (an out-of-range index) through
 * cpu_kernel_fail(); the first one wins and the compute returns FAILED.
 */
#ifndef TSL_CPU_H
#define TSL_CPU_H

#include <stdatomic.h>

#include "core/core.h"
#include "core/simd.h"

typedef struct cpu_pool cpu_pool;

typedef struct cpu_params {
    int ith, nth;
    void *wdata;      /* shared scratch, at least cpu_op_wsize(node, nth) bytes, 64-byte aligned */
    size_t wsize;
    cpu_pool *pool;   /* for cpu_barrier */
    _Atomic int *fail;       /* set to 1 by cpu_kernel_fail */
    char *fail_msg;          /* 256 bytes, written by the first failing thread */
} cpu_params;

typedef void (*cpu_kernel_fn)(const cpu_params *p, tsl_tensor *dst);

/* The kernel for a node, or NULL if the CPU has none for this op/type combo. */
cpu_kernel_fn cpu_kernel_for(const tsl_tensor *node);
/* Scratch bytes the node needs with nth threads. */
size_t cpu_op_wsize(const tsl_tensor *node, int nth);
/* Wait for all threads of the pool. */
void cpu_barrier(const cpu_params *p);
/* Report a data error from inside a kernel (first wins). */
void cpu_kernel_fail(const cpu_params *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Rows [*r0, *r1) of nrows that thread ith of nth handles. */
static inline void cpu_split_rows(int64_t nrows, int ith, int nth, int64_t *r0, int64_t *r1) {
    int64_t per = (nrows + nth - 1) / nth;
    int64_t a = per * ith, b = a + per;
    *r0 = a < nrows ? a : nrows;
    *r1 = b < nrows ? b : nrows;
}

/* ---- thread pool ------------------------------------------------------- */

/* Runs job(ith, nth, arg) on n threads (the caller is thread 0) and returns
 * when all are done. Workers persist between runs and spin briefly, then
 * sleep, while idle. */
cpu_pool *cpu_pool_new(int n_threads);
void cpu_pool_free(cpu_pool *pool);
int cpu_pool_size(const cpu_pool *pool);
void cpu_pool_run(cpu_pool *pool, void (*job)(int ith, int nth, void *arg), void *arg);
void cpu_pool_barrier(cpu_pool *pool);

/* The SIMD row kernels (cpu_simd_get) are declared in core/simd.h. */

/* ---- matrix multiply (gemm.c) ---------------------------------------------
 * The blocked F32 GEMM behind mul_mat and out_prod (weights converted to F32
 * while packed). cpu_gemm runs a MUL_MAT or OUT_PROD node on every thread of
 * the pool with cpu_gemm_wsize(node, nth) bytes of p->wdata. */
size_t cpu_gemm_wsize(const tsl_tensor *node, int nth);
void cpu_gemm(const cpu_params *p, tsl_tensor *node);
/* C[n*ldc + m] = sum_k A[m*lda + k] * B[n*ldb + k] (leading dimensions in
 * elements); p->wdata holds cpu_gemm_f32_wsize(M, N, K, p->nth) bytes. */
size_t cpu_gemm_f32_wsize(int64_t M, int64_t N, int64_t K, int nth);
void cpu_gemm_f32(const cpu_params *p, int64_t M, int64_t N, int64_t K, const float *A, size_t lda,
                  const float *B, size_t ldb, float *C, size_t ldc);
/* 4-row x 1..4-column register-tiled row dots for mul_mat's few-column path
 * (rows of type t, columns in its dot type), or NULL where the ISA has none. */
typedef void (*cpu_dot_tile_fn)(tsl_type t, int64_t k, const void *const *rows, const void *const *cols, int nc,
                                const void *pf, int64_t pf_len, float *out);
cpu_dot_tile_fn cpu_gemm_dot_tile(tsl_type t);

#endif /* TSL_CPU_H */
