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
 * cells that hold input. The line form (3x3 and 5x5, stride 1 or 2) reads the same phases but
 * computes rows of the output plane straight into it, four rows at a time, each input line loaded
 * once for every tap row that reads it; the eight-plane form (below) takes small planes. The
 * AVX-512 tier runs both 16 lanes wide (zmm, masked tails): the line form on rows of 16 and up,
 * splitting the input rows into the phases as it reaches them, and 16 planes a vector. The plane
 * forms take 16 (8) channels of one image without a division a plane, their filters by 16x16
 * (8x8) transposes, planes with rows under 16 as one flat run (a 7x7 plane four transposes, not
 * seven) and a plane's last 1-3 pixels by a gather and a scatter, not a transpose. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"
#include "mathf.h"

#if defined(__AVX2__) && defined(__FMA__)
#define SIGMOID_REGS 1 /* mathf.h's sigmoid8: the line form's Sigmoid and Swish in registers, act_span's own form */
#else
#define SIGMOID_REGS 0
#endif

#define AVX2 __attribute__((target("avx2,fma")))
#define LINE_ROWS 4 /* output rows a step of the line form */
#define BLOCK 32 /* outputs per step of the vector kernel, and the buffers' slack */

/* ``taps`` multiply-adds over the flat output [0, n) into out (rounded up to BLOCK). */
AVX2 __attribute__((unused)) static void taps_v(const float *const *src, const float *wt, int64_t taps, float b, float *out, int64_t n)
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

/* lanes [0, n) of 8 set (n in 1..7) */
AVX2 static inline __m256i tail_mask(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static void act_run(float *o, int64_t n, int act, float a0, float a1);
#ifdef __AVX512F__
static void act_run16(float *o, int64_t n, int act, float a0, float a1);
static void taps_v16(const float *const *src, const float *wt, int64_t taps, float b, float *out, int64_t n);
/* The input plane's rows split into the stride phases as the 16-lane line form reaches them:
 * each output step's rows just before it reads them (still in L1), not the whole plane first */
typedef struct {
    const float *xp; /* the input plane; NULL: the phases hold it already */
    float *buf;
    int64_t h, wd, pt, pl, sh, sw, wq, phase, next; /* next: the first input row not yet split */
} lazy_rows;
static int lines_fit(const int64_t *g);
static void lines_any16(lazy_rows *L, const int64_t *g, const float *wt, float b, float *out, int act, float a0, float a1);
#endif

/* The line form (kh x kh taps, stride sh, undilated rows, constants when inlined): R output rows
 * by NV 8-vectors of columns from q at a time, R NV independent sums (the activation a pass of its
 * own: in here its temporaries spilled the sums). Tap (i, j) of output row r + p reads row phase
 * i % sh's line p + i / sh from base[phase kw + j] + q: the lines in order, each line's column
 * taps loaded once and multiplied into every output row that reads it (3x3 stride 1, R 4, NV 2:
 * 36 loads for 72 multiply-adds). */
AVX2 static inline __attribute__((always_inline)) void lines_block(const float *const *base, int64_t wq, const float *wt, __m256 b,
                                                                    const int kh, const int sh, const int R, const int NV,
                                                                    int64_t q, float *o, int64_t ow)
{
    __m256 acc[LINE_ROWS][2];
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++)
            acc[p][u] = b;
    /* tap row i = m sh + a of output row p reads line p + m of row phase a */
    _Pragma("GCC unroll 16")
    for (int a = 0; a < sh; a++)
        _Pragma("GCC unroll 16")
        for (int t = 0; t < R + (kh - 1 - a) / sh; t++)
            _Pragma("GCC unroll 16")
            for (int j = 0; j < kh; j++) {
                __m256 v[2];
                _Pragma("GCC unroll 16")
                for (int u = 0; u < NV; u++)
                    v[u] = _mm256_loadu_ps(base[a * kh + j] + q + 8 * u + t * wq);
                _Pragma("GCC unroll 16")
                for (int m = 0; m * sh + a < kh; m++)
                    if (t - m >= 0 && t - m < R) {
                        const __m256 w = _mm256_broadcast_ss(wt + (m * sh + a) * kh + j);
                        _Pragma("GCC unroll 16")
                        for (int u = 0; u < NV; u++)
                            acc[t - m][u] = _mm256_fmadd_ps(w, v[u], acc[t - m][u]);
                    }
            }
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++) {
            if (ow >= 8)
                _mm256_storeu_ps(o + p * ow + q + 8 * u, acc[p][u]);
            else
                _mm256_maskstore_ps(o + p * ow + q, tail_mask(ow), acc[p][u]);
        }
}

/* R output rows from row r: blocks of 16 and 8 columns (eight independent sums at a time where it
 * can: four chains of kh x kh dependent multiply-adds stall on their latency), the last 8
 * overlapping the block before (the same values again), a row under 8 by masked stores (the lanes
 * past it read the buffer's slack) */
AVX2 static inline __attribute__((always_inline)) void lines_rows(const float *buf, int64_t phase, int64_t wq, int64_t sw, int64_t dw,
                                                                   const float *wt, __m256 b, const int kh, const int sh, const int R,
                                                                   int64_t r, float *out, int64_t ow, int act, float a0, float a1)
{
    const float *base[2 * 5];
    for (int a = 0; a < sh; a++)
        for (int j = 0; j < kh; j++)
            base[a * kh + j] = buf + (a * sw + (j * dw) % sw) * phase + r * wq + (j * dw) / sw;
    float *o = out + r * ow;
    int64_t q = 0;
    for (; q + 16 <= ow; q += 16)
        lines_block(base, wq, wt, b, kh, sh, R, 2, q, o, ow);
    if (q + 8 <= ow) {
        lines_block(base, wq, wt, b, kh, sh, R, 1, q, o, ow);
        q += 8;
    }
    if (q < ow)
        lines_block(base, wq, wt, b, kh, sh, R, 1, ow < 8 ? 0 : ow - 8, o, ow);
    act_run(o, R * ow, act, a0, a1); /* the R rows while they are in L1 */
}

AVX2 static inline __attribute__((always_inline)) void lines_plane(const float *buf, int64_t phase, int64_t wq, int64_t sw, int64_t dw,
                                                                    const float *wt, float bias, float *out, int64_t oh, int64_t ow,
                                                                    const int kh, const int sh, int act, float a0, float a1)
{
    const __m256 b = _mm256_set1_ps(bias);
    int64_t r = 0;
    for (; r + LINE_ROWS <= oh; r += LINE_ROWS)
        lines_rows(buf, phase, wq, sw, dw, wt, b, kh, sh, LINE_ROWS, r, out, ow, act, a0, a1);
    for (; r < oh; r++)
        lines_rows(buf, phase, wq, sw, dw, wt, b, kh, sh, 1, r, out, ow, act, a0, a1);
}

/* The line form for a square 3x3 or 5x5 kernel of stride 1 or 2 (any column dilation), undilated
 * rows; 0 when the geometry is none of those (the caller runs another form) */
AVX2 static int lines_any(const float *buf, int64_t phase, int64_t wq, const int64_t *g, const float *wt, float b, float *out, int act,
                          float a0, float a1)
{
    const int64_t kh = g[4], kw = g[5], sh = g[6], sw = g[7], dh = g[8], dw = g[9], oh = g[12], ow = g[13];
    if (kh != kw || dh != 1 || (kh != 3 && kh != 5) || (sh != 1 && sh != 2))
        return 0;
    if (kh == 3 && sh == 1)
        lines_plane(buf, phase, wq, sw, dw, wt, b, out, oh, ow, 3, 1, act, a0, a1);
    else if (kh == 3)
        lines_plane(buf, phase, wq, sw, dw, wt, b, out, oh, ow, 3, 2, act, a0, a1);
    else if (sh == 1)
        lines_plane(buf, phase, wq, sw, dw, wt, b, out, oh, ow, 5, 1, act, a0, a1);
    else
        lines_plane(buf, phase, wq, sw, dw, wt, b, out, oh, ow, 5, 2, act, a0, a1);
    return 1;
}

static int dwconv(const float *x, const float *w, const float *bias, float *y, const int64_t *g, int64_t p0, int64_t p1, int lines)
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
#ifdef __AVX512F__
        lazy_rows L = {NULL, buf, h, wd, pt, pl, sh, sw, wq, phase, 0};
        if (vec && lines && lines_fit(g)) {
            if (in != built)
                L.xp = x + in * h * wd;
            lines_any16(&L, g, w + om * taps, bias ? bias[om] : 0.0f, y + p * oh * ow, act, a0, a1);
            built = in; /* every row a window reads */
            continue;
        }
#endif
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
        if (vec && lines && lines_any(buf, phase, wq, g, w + om * taps, b, y + p * oh * ow, act, a0, a1))
            continue;
#ifdef __AVX512F__
        if (vec)
            taps_v16(src, w + om * taps, taps, b, flat, n);
#else
        if (vec)
            taps_v(src, w + om * taps, taps, b, flat, n);
#endif
        else
            taps_c(src, w + om * taps, taps, b, flat, n);
        float *out = y + p * oh * ow;
        for (int64_t r = 0; r < oh; r++)
            memcpy(out + r * ow, flat + r * wq, sizeof(float) * (size_t)ow);
#ifdef __AVX512F__
        if (vec)
            act_run16(out, oh * ow, act, a0, a1);
#else
        if (vec)
            act_run(out, oh * ow, act, a0, a1);
