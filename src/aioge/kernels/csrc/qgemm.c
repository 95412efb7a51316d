/* The int8 GEMM of the quantised ops (QLinearMatMul, QLinearConv, QGemm, MatMulInteger,
 * ConvInteger, DynamicQuantizeMatMul): y = (a - za) @ (B - zb) (+ bias) in int32, stored as
 * int32, requantised to 8 bits, or scaled to float32.
 *
 * B (K x N, u8 or s8, per-column zero points) is packed once at compile into int16 panels of
 * QNR columns with its zero points subtracted: packed[p][k/2][QNR][2], k padded to even and
 * columns past N zero. a is widened four rows at a time to int16 pairs (a - za). Per pair of
 * k, _mm256_madd_epi16 of a broadcast (a[k], a[k+1]) with the panel's 8 columns gives each
 * column a[k]b[k] + a[k+1]b[k+1] exactly: both factors lie in [-255, 255], so nothing
 * saturates (vpmaddubsw, the u8 x s8 instruction, saturates its int16 sums: the u8 x s8 form
 * below uses it only on weights split so that it cannot).
 * A VNNI machine runs the same tile with vpdpwssd (AVX512-VNNI on 256-bit vectors), which
 * is the madd and the add in one; that path cannot be tested on an AVX2-only machine.
 *
 * Requantisation is MLAS's (onnxruntime's): float(acc + bias) * scale[j] in float32, clamped
 * to [qmin - zy, qmax - zy], rounded to nearest even, plus zy; so the 8-bit results equal
 * onnxruntime's QLinearConv / QLinearMatMul where its multiplier is a float32 too.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QGEMM_X86 1
#endif

#define QMR 4
#define QNR 16

int64_t aioge_qgemm_packed(int64_t k, int64_t n)
{
    if (k < 0 || n < 0)
        return -1;
    return (k + 1) / 2 * 2 * ((n + QNR - 1) / QNR * QNR);
}

static inline int32_t qload(const void *p, int64_t i, int is_signed)
{
    return is_signed ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}

int aioge_qgemm_pack(const void *b, int b_signed, int64_t k, int64_t n, int64_t sk, int64_t sn, const int32_t *zb,
                     int64_t nzb, int16_t *packed, int64_t packed_len)
{
    if (k < 0 || n < 0 || (nzb != 1 && nzb != n) || packed_len != aioge_qgemm_packed(k, n))
        return AIOGE_EGEOMETRY;
    const int64_t kp = (k + 1) / 2 * 2, panels = (n + QNR - 1) / QNR;
    for (int64_t p = 0; p < panels; p++) {
        int16_t *dst = packed + p * kp * QNR;
        for (int64_t kk = 0; kk < kp; kk++)
            for (int64_t c = 0; c < QNR; c++) {
                const int64_t j = p * QNR + c;
                int32_t v = 0;
                if (kk < k && j < n)
                    v = qload(b, kk * sk + j * sn, b_signed) - zb[nzb == 1 ? 0 : j];
                dst[(kk / 2) * QNR * 2 + c * 2 + (kk & 1)] = (int16_t)v;
            }
    }
    return 0;
}

/* The u8 x s8 form: vpmaddubsw sums two u8 x s8 products in int16 with saturation, exact
 * where each pair of k of B (less zero points) has |b0| + |b1| <= 128 (255 * 128 = 32640), its
 * sums going on in int32 (vpmaddwd by ones). B in quads of k: packed8[p][k/4][QNR][4] int8, k
 * padded to 4 with zeros; a is read as unsigned (an s8 a flipped to u8 by +128) and
 * (a - za) @ B = a @ B - za * colsum(B). A pair that breaks the bound is split: B = B' + R, B'
 * in the quads within the bound and the rest R (a few values: full-range weights rarely have
 * two large ones side by side) as a sparse list per column (rptr, ridx, rval), added to each
 * tile exactly in int32. Onnxruntime's quantizer writes 7-bit weights (R empty) with
 * reduce_range; full-range ones have R of about 0.1% of B. */
int64_t aioge_qgemm_packed8(int64_t k, int64_t n)
{
    if (k < 0 || n < 0)
        return -1;
    return (k + 3) / 4 * 4 * ((n + QNR - 1) / QNR * QNR);
}

/* B' of the pair (v0, v1) (each in [-255, 255]): the smaller in magnitude kept within 64, the
 * other within 128 less it, so |p0| + |p1| <= 128 and both are int8. */
