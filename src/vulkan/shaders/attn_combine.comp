#version 450
/*
 * attn_combine.comp - the second pass of attn_dec.comp: joins the partials
 * of a (head, column)'s key ranges into its output,
 *   out[e] = sum_s acc_s[e] exp(m_s - M) / sum_s l_s exp(m_s - M),  M = max_s m_s,
 * where range s left its running maximum m_s, its sum l_s of exp(score -
 * m_s) and its unnormalized output acc_s. Ranges whose keys were all masked
 * (m_s = -inf) add nothing; a column with no key left gets zeros.
 */
#include "common.glsl"

layout(local_size_x = 128) in;

layout(push_constant) uniform P {
    uint hdv, n_head, ncol, nsplit;
    uint os;                  /* the partials' first word */
    uint od, sd0, sd1, sd2;   /* out: (e, n, h) */
} pc;

layout(binding = 0) readonly buffer S { float sp[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

void main() {
    const uint hn = wg_linear();
    if (hn >= pc.n_head * pc.ncol) return; /* uniform per workgroup */
    const uint h = hn % pc.n_head, n = hn / pc.n_head, R = pc.hdv + 2u;
    const uint base = pc.os + hn * pc.nsplit * R;
    float mx = -1.0 / 0.0;
    for (uint s = 0u; s < pc.nsplit; s++) mx = max(mx, sp[base + s * R]);
    float l = 0.0;
    if (!isinf(mx))
        for (uint s = 0u; s < pc.nsplit; s++) {
            const float ms = sp[base + s * R];
            if (!isinf(ms)) l += sp[base + s * R + 1u] * exp(ms - mx);
        }
    const float inv = l > 0.0 ? 1.0 / l : 0.0;
    for (uint e = gl_LocalInvocationID.x; e < pc.hdv; e += 128u) {
        float acc = 0.0;
        if (!isinf(mx))
            for (uint s = 0u; s < pc.nsplit; s++) {
                const float ms = sp[base + s * R];
                if (!isinf(ms)) acc += sp[base + s * R + 2u + e] * exp(ms - mx);
            }
        d[pc.od + e * pc.sd0 + n * pc.sd1 + h * pc.sd2] = acc * inv;
    }
}
