/* Low-precision matrix products for GE's precision modes (aioge.compiler.precision): bf16 or
 * fp16 operands, float32 accumulation. The weight B is rounded to nearest even once and packed
 * (aioge_lowp_pack: panels of LOWP_NR columns, K rows each, as 16-bit values, zero past N);
 * each call rounds a block of A's rows to the same precision at the op's input and multiplies
 * with float32 FMAs: a bf16 value widens to float32 by a 16-bit shift, an fp16 one through
 * F16C's vcvtph2ps. The result equals float32 arithmetic on the rounded operands up to the
 * order of the sums. The vector path is compiled for AVX2+FMA+F16C whatever the build's
 * -march, and chosen at run time by __builtin_cpu_supports; the scalar path is the same
 * arithmetic in plain C for any CPU (and what aioge_lowp_force_scalar selects, for tests).
 *
 * Kind 2 (LOWP_BF16_DOT) is bf16 for the AVX-512 tier's bf16 dot products: B packed once as
 * K-pairs (panel p, pair q holds columns j of rows 2q and 2q+1 at bp[p*KP*NR + q*2*NR + 2*j +
 * (k&1)]; K zero-padded to KP, a multiple of 32), each call's rows of A rounded to bf16 with
 * vcvtne2ps2bf16 into a zero-padded (rows, KP) block, then AMX's tdpbf16ps on 16x32 tiles
 * where the OS grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM), else AVX512_BF16's
 * vdpbf16ps on 8 rows x 32 columns; float32 accumulation, bias and output either way. Both
 * flush bf16 denormals (inputs below 2^-126 count as zero, as do such products): tolerances
 * in tests/engines/test_lowp.py allow for it. A build without AVX-512 (or a CPU without
 * AVX512_BF16) runs kind 2 in plain C; aioge_lowp_force_scalar(1) does too, (2) keeps it
 * off AMX. */
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOWP_X86 1
#endif
#if defined(LOWP_X86) && defined(__AVX512F__) && defined(__linux__) && defined(__GNUC__) && __GNUC__ >= 11
#include <sys/syscall.h>
#include <unistd.h>
#define LOWP_DOT 1
#endif

#include "aioge.h"

#define LOWP_NR 16
#define LOWP_MR 4
#define LOWP_BF16_DOT 2
#define LOWP_KP(K) (((K) + 31) / 32 * 32)

static int force_scalar;

void aioge_lowp_force_scalar(int on) { force_scalar = on; }

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

/* AVX512_BF16's vdpbf16ps (2) and AMX-BF16 with the tile state granted (3), for kind 2 */
static int dot_level(void)
{
#ifdef LOWP_DOT
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_ACQUIRE);
    if (h < 0) {
        h = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") ? 2 : 0;
        /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): the whole process, once */
        if (h && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
            syscall(SYS_arch_prctl, 0x1023, 18) == 0)
            h = 3;
        __atomic_store_n(&have, h, __ATOMIC_RELEASE);
    }
    if (force_scalar == 1)
        return 0;
    return force_scalar == 2 && h > 2 ? 2 : h;
#else
    return 0;
#endif
}

/* 3 AMX, 2 AVX512_BF16 (kind 2 runs on them), 1 AVX2 (kinds 0 and 1), 0 plain C */
int aioge_lowp_isa(void)
{
    int d = dot_level();
    return d ? d : vector_path();
}

/* y[i] = x[i] rounded to bf16 (kind 0) or fp16 (kind 1), as float32. */
void aioge_lowp_round_f32(int kind, const float *x, float *y, int64_t n)
{
    int64_t i = 0;
#ifdef __AVX512F__
    if (!kind) /* bf16_of in 16 lanes, bit for bit (denormals kept) */
        for (; i + 16 <= n; i += 16) {
            __m512i u = _mm512_loadu_si512((const void *)(x + i));
            __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                    _mm512_set1_epi32(0x7f800000));
            __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
            r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
            _mm512_storeu_si512((void *)(y + i), _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
        }
#endif
    for (; i < n; i++)
        y[i] = kind ? f32_of_f16(f16_of(x[i])) : f32_of_bf16(bf16_of(x[i]));
}

