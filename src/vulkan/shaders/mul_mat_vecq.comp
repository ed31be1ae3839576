#version 450
/*
 * mul_mat_vecq.comp - Q8_0 / Q4_0 weights times one F32 column (decode)
 * with integer dot products: d[m] = sum_k a[k, m] b[k].
 *
 * Why a second mat-vec kernel for block formats. A Q4_0 weight is 0.5625
 * bytes; its F32 activation 4. Read straight from the activation vector,
 * the activations are 7x the weight bytes a row streams, all through the
 * first-level cache, and unpacking each quant to a float costs 3-4
 * instructions: on a GPU whose memory outruns its arithmetic (the H200:
 * 4.8 TB/s against 67 TFLOP/s of FP32) the kernel is bound by those, not by
 * memory. Here, as on the CPU (and in ggml), the column comes quantized to
 * Q8_0 (quant_q8.comp, dispatched before this kernel: binding 2), 1 byte
 * per activation, staged in shared memory for the rows of the whole
 * workgroup. A 32-bit word of weight quants then takes one 4x8-bit signed
 * dot product (Q4_0: two, after two masks), and each block one conversion
 * and one multiply-add: d_w * d_b * sum(q_w q_b), exact integer sums, the
 * CPU's arithmetic. Q4_0's offset 8 is taken out per block with the sum of
 * the activation quants: sum((q - 8) b) = sum(q b) - 8 sum(b).
 *
 * Layout of the work:
 *  - the weights of the first steps are requested, then the workgroup
 *    copies the quantized column into shared memory;
 *  - a workgroup of W invocations is S teams of T = W / S lanes; a team
 *    owns R consecutive rows; a block is split between LPB lanes (spec
 *    constant 3), each reading QB = 16 (Q4_0) or 32 (Q8_0) / LPB quant
 *    bytes as 32-bit words. Blocks are 18 or 34 bytes, so a lane's bytes
 *    start on a 2-byte boundary: it loads one word more and takes the
 *    middle when they straddle. Consecutive lanes read consecutive bytes.
 *  - the team's sums meet in subgroupAdd when a team is one subgroup, else
 *    through shared memory.
 *
 * Spec constants: W (local_size_x_id 0), S (1), R (2), LPB (3), U steps
 * loaded ahead (4), KB the most blocks per row the shared quantized column
 * holds (5; the host checks K / 32 <= KB; with bit 16 set, the column is
 * not staged: each lane reads its activations from binding 2 through the
 * caches, and K is not bounded).
 *
 * ROPE (mul_mat_vecq_*_rope): the q/k/v product of a decoder's attention,
 * rotating its own rows. The backend fuses the product with the three
 * nodes that read its parts (vk_backend.c: rope(q), set_rows(K cache,
 * rope(k)), set_rows(V cache, v), one token): rows [0, nq) are q, the
 * next nk are k (both whole heads of hd rows), the rest v. A team's two
 * rows are one rope pair (NORMAL: rows 2i, 2i+1 of a head; NEOX: i and
 * i + n_dims / 2), so once their sums meet one lane turns them by the
 * pair's angle (rope.glsl, the rope kernel's own functions) and stores q
 * (after qwen2's biases, one row at binding 6, where the backend took
 * their ADD into the product) into the rope's output (binding 3), k into
 * row p of the K cache and v into column p of the transposed V cache (both
 * F16, in binding 5, which spans both caches), p the position at binding 1. A position outside the
 * cache stores no k or v and is the k store's data error, as in
 * rope_set_rows. The rope level between the product and the attention
 * goes: one level and three dispatches fewer a layer.
 *
 * A norm between products, in the products (the NORMQ and NS variants).
 * mul(rms_norm(x), w) costs a level of its own between the product that
 * makes x (with the residual added) and the products that read the normed
 * row's quantized column. Its two reductions split: a NORMQ product
 * (mul_mat_vecq_*_nq) computes 32 rows a workgroup, so once its rows are
 * stored each workgroup holds one whole Q8_0 block of x; it quantizes that
 * block's x * w (the weight, one row at binding 6) into a second column in
 * the scratch (binding 5, from word pc.oqo), with the block's scale left
 * unrounded, and writes the block's sum of squares after the column. Q8_0
 * is scale-invariant: the quants of x * w * s are those of x * w, and the
 * block's scale s times as large. So the NS products that read the column
 * (mul_mat_vecq_*_ns, *_rope_ns) sum the blocks' squares into s = 1 /
 * sqrt(mean(x^2) + eps) (eps in word 17, which nothing else reads here;
 * each team its own sum, no barrier) while their first weights load, and
 * take each block's scale as s times the unrounded one, rounded to F16, as
 * the norm apart rounds the scale of x s w. The normed row is never
 * written; the level goes. The quants and scales are the norm's apart but
 * where a float rounding of x s w against x w falls on a rounding boundary
 * of a quant or an F16 scale: a few blocks in a row. On the H200 this pays
 * for short rows only (Qwen2.5-0.5B's 896: 7% of a token's GPU time) and
 * costs for long ones (Llama-3-8B's 4096: the products with the norm's
 * work run 2.5-5 us longer each, more than its level): the backend fuses
 * rows of at most 2048 by default (vk_backend.c).
 *
 * Waiting instead of a barrier (flags 256, vk_backend.c vk_wait_edge): the
 * product may be dispatched beside the one kernel that makes its column
 * (rms_norm_mul, swiglu_q, attn_dec1), with no barrier between them. Its
 * workgroups request their first U steps of weights, then one invocation
 * polls the producer's signal word (binding 2, word pc.ob; pc.N the count
 * of producer workgroups to see), and the column's addresses are offset by
 * a zero read after the workgroup's barrier, so no column load is moved
 * above the wait. The weights stream while the producer runs.
 *
 * Split Q4_0 weights (KBF bit 17, the *_q4s twins; q4s.glsl): a weight the
 * backend keeps in groups of 64 blocks, quants before scales. A block's 16
 * quant bytes are then one aligned 16-byte load and its scale one 2-byte
 * load, where the file's 18-byte blocks take four or five 4-byte loads and
 * a 2-byte one: on the H100 the loads, not only the bytes, cost (0.23 ms of
 * a Llama-3-8B token's 3.03, bench/RESULTS.md run 166). LPB 1 only.
 *
 * Needs VK_KHR_shader_integer_dot_product (OpSDot, declared below through
 * GL_EXT_spirv_intrinsics: the GLSL compilers of Debian 12 predate
 * GL_EXT_integer_dot_product). The host uses the kernel only where the
 * device has the feature.
 */
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_spirv_intrinsics : require
#include "common.glsl"
#if defined(NORMQ) || defined(NS)
#include "q8.glsl"
#endif
#if defined(ROPE)
#include "conv.glsl"
#include "rope.glsl"
#endif

