/*
 * combine.glsl - joining the partials of a (head, column)'s key ranges into
 * its output (decode attention, attn_dec.comp's second step):
 *   out[e] = sum_s acc_s[e] exp(m_s - M) / sum_s l_s exp(m_s - M),  M = max_s m_s,
 * where range s left its running maximum m_s, its sum l_s of exp(score -
 * m_s) and its unnormalized output acc_s (hdv + 2 words a range). Ranges
 * whose keys were all masked (m_s = -inf) add nothing; a column with no key
 * left gets zeros. With CMB_QOUT the head's values are also written
 * quantized to Q8_0 (whole blocks: hdv a multiple of 32), byte for byte what
 * quant_q8.comp makes of them (q8.glsl). Used by attn_combine.comp (its own
 * pass) and attn_dec.comp's ONE variant (the last range of each head).
 *
 * Before including: CMB_WG (invocations), CMB_P (the array the partials are
 * read from), CMB_OUT (the output's) and CMB_OUT_ON (whether it is written:
 * attn_dec1 leaves an output nothing reads but through its quantized copy),
 * and with CMB_QOUT CMB_Q (the quantized column's, uint words). GLSL
 * functions cannot take buffers: the arrays are named by macro.
 */
#define SPLIT_MAX 64u /* vk_attn_split's most ranges */
#define CR 8u         /* ranges' values in flight per invocation */
shared float sm[SPLIT_MAX], sl[SPLIT_MAX];
#if defined(CMB_QOUT)
shared float qv[256];
shared float qm[64];
shared int qsum[64];
#endif

/* Head h of n_head: nsplit partials from word base; output element e at
 * ob + e * so0; with CMB_QOUT the column's blocks of head h from word oq. */
void combine_head(uint tid, uint h, uint n_head, uint hdv, uint nsplit, uint base, uint ob, uint so0, uint oq) {
    const uint R = hdv + 2u;
    /* the ranges' maxima and sums: a range an invocation, through shared
     * memory (one round trip to memory, not one a range) */
    for (uint s = tid; s < nsplit; s += CMB_WG) {
        sm[s] = CMB_P[base + s * R];
        sl[s] = CMB_P[base + s * R + 1u];
    }
    barrier();
    float mx = -1.0 / 0.0;
    for (uint s = 0u; s < nsplit; s++) mx = max(mx, sm[s]);
    float l = 0.0;
    if (!isinf(mx))
        for (uint s = 0u; s < nsplit; s++)
            if (!isinf(sm[s])) l += sl[s] * exp(sm[s] - mx);
    const float inv = l > 0.0 ? 1.0 / l : 0.0;
    for (uint e = tid; e < hdv; e += CMB_WG) {
        float acc = 0.0;
        if (!isinf(mx))
            for (uint s0 = 0u; s0 < nsplit; s0 += CR) {
                /* CR ranges' values in flight at once */
                float v[CR];
                [[unroll]] for (uint r = 0u; r < CR; r++)
                    v[r] = s0 + r < nsplit ? CMB_P[base + (s0 + r) * R + 2u + e] : 0.0;
                [[unroll]] for (uint r = 0u; r < CR; r++)
                    if (s0 + r < nsplit && !isinf(sm[s0 + r])) acc += v[r] * exp(sm[s0 + r] - mx);
            }
        if (CMB_OUT_ON) CMB_OUT[ob + e * so0] = acc * inv;
#if defined(CMB_QOUT)
        qv[e] = acc * inv;
#endif
    }
#if defined(CMB_QOUT)
    /* head h's hdv values are blocks h hdv / 32 .. of the column: eight
     * invocations a block, four values each, as in quant_q8.comp */
    barrier();
    const uint part = tid % 8u, nb = n_head * hdv / 32u;
    const uint nblk = hdv / 32u, blk = h * nblk + tid / 8u;
    const bool live = tid < nblk * 8u;
    vec4 x = vec4(0.0);
    if (live) {
        const uint k = (tid / 8u) * 32u + part * 4u;
        x = vec4(qv[k], qv[k + 1u], qv[k + 2u], qv[k + 3u]);
        qm[tid] = max(max(abs(x.x), abs(x.y)), max(abs(x.z), abs(x.w)));
    }
    barrier();
    float dq = 0.0;
    uint word = 0u;
    if (live) {
        float amax = 0.0;
        [[unroll]] for (uint i = 0u; i < 8u; i++) amax = max(amax, qm[tid - part + i]);
        float id;
        q8_scale(amax, dq, id);
        int sum;
        word = q8_word(x, id, sum);
        qsum[tid] = sum;
    }
    barrier();
    if (live) Q8_STORE(CMB_Q, oq, nb, blk, part, word, dq, qsum, tid)
#endif
}
