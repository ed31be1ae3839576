#version 450
/*
 * attn_dec.comp - attention for a few query columns (decode), first pass:
 * the three nodes a model builds for it,
 *   kq  = mul_mat(K, q)                 K [hd, n_kv, n_head_kv] F16 (a view of the cache)
 *   p   = soft_max(kq, mask, scale)     mask [n_kv, >= N] F32 / F16, or none
 *   out = mul_mat(V, p)                 V [n_kv, hdv, n_head_kv] F16 (the cache transposed)
 * for q [hd, N, n_head], out [hdv, N, n_head], head h reading K and V head
 * h / (n_head / n_head_kv) (grouped-query attention). The Vulkan backend
 * fuses them (vk_backend.c) when nothing else reads kq or p: two dispatches
 * (this kernel, then attn_combine.comp) and one level fewer per layer, and
 * neither the scores nor the weights go through memory.
 *
 * The keys are split into nsplit ranges of klen, a workgroup per (head,
 * column, range), so a few heads still fill the GPU (vk_attn_split picks
 * them); each writes its range's running maximum, sum and unnormalized
 * output (the partials) into a scratch, and attn_combine.comp joins a
 * column's ranges. Within a range the keys come in chunks of CH: an
 * invocation takes a key (two per chunk) and makes its whole dot product,
 * reading the key's row in 16-byte loads; the chunk's softmax is folded
 * into running sums the way flash attention does it (the running maximum
 * m, the sum l of exp(s - m), the output rescaled by exp(m_old - m) when m
 * grows), so any range fits in a few KiB of shared memory. For the weighted
 * sum an invocation takes an output dimension and walks the chunk's keys
 * along V's row (contiguous along the keys), again 16 bytes a load: many
 * independent loads in flight, no cross-lane reductions. A range whose
 * keys are all masked leaves m = -inf and adds nothing; a column with no
 * key left gets zeros, as soft_max gives a row that excludes everything.
 *
 * The output may be where q was (the graph's memory is planned for the
 * nodes apart, and q is dead once kq is made): the combine pass, which
 * writes it, runs after every range has read q.
 *
 * K and V are bound once (binding 0), as the span of the cache holding both
 * (the host fuses only when they are in one buffer); their first elements
 * are at pc.ok and pc.ov. Rounding differs from the three kernels apart
 * (another order of sums, exp of differences from a running maximum): the
 * results agree with them to float tolerance, not bit for bit.
 */
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

#define WG 128u
#define CH 256u   /* keys a chunk */
#define HD_MAX 256u
#define KR 8u     /* 16-byte loads in flight per invocation */
layout(local_size_x = 128) in;

