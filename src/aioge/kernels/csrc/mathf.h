/* Vectorisable float32 math shared by the C kernels (norm.c, rnn.c). */
#ifndef AIOGE_MATHF_H
#define AIOGE_MATHF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* a * b + c, fused where the target has FMA; elsewhere (the x86-64 baseline tier) a multiply
 * and an add: fmaf without the instruction is glibc's exact emulation, which kept these loops
 * scalar at ~18 ns a value (Sigmoid's). */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define fma_f32(a, b, c) fmaf((a), (b), (c))
#else
#define fma_f32(a, b, c) ((a) * (b) + (c))
#endif

/* ---- exp ------------------------------------------------------------------------------------- */

/* e^x for float32, vectorisable. x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 in two parts
 * so n*LN2_HI is exact), e^r by its Taylor series to r^7 (truncation < 1e-8 relative), then
 * times 2^n built in the exponent bits, as two factors so that results overflow to inf above
 * x = 88.72 as IEEE says. Below x = -87.3 (e^x < 1.22e-38, the bottom of the normal range) the
 * result is 0: computing a subnormal costs x86 a microcode assist of ~100 cycles, and masked
 * attention rows (GPT-2's) are half -3.4e38 (a half-masked 1536x128 softmax: 396 -> 114 us).
 * NaN passes through the clamps (comparisons with NaN are false) and the arithmetic; the
 * integer part is computed unsigned, so even NaN's bits make no undefined behaviour. */
static inline float exp_f32(float x) {
    const float LOG2E = 1.44269504088896341f;
    const float LN2_HI = 0.693145751953125f;     /* 12 trailing zero bits: n*LN2_HI is exact */
    const float LN2_LO = 1.42860682030941723e-6f; /* ln2 - LN2_HI */
    const float SHIFTER = 12582912.0f;            /* 1.5 * 2^23: adding it rounds to an integer */
    const float LOWEST = -87.3f; /* e^-87.3 = 1.22e-38: normal, as 2^n (1 + r) rounds */
    float xc = x < LOWEST ? LOWEST : x;
    xc = xc > 90.0f ? 90.0f : xc;
    float kf = fma_f32(xc, LOG2E, SHIFTER);
    uint32_t kbits;
    memcpy(&kbits, &kf, sizeof kbits);
    int32_t n = (int32_t)(kbits - 0x4B400000u); /* the rounded integer n, in [-126, 130] */
    kf -= SHIFTER;
    float r = fma_f32(-kf, LN2_HI, xc);
    r = fma_f32(-kf, LN2_LO, r);
    float p = 1.0f / 5040.0f;
    p = fma_f32(p, r, 1.0f / 720.0f);
    p = fma_f32(p, r, 1.0f / 120.0f);
    p = fma_f32(p, r, 1.0f / 24.0f);
    p = fma_f32(p, r, 1.0f / 6.0f);
    p = fma_f32(p, r, 0.5f);
    p = fma_f32(p, r, 1.0f);
    p = fma_f32(p, r, 1.0f);
    int32_t n1 = n / 2, n2 = n - n1; /* each within the normal exponents' range */
    uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    float y = p * s1 * s2;
    return x < LOWEST ? 0.0f : y;
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* e^r for the reduced argument r (|r| <= ln2/2) over 8 lanes: the degree-7 polynomial both
 * sigmoid forms below scale by 2^n, in one order of operations */
static inline __attribute__((always_inline)) __m256 exp_poly8(__m256 r) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 p = _mm256_set1_ps(0.0013836845755577087f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.008374815806746483f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.04166822507977486f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.16666419804096222f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.49999991059303284f));
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_fmadd_ps(p, r, one);
    return p;
}

/* sigmoid_f32 (swish_f32 with alpha, the sigmoid of alpha x) over 8 lanes, the same operations
 * in the same order: what sigmoid8 takes for |alpha x| > 80, infinities and NaN. */
