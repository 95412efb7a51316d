/* Row normalisations (LayerNorm, Softmax, LogSoftmax) and the transcendental activations
 * (Erf, GELU, Sigmoid, SiLU/Swish, HardSigmoid, HardSwish, Tanh) in float32.
 *
 * numpy runs each of these as several whole-array passes with temporaries (GELU's erf: a dozen),
 * and a small row costs a handful of ufunc calls each; here a row or a block of elements is one
 * loop while it sits in L1. Row kernels take a row range [r0, r1) and elementwise kernels an
 * element range [n0, n1), so two threads can run the two halves of one tensor.
 *
 * The arithmetic is IEEE (no -ffast-math: NaN and infinities propagate as numpy's do). exp and
 * erf are evaluated by our own branch-free polynomials below instead of libm's expf/erff, which
 * are scalar calls (gcc vectorises libm only under -ffast-math): these vectorise under
 * `omp simd`. Accuracy: exp within 1 float32 ulp (0.92 measured over [-87.3, 89]; 0 below,
 * where e^x < 1.22e-38); erf within 5e-7 absolute (the rational form Eigen and XLA use in
 * float32, which the numpy fused kernel uses too).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <stdlib.h>

#include "aioge.h"
#include "mathf.h"

/* Products and sums round one by one, as numpy's ufuncs round them (HardSigmoid's alpha x + beta
 * equals numpy's to the bit); the polynomials below ask for fused multiply-adds explicitly. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* gcc keeps AVX-512 machines at 256-bit vectors by default (older chips slowed their clocks for
 * 512-bit work); these loops are arithmetic-bound and gain from the full width. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif

/* ---- erf ------------------------------------------------------------------------------------- */

/* erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4], +-1 beyond (erf rounds to +-1 in float32 there):
 * the rational approximation of Eigen's and XLA's float erf; within 5e-7 of the true erf.
 * NaN passes through the clamp and the arithmetic. */
static inline float erf_f32(float x) {
    float c = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
    float t = c * c;
    float p = -2.72614225801306e-10f;
    p = fma_f32(p, t, 2.77068142495902e-08f);
    p = fma_f32(p, t, -2.10102402082508e-06f);
    p = fma_f32(p, t, -5.69250639462346e-05f);
    p = fma_f32(p, t, -7.34990630326855e-04f);
    p = fma_f32(p, t, -2.95459980854025e-03f);
    p = fma_f32(p, t, -1.60960333262415e-02f);
    float q = -1.45660718464996e-05f;
    q = fma_f32(q, t, -2.13374055278905e-04f);
    q = fma_f32(q, t, -1.68282697438203e-03f);
    q = fma_f32(q, t, -7.37332916720468e-03f);
    q = fma_f32(q, t, -1.42647390514189e-02f);
    return c * p / q;
}

/* tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)): within 1e-7 absolute (not relative near 0, so
 * only GELU's tanh form uses it, where it is multiplied by x / 2 and added to 1). */
static inline float tanh_abs_f32(float x) {
    float a = fabsf(x);
    float t = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
    return copysignf(t, x);
}

/* tanh(x) within 2 ulp of float64 (1.6 measured, tests/engines/test_native_rows.py): below
 * |x| = 0.625 x + x^3 P(x^2), P a degree-4 fit (0.11 ulp; tanh_abs_f32's 1 - 2 / (e^2|x| + 1)
 * loses all relative accuracy near 0); above it that form, where 2 / (e + 1) is below
 * tanh's 0.55 and its rounding stays within an ulp of the result. Both sides are computed and
 * one picked, so the loop vectorises; +-inf gives +-1, NaN passes, tiny x (x^2 underflowing)
 * gives x. */
static inline float tanh_f32(float x) {
    float a = fabsf(x), u = x * x;
    float p = -0.005748813971877098f;
    p = fma_f32(p, u, 0.02068084292113781f);
    p = fma_f32(p, u, -0.05375354364514351f);
    p = fma_f32(p, u, 0.1333162486553192f);
    p = fma_f32(p, u, -0.333332896232605f);
    float small = fma_f32(x * u, p, x);
    float big = copysignf(1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f), x);
    return a < 0.625f ? small : big;
}

/* ---- row kernels ------------------------------------------------------------------------------ */

