/*
 * types.c - the type table: names, block lengths and sizes of every tensor
 * type, and scalar fp16/bf16 conversions.
 *
 * Type ids are GGUF's, so a tensor in a file maps to a type with no table in
 * between. Conversions round to nearest even, as numpy and ggml do, so values
 * we write are the values the reference tools write.
 */
#include <math.h>
#include <strings.h>

#include "core/core.h"

typedef struct {
    const char *name;
    int64_t block_len;
    size_t block_size;
    bool quantized;
} type_info;

static const type_info TYPES[TSL_TYPE_COUNT] = {
    [TSL_TYPE_F32] = {"f32", 1, 4, false},
    [TSL_TYPE_F16] = {"f16", 1, 2, false},
    [TSL_TYPE_Q4_0] = {"q4_0", TSL_QK4_0, sizeof(tsl_block_q4_0), true},
    [TSL_TYPE_Q8_0] = {"q8_0", TSL_QK8_0, sizeof(tsl_block_q8_0), true},
    [TSL_TYPE_I8] = {"i8", 1, 1, false},
    [TSL_TYPE_I16] = {"i16", 1, 2, false},
    [TSL_TYPE_I32] = {"i32", 1, 4, false},
    [TSL_TYPE_I64] = {"i64", 1, 8, false},
    [TSL_TYPE_F64] = {"f64", 1, 8, false},
    [TSL_TYPE_BF16] = {"bf16", 1, 2, false},
};

_Static_assert(sizeof(tsl_block_q8_0) == 34, "Q8_0 block must be 34 bytes (GGUF layout)");
_Static_assert(sizeof(tsl_block_q4_0) == 18, "Q4_0 block must be 18 bytes (GGUF layout)");

bool tsl_type_valid(int type) { return type >= 0 && type < TSL_TYPE_COUNT && TYPES[type].name != NULL; }

const char *tsl_type_name(tsl_type t) { return tsl_type_valid((int)t) ? TYPES[t].name : "?"; }

int tsl_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TSL_TYPE_COUNT; i++)
        if (TYPES[i].name && strcasecmp(TYPES[i].name, name) == 0) return i;
    return -1;
}

int64_t tsl_type_block_len(tsl_type t) { return tsl_type_valid((int)t) ? TYPES[t].block_len : 0; }
size_t tsl_type_block_size(tsl_type t) { return tsl_type_valid((int)t) ? TYPES[t].block_size : 0; }
size_t core_type_size(tsl_type t) { return tsl_type_block_size(t); }
bool tsl_type_is_quantized(tsl_type t) { return tsl_type_valid((int)t) && TYPES[t].quantized; }

size_t tsl_row_size(tsl_type t, int64_t n) {
    int64_t bl = tsl_type_block_len(t);
    if (bl <= 0 || n < 0 || n % bl != 0) return 0;
    return (size_t)(n / bl) * TYPES[t].block_size;
}

/* ---- fp16 ---------------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

tsl_fp16_t tsl_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (tsl_fp16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN stays NaN */
    if (ax >= 0x477ff000u) return (tsl_fp16_t)(sign | 0x7c00u);                          /* rounds to inf */
    if (ax < 0x38800000u) {
        /* subnormal or zero in fp16: scale into the integer range and round
         * to nearest even by adding in float (exact for this range). */
        float v = bits_f32(ax) * 0x1p24f; /* units of 2^-24 */
        uint32_t r = (uint32_t)lrintf(v); /* round-half-even under the default mode */
        return (tsl_fp16_t)(sign | r);
    }
    uint32_t mant = ax & 0x7fffffu;
    uint32_t exp = (ax >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into the exponent: correct */
    return (tsl_fp16_t)(sign | h);
}

float tsl_fp16_to_fp32(tsl_fp16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/* ---- bf16 ---------------------------------------------------------------- */

tsl_bf16_t tsl_fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (tsl_bf16_t)((x >> 16) | 64u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (tsl_bf16_t)(x >> 16);
}

float tsl_bf16_to_fp32(tsl_bf16_t h) { return bits_f32((uint32_t)h << 16); }
