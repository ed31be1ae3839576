/*
 * q4s.glsl - Q4_0 weights in the split layout (backend_impl.h,
 * backend_q4s): blocks in groups of 64 (CORE_Q4S_BLOCKS, core.h), 1152
 * bytes a group, the 64 blocks' 16 quant bytes first (a block's at 16 b),
 * then their 64 F16 scales (at 1024 + 2 b). The host binds such a tensor
 * on a group's first byte, so a kernel keeps the file layout's arithmetic
 * (a block is 9 16-bit words, w its first, counted from the binding's
 * start) and moves only its loads:
 *
 *   q4s_block(w)      the block's index from the binding's start
 *   q4s_scale16(g)    16-bit word of block g's scale
 *   q4s_quant16(g)    16-bit word of its first quant byte (a multiple of 8:
 *                     16-byte aligned, so q4s_quant16(g) / 8 indexes uvec4s)
 *   q4s_scale_at(split, w), q4s_quant_at(split, w)
 *                     the same from the block's file-layout word w, or the
 *                     file layout's own words (w, w + 1) where not split
 */
uint q4s_block(uint w) { return w / 9u; }
uint q4s_scale16(uint g) { return (g >> 6) * 576u + 512u + (g & 63u); }
uint q4s_quant16(uint g) { return (g >> 6) * 576u + (g & 63u) * 8u; }
uint q4s_scale_at(bool split, uint w) { return split ? q4s_scale16(q4s_block(w)) : w; }
uint q4s_quant_at(bool split, uint w) { return split ? q4s_quant16(q4s_block(w)) : w + 1u; }