#endif
        else if (act)
            aioge_act_span(out, NULL, out, oh * ow, act, a0, a1);
    }
    free(buf);
    return 0;
}

/* -- eight planes at a time, channel-interleaved (AVX2): the taps of eight output channels are
 * one vector, so every output pixel of the eight is kh x kw multiply-adds with no waste (the
 * flat-phase form above computes Wq - ow spare columns a row and rounds a plane up to BLOCK: a
 * 7x7 plane with a 5x5 kernel costs it 96 outputs for 49). The eight input planes are copied by
 * 8x8 transposes into a zero-padded hp x wp image of 8-vectors, the outputs computed into an
 * oh x ow image of 8-vectors, activated there, and transposed back into the eight planes. -- */

AVX2 static inline void transpose8(__m256 *r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* The activations taken in registers on the way out (norm.c's act_span forms, the same operations
 * in the same order: HardSigmoid's product and sum each rounded, NaN kept); the others go through
 * act_span, a pass of their own. */
static int act_in_regs(int act)
{
    return act == ACT_HARDSWISH || act == ACT_HARDSIGMOID || act == ACT_RELU || act == ACT_CLIP ||
           (SIGMOID_REGS && (act == ACT_SWISH || act == ACT_SIGMOID));
}

AVX2 static inline __attribute__((always_inline)) __m256 act1(__m256 x, int act, float a0, float a1)
{
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const __m256 al = _mm256_set1_ps(act == ACT_HARDSWISH ? 1.0f / 6.0f : a0), be = _mm256_set1_ps(act == ACT_HARDSWISH ? 0.5f : a1);
#if SIGMOID_REGS
    if (act == ACT_SWISH || act == ACT_SIGMOID)
        return sigmoid8(x, al, act == ACT_SWISH);
#endif
    if (act == ACT_RELU)
        return _mm256_blendv_ps(zero, x, _mm256_cmp_ps(x, zero, _CMP_NLE_UQ));
    if (act == ACT_CLIP) {
        const __m256 lo = _mm256_blendv_ps(al, x, _mm256_cmp_ps(x, al, _CMP_NLE_UQ));
        return _mm256_blendv_ps(be, lo, _mm256_cmp_ps(lo, be, _CMP_NGE_UQ));
    }
    __m256 h = _mm256_mul_ps(al, x);
    __asm__("" : "+x"(h)); /* rounded on its own: no contraction into an FMA */
    h = _mm256_add_ps(h, be);
    h = _mm256_blendv_ps(h, zero, _mm256_cmp_ps(h, zero, _CMP_LT_OQ));
    h = _mm256_blendv_ps(h, one, _mm256_cmp_ps(h, one, _CMP_GT_OQ));
    return act == ACT_HARDSWISH ? _mm256_mul_ps(x, h) : h;
}

/* act over out[0, n) in place, a pass over values in L1: one loop per activation, its form
 * inlined (act_span's own loops for the others; Clip's there is scalar, 7 ns a value) */
AVX2 static inline __attribute__((always_inline)) void act_loop(float *o, int64_t n, const int act, float a0, float a1)
{
    int64_t t = 0;
    for (; t + 8 <= n; t += 8)
        _mm256_storeu_ps(o + t, act1(_mm256_loadu_ps(o + t), act, a0, a1));
    if (t < n) {
        const __m256i mask = tail_mask(n - t);
        _mm256_maskstore_ps(o + t, mask, act1(_mm256_maskload_ps(o + t, mask), act, a0, a1));
    }
}

AVX2 static void act_run(float *o, int64_t n, int act, float a0, float a1)
{
    switch (act) {
    case ACT_NONE: break;
    case ACT_RELU: act_loop(o, n, ACT_RELU, a0, a1); break;
    case ACT_CLIP: act_loop(o, n, ACT_CLIP, a0, a1); break;
    case ACT_HARDSWISH: act_loop(o, n, ACT_HARDSWISH, a0, a1); break;
    case ACT_HARDSIGMOID: act_loop(o, n, ACT_HARDSIGMOID, a0, a1); break;
#if SIGMOID_REGS
    case ACT_SWISH: act_loop(o, n, ACT_SWISH, a0, a1); break;
    case ACT_SIGMOID: act_loop(o, n, ACT_SIGMOID, a0, a1); break;
#endif
    default: aioge_act_span(o, NULL, o, n, act, a0, a1);
    }
}

AVX2 static inline __attribute__((always_inline)) void act8(__m256 *v, int act, float a0, float a1)
{
    for (int k = 0; k < 8; k++)
        v[k] = act1(v[k], act, a0, a1);
}

#ifdef __AVX512F__
/* -- the AVX-512 tier: the same forms 16 lanes wide (zmm), masked tails -- */

/* lanes [0, n) of 16 set (none for n <= 0) */
static inline __mmask16 mask16(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* act1 over 16 lanes: the same operations in the same order; Sigmoid and Swish mathf.h's sigmoid16 */
static inline __attribute__((always_inline)) __m512 act16(__m512 x, int act, float a0, float a1)
{
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    const __m512 al = _mm512_set1_ps(act == ACT_HARDSWISH ? 1.0f / 6.0f : a0), be = _mm512_set1_ps(act == ACT_HARDSWISH ? 0.5f : a1);
    if (act == ACT_NONE)
        return x;
    if (act == ACT_SWISH || act == ACT_SIGMOID)
        return sigmoid16(x, al, act == ACT_SWISH);
    if (act == ACT_RELU)
        return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_NLE_UQ), zero, x);
    if (act == ACT_CLIP) {
        const __m512 lo = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, al, _CMP_NLE_UQ), al, x);
        return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(lo, be, _CMP_NGE_UQ), be, lo);
    }
    __m512 h = _mm512_mul_ps(al, x);
    __asm__("" : "+v"(h)); /* rounded on its own: no contraction into an FMA */
    h = _mm512_add_ps(h, be);
    h = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(h, zero, _CMP_LT_OQ), h, zero);
    h = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(h, one, _CMP_GT_OQ), h, one);
    return act == ACT_HARDSWISH ? _mm512_mul_ps(x, h) : h;
}

static int act_in_regs16(int act) { return act_in_regs(act) || act == ACT_SWISH || act == ACT_SIGMOID; }

/* act over out[0, n) in place, 16 at a time, the tail masked */
static inline __attribute__((always_inline)) void act_loop16(float *o, int64_t n, const int act, float a0, float a1)
{
    int64_t t = 0;
    for (; t + 16 <= n; t += 16)
        _mm512_storeu_ps(o + t, act16(_mm512_loadu_ps(o + t), act, a0, a1));
    if (t < n) {
        const __mmask16 k = mask16(n - t);
        _mm512_mask_storeu_ps(o + t, k, act16(_mm512_maskz_loadu_ps(k, o + t), act, a0, a1));
    }
}

static void act_run16(float *o, int64_t n, int act, float a0, float a1)
{
    switch (act) {
    case ACT_NONE: break;
    case ACT_RELU: act_loop16(o, n, ACT_RELU, a0, a1); break;
    case ACT_CLIP: act_loop16(o, n, ACT_CLIP, a0, a1); break;
    case ACT_HARDSWISH: act_loop16(o, n, ACT_HARDSWISH, a0, a1); break;
    case ACT_HARDSIGMOID: act_loop16(o, n, ACT_HARDSIGMOID, a0, a1); break;
    case ACT_SWISH: act_loop16(o, n, ACT_SWISH, a0, a1); break;
    case ACT_SIGMOID: act_loop16(o, n, ACT_SIGMOID, a0, a1); break;
    default: aioge_act_span(o, NULL, o, n, act, a0, a1);
    }
}

/* The flat form's multiply-adds (taps_v) in two zmm a block */
static void taps_v16(const float *const *src, const float *wt, int64_t taps, float b, float *out, int64_t n)
{
    for (int64_t t = 0; t < n; t += BLOCK) {
        __m512 a0 = _mm512_set1_ps(b), a1 = a0;
        for (int64_t k = 0; k < taps; k++) {
            const float *s = src[k] + t;
            const __m512 w = _mm512_set1_ps(wt[k]);
            a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(s), a0);
            a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(s + 16), a1);
        }
        _mm512_storeu_ps(out + t, a0);
        _mm512_storeu_ps(out + t + 16, a1);
    }
}

/* split_row's stride 1 and 2 in zmm, masked tails */
static void split_row16(const float *s, int64_t wd, int64_t sw, int64_t pl, float *row, int64_t phase)
{
    int64_t t = 0;
    if (sw == 1) {
        for (row += pl; t + 16 <= wd; t += 16)
            _mm512_storeu_ps(row + t, _mm512_loadu_ps(s + t));
        if (t < wd)
            _mm512_mask_storeu_ps(row + t, mask16(wd - t), _mm512_maskz_loadu_ps(mask16(wd - t), s + t));
        return;
    }
    if (sw != 2) {
        split_row(s, wd, sw, pl, row, phase, 0);
        return;
    }
    float *even = row + (pl % 2) * phase + pl / 2, *odd = row + ((pl + 1) % 2) * phase + (pl + 1) / 2;
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    for (; 2 * t + 32 <= wd; t += 16) {
        const __m512 a = _mm512_loadu_ps(s + 2 * t), b = _mm512_loadu_ps(s + 2 * t + 16);
        _mm512_storeu_ps(even + t, _mm512_permutex2var_ps(a, ie, b));
        _mm512_storeu_ps(odd + t, _mm512_permutex2var_ps(a, io, b));
    }
    const int64_t k = wd - 2 * t; /* 0 .. 31 left */
    if (k > 0) {
        const __m512 a = _mm512_maskz_loadu_ps(mask16(k), s + 2 * t), b = _mm512_maskz_loadu_ps(mask16(k - 16), s + 2 * t + 16);
        _mm512_mask_storeu_ps(even + t, mask16((k + 1) / 2), _mm512_permutex2var_ps(a, ie, b));
        _mm512_mask_storeu_ps(odd + t, mask16(k / 2), _mm512_permutex2var_ps(a, io, b));
    }
}