/* OpSDot (4450) on two 32-bit words read as 4 signed bytes (packed format 0) */
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(int a, int b, spirv_literal int packed_format);
#define DOT4(x, y) sdot4(int(x), int(y), 0)

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint S = 4u;
layout(constant_id = 2) const uint R = 2u;
layout(constant_id = 3) const uint LPB = 1u;
layout(constant_id = 4) const uint U = 4u;
layout(constant_id = 5) const uint KBF = 512u;
const uint KB = (KBF >> 16) != 0u ? 0u : KBF; /* KBF bit 16: no staging (KB 0) */
/* KBF bit 17: Q4_0 weights in the split layout (q4s.glsl), LPB 1: a
 * block's quants one 16-byte load, its scale one 2-byte load */
const bool Q4S = (KBF & 0x20000u) != 0u;

const uint W = gl_WorkGroupSize.x;
const uint T = W / S;

layout(push_constant) uniform P {
    uint M, N, K;
    uint sa1, sa2, sa3;       /* 16-bit words */
    uint sb0, sb1, sb2, sb3;
    uint sd1, sd2, sd3;
    uint r2, r3, B2;
    uint oa, ob, od;
    uint flags;               /* 64: add the residual (binding 1) to each result */
    uint oq, cq;              /* the quantized column (binding 2): first word, words per batch (multiples of 4) */
    uint ores;                /* the residual's first element; its strides are the result's */
#if defined(ROPE)
    float theta_hi, theta_lo, freq_scale, mscale; /* the rope's (rope.comp) */
    uint ko, ks, vo, vs;      /* in binding 5: K's row 0 and row stride, V's column 0 and channel stride */
#elif defined(NORMQ)
    uint oqo;                 /* in binding 5: the first word of the column this product's rows make */
    uint ow;                  /* in binding 6: the norm's weight's first element */
#endif
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;
#if defined(NS)
#define NS_EPS uintBitsToFloat(pc.ob) /* the norm's eps, in a word nothing else reads here */
#endif
#if defined(ROPE)
/* the rope's other parameters in words this kernel does not read otherwise
 * (one column: no column strides, no result row stride) */
#define R_DIMS pc.sb0 /* n_dims | hd << 16 */
#define R_OP pc.sb1   /* the position's element in binding 1 */
#define R_NQK pc.sb2  /* nq | nk << 16 */
#define R_LIM pc.sb3  /* the caches' positions */
#define R_NODE pc.sd1 /* the k store's node, for a position's error */
#define R_NEOX 128u   /* flags: NEOX pairs */
#endif

#if defined(A_Q8_0)
#define BW 17u  /* 16-bit words per block, the scale first */
#define QBB 32u /* quant bytes per block */
#elif defined(A_Q4_0)
#define BW 9u
#define QBB 16u
#else
#error "mul_mat_vecq.comp: define A_Q8_0 or A_Q4_0"
#endif
const uint QB = QBB / LPB; /* quant bytes per lane */
const uint QW = QB / 4u;   /* ... as words */

layout(binding = 0) readonly restrict buffer A1 { uint16_t a1[]; };
layout(binding = 0) readonly restrict buffer A2 { uint a2[]; };
#if defined(A_Q4_0)
#include "q4s.glsl"
layout(binding = 0) readonly restrict buffer A4 { uvec4 a4[]; };
#endif
layout(binding = 2) readonly restrict buffer Q1 { uint q1[]; };
layout(binding = 2) readonly restrict buffer Q4 { uvec4 q4[]; };
layout(binding = 2) readonly restrict buffer Q2 { uvec2 q2[]; };
layout(binding = 2) volatile coherent buffer QV { uint qv[]; };  /* the signal word */
layout(binding = 2) coherent readonly buffer QC1 { uint qc1[]; }; /* the column, read after a wait */
layout(binding = 2) coherent readonly buffer QC4 { uvec4 qc4[]; };
layout(binding = 1) readonly buffer RES { float res[]; };
layout(binding = 3) writeonly buffer D { float d[]; };
#if defined(ROPE)
layout(binding = 1) readonly buffer PS { int rpos[]; };
layout(binding = 5) writeonly buffer KVC { uint16_t kvc[]; };
layout(binding = 6) readonly buffer BIAS { float bias[]; };

/* The rows of rope unit u (a team's two rows): q, k (whole heads of hd rows)
 * or v; kind 0 a rotated pair (pair index i of its head), 1 two copied
 * rows; sec 0 q, 1 k, 2 v. */
void rope_rows(uint u, out uint ra, out uint rb, out uint kind, out uint i, out uint sec) {
    const uint nd = R_DIMS & 0xffffu, hd = R_DIMS >> 16, nq = R_NQK & 0xffffu, nk = R_NQK >> 16;
    const uint r0 = 2u * u;
    i = 0u;
    if (r0 >= nq + nk) {
        ra = r0;
        rb = r0 + 1u;
        kind = 1u;
        sec = 2u;
        return;
    }
    sec = r0 < nq ? 0u : 1u;
    const uint base = sec == 0u ? 0u : nq, rr = r0 - base, hb = base + (rr / hd) * hd, ju = (rr % hd) / 2u;
    if (ju < nd / 2u) {
        kind = 0u;
        i = ju;
        const bool neox = (pc.flags & R_NEOX) != 0u;
        ra = hb + (neox ? ju : 2u * ju);
        rb = ra + (neox ? nd / 2u : 1u);
    } else { /* past n_dims: rows 2 ju, 2 ju + 1 of the head in both modes */
        kind = 1u;
        ra = hb + 2u * ju;
        rb = ra + 1u;
    }
}

/* Rope unit u's two results, turned and stored where the three nodes the
 * kernel stands for put them */
void rope_store(uint u, float v0, float v1) {
    uint ra, rb, kind, i, sec;
    rope_rows(u, ra, rb, kind, i, sec);
    const int p = rpos[R_OP];
    /* qwen2's biases (flags 64), at binding 6, as store() adds them */
    float y0 = (pc.flags & 64u) != 0u ? bias[pc.ores + ra] + v0 : v0;
    float y1 = (pc.flags & 64u) != 0u ? bias[pc.ores + rb] + v1 : v1;
    if (kind == 0u) {
        const float th = rope_theta(i, p, pc.theta_hi, pc.theta_lo, pc.freq_scale, 0.0, 0.0, 0.0, false, 1.0);
        rope_rotate(y0, y1, th, pc.mscale, y0, y1);
    }
    if (sec == 0u) {
        d[pc.od + ra] = y0;
        d[pc.od + rb] = y1;
        return;
    }
    if (p < 0 || uint(p) >= R_LIM) {
        TSL_INDEX_ERROR(R_NODE, uint(p), 0u)
        return;
    }
    const uint nq = R_NQK & 0xffffu, nk = R_NQK >> 16;
    if (sec == 1u) {
        const uint o = pc.ko + uint(p) * pc.ks - nq;
        kvc[o + ra] = uint16_t(f32_to_f16_bits(floatBitsToUint(y0)));
        kvc[o + rb] = uint16_t(f32_to_f16_bits(floatBitsToUint(y1)));
    } else {
        const uint c = ra - nq - nk;
        kvc[pc.vo + c * pc.vs + uint(p)] = uint16_t(f32_to_f16_bits(floatBitsToUint(y0)));
        kvc[pc.vo + (c + 1u) * pc.vs + uint(p)] = uint16_t(f32_to_f16_bits(floatBitsToUint(y1)));
    }
}
#endif

#if defined(NORMQ)
layout(binding = 5) writeonly buffer XO { uint xo[]; };
layout(binding = 6) readonly buffer NW { float nw[]; };
shared float nq_x[32];
shared float nq_y[32];
shared int nq_q[32];
shared float nq_sc[2];
#endif

/* Result v of row m, batch (i2, i3), stored: plus the residual when the
 * backend fused add(residual, this product) into the kernel (flags 64). In
 * place over the residual is safe: one invocation reads and writes each
 * element. A NORMQ product keeps its workgroup's rows for their block. */
void store(uint m, uint i2, uint i3, float v) {
    const uint o = m + i2 * pc.sd2 + i3 * pc.sd3;
    const float r = (pc.flags & 64u) != 0u ? res[pc.ores + o] + v : v;
    d[pc.od + o] = r;
#if defined(NORMQ)
    nq_x[m % 32u] = r; /* the workgroup's 32 rows: one block */
#endif
}

/* Words of one quantized column of nb blocks (vk_mm_qcol_words): quants, then
 * scales and sums, rounded up to 16 bytes; the blocks' sums of squares of a
 * NORMQ product follow. */
uint qcol_words(uint nb) { return (nb * 10u + 3u) / 4u * 4u; }

#if defined(NORMQ)
/* The norm weight of the row the calling invocation will quantize in
 * normq_block, loaded when the kernel starts, not after its last barrier */
float normq_weight(uint wg) {
    const uint i = gl_SubgroupSize >= 32u ? gl_SubgroupInvocationID : gl_LocalInvocationID.x;
    const bool mine = gl_SubgroupSize >= 32u ? gl_SubgroupID == 0u && i < 32u : i < 32u;
    return mine ? nw[pc.ow + wg * 32u + i] : 0.0;
}

/* Block wg of the column this product's rows make: x * w quantized (with
 * the scale of x * w, q8.glsl's arithmetic, left unrounded) and the
 * block's sum of x^2. Reached by the whole workgroup (its barrier), after
 * every row is stored. With 32 lanes or more to a subgroup, the first
 * subgroup does it, a row a lane, in subgroup operations; otherwise
 * invocations 0..31 through shared memory. */
void normq_block(uint wg, float wv) {
    barrier();
    const uint t = gl_LocalInvocationID.x, nbo = pc.M / 32u;
    const uint sq = pc.oqo + qcol_words(nbo) + wg, sc = pc.oqo + 8u * nbo + 2u * wg;
    if (gl_SubgroupSize >= 32u) { /* uniform */
        if (gl_SubgroupID != 0u) return;
        const uint i = gl_SubgroupInvocationID;
        const bool on = i < 32u;
        const float x = on ? nq_x[i] : 0.0;
        float y = 0.0;
        if (on) {
            precise const float p = x * wv;
            y = p;
        }
        const float amax = subgroupMax(abs(y)), ss = subgroupAdd(x * x);
        float dq, id;
        q8_scale(amax, dq, id);
        const int q = on ? quant_of(y, id) : 0;
        const int total = subgroupAdd(q);
        if (on) nq_q[i] = q;
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        if (i < 8u) {
            uint word = 0u;
            for (uint j = 0u; j < 4u; j++) word |= (uint(nq_q[4u * i + j]) & 0xffu) << (8u * j);
            Q8_STORE_WORD(xo, pc.oqo, nbo, wg, i, word);
        }
        if (i == 0u) {
            xo[sq] = floatBitsToUint(ss);
            xo[sc] = floatBitsToUint(dq);
            xo[sc + 1u] = floatBitsToUint(float(total));
        }
        return;
    }
    float y = 0.0;
    if (t < 32u) {
        precise const float p = nq_x[t] * wv;
        y = p;
        nq_y[t] = y;
    }
    barrier();
    if (t == 0u) {
        float amax = 0.0, ss = 0.0;
        for (uint i = 0u; i < 32u; i++) {
            amax = max(amax, abs(nq_y[i]));
            ss += nq_x[i] * nq_x[i];
        }
        float dq, id;
        q8_scale(amax, dq, id);
        nq_sc[0] = dq;
        nq_sc[1] = id;
        xo[sq] = floatBitsToUint(ss);
        /* the scale unrounded: the reader rounds it to F16 once it is s
         * times as large, as the norm apart rounds the scale of x s w */
        xo[sc] = floatBitsToUint(dq);
    }
    barrier();
    if (t < 32u) nq_q[t] = quant_of(y, nq_sc[1]);
    barrier();
    if (t < 8u) {
        uint word = 0u;
        for (uint j = 0u; j < 4u; j++) word |= (uint(nq_q[4u * t + j]) & 0xffu) << (8u * j);
        Q8_STORE_WORD(xo, pc.oqo, nbo, wg, t, word);
        if (t == 0u) {
            int total = 0;
            for (uint i = 0u; i < 32u; i++) total += nq_q[i];
            xo[sc + 1u] = floatBitsToUint(float(total));
        }
    }
}
#endif

/* the quantized column: block b's activations 0..15 at qs[2b], qs[2b+1]
 * (8 bytes each), 16..31 at qs[2 (KB + b)], ...; its scale (F16-rounded)
 * and the sum of its quants in qd[b] */
const uint KBS = KB == 0u ? 1u : KB; /* KB 0: no staging, the column read where it is */
shared uvec2 qs[4u * KBS];
shared vec2 qd[KBS];
shared float red[W * R];

#if defined(NS)
float g_nsc = 1.0; /* the norm's scale s */
shared float nsred[W];

/* s = 1 / sqrt(mean(x^2) + eps) from the blocks' sums of squares after the
 * column, the same sum in the same order in every team: where a team is a
 * subgroup, its own lanes' loads and one subgroupAdd (no barrier; the
 * weights' first loads are in flight meanwhile); otherwise the workgroup's
 * through shared memory */
float norm_scale(uint nb, uint z, uint lane) {
    const uint base = pc.oq + z * pc.cq + qcol_words(nb);
    float s2 = 0.0;
    if (T == gl_SubgroupSize) { /* uniform */
        for (uint b = lane; b < nb; b += T) s2 += uintBitsToFloat(q1[base + b]);
        return inversesqrt(subgroupAdd(s2) / float(pc.K) + NS_EPS);
    }
    for (uint b = gl_LocalInvocationID.x; b < nb; b += W) s2 += uintBitsToFloat(q1[base + b]);
    s2 = subgroupAdd(s2);
    if (subgroupElect()) nsred[gl_SubgroupID] = s2;
    barrier();
    float t = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; g++) t += nsred[g];
    return inversesqrt(t / float(pc.K) + NS_EPS);
}
#endif

