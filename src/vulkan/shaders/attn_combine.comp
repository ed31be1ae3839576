#version 450
/*
 * attn_combine.comp - the second pass of attn_dec.comp: joins the partials
 * of a (head, column)'s key ranges into its output,
 *   out[e] = sum_s acc_s[e] exp(m_s - M) / sum_s l_s exp(m_s - M),  M = max_s m_s,
 * where range s left its running maximum m_s, its sum l_s of exp(score -
 * m_s) and its unnormalized output acc_s. Ranges whose keys were all masked
 * (m_s = -inf) add nothing; a column with no key left gets zeros.
 *
 * QOUT (attn_combine_q_f32): one column whose output is one dense row read
 * next by an integer-dot mat-vec (the attention output's projection): the
 * kernel also writes the row quantized to Q8_0 into the mat-vec's column
 * scratch (binding 2, from word pc.oq), byte for byte what quant_q8.comp
 * makes of it (q8.glsl); a workgroup's hdv values are whole blocks.
 */
#include "common.glsl"
#if defined(QOUT)
#include "q8.glsl"
#endif

layout(local_size_x = 128) in;

layout(push_constant) uniform P {
    uint hdv, n_head, ncol, nsplit;
    uint os;                  /* the partials' first word */
    uint od, sd0, sd1, sd2;   /* out: (e, n, h) */
    uint oq;                  /* QOUT: the quantized column's first word */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

#define SPLIT_MAX 64u /* vk_attn_split's most ranges */
#define CR 8u         /* ranges' values in flight per invocation */

layout(binding = 0) readonly buffer S { float sp[]; };
shared float sm[SPLIT_MAX], sl[SPLIT_MAX];
layout(binding = 3) writeonly buffer D { float d[]; };
#if defined(QOUT)
layout(binding = 2) writeonly buffer Q { uint qd[]; };
shared float qv[256];
shared float qm[64];
shared int qsum[64];
#endif

void main() {
    TSL_PROGRESS();
    const uint hn = wg_linear();
    if (hn >= pc.n_head * pc.ncol) return; /* uniform per workgroup */
    const uint h = hn % pc.n_head, n = hn / pc.n_head, R = pc.hdv + 2u;
    const uint base = pc.os + hn * pc.nsplit * R;
    /* the ranges' maxima and sums: a range an invocation, through shared
     * memory (one round trip to memory, not one a range) */
    const uint tid = gl_LocalInvocationID.x;
    for (uint s = tid; s < pc.nsplit; s += 128u) {
        const vec2 ml = vec2(sp[base + s * R], sp[base + s * R + 1u]);
        sm[s] = ml.x;
        sl[s] = ml.y;
    }
    barrier();
    float mx = -1.0 / 0.0;
    for (uint s = 0u; s < pc.nsplit; s++) mx = max(mx, sm[s]);
    float l = 0.0;
    if (!isinf(mx))
        for (uint s = 0u; s < pc.nsplit; s++)
            if (!isinf(sm[s])) l += sl[s] * exp(sm[s] - mx);
    const float inv = l > 0.0 ? 1.0 / l : 0.0;
    for (uint e = tid; e < pc.hdv; e += 128u) {
        float acc = 0.0;
        if (!isinf(mx))
            for (uint s0 = 0u; s0 < pc.nsplit; s0 += CR) {
                /* CR ranges' values in flight at once */
                float v[CR];
                [[unroll]] for (uint r = 0u; r < CR; r++)
                    v[r] = s0 + r < pc.nsplit ? sp[base + (s0 + r) * R + 2u + e] : 0.0;
                [[unroll]] for (uint r = 0u; r < CR; r++)
                    if (s0 + r < pc.nsplit && !isinf(sm[s0 + r])) acc += v[r] * exp(sm[s0 + r] - mx);
            }
        d[pc.od + e * pc.sd0 + n * pc.sd1 + h * pc.sd2] = acc * inv;
#if defined(QOUT)
        qv[e] = acc * inv;
#endif
    }
#if defined(QOUT)
    /* head h's hdv values are blocks h hdv / 32 ..: eight invocations a
     * block, four values each, as in quant_q8.comp */
    barrier();
    const uint lid = gl_LocalInvocationID.x, part = lid % 8u, nb = pc.n_head * pc.hdv / 32u;
    const uint nblk = pc.hdv / 32u, blk = h * nblk + lid / 8u;
    const bool live = lid < nblk * 8u;
    vec4 x = vec4(0.0);
    if (live) {
        const uint k = (lid / 8u) * 32u + part * 4u;
        x = vec4(qv[k], qv[k + 1u], qv[k + 2u], qv[k + 3u]);
        qm[lid] = max(max(abs(x.x), abs(x.y)), max(abs(x.z), abs(x.w)));
    }
    barrier();
    float dq = 0.0;
    uint word = 0u;
    if (live) {
        float amax = 0.0;
        [[unroll]] for (uint i = 0u; i < 8u; i++) amax = max(amax, qm[lid - part + i]);
        float id;
        q8_scale(amax, dq, id);
        int sum;
        word = q8_word(x, id, sum);
        qsum[lid] = sum;
    }
    barrier();
    if (live) Q8_STORE(qd, pc.oq, nb, blk, part, word, dq, qsum, lid)
#endif
}