/* the input rows of padded rows [0, pr_end) into the phases, those not yet there */
static void rows_upto(lazy_rows *L, int64_t pr_end)
{
    if (!L->xp)
        return;
    const int64_t end = pr_end - L->pt < L->h ? pr_end - L->pt : L->h;
    for (; L->next < end; L->next++) {
        const int64_t pr = L->next + L->pt;
        split_row16(L->xp + L->next * L->wd, L->wd, L->sw, L->pl, L->buf + (pr % L->sh) * L->sw * L->phase + (pr / L->sh) * L->wq,
                    L->phase);
    }
}

#define LINE_ROWS16 4 /* output rows a step of the 16-lane line form */

/* lines_block in zmm: R rows by NV (1 or 2) vectors of 16 columns from q, the last vector's
 * lanes ``last`` (a row's tail: masked loads and stores, no overlap), the activation applied in
 * registers on the way out */
static inline __attribute__((always_inline)) void lines_block16(const float *const *base, int64_t wq, const float *wt, __m512 b,
                                                                 const int kh, const int sh, const int R, const int NV, int64_t q,
                                                                 float *o, int64_t ow, __mmask16 last, const int act, float a0,
                                                                 float a1)
{
    __m512 acc[LINE_ROWS16][2];
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++)
            acc[p][u] = b;
    _Pragma("GCC unroll 16")
    for (int a = 0; a < sh; a++)
        _Pragma("GCC unroll 16")
        for (int t = 0; t < R + (kh - 1 - a) / sh; t++)
            _Pragma("GCC unroll 16")
            for (int j = 0; j < kh; j++) {
                __m512 v[2];
                _Pragma("GCC unroll 16")
                for (int u = 0; u < NV; u++) {
                    const float *s = base[a * kh + j] + q + 16 * u + t * wq;
                    v[u] = u == NV - 1 ? _mm512_maskz_loadu_ps(last, s) : _mm512_loadu_ps(s);
                }
                _Pragma("GCC unroll 16")
                for (int m = 0; m * sh + a < kh; m++)
                    if (t - m >= 0 && t - m < R) {
                        const __m512 w = _mm512_set1_ps(wt[(m * sh + a) * kh + j]);
                        _Pragma("GCC unroll 16")
                        for (int u = 0; u < NV; u++)
                            acc[t - m][u] = _mm512_fmadd_ps(w, v[u], acc[t - m][u]);
                    }
            }
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++) {
            const __m512 y = act16(acc[p][u], act, a0, a1);
            if (u == NV - 1)
                _mm512_mask_storeu_ps(o + p * ow + q + 16 * u, last, y);
            else
                _mm512_storeu_ps(o + p * ow + q + 16 * u, y);
        }
}

static inline __attribute__((always_inline)) void lines_rows16(const float *buf, int64_t phase, int64_t wq, int64_t sw, int64_t dw,
                                                                const float *wt, __m512 b, const int kh, const int sh, const int R,
                                                                int64_t r, float *out, int64_t ow, const int act, float a0, float a1)
{
    const float *base[2 * 5];
    for (int a = 0; a < sh; a++)
        for (int j = 0; j < kh; j++)
            base[a * kh + j] = buf + (a * sw + (j * dw) % sw) * phase + r * wq + (j * dw) / sw;
    float *o = out + r * ow;
    int64_t q = 0;
    for (; q + 32 <= ow; q += 32)
        lines_block16(base, wq, wt, b, kh, sh, R, 2, q, o, ow, 0xFFFF, act, a0, a1);
    if (q + 16 < ow)
        lines_block16(base, wq, wt, b, kh, sh, R, 2, q, o, ow, mask16(ow - q - 16), act, a0, a1);
    else if (q < ow)
        lines_block16(base, wq, wt, b, kh, sh, R, 1, q, o, ow, mask16(ow - q), act, a0, a1);
}

static inline __attribute__((always_inline)) void lines_plane16(lazy_rows *L, const float *buf, int64_t phase, int64_t wq, int64_t sw, int64_t dw,
                                                                 const float *wt, float bias, float *out, int64_t oh, int64_t ow,
                                                                 const int kh, const int sh, const int act, float a0, float a1)
{
    const __m512 b = _mm512_set1_ps(bias);
    int64_t r = 0;
    for (; r + LINE_ROWS16 <= oh; r += LINE_ROWS16) {
        rows_upto(L, (r + LINE_ROWS16 - 1) * sh + kh);
        lines_rows16(buf, phase, wq, sw, dw, wt, b, kh, sh, LINE_ROWS16, r, out, ow, act, a0, a1);
    }
    rows_upto(L, (oh - 1) * sh + kh);
    for (; r < oh; r++)
        lines_rows16(buf, phase, wq, sw, dw, wt, b, kh, sh, 1, r, out, ow, act, a0, a1);
}

/* one kernel shape's line form, an activation in registers or none (then act_run16 after) */
static inline __attribute__((always_inline)) void lines_kernel16(lazy_rows *L, const float *buf, int64_t phase, int64_t wq, int64_t sw, int64_t dw,
                                                                  const float *wt, float bias, float *out, int64_t oh, int64_t ow,
                                                                  const int kh, const int sh, int act, float a0, float a1)
{
    switch (act) {
    case ACT_RELU: lines_plane16(L, buf, phase, wq, sw, dw, wt, bias, out, oh, ow, kh, sh, ACT_RELU, a0, a1); break;
    case ACT_CLIP: lines_plane16(L, buf, phase, wq, sw, dw, wt, bias, out, oh, ow, kh, sh, ACT_CLIP, a0, a1); break;
    case ACT_HARDSWISH: lines_plane16(L, buf, phase, wq, sw, dw, wt, bias, out, oh, ow, kh, sh, ACT_HARDSWISH, a0, a1); break;
    case ACT_SWISH: lines_plane16(L, buf, phase, wq, sw, dw, wt, bias, out, oh, ow, kh, sh, ACT_SWISH, a0, a1); break;
    default:
        lines_plane16(L, buf, phase, wq, sw, dw, wt, bias, out, oh, ow, kh, sh, ACT_NONE, a0, a1);
        act_run16(out, oh * ow, act, a0, a1);
    }
}

static int lines_fit(const int64_t *g)
{
    return g[4] == g[5] && g[8] == 1 && (g[4] == 3 || g[4] == 5) && (g[6] == 1 || g[6] == 2);
}

static void lines_any16(lazy_rows *L, const int64_t *g, const float *wt, float b, float *out, int act, float a0, float a1)
{
    const int64_t kh = g[4], sh = g[6], sw = g[7], dw = g[9], oh = g[12], ow = g[13];
    const float *buf = L->buf;
    const int64_t phase = L->phase, wq = L->wq;
    if (kh == 3 && sh == 1)
        lines_kernel16(L, buf, phase, wq, sw, dw, wt, b, out, oh, ow, 3, 1, act, a0, a1);
    else if (kh == 3)
        lines_kernel16(L, buf, phase, wq, sw, dw, wt, b, out, oh, ow, 3, 2, act, a0, a1);
    else if (sh == 1)
        lines_kernel16(L, buf, phase, wq, sw, dw, wt, b, out, oh, ow, 5, 1, act, a0, a1);
    else
        lines_kernel16(L, buf, phase, wq, sw, dw, wt, b, out, oh, ow, 5, 2, act, a0, a1);
}

/* -- the direct form (AVX-512): a 3x3 or 5x5 kernel of stride 1 or 2 straight from the input
 * plane, no padded copy, no phases, no transposes: R output rows by 16 columns a block, each input
 * line the block reads loaded once (masked: lanes outside the plane read zero) and multiplied into
 * every output row that reads it; stride 2's even and odd columns taken apart in registers (a tap
 * pair j, j + 1 from the same two loads, one permute each). The 16-plane form's transposes cost
 * more than its multiply-adds on stride 2 (four inputs an output): 192x28x28 3x3 s2 44 -> 31 us;
 * the others in aioge_conv_depthwise_f32. -- */