/* B (K, N) read at strides (sk, sn) in floats, rounded and packed into bp: panel p holds
 * columns [p*NR, p*NR+NR) as bp[p*K*NR + k*NR + j]. bp_len is bp's length in values. */
int aioge_lowp_pack(int kind, const float *b, int64_t sk, int64_t sn, int64_t K, int64_t N, uint16_t *bp, int64_t bp_len)
{
    int64_t panels = (N + LOWP_NR - 1) / LOWP_NR;
    if (K < 0 || N < 0 || kind < 0 || kind > LOWP_BF16_DOT ||
        !aioge_fits(bp_len, panels, kind == LOWP_BF16_DOT ? LOWP_KP(K) : K, LOWP_NR, 1))
        return AIOGE_EGEOMETRY;
    if (kind == LOWP_BF16_DOT) {
        int64_t KP = LOWP_KP(K);
        for (int64_t p = 0; p < panels; p++)
            for (int64_t k = 0; k < KP; k++)
                for (int64_t j = 0; j < LOWP_NR; j++) {
                    int64_t n = p * LOWP_NR + j;
                    float v = n < N && k < K ? b[k * sk + n * sn] : 0.0f;
                    bp[p * KP * LOWP_NR + (k >> 1) * 2 * LOWP_NR + 2 * j + (k & 1)] = bf16_of(v);
                }
        return 0;
    }
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

/* Kind 2: y rows [r0, r0 + nr) x columns [n0, n0 + w) from acc (nr rows at stride ld), plus bias */
static void put_rows(const float *acc, int64_t ld, int64_t nr, int64_t w, const float *bias, float *y, int64_t ldy)
{
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < w; j++)
            y[r * ldy + j] = acc[r * ld + j] + (bias ? bias[j] : 0.0f);
}

/* Kind 2 in plain C: ab (rows, KP) bf16, panel-pair layout */
static void dot_scalar(const uint16_t *ab, int64_t rows, int64_t KP, const uint16_t *bp, int64_t N, const float *bias,
                       float *y, int64_t ldy)
{
    float acc[LOWP_NR];
    for (int64_t p = 0; p * LOWP_NR < N; p++) {
        const uint16_t *panel = bp + p * KP * LOWP_NR;
        int64_t n0 = p * LOWP_NR, w = N - n0 < LOWP_NR ? N - n0 : LOWP_NR;
        for (int64_t r = 0; r < rows; r++) {
            for (int j = 0; j < LOWP_NR; j++)
                acc[j] = 0.0f;
            for (int64_t k = 0; k < KP; k++) {
                float av = f32_of_bf16(ab[r * KP + k]);
                const uint16_t *bk = panel + (k >> 1) * 2 * LOWP_NR + (k & 1);
                for (int j = 0; j < LOWP_NR; j++)
                    acc[j] += av * f32_of_bf16(bk[2 * j]);
            }
            put_rows(acc, LOWP_NR, 1, w, bias ? bias + n0 : NULL, y + r * ldy + n0, ldy);
        }
    }
}