/* LayerNormalization of rows [r0, r1) of a (rows, width) matrix: y = (x - mean) * inv * scale
 * + bias, inv = 1 / sqrt(var + eps), the variance of the centred row (sweeps over a row in L1,
 * not the cancelling E[x^2] - mean^2). bias, mean_out and inv_out may be NULL. */
void aioge_layernorm_f32(const float *x, const float *scale, const float *bias, float *y, float *mean_out, float *inv_out,
                         int64_t width, float eps, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * width;
        float *yr = y + r * width;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < width; i++)
            sum += xr[i];
        float mean = sum / (float)width;
        /* The float32 mean of a row far from 0 (x = 29 +- 0.001) is off by an ulp of 29, which
         * is large beside the spread: the second sweep also sums the residuals and corrects
         * the mean and the variance by them (the "corrected two-pass" variance). */
        float ss = 0.0f, sd = 0.0f;
#pragma omp simd reduction(+ : ss, sd)
        for (int64_t i = 0; i < width; i++) {
            float d = xr[i] - mean;
            sd += d;
            ss = fma_f32(d, d, ss);
        }
        float shift = sd / (float)width;
        mean += shift;
        float var = ss / (float)width - shift * shift;
        float inv = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + eps);
        if (bias) {
#pragma omp simd
            for (int64_t i = 0; i < width; i++)
                yr[i] = fma_f32((xr[i] - mean) * inv, scale[i], bias[i]);
        } else {
#pragma omp simd
            for (int64_t i = 0; i < width; i++)
                yr[i] = (xr[i] - mean) * inv * scale[i];
        }
        if (mean_out)
            mean_out[r] = mean;
        if (inv_out)
            inv_out[r] = inv;
    }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* exp_f32 over 8 lanes for x <= 0 or NaN (a softmax's shifted scores): e^x below -87.3 is 0, NaN
 * passes; the same reduction and Taylor polynomial, 2^n (n in [-126, 0]) one normal factor. */
static inline __attribute__((always_inline)) __m256 exp8_nonpos(__m256 x) {
    const __m256 lowest = _mm256_set1_ps(-87.3f), shifter = _mm256_set1_ps(12582912.0f), one = _mm256_set1_ps(1.0f);
    const __m256 xc = _mm256_max_ps(lowest, x); /* NaN x passes (max_ps gives its second operand) */
    __m256 kf = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), shifter);
    const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(kf), _mm256_set1_epi32(0x4B400000));
    kf = _mm256_sub_ps(kf, shifter);
    __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(1.42860682030941723e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_fmadd_ps(p, r, one);
    const __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lowest, _CMP_LT_OQ), _mm256_mul_ps(p, s));
}

/* One softmax row in 8s, the tail (under 8) through exp_f32: the maximum, e^(x - max) stored and
 * summed, then times 1 / sum. BERT-base's 12 x 128 x 128 scores: 186 -> 119 us (thread CPU, load 5). */
static __attribute__((unused)) void softmax_row8(const float *xr, float *yr, int64_t width) {
    const int64_t w8 = width & ~(int64_t)7;
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < w8; i += 8)
        mv = _mm256_max_ps(_mm256_loadu_ps(xr + i), mv); /* a NaN x is skipped, as below */
    float lanes[8], m = -INFINITY;
    _mm256_storeu_ps(lanes, mv);
    for (int j = 0; j < 8; j++)
        m = lanes[j] > m ? lanes[j] : m;
    for (int64_t i = w8; i < width; i++)
        m = xr[i] > m ? xr[i] : m;
    const __m256 mm = _mm256_set1_ps(m);
    __m256 sv = _mm256_setzero_ps();
    for (int64_t i = 0; i < w8; i += 8) {
        const __m256 e = exp8_nonpos(_mm256_sub_ps(_mm256_loadu_ps(xr + i), mm));
        _mm256_storeu_ps(yr + i, e);
        sv = _mm256_add_ps(sv, e);
    }
    _mm256_storeu_ps(lanes, sv);
    float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (int64_t i = w8; i < width; i++) {
        const float e = exp_f32(xr[i] - m);
        yr[i] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
    const __m256 iv = _mm256_set1_ps(inv);
    for (int64_t i = 0; i < w8; i += 8)
        _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(yr + i), iv));
    for (int64_t i = w8; i < width; i++)
        yr[i] *= inv;
}
#define SOFTMAX_ROW8 1

