/*
 * unit.glsl - bindings 0, 1 and 3 as arrays of opaque units moved without
 * being looked at: UNIT_WORDS 16-bit words per unit (1: f16, bf16, i16;
 * 2: f32, i32; 4: i64, f64; 17: a Q8_0 block; 9: a Q4_0 block), or
 * UNIT_BYTES for one-byte elements (i8, which needs 8-bit storage).
 * Strides and offsets are in the binding's elements: words, or bytes.
 *
 *   UNIT_COPY(dst_index, SRC, src_index)   copy one unit from binding SRC
 *                                          (A or B) into the destination
 */
#if defined(UNIT_BYTES)
#extension GL_EXT_shader_8bit_storage : require
layout(binding = 0) readonly buffer A_ { uint8_t A[]; };
layout(binding = 1) readonly buffer B_ { uint8_t B[]; };
layout(binding = 3) writeonly buffer D_ { uint8_t D[]; };
#define UNIT_COPY(di, SRC, si) D[di] = SRC[si]
#elif defined(UNIT_WORDS)
#extension GL_EXT_shader_16bit_storage : require
layout(binding = 0) readonly buffer A_ { uint16_t A[]; };
layout(binding = 1) readonly buffer B_ { uint16_t B[]; };
layout(binding = 3) writeonly buffer D_ { uint16_t D[]; };
#define UNIT_COPY(di, SRC, si)                                            \
    [[unroll]] for (uint w_ = 0u; w_ < UNIT_WORDS; w_++) D[(di) + w_] = SRC[(si) + w_]
#else
#error "unit.glsl: define UNIT_WORDS or UNIT_BYTES"
#endif