static void split_pair(int32_t v0, int32_t v1, int32_t *p0, int32_t *p1)
{
    if (abs(v0) + abs(v1) <= 128 && v0 >= -128 && v0 <= 127 && v1 >= -128 && v1 <= 127) {
        *p0 = v0, *p1 = v1;
        return;
    }
    int32_t *ps = abs(v0) <= abs(v1) ? p0 : p1, *pb = ps == p0 ? p1 : p0;
    const int32_t vs = ps == p0 ? v0 : v1, vb = ps == p0 ? v1 : v0;
    *ps = vs < -64 ? -64 : (vs > 64 ? 64 : vs);
    const int32_t room = 128 - abs(*ps), hi = room < 127 ? room : 127;
    *pb = vb < -room ? -room : (vb > hi ? hi : vb);
}

static inline int32_t bval(const void *b, int b_signed, int64_t k, int64_t n, int64_t sk, int64_t sn, const int32_t *zb,
                           int64_t nzb, int64_t kk, int64_t j)
{
    return kk < k && j < n ? qload(b, kk * sk + j * sn, b_signed) - zb[nzb == 1 ? 0 : j] : 0;
}

int aioge_qgemm_pack8(const void *b, int b_signed, int64_t k, int64_t n, int64_t sk, int64_t sn, const int32_t *zb,
                      int64_t nzb, int8_t *packed, int64_t packed_len, int32_t *colsum, int32_t *rptr, int32_t *ridx,
                      int16_t *rval, int64_t rcap)
{
    if (k < 0 || n < 0 || (nzb != 1 && nzb != n) || packed_len != aioge_qgemm_packed8(k, n) || rcap < 0)
        return AIOGE_EGEOMETRY;
    int64_t nres = 0; /* the residual's size first: nothing written when it is over rcap */
    for (int64_t j = 0; j < n; j++)
        for (int64_t kk = 0; kk < k; kk += 2) {
            const int32_t v0 = bval(b, b_signed, k, n, sk, sn, zb, nzb, kk, j);
            const int32_t v1 = bval(b, b_signed, k, n, sk, sn, zb, nzb, kk + 1, j);
            int32_t p0, p1;
            split_pair(v0, v1, &p0, &p1);
            nres += (p0 != v0) + (p1 != v1);
            if (nres > rcap)
                return 0;
        }
    if (nres && (!rptr || !ridx || !rval))
        return AIOGE_EGEOMETRY;
    const int64_t kq = (k + 3) / 4 * 4, panels = (n + QNR - 1) / QNR;
    nres = 0;
    for (int64_t j = 0; j < n; j++) {
        colsum[j] = 0;
        if (rptr)
            rptr[j] = (int32_t)nres;
        for (int64_t kk = 0; kk < k; kk += 2) {
            const int32_t v[2] = {bval(b, b_signed, k, n, sk, sn, zb, nzb, kk, j),
                                  bval(b, b_signed, k, n, sk, sn, zb, nzb, kk + 1, j)};
            int32_t p[2];
            split_pair(v[0], v[1], &p[0], &p[1]);
            for (int h = 0; h < 2; h++) {
                colsum[j] += v[h];
                packed[(j / QNR) * kq * QNR + ((kk + h) / 4) * QNR * 4 + (j % QNR) * 4 + ((kk + h) & 3)] = (int8_t)p[h];
                if (p[h] != v[h]) {
                    ridx[nres] = (int32_t)(kk + h);
                    rval[nres++] = (int16_t)(v[h] - p[h]);
                }
            }
        }
        for (int64_t kk = (k + 1) / 2 * 2; kk < kq; kk++)
            packed[(j / QNR) * kq * QNR + (kk / 4) * QNR * 4 + (j % QNR) * 4 + (kk & 3)] = 0;
    }
    if (rptr)
        rptr[n] = (int32_t)nres;
    for (int64_t j = n; j < panels * QNR; j++) /* the last panel's columns past N */
        for (int64_t kk = 0; kk < kq; kk++)
            packed[(j / QNR) * kq * QNR + (kk / 4) * QNR * 4 + (j % QNR) * 4 + (kk & 3)] = 0;
    return (int)(1 + nres);
}

/* The geometry block of aioge_qgemm_rows / JOB_QGEMM. */
enum {
    QG_A, QG_PACKED, QG_BIAS, QG_SCALE, QG_Y, QG_M, QG_K, QG_N, QG_LDA, QG_LDY, QG_A_SIGNED, QG_ZA,
    QG_MODE, /* 0: int32 out, 1: uint8, 2: int8, 3: float32 (acc * scale[j] + fbias[j]) */
    QG_ZY, QG_NSCALE, QG_PACKED_LEN, QG_A_LEN, QG_Y_LEN, QG_LO, /* the least 8-bit value stored (Relu: zy) */
    QG_FORMAT, /* 0: int16 pairs (aioge_qgemm_pack), 1: u8 x s8 quads (aioge_qgemm_pack8) */
    QG_COLSUM, /* format 1: the column sums of B */
    QG_RPTR, QG_RIDX, QG_RVAL, /* format 1: B's residual per column (0 when it has none) */
    QG_FBIAS, /* mode 3: a float32 bias per column, or 0 */
    QG_NARGS
};

