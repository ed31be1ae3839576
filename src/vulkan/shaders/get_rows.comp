#version 450
/*
 * get_rows.comp - rows of a table (F32, F16, Q8_0, Q4_0; dtype.glsl) picked
 * by I32 indices, written as F32: table [ne0, nrows, ne2, ne3], indices
 * [n, ne2, ne3] -> dst [ne0, n, ne2, ne3]. One invocation per element.
 *
 * An index outside [0, nrows) is a data error the compute must report
 * (FAILED, naming the index), never an out-of-bounds read: the invocation
 * writes 0 and the first one to see a bad index claims the status words
 * (flag, node, index, position) that the host reads after the fence.
 */
#include "common.glsl"
#include "dtype.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint ne0, n, ne2, ne3;    /* dst shape */
    uint sd0, sd1, sd2, sd3;  /* dst element strides */
    uint sa1, sa2, sa3;       /* table strides (words for block types) */
    uint si0, si1, si2;       /* index strides (elements) */
    uint oa, oi, od;
    uint nrows, node;
    uint flags;               /* 1: Q4_0 weights in the split layout (q4s.glsl) */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 1) readonly buffer I { int idx[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

void main() {
    TSL_PROGRESS();
#if defined(A_Q4_0)
    a_q4s = (pc.flags & 1u) != 0u;
#endif
    uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= pc.ne0 * pc.n * pc.ne2 * pc.ne3) return;
    uint i0 = e % pc.ne0, r = e / pc.ne0;
    uint i = r % pc.n;
    r /= pc.n;
    uint i2 = r % pc.ne2, i3 = r / pc.ne2;
    int row = idx[pc.oi + i * pc.si0 + i2 * pc.si1 + i3 * pc.si2];
    float v = 0.0;
    if (row < 0 || uint(row) >= pc.nrows) {
        TSL_INDEX_ERROR(pc.node, uint(row), i)
    } else {
        v = a_elem(pc.oa + uint(row) * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3, i0);
    }
    d[pc.od + i0 * pc.sd0 + i * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3] = v;
}