#define DIRECT_REST (aioge_simd_avx2(-1) != 11) /* 11: the former last rows one at a time, for the benches */
#define DROWS 4 /* output rows a block (2: 26x14x14 3x3 42 us, 4: 38, 6: 41) */
/* lanes k of 16 with 0 <= c + k < wd */
static inline __mmask16 cols16(int64_t c, int64_t wd)
{
    const int64_t lo = c < 0 ? -c : 0, hi = wd - c < 16 ? wd - c : 16;
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

static inline __attribute__((always_inline)) void direct_block16(const float *xp, int64_t h, int64_t wd, int64_t pt, int64_t pl,
                                                                  const float *wt, __m512 b, const int K, const int S, const int R,
                                                                  int64_t r, int64_t q, float *o, int64_t ow, __mmask16 last,
                                                                  const int act, float a0, float a1)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    __mmask16 mk[6];
    int64_t c0[6];
    if (S == 1)
        for (int j = 0; j < K; j++) {
            c0[j] = q + j - pl;
            mk[j] = cols16(c0[j], wd);
        }
    else
        for (int j = 0; j < K; j += 2) { /* the 32 columns from 2 q + j - pl: taps j (even lanes) and j + 1 (odd) */
            c0[j] = S * q + j - pl;
            mk[j] = cols16(c0[j], wd);
            mk[j + 1] = cols16(c0[j] + 16, wd);
        }
    __m512 acc[8];
    for (int p = 0; p < R; p++)
        acc[p] = b;
    _Pragma("GCC unroll 32")
    for (int t = 0; t < (R - 1) * S + K; t++) {
        const int64_t ir = r * S - pt + t;
        if (ir < 0 || ir >= h)
            continue; /* a padding row: no taps */
        const float *s = xp + ir * wd;
        __m512 v[5];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < K; j += S) {
            if (S == 1)
                v[j] = _mm512_maskz_loadu_ps(mk[j], s + c0[j]);
            else {
                const __m512 lo = _mm512_maskz_loadu_ps(mk[j], s + c0[j]), hi = _mm512_maskz_loadu_ps(mk[j + 1], s + c0[j] + 16);
                v[j] = _mm512_permutex2var_ps(lo, ie, hi);
                if (j + 1 < K)
                    v[j + 1] = _mm512_permutex2var_ps(lo, io, hi);
            }
        }
        _Pragma("GCC unroll 8")
        for (int p = 0; p < R; p++) {
            const int i = t - p * S; /* the kernel row this line is to output row r + p */
            if (i >= 0 && i < K)
                _Pragma("GCC unroll 8")
                for (int j = 0; j < K; j++)
                    acc[p] = _mm512_fmadd_ps(_mm512_set1_ps(wt[i * K + j]), v[j], acc[p]);
        }
    }
    for (int p = 0; p < R; p++)
        _mm512_mask_storeu_ps(o + (r + p) * ow + q, last, act16(acc[p], act, a0, a1));
}

/* direct_block16 by NV (1 or 2) vectors of columns from q: eight multiply-add chains, not four */
static inline __attribute__((always_inline)) void direct_block16v(const float *xp, int64_t h, int64_t wd, int64_t pt, int64_t pl,
                                                                  const float *wt, __m512 b, const int K, const int S, const int R,
                                                                  const int NV, int64_t r, int64_t q, float *o, int64_t ow,
                                                                  __mmask16 last, const int act, float a0, float a1)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    __mmask16 mk[2][6];
    int64_t c0[2][6];
    for (int u = 0; u < NV; u++)
        if (S == 1)
            for (int j = 0; j < K; j++) {
                c0[u][j] = q + 16 * u + j - pl;
                mk[u][j] = cols16(c0[u][j], wd);
            }
        else
            for (int j = 0; j < K; j += 2) { /* the 32 columns from 2 q + j - pl: taps j (even lanes) and j + 1 (odd) */
                c0[u][j] = S * (q + 16 * u) + j - pl;
                mk[u][j] = cols16(c0[u][j], wd);
                mk[u][j + 1] = cols16(c0[u][j] + 16, wd);
            }
    __m512 acc[8][2];
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++)
            acc[p][u] = b;
    _Pragma("GCC unroll 32")
    for (int t = 0; t < (R - 1) * S + K; t++) {
        const int64_t ir = r * S - pt + t;
        if (ir < 0 || ir >= h)
            continue; /* a padding row: no taps */
        const float *s = xp + ir * wd;
        _Pragma("GCC unroll 2")
        for (int u = 0; u < NV; u++) {
            __m512 v[5];
            _Pragma("GCC unroll 8")
            for (int j = 0; j < K; j += S) {
                if (S == 1)
                    v[j] = _mm512_maskz_loadu_ps(mk[u][j], s + c0[u][j]);
                else {
                    const __m512 lo = _mm512_maskz_loadu_ps(mk[u][j], s + c0[u][j]);
                    const __m512 hi = _mm512_maskz_loadu_ps(mk[u][j + 1], s + c0[u][j] + 16);
                    v[j] = _mm512_permutex2var_ps(lo, ie, hi);
                    if (j + 1 < K)
                        v[j + 1] = _mm512_permutex2var_ps(lo, io, hi);
                }
            }
            _Pragma("GCC unroll 8")
            for (int p = 0; p < R; p++) {
                const int i = t - p * S; /* the kernel row this line is to output row r + p */
                if (i >= 0 && i < K)
                    _Pragma("GCC unroll 8")
                    for (int j = 0; j < K; j++)
                        acc[p][u] = _mm512_fmadd_ps(_mm512_set1_ps(wt[i * K + j]), v[j], acc[p][u]);
            }
        }
    }
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++)
            _mm512_mask_storeu_ps(o + (r + p) * ow + q + 16 * u, u == NV - 1 ? last : 0xFFFF, act16(acc[p][u], act, a0, a1));
}

static inline __attribute__((always_inline)) void direct_plane16(const float *xp, const int64_t *g, const float *wt, float bias,
                                                                  float *out, const int K, const int S, const int act, float a0,
                                                                  float a1)
{
    const int64_t h = g[1], wd = g[2], pt = g[10], pl = g[11], oh = g[12], ow = g[13];
    const __m512 b = _mm512_set1_ps(bias);
    int64_t r = 0;
    if (S == 2 && ow > 16 && ow <= 32 && oh >= DROWS && aioge_simd_avx2(-1) != 13) {
        /* stride-2 rows of 17 to 32 as one two-vector block (13: the former blocks, for the
         * benches): MobileNetV2's 144x56x56 3x3 113.6 -> 99.6 us thread CPU; in every block
         * width it lost (rows of 14 by 8 rows, 384x14x14 42.5 -> 46.6) */
        for (; r < oh; r += DROWS)
            direct_block16v(xp, h, wd, pt, pl, wt, b, K, S, DROWS, 2, r + DROWS <= oh ? r : oh - DROWS, 0, out, ow, mask16(ow - 16), act,
                            a0, a1);
        return;
    }
    for (; r + DROWS <= oh; r += DROWS)
        for (int64_t q = 0; q < ow; q += 16)
            direct_block16(xp, h, wd, pt, pl, wt, b, K, S, DROWS, r, q, out, ow, mask16(ow - q), act, a0, a1);
    if (oh - r == 2 && DIRECT_REST) /* the last rows as one block (14 rows: 4, 4, 4, 2), their lines loaded once */
        for (int64_t q = 0; q < ow; q += 16)
            direct_block16(xp, h, wd, pt, pl, wt, b, K, S, 2, r, q, out, ow, mask16(ow - q), act, a0, a1);
    else if (oh - r == 3 && DIRECT_REST)
        for (int64_t q = 0; q < ow; q += 16)
            direct_block16(xp, h, wd, pt, pl, wt, b, K, S, 3, r, q, out, ow, mask16(ow - q), act, a0, a1);
    else
        for (; r < oh; r++)
            for (int64_t q = 0; q < ow; q += 16)
                direct_block16(xp, h, wd, pt, pl, wt, b, K, S, 1, r, q, out, ow, mask16(ow - q), act, a0, a1);
}

static inline __attribute__((always_inline)) void direct_act16(const float *xp, const int64_t *g, const float *wt, float bias,
                                                                float *out, const int K, const int S, int act, float a0, float a1)
{
    switch (act) {
    case ACT_RELU: direct_plane16(xp, g, wt, bias, out, K, S, ACT_RELU, a0, a1); break;
    case ACT_CLIP: direct_plane16(xp, g, wt, bias, out, K, S, ACT_CLIP, a0, a1); break;
    case ACT_HARDSWISH: direct_plane16(xp, g, wt, bias, out, K, S, ACT_HARDSWISH, a0, a1); break;
    case ACT_SWISH: direct_plane16(xp, g, wt, bias, out, K, S, ACT_SWISH, a0, a1); break;
    default:
        direct_plane16(xp, g, wt, bias, out, K, S, ACT_NONE, a0, a1);
        act_run16(out, g[12] * g[13], act, a0, a1);
    }
}

/* output planes [p0, p1) by the direct form (lines_fit's geometries with equal strides) */
static int dwconv_direct16(const float *x, const float *w, const float *bias, float *y, const int64_t *g, int64_t p0, int64_t p1)
{
    const int64_t c = g[0], h = g[1], wd = g[2], mult = g[3], K = g[4], S = g[6], oh = g[12], ow = g[13];
    const int act = (int)g[14];
    const float a0 = aioge_float_of(g[15]), a1 = aioge_float_of(g[16]);
    const int64_t m = c * mult;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t om = p % m;
        const float *xp = x + ((p / m) * c + om / mult) * h * wd, *wt = w + om * K * K;
        const float b = bias ? bias[om] : 0.0f;
        float *out = y + p * oh * ow;
        if (K == 3 && S == 1)
            direct_act16(xp, g, wt, b, out, 3, 1, act, a0, a1);
        else if (K == 3)
            direct_act16(xp, g, wt, b, out, 3, 2, act, a0, a1);
        else if (S == 1)
            direct_act16(xp, g, wt, b, out, 5, 1, act, a0, a1);
        else
            direct_act16(xp, g, wt, b, out, 5, 2, act, a0, a1);
    }
    return 0;
}

