#version 450
/*
 * cpy_raw.comp - dup / cont / cpy between tensors of one type, moving the
 * stored bytes unit by unit (unit.glsl: an element, or a whole block of a
 * block format, which is never requantized), any strides on both sides
 * (block rows dense). Units are matched in flat row-major order, so shapes
 * may differ when the counts agree. One invocation per destination unit.
 *
 * Shapes arrive in units (ne0 divided by the block length) and strides in
 * the binding's elements (16-bit words, or bytes for UNIT_BYTES).
 */
#include "common.glsl"
#include "unit.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint na0, na1, na2, na3; /* source shape, in units */
    uint sa0, sa1, sa2, sa3;
    uint nd0, nd1, nd2, nd3; /* destination shape, in units */
    uint sd0, sd1, sd2, sd3;
    uint oa, od;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

void main() {
    TSL_PROGRESS();
    const uint u = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (u >= pc.nd0 * pc.nd1 * pc.nd2 * pc.nd3) return;
    uint r = u;
    const uint d0 = r % pc.nd0; r /= pc.nd0;
    const uint d1 = r % pc.nd1; r /= pc.nd1;
    const uint d2 = r % pc.nd2, d3 = r / pc.nd2;
    r = u;
    const uint a0 = r % pc.na0; r /= pc.na0;
    const uint a1 = r % pc.na1; r /= pc.na1;
    const uint a2 = r % pc.na2, a3 = r / pc.na2;
    const uint di = pc.od + d0 * pc.sd0 + d1 * pc.sd1 + d2 * pc.sd2 + d3 * pc.sd3;
    const uint si = pc.oa + a0 * pc.sa0 + a1 * pc.sa1 + a2 * pc.sa2 + a3 * pc.sa3;
    UNIT_COPY(di, A, si);
}
