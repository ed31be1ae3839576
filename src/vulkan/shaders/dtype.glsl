/*
 * dtype.glsl - binding 0 as a table of one weight type, read as floats:
 * A_F32, A_F16, A_Q8_0 or A_Q4_0 (exactly one defined).
 *
 * Block formats are bit-exact GGUF: Q8_0 is an f16 scale and 32 int8 (34
 * bytes), Q4_0 an f16 scale and 16 bytes of nibbles (18 bytes; element j < 16
 * is the low nibble of byte j, j >= 16 the high nibble of byte j - 16, value
 * nibble - 8). Both sizes are even but not multiples of 4, so blocks are read
 * as 16-bit words (VK_KHR_16bit_storage): a row is a run of A_BLOCK_WORDS-word
 * blocks, and row strides for block types are in words. Plain types use
 * element strides.
 *
 *   a_block_scale(w)        scale of the block starting at word w
 *   a_block_q(w, j)         quantized value j (0..31) of that block, as float
 *   a_elem(base, k)         element k of the row starting at base (words for
 *                           blocks, elements otherwise)
 *   a_at(i)                 element i of the binding (plain types only), for
 *                           kernels that stride along a row
 *
 * Q4_0 weights may be in the split layout (q4s.glsl): the kernel sets a_q4s.
 */
#extension GL_EXT_shader_16bit_storage : require

#if defined(A_F32)
layout(binding = 0) readonly buffer A { float a[]; };
#define A_BLOCK 1u
float a_elem(uint base, uint k) { return a[base + k]; }
#elif defined(A_F16)
layout(binding = 0) readonly buffer A { float16_t a[]; };
#define A_BLOCK 1u
float a_elem(uint base, uint k) { return float(a[base + k]); }
#elif defined(A_BF16)
/* bfloat16 is the high half of an f32: a shift, exact */
layout(binding = 0) readonly buffer A { uint16_t a[]; };
#define A_BLOCK 1u
float a_elem(uint base, uint k) { return uintBitsToFloat(uint(a[base + k]) << 16); }
#elif defined(A_Q8_0) || defined(A_Q4_0)
layout(binding = 0) readonly buffer A { uint16_t a[]; };
#define A_BLOCK 32u
#define A_QUANT 1
#if defined(A_Q8_0)
#define A_BLOCK_WORDS 17u
#else
#define A_BLOCK_WORDS 9u
#endif
#if defined(A_Q4_0)
#include "q4s.glsl"
/* the weights are in the split layout (q4s.glsl): the including kernel
 * sets this from its push constants before reading them */
bool a_q4s = false;
uint a_scale_word(uint w) { return q4s_scale_at(a_q4s, w); }
uint a_quant_word(uint w, uint i) { return q4s_quant_at(a_q4s, w) + i; }
#else
uint a_scale_word(uint w) { return w; }
uint a_quant_word(uint w, uint i) { return w + 1u + i; }
#endif
float a_block_scale(uint w) { return unpackHalf2x16(uint(a[a_scale_word(w)])).x; }
/* byte i of the block's quants */
uint a_qbyte(uint w, uint i) {
    uint word = uint(a[a_quant_word(w, i >> 1)]);
    return (i & 1u) != 0u ? (word >> 8) : (word & 0xffu);
}
float a_block_q(uint w, uint j) {
#if defined(A_Q8_0)
    return float(bitfieldExtract(int(a_qbyte(w, j)), 0, 8));
#else
    uint byte = a_qbyte(w, j & 15u);
    return float(int(j < 16u ? (byte & 0xfu) : (byte >> 4)) - 8);
#endif
}
float a_elem(uint base, uint k) {
    uint w = base + (k / 32u) * A_BLOCK_WORDS;
    return a_block_scale(w) * a_block_q(w, k % 32u);
}
#else
#error "dtype.glsl: define one of A_F32, A_F16, A_BF16, A_Q8_0, A_Q4_0"
#endif
#if !defined(A_QUANT)
float a_at(uint i) { return a_elem(0u, i); }
#endif
