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

#endif