#ifdef LOWP_DOT
#define LOWP_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* rows of A (row stride lda, K floats) rounded to bf16 into ab (KP values a row, zero past K) */
LOWP_T512 static void round_rows_bf16(const float *a, int64_t lda, int64_t rows, int64_t K, int64_t KP, uint16_t *ab)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < KP; k += 32) {
            int64_t left = K - k;
            __mmask16 lo = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            __mmask16 hi = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
            __m512 x0 = _mm512_maskz_loadu_ps(lo, a + r * lda + k), x1 = _mm512_maskz_loadu_ps(hi, a + r * lda + k + 16);
            _mm512_storeu_si512((void *)(ab + r * KP + k), (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        }
}

/* MR rows x NP panels (16 columns each) of vdpbf16ps: acc (MR, 32) */
LOWP_T512 static inline __attribute__((always_inline)) void dot_tile(const int MR, const int NP, const uint16_t *ab, int64_t KP,
                                                                   const uint16_t *p0, const uint16_t *p1, float *acc)
{
    __m512 c[8][2];
    for (int r = 0; r < MR; r++)
        c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (int64_t q = 0; q < KP / 2; q++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)(p0 + q * 2 * LOWP_NR)), b1 = b0;
        if (NP > 1)
            b1 = (__m512bh)_mm512_loadu_si512((const void *)(p1 + q * 2 * LOWP_NR));
        for (int r = 0; r < MR; r++) {
            int32_t pair;
            memcpy(&pair, ab + r * KP + 2 * q, 4);
            __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
            if (NP > 1)
                c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(acc + r * 32, c[r][0]);
        if (NP > 1)
            _mm512_storeu_ps(acc + r * 32 + 16, c[r][1]);
    }
}

#define DOT_CASE(m)                                                                                                    \
    case m:                                                                                                            \
        if (np > 1)                                                                                                    \
            dot_tile(m, 2, ab, KP, p0, p1, acc);                                                                       \
        else                                                                                                           \
            dot_tile(m, 1, ab, KP, p0, p1, acc);                                                                       \
        break;

LOWP_T512 static void dot_avx512(const uint16_t *ab, int64_t rows, int64_t KP, const uint16_t *bp, int64_t N, const float *bias,
                                 float *y, int64_t ldy)
{
    float acc[8 * 32];
    int64_t panels = (N + LOWP_NR - 1) / LOWP_NR;
    for (int64_t p = 0; p < panels; p += 2) {
        const uint16_t *p0 = bp + p * KP * LOWP_NR, *p1 = p0 + KP * LOWP_NR;
        int np = panels - p > 1 ? 2 : 1;
        int64_t n0 = p * LOWP_NR, w = N - n0 < 32 ? N - n0 : 32;
        for (int64_t r = 0; r < rows; r += 8) {
            int mr = rows - r < 8 ? (int)(rows - r) : 8;
            const uint16_t *abr = ab + r * KP;
            switch (mr) {
#define ab abr
                DOT_CASE(1)
                DOT_CASE(2)
                DOT_CASE(3)
                DOT_CASE(4)
                DOT_CASE(5)
                DOT_CASE(6)
                DOT_CASE(7)
                DOT_CASE(8)
#undef ab
            }
            put_rows(acc, 32, mr, w, bias ? bias + n0 : NULL, y + r * ldy + n0, ldy);
        }
    }
}

struct lowp_tilecfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* AMX: tiles 0-3 C (16x16 float32), 4-5 A (16 rows x 32 bf16), 6-7 B (16 pairs x 16 columns);
 * 32 rows x 32 columns a step, ab's rows padded with zeros to a multiple of 16 */
__attribute__((target("amx-tile,amx-bf16"))) static void dot_amx(const uint16_t *ab, int64_t rows, int64_t KP,
                                                                 const uint16_t *bp, int64_t N, const float *bias,
                                                                 float *y, int64_t ldy)
{
    struct lowp_tilecfg cfg;
    float acc[32 * 32];
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    int64_t panels = (N + LOWP_NR - 1) / LOWP_NR, sa = KP * 2;
    for (int64_t p = 0; p < panels; p += 2) {
        const uint16_t *p0 = bp + p * KP * LOWP_NR, *p1 = p0 + KP * LOWP_NR;
        int two_b = panels - p > 1;
        int64_t n0 = p * LOWP_NR, w = N - n0 < 32 ? N - n0 : 32;
        for (int64_t r = 0; r < rows; r += 32) {
            const uint16_t *a0 = ab + r * KP, *a1 = a0 + 16 * KP;
            int two_a = rows - r > 16;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t k = 0; k < KP; k += 32) {
                _tile_loadd(4, a0 + k, sa);
                _tile_loadd(6, p0 + k * LOWP_NR, 64);
                _tile_dpbf16ps(0, 4, 6);
                if (two_b) {
                    _tile_loadd(7, p1 + k * LOWP_NR, 64);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (two_a) {
                    _tile_loadd(5, a1 + k, sa);
                    _tile_dpbf16ps(2, 5, 6);
                    if (two_b)
                        _tile_dpbf16ps(3, 5, 7);
                }
            }
            _tile_stored(0, acc, 128);
            _tile_stored(1, acc + 16, 128);
            _tile_stored(2, acc + 16 * 32, 128);
            _tile_stored(3, acc + 16 * 32 + 16, 128);
            int64_t nr = rows - r < 32 ? rows - r : 32;
            put_rows(acc, 32, nr, w, bias ? bias + n0 : NULL, y + r * ldy + n0, ldy);
        }
    }
    _tile_release();
}
#endif

