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
 * makes of it (q8.glsl); a workgroup's hdv values are whole blocks. The
 * join itself is combine.glsl's, which attn_dec.comp's one-dispatch variant
 * (ONE) runs in the last range of each head.
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

layout(binding = 0) readonly buffer S { float sp[]; };
layout(binding = 3) writeonly buffer D { float d[]; };
#if defined(QOUT)
layout(binding = 2) writeonly buffer Q { uint qd[]; };
#define CMB_QOUT
#define CMB_Q qd
#endif
#define CMB_WG 128u
#define CMB_P sp
#define CMB_OUT d
#define CMB_OUT_ON true
#include "combine.glsl"

void main() {
    TSL_PROGRESS();
    const uint hn = wg_linear();
    if (hn >= pc.n_head * pc.ncol) return; /* uniform per workgroup */
    const uint h = hn % pc.n_head, n = hn / pc.n_head;
    combine_head(gl_LocalInvocationID.x, h, pc.n_head, pc.hdv, pc.nsplit, pc.os + hn * pc.nsplit * (pc.hdv + 2u),
                 pc.od + n * pc.sd1 + h * pc.sd2, pc.sd0, pc.oq);
}
