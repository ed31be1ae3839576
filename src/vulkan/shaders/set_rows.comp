#version 450
/*
 * set_rows.comp - F32 src written into dst (F32, or F16 with DST_F16) at
 * I32 positions along dim 0 or 1 (tsl_set_rows): one invocation per source
 * element. An index out of range writes nothing for its element and the
 * first such index claims the status words (as get_rows does), which the
 * host turns into the compute's FAILED record. F32 to F16 rounds to nearest
 * even (packHalf2x16's rounding is the implementation's choice, so the
 * conversion is done on the bits).
 */
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#if defined(DST_F16)
#include "conv.glsl"
#endif

layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;  /* src shape */
    uint ss0, ss1, ss2, ss3;  /* src element strides */
    uint sd0, sd1, sd2, sd3;  /* dst element strides */
    uint si0;                 /* index stride (elements) */
    uint os, oi, od;
    uint dim, lim, node;      /* the dimension written along, dst's extent there, the node */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float s[]; };
layout(binding = 1) readonly buffer I { int idx[]; };
#if defined(DST_F16)
layout(binding = 3) writeonly buffer D { uint16_t d[]; };
#else
layout(binding = 3) writeonly buffer D { float d[]; };
#endif


void main() {
    TSL_PROGRESS();
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= pc.ne0 * pc.ne1 * pc.ne2 * pc.ne3) return;
    const uint i0 = e % pc.ne0, r = e / pc.ne0;
    const uint i1 = r % pc.ne1, i2 = (r / pc.ne1) % pc.ne2, i3 = r / (pc.ne1 * pc.ne2);
    const uint j = pc.dim == 0u ? i0 : i1;
    const int at = idx[pc.oi + j * pc.si0];
    if (at < 0 || uint(at) >= pc.lim) {
        TSL_INDEX_ERROR(pc.node, uint(at), j)
        return;
    }
    const uint o0 = pc.dim == 0u ? uint(at) : i0, o1 = pc.dim == 1u ? uint(at) : i1;
    const float v = s[pc.os + i0 * pc.ss0 + i1 * pc.ss1 + i2 * pc.ss2 + i3 * pc.ss3];
    const uint o = pc.od + o0 * pc.sd0 + o1 * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3;
#if defined(DST_F16)
    d[o] = uint16_t(f32_to_f16_bits(floatBitsToUint(v)));
#else
    d[o] = v;
#endif
}