/* The int32 tile of rows [0, QMR) x panel columns [0, QNR): acc[r][c]. */
static void tile_scalar(const int16_t *aw, int64_t kp, const int16_t *panel, int32_t acc[QMR][QNR])
{
    memset(acc, 0, sizeof(int32_t) * QMR * QNR);
    for (int64_t t = 0; t < kp / 2; t++) {
        const int16_t *b = panel + t * QNR * 2;
        for (int r = 0; r < QMR; r++) {
            const int32_t a0 = aw[r * kp + 2 * t], a1 = aw[r * kp + 2 * t + 1];
            for (int c = 0; c < QNR; c++)
                acc[r][c] += a0 * b[2 * c] + a1 * b[2 * c + 1];
        }
    }
}

#ifdef QGEMM_X86
/* The 4 x 16 int32 tile both operand forms share: each step of the k loop is one 4-byte group
 * of each of A's 4 rows (an int16 pair, or 4 uint8), broadcast, against 64 bytes of the panel
 * (16 columns' groups in two vectors) by OP, which accumulates into its first argument. */
#define TILE_4X16(OP, A, LDA_BYTES, PANEL, STEPS)                                                                      \
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00; \
    const char *a_ = (const char *)(A), *p_ = (const char *)(PANEL);                                                   \
    for (int64_t t = 0; t < (STEPS); t++) {                                                                            \
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)(p_ + 64 * t));                                         \
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(p_ + 64 * t + 32));                                    \
        TILE_ROW(OP, c00, c01, a_ + 4 * t);                                                                            \
        TILE_ROW(OP, c10, c11, a_ + (LDA_BYTES) + 4 * t);                                                              \
        TILE_ROW(OP, c20, c21, a_ + 2 * (LDA_BYTES) + 4 * t);                                                          \
        TILE_ROW(OP, c30, c31, a_ + 3 * (LDA_BYTES) + 4 * t);                                                          \
    }                                                                                                                  \
    _mm256_storeu_si256((__m256i *)acc[0], c00);                                                                       \
    _mm256_storeu_si256((__m256i *)(acc[0] + 8), c01);                                                                 \
    _mm256_storeu_si256((__m256i *)acc[1], c10);                                                                       \
    _mm256_storeu_si256((__m256i *)(acc[1] + 8), c11);                                                                 \
    _mm256_storeu_si256((__m256i *)acc[2], c20);                                                                       \
    _mm256_storeu_si256((__m256i *)(acc[2] + 8), c21);                                                                 \
    _mm256_storeu_si256((__m256i *)acc[3], c30);                                                                       \
    _mm256_storeu_si256((__m256i *)(acc[3] + 8), c31);

#define TILE_ROW(OP, lo, hi, at)                                                                                       \
    do {                                                                                                               \
        int32_t s_;                                                                                                    \
        memcpy(&s_, (at), 4);                                                                                          \
        const __m256i a_row = _mm256_set1_epi32(s_);                                                                   \
        OP(lo, a_row, b0);                                                                                             \
        OP(hi, a_row, b1);                                                                                             \
    } while (0)

#define MADD_AVX2(c, a, b) c = _mm256_add_epi32(c, _mm256_madd_epi16(a, b))
#define MADD_VNNI(c, a, b) c = _mm256_dpwssd_epi32(c, a, b)

__attribute__((target("avx2"))) static void tile_avx2(const int16_t *aw, int64_t kp, const int16_t *panel,
                                                      int32_t acc[QMR][QNR])
{
    TILE_4X16(MADD_AVX2, aw, 2 * kp, panel, kp / 2)
}

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) static void tile_vnni(const int16_t *aw, int64_t kp,
                                                                                  const int16_t *panel, int32_t acc[QMR][QNR])
{
    TILE_4X16(MADD_VNNI, aw, 2 * kp, panel, kp / 2)
}
#endif

typedef void (*tile_fn)(const int16_t *, int64_t, const int16_t *, int32_t[QMR][QNR]);
typedef void (*tile8_fn)(const uint8_t *, int64_t, int64_t, const int8_t *, int32_t[QMR][QNR]);

/* The u8 tiles read A's 4 rows lda bytes apart (the copy, or A itself), kq bytes of each. */
static void tile8_scalar(const uint8_t *aw, int64_t lda, int64_t kq, const int8_t *panel, int32_t acc[QMR][QNR])
{
    memset(acc, 0, sizeof(int32_t) * QMR * QNR);
    for (int64_t t = 0; t < kq / 4; t++) {
        const int8_t *b = panel + t * QNR * 4;
        for (int r = 0; r < QMR; r++) {
            const uint8_t *a = aw + r * lda + 4 * t;
            for (int c = 0; c < QNR; c++)
                acc[r][c] += a[0] * b[4 * c] + a[1] * b[4 * c + 1] + a[2] * b[4 * c + 2] + a[3] * b[4 * c + 3];
        }
    }
}

