/*
 * vk_kernels_mm.h - the matrix-multiplication kernels of the Vulkan backend
 * (mul_mat), as one X-macro list that vk.h splices into the whole kernel
 * table, with what vk_pipeline.c and vk_ops_mm.c need besides: the SPIR-V
 * each is built from, its family and weight type, and its specialization
 * constants. Kept apart so the mul_mat kernels (their list, their choice in
 * vk_ops_mm.c, their shaders and kernels_mm.cmake) change together without
 * touching the element-wise ops.
 *
 * Families:
 *   TILED  mul_mat.comp, 64x64 tiles of plain arithmetic: any shape, any
 *          device (the fallback and the reference for the others)
 * Weights F32, F16, BF16, Q8_0, Q4_0 (not BF16 on matrix units: its range
 * does not fit F16); activations and results F32.
 *   VEC    mul_mat_vec.comp with one column (decode); spec constants
 *          {W workgroup size, S teams per workgroup, R rows per team,
 *          Q quant words per lane, U steps loaded ahead}; for Q8_0 / Q4_0
 *          the default is the staged kernel (16-byte loads whatever the
 *          block alignment), whose 6th constant is KS | PF << 8
 *   VECN   the same with up to 8 columns (batched decode, N = 2..8)
 *   CM     mul_mat_cm.comp on cooperative matrices (16x16x16, F16 in, F32
 *          accumulate; F16 weights, or Q8_0 / Q4_0 ones dequantized to F16
 *          while staged): {W, WGM, WGN, TM, TN, BK}, tile BM = WGM*TM*16 by
 *          BN = WGN*TN*16; BK + 256 (names ending s1) stages through one
 *          shared buffer instead of two; compiled only where the GLSL compiler knows
 *          GL_KHR_cooperative_matrix, chosen only where the device has the
 *          shape
 *   CM2    mul_mat_cm2.comp on workgroup-scope cooperative matrices
 *          (VK_NV_cooperative_matrix2: the driver loads and stages the
 *          tiles): {W, BM, BN, BK, GM, U}; F16 x F16, and F32
 *          activations / Q8_0 and Q4_0 weights through F16 copies; whole
 *          tiles only; compiled only where tsl_glslang finds a glslang
 *          that knows GL_NV_cooperative_matrix2 (SPIR-V 1.6), runnable only
 *          on devices with the extension; the first choice there for more
 *          than 64 columns (vk_ops_mm.c)
 *   CMEMU  the same kernel with the matrix operations emulated: runs
 *          anywhere, chosen only when forced (tests of the tiling)
 *   VECQR  the default VECQ kernel with the ropes and cache stores of a
 *          decoder's q, k and v in its epilogue (blob *_rope): never a
 *          node's candidate, only what the backend fuses the product into
 *          (vk_backend.c); {W, S, R, LPB, U, KB} as the default's, R 2
 *   VECQN  VECQ kernels of 32 rows a workgroup that also make the next
 *          norm's quantized column (blob *_nq; vk_backend.c fuses the
 *          norm into them): {512, 16, 2, ...}, and {1024, 16 teams of 64,
 *          2, ...} for rows of 8192 and more; like VECQR never a node's
 *          candidate
 *   VECQS  the default VECQ kernel reading a VECQN product's column (blob
 *          *_ns): the norm's scale applied to the column's block scales;
 *          fused-only too (and *_rope_ns, the VECQR kernel doing the same)
 *   VECQ   mul_mat_vecq.comp, Q8_0 / Q4_0 weights times one column with
 *          4x8-bit integer dot products, the column quantized to Q8_0 in
 *          shared memory first (as the CPU does): {W, S, R, LPB lanes per
 *          block, U steps loaded ahead, KB blocks of K it holds}; the
 *          default for one column where the device has
 *          VK_KHR_shader_integer_dot_product
 *
 * Several kernels share one SPIR-V (blob) and differ only in their
 * specialization constants: that is how a device is tuned (the variants
 * with a suffix, e.g. _w32s1r1, exist to be measured; TSL_VK_MM_VARIANT
 * forces one, see vk_ops_mm.c). Names are what error records, `tensile
 * doctor` and fault rules use.
 *
 * VK_MM_LIST(Y, X) calls Y(X, id, name, esize of the weights' binding, of
 * the activations', blob, family, weight type, activation type, 6 spec
 * constants); VK_KERNELS_MM(X) is the X(id, name, esize of bindings 0..3)
 * form vk.h wants.
 */
#ifndef TSL_VK_KERNELS_MM_H
#define TSL_VK_KERNELS_MM_H

#include <stdbool.h>
#include <stdint.h>

enum { VK_MM_TILED, VK_MM_VEC, VK_MM_VECN, VK_MM_CM, VK_MM_CMEMU, VK_MM_VECQ, VK_MM_CM2, VK_MM_VECQR, VK_MM_VECQN, VK_MM_VECQS };

/* One mat-vec variant: weight type t ("tn" in names, e its esize), F32
 * activations; spec {W, S, R, Q, U}, 0 for the shader's default (U: 4 for
 * plain types, 8 for block types). */
#define VK_MM_V(Y, X, t, tn, e, sfx, w, s, r, q, u)                                                      \
    Y(X, MUL_MAT_VEC_##t##sfx, "mul_mat_vec_" tn "_f32" #sfx, e, 4, "mul_mat_vec_" tn "_f32", VEC, t, F32, w, \
      s, r, q, u, 0)