#ifdef __AVX512F__
/* exp8_nonpos over 16 lanes (the same operations per lane). */
static inline __attribute__((always_inline)) __m512 exp16_nonpos(__m512 x) {
    const __m512 lowest = _mm512_set1_ps(-87.3f), shifter = _mm512_set1_ps(12582912.0f), one = _mm512_set1_ps(1.0f);
    const __m512 xc = _mm512_max_ps(lowest, x); /* NaN x passes (max_ps gives its second operand) */
    __m512 kf = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), shifter);
    const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(kf), _mm512_set1_epi32(0x4B400000));
    kf = _mm512_sub_ps(kf, shifter);
    __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(1.42860682030941723e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    const __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mul_ps(~_mm512_cmp_ps_mask(x, lowest, _CMP_LT_OQ), p, s);
}

/* softmax_row8 in 16s (the AVX-512 tier's softmax), the tail (under 16) as one masked block (its lanes past the row read as
 * -inf: e^-inf = 0 adds nothing): the maximum, e^(x - max) stored and summed, then times
 * 1 / sum. Against softmax_row8 (thread CPU, min of 60, load 5): BERT's 12 x 128 x 128 scores
 * 113 -> 74 us, ViT's 12 x 197 x 197 298 -> 181, 64 x 1000 33 -> 22. */
static void softmax_row16(const float *xr, float *yr, int64_t width) {
    const int64_t w16 = width & ~(int64_t)15;
    const __mmask16 tail = (__mmask16)((1u << (width - w16)) - 1u);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mv = ninf;
    for (int64_t i = 0; i < w16; i += 16)
        mv = _mm512_max_ps(_mm512_loadu_ps(xr + i), mv); /* a NaN x is skipped */
    if (tail)
        mv = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail, xr + w16), mv);
    const __m512 mm = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    __m512 sv = _mm512_setzero_ps();
    for (int64_t i = 0; i < w16; i += 16) {
        const __m512 e = exp16_nonpos(_mm512_sub_ps(_mm512_loadu_ps(xr + i), mm));
        _mm512_storeu_ps(yr + i, e);
        sv = _mm512_add_ps(sv, e);
    }
    if (tail) {
        const __m512 e = exp16_nonpos(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, tail, xr + w16), mm));
        _mm512_mask_storeu_ps(yr + w16, tail, e);
        sv = _mm512_add_ps(sv, e);
    }
    const __m512 iv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sv));
    for (int64_t i = 0; i < w16; i += 16)
        _mm512_storeu_ps(yr + i, _mm512_mul_ps(_mm512_loadu_ps(yr + i), iv));
    if (tail)
        _mm512_mask_storeu_ps(yr + w16, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, yr + w16), iv));
}
#endif
#endif

/* Softmax (log_form 0) or LogSoftmax (log_form 1) of rows [r0, r1) of a (rows, width) matrix,
 * x and y possibly the same memory. The row maximum is subtracted first, so nothing overflows;
 * a row holding NaN gives NaN, a row of -inf gives NaN (as numpy's max-shifted form does). */
void aioge_softmax_f32(const float *x, float *y, int64_t width, int log_form, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * width;
        float *yr = y + r * width;
#ifdef SOFTMAX_ROW8
        if (!log_form) {
#ifdef __AVX512F__
            softmax_row16(xr, yr, width);
#else
            softmax_row8(xr, yr, width);
#endif
            continue;
        }
#endif
        /* The maximum skips NaN, but a NaN's exp makes the sum NaN, and so the whole row, as
         * numpy's max-shifted form gives. */
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int64_t i = 0; i < width; i++)
            m = xr[i] > m ? xr[i] : m;
        float sum = 0.0f;
        if (log_form) {
#pragma omp simd reduction(+ : sum)
            for (int64_t i = 0; i < width; i++)
                sum += exp_f32(xr[i] - m);
            float lse = logf(sum);
#pragma omp simd
            for (int64_t i = 0; i < width; i++)
                yr[i] = (xr[i] - m) - lse;
        } else {
#pragma omp simd reduction(+ : sum)
            for (int64_t i = 0; i < width; i++) {
                float e = exp_f32(xr[i] - m);
                yr[i] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
#pragma omp simd
            for (int64_t i = 0; i < width; i++)
                yr[i] *= inv;
        }
    }
}

/* ---- elementwise activations ------------------------------------------------------------------ */

/* The activations, by the codes of aioge.h. */

/* GELU: x/2 (1 + erf(x / sqrt 2)). */
static inline float gelu_f32(float v) { return 0.5f * v * (1.0f + erf_f32(v * 0.70710678118654752f)); }