/* flags 256: the kernel was dispatched beside the producer of its column
 * with no barrier between (vk_backend.c, vk_wait_edge); it waits until the
 * producer's signal word (pc.ob) counts pc.N, then reads the column (the
 * staged copy coherently). Bounded: a producer that never signals fails
 * the compute instead of hanging it. */
#define MV_WAIT 256u
#define MV_WAIT_POLLS (1u << 21) /* ~1-2 s of polling on the H200 */
shared uint wait_zero;
/* Returns 0 once the producer is done, read from shared memory after the
 * workgroup's barrier: the column's address is offset by it, so no load of
 * the column can be moved above the wait. A wait past its bound claims the
 * status words (code 2: the node, the count seen, the count wanted) and
 * returns 0 too; the host fails the compute and turns the waits off. */
uint wait_producer() {
    if (gl_LocalInvocationIndex == 0u) {
        const uint at = pc.ob; /* the signal word */
        uint seen = 0u;
        bool ok = false;
        for (uint i = 0u; i < MV_WAIT_POLLS && !ok; i++) {
            seen = qv[at];
            ok = seen >= pc.N;
        }
        if (!ok && atomicCompSwap(tsl_status_words[0], 0u, 2u) == 0u) {
            tsl_status_words[1] = pc.tsl_node - 1u;
            tsl_status_words[2] = seen;
            tsl_status_words[3] = pc.N;
        }
        wait_zero = 0u;
    }
    barrier();
    memoryBarrierBuffer();
    return wait_zero;
}