/* 16 x 16 transpose in zmm: 64 shuffles (unpack, shuffle_ps, two rounds of shuffle_f32x4) */
static inline __attribute__((always_inline)) void transpose16(__m512 *r)
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4 i + k]'s 128-bit lane L: column 4 L + k of rows 4 i .. 4 i + 3 */
        u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xDD);
        const __m512 w0 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xDD);
        r[k] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[8 + k] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
        r[4 + k] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + k] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
    }
}

/* n values of each of the 16 runs src[k] into dst as n 16-vectors (dst[16 t + k] = src[k][t]) */
static void interleave16(const float *const *src, int64_t n, float *dst)
{
    for (int64_t t = 0; t < n; t += 16) {
        const __mmask16 m = mask16(n - t);
        __m512 r[16];
        for (int k = 0; k < 16; k++)
            r[k] = _mm512_maskz_loadu_ps(m, src[k] + t);
        transpose16(r);
        for (int64_t k = 0; k < 16 && t + k < n; k++)
            _mm512_store_ps(dst + 16 * (t + k), r[k]);
    }
}

/* the h x wd planes planes[0 .. 16) into the padded image of 16-vectors (pixel (r, q) at
 * img[16 ((r + pt) wp + q + pl)]), each plane taken as one flat run of 16 at a time: a 7x7
 * plane's 49 pixels are four 16x16 transposes, not seven (one a row of 7) */
static void interleave16_flat(const float *const *planes, int64_t h, int64_t wd, int64_t wp, int64_t pt, int64_t pl, float *img,
                              int apart)
{
    const int64_t n = h * wd;
    int64_t r = 0, q = 0;
    for (int64_t t = 0; t < n; t += 16) {
        if (apart && n - t <= 3) { /* the last 1 to 3 pixels: a gather each (the planes n apart), no transpose */
            const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                  _mm512_set1_epi32((int)n));
            for (int64_t k = t; k < n; k++) {
                _mm512_store_ps(img + 16 * ((r + pt) * wp + q + pl), _mm512_i32gather_ps(at, planes[0] + k, 4));
                if (++q == wd) {
                    q = 0;
                    r++;
                }
            }
            return;
        }
        const __mmask16 m = mask16(n - t);
        __m512 v[16];
        for (int k = 0; k < 16; k++)
            v[k] = _mm512_maskz_loadu_ps(m, planes[k] + t);
        transpose16(v);
        _Pragma("GCC unroll 16")
        for (int k = 0; k < 16; k++)
            if (t + k < n) {
                _mm512_store_ps(img + 16 * ((r + pt) * wp + q + pl), v[k]);
                if (++q == wd) {
                    q = 0;
                    r++;
                }
            }
    }
}

/* pixels8 in zmm: bq outputs of nr rows (bq nr <= 16 sums) */
static inline __attribute__((always_inline)) void pixels16(const float *const *rows, const float *wt, __m512 b, int64_t kh, int64_t kw,
                                                            int64_t sw, int64_t dw, int64_t q, float *out, const int bq, const int nr,
                                                            int64_t rstep, int64_t ostep)
{
    __m512 acc[4][8];
    for (int rr = 0; rr < nr; rr++)
        for (int u = 0; u < bq; u++)
            acc[rr][u] = b;
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            const __m512 w = _mm512_load_ps(wt + 16 * (i * kw + j));
            const float *s = rows[i] + 16 * (q * sw + j * dw);
            for (int rr = 0; rr < nr; rr++)
                for (int u = 0; u < bq; u++)
                    acc[rr][u] = _mm512_fmadd_ps(w, _mm512_load_ps(s + rr * rstep + 16 * sw * u), acc[rr][u]);
        }
    for (int rr = 0; rr < nr; rr++)
        for (int u = 0; u < bq; u++)
            _mm512_store_ps(out + rr * ostep + 16 * u, acc[rr][u]);
}

AVX2 static int dwconv8(const float *x, const float *w, const float *bias, float *y, const int64_t *g, int64_t p0, int64_t p1);

/* dwconv8 with 16 planes a vector: the images 64-byte aligned; a last group of 8 planes or
 * fewer goes to dwconv8 */
static int dwconv16(const float *x, const float *w, const float *bias, float *y, const int64_t *g, int64_t p0, int64_t p1)
{
    const int64_t c = g[0], h = g[1], wd = g[2], mult = g[3], kh = g[4], kw = g[5], sh = g[6], sw = g[7], dh = g[8], dw = g[9],
                  pt = g[10], pl = g[11], oh = g[12], ow = g[13];
    const int act = (int)g[14];
    const float a0 = aioge_float_of(g[15]), a1 = aioge_float_of(g[16]);
    const int64_t m = c * mult, taps = kh * kw;
    int64_t hp = (oh - 1) * sh + (kh - 1) * dh + 1, wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    hp = hp > pt + h ? hp : pt + h;
    wp = wp > pl + wd ? wp : pl + wd;
    const size_t floats = (size_t)(16 * (hp * wp + oh * ow + taps + 1)) + 32 + (size_t)(16 + kh) * sizeof(void *) / sizeof(float);
    /* this thread's buffer, kept (a calloc a call cost each split chunk ~1 us): only the padded
     * image's zeros are needed, the rest is written before it is read */
    float *mem = aioge_thread_scratch(2, floats);
    if (!mem)
        return AIOGE_ENOMEM;
    float *img = (float *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    memset(img, 0, sizeof(float) * (size_t)(16 * hp * wp));
    float *out = img + 16 * hp * wp, *wt = out + 16 * oh * ow, *b16 = wt + 16 * taps;
    const float **src = (const float **)(b16 + 16), **rows = src + 16;
    const int in_regs = act_in_regs16(act), simd = aioge_simd_avx2(-1);
    int rc = 0;
    for (int64_t p = p0; p < p1; p += 16) {
        const int64_t lanes = p1 - p < 16 ? p1 - p : 16;
        if (lanes <= 8) {
            rc = dwconv8(x, w, bias, y, g, p, p1); /* in the same buffer: this one is done with */
            break;
        }
        const float *planes[16];
        const int64_t om0 = p % m;
        const int apart = mult == 1 && lanes == 16 && om0 + 16 <= m && simd != 10; /* planes[k] = planes[0] + k h wd */
        if (apart) {
            /* 16 channels of one image (plane p + k, filter om0 + k): the filters' taps by 16x16
             * transposes, no division a plane (a 7x7 plane's taps and divisions cost about what
             * its transposes do) */
            for (int k = 0; k < 16; k++)
                planes[k] = x + (p + k) * h * wd;
            for (int64_t t = 0; t < taps; t += 16) {
                const __mmask16 mk = mask16(taps - t);
                __m512 v[16];
                for (int k = 0; k < 16; k++)
                    v[k] = _mm512_maskz_loadu_ps(mk, w + (om0 + k) * taps + t);
                transpose16(v);
                for (int64_t k = 0; k < 16 && t + k < taps; k++)
                    _mm512_store_ps(wt + 16 * (t + k), v[k]);
            }
            _mm512_store_ps(b16, bias ? _mm512_loadu_ps(bias + om0) : _mm512_setzero_ps());
        } else
            for (int64_t k = 0; k < 16; k++) { /* lanes past the range repeat the last: computed, not written */
                const int64_t q = p + (k < lanes ? k : lanes - 1), om = q % m;
                planes[k] = x + ((q / m) * c + om / mult) * h * wd;
                for (int64_t t = 0; t < taps; t++)
                    wt[16 * t + k] = w[om * taps + t];
                b16[k] = bias ? bias[om] : 0.0f;
            }
        if (wd < 16 && simd != 10)
            interleave16_flat(planes, h, wd, wp, pt, pl, img, apart);
        else
            for (int64_t r = 0; r < h; r++) {
                for (int k = 0; k < 16; k++)
                    src[k] = planes[k] + r * wd;
                interleave16(src, wd, img + 16 * ((r + pt) * wp + pl));
            }
        const __m512 b = _mm512_load_ps(b16);
        const int64_t rstep = 16 * sh * wp, ostep = 16 * ow;
        for (int64_t r = 0; r < oh; r++) {
            const int two = r + 1 < oh;
            for (int64_t i = 0; i < kh; i++)
                rows[i] = img + 16 * (r * sh + i * dh) * wp;
            float *o = out + 16 * r * ow;
            if (ow % 7 == 0) { /* the 7x7, 14x14, 28x28 planes in blocks of 7 */
                for (int64_t q = 0; q < ow; q += 7) {
                    if (two)
                        pixels16(rows, wt, b, kh, kw, sw, dw, q, o + 16 * q, 7, 2, rstep, ostep);
                    else
                        pixels16(rows, wt, b, kh, kw, sw, dw, q, o + 16 * q, 7, 1, rstep, ostep);
                }
            } else if (ow >= 8) {
                for (int64_t q = 0; q < ow; q += 8) {
                    const int64_t qq = q + 8 <= ow ? q : ow - 8; /* the last 8 overlapping: the same values again */
                    if (two)
                        pixels16(rows, wt, b, kh, kw, sw, dw, qq, o + 16 * qq, 8, 2, rstep, ostep);
                    else
                        pixels16(rows, wt, b, kh, kw, sw, dw, qq, o + 16 * qq, 8, 1, rstep, ostep);
                }
            } else if (ow >= 4) {
                for (int64_t q = 0; q < ow; q += 4) {
                    const int64_t qq = q + 4 <= ow ? q : ow - 4;
                    if (two)
                        pixels16(rows, wt, b, kh, kw, sw, dw, qq, o + 16 * qq, 4, 2, rstep, ostep);
                    else
                        pixels16(rows, wt, b, kh, kw, sw, dw, qq, o + 16 * qq, 4, 1, rstep, ostep);
                }
            } else
                for (int64_t q = 0; q < ow; q++) {
                    if (two)
                        pixels16(rows, wt, b, kh, kw, sw, dw, q, o + 16 * q, 1, 2, rstep, ostep);
                    else
                        pixels16(rows, wt, b, kh, kw, sw, dw, q, o + 16 * q, 1, 1, rstep, ostep);
                }
            r += two;
        }
        if (act && !in_regs)
            aioge_act_span(out, NULL, out, 16 * oh * ow, act, a0, a1);
        /* back into the planes: 16x16 transposes, the activation applied before them */
        const int64_t n = oh * ow;
        float *dst = y + p * n;
        for (int64_t t = 0; t < n; t += 16) {
            const __mmask16 mk = mask16(n - t);
            if (n - t <= 3 && simd != 10) { /* the last 1 to 3 pixels (a 7x7 plane's 49th): a scatter each, no transpose */
                const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                      _mm512_set1_epi32((int)n));
                for (int64_t k = t; k < n; k++) {
                    __m512 v = _mm512_load_ps(out + 16 * k);
                    if (in_regs)
                        switch (act) {
                        case ACT_SWISH: v = act16(v, ACT_SWISH, a0, a1); break;
                        case ACT_HARDSWISH: v = act16(v, ACT_HARDSWISH, a0, a1); break;
                        case ACT_RELU: v = act16(v, ACT_RELU, a0, a1); break;
                        default: v = act16(v, act, a0, a1);
                        }
                    _mm512_mask_i32scatter_ps(dst + k, mask16(lanes), at, v, 4);
                }
                break;
            }
            __m512 v[16];
            for (int k = 0; k < 16; k++)
                v[k] = t + k < n ? _mm512_load_ps(out + 16 * (t + k)) : _mm512_setzero_ps();
            if (in_regs)
                switch (act) {
                case ACT_SWISH: for (int k = 0; k < 16; k++) v[k] = act16(v[k], ACT_SWISH, a0, a1); break;
                case ACT_HARDSWISH: for (int k = 0; k < 16; k++) v[k] = act16(v[k], ACT_HARDSWISH, a0, a1); break;
                case ACT_RELU: for (int k = 0; k < 16; k++) v[k] = act16(v[k], ACT_RELU, a0, a1); break;
                default: for (int k = 0; k < 16; k++) v[k] = act16(v[k], act, a0, a1);
                }
            transpose16(v);
            if (lanes == 16) /* the stores unrolled: v stays in registers */
                _Pragma("GCC unroll 16")
                for (int k = 0; k < 16; k++)
                    _mm512_mask_storeu_ps(dst + k * n + t, mk, v[k]);
            else
                for (int64_t k = 0; k < lanes; k++)
                    _mm512_mask_storeu_ps(dst + k * n + t, mk, v[k]);
        }
    }
    return rc;
}
#endif