/* kind 2 over rows [m0, m1): see aioge_lowp_gemm */
static int gemm_dot(const float *a, int64_t lda, const uint16_t *bp, const float *bias, float *y, int64_t ldy, int64_t K,
                    int64_t N, int64_t m0, int64_t m1)
{
    int64_t rows = m1 - m0, KP = LOWP_KP(K), padded = (rows + 15) / 16 * 16;
    uint16_t *ab = aioge_malloc(sizeof(uint16_t) * (size_t)(padded * KP) + 64);
    if (!ab)
        return AIOGE_ENOMEM;
    int level = dot_level();
#ifdef LOWP_DOT
    if (level >= 2) {
        round_rows_bf16(a + m0 * lda, lda, rows, K, KP, ab);
        memset(ab + rows * KP, 0, sizeof(uint16_t) * (size_t)((padded - rows) * KP));
        if (level == 3 && rows >= 4)
            dot_amx(ab, rows, KP, bp, N, bias, y + m0 * ldy, ldy);
        else
            dot_avx512(ab, rows, KP, bp, N, bias, y + m0 * ldy, ldy);
        free(ab);
        return 0;
    }
#endif
    (void)level;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < KP; k++)
            ab[r * KP + k] = k < K ? bf16_of(a[(m0 + r) * lda + k]) : 0;
    dot_scalar(ab, rows, KP, bp, N, bias, y + m0 * ldy, ldy);
    free(ab);
    return 0;
}

/* Rows [m0, m1) of y = act(round(A) @ B + bias): A (M, K) at row stride lda, bp packed by
 * aioge_lowp_pack (bp_len values), bias N values or NULL, y at row stride ldy; act, p0, p1 as
 * aioge_act_span's. 0, AIOGE_EGEOMETRY (nothing written) or AIOGE_ENOMEM. */
int aioge_lowp_gemm(int kind, const float *a, int64_t lda, const uint16_t *bp, int64_t bp_len, const float *bias, float *y,
                    int64_t ldy, int64_t M, int64_t K, int64_t N, int act, float p0, float p1, int64_t m0, int64_t m1)
{
    int64_t panels = (N + LOWP_NR - 1) / LOWP_NR;
    if (M < 0 || K < 0 || N < 0 || lda < K || ldy < N || m0 < 0 || m1 > M || m0 > m1 || kind < 0 || kind > LOWP_BF16_DOT ||
        !aioge_fits(bp_len, panels, kind == LOWP_BF16_DOT ? LOWP_KP(K) : K, LOWP_NR, 1))
        return AIOGE_EGEOMETRY;
    if (kind == LOWP_BF16_DOT) {
        int got = m1 > m0 ? gemm_dot(a, lda, bp, bias, y, ldy, K, N, m0, m1) : 0;
        if (got == 0 && act != ACT_NONE)
            for (int64_t r = m0; r < m1; r++)
                aioge_act_span(y + r * ldy, NULL, y + r * ldy, N, act, p0, p1);
        return got;
    }
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
