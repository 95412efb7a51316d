/* Depthwise convolution over NCHW float32 planes, any stride, padding, dilation and depth
 * multiplier, with the bias and the activation fused. The geometry (one int64 array): channels,
 * input rows and columns, filters per channel, kernel rows and columns, strides, dilations,
 * begin pads (rows, columns), output rows and columns, the activation (aioge.h's code, its two
 * parameters' float32 bits), and a slot no longer read (the former layout).
 *
 * One plane at a time: the input plane is copied into a zero-padded buffer split into its
 * sh x sw stride phases (phase (a, b) holds the padded rows a, a + sh, ... and columns b, b + sw,
 * ...), each Hq rows of Wq. Output (r, q)'s tap (i, j) then reads phase ((i dh) % sh, (j dw) % sw)
 * at row r + (i dh) / sh and column q + (j dw) / sw: the output plane computed as if Wq wide is
 * one contiguous run per tap, t = r Wq + q, whatever the stride, with no edge cases and no
 * per-row overhead (a MobileNet's 7x7 and 14x14 planes). 32 outputs at a time in four AVX2
 * accumulators (picked at run time) or plain loops; the valid columns of each row are copied
 * out and activated. The padding cells stay zero across planes: each plane rewrites only the
 * cells that hold input. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"

#define AVX2 __attribute__((target("avx2,fma")))
#define BLOCK 32 /* outputs per step of the vector kernel, and the buffers' slack */

/* ``taps`` multiply-adds over the flat output [0, n) into out (rounded up to BLOCK). */
AVX2 static void taps_v(const float *const *src, const float *wt, int64_t taps, float b, float *out, int64_t n)
{
    for (int64_t t = 0; t < n; t += BLOCK) {
        __m256 a0 = _mm256_set1_ps(b), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = 0; k < taps; k++) {
            const float *s = src[k] + t;
            const __m256 w = _mm256_broadcast_ss(wt + k);
            a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s), a0);
            a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + 8), a1);
            a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + 16), a2);
            a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + 24), a3);
        }
        _mm256_storeu_ps(out + t, a0);
        _mm256_storeu_ps(out + t + 8, a1);
        _mm256_storeu_ps(out + t + 16, a2);
        _mm256_storeu_ps(out + t + 24, a3);
    }
}

static void taps_c(const float *const *src, const float *wt, int64_t taps, float b, float *out, int64_t n)
{
    for (int64_t t = 0; t < n; t++)
        out[t] = b;
    for (int64_t k = 0; k < taps; k++) {
        const float *s = src[k], w = wt[k];
        for (int64_t t = 0; t < n; t++)
            out[t] += w * s[t];
    }
}

/* Input row s (wd values) into the column phases of a padded row (phase b's column d: padded
 * column d * sw + b, input column d * sw + b - pl); stride 2 by AVX2 shuffles. */