/* n values of each of the eight runs src[k] into dst as n 8-vectors (dst[8 t + k] = src[k][t]) */
AVX2 static void interleave8(const float *const *src, int64_t n, float *dst)
{
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
        __m256 r[8];
        for (int k = 0; k < 8; k++)
            r[k] = _mm256_loadu_ps(src[k] + t);
        transpose8(r);
        for (int k = 0; k < 8; k++)
            _mm256_storeu_ps(dst + 8 * (t + k), r[k]);
    }
    if (t < n) { /* the last n - t columns by masked loads: no read past a run */
        const __m256i mask = tail_mask(n - t);
        __m256 r[8];
        for (int k = 0; k < 8; k++)
            r[k] = _mm256_maskload_ps(src[k] + t, mask);
        transpose8(r);
        for (int64_t k = 0; k < n - t; k++)
            _mm256_storeu_ps(dst + 8 * (t + k), r[k]);
    }
}

/* bq outputs of nr rows (1 or 2), from q: acc = b + sum of taps, each tap a weight vector and bq
 * inputs sw vectors apart (row pointers of the taps' kernel rows in ``rows``, the next output
 * row's rstep floats on, its outputs ostep on): a 7x7 plane's rows of 4 two at a time, eight
 * independent sums, not four chains stalled on the multiply-add's latency */
AVX2 static inline __attribute__((always_inline)) void pixels8(const float *const *rows, const float *wt, __m256 b, int64_t kh,
                                                                int64_t kw, int64_t sw, int64_t dw, int64_t q, float *out, const int bq,
                                                                const int nr, int64_t rstep, int64_t ostep)
{
    __m256 acc[2][8];
    for (int rr = 0; rr < nr; rr++)
        for (int u = 0; u < bq; u++)
            acc[rr][u] = b;
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            const __m256 w = _mm256_loadu_ps(wt + 8 * (i * kw + j));
            const float *s = rows[i] + 8 * (q * sw + j * dw);
            for (int rr = 0; rr < nr; rr++)
                for (int u = 0; u < bq; u++)
                    acc[rr][u] = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + rr * rstep + 8 * sw * u), acc[rr][u]);
        }
    for (int rr = 0; rr < nr; rr++)
        for (int u = 0; u < bq; u++)
            _mm256_storeu_ps(out + rr * ostep + 8 * u, acc[rr][u]);
}

AVX2 static int dwconv8(const float *x, const float *w, const float *bias, float *y, const int64_t *g, int64_t p0, int64_t p1)
{
    const int64_t c = g[0], h = g[1], wd = g[2], mult = g[3], kh = g[4], kw = g[5], sh = g[6], sw = g[7], dh = g[8], dw = g[9],
                  pt = g[10], pl = g[11], oh = g[12], ow = g[13];
    const int act = (int)g[14];
    const float a0 = aioge_float_of(g[15]), a1 = aioge_float_of(g[16]);
    const int64_t m = c * mult, taps = kh * kw;
    int64_t hp = (oh - 1) * sh + (kh - 1) * dh + 1, wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    hp = hp > pt + h ? hp : pt + h;
    wp = wp > pl + wd ? wp : pl + wd;
    const size_t floats = (size_t)(8 * (hp * wp + oh * ow + taps + 1)) + (size_t)(8 + kh) * sizeof(void *) / sizeof(float) + 8;
    float *img = aioge_thread_scratch(2, floats); /* as dwconv16's */
    if (!img)
        return AIOGE_ENOMEM;
    memset(img, 0, sizeof(float) * (size_t)(8 * hp * wp));
    float *out = img + 8 * hp * wp, *wt = out + 8 * oh * ow, *b8 = wt + 8 * taps;
    const float **src = (const float **)(b8 + 8), **rows = src + 8;
    const int former = aioge_simd_avx2(-1) == 10;
    for (int64_t p = p0; p < p1; p += 8) {
        const int64_t lanes = p1 - p < 8 ? p1 - p : 8, om0 = p % m;
        const float *planes[8];
        if (mult == 1 && lanes == 8 && om0 + 8 <= m && !former) {
            /* 8 channels of one image: the filters' taps by 8x8 transposes, no division a plane */
            for (int k = 0; k < 8; k++)
                planes[k] = x + (p + k) * h * wd;
            for (int64_t t = 0; t < taps; t += 8) {
                const __m256i mk = tail_mask(taps - t < 8 ? taps - t : 8);
                __m256 v[8];
                for (int k = 0; k < 8; k++)
                    v[k] = _mm256_maskload_ps(w + (om0 + k) * taps + t, mk);
                transpose8(v);
                for (int64_t k = 0; k < 8 && t + k < taps; k++)
                    _mm256_storeu_ps(wt + 8 * (t + k), v[k]);
            }
            _mm256_storeu_ps(b8, bias ? _mm256_loadu_ps(bias + om0) : _mm256_setzero_ps());
        } else
            for (int64_t k = 0; k < 8; k++) { /* lanes past the range repeat the last: computed, not written */
                const int64_t q = p + (k < lanes ? k : lanes - 1), om = q % m;
                planes[k] = x + ((q / m) * c + om / mult) * h * wd;
                for (int64_t t = 0; t < taps; t++)
                    wt[8 * t + k] = w[om * taps + t];
                b8[k] = bias ? bias[om] : 0.0f;
            }
        for (int64_t r = 0; r < h; r++) {
            for (int k = 0; k < 8; k++)
                src[k] = planes[k] + r * wd;
            interleave8(src, wd, img + 8 * ((r + pt) * wp + pl));
        }
        const __m256 b = _mm256_loadu_ps(b8);
        const int64_t rstep = 8 * sh * wp, ostep = 8 * ow;
        const int two = aioge_simd_avx2(-1) != 4; /* 4: the former form, for the benches */
        for (int64_t r = 0; r < oh; r++) {
            for (int64_t i = 0; i < kh; i++)
                rows[i] = img + 8 * (r * sh + i * dh) * wp;
            float *o = out + 8 * r * ow;
            int64_t q = 0;
            if (two && ow % 7 == 0) { /* the 7x7, 14x14, 28x28 planes in blocks of 7: no overlap */
                if (ow == 7 && r + 1 < oh) { /* a 7x7 plane two rows at a time */
                    pixels8(rows, wt, b, kh, kw, sw, dw, 0, o, 7, 2, rstep, ostep);
                    r++;
                } else
                    for (; q < ow; q += 7)
                        pixels8(rows, wt, b, kh, kw, sw, dw, q, o + 8 * q, 7, 1, 0, 0);
            } else if (ow >= 8) {
                for (; q + 8 <= ow; q += 8)
                    pixels8(rows, wt, b, kh, kw, sw, dw, q, o + 8 * q, 8, 1, 0, 0);
                if (q < ow) /* the last 8, overlapping the block before: the same values again */
                    pixels8(rows, wt, b, kh, kw, sw, dw, ow - 8, o + 8 * (ow - 8), 8, 1, 0, 0);
            } else if (two && r + 1 < oh) { /* two rows at a time */
                if (ow >= 4) {
                    pixels8(rows, wt, b, kh, kw, sw, dw, 0, o, 4, 2, rstep, ostep);
                    if (ow > 4)
                        pixels8(rows, wt, b, kh, kw, sw, dw, ow - 4, o + 8 * (ow - 4), 4, 2, rstep, ostep);
                } else
                    for (; q < ow; q++)
                        pixels8(rows, wt, b, kh, kw, sw, dw, q, o + 8 * q, 1, 2, rstep, ostep);
                r++;
            } else if (ow >= 4) {
                pixels8(rows, wt, b, kh, kw, sw, dw, 0, o, 4, 1, 0, 0);
                if (ow > 4)
                    pixels8(rows, wt, b, kh, kw, sw, dw, ow - 4, o + 8 * (ow - 4), 4, 1, 0, 0);
            } else
                for (; q < ow; q++)
                    pixels8(rows, wt, b, kh, kw, sw, dw, q, o + 8 * q, 1, 1, 0, 0);
        }
        /* Sigmoid and Swish a pass of their own here: in the transposes' registers, no faster */
        const int in_regs = act_in_regs(act) && act != ACT_SWISH && act != ACT_SIGMOID;
        if (act && !in_regs)
            aioge_act_span(out, NULL, out, 8 * oh * ow, act, a0, a1);
        /* back into the planes: 8x8 transposes (the simple activations applied there) */
        const int64_t n = oh * ow;
        float *dst = y + p * n;
        int64_t t = 0;
        for (; t + 8 <= n; t += 8) {
            __m256 v[8];
            for (int k = 0; k < 8; k++)
                v[k] = _mm256_loadu_ps(out + 8 * (t + k));
            if (in_regs)
                act8(v, act, a0, a1);
            transpose8(v);
            if (lanes == 8) /* unrolled: v stays in registers */
                _Pragma("GCC unroll 8")
                for (int k = 0; k < 8; k++)
                    _mm256_storeu_ps(dst + k * n + t, v[k]);
            else
                for (int64_t k = 0; k < lanes; k++)
                    _mm256_storeu_ps(dst + k * n + t, v[k]);
        }
        if (t < n && n - t <= 2 && !former) { /* the last 1 or 2 pixels (a 7x7 plane's 49th): scalar stores, no transpose */
            for (; t < n; t++) {
                __m256 v = _mm256_loadu_ps(out + 8 * t);
                if (in_regs)
                    v = act1(v, act, a0, a1);
                float e[8];
                _mm256_storeu_ps(e, v);
                for (int64_t k = 0; k < lanes; k++)
                    dst[k * n + t] = e[k];
            }
        }
        if (t < n) { /* the last n - t outputs of each plane by masked stores */
            const __m256i mask = tail_mask(n - t);
            __m256 v[8];
            for (int k = 0; k < 8; k++)
                v[k] = t + k < n ? _mm256_loadu_ps(out + 8 * (t + k)) : _mm256_setzero_ps();
            if (in_regs)
                act8(v, act, a0, a1);
            transpose8(v);
            for (int64_t k = 0; k < lanes; k++)
                _mm256_maskstore_ps(dst + k * n + t, mask, v[k]);
        }
    }
    return 0;
}

