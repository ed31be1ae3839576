/*
 * rope.glsl - the rotary embedding's angle and rotation, shared by rope.comp
 * and by the q/k/v product that rotates its own rows (mul_mat_vecq.comp
 * with ROPE): one function for each step, so a rope done inside the
 * product gives the bits the rope kernel gives.
 *
 * rope_theta is the CPU's rope_yarn angle for pair i at position p:
 *   theta_extrap = p * base^(-2i/n_dims) / ff[i]
 *   theta_interp = freq_scale * theta_extrap
 *   theta        = theta_interp, or with YaRN (ext_factor != 0) the ramp
 *                  mix of both over the correction dims corr0..corr1
 * With ROPE_F64 (devices with shaderFloat64) the angle is formed and reduced
 * modulo 2 pi in double, as the CPU forms it, so positions in the hundred
 * thousands still agree to float precision; base^(-2/n_dims) comes in as a
 * float pair (hi + lo) and its i-th power is taken by squaring. Without
 * doubles everything is float, which loses about p * 6e-8 radians.
 *
 * rope_rotate turns (x0, x1) by the angle, scaled by mscale; `precise`, so
 * no compiler fuses the products into the sums in one kernel and not in
 * the other.
 */
#ifndef TSL_ROPE_GLSL
#define TSL_ROPE_GLSL

float rope_theta(uint i, int p, float theta_hi, float theta_lo, float freq_scale, float ext_factor, float corr0,
                 float corr1, bool has_ff, float ffi) {
#if defined(ROPE_F64)
    /* the mix multiplies angles of 1e5 radians: a float ramp would move
     * them by hundredths */
    double mix = 0.0LF;
    if (ext_factor != 0.0) {
        double y = (double(i) - double(corr0)) / max(0.001LF, double(corr1) - double(corr0));
        mix = (1.0LF - clamp(y, 0.0LF, 1.0LF)) * double(ext_factor);
    }
    double f = 1.0LF, base = double(theta_hi) + double(theta_lo);
    for (uint n = i; n != 0u; n >>= 1) { /* base^i by squaring */
        if ((n & 1u) != 0u) f *= base;
        base *= base;
    }
    if (has_ff) f /= double(ffi);
    const double te = double(p) * f;
    const double ti = double(freq_scale) * te;
    double theta = ti * (1.0LF - mix) + te * mix;
    const double two_pi = 6.283185307179586476925LF;
    theta -= two_pi * floor(theta / two_pi);
    return float(theta);
#else
    float mix = 0.0;
    if (ext_factor != 0.0) {
        const float y = (float(i) - corr0) / max(0.001, corr1 - corr0);
        mix = (1.0 - clamp(y, 0.0, 1.0)) * ext_factor;
    }
    float f = pow(theta_hi, float(i));
    if (has_ff) f /= ffi;
    const float te = float(p) * f;
    const float ti = freq_scale * te;
    return ti * (1.0 - mix) + te * mix;
#endif
}

void rope_rotate(float x0, float x1, float th, float mscale, out float y0, out float y1) {
    const float c = cos(th) * mscale, s = sin(th) * mscale;
    precise const float a = x0 * c - x1 * s;
    precise const float b = x0 * s + x1 * c;
    y0 = a;
    y1 = b;
}

#endif