layout(push_constant) uniform P {
    uint n_kv, hd, hdv, n_head, r2, ncol; /* r2 = n_head / n_head_kv */
    uint nsplit, klen;                    /* the keys in nsplit ranges of klen */
    uint ok, sk1, sk2;                    /* K: element (d, j, hk) at ok + d + j sk1 + hk sk2 */
    uint ov, sv1, sv2;                    /* V: element (j, e, hk) at ov + j + e sv1 + hk sv2 */
    uint oq, sq0, sq1, sq2;               /* q: (d, n, h) */
    uint om, sm0, sm1;                    /* mask: (j, n) */
    uint od;                              /* the partials: (h, n, split) at od + ((n H + h) nsplit + split) (hdv + 2) */
    float scale;
#if defined(ONE)
    uint oc, oqc;                         /* in binding 5: the counters', the quantized column's first word */
    uint oo, so0, so1, so2;               /* out: (e, n, h) in binding 3 */
    uint noout;                           /* 1: only the quantized column is read: out is left unwritten */
    uint sync;                            /* nonzero: a word of binding 5 each head's join counts itself into when done */
#endif
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

layout(binding = 0) readonly buffer KV { float16_t kv[]; };
layout(binding = 0) readonly buffer KV8 { uvec4 kv8[]; }; /* 8 halves a load */
layout(binding = 1) readonly buffer Q { float q[]; };
#if defined(MASK_F32)
layout(binding = 2) readonly buffer Mk { float mk[]; };
#elif defined(MASK_F16)
layout(binding = 2) readonly buffer Mk { float16_t mk[]; };
#endif
#if defined(ONE)
/* ONE (attn_dec1_*): the whole attention in one dispatch, for one column
 * whose output an integer-dot mat-vec reads next. Binding 3 is the output;
 * the partials, a counter per (head, column) and the output quantized to
 * Q8_0 (that mat-vec's column, byte for byte what quant_q8.comp makes) are
 * in binding 5, the backend's attention scratch. A workgroup counts itself
 * in once its range's partials are written and fenced; the last of its
 * head joins the ranges as attn_combine.comp does, writes the head's
 * output and its Q8_0 blocks, and sets the counter back to 0 for the next
 * layer's attention (the command buffer also zeroes the counters before its
 * first kernel). One level of kernels fewer a layer than the two passes.
 * With pc.noout the F32 output is not written at all: the backend sets it
 * where the one reader of the output is the mat-vec right after, which
 * takes the quantized column, and the graph's memory plan put the output
 * over q but not head over head (a head's output could land on the q of a
 * head whose ranges have not started yet). */
#include "q8.glsl"
layout(binding = 3) writeonly buffer D { float d[]; }; /* the output */
layout(binding = 5) coherent buffer XF { float xf[]; };
layout(binding = 5) coherent buffer XU { uint xu[]; };
#define PART xf
#define CMB_WG WG
#define CMB_P xf
#define CMB_OUT d
#define CMB_OUT_ON (pc.noout == 0u)
#define CMB_QOUT
#define CMB_Q xu
#include "combine.glsl"
shared uint last_;
#else
layout(binding = 3) writeonly buffer D { float d[]; }; /* the partials */
#define PART d
#endif

shared float qs[HD_MAX];
shared float ps[CH];
shared float red[WG];

float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float r = red[0];
    for (uint g = 1u; g < gl_NumSubgroups; g++) r = max(r, red[g]);
    barrier();
    return r;
}

float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float r = red[0];
    for (uint g = 1u; g < gl_NumSubgroups; g++) r += red[g];
    barrier();
    return r;
}

/* Eight halves of a 16-byte load, as floats. */
void unpack8(uvec4 u, out float f[8]) {
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        const vec2 v = unpackHalf2x16(u[i]);
        f[2u * i] = v.x;
        f[2u * i + 1u] = v.y;
    }
}