/* GELU's tanh form: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static inline float gelu_tanh_f32(float v) {
    return 0.5f * v * (1.0f + tanh_abs_f32(0.79788456080286536f * (v + 0.044715f * v * v * v)));
}

/* Sigmoid as e / (1 + e) with e = e^-|x| (1 / (1 + e) for x >= 0): the exponent is never
 * positive, so nothing overflows and nothing needs clamping above. e^a is exp_f32's reduction
 * with a degree-6 minimax polynomial (1.7e-8 relative, 0.3 ulp) and 2^n as two factors, so that
 * e's tiny values (a down to -150) come out as subnormals rounded once, as numpy's do; the
 * division is exact (IEEE). 3.1 ulp at worst against float64 (tests/engines/test_native_rows.py;
 * the old 1 / (1 + exp_f32(-x)) was 4000+ ulp off near x = -88). Swish is x * sigmoid(alpha x)
 * (SiLU when alpha is 1), rounded as Sigmoid then Mul round; at x = -inf it is NaN, as -inf * 0
 * is. NaN passes. Swish 0.97 -> 0.84 ns a value (Sigmoid 0.94 -> 0.70) in the AVX2 tier
 * (sigmoid_span), 18.8 -> 2.7 in the baseline (fma_f32). */
static inline float sigmoid_f32(float v) {
    const float LOG2E = 1.44269504088896341f, SHIFTER = 12582912.0f;
    const float LN2_HI = 0.693145751953125f, LN2_LO = 1.42860682030941723e-6f;
    float a = v < 0.0f ? v : -v;
    a = a < -150.0f ? -150.0f : a;
    float kf = fma_f32(a, LOG2E, SHIFTER);
    uint32_t kbits;
    memcpy(&kbits, &kf, sizeof kbits);
    int32_t n = (int32_t)(kbits - 0x4B400000u); /* in [-217, 0]: each half a normal exponent */
    kf -= SHIFTER;
    float r = fma_f32(-kf, LN2_HI, a);
    r = fma_f32(-kf, LN2_LO, r);
    float p = 0.0013836845755577087f;
    p = fma_f32(p, r, 0.008374815806746483f);
    p = fma_f32(p, r, 0.04166822507977486f);
    p = fma_f32(p, r, 0.16666419804096222f);
    p = fma_f32(p, r, 0.49999991059303284f);
    p = fma_f32(p, r, 1.0f);
    p = fma_f32(p, r, 1.0f);
    int32_t n1 = n >> 1, n2 = n - n1;
    uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    float e = p * s1 * s2;
    return (v < 0.0f ? e : 1.0f) / (1.0f + e);
}
static inline float swish_f32(float v, float alpha) {
    float t = alpha * v;
    return t == -INFINITY ? NAN : v * sigmoid_f32(t);
}

/* HardSigmoid max(0, min(1, alpha x + beta)); NaN stays NaN (as numpy's clip keeps it). */
static inline float hardsigmoid_f32(float v, float alpha, float beta) {
    float h = alpha * v + beta;
    h = h < 0.0f ? 0.0f : h;
    return h > 1.0f ? 1.0f : h;
}

/* Clip as the numpy step computes it: max with lo, then min with hi (an infinite bound changes
 * nothing, NaN stays NaN). numpy's maximum(a, b) is a when a > b or a is NaN, else b: of -0 and
 * +0 it gives the second, so Clip(0, 6) of -0 is +0. */
static inline float clip_f32(float v, float lo, float hi) {
    v = v <= lo ? lo : v; /* = (v > lo || v != v ? v : lo), written as one compare so that it */
    return v >= hi ? hi : v; /* vectorises: the two-test form ran scalar, 6.8 -> 0.2 ns a value */
}

/* y[i] = act(x[i] + bias[i]) for i < n (no bias when it is NULL); y may be x. The switch sits
 * outside the loops so each loop vectorises with its activation inlined. */
#define ACT_LOOP(EXPR)                                                                                 \
    do {                                                                                               \
        if (bias) {                                                                                    \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                      \
                float v = x[i] + bias[i];                                                              \
                y[i] = (EXPR);                                                                         \
            }                                                                                          \
        } else {                                                                                       \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                      \
                float v = x[i];                                                                        \
                y[i] = (EXPR);                                                                         \
            }                                                                                          \
        }                                                                                              \
    } while (0)

