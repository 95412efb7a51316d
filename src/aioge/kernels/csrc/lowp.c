/* Low-precision matrix products for GE's precision modes (aioge.compiler.precision): bf16 or
 * fp16 operands, float32 accumulation. The weight B is rounded to nearest even once and packed
 * (aioge_lowp_pack: panels of LOWP_NR columns, K rows each, as 16-bit values, zero past N);
 * each call rounds a block of A's rows to the same precision at the op's input and multiplies
 * with float32 FMAs: a bf16 value widens to float32 by a 16-bit shift, an fp16 one through
 * F16C's vcvtph2ps. The result equals float32 arithmetic on the rounded operands up to the
 * order of the sums. The vector path is compiled for AVX2+FMA+F16C whatever the build's
 * -march, and chosen at run time by __builtin_cpu_supports; the scalar path is the same
 * arithmetic in plain C for any CPU (and what aioge_lowp_force_scalar selects, for tests). */
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOWP_X86 1
#endif

#include "aioge.h"

#define LOWP_NR 16
#define LOWP_MR 4

static int force_scalar;

void aioge_lowp_force_scalar(int on) { force_scalar = on != 0; }

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float f32_of_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float32 -> fp16, round to nearest even, in integer steps (no _Float16: any C compiler) */
static uint16_t f16_of(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN stays a quiet NaN */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* 65520 and past round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a multiple of 2^-24, rounded by the float adder */
        float v, t;
        memcpy(&v, &ax, 4);
        t = v * 16777216.0f + 8388608.0f; /* exact scaling, then the add rounds to an integer */
        uint32_t b;
        memcpy(&b, &t, 4);
        return (uint16_t)(sign | (b & 0x7fffffu));
    }
    ax += 0xfffu + ((ax >> 13) & 1u); /* round the 13 dropped bits to nearest even */
    return (uint16_t)(sign | ((ax - 0x38000000u) >> 13));
}

static float f32_of_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        memcpy(&x, &v, 4);
        x |= sign;
    } else if (e == 31)
        x = sign | 0x7f800000u | (m << 13);
    else
        x = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static int vector_path(void)
{
#ifdef LOWP_X86
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return have && !force_scalar;
#else
    return 0;
#endif
}

int aioge_lowp_isa(void) { return vector_path(); }

/* y[i] = x[i] rounded to bf16 (kind 0) or fp16 (kind 1), as float32. */
void aioge_lowp_round_f32(int kind, const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kind ? f32_of_f16(f16_of(x[i])) : f32_of_bf16(bf16_of(x[i]));
}

/* B (K, N) read at strides (sk, sn) in floats, rounded and packed into bp: panel p holds
 * columns [p*NR, p*NR+NR) as bp[p*K*NR + k*NR + j]. bp_len is bp's length in values. */
int aioge_lowp_pack(int kind, const float *b, int64_t sk, int64_t sn, int64_t K, int64_t N, uint16_t *bp, int64_t bp_len)
{
    int64_t panels = (N + LOWP_NR - 1) / LOWP_NR;
    if (K < 0 || N < 0 || !aioge_fits(bp_len, panels, K, LOWP_NR, 1))
        return AIOGE_EGEOMETRY;
    for (int64_t p = 0; p < panels; p++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < LOWP_NR; j++) {
                int64_t n = p * LOWP_NR + j;
                float v = n < N ? b[k * sk + n * sn] : 0.0f;
                bp[(p * K + k) * LOWP_NR + j] = kind ? f16_of(v) : bf16_of(v);
            }
    return 0;
}

/* One LOWP_MR x LOWP_NR tile: acc = ar (MR rows of K rounded floats) @ panel. */
static void tile_scalar(int kind, const float *ar, int64_t K, const uint16_t *panel, float *acc)
{
    for (int i = 0; i < LOWP_MR * LOWP_NR; i++)
        acc[i] = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        float bk[LOWP_NR];
        for (int j = 0; j < LOWP_NR; j++)
            bk[j] = kind ? f32_of_f16(panel[k * LOWP_NR + j]) : f32_of_bf16(panel[k * LOWP_NR + j]);
        for (int r = 0; r < LOWP_MR; r++)
            for (int j = 0; j < LOWP_NR; j++)
                acc[r * LOWP_NR + j] += ar[r * K + k] * bk[j];
    }
}

#ifdef LOWP_X86
__attribute__((target("avx2,fma,f16c"))) static inline __m256 widen(int kind, const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (kind)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2,fma,f16c"))) static void tile_avx2(int kind, const float *ar, int64_t K, const uint16_t *panel,
                                                               float *acc)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    for (int64_t k = 0; k < K; k++) {
        __m256 b0 = widen(kind, panel + k * LOWP_NR), b1 = widen(kind, panel + k * LOWP_NR + 8);
        __m256 a0 = _mm256_broadcast_ss(ar + k), a1 = _mm256_broadcast_ss(ar + K + k);
        __m256 a2 = _mm256_broadcast_ss(ar + 2 * K + k), a3 = _mm256_broadcast_ss(ar + 3 * K + k);
        c00 = _mm256_fmadd_ps(a0, b0, c00);
        c01 = _mm256_fmadd_ps(a0, b1, c01);
        c10 = _mm256_fmadd_ps(a1, b0, c10);
        c11 = _mm256_fmadd_ps(a1, b1, c11);
        c20 = _mm256_fmadd_ps(a2, b0, c20);
        c21 = _mm256_fmadd_ps(a2, b1, c21);
        c30 = _mm256_fmadd_ps(a3, b0, c30);
        c31 = _mm256_fmadd_ps(a3, b1, c31);
    }
    _mm256_storeu_ps(acc, c00);
    _mm256_storeu_ps(acc + 8, c01);
    _mm256_storeu_ps(acc + 16, c10);
    _mm256_storeu_ps(acc + 24, c11);
    _mm256_storeu_ps(acc + 32, c20);
    _mm256_storeu_ps(acc + 40, c21);
    _mm256_storeu_ps(acc + 48, c30);
    _mm256_storeu_ps(acc + 56, c31);
}

