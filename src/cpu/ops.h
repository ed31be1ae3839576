/*
 * ops.h - the CPU kernel families (ops_*.c): one entry per op, the scratch
 * each needs, and the shared element-wise loops. ops.c maps nodes to them.
 */
#ifndef TSL_CPU_OPS_H
#define TSL_CPU_OPS_H

#include "cpu/cpu.h"

/* ops_copy.c */
void cpu_op_dup(const cpu_params *p, tsl_tensor *dst); /* DUP, CONT and CPY */
void cpu_op_get_rows(const cpu_params *p, tsl_tensor *dst);
void cpu_op_set_rows(const cpu_params *p, tsl_tensor *dst);
void cpu_op_concat(const cpu_params *p, tsl_tensor *dst);
size_t cpu_dup_wsize(const tsl_tensor *node, int nth);
bool cpu_dup_supported(const tsl_tensor *node);
/* ops_elementwise.c */
void cpu_op_add(const cpu_params *p, tsl_tensor *dst);
void cpu_op_sub(const cpu_params *p, tsl_tensor *dst);
void cpu_op_mul(const cpu_params *p, tsl_tensor *dst);
void cpu_op_div(const cpu_params *p, tsl_tensor *dst);
void cpu_op_scale(const cpu_params *p, tsl_tensor *dst);
void cpu_op_sqr(const cpu_params *p, tsl_tensor *dst);
void cpu_op_sqrt(const cpu_params *p, tsl_tensor *dst);
void cpu_op_silu(const cpu_params *p, tsl_tensor *dst);
void cpu_op_gelu(const cpu_params *p, tsl_tensor *dst);
void cpu_op_swiglu(const cpu_params *p, tsl_tensor *dst);
/* ops_reduce.c */
void cpu_op_sum(const cpu_params *p, tsl_tensor *dst);
void cpu_op_sum_rows(const cpu_params *p, tsl_tensor *dst);
void cpu_op_mean(const cpu_params *p, tsl_tensor *dst);
void cpu_op_argmax(const cpu_params *p, tsl_tensor *dst);
size_t cpu_sum_wsize(const tsl_tensor *node, int nth);
/* ops_norm.c */
void cpu_op_rms_norm(const cpu_params *p, tsl_tensor *dst);
void cpu_op_norm(const cpu_params *p, tsl_tensor *dst);
/* ops_rope.c */
void cpu_op_rope(const cpu_params *p, tsl_tensor *dst);
size_t cpu_rope_wsize(const tsl_tensor *node, int nth);
/* ops_softmax.c */
void cpu_op_soft_max(const cpu_params *p, tsl_tensor *dst);
size_t cpu_soft_max_wsize(const tsl_tensor *node, int nth);
/* ops_loss.c */
void cpu_op_cross_entropy_loss(const cpu_params *p, tsl_tensor *dst);
size_t cpu_cross_entropy_loss_wsize(const tsl_tensor *node, int nth);
/* ops_mulmat.c */
void cpu_op_mul_mat(const cpu_params *p, tsl_tensor *dst);
void cpu_op_out_prod(const cpu_params *p, tsl_tensor *dst);
size_t cpu_mul_mat_wsize(const tsl_tensor *node, int nth);
bool cpu_mul_mat_supported(const tsl_tensor *node);

/* shared element-wise loops (ops_elementwise.c); isa from cpu_vec_isa() */
int cpu_vec_isa(void);
int cpu_vec_ew_exp_shift(int isa, int64_t n, const float *x, float shift, float *y);
float cpu_vec_ew_max(int isa, int64_t n, const float *x);
double cpu_vec_ew_sum(int isa, int64_t n, const float *x);
double cpu_vec_ew_sumsq(int isa, int64_t n, const float *x);
double cpu_vec_ew_sumsq_dev(int isa, int64_t n, const float *x, double mean);
int cpu_vec_ew_shift_scale(int isa, int64_t n, const float *x, float shift, float s, float *y);
int cpu_vec_ew_scale(int isa, int64_t n, const float *x, float s, float *y);
int cpu_vec_ew_add(int isa, int64_t n, const float *x, const float *y, float *z);

#endif /* TSL_CPU_OPS_H */