#define VK_MM_VEC_SET(Y, X, t, tn, e)                   \
    VK_MM_V(Y, X, t, tn, e, , 128, 4, 2, 2, 0)          \
    VK_MM_V(Y, X, t, tn, e, _w32s1r1, 32, 1, 1, 2, 0)   \
    VK_MM_V(Y, X, t, tn, e, _w32s1r2, 32, 1, 2, 2, 0)   \
    VK_MM_V(Y, X, t, tn, e, _w32s1r4, 32, 1, 4, 2, 0)   \
    VK_MM_V(Y, X, t, tn, e, _w128s4r1, 128, 4, 1, 2, 0) \
    VK_MM_V(Y, X, t, tn, e, _w128s4r4, 128, 4, 4, 2, 0) \
    VK_MM_V(Y, X, t, tn, e, _w256s8r2, 256, 8, 2, 2, 0) \
    VK_MM_V(Y, X, t, tn, e, _w64s1r2, 64, 1, 2, 2, 0)   \
    VK_MM_V(Y, X, t, tn, e, _w128s1r2, 128, 1, 2, 2, 0) \
    VK_MM_V(Y, X, t, tn, e, _u2, 128, 4, 2, 2, 2)
#define VK_MM_VECF_SET(Y, X, t, tn, e) \
    VK_MM_VEC_SET(Y, X, t, tn, e)      \
    VK_MM_V(Y, X, t, tn, e, _u8, 128, 4, 2, 2, 8)
/* A staged mat-vec variant of a block type (mv_staged.glsl, blob *_st):
 * W invocations, KS splits of K per row (W / KS rows per workgroup), PF 1 to
 * load the next step while decoding; rows not aligned to 4 bytes run its
 * team kernel with {S, R, Q, U} = {4, 2, 2, default}. */
#define VK_MM_VS(Y, X, t, tn, sfx, w, ks, pf)                                                              \
    Y(X, MUL_MAT_VEC_##t##sfx, "mul_mat_vec_" tn "_f32" #sfx, 2, 4, "mul_mat_vec_" tn "_f32_st", VEC, t, F32, w, \
      4, 2, 2, 0, (ks) | ((pf) << 8))
/* Block types: the team kernel is the default (no suffix): on the H200 it
 * read Q8_0/Q4_0 weights at 1478/1068 GB/s in `tensile bench ops`, the
 * staged kernel (_st*: 16-byte loads into shared memory) at 425/261 GB/s
 * (bench/RESULTS.md, run 2). The staged variants stay, correct and tested,
 * to be measured beside it. Variants whose shared memory a device lacks
 * (over 32 KiB: lavapipe; 48 KiB on NVIDIA) are not chosen there. */
#define VK_MM_VECQ_TEAM(Y, X, t, tn)                    \
    VK_MM_V(Y, X, t, tn, 2, , 128, 4, 2, 2, 0)          \
    VK_MM_V(Y, X, t, tn, 2, _w32s1r2, 32, 1, 2, 2, 0)   \
    VK_MM_V(Y, X, t, tn, 2, _w128s1r2, 128, 1, 2, 2, 0) \
    VK_MM_V(Y, X, t, tn, 2, _u16, 128, 4, 2, 2, 16)     \
    VK_MM_V(Y, X, t, tn, 2, _q4, 128, 4, 2, 4, 0)
#define VK_MM_VECQ8_SET(Y, X)                                 \
    VK_MM_VS(Y, X, Q8_0, "q8_0", _st, 64, 8, 1)               \
    VK_MM_VS(Y, X, Q8_0, "q8_0", _st_np, 64, 8, 0)            \
    VK_MM_VS(Y, X, Q8_0, "q8_0", _st_k4, 64, 4, 1)            \
    VK_MM_VS(Y, X, Q8_0, "q8_0", _st_k16, 64, 16, 1)          \
    VK_MM_VS(Y, X, Q8_0, "q8_0", _st_w32k4, 32, 4, 1)         \
    VK_MM_VS(Y, X, Q8_0, "q8_0", _st_w128k4, 128, 4, 1)       \
    VK_MM_VS(Y, X, Q8_0, "q8_0", _st_w128k8, 128, 8, 1)       \
    VK_MM_VECQ_TEAM(Y, X, Q8_0, "q8_0")
#define VK_MM_VECQ4_SET(Y, X)                                 \
    VK_MM_VS(Y, X, Q4_0, "q4_0", _st, 128, 8, 1)              \
    VK_MM_VS(Y, X, Q4_0, "q4_0", _st_np, 128, 8, 0)           \
    VK_MM_VS(Y, X, Q4_0, "q4_0", _st_k4, 128, 4, 1)           \
    VK_MM_VS(Y, X, Q4_0, "q4_0", _st_k16, 128, 16, 1)         \
    VK_MM_VS(Y, X, Q4_0, "q4_0", _st_w32k4, 32, 4, 1)         \
    VK_MM_VS(Y, X, Q4_0, "q4_0", _st_w64k8, 64, 8, 1)         \
    VK_MM_VS(Y, X, Q4_0, "q4_0", _st_w256k8, 256, 8, 1)       \
    VK_MM_VECQ_TEAM(Y, X, Q4_0, "q4_0")