/* The quantized column into shared memory: 16-byte copies */
void stage_column(uint nb, uint z, uint z0) {
    const uint base = (pc.oq >> 2) + z * (pc.cq >> 2) + z0; /* uvec4 units */
    const bool coh = (pc.flags & MV_WAIT) != 0u;
    for (uint u = gl_LocalInvocationID.x; u < 2u * nb; u += W) {
        const uvec4 v = coh ? qc4[base + u] : q4[base + u];
        const uint half_ = u / nb, b = u % nb;
        qs[2u * (half_ * KB + b)] = v.xy;
        qs[2u * (half_ * KB + b) + 1u] = v.zw;
    }
    for (uint b = gl_LocalInvocationID.x; b < nb; b += W) {
        const uint o = pc.oq + z * pc.cq + 8u * nb + 2u * b + z0;
        qd[b] = uintBitsToFloat(coh ? uvec2(qc1[o], qc1[o + 1u]) : uvec2(q1[o], q1[o + 1u]));
    }
}

/* 8 bytes s (0, 1) of half h (activations 0..15, 16..31) of block b of
 * the quantized column, and the block's scale and quant sum: from shared
 * memory, or (KB 0) from the column itself, whose base cb2 is in 8-byte
 * units */
uvec2 act(uint cb2, uint nb, uint h, uint b, uint s) {
    return KB == 0u ? q2[cb2 + 2u * (h * nb + b) + s] : qs[2u * (h * KBS + b) + s];
}
vec2 act_scale(uint cb2, uint nb, uint b) {
    const vec2 v = KB == 0u ? uintBitsToFloat(q2[cb2 + 4u * nb + b]) : qd[b];
#if defined(NS)
    /* a norm's column: its scale s times as large, rounded to F16 on its
     * bits, as the norm apart rounds it (packHalf2x16 would take four
     * registers fewer here, but its rounding is the device's: on the H200
     * the logits then moved by 1%, bench/RESULTS.md run 113) */
    return vec2(f16_round(v.x * g_nsc), v.y);
#else
    return v;
#endif
}