#if defined(__AVX2__) && defined(__FMA__)
/* Sigmoid or Swish over n values in 8s (mathf.h's sigmoid8); the tail through a padded block of 8. */
static void sigmoid_span(const float *x, const float *bias, float *y, int64_t n, float alpha, int swish) {
    const __m256 al = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (bias)
            v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
        _mm256_storeu_ps(y + i, sigmoid8(v, al, swish));
    }
    if (i < n) {
        float buf[8] = {0};
        for (int64_t j = i; j < n; j++)
            buf[j - i] = bias ? x[j] + bias[j] : x[j];
        _mm256_storeu_ps(buf, sigmoid8(_mm256_loadu_ps(buf), al, swish));
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));
    }
}

/* Values [i, i + w) of x (plus bias's, when given) in 8 lanes, w <= 8, the lanes past w zero;
 * span_store8 writes a result's first w lanes back: the gelu spans' blocks and padded tails. */
static inline __attribute__((always_inline)) __m256 span_load8(const float *x, const float *bias, int64_t i, int64_t w) {
    float xb[8] = {0}, bb[8] = {0};
    if (w < 8)
        memcpy(xb, x + i, (size_t)w * sizeof(float));
    const __m256 v = w == 8 ? _mm256_loadu_ps(x + i) : _mm256_loadu_ps(xb);
    if (!bias)
        return v;
    memcpy(bb, bias + i, (size_t)w * sizeof(float));
    return _mm256_add_ps(v, _mm256_loadu_ps(bb));
}

static inline __attribute__((always_inline)) void span_store8(float *y, int64_t i, int64_t w, __m256 r) {
    float buf[8];
    if (w == 8) {
        _mm256_storeu_ps(y + i, r);
        return;
    }
    _mm256_storeu_ps(buf, r);
    memcpy(y + i, buf, (size_t)w * sizeof(float));
}

/* GELU's tanh form as x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), (1 + tanh z) / 2 being
 * sigmoid(2z): sigmoid8 in place of tanh_abs_f32's scalar-built exp and division, and no
 * cancellation in 1 + tanh z for negative x. GPT-2's 128 x 3072: 554 -> 314 us (thread CPU, load 5). */
static void gelu_tanh_span(const float *x, const float *bias, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(2.0f * 0.79788456080286536f);
    const __m256 k = _mm256_set1_ps(0.044715f);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t w = n - i < 8 ? n - i : 8;
        const __m256 v = span_load8(x, bias, i, w);
        const __m256 z = _mm256_mul_ps(c, _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(k, v), _mm256_mul_ps(v, v))));
        span_store8(y, i, w, _mm256_mul_ps(v, sigmoid8(z, one, 0)));
    }
}

#ifdef __AVX512F__
/* gelu_span's operations over 16 lanes, for n a multiple of 16 (the same results): ConvNeXt's
 * 3136 x 384 630 -> 401 us, BERT's 128 x 3072 164 -> 115 (thread CPU, min of 40, load 5). */
static void gelu16(const float *x, const float *bias, float *y, int64_t n) {
    static const float P[7] = {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                               -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                               -1.60960333262415e-02f};
    static const float Q[5] = {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                               -7.37332916720468e-03f, -1.42647390514189e-02f};
    const __m512 four = _mm512_set1_ps(4.0f), mfour = _mm512_set1_ps(-4.0f), half = _mm512_set1_ps(0.5f);
    const __m512 one = _mm512_set1_ps(1.0f), rs2 = _mm512_set1_ps(0.70710678118654752f);
    for (int64_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        if (bias)
            v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
        const __m512 c = _mm512_max_ps(mfour, _mm512_min_ps(four, _mm512_mul_ps(v, rs2))); /* NaN passes */
        const __m512 t = _mm512_mul_ps(c, c);
        __m512 p = _mm512_set1_ps(P[0]), q = _mm512_set1_ps(Q[0]);
        for (int j = 1; j < 7; j++)
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(P[j]));
        for (int j = 1; j < 5; j++)
            q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(Q[j]));
        const __m512 erf = _mm512_div_ps(_mm512_mul_ps(c, p), q);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, erf)));
    }
}
#endif

/* GELU (erf_f32's rational form, the same operations in the same order: equal to the scalar
 * loop's results) over 8 lanes; the tail through a padded block. */
