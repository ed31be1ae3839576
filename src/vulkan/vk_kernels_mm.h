/*
 * vk_kernels_mm.h - the matrix-multiplication kernels of the Vulkan backend
 * (mul_mat: tiled, mat-vec, and later cooperative-matrix variants), as an
 * X-macro list that vk.h splices into the whole kernel table. Kept apart so
 * the mul_mat kernels (their list, their selection in vk_ops_mm.c, their
 * shaders and kernels_mm.cmake) change together without touching the
 * element-wise ops.
 *
 * X(id, name, esize of binding 0, 1, 2, 3): as in vk.h.
 */
#ifndef TSL_VK_KERNELS_MM_H
#define TSL_VK_KERNELS_MM_H

#define VK_KERNELS_MM(X) \
    X(MUL_MAT_F32, "mul_mat_f32_f32", 4, 4, 0, 4) \
    X(MUL_MAT_F16, "mul_mat_f16_f32", 2, 4, 0, 4) \
    X(MUL_MAT_Q8_0, "mul_mat_q8_0_f32", 2, 4, 0, 4) \
    X(MUL_MAT_Q4_0, "mul_mat_q4_0_f32", 2, 4, 0, 4) \
    X(MUL_MAT_VEC_F32, "mul_mat_vec_f32_f32", 4, 4, 0, 4) \
    X(MUL_MAT_VEC_F16, "mul_mat_vec_f16_f32", 2, 4, 0, 4) \
    X(MUL_MAT_VEC_Q8_0, "mul_mat_vec_q8_0_f32", 2, 4, 0, 4) \
    X(MUL_MAT_VEC_Q4_0, "mul_mat_vec_q4_0_f32", 2, 4, 0, 4)

#endif /* TSL_VK_KERNELS_MM_H */
