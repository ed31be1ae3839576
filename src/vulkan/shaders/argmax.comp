#version 450
/*
 * argmax.comp - ARGMAX: the index of the largest element of each row of a
 * (F32, any strides) as I32, one workgroup per row.
 *
 * The CPU's rule, exactly: the first index wins ties, NaN and -inf never
 * win, and a row with nothing above -inf gives 0. Each invocation keeps the
 * best of a strided share of the row (scanning up with a strict compare, so
 * its first maximum); the shares meet per subgroup (the largest value, then
 * the lowest index holding it) and the subgroups' in one invocation, in
 * order: the row's first maximum whatever the split.
 *
 * Speed: a decode's greedy choice is one row of a vocabulary (32k-256k
 * logits) right after the product that made it, so the row is read by one
 * workgroup of 512, eight loads in flight per invocation before any
 * compare (a load, a compare, the next load would leave one in flight and
 * take a round trip per element). Where the row is dense and on 16 bytes
 * (flags 1) those are eight 16-byte loads, 32 elements a round trip: 8
 * rounds for a row of 128256 instead of 31. That took only ~0.005 ms off
 * an 8B token on the H200 (bench/RESULTS.md run 170; the kernel still
 * shows ~21 us in the profile): one workgroup, so one multiprocessor,
 * reads the whole row, and that, not the rounds, is most of its time.
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

#define WG 512u
#define UNROLL 8u
layout(local_size_x = 512) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0;
    uint oa, od;
    uint flags; /* 1: sa0 = 1 and every row starts on 16 bytes */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(binding = 3) writeonly buffer D { int d[]; };

const uint NONE = 0xffffffffu; /* nothing above -inf found */
shared float sv[WG];           /* per subgroup (at most WG of them) */
shared uint si[WG];

void main() {
    TSL_PROGRESS();
    const uint row = wg_linear();
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return; /* uniform per workgroup */
    const uint tid = gl_LocalInvocationID.x;
    const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
    const uint xa = pc.oa + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
    float bv = -1.0 / 0.0;
    uint bi = NONE;
    uint i = tid;
    if ((pc.flags & 1u) != 0u) {
        /* quads q, q + WG, ...: each invocation still scans its share in
         * rising index order; the elements past the last whole quad after */
        const uint nq = pc.ne0 >> 2, xq = xa >> 2;
        uint q = tid;
        for (; q + (UNROLL - 1u) * WG < nq; q += UNROLL * WG) {
            vec4 v[UNROLL];
            [[unroll]] for (uint u = 0u; u < UNROLL; u++) v[u] = a4[xq + q + u * WG];
            [[unroll]] for (uint u = 0u; u < UNROLL; u++)
                [[unroll]] for (uint c = 0u; c < 4u; c++)
                    if (v[u][c] > bv) {
                        bv = v[u][c];
                        bi = 4u * (q + u * WG) + c;
                    }
        }
        for (; q < nq; q += WG) {
            const vec4 v = a4[xq + q];
            [[unroll]] for (uint c = 0u; c < 4u; c++)
                if (v[c] > bv) {
                    bv = v[c];
                    bi = 4u * q + c;
                }
        }
        i = 4u * nq + tid; /* at most three left, past every quad */
    }
    for (; i + (UNROLL - 1u) * WG < pc.ne0; i += UNROLL * WG) {
        float v[UNROLL];
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) v[u] = a[xa + (i + u * WG) * pc.sa0];
        [[unroll]] for (uint u = 0u; u < UNROLL; u++)
            if (v[u] > bv) {
                bv = v[u];
                bi = i + u * WG;
            }
    }
    for (; i < pc.ne0; i += WG) {
        const float v = a[xa + i * pc.sa0];
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    /* bi != NONE exactly where bv > -inf */
    const float m = subgroupMax(bv);
    const uint mi = subgroupMin(bi != NONE && bv == m ? bi : NONE);
    if (subgroupElect()) {
        sv[gl_SubgroupID] = m;
        si[gl_SubgroupID] = mi;
    }
    barrier();
    if (tid == 0u) {
        float best = -1.0 / 0.0;
        uint at = NONE;
        for (uint s = 0u; s < gl_NumSubgroups; s++) {
            const uint oi = si[s];
            if (oi != NONE && (at == NONE || sv[s] > best || (sv[s] == best && oi < at))) {
                best = sv[s];
                at = oi;
            }
        }
        d[pc.od + row * pc.sd0] = at == NONE ? 0 : int(at);
    }
}
