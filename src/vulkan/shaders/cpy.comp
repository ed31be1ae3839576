#version 450
/*
 * cpy.comp - dup / cont / cpy into a plain float type: a source of type
 * SRC_F32, SRC_F16, SRC_BF16, SRC_Q8_0 or SRC_Q4_0 (cpy_src.glsl) into a
 * destination of type DST_F32, DST_F16 or DST_BF16, any strides on both
 * sides. Elements are matched in flat row-major order, so the shapes may
 * differ when the counts agree (dup, cont, and cpy into a strided view such
 * as a KV-cache slot). One invocation per destination element.
 *
 * Values travel as f32 bits and are rounded with conv.glsl, so a copy gives
 * the bytes the CPU gives (tsl_fp32_to_fp16 / tsl_fp32_to_bf16 of the float
 * the source holds). A copy to the same type moves the stored bits.
 *
 * Flags: bit 0 the source is contiguous, bit 1 the destination is: that
 * side's element then follows from the flat index without the division
 * chain of the general case. Bit 2 (both contiguous, an even count, the
 * 16-bit sides starting on a 32-bit word; not for block sources): each
 * invocation moves two elements, a 16-bit side as one 32-bit word (2-byte
 * accesses ran at a quarter of the copy rate on an H200). Bit 3 (both
 * contiguous, a count that is a multiple of 4, each side starting on a
 * 4-element boundary; not for block sources): each invocation moves four
 * elements, an F32 side as one 16-byte access and a 16-bit side as one
 * 8-byte access, which is what it takes to stream at the memory's rate.
 * Bit 5 (block sources: both contiguous, the destination's runs of eight
 * on 16 bytes): each invocation decodes eight elements of a block and
 * stores them as one 16-byte access (two for F32), instead of an
 * invocation and a 2-byte store an element; a product's weights copied to
 * F16 before the matrix units take them (vk_mm_wconv) are this copy.
 */
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "conv.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform P {
    uint na0, na1, na2, na3; /* source shape */
    uint sa0, sa1, sa2, sa3; /* source strides: elements, or 16-bit words for blocks */
    uint nd0, nd1, nd2, nd3; /* destination shape */
    uint sd0, sd1, sd2, sd3;
    uint oa, od;
    uint flags;
    layout(offset = 124) uint tsl_node; /* the progress word's node + 1 (common.glsl) */
} pc;

#include "cpy_src.glsl"

#if defined(DST_F32)
layout(binding = 3) writeonly buffer D { uint d[]; };
#elif defined(DST_F16) || defined(DST_BF16)
layout(binding = 3) writeonly buffer D { uint16_t d[]; };
layout(binding = 3) writeonly buffer D2 { uint d2[]; }; /* the same, two elements a word */
#else
#error "cpy.comp: no DST_ type"
#endif
#if defined(SRC_F16) || defined(SRC_BF16)
layout(binding = 0) readonly buffer A2 { uint a2[]; }; /* the source, two elements a word */
#endif

#if (defined(SRC_F16) && defined(DST_F16)) || (defined(SRC_BF16) && defined(DST_BF16))
#define SAME_16 1 /* the stored bits move unchanged */
#endif

#if !defined(SRC_BLOCK)
/* the same bindings again, four elements an entry (bit 3) */
#if defined(SRC_F32)
layout(binding = 0) readonly buffer A4 { uvec4 a4[]; };
#else
layout(binding = 0) readonly buffer A4 { uvec2 a4[]; };
#endif
#if defined(DST_F32)
layout(binding = 3) writeonly buffer D4 { uvec4 d4[]; };
#else
layout(binding = 3) writeonly buffer D4 { uvec2 d4[]; };
#endif
#endif

#if !defined(SRC_BLOCK)
/* the stored bits of a destination element from f32 bits */
uint dst_bits(uint v) {
#if defined(DST_F32)
    return v;
#elif defined(DST_F16)
    return f32_to_f16_bits(v);
#else
    return f32_to_bf16_bits(v);
#endif
}

/* Bit 2: elements 2p and 2p + 1 of two contiguous tensors. */
void copy_pair(uint p) {
#if defined(SRC_F32)
    uint v0 = a[pc.oa + 2u * p], v1 = a[pc.oa + 2u * p + 1u];
#else
    const uint w = a2[(pc.oa >> 1) + p];
    uint v0 = w & 0xffffu, v1 = w >> 16;
#if !defined(SAME_16)
    v0 = src_raw16(v0);
    v1 = src_raw16(v1);
#endif
#endif
#if defined(DST_F32)
    d[pc.od + 2u * p] = v0;
    d[pc.od + 2u * p + 1u] = v1;
#elif defined(SAME_16)
    d2[(pc.od >> 1) + p] = v0 | (v1 << 16);
#else
    d2[(pc.od >> 1) + p] = dst_bits(v0) | (dst_bits(v1) << 16);
#endif
}
#endif

