#version 450
/*
 * argmax.comp - ARGMAX: the index of the largest element of each row of a
 * (F32, any strides) as I32, one workgroup per row.
 *
 * The CPU's rule, exactly: the first index wins ties, NaN never wins, and a
 * row of NaN gives 0. Each invocation keeps the best of a strided share of
 * the row (scanning up, so its first maximum), and the shares meet in a
 * shared-memory tree that prefers a found value, then the larger value,
 * then the lower index: the row's first maximum whatever the split.
 */
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0;
    uint oa, od;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 3) writeonly buffer D { int d[]; };

shared float rv[WG];
shared uint ri[WG]; /* index, or 0xffffffff: nothing found (all NaN) */

void main() {
    TSL_PROGRESS();
    const uint row = wg_linear();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return; /* uniform per workgroup */
    const uint tid = gl_LocalInvocationID.x;
    const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
    const uint xa = pc.oa + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
    float bv = -1.0 / 0.0;
    uint bi = 0xffffffffu;
    for (uint i = tid; i < pc.ne0; i += WG) {
        const float v = a[xa + i * pc.sa0];
        if (v > bv || (bi == 0xffffffffu && v == bv)) {
            bv = v;
            bi = i;
        }
    }
    rv[tid] = bv;
    ri[tid] = bi;
    barrier();
    [[unroll]] for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k) {
            const float ov = rv[tid + k];
            const uint oi = ri[tid + k];
            const uint mi = ri[tid];
            const bool take = oi != 0xffffffffu &&
                              (mi == 0xffffffffu || ov > rv[tid] || (ov == rv[tid] && oi < mi));
            if (take) {
                rv[tid] = ov;
                ri[tid] = oi;
            }
        }
        barrier();
    }
    if (tid == 0u) d[pc.od + row * pc.sd0] = ri[0] == 0xffffffffu ? 0 : int(ri[0]);
}