#ifdef QGEMM_X86
/* exact under the pack8 condition: the int16 pair sums never saturate */
#define DOT_AVX2(c, a, b) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones))
#define DOT_VNNI(c, a, b) c = _mm256_dpbusd_epi32(c, a, b)

__attribute__((target("avx2"))) static void tile8_avx2(const uint8_t *aw, int64_t lda, int64_t kq, const int8_t *panel,
                                                       int32_t acc[QMR][QNR])
{
    const __m256i ones = _mm256_set1_epi16(1);
    TILE_4X16(DOT_AVX2, aw, lda, panel, kq / 4)
}

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) static void tile8_vnni(const uint8_t *aw, int64_t lda, int64_t kq,
                                                                                   const int8_t *panel, int32_t acc[QMR][QNR])
{
    TILE_4X16(DOT_VNNI, aw, lda, panel, kq / 4)
}
#endif

/* -1: not chosen yet; 0 scalar, 1 AVX2, 2 AVX512-VNNI. */
static int qpath = -1;

static int best_path(void)
{
#ifdef QGEMM_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
        return 2;
    if (__builtin_cpu_supports("avx2"))
        return 1;
#endif
    return 0;
}

int aioge_qgemm_path(int force)
{
    const int best = best_path();
    if (force >= 0)
        qpath = force < best ? force : best;
    else if (qpath < 0)
        qpath = best;
    return qpath;
}

static tile_fn pick_tile(void)
{
    int p = qpath >= 0 ? qpath : aioge_qgemm_path(-1);
#ifdef QGEMM_X86
    if (p == 2)
        return tile_vnni;
    if (p == 1)
        return tile_avx2;
#endif
    (void)p;
    return tile_scalar;
}

#ifdef QGEMM_X86
/* store_tile's 8-bit modes for a whole tile row of QNR columns, 8 lanes at a time: the same
 * float32 multiply, clamp and round to nearest even (vcvtps2dq under the default rounding). */
__attribute__((target("avx2"))) static void store_row8_avx2(const int64_t *g, const int32_t *acc, int64_t row, int64_t j0)
{
    const int mode = (int)g[QG_MODE];
    const int32_t *bias = (const int32_t *)(intptr_t)g[QG_BIAS];
    const float *scale = (const float *)(intptr_t)g[QG_SCALE];
    const int32_t zy = (int32_t)g[QG_ZY];
    const int32_t qmin = mode == 1 ? 0 : -128, qmax = mode == 1 ? 255 : 127;
    const int32_t lo = (int32_t)g[QG_LO] > qmin ? (int32_t)g[QG_LO] : qmin;
    const __m256 fmin = _mm256_set1_ps((float)(lo - zy)), fmax = _mm256_set1_ps((float)(qmax - zy));
    __m256i q[2];
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(acc + 8 * h));
        if (bias)
            v = _mm256_add_epi32(v, _mm256_loadu_si256((const __m256i *)(bias + j0 + 8 * h)));
        const __m256 s = g[QG_NSCALE] == 1 ? _mm256_set1_ps(scale[0]) : _mm256_loadu_ps(scale + j0 + 8 * h);
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), s);
        f = _mm256_min_ps(_mm256_max_ps(f, fmin), fmax);
        q[h] = _mm256_add_epi32(_mm256_cvtps_epi32(f), _mm256_set1_epi32(zy));
    }
    /* 16 int32 in range -> 16 bytes: pack to int16 (lane-wise), then to 8 bits, fix the lane order */
    __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
    __m128i lo16 = _mm256_castsi256_si128(w), hi16 = _mm256_extracti128_si256(w, 1);
    __m128i bytes = mode == 1 ? _mm_packus_epi16(lo16, hi16) : _mm_packs_epi16(lo16, hi16);
    _mm_storeu_si128((__m128i *)((uint8_t *)(intptr_t)g[QG_Y] + row), bytes);
}
#endif

static tile8_fn pick_tile8(void)
{
    int p = qpath >= 0 ? qpath : aioge_qgemm_path(-1);
#ifdef QGEMM_X86
    if (p == 2)
        return tile8_vnni;
    if (p == 1)
        return tile8_avx2;
#endif
    (void)p;
    return tile8_scalar;
}

/* Mode 3's store of a tile row: float32 (acc + bias) * scale[j], then + fbias[j], two roundings
 * (as the Cast, Mul and Add it stands for: no contraction to a fused multiply-add). */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#ifdef QGEMM_X86