static void gelu_span(const float *x, const float *bias, float *y, int64_t n) {
#ifdef __AVX512F__
    const int64_t n16 = n & ~(int64_t)15;
    gelu16(x, bias, y, n16);
    x += n16, y += n16, n -= n16;
    bias = bias ? bias + n16 : 0;
#endif
    static const float P[7] = {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                               -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                               -1.60960333262415e-02f};
    static const float Q[5] = {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                               -7.37332916720468e-03f, -1.42647390514189e-02f};
    const __m256 four = _mm256_set1_ps(4.0f), mfour = _mm256_set1_ps(-4.0f), half = _mm256_set1_ps(0.5f);
    const __m256 one = _mm256_set1_ps(1.0f), rs2 = _mm256_set1_ps(0.70710678118654752f);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t w = n - i < 8 ? n - i : 8;
        const __m256 v = span_load8(x, bias, i, w);
        const __m256 c = _mm256_max_ps(mfour, _mm256_min_ps(four, _mm256_mul_ps(v, rs2))); /* NaN passes */
        const __m256 t = _mm256_mul_ps(c, c);
        __m256 p = _mm256_set1_ps(P[0]), q = _mm256_set1_ps(Q[0]);
        for (int j = 1; j < 7; j++)
            p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(P[j]));
        for (int j = 1; j < 5; j++)
            q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(Q[j]));
        const __m256 erf = _mm256_div_ps(_mm256_mul_ps(c, p), q);
        span_store8(y, i, w, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, erf)));
    }
}
#define SIGMOID_SPAN 1
#endif

static void act_span(const float *x, const float *bias, float *y, int64_t n, int act, float p0, float p1) {
#ifdef SIGMOID_SPAN
    if (act == ACT_SIGMOID || act == ACT_SWISH) {
        sigmoid_span(x, bias, y, n, p0, act == ACT_SWISH);
        return;
    }
    if (act == ACT_GELU_TANH || act == ACT_GELU) {
        (act == ACT_GELU ? gelu_span : gelu_tanh_span)(x, bias, y, n);
        return;
    }
#endif
    switch (act) {
    case ACT_ERF: ACT_LOOP(erf_f32(v)); break;
    case ACT_GELU: ACT_LOOP(gelu_f32(v)); break;
    case ACT_GELU_TANH: ACT_LOOP(gelu_tanh_f32(v)); break;
    case ACT_SIGMOID: ACT_LOOP(sigmoid_f32(v)); break;
    case ACT_SWISH: ACT_LOOP(swish_f32(v, p0)); break;
    case ACT_HARDSIGMOID: ACT_LOOP(hardsigmoid_f32(v, p0, p1)); break;
    case ACT_HARDSWISH: ACT_LOOP(v * hardsigmoid_f32(v, 1.0f / 6.0f, 0.5f)); break;
    /* numpy's maximum(v, 0) (clip_f32): NaN propagates, -0 becomes +0. LeakyRelu is numpy's
     * where(v >= 0, v, v * alpha), which its max(v, alpha v) form equals for alpha in [0, 1]. */
    case ACT_RELU: ACT_LOOP(v > 0.0f || v != v ? v : 0.0f); break;
    case ACT_LEAKY_RELU: ACT_LOOP(v >= 0.0f || v != v ? v : v * p0); break;
    case ACT_CLIP: ACT_LOOP(clip_f32(v, p0, p1)); break;
    case ACT_TANH: ACT_LOOP(tanh_f32(v)); break;
    default: break;
    }
}

void aioge_act_span(const float *x, const float *bias, float *y, int64_t n, int act, float p0, float p1)
{
    act_span(x, bias, y, n, act, p0, p1);
}

/* y = act(x) over elements [n0, n1); p0, p1: Swish's alpha, HardSigmoid's alpha and beta. */
void aioge_activation_f32(const float *x, float *y, int act, float p0, float p1, int64_t n0, int64_t n1) {
    act_span(x + n0, NULL, y + n0, n1 - n0, act, p0, p1);
}

/* y = act(x + bias) over rows [r0, r1) of a (rows, width) matrix, bias one row of width
 * values (a Gemm's or MatMul's bias before GELU). Each element is the Add's float32 sum, so
 * the result equals the Add followed by the activation. */
void aioge_bias_activation_f32(const float *x, const float *bias, float *y, int64_t width, int act, float p0, float p1,
                               int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
        act_span(x + r * width, bias, y + r * width, width, act, p0, p1);
}