#if !defined(SRC_BLOCK)
/* Bit 3: elements 4q .. 4q + 3 of two contiguous tensors. */
void copy_quad(uint q) {
#if defined(SRC_F32)
    uvec4 v = a4[(pc.oa >> 2) + q];
#else
    const uvec2 w = a4[(pc.oa >> 2) + q];
    uvec4 v = uvec4(w.x & 0xffffu, w.x >> 16, w.y & 0xffffu, w.y >> 16);
#if !defined(SAME_16)
    v = uvec4(src_raw16(v.x), src_raw16(v.y), src_raw16(v.z), src_raw16(v.w));
#endif
#endif
#if defined(DST_F32)
    d4[(pc.od >> 2) + q] = v;
#elif defined(SAME_16)
    d4[(pc.od >> 2) + q] = uvec2(v.x | (v.y << 16), v.z | (v.w << 16));
#else
    d4[(pc.od >> 2) + q] = uvec2(dst_bits(v.x) | (dst_bits(v.y) << 16), dst_bits(v.z) | (dst_bits(v.w) << 16));
#endif
}
#endif

#if defined(SRC_BLOCK)
layout(binding = 3) writeonly buffer D8 { uvec4 d8[]; };

/* Bit 5: elements 8 i .. 8 i + 7 of two contiguous tensors, a quarter of
 * source block i / 4 (whose first word is at oa + (i / 4) sa0) */
void copy_eight(uint i) {
    uint v[8];
    src_block8(pc.oa + (i >> 2) * pc.sa0, (i & 3u) * 8u, v);
#if defined(DST_F32)
    d8[(pc.od >> 2) + 2u * i] = uvec4(v[0], v[1], v[2], v[3]);
    d8[(pc.od >> 2) + 2u * i + 1u] = uvec4(v[4], v[5], v[6], v[7]);
#else
    uint h[8];
    [[unroll]] for (uint k = 0u; k < 8u; k++)
#if defined(DST_F16)
        h[k] = f32_to_f16_bits(v[k]);
#else
        h[k] = f32_to_bf16_bits(v[k]);
#endif
    d8[(pc.od >> 3) + i] = uvec4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
#endif
}
#endif

void main() {
    TSL_PROGRESS();
#if defined(SRC_BLOCK)
    if ((pc.flags & 32u) != 0u) {
        const uint i = wg_linear() * 256u + gl_LocalInvocationID.x;
        if (8u * i < pc.nd0 * pc.nd1 * pc.nd2 * pc.nd3) copy_eight(i);
        return;
    }
#else
    if ((pc.flags & 8u) != 0u) {
        const uint q = wg_linear() * 256u + gl_LocalInvocationID.x;
        if (4u * q < pc.nd0 * pc.nd1 * pc.nd2 * pc.nd3) copy_quad(q);
        return;
    }
    if ((pc.flags & 4u) != 0u) {
        const uint p = wg_linear() * 256u + gl_LocalInvocationID.x;
        if (2u * p < pc.nd0 * pc.nd1 * pc.nd2 * pc.nd3) copy_pair(p);
        return;
    }
#endif
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= pc.nd0 * pc.nd1 * pc.nd2 * pc.nd3) return;
    uint di;
    if ((pc.flags & 2u) != 0u) {
        di = pc.od + e;
    } else {
        uint r = e;
        const uint d0 = r % pc.nd0; r /= pc.nd0;
        const uint d1 = r % pc.nd1; r /= pc.nd1;
        const uint d2 = r % pc.nd2, d3 = r / pc.nd2;
        di = pc.od + d0 * pc.sd0 + d1 * pc.sd1 + d2 * pc.sd2 + d3 * pc.sd3;
    }
#if defined(SAME_16)
    uint si;
    if ((pc.flags & 1u) != 0u) {
        si = pc.oa + e;
    } else {
        uint r = e;
        const uint a0 = r % pc.na0; r /= pc.na0;
        const uint a1 = r % pc.na1; r /= pc.na1;
        const uint a2 = r % pc.na2, a3 = r / pc.na2;
        si = pc.oa + a0 * pc.sa0 + a1 * pc.sa1 + a2 * pc.sa2 + a3 * pc.sa3;
    }
    d[di] = a[si];
#else
    uint v;
#if !defined(SRC_BLOCK)
    if ((pc.flags & 1u) != 0u) {
        v = src_raw(pc.oa + e);
    } else
#endif
    {
        uint r = e;
        const uint a0 = r % pc.na0; r /= pc.na0;
        const uint a1 = r % pc.na1; r /= pc.na1;
        const uint a2 = r % pc.na2, a3 = r / pc.na2;
        v = src_at(a0, a1, a2, a3);
    }
#if defined(DST_F32)
    d[di] = v;
#elif defined(DST_F16)
    d[di] = uint16_t(f32_to_f16_bits(v));
#else
    d[di] = uint16_t(f32_to_bf16_bits(v));
#endif
#endif
}