void main() {
    TSL_PROGRESS();
    const uint wg = wg_linear();
    if (wg >= pc.n_head * pc.ncol * pc.nsplit) return; /* uniform per workgroup */
    const uint split = wg % pc.nsplit, hn = wg / pc.nsplit, h = hn % pc.n_head, n = hn / pc.n_head;
    const uint hk = h / pc.r2;
    const uint k0 = split * pc.klen, k1 = min(pc.n_kv, k0 + pc.klen);
    const uint tid = gl_LocalInvocationID.x;

    for (uint i = tid; i < pc.hd; i += WG) qs[i] = q[pc.oq + i * pc.sq0 + n * pc.sq1 + h * pc.sq2];
    barrier();

    const uint kb = pc.ok + hk * pc.sk2, vb = pc.ov + hk * pc.sv2;
    /* whole 16-byte loads where every row starts on 8 halves (uniform) */
    const bool kwide = ((kb | pc.sk1 | pc.hd) & 7u) == 0u;
    const bool vwide = ((vb | pc.sv1) & 7u) == 0u;
    float acc[HD_MAX / WG];
    [[unroll]] for (uint t = 0u; t < HD_MAX / WG; t++) acc[t] = 0.0;
    float m = -1.0 / 0.0, l = 0.0;

    for (uint c0 = k0; c0 < k1; c0 += CH) {
        const uint nc = min(CH, k1 - c0);
        /* the chunk's scores: a key an invocation */
        for (uint jj = tid; jj < CH; jj += WG) {
            float w = -1.0 / 0.0;
            if (jj < nc) {
                const uint j = c0 + jj, row = kb + j * pc.sk1;
                float s = 0.0;
                if (kwide) {
                    /* the row's loads in rounds of KR, all of a round in
                     * flight before the first is used: a round trip to
                     * memory a round, not a load */
                    for (uint i0 = 0u; i0 < pc.hd; i0 += 8u * KR) {
                        uvec4 u[KR];
                        [[unroll]] for (uint r = 0u; r < KR; r++)
                            if (i0 + 8u * r < pc.hd) u[r] = kv8[((row + i0) >> 3) + r];
                        [[unroll]] for (uint r = 0u; r < KR; r++)
                            if (i0 + 8u * r < pc.hd) {
                                float f[8];
                                unpack8(u[r], f);
                                [[unroll]] for (uint e = 0u; e < 8u; e++) s += f[e] * qs[i0 + 8u * r + e];
                            }
                    }
                } else {
                    for (uint i = 0u; i < pc.hd; i++) s += float(kv[row + i]) * qs[i];
                }
#if defined(MASK_F32) || defined(MASK_F16)
                w = s * pc.scale + float(mk[pc.om + j * pc.sm0 + n * pc.sm1]);
#else
                w = s * pc.scale;
#endif
            }
            ps[jj] = w;
        }
        float cm = -1.0 / 0.0;
        for (uint jj = tid; jj < CH; jj += WG) cm = max(cm, ps[jj]); /* its own entries: no barrier needed */
        cm = wg_max(cm);                                              /* whose barriers publish ps */
        const float mn = max(m, cm);
        if (isinf(mn)) continue; /* every key so far masked: nothing to add (uniform) */
        const float alpha = exp(m - mn); /* 0 while m is -inf */
        float ls = 0.0;
        for (uint jj = tid; jj < CH; jj += WG) {
            const float p = exp(ps[jj] - mn);
            ps[jj] = p;
            ls += p;
        }
        ls = wg_sum(ls); /* its barriers also publish ps */
        l = l * alpha + ls;
        m = mn;
        /* the weighted sum: an output dimension an invocation */
        [[unroll]] for (uint t = 0u; t < HD_MAX / WG; t++) {
            const uint e = tid + t * WG;
            if (e >= pc.hdv) continue;
            const uint row = vb + e * pc.sv1 + c0;
            float s = 0.0;
            uint jj = 0u;
            if (vwide) {
                /* the whole groups of 8 keys in rounds of KR loads, as for
                 * the scores */
                const uint nw = nc & ~7u;
                for (uint j0 = 0u; j0 < nw; j0 += 8u * KR) {
                    uvec4 u[KR];
                    [[unroll]] for (uint r = 0u; r < KR; r++)
                        if (j0 + 8u * r < nw) u[r] = kv8[((row + j0) >> 3) + r];
                    [[unroll]] for (uint r = 0u; r < KR; r++)
                        if (j0 + 8u * r < nw) {
                            float f[8];
                            unpack8(u[r], f);
                            [[unroll]] for (uint i = 0u; i < 8u; i++) s += ps[j0 + 8u * r + i] * f[i];
                        }
                }
                jj = nw;
            }
            for (; jj < nc; jj++) s += ps[jj] * float(kv[row + jj]);
            acc[t] = acc[t] * alpha + s;
        }
        barrier(); /* ps is the next chunk's */
    }
    /* this range's running maximum, sum and unnormalized output */
    const uint base = pc.od + (hn * pc.nsplit + split) * (pc.hdv + 2u);
    if (tid == 0u) {
        PART[base] = m;
        PART[base + 1u] = l;
    }
    [[unroll]] for (uint t = 0u; t < HD_MAX / WG; t++) {
        const uint e = tid + t * WG;
        if (e < pc.hdv) PART[base + 2u + e] = acc[t];
    }
#if defined(ONE)
    /* count this range in; the last of the head joins them */
    barrier();
    if (tid == 0u) {
        memoryBarrierBuffer();
        last_ = atomicAdd(xu[pc.oc + hn], 1u) + 1u == pc.nsplit ? 1u : 0u;
    }
    barrier();
    if (last_ == 0u) return; /* uniform per workgroup */
    memoryBarrierBuffer();
    combine_head(tid, h, pc.n_head, pc.hdv, pc.nsplit, pc.od + hn * pc.nsplit * (pc.hdv + 2u),
                 pc.oo + n * pc.so1 + h * pc.so2, pc.so0, pc.oqc);
    if (tid == 0u) xu[pc.oc + hn] = 0u; /* for the next attention */
    TSL_COUNT_IN(xu, pc.sync) /* a product waiting for the quantized column */
#endif
}