__attribute__((target("avx2"))) static void store_rowf_avx2(const int32_t *acc, const int32_t *bias, const float *scale,
                                                            int per_col, const float *fbias, float *y)
{
    for (int h = 0; h < QNR; h += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(acc + h));
        if (bias)
            v = _mm256_add_epi32(v, _mm256_loadu_si256((const __m256i *)(bias + h)));
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), per_col ? _mm256_loadu_ps(scale + h) : _mm256_set1_ps(scale[0]));
        if (fbias)
            f = _mm256_add_ps(f, _mm256_loadu_ps(fbias + h));
        _mm256_storeu_ps(y + h, f);
    }
}
#endif

static void store_rowf(const int64_t *g, const int32_t *acc, int64_t i, int64_t j0, int cols)
{
    const int32_t *bias = (const int32_t *)(intptr_t)g[QG_BIAS];
    const float *scale = (const float *)(intptr_t)g[QG_SCALE], *fbias = (const float *)(intptr_t)g[QG_FBIAS];
    float *y = (float *)(intptr_t)g[QG_Y] + i * g[QG_LDY] + j0;
    const int per_col = g[QG_NSCALE] != 1;
#ifdef QGEMM_X86
    if (cols == QNR && qpath >= 1) {
        store_rowf_avx2(acc, bias ? bias + j0 : NULL, per_col ? scale + j0 : scale, per_col, fbias ? fbias + j0 : NULL, y);
        return;
    }
#endif
    for (int c = 0; c < cols; c++) {
        float f = (float)(acc[c] + (bias ? bias[j0 + c] : 0)) * scale[per_col ? j0 + c : 0];
        y[c] = fbias ? f + fbias[j0 + c] : f;
    }
}
#pragma GCC pop_options

/* Stores rows [0, rows) and columns [j0, j0 + cols) of a tile. */
static void store_tile(const int64_t *g, int32_t acc[QMR][QNR], int64_t i0, int rows, int64_t j0, int cols)
{
    const int mode = (int)g[QG_MODE];
    const int32_t *bias = (const int32_t *)(intptr_t)g[QG_BIAS];
    const float *scale = (const float *)(intptr_t)g[QG_SCALE];
    const int64_t ldy = g[QG_LDY];
    const int32_t zy = (int32_t)g[QG_ZY];
    const int32_t qmin = mode == 1 ? 0 : -128, qmax = mode == 1 ? 255 : 127;
    const int32_t lo = (int32_t)g[QG_LO] > qmin ? (int32_t)g[QG_LO] : qmin;
    const float fmin = (float)(lo - zy), fmax = (float)(qmax - zy);
    for (int r = 0; r < rows; r++) {
        const int64_t row = (i0 + r) * ldy + j0;
#ifdef QGEMM_X86
        if (mode && mode < 3 && cols == QNR && qpath >= 1) {
            store_row8_avx2(g, acc[r], row, j0);
            continue;
        }
#endif
        if (mode == 3) {
            store_rowf(g, acc[r], i0 + r, j0, cols);
            continue;
        }
        for (int c = 0; c < cols; c++) {
            int32_t v = acc[r][c] + (bias ? bias[j0 + c] : 0);
            if (mode == 0) {
                ((int32_t *)(intptr_t)g[QG_Y])[row + c] = v;
                continue;
            }
            float f = (float)v * scale[g[QG_NSCALE] == 1 ? 0 : j0 + c];
            f = f < fmin ? fmin : (f > fmax ? fmax : f);
            const int32_t q = (int32_t)nearbyintf(f) + zy; /* the default rounding: to nearest even */
            if (mode == 1)
                ((uint8_t *)(intptr_t)g[QG_Y])[row + c] = (uint8_t)q;
            else
                ((int8_t *)(intptr_t)g[QG_Y])[row + c] = (int8_t)q;
        }
    }
}

static int qgemm_fits(const int64_t *g)
{
    const int64_t m = g[QG_M], k = g[QG_K], n = g[QG_N];
    if (m < 0 || k < 0 || n < 0 || g[QG_LDA] < k || g[QG_LDY] < n || g[QG_MODE] < 0 || g[QG_MODE] > 3)
        return 0;
    if (g[QG_FORMAT] != 0 && (g[QG_FORMAT] != 1 || !g[QG_COLSUM]))
        return 0;
    if (g[QG_RPTR] && (g[QG_FORMAT] != 1 || !g[QG_RIDX] || !g[QG_RVAL]))
        return 0;
    if (g[QG_PACKED_LEN] != (g[QG_FORMAT] ? aioge_qgemm_packed8(k, n) : aioge_qgemm_packed(k, n)))
        return 0;
    if (g[QG_MODE] && g[QG_NSCALE] != 1 && g[QG_NSCALE] != n)
        return 0;
    if (m == 0)
        return 1;
    return aioge_fits(g[QG_A_LEN] - k, m - 1, g[QG_LDA], 1, 1) && aioge_fits(g[QG_Y_LEN] - n, m - 1, g[QG_LDY], 1, 1);
}