/* A one-row tile (a GEMV, or a last block of one row): acc[0..NR) = ar @ panel, two k at a
 * time into four sums so that the FMAs do not wait on each other. */
__attribute__((target("avx2,fma,f16c"))) static void row_avx2(int kind, const float *ar, int64_t K, const uint16_t *panel,
                                                              float *acc)
{
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, d0 = c0, d1 = c0;
    int64_t k = 0;
    for (; k + 1 < K; k += 2) {
        __m256 a0 = _mm256_broadcast_ss(ar + k), a1 = _mm256_broadcast_ss(ar + k + 1);
        c0 = _mm256_fmadd_ps(a0, widen(kind, panel + k * LOWP_NR), c0);
        c1 = _mm256_fmadd_ps(a0, widen(kind, panel + k * LOWP_NR + 8), c1);
        d0 = _mm256_fmadd_ps(a1, widen(kind, panel + (k + 1) * LOWP_NR), d0);
        d1 = _mm256_fmadd_ps(a1, widen(kind, panel + (k + 1) * LOWP_NR + 8), d1);
    }
    if (k < K) {
        __m256 a0 = _mm256_broadcast_ss(ar + k);
        c0 = _mm256_fmadd_ps(a0, widen(kind, panel + k * LOWP_NR), c0);
        c1 = _mm256_fmadd_ps(a0, widen(kind, panel + k * LOWP_NR + 8), c1);
    }
    _mm256_storeu_ps(acc, _mm256_add_ps(c0, d0));
    _mm256_storeu_ps(acc + 8, _mm256_add_ps(c1, d1));
}

#endif

/* Rows [m0, m1) of y = act(round(A) @ B + bias): A (M, K) at row stride lda, bp packed by
 * aioge_lowp_pack (bp_len values), bias N values or NULL, y at row stride ldy; act, p0, p1 as
 * aioge_act_span's. 0, AIOGE_EGEOMETRY (nothing written) or AIOGE_ENOMEM. */
int aioge_lowp_gemm(int kind, const float *a, int64_t lda, const uint16_t *bp, int64_t bp_len, const float *bias, float *y,
                    int64_t ldy, int64_t M, int64_t K, int64_t N, int act, float p0, float p1, int64_t m0, int64_t m1)
{
    int64_t panels = (N + LOWP_NR - 1) / LOWP_NR;
    if (M < 0 || K < 0 || N < 0 || lda < K || ldy < N || m0 < 0 || m1 > M || m0 > m1 ||
        !aioge_fits(bp_len, panels, K, LOWP_NR, 1))
        return AIOGE_EGEOMETRY;
    int64_t rows = m1 - m0, blocks = (rows + LOWP_MR - 1) / LOWP_MR;
    /* every row of the range rounded once (zero rows pad the last block), then panel by panel
     * over the row blocks: a panel stays in cache while every block reads it */
    float *ar = aioge_malloc(sizeof(float) * (size_t)(blocks * LOWP_MR * K + LOWP_MR * LOWP_NR));
    if (!ar)
        return AIOGE_ENOMEM;
    float *acc = ar + blocks * LOWP_MR * K;
    for (int64_t r = 0; r < blocks * LOWP_MR; r++) {
        if (r < rows)
            aioge_lowp_round_f32(kind, a + (m0 + r) * lda, ar + r * K, K);
        else
            memset(ar + r * K, 0, sizeof(float) * (size_t)K);
    }
    int vec = vector_path();
    for (int64_t p = 0; p < panels; p++) {
        const uint16_t *panel = bp + p * K * LOWP_NR;
        int64_t n0 = p * LOWP_NR, w = N - n0 < LOWP_NR ? N - n0 : LOWP_NR;
        for (int64_t b = 0; b < blocks; b++) {
#ifdef LOWP_X86
            if (vec && rows - b * LOWP_MR == 1)
                row_avx2(kind, ar + b * LOWP_MR * K, K, panel, acc);
            else if (vec)
                tile_avx2(kind, ar + b * LOWP_MR * K, K, panel, acc);
            else
#endif
                tile_scalar(kind, ar + b * LOWP_MR * K, K, panel, acc);
            for (int64_t r = 0; r < LOWP_MR && b * LOWP_MR + r < rows; r++) {
                float *yr = y + (m0 + b * LOWP_MR + r) * ldy + n0;
                for (int64_t j = 0; j < w; j++)
                    yr[j] = acc[r * LOWP_NR + j] + (bias ? bias[n0 + j] : 0.0f);
            }
        }
    }
    if (act != ACT_NONE)
        for (int64_t r = m0; r < m1; r++)
            aioge_act_span(y + r * ldy, NULL, y + r * ldy, N, act, p0, p1);
    free(ar);
    return 0;
}
