#version 450
/*
 * rope.comp - rotary position embedding (NORMAL and NEOX), with
 * freq_factors and YaRN, matching the CPU's rope_yarn formula:
 *   theta_extrap = pos * base^(-2i/n_dims) / ff[i]
 *   theta_interp = freq_scale * theta_extrap
 *   theta        = theta_interp, or with YaRN the ramp mix of both
 *   (cos, sin)   = (cos theta, sin theta) * mscale
 * NORMAL rotates (x[2i], x[2i+1]), NEOX (x[i], x[i + n_dims/2]); dims past
 * n_dims are copied. One invocation per rotated pair or copied element.
 *
 * Angles and the rotation are rope.glsl's (in double with ROPE_F64), which
 * the q/k/v product that rotates its own rows shares (mul_mat_vecq.comp).
 *
 * STORE_ROWS (rope_set_rows_f16): the rotated values go straight into an F16
 * cache, set_rows(cache, reshape_2d(rope(k, pos)), pos, 1) in one dispatch,
 * which the Vulkan backend fuses when nothing else reads the rotated k
 * (vk_backend.c): a level fewer per layer. The rope position of a token is
 * then also its cache row: d's strides are the cache's, with sd2 the row
 * stride (the token's dimension becomes row pos), and a position outside
 * the cache's pc.lim rows is the set_rows node's (pc.node) data error,
 * reported through the status words, nothing written for it. The F16
 * rounding is set_rows.comp's (conv.glsl).
 *
 * NORM (rope_norm_*): the rotated row is mul(rms_norm(x), w), a per-head
 * q or k norm as qwen3 has before its rope: x is bound at 0 in the rope
 * input's place, w (one row of ne0) at 2 in the frequency factors' (the
 * backend fuses only ropes without them), pc.eps the norm's. A workgroup
 * per row: the row's mean square first, then its pairs, each value
 * x * scale * w as rms_norm_mul.comp forms it. One dispatch and a level
 * fewer for each of q and k (vk_backend.c).
 */
#include "common.glsl"
#include "rope.glsl"
#if defined(STORE_ROWS)
#extension GL_EXT_shader_16bit_storage : require
#include "conv.glsl"
#endif

#if defined(NORM)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define WGN 128
#else
#define WGN 256
#endif
layout(local_size_x = WGN) in;
const uint WG = WGN;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sd0, sd1, sd2, sd3;
    uint n_dims, neox, has_ff;
    uint oa, op, off, od;
    uint sp, sff;
    float freq_scale, ext_factor, mscale, corr0, corr1;
    float theta_hi, theta_lo; /* base^(-2/n_dims) = hi + lo */
#if defined(STORE_ROWS)
    uint lim, node; /* the cache's rows; the set_rows node, for an index error */
#endif
#if defined(NORM)
    layout(offset = 120) float eps;
#endif
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer Pos { int pos[]; };
layout(binding = 2) readonly buffer Ff { float ff[]; };
#if defined(STORE_ROWS)
layout(binding = 3) writeonly buffer D { uint16_t d[]; };
#define STORE(o, v) d[o] = uint16_t(f32_to_f16_bits(floatBitsToUint(v)))
#else
layout(binding = 3) writeonly buffer D { float d[]; };
#define STORE(o, v) d[o] = (v)
#endif

/* Element j of the row at xa as the rope takes it: with NORM normed and
 * weighted (w's first element and stride in pc.off, pc.sff) */
float xval(uint xa, uint j, float scale) {
#if defined(NORM)
    precise const float y = a[xa + j * pc.sa0] * scale;
    precise const float v = y * ff[pc.off + j * pc.sff];
    return v;
#else
    return a[xa + j * pc.sa0];
#endif
}

/* Pair t (or, past n_dims / 2, a copied element) of the row at xa, for
 * position p, into the row at xd */
void rope_one(uint t, uint xa, uint xd, int p, float scale) {
    const uint half_dims = pc.n_dims / 2u;
    if (t >= half_dims) { /* past n_dims: copied through */
        const uint i = pc.n_dims + (t - half_dims);
        STORE(xd + i * pc.sd0, xval(xa, i, scale));
        return;
    }
    const uint i = t;
    const float th = rope_theta(i, p, pc.theta_hi, pc.theta_lo, pc.freq_scale, pc.ext_factor, pc.corr0, pc.corr1,
                                pc.has_ff != 0u, pc.has_ff != 0u ? ff[pc.off + i * pc.sff] : 1.0);
    const uint j0 = pc.neox != 0u ? i : 2u * i;
    const uint j1 = pc.neox != 0u ? i + half_dims : 2u * i + 1u;
    float y0, y1;
    rope_rotate(xval(xa, j0, scale), xval(xa, j1, scale), th, pc.mscale, y0, y1);
    STORE(xd + j0 * pc.sd0, y0);
    STORE(xd + j1 * pc.sd0, y1);
}

#if defined(NORM)
shared float red[WG];
#endif

void main() {
    TSL_PROGRESS();
    const uint per_row = pc.n_dims / 2u + (pc.ne0 - pc.n_dims);
#if defined(NORM)
    const uint row = wg_linear(), t0 = gl_LocalInvocationID.x;
    if (row >= pc.ne1 * pc.ne2 * pc.ne3) return; /* uniform per workgroup */
#else
    const uint e = wg_linear() * WG + gl_LocalInvocationID.x;
    if (e >= per_row * pc.ne1 * pc.ne2 * pc.ne3) return;
    const uint t0 = e % per_row, row = e / per_row;
#endif
    const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
    const uint xa = pc.oa + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
    const int p = pos[pc.op + i2 * pc.sp];
#if defined(STORE_ROWS)
    if (p < 0 || uint(p) >= pc.lim) { /* with NORM uniform per workgroup: before its barrier */
        TSL_INDEX_ERROR(pc.node, uint(p), i2)
        return;
    }
    const uint xd = pc.od + i1 * pc.sd1 + uint(p) * pc.sd2 + i3 * pc.sd3;
#else
    const uint xd = pc.od + i1 * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3;
#endif
#if defined(NORM)
    /* the row's mean square (the subgroups' sums, then theirs), the
     * norm's formula */
    float ss = 0.0;
    for (uint j = t0; j < pc.ne0; j += WG) {
        const float v = a[xa + j * pc.sa0];
        ss += v * v;
    }
    ss = subgroupAdd(ss);
    if (subgroupElect()) red[gl_SubgroupID] = ss;
    barrier();
    float sum = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; g++) sum += red[g];
    const float scale = inversesqrt(sum / float(pc.ne0) + pc.eps);
    for (uint t = t0; t < per_row; t += WG) rope_one(t, xa, xd, p, scale);
#else
    rope_one(t0, xa, xd, p, 1.0);
#endif
}