/* Word i of the quants a lane reads, from the 32-bit words w it loaded: the
 * middle of two when its bytes start on an odd 16-bit word */
#define QUANT_WORD(w, i, odd) ((odd) ? ((w)[i] >> 16) | ((w)[(i) + 1u] << 16) : (w)[i])

/* Block blk (clamped to the row) of row r into the lane's quant words wv
 * (QW, and one more where they straddle an odd 16-bit word) and its scale
 * sv: from the file's 18-byte blocks, or (Q4S) one 16-byte load of the
 * group's quants and the scale from the group's tail (rg: the row's first
 * block) */
#define LOAD_FILE(wv, sv, r, blk)                                                \
    {                                                                            \
        const uint h_ = arow[r] + min(blk, nb - 1u) * BW, hq_ = h_ + qoff;       \
        [[unroll]] for (uint i_ = 0u; i_ < QW; i_++) wv[i_] = a2[(hq_ >> 1) + i_]; \
        wv[QW] = (hq_ & 1u) != 0u ? a2[(hq_ >> 1) + QW] : 0u;                    \
        sv = uint(a1[h_]);                                                       \
    }
#if defined(A_Q4_0)
#define LOAD_BLOCK(wv, sv, r, blk)                                               \
    if (Q4S) {                                                                   \
        const uint g_ = rg[r] + min(blk, nb - 1u);                               \
        const uvec4 v_ = a4[q4s_quant16(g_) >> 3];                               \
        [[unroll]] for (uint i_ = 0u; i_ < QW; i_++) wv[i_] = v_[i_];            \
        wv[QW] = 0u;                                                             \
        sv = uint(a1[q4s_scale16(g_)]);                                          \
    } else LOAD_FILE(wv, sv, r, blk)