/* -- the direct form on AVX2 (8 lanes): direct_block16's blocks of R output rows by NV (1 or 2)
 * vectors of 8 columns straight from the input plane, each input line the block reads loaded
 * once and multiplied into every output row that reads it, the same sums in the same order;
 * stride 2's even and odd columns taken apart by a shuffle and a lane permute each. Blocks
 * whose columns lie inside the plane load plainly (EDGE 0), the others masked (lanes outside
 * the plane read zero). -- */

#define DROWS8 4 /* output rows a block */

/* lanes k of 8 with 0 <= c + k < wd */
AVX2 static inline __m256i cols8(int64_t c, int64_t wd)
{
    const __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(k, _mm256_set1_epi32((int)(-c - 1))), _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(wd - c)), k));
}

AVX2 static inline __attribute__((always_inline)) __m256 load8(const float *s, __m256i m, const int EDGE)
{
    return EDGE ? _mm256_maskload_ps(s, m) : _mm256_loadu_ps(s);
}

AVX2 static inline __attribute__((always_inline)) void direct_block8(const float *xp, int64_t h, int64_t wd, int64_t pt, int64_t pl,
                                                                     const float *wt, __m256 b, const int K, const int S, const int R,
                                                                     const int NV, const int EDGE, int64_t r, int64_t q, float *o,
                                                                     int64_t ow, int64_t nlast, const int act, float a0, float a1)
{
    __m256i mk[2][6];
    int64_t c0[2][6];
    for (int u = 0; u < NV; u++)
        if (S == 1)
            for (int j = 0; j < K; j++) {
                c0[u][j] = q + 8 * u + j - pl;
                if (EDGE)
                    mk[u][j] = cols8(c0[u][j], wd);
            }
        else
            for (int j = 0; j < K; j += 2) { /* the 16 columns from 2 q + j - pl: taps j (even) and j + 1 (odd) */
                c0[u][j] = S * (q + 8 * u) + j - pl;
                if (EDGE) {
                    mk[u][j] = cols8(c0[u][j], wd);
                    mk[u][j + 1] = cols8(c0[u][j] + 8, wd);
                }
            }
    __m256 acc[4][2];
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++)
            acc[p][u] = b;
    _Pragma("GCC unroll 32")
    for (int t = 0; t < (R - 1) * S + K; t++) {
        const int64_t ir = r * S - pt + t;
        if (ir < 0 || ir >= h)
            continue; /* a padding row: no taps */
        const float *s = xp + ir * wd;
        _Pragma("GCC unroll 2")
        for (int u = 0; u < NV; u++) {
            __m256 v[5];
            _Pragma("GCC unroll 8")
            for (int j = 0; j < K; j += S) {
                if (S == 1)
                    v[j] = load8(s + c0[u][j], mk[u][j], EDGE);
                else {
                    const __m256 lo = load8(s + c0[u][j], mk[u][j], EDGE), hi = load8(s + c0[u][j] + 8, mk[u][j + 1], EDGE);
                    v[j] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
                    if (j + 1 < K)
                        v[j + 1] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
                }
            }
            _Pragma("GCC unroll 8")
            for (int p = 0; p < R; p++) {
                const int i = t - p * S; /* the kernel row this line is to output row r + p */
                if (i >= 0 && i < K)
                    _Pragma("GCC unroll 8")
                    for (int j = 0; j < K; j++)
                        acc[p][u] = _mm256_fmadd_ps(_mm256_broadcast_ss(wt + i * K + j), v[j], acc[p][u]);
            }
        }
    }
    for (int p = 0; p < R; p++)
        for (int u = 0; u < NV; u++) {
            const __m256 y = act == ACT_NONE ? acc[p][u] : act1(acc[p][u], act, a0, a1);
            float *d = o + (r + p) * ow + q + 8 * u;
            if (u == NV - 1 && nlast < 8)
                _mm256_maskstore_ps(d, tail_mask(nlast), y);
            else
                _mm256_storeu_ps(d, y);
        }
}

/* R rows from r, every column block: 16 columns a block (NV 2), a last block of 1-8 or 9-15 */
AVX2 static inline __attribute__((always_inline)) void direct_rows8(const float *xp, int64_t h, int64_t wd, int64_t pt, int64_t pl,
                                                                    const float *wt, __m256 b, const int K, const int S, const int R,
                                                                    int64_t r, float *out, int64_t ow, const int act, float a0, float a1)
{
    for (int64_t q = 0; q < ow; q += 16) {
        const int64_t n = ow - q < 16 ? ow - q : 16;
        const int two = n > 8;
        /* the columns the block reads: [S q - pl, S (q + 8 NV - 8) + K - 1 - pl + 8 S) */
        const int64_t lo = S * q - pl, hi = S * (q + (two ? 8 : 0)) + (S == 1 ? K - 1 + 8 : (K - 1) / 2 * 2 + 16) - pl;
        const int edge = lo < 0 || hi > wd;
        if (two && edge)
            direct_block8(xp, h, wd, pt, pl, wt, b, K, S, R, 2, 1, r, q, out, ow, n - 8, act, a0, a1);
        else if (two)
            direct_block8(xp, h, wd, pt, pl, wt, b, K, S, R, 2, 0, r, q, out, ow, n - 8, act, a0, a1);
        else if (edge)
            direct_block8(xp, h, wd, pt, pl, wt, b, K, S, R, 1, 1, r, q, out, ow, n, act, a0, a1);
        else
            direct_block8(xp, h, wd, pt, pl, wt, b, K, S, R, 1, 0, r, q, out, ow, n, act, a0, a1);
    }
}

