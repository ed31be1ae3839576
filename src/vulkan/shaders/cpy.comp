#version 450
/*
 * cpy.comp - copy with conversion between F32 and F16 (SRC_F32/SRC_F16,
 * DST_F32/DST_F16), any strides on both sides. Elements are matched in flat
 * row-major order, so the shapes may differ when the counts agree (dup,
 * cont, and cpy into a strided view such as a KV-cache slot). One invocation
 * per element.
 */
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint na0, na1, na2, na3; /* source shape */
    uint sa0, sa1, sa2, sa3;
    uint nd0, nd1, nd2, nd3; /* destination shape */
    uint sd0, sd1, sd2, sd3;
    uint oa, od;
} pc;

#if defined(SRC_F32)
layout(binding = 0) readonly buffer A { float a[]; };
#else
layout(binding = 0) readonly buffer A { float16_t a[]; };
#endif
#if defined(DST_F32)
layout(binding = 3) writeonly buffer D { float d[]; };
#else
layout(binding = 3) writeonly buffer D { float16_t d[]; };
#endif

void main() {
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= pc.nd0 * pc.nd1 * pc.nd2 * pc.nd3) return;
    uint r = e;
    const uint a0 = r % pc.na0; r /= pc.na0;
    const uint a1 = r % pc.na1; r /= pc.na1;
    const uint a2 = r % pc.na2, a3 = r / pc.na2;
    r = e;
    const uint d0 = r % pc.nd0; r /= pc.nd0;
    const uint d1 = r % pc.nd1; r /= pc.nd1;
    const uint d2 = r % pc.nd2, d3 = r / pc.nd2;
    const float v = float(a[pc.oa + a0 * pc.sa0 + a1 * pc.sa1 + a2 * pc.sa2 + a3 * pc.sa3]);
#if defined(DST_F32)
    d[pc.od + d0 * pc.sd0 + d1 * pc.sd1 + d2 * pc.sd2 + d3 * pc.sd3] = v;
#else
    d[pc.od + d0 * pc.sd0 + d1 * pc.sd1 + d2 * pc.sd2 + d3 * pc.sd3] = float16_t(v);
#endif
}