#else
#define LOAD_BLOCK(wv, sv, r, blk) LOAD_FILE(wv, sv, r, blk)
#endif

void main() {
    TSL_PROGRESS();
    const uint wg = wg_linear();
    const uint nb = pc.K / 32u;
    /* a padding group of the folded grid: uniform, and before any barrier */
    if (wg * S * R >= pc.M) return;

    uint team, lane;
    if (T == gl_SubgroupSize) {
        team = gl_SubgroupID;
        lane = gl_SubgroupInvocationID;
    } else if (T > gl_SubgroupSize && T % gl_SubgroupSize == 0u) {
        const uint per = T / gl_SubgroupSize;
        team = gl_SubgroupID / per;
        lane = (gl_SubgroupID % per) * gl_SubgroupSize + gl_SubgroupInvocationID;
    } else {
        team = gl_LocalInvocationID.x / T;
        lane = gl_LocalInvocationID.x % T;
    }

    const uint row0 = (wg * S + team) * R;
#if defined(NORMQ)
    const float nq_wv = normq_weight(wg);
#endif
    const uint i2 = gl_WorkGroupID.z % pc.B2, i3 = gl_WorkGroupID.z / pc.B2;
    const uint abase = pc.oa + (i2 / pc.r2) * pc.sa2 + (i3 / pc.r3) * pc.sa3;

    uint arow[R];
#if defined(ROPE)
    /* R is 2 (the host uses the kernel only so): the team's rope pair */
    const uint unit = wg * S + team;
    {
        uint ra, rb, kind, i, sec;
        rope_rows(min(unit, pc.M / 2u - 1u), ra, rb, kind, i, sec);
        arow[0] = abase + ra * pc.sa1;
        arow[R - 1u] = abase + rb * pc.sa1;
    }
#else
    [[unroll]] for (uint r = 0u; r < R; r++) arow[r] = abase + min(row0 + r, pc.M - 1u) * pc.sa1;
#endif

    uint rg[R]; /* (Q4S) each row's first block */
    [[unroll]] for (uint r = 0u; r < R; r++) rg[r] = Q4S ? arow[r] / 9u : 0u;

    /* lane: bytes lp * QB .. of block lb of each step; a step is bps blocks */
    const uint bps = T / LPB, lb = lane / LPB, lp = lane % LPB;
    const uint qoff = 1u + lp * (QB / 2u); /* 16-bit words from the block's start */
    const uint nsteps = (nb + bps - 1u) / bps;

    /* the weights of the first U steps are requested before the column is
     * quantized, so the stream starts while phase 1 runs */
    uint w[U][R][QW + 1u];
    uint sc[U][R];
    [[unroll]] for (uint j = 0u; j < U; j++) {
        const uint blk = j * bps + lb;
        [[unroll]] for (uint r = 0u; r < R; r++) LOAD_BLOCK(w[j][r], sc[j][r], r, blk);
    }

    const uint z0 = (pc.flags & MV_WAIT) != 0u ? wait_producer() : 0u; /* uniform */
    const uint cb2 = ((pc.oq + gl_WorkGroupID.z * pc.cq) >> 1) + z0;
    if (KB != 0u) {
        stage_column(nb, gl_WorkGroupID.z, z0);
        barrier();
    }
#if defined(NS)
    g_nsc = norm_scale(nb, gl_WorkGroupID.z, lane);
#endif

    float acc[R];
    [[unroll]] for (uint r = 0u; r < R; r++) acc[r] = 0.0;

    for (uint s = 0u; s < nsteps; s += U) {
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint blk = (s + j) * bps + lb;
            if (blk < nb) {
                /* this lane's activation quants: Q8_0 bytes lp*QB.. of the
                 * block; Q4_0 the low (elements lp*QB..) and high (+16) ones */
#if defined(A_Q8_0)
                const uint half_ = (lp * QB) / 16u, o8 = ((lp * QB) % 16u) / 8u;
                uvec2 xa[(QW + 1u) / 2u];
                [[unroll]] for (uint i = 0u; i < (QW + 1u) / 2u; i++) xa[i] = act(cb2, nb, half_, blk, o8 + i);
#else
                const uint o8 = (lp * QB) / 8u;
                uvec2 xl[(QW + 1u) / 2u], xh[(QW + 1u) / 2u];
                [[unroll]] for (uint i = 0u; i < (QW + 1u) / 2u; i++) {
                    xl[i] = act(cb2, nb, 0u, blk, o8 + i);
                    xh[i] = act(cb2, nb, 1u, blk, o8 + i);
                }
#endif
                const vec2 qb = act_scale(cb2, nb, blk);
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    const bool odd = !Q4S && ((arow[r] + blk * BW + qoff) & 1u) != 0u;
                    int isum = 0;
                    [[unroll]] for (uint i = 0u; i < QW; i++) {
                        const uint q = QUANT_WORD(w[j][r], i, odd);
#if defined(A_Q8_0)
                        isum += DOT4(q, (i & 1u) != 0u ? xa[i >> 1].y : xa[i >> 1].x);
#else
                        const uint lo = (i & 1u) != 0u ? xl[i >> 1].y : xl[i >> 1].x;
                        const uint hi = (i & 1u) != 0u ? xh[i >> 1].y : xh[i >> 1].x;
                        isum += DOT4(q & 0x0f0f0f0fu, lo) + DOT4((q >> 4) & 0x0f0f0f0fu, hi);
#endif
                    }
#if defined(A_Q4_0)
                    /* the offset 8, once per block */
                    float f = float(isum);
                    if (lp == 0u) f -= 8.0 * qb.y;
#else
                    const float f = float(isum);
#endif
                    acc[r] += f * (unpackHalf2x16(sc[j][r]).x * qb.x);
                }
            }
        }
        /* the next U steps */
        if (s + U < nsteps) {
            [[unroll]] for (uint j = 0u; j < U; j++) {
                const uint blk = (s + U + j) * bps + lb;
                [[unroll]] for (uint r = 0u; r < R; r++) LOAD_BLOCK(w[j][r], sc[j][r], r, blk);
            }
        }
    }

    /* the team's sums */
    if (T == gl_SubgroupSize) {
#if defined(ROPE)
        const float v0 = subgroupAdd(acc[0]), v1 = subgroupAdd(acc[R - 1u]);
        if (lane == 0u && 2u * unit < pc.M) rope_store(unit, v0, v1);
#else
        [[unroll]] for (uint r = 0u; r < R; r++) {
            const float v = subgroupAdd(acc[r]);
            if (lane == r && row0 + r < pc.M) store(row0 + r, i2, i3, v);
        }
#endif
#if defined(NORMQ)
        normq_block(wg, nq_wv); /* uniform: T and the subgroup size are */
#endif
        return;
    }
    uint parts;
    if (T > gl_SubgroupSize && T % gl_SubgroupSize == 0u) {
        parts = T / gl_SubgroupSize;
        const uint part = lane / gl_SubgroupSize;
        [[unroll]] for (uint r = 0u; r < R; r++) {
            const float v = subgroupAdd(acc[r]);
            if (subgroupElect()) red[(team * R + r) * parts + part] = v;
        }
    } else {
        parts = T;
        [[unroll]] for (uint r = 0u; r < R; r++) red[(team * R + r) * parts + lane] = acc[r];
    }
    barrier();
#if defined(ROPE)
    if (lane == 0u && 2u * unit < pc.M) {
        float v0 = 0.0, v1 = 0.0;
        for (uint i = 0u; i < parts; i++) {
            v0 += red[(team * R) * parts + i];
            v1 += red[(team * R + R - 1u) * parts + i];
        }
        rope_store(unit, v0, v1);
    }
#else
    if (lane < R) {
        float v = 0.0;
        for (uint i = 0u; i < parts; i++) v += red[(team * R + lane) * parts + i];
        if (row0 + lane < pc.M) store(row0 + lane, i2, i3, v);
    }
#endif
#if defined(NORMQ)
    normq_block(wg, nq_wv);
#endif
}