AVX2 static inline __attribute__((always_inline)) void direct_plane8(const float *xp, const int64_t *g, const float *wt, float bias,
                                                                     float *out, const int K, const int S, const int act, float a0,
                                                                     float a1)
{
    const int64_t h = g[1], wd = g[2], pt = g[10], pl = g[11], oh = g[12], ow = g[13];
    const __m256 b = _mm256_set1_ps(bias);
    int64_t r = 0;
    for (; r + DROWS8 <= oh; r += DROWS8)
        direct_rows8(xp, h, wd, pt, pl, wt, b, K, S, DROWS8, r, out, ow, act, a0, a1);
    if (oh - r == 2)
        direct_rows8(xp, h, wd, pt, pl, wt, b, K, S, 2, r, out, ow, act, a0, a1);
    else if (oh - r == 3)
        direct_rows8(xp, h, wd, pt, pl, wt, b, K, S, 3, r, out, ow, act, a0, a1);
    else if (oh - r == 1)
        direct_rows8(xp, h, wd, pt, pl, wt, b, K, S, 1, r, out, ow, act, a0, a1);
}

AVX2 static inline __attribute__((always_inline)) void direct_act8(const float *xp, const int64_t *g, const float *wt, float bias,
                                                                   float *out, const int K, const int S, int act, float a0, float a1)
{
    switch (act) {
    case ACT_RELU: direct_plane8(xp, g, wt, bias, out, K, S, ACT_RELU, a0, a1); break;
    case ACT_CLIP: direct_plane8(xp, g, wt, bias, out, K, S, ACT_CLIP, a0, a1); break;
    case ACT_HARDSWISH: direct_plane8(xp, g, wt, bias, out, K, S, ACT_HARDSWISH, a0, a1); break;
#if SIGMOID_REGS
    case ACT_SWISH: direct_plane8(xp, g, wt, bias, out, K, S, ACT_SWISH, a0, a1); break;
#endif
    default:
        direct_plane8(xp, g, wt, bias, out, K, S, ACT_NONE, a0, a1);
        act_run(out, g[12] * g[13], act, a0, a1);
    }
}

/* output planes [p0, p1) by the AVX2 direct form (lines_fit's geometries with equal strides) */
AVX2 static int dwconv_direct8(const float *x, const float *w, const float *bias, float *y, const int64_t *g, int64_t p0, int64_t p1)
{
    const int64_t c = g[0], h = g[1], wd = g[2], mult = g[3], K = g[4], S = g[6], oh = g[12], ow = g[13];
    const int act = (int)g[14];
    const float a0 = aioge_float_of(g[15]), a1 = aioge_float_of(g[16]);
    const int64_t m = c * mult;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t om = p % m;
        const float *xp = x + ((p / m) * c + om / mult) * h * wd, *wt = w + om * K * K;
        const float b = bias ? bias[om] : 0.0f;
        float *out = y + p * oh * ow;
        if (K == 3 && S == 1)
            direct_act8(xp, g, wt, b, out, 3, 1, act, a0, a1);
        else if (K == 3)
            direct_act8(xp, g, wt, b, out, 3, 2, act, a0, a1);
        else if (S == 1)
            direct_act8(xp, g, wt, b, out, 5, 1, act, a0, a1);
        else
            direct_act8(xp, g, wt, b, out, 5, 2, act, a0, a1);
    }
    return 0;
}

#ifdef __AVX512F__
#define DIRECT8 0 /* the 16-lane forms instead */
#else
#define DIRECT8 1
#endif

/* where the AVX2 direct form beat the eight-plane and line forms (AVX2 tier, thread CPU, one
 * call of every plane): 3x3 stride 2 on rows of 48 and up (MobileNetV3's 16x112x112 ReLU 63.6 ->
 * 47.1 us, EfficientNet's 96x112x112 Swish 503 -> 396, MobileNetV2's ReLU6 428 -> 328, MnasNet's
 * 48x112x112 206 -> 148), 3x3 stride 1 on rows of 64 and up but for Sigmoid and Swish (32x112x112
 * ReLU6 256 -> 228, ReLU 222 -> 209; Swish 320 -> 329). Lost: 5x5 (EfficientNet's 672x14x14
 * 194 -> 254, MnasNet's 240x28x28 s2 83 -> 106), stride 2 on rows of 28 and under (144x56x56
 * 142 -> 154, 576x14x14 46 -> 53), stride 1 on 14x14 and 7x7 (960x7x7 49 -> 57); 56x56 and
 * 28x28 stride 1 mixed (72x56x56 107 -> 120 and 115 -> 114, 88x28x28 47 -> 53, 192x28x28 154 -> 120). */
static int direct8_wins(const int64_t *g)
{
    const int sig = g[14] == ACT_SWISH || g[14] == ACT_SIGMOID;
    return g[4] == 3 && ((g[6] == 2 && g[13] >= 48) || (g[6] == 1 && g[13] >= 64 && !sig));
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
    /* eight planes at a time where its padded image stays in L2 (a 112x112 plane's does not:
     * there the flat-phase form is faster) and the range has most of eight planes; the factors
     * bounded first, so the extents below cannot overflow */
    int simd = aioge_simd_avx2(-1);
    const int direct = simd != 7; /* 7: as 1 without the direct form, for the benches */
    simd = simd == 7 || simd == 11 || simd == 13 ? 1 : simd == 10 ? 3 : simd; /* 10: 3 with the former copies in, for the tests; 13: 1 with the former stride-2 blocks */
    for (int i = 1; i <= 13; i++)
        if (g[i] < 0 || g[i] > 4096)
            return dwconv(x, w, bias, y, geometry, p0, p1, simd == 1 || simd == 5);
    /* the AVX2 direct form: forced by 14 (the tests), else where it measured faster on the
     * tiers without AVX-512 */
    const int fit8 = g[4] == g[5] && g[8] == 1 && g[9] == 1 && (g[4] == 3 || g[4] == 5) && g[6] == g[7] && (g[6] == 1 || g[6] == 2);
    if (fit8 && (simd == 14 || (simd == 1 && DIRECT8 && direct8_wins(g))))
        return dwconv_direct8(x, w, bias, y, geometry, p0, p1);
    int64_t hp = (g[12] - 1) * g[6] + (g[4] - 1) * g[8] + 1, wp = (g[13] - 1) * g[7] + (g[5] - 1) * g[9] + 1;
    hp = hp > g[10] + g[1] ? hp : g[10] + g[1];
    wp = wp > g[11] + g[2] ? wp : g[11] + g[2];
    /* the line form where it measured faster (3x3 stride 1 rows of 16 and up: 144x56x56 with its
     * Swish 642 -> 550 us, 32x112x112 460 -> 420, thread CPU; 3x3 stride 2 on planes too big
     * for eight at a time: EfficientNet's 96x112x112 296 -> 273); the others as before */
    const int s1 = g[6] == 1 && g[7] == 1 && g[13] >= 16, s2 = g[6] == 2 && g[7] == 2 && hp * wp > 8192;
#ifdef __AVX512F__
    /* 16 lanes: the line form on rows of 16 and up, 3x3 and 5x5, stride 1 and 2 (thread CPU:
     * MobileNetV3's 72x56x56 3x3 s2 67 -> 56 us, 88x28x28 3x3 56 -> 40 against the 16-plane form;
     * 5x5 on rows of 28 the same either way); rows of 14 and 7 (a zmm half or more idle) 16
     * planes at a time (480x14x14 3x3 111 -> 79, 1152x7x7 5x5 225 -> 83) */
    const int lines = simd == 5 || (simd == 1 && lines_fit(g) && g[6] == g[7] && g[13] >= 16);
    (void)s1, (void)s2;
#else
    (void)direct;
    const int lines = simd == 5 || (simd == 1 && g[4] == 3 && g[5] == 3 && g[8] == 1 && (s1 || s2));
#endif
#ifdef __AVX512F__
    /* the direct form on rows of 12 and up (a 7-wide row leaves 9 of 16 lanes idle: there the
     * 16-plane form, 960x7x7 3x3 58 -> 42 us), 3x3, and 5x5 stride 2 but for Swish and Sigmoid
     * (thread CPU against the former choice: MobileNetV2's ReLU6 96x112x112 s2 310 -> 245 us,
     * 144x56x56 s2 122 -> 91, 192x28x28 s2 44 -> 31, 576x14x14 78 -> 56, 32x112x112 166 -> 133;
     * MnasNet's 72x56x56 5x5 s2 73 -> 68; with Swish 5x5 lost: 240x28x28 183 -> 217,
     * 672x14x14 157 -> 193; 5x5 stride 1 otherwise even; 3x3 stride 1 with Swish on rows under
     * 16 too, since the 16-plane form's copies got cheaper: EfficientNet's 480x14x14 70.6 -> 64.3);
     * simd 6 forces it, for the tests */
    const int sig = g[14] == ACT_SWISH || g[14] == ACT_SIGMOID;
    const int dir3 = g[4] == 3 && !(sig && g[6] == 1 && g[13] < 16);
    if (lines_fit(g) && g[6] == g[7] && g[9] == 1 &&
        (simd == 6 || (simd == 1 && direct && g[13] >= 12 && (dir3 || (g[6] == 2 && !sig)))))
        return dwconv_direct16(x, w, bias, y, geometry, p0, p1);
    if (simd == 3 || (simd % 3 == 1 && !lines && p1 - p0 >= 6 && hp * wp <= 8192))
        return dwconv16(x, w, bias, y, geometry, p0, p1);
#endif
    if (simd == 3 || (simd % 3 == 1 && !lines && p1 - p0 >= 6 && hp * wp <= 8192))
        return dwconv8(x, w, bias, y, geometry, p0, p1);
    return dwconv(x, w, bias, y, geometry, p0, p1, lines);
}
