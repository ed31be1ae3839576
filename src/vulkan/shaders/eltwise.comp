#version 450
/*
 * eltwise.comp - element-wise F32 ops, one invocation per element of the
 * destination, any strides on every side: unary (OP_SCALE, OP_SQR, OP_SQRT,
 * OP_SILU, OP_GELU), binary with b broadcast to a by modulo (OP_ADD, OP_SUB,
 * OP_MUL, OP_DIV) and OP_SWIGLU (silu(a) * b, same shapes).
 *
 * In place is safe: each invocation reads its own element before writing it,
 * and bindings without `restrict` may alias.
 *
 * Fast paths (flags, set by the host): bit 0, a and dst are contiguous, so
 * an element's place is its flat index; with it, bit 1, b is contiguous in
 * a's shape (same index), or bit 2, b is one contiguous row broadcast over
 * every row (index modulo ne0, a bias). Only the general case pays the
 * chain of divisions that turns a flat index into four coordinates.
 *
 * QOUT (swiglu_q_f32): one contiguous row (flags 1 and 2, ne0 a multiple
 * of 32: the host checks) read next by integer-dot mat-vecs: the kernel
 * also writes the row quantized to Q8_0 into the mat-vec's column scratch
 * (binding 2, from word pc.oq), byte for byte what quant_q8.comp makes of
 * it (q8.glsl). A workgroup's 256 values are 8 whole blocks.
 */
#include "common.glsl"
#if defined(QOUT)
#include "q8.glsl"
#endif

layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint ne0, ne1, ne2, ne3;
    uint sa0, sa1, sa2, sa3;
    uint sb0, sb1, sb2, sb3;
    uint sd0, sd1, sd2, sd3;
    uint nb0, nb1, nb2, nb3; /* b's shape (broadcast) */
    uint oa, ob, od;
    float p0;
    uint flags;
    uint oq; /* QOUT: the quantized column's first word */
    uint sync; /* QOUT: nonzero, a word of binding 2 each workgroup counts itself into when done */
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

float silu(float x) { return x / (1.0 + exp(-x)); }

#if defined(OP_ADD) || defined(OP_SUB) || defined(OP_MUL) || defined(OP_DIV) || defined(OP_SWIGLU)
#define BINARY 1
#endif

float op(float x, float y) {
#if defined(OP_ADD)
    return x + y;
#elif defined(OP_SUB)
    return x - y;
#elif defined(OP_MUL)
    return x * y;
#elif defined(OP_DIV)
    return x / y;
#elif defined(OP_SWIGLU)
    return silu(x) * y;
#elif defined(OP_SCALE)
    return x * pc.p0;
#elif defined(OP_SQR)
    return x * x;
#elif defined(OP_SQRT)
    return sqrt(x);
#elif defined(OP_SILU)
    return silu(x);
#elif defined(OP_GELU)
    /* tanh form: 0.5 x (1 + tanh(u)) == x / (1 + exp(-2u)) */
    const float u = 0.79788456080286536 * x * (1.0 + 0.044715 * x * x);
    return x / (1.0 + exp(-2.0 * u));
#else
#error "eltwise.comp: no OP_ defined"
#endif
}

#if defined(QOUT)
layout(binding = 2) coherent writeonly buffer Q { uint qd[]; };
layout(binding = 2) coherent buffer QS { uint qsig[]; };
shared float qv[256];
shared float qm[64];
shared int qsum[64];

void main() {
    TSL_PROGRESS();
    const uint lid = gl_LocalInvocationID.x, wg = wg_linear();
    const uint idx = wg * 256u + lid;
    float v = 0.0;
    if (idx < pc.ne0) {
        v = op(a[pc.oa + idx], b[pc.ob + idx]);
        d[pc.od + idx] = v;
    }
    qv[lid] = v;
    barrier();
    /* eight invocations a block, four values each, as in quant_q8.comp */
    const uint part = lid % 8u, blk = wg * 8u + lid / 8u, nb = pc.ne0 / 32u;
    vec4 x = vec4(0.0);
    if (lid < 64u) {
        const uint k = (lid / 8u) * 32u + part * 4u;
        x = vec4(qv[k], qv[k + 1u], qv[k + 2u], qv[k + 3u]);
        qm[lid] = max(max(abs(x.x), abs(x.y)), max(abs(x.z), abs(x.w)));
    }
    barrier();
    float dq = 0.0;
    uint word = 0u;
    if (lid < 64u) {
        float amax = 0.0;
        [[unroll]] for (uint i = 0u; i < 8u; i++) amax = max(amax, qm[lid - part + i]);
        float id;
        q8_scale(amax, dq, id);
        int sum;
        word = q8_word(x, id, sum);
        qsum[lid] = sum;
    }
    barrier();
    if (lid < 64u && blk < nb) Q8_STORE(qd, pc.oq, nb, blk, part, word, dq, qsum, lid)
    TSL_COUNT_IN(qsig, pc.sync) /* a product waiting for the column */
}
#else
void main() {
    TSL_PROGRESS();
    const uint idx = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (idx >= pc.ne0 * pc.ne1 * pc.ne2 * pc.ne3) return;
    float y = 0.0;
    if ((pc.flags & 1u) != 0u) {
#if defined(BINARY)
        if ((pc.flags & 2u) != 0u) {
            y = b[pc.ob + idx];
        } else if ((pc.flags & 4u) != 0u) {
            y = b[pc.ob + idx % pc.ne0];
        } else {
            uint r = idx;
            const uint i0 = r % pc.ne0; r /= pc.ne0;
            const uint i1 = r % pc.ne1; r /= pc.ne1;
            const uint i2 = r % pc.ne2, i3 = r / pc.ne2;
            y = b[pc.ob + (i0 % pc.nb0) * pc.sb0 + (i1 % pc.nb1) * pc.sb1 + (i2 % pc.nb2) * pc.sb2 +
                  (i3 % pc.nb3) * pc.sb3];
        }
#endif
        d[pc.od + idx] = op(a[pc.oa + idx], y);
        return;
    }
    uint r = idx;
    const uint i0 = r % pc.ne0; r /= pc.ne0;
    const uint i1 = r % pc.ne1; r /= pc.ne1;
    const uint i2 = r % pc.ne2, i3 = r / pc.ne2;
#if defined(BINARY)
    y = b[pc.ob + (i0 % pc.nb0) * pc.sb0 + (i1 % pc.nb1) * pc.sb1 + (i2 % pc.nb2) * pc.sb2 + (i3 % pc.nb3) * pc.sb3];
#endif
    d[pc.od + i0 * pc.sd0 + i1 * pc.sd1 + i2 * pc.sd2 + i3 * pc.sd3] =
        op(a[pc.oa + i0 * pc.sa0 + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3], y);
}
#endif