AVX2 static void split2_v(const float *s, int64_t wd, float *even, float *odd)
{
    int64_t m = 0;
    for (; 2 * m + 16 <= wd; m += 8) {
        const __m256 a = _mm256_loadu_ps(s + 2 * m), b = _mm256_loadu_ps(s + 2 * m + 8);
        const __m256 ev = _mm256_shuffle_ps(a, b, 0x88), od = _mm256_shuffle_ps(a, b, 0xDD);
        _mm256_storeu_ps(even + m, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
        _mm256_storeu_ps(odd + m, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
    }
    for (int64_t k = 2 * m; k < wd; k++)
        (k % 2 ? odd : even)[k / 2] = s[k];
}

static void split_row(const float *s, int64_t wd, int64_t sw, int64_t pl, float *row, int64_t phase, int vec)
{
    if (sw == 1) {
        memcpy(row + pl, s, sizeof(float) * (size_t)wd);
        return;
    }
    /* input column k sits in phase (k + pl) % sw at (k + pl) / sw */
    if (sw == 2 && vec) {
        split2_v(s, wd, row + (pl % 2) * phase + pl / 2, row + ((pl + 1) % 2) * phase + (pl + 1) / 2);
        return;
    }
    for (int64_t k0 = 0; k0 < sw && k0 < wd; k0++) {
        float *d = row + ((k0 + pl) % sw) * phase + (k0 + pl) / sw;
        for (int64_t k = k0, e = 0; k < wd; k += sw, e++)
            d[e] = s[k];
    }
}

static int dwconv(const float *x, const float *w, const float *bias, float *y, const int64_t *g, int64_t p0, int64_t p1)
{
    const int64_t c = g[0], h = g[1], wd = g[2], mult = g[3], kh = g[4], kw = g[5], sh = g[6], sw = g[7], dh = g[8], dw = g[9],
                  pt = g[10], pl = g[11], oh = g[12], ow = g[13];
    const int act = (int)g[14];
    const float a0 = aioge_float_of(g[15]), a1 = aioge_float_of(g[16]);
    const int64_t m = c * mult, taps = kh * kw;
    /* the padded extent every window reads (and the input's), in phases of Hq x Wq */
    int64_t hp = (oh - 1) * sh + (kh - 1) * dh + 1, wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    hp = hp > pt + h ? hp : pt + h;
    wp = wp > pl + wd ? wp : pl + wd;
    const int64_t hq = (hp + sh - 1) / sh, wq = (wp + sw - 1) / sw, phase = hq * wq + wq + BLOCK + 8;
    const int64_t n = oh * wq; /* the flat output, Wq columns a row */
    const size_t floats = (size_t)(sh * sw * phase + n + BLOCK + 8) + (size_t)taps * 2 * sizeof(void *) / sizeof(float);
    float *buf = aioge_calloc(sizeof(float) * floats);
    if (!buf)
        return AIOGE_ENOMEM;
    float *flat = buf + sh * sw * phase;
    const float **src = (const float **)(flat + n + BLOCK + 8);
    const int vec = aioge_simd_avx2(-1);
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            const int64_t ri = i * dh, cj = j * dw;
            src[i * kw + j] = buf + ((ri % sh) * sw + cj % sw) * phase + (ri / sh) * wq + cj / sw;
        }
    int64_t built = -1; /* the input plane in the phases */
    for (int64_t p = p0; p < p1; p++) {
        const int64_t om = p % m, in = (p / m) * c + om / mult;
        if (in != built) {
            const float *xp = x + in * h * wd;
            for (int64_t r = 0; r < h; r++) {
                const int64_t pr = r + pt;
                float *row = buf + (pr % sh) * sw * phase + (pr / sh) * wq;
                split_row(xp + r * wd, wd, sw, pl, row, phase, vec);
            }
            built = in;
        }
        const float b = bias ? bias[om] : 0.0f;
        if (vec)
            taps_v(src, w + om * taps, taps, b, flat, n);
        else
            taps_c(src, w + om * taps, taps, b, flat, n);
        float *out = y + p * oh * ow;
        for (int64_t r = 0; r < oh; r++)
            memcpy(out + r * ow, flat + r * wq, sizeof(float) * (size_t)ow);
        if (act)
            aioge_act_span(out, NULL, out, oh * ow, act, a0, a1);
    }
    free(buf);
    return 0;
}

/* Depthwise convolution (group == channels, ``mult`` filters per input channel):
 * y[n, m, r, q] = act(bias[m] + sum over taps (i, j) of w[m, 0, i, j] * x[n, m / mult, r*sh - pt + i*dh, q*sw - pl + j*dw]),
 * taps outside the input counting zero, for output planes [p0, p1) numbered over N x (c * mult);
 * ``bias`` may be NULL; the activation is the geometry's. Returns AIOGE_ENOMEM
 * when the work buffer cannot be had (nothing written), AIOGE_EGEOMETRY for a geometry no
 * convolution has, else 0. An empty output (a zero-size dim) is no work: its padded extent
 * would be negative, and the scratch sized from it about 2^64 bytes. */
int aioge_conv_depthwise_f32(const float *x, const float *w, const float *bias, float *y, const int64_t *geometry,
                             int64_t p0, int64_t p1) {
    const int64_t *g = geometry;
    if (p0 >= p1 || g[12] <= 0 || g[13] <= 0)
        return AIOGE_OK;
    if (g[0] <= 0 || g[1] < 0 || g[2] < 0 || g[3] <= 0 || g[4] <= 0 || g[5] <= 0 || g[6] <= 0 || g[7] <= 0 || g[8] <= 0 ||
        g[9] <= 0 || p0 < 0)
        return AIOGE_EGEOMETRY;
    return dwconv(x, w, bias, y, geometry, p0, p1);
}
