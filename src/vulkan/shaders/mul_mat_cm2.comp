#version 450
/*
 * mul_mat_cm2.comp - matrix product on workgroup-scope cooperative matrices
 * (VK_NV_cooperative_matrix2): F16 weights times F16 activations, products
 * accumulated in F32: d[m, n] = sum_k a[k, m] b[k, n]. (F32 activations
 * stay on mul_mat_cm.comp: loading them as F32 matrices and converting in
 * registers ran at 53 TFLOP/s on the H200, and hung the GPU on an edge
 * tile.)
 *
 * The whole workgroup owns one BM x BN accumulator and multiplies BM x BK
 * by BK x BN tiles that the driver loads straight from device memory
 * (coopMatLoadTensorNV with tensor layouts: a's rows and b's columns are
 * K-contiguous, d's columns M-contiguous), staging and scheduling them
 * itself. On the H200, in a stand-alone program binding ordinary
 * descriptor sets, this kernel ran 4096^3 at 232-247 TFLOP/s with its K
 * loop written as k < K, and 263-273 with it counted (below); 222 for the
 * subgroup-scope kernel (mul_mat_cm.comp, staged by hand); in tensile,
 * bound through ordinary descriptor sets (vk_kernel.sets), 242 at 4096^3
 * before the counted loop (bench/RESULTS.md, runs 43-49 and 85-89; the
 * first processes on a freshly started machine ran it at 54-58, whatever
 * the binding). It needs SPIR-V 1.6 (Vulkan 1.3) and a GLSL compiler newer
 * than Debian 12's: src/vulkan/glslang/tsl_glslang.c.
 *
 * Specialization constants: 0 the workgroup size, 1 BM, 2 BN, 3 BK (the
 * driver's granularity for the workgroup size must divide BM and BN), 4 GM
 * (the rasterization's group, below), 5 U (K steps a loop iteration,
 * unrolled). Only whole tiles: vk_ops_mm.c lets the kernel run where BM
 * divides M, BN divides N, U * BK divides K, a's rows and b's columns are
 * K-contiguous and their strides whole 16-byte units (the layouts' strides
 * are then plain, 1 along K: a stride the driver cannot see is 1 cost it
 * 5x, and loads clamped at the edges hung the H200). Push constants are
 * those of mul_mat_cm.comp.
 *
 * Which tile: on the H200 a 128x128 tile of 4 warps with K steps of 64 ran
 * 4096^3 at 306-325 TFLOP/s against 230-237 for the same tile of 8 warps
 * and 213-252 for the other shapes tried (BK 32 or 128, 64x128, 128x64,
 * 256x128, 128x256, U 2 to 16, the product taken transposed so the store
 * is plain; bench/RESULTS.md, runs 117-120), and in groups of GM 2 rows of
 * tiles 1% faster than 8 (run 124). With the loads taken out of
 * the loop (timing only) the same kernel ran at 568: the staging, not the
 * matrix units, is what the rest of the time waits on.
 */
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128u;
layout(constant_id = 2) const uint BN = 256u;
layout(constant_id = 3) const uint BK = 32u;
layout(constant_id = 4) const uint GM = 8u; /* rows of tiles a group (the rasterization below) */
layout(constant_id = 5) const uint U = 4u;  /* K steps a loop iteration */

layout(push_constant) uniform P {
    uint M, N, K;
    uint sa1, sa2, sa3;
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;
    uint oa, ob, od;
    uint flags;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly restrict buffer A { float16_t a[]; };
layout(binding = 1) readonly restrict buffer B { float16_t b[]; };
layout(binding = 3) writeonly restrict buffer D { float d[]; };

#define MAT_A coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>

void main() {
    TSL_PROGRESS();
    /* tiles in groups of GM rows of tiles, column by column within a group
     * (as mul_mat_cm.comp): the workgroups resident at once share a few
     * tiles of a and b, which L2 keeps */
    const uint gx = gl_NumWorkGroups.x, gy = gl_NumWorkGroups.y;
    const uint lin = gl_WorkGroupID.y * gx + gl_WorkGroupID.x, first = (lin / (GM * gy)) * GM;
    const uint gsz = min(gx - first, GM), in_group = lin % (GM * gy);
    const uint m0 = (first + in_group % gsz) * BM, n0 = (in_group / gsz) * BN;
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3;
    const uint bbase = pc.ob + i2 * pc.sb2 + i3 * pc.sb3;
    const uint dbase = pc.od + i2 * pc.sd2 + i3 * pc.sd3;

    tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
    ACC acc = ACC(0.0);
    {
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        la = setTensorLayoutDimensionNV(la, pc.M, pc.K);
        lb = setTensorLayoutDimensionNV(lb, pc.N, pc.K);
        la = setTensorLayoutStrideNV(la, pc.sa1 & ~7u, 1);
        lb = setTensorLayoutStrideNV(lb, pc.sb1 & ~7u, 1);
        /* a counted loop: with its trip count in this form the driver's
         * compiler pipelines the loads across steps (273 against 233
         * TFLOP/s at 128x256, 4096^3 on the H200, bench/RESULTS.md run 89;
         * a loop over k < K it does not) */
        const uint steps = pc.K / (U * BK);
        for (uint it = 0u; it < steps; it++) {
            const uint k = it * U * BK;
            [[unroll]] for (uint j = 0u; j < U; j++) {
                MAT_A ma;
                MAT_B mb;
                coopMatLoadTensorNV(ma, a, abase, sliceTensorLayoutNV(la, m0, BM, k + j * BK, BK));
                coopMatLoadTensorNV(mb, b, bbase, sliceTensorLayoutNV(lb, n0, BN, k + j * BK, BK), tr);
                acc = coopMatMulAdd(ma, mb, acc);
            }
        }
        tensorLayoutNV<2> ld = createTensorLayoutNV(2);
        ld = setTensorLayoutDimensionNV(ld, pc.N, pc.M);
        ld = setTensorLayoutStrideNV(ld, pc.sd1, 1);
        coopMatStoreTensorNV(acc, d, dbase, sliceTensorLayoutNV(ld, n0, BN, m0, BM), tr);
    }
}