/* The integer-dot mat-vec of a block type: spec {W, S, R, LPB, U, KB};
 * KB 512 holds K up to 16384 (20 KiB of shared memory). A lane reads 16 / LPB
 * (Q4_0) or 32 / LPB (Q8_0) quant bytes of a block, 8 or 16. The default
 * reads the quantized column through the caches (no K bound, no shared
 * memory): on the H200 (no checkpoints between the products) it read Q4_0 weights at
 * 82-91% of copy where the staged column (_s) read 65-82%, and Q8_0 at
 * 89-97% against 83-89% (bench/RESULTS.md, run 15). */
#define VK_MM_Q(Y, X, t, tn, sfx, w, s, r, lpb, u)                                                          \
    Y(X, MUL_MAT_VECQ_##t##sfx, "mul_mat_vecq_" tn "_f32" #sfx, 2, 4, "mul_mat_vecq_" tn "_f32", VECQ, t, F32, w, \
      s, r, lpb, u, 512)
/* ... reading the quantized column through the caches, unstaged (KB bit 16) */
#define VK_MM_QD(Y, X, t, tn, sfx, w, s, r, lpb, u)                                                         \
    Y(X, MUL_MAT_VECQ_##t##sfx, "mul_mat_vecq_" tn "_f32" #sfx, 2, 4, "mul_mat_vecq_" tn "_f32", VECQ, t, F32, w, \
      s, r, lpb, u, 0x10000)
#define VK_MM_VECQQ_SET(Y, X, t, tn, l8, l16)                 \
    VK_MM_QD(Y, X, t, tn, , 128, 4, 2, l16, 4)                \
    VK_MM_Q(Y, X, t, tn, _s, 128, 4, 2, l16, 4)               \
    VK_MM_Q(Y, X, t, tn, _q8, 128, 4, 2, l8, 4)               \
    VK_MM_Q(Y, X, t, tn, _r1, 128, 4, 1, l8, 4)               \
    VK_MM_Q(Y, X, t, tn, _r4, 128, 4, 4, l8, 4)               \
    VK_MM_Q(Y, X, t, tn, _u2, 128, 4, 2, l8, 2)               \
    VK_MM_Q(Y, X, t, tn, _u8, 128, 4, 2, l8, 8)               \
    VK_MM_Q(Y, X, t, tn, _w256, 256, 8, 2, l8, 4)             \
    VK_MM_Q(Y, X, t, tn, _w256r4, 256, 8, 4, l8, 4)           \
    VK_MM_Q(Y, X, t, tn, _w64, 64, 2, 2, l8, 4)               \
    VK_MM_Q(Y, X, t, tn, _w128s1, 128, 1, 2, l8, 4)           \
    VK_MM_QD(Y, X, t, tn, _d8, 128, 4, 2, l8, 4)              \
    VK_MM_QD(Y, X, t, tn, _dr4, 128, 4, 4, l16, 4)            \
    VK_MM_QD(Y, X, t, tn, _dw256, 256, 8, 2, l16, 4)          \
    VK_MM_QD(Y, X, t, tn, _dw128s1, 128, 1, 2, l16, 4)        \
    VK_MM_QD(Y, X, t, tn, _dw128s2, 128, 2, 2, l16, 4)        \
    VK_MM_QD(Y, X, t, tn, _dw256s2, 256, 2, 2, l16, 4)        \
    VK_MM_QD(Y, X, t, tn, _dw128s1u2, 128, 1, 2, l16, 2)      \
    VK_MM_QD(Y, X, t, tn, _dw512, 512, 16, 2, l16, 4)         \
    VK_MM_QD(Y, X, t, tn, _dw1024s16, 1024, 16, 2, l16, 4)    \
    VK_MM_Q(Y, X, t, tn, _r4q16, 128, 4, 4, l16, 4)           \
    VK_MM_Q(Y, X, t, tn, _u8q16, 128, 4, 2, l16, 8)           \
    VK_MM_Q(Y, X, t, tn, _u2q16, 128, 4, 2, l16, 2)           \
    VK_MM_Q(Y, X, t, tn, _w256q16, 256, 8, 2, l16, 4)         \
    VK_MM_Q(Y, X, t, tn, _w256r4q16, 256, 8, 4, l16, 4)       \
    VK_MM_Q(Y, X, t, tn, _w64q16, 64, 2, 2, l16, 4)

/* ... with the q/k/v ropes and cache stores in its epilogue: the default's
 * constants (the first of VK_MM_VECQQ_SET); and both reading a norm's
 * column (VECQN's, _ns) */
#define VK_MM_QR(Y, X, t, tn, l16)                                                                              \
    Y(X, MUL_MAT_VECQ_##t##_ROPE, "mul_mat_vecq_" tn "_f32_rope", 2, 4, "mul_mat_vecq_" tn "_f32_rope", VECQR, t, \
      F32, 128, 4, 2, l16, 4, 0x10000)                                                                          \
    Y(X, MUL_MAT_VECQ_##t##_NS, "mul_mat_vecq_" tn "_f32_ns", 2, 4, "mul_mat_vecq_" tn "_f32_ns", VECQS, t, F32,   \
      128, 4, 2, l16, 4, 0x10000)                                                                               \
    Y(X, MUL_MAT_VECQ_##t##_ROPE_NS, "mul_mat_vecq_" tn "_f32_rope_ns", 2, 4, "mul_mat_vecq_" tn "_f32_rope_ns",  \
      VECQR, t, F32, 128, 4, 2, l16, 4, 0x10000)