/* Row blocks [b0, b1) of y from the u8 x s8 form: rows copied as unsigned bytes (an s8 a
 * flipped by +128, and za with it), the za * colsum(B) term taken off each tile. */
static int rows8(const int64_t *g, int64_t b0, int64_t b1)
{
    const int64_t m = g[QG_M], k = g[QG_K], n = g[QG_N], kq = (k + 3) / 4 * 4, lda = g[QG_LDA];
    const int a_signed = (int)g[QG_A_SIGNED];
    const int32_t za = (int32_t)g[QG_ZA] + (a_signed ? 128 : 0);
    const uint8_t *a = (const uint8_t *)(intptr_t)g[QG_A];
    const int8_t *packed = (const int8_t *)(intptr_t)g[QG_PACKED];
    const int32_t *colsum = (const int32_t *)(intptr_t)g[QG_COLSUM];
    const int32_t *rptr = (const int32_t *)(intptr_t)g[QG_RPTR], *ridx = (const int32_t *)(intptr_t)g[QG_RIDX];
    const int16_t *rval = (const int16_t *)(intptr_t)g[QG_RVAL];
    uint8_t *aw = (uint8_t *)aioge_thread_scratch(1, (size_t)(QMR * kq) / 4 + 1);
    if (!aw)
        return AIOGE_ENOMEM;
    const tile8_fn tile = pick_tile8();
    int32_t acc[QMR][QNR];
    const int64_t panels = (n + QNR - 1) / QNR, chunk = 1 + (192 * 1024) / (kq * QNR + 1);
    for (int64_t p0 = 0; p0 < panels; p0 += chunk) {
        const int64_t p1 = p0 + chunk < panels ? p0 + chunk : panels;
        for (int64_t blk = b0; blk < b1; blk++) {
            const int64_t i0 = blk * QMR;
            const int rows = (int)(m - i0 < QMR ? m - i0 : QMR);
            /* a full block of unsigned rows whose k is a multiple of 4 is read where it lies */
            const int direct = !a_signed && kq == k && rows == QMR;
            const uint8_t *at = direct ? a + i0 * lda : aw;
            const int64_t ld = direct ? lda : kq;
            for (int r = 0; r < QMR && !direct; r++) {
                uint8_t *dst = aw + r * kq;
                memset(dst + k, 0, (size_t)(kq - k));
                if (r >= rows) {
                    memset(dst, 0, (size_t)k);
                    continue;
                }
                if (a_signed)
                    for (int64_t kk = 0; kk < k; kk++)
                        dst[kk] = (uint8_t)(a[(i0 + r) * lda + kk] ^ 0x80);
                else
                    memcpy(dst, a + (i0 + r) * lda, (size_t)k);
            }
            for (int64_t p = p0; p < p1; p++) {
                tile(at, ld, kq, packed + p * kq * QNR, acc);
                const int cols = (int)(n - p * QNR < QNR ? n - p * QNR : QNR);
                for (int c = 0; rptr && c < cols; c++)
                    for (int32_t e = rptr[p * QNR + c]; e < rptr[p * QNR + c + 1]; e++)
                        for (int r = 0; r < rows; r++)
                            acc[r][c] += at[r * ld + ridx[e]] * (int32_t)rval[e];
                if (za)
                    for (int r = 0; r < rows; r++)
                        for (int c = 0; c < QNR; c++) /* past cols too: a whole row vectorises, and is not stored */
                            acc[r][c] -= za * (c < cols ? colsum[p * QNR + c] : 0);
                store_tile(g, acc, i0, rows, p * QNR, cols);
            }
        }
    }
    return 0;
}