static inline __m256 sigmoid8_wide(__m256 v, __m256 alpha, int swish) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    __m256 t = swish ? _mm256_mul_ps(alpha, v) : v;
    __m256 a = _mm256_min_ps(t, _mm256_sub_ps(zero, t));   /* -|t| (NaN from the second) */
    a = _mm256_max_ps(_mm256_set1_ps(-150.0f), a);        /* NaN stays */
    __m256 kf = _mm256_fmadd_ps(a, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(12582912.0f));
    __m256i n = _mm256_sub_epi32(_mm256_castps_si256(kf), _mm256_set1_epi32(0x4B400000));
    kf = _mm256_sub_ps(kf, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(0.693145751953125f), a);
    r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(1.42860682030941723e-6f), r);
    const __m256 p = exp_poly8(r);
    __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    __m256 sig = _mm256_div_ps(_mm256_blendv_ps(one, e, _mm256_cmp_ps(t, zero, _CMP_LT_OQ)), _mm256_add_ps(one, e));
    if (!swish)
        return sig;
    __m256 y = _mm256_mul_ps(v, sig);
    return _mm256_blendv_ps(y, _mm256_set1_ps(NAN), _mm256_cmp_ps(t, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
}

/* Sigmoid (swish: x times it) of t = alpha x over 8 lanes, per lane a function of its value alone
 * (whatever its neighbours): for |t| <= 80, 1 / (1 + e^-t) with e^-t = 2^n p(r) normal throughout
 * (n + 127 in [11, 243], one factor built from the rounding's own bits), so no clamps, no blend of
 * the numerator and no second scale factor; the rare other lanes (|t| > 80, inf, NaN) take
 * sigmoid8_wide's form, computed only when a vector holds one. Within 3.5 ulp of float64 as
 * sigmoid8_wide (tests/engines/test_native_rows.py); Swish 0.64 -> 0.38 ns a value in L1 (Zen 3), EfficientNet-B0 19.8 -> 18.4 ms of one thread's CPU. */
static inline __attribute__((always_inline)) __m256 sigmoid8(__m256 v, __m256 alpha, int swish) {
    const __m256 shifter = _mm256_set1_ps(12582912.0f + 127.0f), one = _mm256_set1_ps(1.0f);
    const __m256 nt = swish ? _mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), alpha), v) : _mm256_sub_ps(_mm256_setzero_ps(), v);
    const __m256 in = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), nt), _mm256_set1_ps(80.0f), _CMP_LE_OQ);
    __m256 kf = _mm256_fmadd_ps(nt, _mm256_set1_ps(1.44269504088896341f), shifter);
    const __m256 k = _mm256_sub_ps(kf, shifter);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), nt);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.42860682030941723e-6f), r);
    const __m256 p = exp_poly8(r);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(kf), 23)));
    __m256 y = _mm256_div_ps(one, _mm256_add_ps(one, e));
    if (swish)
        y = _mm256_mul_ps(v, y);
    if (__builtin_expect(_mm256_movemask_ps(in) != 0xFF, 0))
        y = _mm256_blendv_ps(sigmoid8_wide(v, alpha, swish), y, in);
    return y;
}

#ifdef __AVX512F__
/* sigmoid8 over 16 lanes, the same operations in the same order (act_span's bits, lane for lane);
 * a vector with a lane past |alpha x| = 80 (or inf, NaN) takes sigmoid8_wide's form on both
 * halves, as sigmoid8 does. The AVX-512 tier's 1x1 conv tiles and depthwise forms apply it in
 * registers. (1 / (1 + e) by rcp14 and a Newton step in place of the division measured no faster:
 * 5.5 ns a vector of 16 in L1 either way, as two sigmoid8.) */
static inline __attribute__((always_inline)) __m512 sigmoid16(__m512 v, __m512 alpha, int swish) {
    const __m512 shifter = _mm512_set1_ps(12582912.0f + 127.0f), one = _mm512_set1_ps(1.0f);
    const __m512 nt = swish ? _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), alpha), v) : _mm512_sub_ps(_mm512_setzero_ps(), v);
    const __mmask16 in = _mm512_cmp_ps_mask(_mm512_abs_ps(nt), _mm512_set1_ps(80.0f), _CMP_LE_OQ);
    const __m512 kf = _mm512_fmadd_ps(nt, _mm512_set1_ps(1.44269504088896341f), shifter);
    const __m512 k = _mm512_sub_ps(kf, shifter);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), nt);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860682030941723e-6f), r);
    __m512 p = _mm512_set1_ps(0.0013836845755577087f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.008374815806746483f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.04166822507977486f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.16666419804096222f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.49999991059303284f));
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    const __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(kf), 23)));
    __m512 y = _mm512_div_ps(one, _mm512_add_ps(one, e));
    if (swish)
        y = _mm512_mul_ps(v, y);
    if (__builtin_expect(in != 0xFFFF, 0)) {
        const __m256 a8 = _mm512_castps512_ps256(alpha);
        const __m256 lo = sigmoid8_wide(_mm512_castps512_ps256(v), a8, swish);
        const __m256 hi = sigmoid8_wide(_mm512_extractf32x8_ps(v, 1), a8, swish);
        y = _mm512_mask_blend_ps(in, _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1), y);
    }
    return y;
}
#endif
#endif


#endif