/* ... making the next norm's column: 32 rows a workgroup, in 32- or 64-lane
 * teams (bench/RESULTS.md run 109: 4096x4096 +0.15 us a product, 4096x14336
 * +1.4 us with the 64-lane teams, against the ~3.3 us of the norm's level) */
#define VK_MM_QN(Y, X, t, tn, l16)                                                                            \
    Y(X, MUL_MAT_VECQ_##t##_NQ, "mul_mat_vecq_" tn "_f32_nq", 2, 4, "mul_mat_vecq_" tn "_f32_nq", VECQN, t, F32, \
      512, 16, 2, l16, 4, 0x10000)                                                                            \
    Y(X, MUL_MAT_VECQ_##t##_NQ_W1024, "mul_mat_vecq_" tn "_f32_nq_w1024", 2, 4, "mul_mat_vecq_" tn "_f32_nq",    \
      VECQN, t, F32, 1024, 16, 2, l16, 4, 0x10000)

/* Twins of the integer-dot kernels a Q4_0 node can get (the default, the
 * long-row one, the fused ones) reading weights in the split layout
 * (backend_impl.h, q4s.glsl): the same SPIR-V, spec constant KB with bit
 * 17. Never a candidate: the backend swaps one in, after fusion, where a
 * node's weights are held split (vk_backend.c, vk_q4s_twins), and a Q4_0
 * integer-dot kernel without a twin does not apply to split weights. */
#define VK_MM_Q4S_SET(Y, X)                                                                                      \
    Y(X, MUL_MAT_VECQ_Q4_0_Q4S, "mul_mat_vecq_q4_0_f32_q4s", 2, 4, "mul_mat_vecq_q4_0_f32", VECQ, Q4_0, F32, 128, \
      4, 2, 1, 4, 0x30000)                                                                                      \
    Y(X, MUL_MAT_VECQ_Q4_0_dw128s2_Q4S, "mul_mat_vecq_q4_0_f32_dw128s2_q4s", 2, 4, "mul_mat_vecq_q4_0_f32", VECQ,  \
      Q4_0, F32, 128, 2, 2, 1, 4, 0x30000)                                                                      \
    Y(X, MUL_MAT_VECQ_Q4_0_ROPE_Q4S, "mul_mat_vecq_q4_0_f32_rope_q4s", 2, 4, "mul_mat_vecq_q4_0_f32_rope", VECQR,   \
      Q4_0, F32, 128, 4, 2, 1, 4, 0x30000)                                                                      \
    Y(X, MUL_MAT_VECQ_Q4_0_NS_Q4S, "mul_mat_vecq_q4_0_f32_ns_q4s", 2, 4, "mul_mat_vecq_q4_0_f32_ns", VECQS, Q4_0,   \
      F32, 128, 4, 2, 1, 4, 0x30000)                                                                            \
    Y(X, MUL_MAT_VECQ_Q4_0_ROPE_NS_Q4S, "mul_mat_vecq_q4_0_f32_rope_ns_q4s", 2, 4, "mul_mat_vecq_q4_0_f32_rope_ns", \
      VECQR, Q4_0, F32, 128, 4, 2, 1, 4, 0x30000)                                                               \
    Y(X, MUL_MAT_VECQ_Q4_0_NQ_Q4S, "mul_mat_vecq_q4_0_f32_nq_q4s", 2, 4, "mul_mat_vecq_q4_0_f32_nq", VECQN, Q4_0,   \
      F32, 512, 16, 2, 1, 4, 0x30000)                                                                           \
    Y(X, MUL_MAT_VECQ_Q4_0_NQ_W1024_Q4S, "mul_mat_vecq_q4_0_f32_nq_w1024_q4s", 2, 4, "mul_mat_vecq_q4_0_f32_nq",    \
      VECQN, Q4_0, F32, 1024, 16, 2, 1, 4, 0x30000)

/* The staged small-N kernel of a block type (8 columns): {W, S, R} = {w, 2,
 * 2} for its team fallback, KS | PF << 8 for the staged part; the default
 * (no suffix) is the team kernel alone, as for one column. */
#define VK_MM_NS(Y, X, t, tn, sfx, w, ks, pf)                                                                  \
    Y(X, MUL_MAT_VECN_##t##sfx, "mul_mat_vecn_" tn "_f32" #sfx, 2, 4, "mul_mat_vecn_" tn "_f32_st", VECN, t, F32, \
      w, 2, 2, 2, 0, (ks) | ((pf) << 8))
#define VK_MM_VECNQ_SET(Y, X, t, tn)                   \
    VK_MM_NS(Y, X, t, tn, _st, 32, 2, 1)               \
    VK_MM_NS(Y, X, t, tn, _st_w32k1, 32, 1, 1)         \
    VK_MM_NS(Y, X, t, tn, _st_w64k2, 64, 2, 1)         \
    Y(X, MUL_MAT_VECN_##t, "mul_mat_vecn_" tn "_f32", 2, 4, "mul_mat_vecn_" tn "_f32", VECN, t, F32, 128, \
      4, 2, 2, 0, 0)