/* y = act(chain(x)) over planes [p0, p1) of hw values each: the chain's steps in order, step s
 * v = v op k[s][c] with c = p % C the plane's channel (op 0: +, 1: -, 2: *, 3: /), each rounded
 * in float32 as numpy's ufunc rounds it (no contraction here), then the activation (aioge.h; 0:
 * none). A FusedElementwise program of per-channel constants, most often an unfolded
 * BatchNormalization and its ReLU (DenseNet's pre-activations): numpy ran it as a pass per step
 * over cache-sized chunks, 2.6 ns a value for four steps and a ReLU; here each plane is one pass
 * per step while it sits in L1. y may be x. */
void aioge_channel_chain_f32(const float *x, float *y, int64_t C, int64_t hw, int64_t nsteps, const int64_t *ops,
                             const float *const *k, int act, float a0, float a1, int64_t p0, int64_t p1)
{
    for (int64_t p = p0; p < p1; p++) {
        const int64_t c = p % C;
        const float *xp = x + p * hw;
        float *yp = y + p * hw;
        for (int64_t s = 0; s < nsteps; s++) {
            const float kv = k[s][c];
            const float *src = s ? yp : xp;
            switch (ops[s]) {
            case 0: _Pragma("omp simd") for (int64_t j = 0; j < hw; j++) yp[j] = src[j] + kv; break;
            case 1: _Pragma("omp simd") for (int64_t j = 0; j < hw; j++) yp[j] = src[j] - kv; break;
            case 2: _Pragma("omp simd") for (int64_t j = 0; j < hw; j++) yp[j] = src[j] * kv; break;
            default: _Pragma("omp simd") for (int64_t j = 0; j < hw; j++) yp[j] = src[j] / kv; break;
            }
        }
        if (act)
            act_span(yp, NULL, yp, hw, act, a0, a1);
    }
}

/* out[j] = act(bias[j] + sum_k v[k] * wt[k][j]) for j < N: a vector times a row-major (K, N)
 * matrix as a sum of its scaled rows, vectorised along the output (no horizontal sums); act
 * holds aioge.h's code and its parameters' float32 bits (code 0: none). */
static void scaled_rows(const float *v, const float *wt, const float *bias, float *out, int64_t K, int64_t N,
                        const int64_t *act)
{
    memcpy(out, bias, sizeof(float) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
        const float s = v[k], *w = wt + k * N;
        _Pragma("omp simd") for (int64_t j = 0; j < N; j++) out[j] += s * w[j];
    }
    if (act[0])
        act_span(out, NULL, out, N, (int)act[0], aioge_float_of(act[1]), aioge_float_of(act[2]));
}

/* SqueezeExcite's squeeze for images [i0, i1) of (C, hw) planes: scale[i][ch] = act2(b2[ch] +
 * w2[ch] . act1(b1 + w1 . mean(x[i]))), given w1t = w1 transposed (C, C1) and w2t = w2
 * transposed (C1, C), row-major, so that each product runs as a sum of scaled rows
 * (scaled_rows); the activations by the codes of aioge.h (0: none). The
 * excite (x times its channel's scale) is the channel chain's multiply step. The mean of a plane
 * is its sum (lanes summed in their own order) times 1/hw. Returns AIOGE_ENOMEM when scratch
 * cannot be had. */
int aioge_squeeze_f32(const float *x, const float *w1t, const float *b1, const float *w2t, const float *b2, float *scale,
                      int64_t C, int64_t hw, int64_t C1, const int64_t *acts, int64_t i0, int64_t i1)
{
    if (i0 >= i1)
        return AIOGE_OK;
    float *mean = aioge_malloc(sizeof(float) * (size_t)(C + C1));
    if (!mean)
        return AIOGE_ENOMEM;
    float *hidden = mean + C;
    const float inv = 1.0f / (float)hw;
    for (int64_t i = i0; i < i1; i++) {
        const float *xi = x + i * C * hw;
        for (int64_t c = 0; c < C; c++) {
            const float *p = xi + c * hw;
            float s = 0.0f;
            _Pragma("omp simd reduction(+ : s)") for (int64_t j = 0; j < hw; j++) s += p[j];
            mean[c] = s * inv;
        }
        scaled_rows(mean, w1t, b1, hidden, C, C1, acts);
        scaled_rows(hidden, w2t, b2, scale + i * C, C1, C, acts + 3);
    }
    free(mean);
    return 0;
}
