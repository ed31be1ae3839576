#version 450
/*
 * concat.comp - a and b joined along dimension dim (0..3), of one type moved
 * as opaque units (unit.glsl), any strides on every side. One invocation
 * per destination element: it reads from a below a's extent along dim and
 * from b (shifted back by that extent) above it.
 */
#include "common.glsl"
#include "unit.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3; /* destination shape */
    uint na0, na1, na2, na3; /* a's shape */
    uint sa0, sa1, sa2, sa3; /* strides in the binding's elements */
    uint sb0, sb1, sb2, sb3;
    uint sd0, sd1, sd2, sd3;
    uint oa, ob, od;
    uint dim;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

void main() {
    TSL_PROGRESS();
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= pc.ne0 * pc.ne1 * pc.ne2 * pc.ne3) return;
    uint r = e;
    uint i[4];
    i[0] = r % pc.ne0; r /= pc.ne0;
    i[1] = r % pc.ne1; r /= pc.ne1;
    i[2] = r % pc.ne2;
    i[3] = r / pc.ne2;
    const uint di = pc.od + i[0] * pc.sd0 + i[1] * pc.sd1 + i[2] * pc.sd2 + i[3] * pc.sd3;
    const uint na[4] = uint[4](pc.na0, pc.na1, pc.na2, pc.na3);
    if (i[pc.dim] < na[pc.dim]) {
        UNIT_COPY(di, A, pc.oa + i[0] * pc.sa0 + i[1] * pc.sa1 + i[2] * pc.sa2 + i[3] * pc.sa3);
    } else {
        i[pc.dim] -= na[pc.dim];
        UNIT_COPY(di, B, pc.ob + i[0] * pc.sb0 + i[1] * pc.sb1 + i[2] * pc.sb2 + i[3] * pc.sb3);
    }
}