/* Row blocks [b0, b1) (QMR rows each) of y. */
int aioge_qgemm_rows(const int64_t *g, int64_t b0, int64_t b1)
{
    if (!qgemm_fits(g))
        return AIOGE_EGEOMETRY;
    const int64_t m = g[QG_M], k = g[QG_K], n = g[QG_N], kp = (k + 1) / 2 * 2, lda = g[QG_LDA];
    const int a_signed = (int)g[QG_A_SIGNED];
    const int32_t za = (int32_t)g[QG_ZA];
    const void *a = (const void *)(intptr_t)g[QG_A];
    const int16_t *packed = (const int16_t *)(intptr_t)g[QG_PACKED];
    if (b1 * QMR > m + QMR - 1)
        b1 = (m + QMR - 1) / QMR;
    if (g[QG_FORMAT] == 1)
        return rows8(g, b0, b1);
    int16_t *aw = (int16_t *)aioge_thread_scratch(1, (size_t)(QMR * kp + 2) / 2 + 1);
    if (!aw)
        return AIOGE_ENOMEM;
    const tile_fn tile = pick_tile();
    int32_t acc[QMR][QNR];
    /* Panels a chunk at a time (up to ~192 KB of them, which stay in L2) over every row block:
     * the rows are widened again for each chunk, K values against 16 * K products a panel. */
    const int64_t panels = (n + QNR - 1) / QNR, chunk = 1 + (192 * 1024) / (kp * QNR * 2 + 1);
    for (int64_t p0 = 0; p0 < panels; p0 += chunk) {
        const int64_t p1 = p0 + chunk < panels ? p0 + chunk : panels;
        for (int64_t blk = b0; blk < b1; blk++) {
            const int64_t i0 = blk * QMR;
            const int rows = (int)(m - i0 < QMR ? m - i0 : QMR);
            for (int r = 0; r < QMR; r++) {
                int16_t *dst = aw + r * kp;
                if (r >= rows) {
                    memset(dst, 0, (size_t)kp * sizeof(int16_t));
                    continue;
                }
                const int64_t base = (i0 + r) * lda;
                if (a_signed)
                    for (int64_t kk = 0; kk < k; kk++)
                        dst[kk] = (int16_t)(((const int8_t *)a)[base + kk] - za);
                else
                    for (int64_t kk = 0; kk < k; kk++)
                        dst[kk] = (int16_t)(((const uint8_t *)a)[base + kk] - za);
                if (kp > k)
                    dst[k] = 0;
            }
            for (int64_t p = p0; p < p1; p++) {
                tile(aw, kp, packed + p * kp * QNR, acc);
                store_tile(g, acc, i0, rows, p * QNR, (int)(n - p * QNR < QNR ? n - p * QNR : QNR));
            }
        }
    }
    return 0;
}

/* DynamicQuantizeLinear's passes over a float32 x, for DynamicQuantizeMatMul: its range with 0
 * in it (lohi[0] = min(x, 0), lohi[1] = max(x, 0)), and y = saturate(rint(x / scale) + zero) as
 * uint8 or int8 (a division, as the spec writes it, rounded half to even: numpy's float32
 * steps; QuantizeLinear's per-tensor case too). */
#ifdef QGEMM_X86
__attribute__((target("avx2"))) static void range_avx2(const float *x, int64_t n, float *lohi)
{
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        lo = _mm256_min_ps(lo, v), hi = _mm256_max_ps(hi, v);
    }
    float l[8], h[8];
    _mm256_storeu_ps(l, lo), _mm256_storeu_ps(h, hi);
    for (int j = 0; j < 8; j++)
        lohi[0] = l[j] < lohi[0] ? l[j] : lohi[0], lohi[1] = h[j] > lohi[1] ? h[j] : lohi[1];
    for (; i < n; i++)
        lohi[0] = x[i] < lohi[0] ? x[i] : lohi[0], lohi[1] = x[i] > lohi[1] ? x[i] : lohi[1];
}

__attribute__((target("avx2"))) static int64_t quantize_avx2(const float *x, int64_t n, float scale, float zero, int is_signed,
                                                          uint8_t *y)
{
    const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(zero);
    const __m256 bot = _mm256_set1_ps(is_signed ? -128.0f : 0.0f), top = _mm256_set1_ps(is_signed ? 127.0f : 255.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, z), bot), top);
        const __m256i q = _mm256_cvtps_epi32(v);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)(y + i), is_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w));
    }
    return i;
}
#endif

int aioge_qgemm_range(const float *x, int64_t n, float *lohi)
{
    if (n < 0)
        return AIOGE_EGEOMETRY;
    lohi[0] = lohi[1] = 0.0f;
#ifdef QGEMM_X86
    if (aioge_qgemm_path(-1) >= 1) {
        range_avx2(x, n, lohi);
        return 0;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        lohi[0] = x[i] < lohi[0] ? x[i] : lohi[0], lohi[1] = x[i] > lohi[1] ? x[i] : lohi[1];
    return 0;
}

int aioge_qgemm_quantize(const float *x, int64_t n, float scale, float zero, int is_signed, void *out)
{
    uint8_t *y = (uint8_t *)out;
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    if (n < 0 || !(scale > 0.0f))
        return AIOGE_EGEOMETRY;
    int64_t i = 0;
#ifdef QGEMM_X86
    if (aioge_qgemm_path(-1) >= 1)
        i = quantize_avx2(x, n, scale, zero, is_signed, y);
#endif
    for (; i < n; i++) {
        float v = nearbyintf(x[i] / scale) + zero;
        v = v < lo ? lo : (v > hi ? hi : v);
        y[i] = is_signed ? (uint8_t)(int8_t)v : (uint8_t)v;
    }
    return 0;
}

/* DequantizeLinear's per-tensor 8-bit case: y = (x - zero) * scale in float32 (x - zero exact). */
#ifdef QGEMM_X86
__attribute__((target("avx2"))) static int64_t dequantize_avx2(const void *x, int is_signed, int64_t n, float scale,
                                                            float zero, float *y)
{
    const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(zero);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i b = _mm_loadl_epi64((const __m128i *)((const uint8_t *)x + i));
        const __m256i w = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(w), z), s));
    }
    return i;
}
#endif

