/*
 * cpy_src.glsl - binding 0 as the source of a converting copy, of type
 * SRC_F32, SRC_F16, SRC_BF16, SRC_Q8_0 or SRC_Q4_0, read as f32 bits
 * (conv.glsl): plain types through their element strides, block types
 * through 16-bit-word strides (rows of whole blocks, dense); Q4_0 weights
 * in the split layout (q4s.glsl) where the flags word has 16.
 *
 *   src_at(a0, a1, a2, a3)   the element at those coordinates, as f32 bits
 *   src_block8(w, j0, v)     (block types) eight elements of one block
 *
 * A block element is decoded as tsl_dequantize decodes it: the block's f16
 * scale (converted exactly) times the quant, one float product. The
 * including shader declares the push constants with the source's strides
 * (sa0..sa3) and offset (oa).
 */
#if defined(SRC_F32)
layout(binding = 0) readonly buffer A { uint a[]; };
#elif defined(SRC_F16) || defined(SRC_BF16) || defined(SRC_Q8_0) || defined(SRC_Q4_0)
layout(binding = 0) readonly buffer A { uint16_t a[]; };
#else
#error "cpy_src.glsl: no SRC_ type"
#endif

#if defined(SRC_Q4_0)
#include "q4s.glsl"
#endif
#if defined(SRC_Q8_0) || defined(SRC_Q4_0)
#define SRC_BLOCK 1
uint src_at(uint a0, uint a1, uint a2, uint a3) {
    const uint w = pc.oa + (a0 >> 5) * pc.sa0 + a1 * pc.sa1 + a2 * pc.sa2 + a3 * pc.sa3;
    const uint j = a0 & 31u;
#if defined(SRC_Q8_0)
    const float s = uintBitsToFloat(f16_to_f32_bits(uint(a[w])));
    const uint word = uint(a[w + 1u + (j >> 1)]);
    const float q = float(bitfieldExtract(int((j & 1u) != 0u ? (word >> 8) : word), 0, 8));
#else
    /* flags 16: the split layout (q4s.glsl) */
    const bool split = (pc.flags & 16u) != 0u;
    const float s = uintBitsToFloat(f16_to_f32_bits(uint(a[q4s_scale_at(split, w)])));
    const uint word = uint(a[q4s_quant_at(split, w) + ((j & 15u) >> 1)]);
    const uint byte = (j & 1u) != 0u ? (word >> 8) & 0xffu : word & 0xffu;
    const float q = float(int(j < 16u ? (byte & 0xfu) : (byte >> 4)) - 8);
#endif
    precise float v = q * s;
    return floatBitsToUint(v);
}

/* Elements j0 .. j0 + 7 (j0 a multiple of 8) of the block at word w, as
 * src_at gives them (the same product, the same bits): a run of eight
 * shares the block's scale and four neighbouring quant words. */
void src_block8(uint w, uint j0, out uint v[8]) {
#if defined(SRC_Q8_0)
    const float s = uintBitsToFloat(f16_to_f32_bits(uint(a[w])));
    const uint q0 = w + 1u + (j0 >> 1);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        const int word = int(a[q0 + i]);
        precise float lo = float(bitfieldExtract(word, 0, 8)) * s;
        precise float hi = float(bitfieldExtract(word, 8, 8)) * s;
        v[2u * i] = floatBitsToUint(lo);
        v[2u * i + 1u] = floatBitsToUint(hi);
    }
#else
    const bool split = (pc.flags & 16u) != 0u;
    const float s = uintBitsToFloat(f16_to_f32_bits(uint(a[q4s_scale_at(split, w)])));
    const uint q0 = q4s_quant_at(split, w) + ((j0 & 15u) >> 1);
    const uint sh = j0 < 16u ? 0u : 4u; /* elements 16.. are the high nibbles */
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        const uint word = uint(a[q0 + i]);
        precise float lo = float(int((word >> sh) & 0xfu) - 8) * s;
        precise float hi = float(int((word >> (8u + sh)) & 0xfu) - 8) * s;
        v[2u * i] = floatBitsToUint(lo);
        v[2u * i + 1u] = floatBitsToUint(hi);
    }
#endif
}
#else
/* stored 16-bit source bits as f32 bits */
uint src_raw16(uint h) {
#if defined(SRC_F16)
    return f16_to_f32_bits(h);
#else
    return bf16_to_f32_bits(h);
#endif
}
/* the stored bits of element i of the binding, as f32 bits */
uint src_raw(uint i) {
#if defined(SRC_F32)
    return a[i];
#else
    return src_raw16(uint(a[i]));
#endif
}
uint src_at(uint a0, uint a1, uint a2, uint a3) {
    return src_raw(pc.oa + a0 * pc.sa0 + a1 * pc.sa1 + a2 * pc.sa2 + a3 * pc.sa3);
}
#endif