/* a kernel with no specialization constants (the tiled ones) */
#define VK_MM_T(Y, X, id, name, e0, e1, t, bt) Y(X, id, name, e0, e1, name, TILED, t, bt, 0, 0, 0, 0, 0, 0)
/* the small-N kernel of weight type t ("tn"), activations bt ("btn") */
#define VK_MM_N(Y, X, id, tn, btn, e0, e1, t, bt)                                                              \
    Y(X, id, "mul_mat_vecn_" tn "_" btn, e0, e1, "mul_mat_vecn_" tn "_" btn, VECN, t, bt, 128, 4, 2, 2, 0, 0)
/* cooperative matrices: {W, WGM, WGN, TM, TN, BK} */
#define VK_MM_ES_F32 4
#define VK_MM_ES_F16 2
#define VK_MM_C(Y, X, id, name, blob, fam, t, bt, w, wgm, wgn, tm, tn_, bk) \
    Y(X, id, name, 2, VK_MM_ES_##bt, blob, fam, t, bt, w, wgm, wgn, tm, tn_, bk)

/* workgroup-scope cooperative matrices: {W, BM, BN, BK, GM, U} (GM rows
 * of tiles a rasterization group, U K steps a loop iteration; 0: the
 * shader's 8 and 4) */
#define VK_MM_C2(Y, X, id, name, blob, t, bt, w, bm, bn, bk) \
    Y(X, id, name, 2, VK_MM_ES_##bt, blob, CM2, t, bt, w, bm, bn, bk, 0, 0)
#define VK_MM_C2U(Y, X, id, name, blob, t, bt, w, bm, bn, bk, gm, u) \
    Y(X, id, name, 2, VK_MM_ES_##bt, blob, CM2, t, bt, w, bm, bn, bk, gm, u)
#define VK_MM_CM2_SET(Y, X, ID, bt, btn)                                                                                \
    VK_MM_C2(Y, X, MUL_MAT_CM2_F16##ID, "mul_mat_cm2_f16_" btn, "mul_mat_cm2_f16_" btn, F16, bt, 256, 128, 256, 32) \
    VK_MM_C2(Y, X, MUL_MAT_CM2_F16##ID##_128X128W128, "mul_mat_cm2_f16_" btn "_128x128w128",                         \
             "mul_mat_cm2_f16_" btn, F16, bt, 128, 128, 128, 32)                                                    \
    VK_MM_C2(Y, X, MUL_MAT_CM2_F16##ID##_256X128, "mul_mat_cm2_f16_" btn "_256x128", "mul_mat_cm2_f16_" btn, F16,    \
             bt, 256, 256, 128, 32)                                                                                 \
    VK_MM_C2(Y, X, MUL_MAT_CM2_F16##ID##_128X128K64, "mul_mat_cm2_f16_" btn "_128x128k64", "mul_mat_cm2_f16_" btn,   \
             F16, bt, 256, 128, 128, 64)                                                                            \
    VK_MM_C2(Y, X, MUL_MAT_CM2_F16##ID##_128X64W128, "mul_mat_cm2_f16_" btn "_128x64w128", "mul_mat_cm2_f16_" btn,   \
             F16, bt, 128, 128, 64, 64)                                                                             \
    VK_MM_C2U(Y, X, MUL_MAT_CM2_F16##ID##_128X128K64W128, "mul_mat_cm2_f16_" btn "_128x128k64w128",                  \
              "mul_mat_cm2_f16_" btn, F16, bt, 128, 128, 128, 64, 2, 2)

/* Q8_0 / Q4_0 weights times F32 activations on the F16 x F16 kernels (see
 * VK_MM_CV_SET): the weights dequantized to F16 into a second scratch
 * first too (vk_mm_wconv), binding 0 then reading that */
#define VK_MM_CVQ_SET(Y, X, t, tn)                                                                                   \
    Y(X, MUL_MAT_CM2_##t##_F32C_128X128K64W128, "mul_mat_cm2_" tn "_f32c_128x128k64w128", 2, 2, "mul_mat_cm2_f16_f16", \
      CM2, t, F32, 128, 128, 128, 64, 2, 2)                                                                         \
    Y(X, MUL_MAT_CM2_##t##_F32C_128X128K64, "mul_mat_cm2_" tn "_f32c_128x128k64", 2, 2, "mul_mat_cm2_f16_f16", CM2, \
      t, F32, 256, 128, 128, 64, 0, 0)                                                                              \
    Y(X, MUL_MAT_CM2_##t##_F32C, "mul_mat_cm2_" tn "_f32c", 2, 2, "mul_mat_cm2_f16_f16", CM2, t, F32, 256, 128, 256, \
      32, 0, 0)                                                                                                     \
    Y(X, MUL_MAT_CM2_##t##_F32C_128X128W128, "mul_mat_cm2_" tn "_f32c_128x128w128", 2, 2, "mul_mat_cm2_f16_f16",    \
      CM2, t, F32, 128, 128, 128, 32, 0, 0)                                                                         \
    Y(X, MUL_MAT_CMEMU_##t##_F32C, "mul_mat_cmemu_" tn "_f32c", 2, 2, "mul_mat_cmemu_f16_f16", CMEMU, t, F32, 128, 2, \
      2, 2, 2, 32)
/* F16 weights times F32 activations on the F16 x F16 kernels (the blobs
 * of mul_mat_cm2_f16_f16 and mul_mat_cmemu_f16_f16): the backend first
 * rounds the activations to F16 into a scratch, which binding 1 then
 * reads (esize 2; vk_mm_conv). The workgroup-scope kernels ran F16 x F16
 * 4096^3 at 272 TFLOP/s on the H200 against 204 for the subgroup-scope
 * tile that reads F32 activations itself (bench/RESULTS.md, runs 90-92);
 * through the copies 256 (F16), 217 (Q8_0) and 216 (Q4_0) against 204,
 * 119 and 125 (run 104); with the 4-warp 128x128 tile (_128x128k64w128)
 * 293-302, 252 and 251 (run 120). The emulated ones are there to test the
 * path on devices without them. */
#define VK_MM_CV_SET(Y, X)                                                                                          \
    Y(X, MUL_MAT_CM2_F16_F32C_128X128K64W128, "mul_mat_cm2_f16_f32c_128x128k64w128", 2, 2, "mul_mat_cm2_f16_f16",   \
      CM2, F16, F32, 128, 128, 128, 64, 2, 2)                                                                      \
    Y(X, MUL_MAT_CM2_F16_F32C_128X128K64, "mul_mat_cm2_f16_f32c_128x128k64", 2, 2, "mul_mat_cm2_f16_f16", CM2, F16, \
      F32, 256, 128, 128, 64, 0, 0)                                                                                \
    Y(X, MUL_MAT_CM2_F16_F32C, "mul_mat_cm2_f16_f32c", 2, 2, "mul_mat_cm2_f16_f16", CM2, F16, F32, 256, 128, 256,   \
      32, 0, 0)                                                                                                    \
    Y(X, MUL_MAT_CM2_F16_F32C_128X128W128, "mul_mat_cm2_f16_f32c_128x128w128", 2, 2, "mul_mat_cm2_f16_f16", CM2,    \
      F16, F32, 128, 128, 128, 32, 0, 0)                                                                           \
    Y(X, MUL_MAT_CMEMU_F16_F32C, "mul_mat_cmemu_f16_f32c", 2, 2, "mul_mat_cmemu_f16_f16", CMEMU, F16, F32, 128, 2, \
      2, 2, 2, 32)                                                                                                 \
    VK_MM_CVQ_SET(Y, X, Q8_0, "q8_0")                                                                              \
    VK_MM_CVQ_SET(Y, X, Q4_0, "q4_0")

#define VK_MM_LIST(Y, X)                                                                                         \
    VK_MM_T(Y, X, MUL_MAT_F32, "mul_mat_f32_f32", 4, 4, F32, F32)                                                \
    VK_MM_T(Y, X, MUL_MAT_F16, "mul_mat_f16_f32", 2, 4, F16, F32)                                                \
    VK_MM_T(Y, X, MUL_MAT_Q8_0, "mul_mat_q8_0_f32", 2, 4, Q8_0, F32)                                             \
    VK_MM_T(Y, X, MUL_MAT_Q4_0, "mul_mat_q4_0_f32", 2, 4, Q4_0, F32)                                             \
    VK_MM_T(Y, X, MUL_MAT_BF16, "mul_mat_bf16_f32", 2, 4, BF16, F32)                                             \
    VK_MM_T(Y, X, MUL_MAT_F16_F16, "mul_mat_f16_f16", 2, 2, F16, F16)                                            \
    VK_MM_VECF_SET(Y, X, F32, "f32", 4)                                                                          \
    VK_MM_VECF_SET(Y, X, F16, "f16", 2)                                                                          \
    VK_MM_VECQ8_SET(Y, X)                                                                                        \
    VK_MM_VECQ4_SET(Y, X)                                                                                        \
    VK_MM_VECQQ_SET(Y, X, Q8_0, "q8_0", 4, 2)                                                                    \
    VK_MM_VECQQ_SET(Y, X, Q4_0, "q4_0", 2, 1)                                                                    \
    VK_MM_QR(Y, X, Q8_0, "q8_0", 2)                                                                              \
    VK_MM_QR(Y, X, Q4_0, "q4_0", 1)                                                                              \
    VK_MM_QN(Y, X, Q8_0, "q8_0", 2)                                                                              \
    VK_MM_QN(Y, X, Q4_0, "q4_0", 1)                                                                              \
    VK_MM_Q4S_SET(Y, X)                                                                                          \
    VK_MM_V(Y, X, BF16, "bf16", 2, , 128, 4, 2, 2, 0)                                                            \
    VK_MM_V(Y, X, BF16, "bf16", 2, _w128s1r2, 128, 1, 2, 2, 0)                                                   \
    Y(X, MUL_MAT_VEC_F16_F16, "mul_mat_vec_f16_f16", 2, 2, "mul_mat_vec_f16_f16", VEC, F16, F16, 128, 4, 2, 2, 0, 0) \
    VK_MM_N(Y, X, MUL_MAT_VECN_F32, "f32", "f32", 4, 4, F32, F32)                                                \
    VK_MM_N(Y, X, MUL_MAT_VECN_F16, "f16", "f32", 2, 4, F16, F32)                                                \
    VK_MM_VECNQ_SET(Y, X, Q8_0, "q8_0")                                                                          \
    VK_MM_VECNQ_SET(Y, X, Q4_0, "q4_0")                                                                          \
    VK_MM_N(Y, X, MUL_MAT_VECN_BF16, "bf16", "f32", 2, 4, BF16, F32)                                             \
    VK_MM_N(Y, X, MUL_MAT_VECN_F16_F16, "f16", "f16", 2, 2, F16, F16)                                            \
    VK_MM_C(Y, X, MUL_MAT_CM_F16, "mul_mat_cm_f16_f32", "mul_mat_cm_f16_f32", CM, F16, F32, 256, 2, 4, 4, 2, 32)  \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_128X128K16, "mul_mat_cm_f16_f32_128x128k16", "mul_mat_cm_f16_f32", CM, F16, F32, \
            256, 2, 4, 4, 2, 16)                                                                                 \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_128X128W4, "mul_mat_cm_f16_f32_128x128w4", "mul_mat_cm_f16_f32", CM, F16, F32,   \
            128, 2, 2, 4, 4, 32)                                                                                 \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_128X256K16, "mul_mat_cm_f16_f32_128x256k16", "mul_mat_cm_f16_f32", CM, F16, F32, \
            256, 2, 4, 4, 4, 16)                                                                                 \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_256X128K16, "mul_mat_cm_f16_f32_256x128k16", "mul_mat_cm_f16_f32", CM, F16, F32, \
            256, 4, 2, 4, 4, 16)                                                                                 \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_64X64, "mul_mat_cm_f16_f32_64x64", "mul_mat_cm_f16_f32", CM, F16, F32, 128, 2, 2, \
            2, 2, 32)                                                                                            \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_128X128K64S1, "mul_mat_cm_f16_f32_128x128k64s1", "mul_mat_cm_f16_f32", CM, F16,  \
            F32, 256, 2, 4, 4, 2, 64 + 256)                                                                      \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_128X128S1, "mul_mat_cm_f16_f32_128x128s1", "mul_mat_cm_f16_f32", CM, F16, F32,   \
            256, 2, 4, 4, 2, 32 + 256)                                                                           \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_128X128W4K64S1, "mul_mat_cm_f16_f32_128x128w4k64s1", "mul_mat_cm_f16_f32", CM,   \
            F16, F32, 128, 2, 2, 4, 4, 64 + 256)                                                                 \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_256X128S1, "mul_mat_cm_f16_f32_256x128s1", "mul_mat_cm_f16_f32", CM, F16, F32,   \
            256, 4, 2, 4, 4, 32 + 256)                                                                           \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_128X256S1, "mul_mat_cm_f16_f32_128x256s1", "mul_mat_cm_f16_f32", CM, F16, F32,   \
            256, 2, 4, 4, 4, 32 + 256)                                                                           \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_256X128W16S1, "mul_mat_cm_f16_f32_256x128w16s1", "mul_mat_cm_f16_f32", CM, F16,  \
            F32, 512, 4, 4, 4, 2, 32 + 256)                                                                      \
    VK_MM_C(Y, X, MUL_MAT_CM_Q8_0, "mul_mat_cm_q8_0_f32", "mul_mat_cm_q8_0_f32", CM, Q8_0, F32, 256, 2, 4, 4, 2,  \
            32)                                                                                                  \
    VK_MM_C(Y, X, MUL_MAT_CM_Q8_0_128X128K16, "mul_mat_cm_q8_0_f32_128x128k16", "mul_mat_cm_q8_0_f32", CM, Q8_0,  \
            F32, 256, 2, 4, 4, 2, 16)                                                                            \
    VK_MM_C(Y, X, MUL_MAT_CM_Q8_0_128X128K64S1, "mul_mat_cm_q8_0_f32_128x128k64s1", "mul_mat_cm_q8_0_f32", CM, Q8_0, \
            F32, 256, 2, 4, 4, 2, 64 + 256)                                                                      \
    VK_MM_C(Y, X, MUL_MAT_CM_Q8_0_256X128S1, "mul_mat_cm_q8_0_f32_256x128s1", "mul_mat_cm_q8_0_f32", CM, Q8_0, F32, \
            256, 4, 2, 4, 4, 32 + 256)                                                                           \
    VK_MM_C(Y, X, MUL_MAT_CM_Q8_0_256X128W16S1, "mul_mat_cm_q8_0_f32_256x128w16s1", "mul_mat_cm_q8_0_f32", CM,     \
            Q8_0, F32, 512, 4, 4, 4, 2, 32 + 256)                                                                \
    VK_MM_C(Y, X, MUL_MAT_CM_Q4_0, "mul_mat_cm_q4_0_f32", "mul_mat_cm_q4_0_f32", CM, Q4_0, F32, 256, 2, 4, 4, 2,  \
            32)                                                                                                  \
    VK_MM_C(Y, X, MUL_MAT_CM_Q4_0_128X128K16, "mul_mat_cm_q4_0_f32_128x128k16", "mul_mat_cm_q4_0_f32", CM, Q4_0,  \
            F32, 256, 2, 4, 4, 2, 16)                                                                            \
    VK_MM_C(Y, X, MUL_MAT_CM_Q4_0_128X128K64S1, "mul_mat_cm_q4_0_f32_128x128k64s1", "mul_mat_cm_q4_0_f32", CM, Q4_0, \
            F32, 256, 2, 4, 4, 2, 64 + 256)                                                                      \
    VK_MM_C(Y, X, MUL_MAT_CM_Q4_0_256X128S1, "mul_mat_cm_q4_0_f32_256x128s1", "mul_mat_cm_q4_0_f32", CM, Q4_0, F32, \
            256, 4, 2, 4, 4, 32 + 256)                                                                           \
    VK_MM_C(Y, X, MUL_MAT_CM_Q4_0_256X128W16S1, "mul_mat_cm_q4_0_f32_256x128w16s1", "mul_mat_cm_q4_0_f32", CM,     \
            Q4_0, F32, 512, 4, 4, 4, 2, 32 + 256)                                                                \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_F16, "mul_mat_cm_f16_f16", "mul_mat_cm_f16_f16", CM, F16, F16, 256, 2, 4, 4, 2,  \
            32)                                                                                                  \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_F16_128X128K16, "mul_mat_cm_f16_f16_128x128k16", "mul_mat_cm_f16_f16", CM, F16,  \
            F16, 256, 2, 4, 4, 2, 16)                                                                            \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_F16_64X64, "mul_mat_cm_f16_f16_64x64", "mul_mat_cm_f16_f16", CM, F16, F16, 128,  \
            2, 2, 2, 2, 32)                                                                                      \
    VK_MM_C(Y, X, MUL_MAT_CM_F16_F16_256X128W16S1, "mul_mat_cm_f16_f16_256x128w16s1", "mul_mat_cm_f16_f16", CM,    \
            F16, F16, 512, 4, 4, 4, 2, 32 + 256)                                                                 \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_F16, "mul_mat_cmemu_f16_f32", "mul_mat_cmemu_f16_f32", CMEMU, F16, F32, 128, 2, 2, \
            2, 2, 32)                                                                                            \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_F16_32X64K16, "mul_mat_cmemu_f16_f32_32x64k16", "mul_mat_cmemu_f16_f32", CMEMU,   \
            F16, F32, 64, 1, 2, 2, 2, 16)                                                                        \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_F16_32X32K64, "mul_mat_cmemu_f16_f32_32x32k64", "mul_mat_cmemu_f16_f32", CMEMU,    \
            F16, F32, 32, 1, 1, 2, 2, 64)                                                                        \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_F16_32X64K16W8, "mul_mat_cmemu_f16_f32_32x64k16w8", "mul_mat_cmemu_f16_f32",     \
            CMEMU, F16, F32, 256, 2, 4, 1, 1, 16)                                                                \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_F16_64X64K64S1, "mul_mat_cmemu_f16_f32_64x64k64s1", "mul_mat_cmemu_f16_f32",     \
            CMEMU, F16, F32, 128, 2, 2, 2, 2, 64 + 256)                                                          \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_F16_64X128S1, "mul_mat_cmemu_f16_f32_64x128s1", "mul_mat_cmemu_f16_f32", CMEMU,   \
            F16, F32, 128, 2, 2, 2, 4, 32 + 256)                                                                 \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_Q4_0_K64S1, "mul_mat_cmemu_q4_0_f32_k64s1", "mul_mat_cmemu_q4_0_f32", CMEMU,      \
            Q4_0, F32, 128, 2, 2, 2, 2, 64 + 256)                                                                \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_Q8_0_32X32K64, "mul_mat_cmemu_q8_0_f32_32x32k64", "mul_mat_cmemu_q8_0_f32", CMEMU, \
            Q8_0, F32, 32, 1, 1, 2, 2, 64)                                                                       \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_Q8_0, "mul_mat_cmemu_q8_0_f32", "mul_mat_cmemu_q8_0_f32", CMEMU, Q8_0, F32, 128,   \
            2, 2, 2, 2, 32)                                                                                      \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_Q4_0, "mul_mat_cmemu_q4_0_f32", "mul_mat_cmemu_q4_0_f32", CMEMU, Q4_0, F32, 128,   \
            2, 2, 2, 2, 32)                                                                                      \
    VK_MM_C(Y, X, MUL_MAT_CMEMU_F16_F16, "mul_mat_cmemu_f16_f16", "mul_mat_cmemu_f16_f16", CMEMU, F16, F16, 128,   \
            2, 2, 2, 2, 32)                                                                                      \
    VK_MM_CM2_SET(Y, X, _F16, F16, "f16")                                                                          \
    VK_MM_CV_SET(Y, X)

#define VK_MM_AS_KERNEL(X, id, name, e0, e1, blob, fam, t, bt, s0, s1, s2, s3, s4, s5) X(id, name, e0, e1, 0, 4)
#define VK_KERNELS_MM(X) VK_MM_LIST(VK_MM_AS_KERNEL, X)

/* What the pipeline builder needs of a mul_mat kernel. */
typedef struct vk_mm_info {
    const char *blob;   /* the embedded SPIR-V it is built from */
    int family;         /* VK_MM_* */
    int type;           /* weight type (tsl_type) */
    int btype;          /* activation type: F32, or F16 with F16 weights */
    uint32_t spec[6];   /* specialization constants 0..5 (unused ones 0) */
} vk_mm_info;

/* The entry of kernel id, or NULL when id is not a mul_mat kernel. */
const vk_mm_info *vk_mm_info_of(int id);
/* A kernel whose SPIR-V a build may lack (the compiler had no cooperative
 * matrices): missing means "not on this build", never chosen, rather than
 * a build failure. */
bool vk_mm_optional(int id);

#endif /* TSL_VK_KERNELS_MM_H */