int aioge_qgemm_dequantize(const void *x, int is_signed, int64_t n, float scale, float zero, float *y)
{
    if (n < 0)
        return AIOGE_EGEOMETRY;
    int64_t i = 0;
#ifdef QGEMM_X86
    if (aioge_qgemm_path(-1) >= 1)
        i = dequantize_avx2(x, is_signed, n, scale, zero, y);
#endif
    for (; i < n; i++)
        y[i] = ((float)(is_signed ? ((const int8_t *)x)[i] : ((const uint8_t *)x)[i]) - zero) * scale;
    return 0;
}

/* An 8-bit (batch, rows, cols) -> (batch, cols, rows) transpose: the int8 convolutions' NCHW <->
 * NHWC (numpy copies it a byte at a time, strided). 16 x 16 blocks by four rounds of SSE2 byte
 * interleaves (out[2i], out[2i + 1] = lo, hi(in[i], in[i + 8]): four rounds transpose), the
 * edges scalar. */
int aioge_transpose8(const uint8_t *x, int64_t batch, int64_t rows, int64_t cols, uint8_t *y)
{
    if (batch < 0 || rows < 0 || cols < 0)
        return AIOGE_EGEOMETRY;
    for (int64_t b = 0; b < batch; b++) {
        const uint8_t *xb = x + b * rows * cols;
        uint8_t *yb = y + b * rows * cols;
        int64_t r0 = 0;
#ifdef __SSE2__
        for (; r0 + 16 <= rows; r0 += 16) {
            int64_t c0 = 0;
            for (; c0 + 16 <= cols; c0 += 16) {
                __m128i v[16], o[16];
                for (int i = 0; i < 16; i++)
                    v[i] = _mm_loadu_si128((const __m128i *)(xb + (r0 + i) * cols + c0));
                for (int round = 0; round < 4; round++) {
                    for (int i = 0; i < 8; i++) {
                        o[2 * i] = _mm_unpacklo_epi8(v[i], v[i + 8]);
                        o[2 * i + 1] = _mm_unpackhi_epi8(v[i], v[i + 8]);
                    }
                    memcpy(v, o, sizeof v);
                }
                for (int i = 0; i < 16; i++)
                    _mm_storeu_si128((__m128i *)(yb + (c0 + i) * rows + r0), v[i]);
            }
            for (; c0 < cols; c0++)
                for (int i = 0; i < 16; i++)
                    yb[c0 * rows + r0 + i] = xb[(r0 + i) * cols + c0];
        }
#endif
        for (; r0 < rows; r0++)
            for (int64_t c = 0; c < cols; c++)
                yb[c * rows + r0] = xb[r0 * cols + c];
    }
    return 0;
}

/* A QDQ model's DQ(a) + DQ(b) -> Q in one pass, rounding as the three nodes do in float32
 * (DequantizeLinear, Add, QuantizeLinear): v = (a - za) * sa + (b - zb) * sb, then
 * saturate(rint(v / sc) + zc); a, b and y n 8-bit values of one kind (is_signed). */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
int aioge_qdq_add(const void *a, float sa, float za, const void *b, float sb, float zb, int is_signed, int64_t n,
                  float sc, float zc, void *y)
{
    if (n < 0 || !(sc > 0.0f))
        return AIOGE_EGEOMETRY;
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    const uint8_t *ua = (const uint8_t *)a, *ub = (const uint8_t *)b;
    const int8_t *sa8 = (const int8_t *)a, *sb8 = (const int8_t *)b;
    uint8_t *uy = (uint8_t *)y;
    for (int64_t i = 0; i < n; i++) {
        const float va = is_signed ? (float)sa8[i] : (float)ua[i], vb = is_signed ? (float)sb8[i] : (float)ub[i];
        const float v = (va - za) * sa + (vb - zb) * sb;
        float q = nearbyintf(v / sc) + zc;
        q = q < lo ? lo : (q > hi ? hi : q);
        uy[i] = is_signed ? (uint8_t)(int8_t)q : (uint8_t)q;
    }
    return 0;
}
#pragma GCC pop_options
