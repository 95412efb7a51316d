/* 2-D max and average pooling over NCHW float32 planes (MaxPool with its Indices output and
 * dilations, AveragePool with count_include_pad, ceil mode and pads, and the global pools as a
 * window the size of the plane): pool_algos.py calls it through JOB_POOL.
 *
 * Separable, one output row at a time: the window's input rows (those inside the plane) are
 * reduced into a row buffer whose pads hold the identity (-inf or 0); at column stride 2 that
 * row is split into its even and odd columns (at stride s into its s phases), so each kernel
 * column reads a contiguous run, and the kernel columns are reduced into the output row. Every
 * row operation runs 8 floats at a time with AVX2 where the CPU has it (chosen at run time: the
 * library is not built for one CPU), else in plain loops. The scratch rows are padded by a
 * vector so the vector loops never need a tail; reads of the input use masked loads at a row's
 * end. MaxPool with indices runs window by window in row-major order instead (the first
 * maximum in that order is the one ONNX names, which a separable pass cannot tell), 8 outputs
 * at a time. The AVX-512 tier (built with __AVX512F__) runs column strides 1 and 2, and any
 * plane whose output row is one vector, 16 columns at a time in registers (separable16).
 * An average multiplies by 1 / its count (a table per job) in every pass: the same bits.
 * MaxPool with 3 kernel columns at column stride 2 (the 3x3 s2 pools) takes s2x3_v / s2x3_8:
 * the planes' output rows in one loop, each row's columns split in registers (no stored split).
 *
 * A max takes a NaN wherever one is in the window, as np.maximum does. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"

#define AVX2 __attribute__((target("avx2,fma")))
#define V 8 /* floats per vector and the scratch rows' slack */

static int simd = -1; /* -1: not yet asked; 0: plain loops; 1: AVX2; 2: AVX2, flat-phase depthwise */

int aioge_simd_avx2(int force)
{
    if (force >= 0)
        simd = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? force : 0;
    else if (simd < 0)
        simd = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return simd;
}

static inline float max_nan1(float a, float v) { return v > a || v != v ? v : a; }

/* -- the row operations: dst (scratch) with src over n values; the AVX2 ones round n up to a
 * vector for dst and for src when src is scratch (``in``: src is the input, read masked) -- */

static inline void row_copy_c(float *d, const float *s, int64_t n, int in) { (void)in; memcpy(d, s, sizeof(float) * (size_t)n); }
static inline void row_max_c(float *d, const float *s, int64_t n, int in)
{
    (void)in;
    for (int64_t i = 0; i < n; i++)
        d[i] = max_nan1(d[i], s[i]);
}
static inline void row_add_c(float *d, const float *s, int64_t n, int in)
{
    (void)in;
    for (int64_t i = 0; i < n; i++)
        d[i] += s[i];
}

AVX2 static inline __m256i tail_mask(int64_t left)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
AVX2 static inline __m256 max_nan8(__m256 a, __m256 v)
{
    return _mm256_blendv_ps(_mm256_max_ps(v, a), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
/* max_nan8(max_nan8(x0, x1), x2) in 4 operations: a tie keeps the earlier; a NaN in x0 is the
 * second operand of both maxes, one in x1 or x2 sets every bit (a NaN) through the unordered
 * test (the chain's 6 operations, 2 of them blends, cost AVX2's 3x3 pools a third) */
AVX2 static inline __m256 max3_8(__m256 x0, __m256 x1, __m256 x2)
{
    return _mm256_or_ps(_mm256_max_ps(x2, _mm256_max_ps(x1, x0)), _mm256_cmp_ps(x1, x2, _CMP_UNORD_Q));
}
/* the vector loop of a row operation; the last vector of an input row read masked */
#define ROW_AVX2(name, expr)                                                                \
    AVX2 static inline void name(float *d, const float *s, int64_t n, int in)                      \
    {                                                                                       \
        const int64_t whole = in ? n / V * V : n;                                           \
        int64_t i = 0;                                                                      \
        for (; i < whole; i += V) {                                                         \
            const __m256 a = _mm256_loadu_ps(d + i), v = _mm256_loadu_ps(s + i);            \
            (void)a;                                                                        \
            _mm256_storeu_ps(d + i, expr);                                                  \
        }                                                                                   \
        if (i < n) {                                                                        \
            const __m256 a = _mm256_loadu_ps(d + i), v = _mm256_maskload_ps(s + i, tail_mask(n - i)); \
            (void)a;                                                                        \
            _mm256_storeu_ps(d + i, expr);                                                  \
        }                                                                                   \
    }
ROW_AVX2(row_copy_v, v)

/* the even and odd columns of s[0, n) into e and o (scratch both ways) */
static inline void split2_c(const float *s, float *e, float *o, int64_t n)
{
    for (int64_t m = 0; 2 * m < n; m++) {
        e[m] = s[2 * m];
        o[m] = s[2 * m + 1];
    }
}

/* y[q] *= inv[q] (1 / the window's count: a multiply, the same in every pass; a divide per
 * vector cost 2048x8x8 planes half their time) */
static inline void row_div_c(float *y, const float *inv, int64_t n)
{
    for (int64_t q = 0; q < n; q++)
        y[q] *= inv[q];
}
/* The AVX2 pass reduces in registers, one store a vector (a row operation a tap loaded and
 * stored the row each time: ResNet's 3x3 s2 MaxPool on 64x112x112 took 312 us on one core,
 * onnxruntime's 168), in the same order: the same bits. d[0, n) = the k input rows s + t *
 * step reduced (the last vector read masked) */
AVX2 static inline __m256 reduce_v(const float *s, int64_t step, int64_t k, int64_t n, int64_t i, int avg)
{
    const int whole = i + V <= n;
    if (whole && k == 3 && !avg)
        return max3_8(_mm256_loadu_ps(s + i), _mm256_loadu_ps(s + step + i), _mm256_loadu_ps(s + 2 * step + i));
    const __m256i m = tail_mask(n - i);
    __m256 a = whole ? _mm256_loadu_ps(s + i) : _mm256_maskload_ps(s + i, m);
    for (int64_t t = 1; t < k; t++) {
        const __m256 v = whole ? _mm256_loadu_ps(s + t * step + i) : _mm256_maskload_ps(s + t * step + i, m);
        a = avg ? _mm256_add_ps(a, v) : max_nan8(a, v);
    }
    return a;
}
AVX2 static inline void rows_v(float *d, const float *s, int64_t step, int64_t k, int64_t n, int avg)
{
    for (int64_t i = 0; i < n; i += V)
        _mm256_storeu_ps(d + i, reduce_v(s, step, k, n, i, avg));
}
/* The same stored split (column stride 2, the even and odd lanes shuffled out): input column i, padded column
 * pl + i, into e (even) or o at (pl + i) / 2. Past n: zeros, for the caller to fill. */
AVX2 static inline void rows_split2_v(float *e, float *o, const float *s, int64_t step, int64_t k, int64_t n, int64_t pl, int avg)
{
    float *de = pl % 2 ? o + (pl - 1) / 2 : e + pl / 2, *dd = pl % 2 ? e + (pl + 1) / 2 : o + pl / 2;
    for (int64_t i = 0; i < n; i += 2 * V) {
        const __m256 a = reduce_v(s, step, k, n, i, avg), b = reduce_v(s, step, k, n, i + V, avg);
        const __m256 ev = _mm256_shuffle_ps(a, b, 0x88), od = _mm256_shuffle_ps(a, b, 0xDD);
        _mm256_storeu_ps(de + i / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
        _mm256_storeu_ps(dd + i / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
    }
}
/* y[0, n rounded up to a vector) = the k kernel columns src + off[j] (scratch) reduced, an
 * average times inv[q] (1 / its count: row_div_c's expression) */
AVX2 static inline void cols_v(float *y, const float *src, const int64_t *off, int64_t k, int64_t n, const float *inv)
{
    for (int64_t q = 0; q < n; q += V) {
        __m256 a = _mm256_loadu_ps(src + off[0] + q);
        for (int64_t j = 1; j < k; j++)
            a = inv ? _mm256_add_ps(a, _mm256_loadu_ps(src + off[j] + q)) : max_nan8(a, _mm256_loadu_ps(src + off[j] + q));
        if (inv)
            a = _mm256_mul_ps(a, _mm256_loadu_ps(inv + q));
        _mm256_storeu_ps(y + q, a);
    }
}

/* The output columns [lo, hi) whose input column q * stride + off lies in [0, width): */
static void inside(int64_t off, int64_t stride, int64_t width, int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t a = off < 0 ? (-off + stride - 1) / stride : 0, b = width - 1 - off < 0 ? 0 : (width - 1 - off) / stride + 1;
    b = b > n ? n : b;
    *lo = a > b ? b : a;
    *hi = b;
}

/* The cells of window o along one axis inside [lo, hi) of input coordinates. */
static int64_t cells(int64_t o, int64_t stride, int64_t begin, int64_t k, int64_t dil, int64_t lo, int64_t hi)
{
    int64_t n = 0;
    for (int64_t t = 0; t < k; t++) {
        const int64_t pos = o * stride - begin + t * dil;
        n += pos >= lo && pos < hi;
    }
    return n;
}

#define SAME3_MAX 4096 /* is_same3's largest plane */
enum { G_H, G_W, G_KH, G_KW, G_SH, G_SW, G_DH, G_DW, G_PT, G_PL, G_PB, G_PR, G_OH, G_OW, G_AVG, G_INCLUDE, G_ORDER, POOL_GEO };

/* the indices kernel's tap for 8 outputs at a time: acc/at against s at base + q * sw */
AVX2 static void indices8(float *acc, int32_t *at, const float *s, int64_t base, int64_t sw, int64_t ow)
{
    const __m256i step = _mm256_set1_epi32((int)(V * sw));
    __m256i pos = _mm256_add_epi32(_mm256_set1_epi32((int)base), _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)sw)));
    for (int64_t q = 0; q < ow; q += V) {
        const __m256 v = _mm256_loadu_ps(s + q), a = _mm256_loadu_ps(acc + q);
        const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, a, _CMP_GT_OQ),
                                         _mm256_andnot_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
        _mm256_storeu_ps(acc + q, _mm256_blendv_ps(a, v, take));
        const __m256i old = _mm256_loadu_si256((const __m256i *)(at + q));
        _mm256_storeu_si256((__m256i *)(at + q), _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(old), _mm256_castsi256_ps(pos), take)));
        pos = _mm256_add_epi32(pos, step);
    }
}

/* One plane's output row r of a MaxPool with indices, window by window in row-major order (the
 * window's rows, then its columns): a strictly greater value (or a NaN over a number) takes
 * the place, so the first maximum stays, as ONNX's Indices name it. ``acc``/``at``: the row's
 * maxima and their (row * w + column) in the plane; ``phase``: the padded input row split by
 * column stride. */
static void indices_row(const float *xp, const int64_t *g, int64_t r, float *acc, int32_t *at, float *pad, float *phase,
                        int64_t wpad, int64_t wph, int vec)
{
    const int64_t wd = g[G_W], sw = g[G_SW], dw = g[G_DW], pl = g[G_PL], ow = g[G_OW];
    int64_t i0, i1;
    inside(r * g[G_SH] - g[G_PT], g[G_DH], g[G_H], g[G_KH], &i0, &i1);
    for (int64_t q = 0; q < ow + V; q++) {
        acc[q] = -INFINITY;
        at[q] = 0;
    }
    for (int64_t i = i0; i < i1; i++) {
        const int64_t ir = r * g[G_SH] - g[G_PT] + i * g[G_DH];
        (vec ? row_copy_v : row_copy_c)(pad + pl, xp + ir * wd, wd, 1);
        for (int64_t k = pl + wd; k < wpad; k++)
            pad[k] = -INFINITY; /* the vector copy wrote past the row */
        const float *src = pad;
        if (sw > 1) {
            for (int64_t k = 0; k < wpad; k++)
                phase[(k % sw) * wph + k / sw] = pad[k];
            src = phase;
        }
        for (int64_t j = 0; j < g[G_KW]; j++) {
            const int64_t off = j * dw, base = ir * wd + off - pl;
            const float *s = sw > 1 ? src + (off % sw) * wph + off / sw : src + off;
            if (vec)
                indices8(acc, at, s, base, sw, ow);
            else
                for (int64_t q = 0; q < ow; q++) {
                    const float v = s[q];
                    if (v > acc[q] || (v != v && acc[q] == acc[q])) {
                        acc[q] = v;
                        at[q] = (int32_t)(base + q * sw);
                    }
                }
        }
    }
}

/* The scratch of the separable pass (aioge_pool_f32 sizes it). */
struct scratch {
    float *pad, *phase, *yrow, *cnt, *rows, *inv; /* inv: the AVX-512 pass's, else NULL */
    const int64_t *span, *coff; /* the kernel rows [i0, i1) inside the plane of each output row; each kernel column's offset in the phase rows */
    int64_t wpad, wph;
};

/* One plane of the separable pass; ``vec`` a constant where it is inlined, so the row
 * operations inline too (a call per row operation cost 2x on 14x14 planes). */
static inline __attribute__((always_inline)) void separable(const float *xp, float *yp, const int64_t *g,
                                                            const struct scratch *sc, const int vec)
{
    const int64_t wd = g[G_W], kw = g[G_KW], sh = g[G_SH], sw = g[G_SW], dh = g[G_DH], dw = g[G_DW], pt = g[G_PT],
                  pl = g[G_PL], oh = g[G_OH], ow = g[G_OW], wpad = sc->wpad, wph = sc->wph;
    const int avg = (int)g[G_AVG];
    const float fill = avg ? 0.0f : -INFINITY;
    float *pad = sc->pad, *phase = sc->phase;
    for (int64_t r = 0; r < oh; r++) {
        const int64_t i0 = sc->span[2 * r], i1 = sc->span[2 * r + 1];
        float *yr = yp + r * ow;
        if (i0 >= i1) {
            for (int64_t q = 0; q < ow; q++)
                yr[q] = fill;
            continue;
        }
        /* the window's rows into the padded row, then its slack past the row restored */
        const float *x0 = xp + (r * sh - pt) * wd;
        if (vec && sw == 2) { /* straight into the even and odd columns, the pads filled after */
            rows_split2_v(phase, phase + wph, x0 + i0 * dh * wd, dh * wd, i1 - i0, wd, pl, avg);
            for (int64_t k = pl ? 0 : wd; k < wpad - V; k += k + 1 == pl ? wd + 1 : 1)
                phase[(k % 2) * wph + k / 2] = fill;
        } else if (vec)
            rows_v(pad + pl, x0 + i0 * dh * wd, dh * wd, i1 - i0, wd, avg);
        else
            row_copy_c(pad + pl, x0 + i0 * dh * wd, wd, 1);
        for (int64_t i = i0 + 1; i < i1 && !vec; i++)
            (avg ? row_add_c : row_max_c)(pad + pl, x0 + i * dh * wd, wd, 1);
        for (int64_t k = pl + wd; k < pl + wd + V && k < wpad; k++)
            pad[k] = fill;
        const float *src = vec && sw == 2 ? phase : pad;
        if (sw == 2 && !vec) {
            split2_c(pad, phase, phase + wph, wpad - V);
            src = phase;
        } else if (sw > 2) {
            for (int64_t k = 0; k < wpad - V; k++)
                phase[(k % sw) * wph + k / sw] = pad[k];
            src = phase;
        }
        /* the vector loops write up to a vector past the row: straight into the plane where
         * that stays inside it (the next plane may be another thread's) */
        float *out = vec && r * ow + (ow + V - 1) / V * V <= oh * ow ? yr : sc->yrow;
        if (vec)
            cols_v(out, src, sc->coff, kw, ow, avg ? sc->inv + r * (ow + 2 * V) : NULL);
        for (int64_t j = 0; j < kw && !vec; j++) {
            const int64_t off = j * dw;
            const float *s = sw > 1 ? src + (off % sw) * wph + off / sw : src + off;
            (j == 0 ? row_copy_c : avg ? row_add_c : row_max_c)(out, s, ow, 0);
        }
        if (avg && !vec)
            row_div_c(out, sc->inv + r * (ow + 2 * V), ow);
        if (out != yr)
            memcpy(yr, out, sizeof(float) * (size_t)ow);
    }
}
/* The AVX2 tier's form of s2x3_v (the AVX-512 tier's, below), 8 outputs a step: the 16
 * columns' even and odd lanes (shuffles), the third tap the even lanes one on, the next
 * step's first column in lane 7. The same operations in the same order as the separable pass
 * (rows, then kernel columns 0, 1, 2): the same bits, without its stored split (192x71x71 -> 35x35
 * took 338 us, 1.7x the AVX-512 onnxruntime's node). */
static int is_s2x3(const int64_t *g)
{
    return !g[G_AVG] && g[G_KW] == 3 && g[G_SW] == 2 && g[G_DW] == 1 && g[G_PL] <= 2 && (g[G_OW] - 1) * 2 + 3 <= 1024;
}
AVX2 static inline __attribute__((always_inline)) __m256 vcol8(const float *s, int64_t step, const int64_t k, __m256i m, const int FULL)
{
    const __m256 fill = _mm256_set1_ps(-INFINITY);
    if (!k)
        return fill;
    if ((FULL || _mm256_testc_si256(m, _mm256_set1_epi32(-1))) && k == 3) {
        return max3_8(_mm256_loadu_ps(s), _mm256_loadu_ps(s + step), _mm256_loadu_ps(s + 2 * step));
    }
    if (FULL || _mm256_testc_si256(m, _mm256_set1_epi32(-1))) { /* whole: plain loads */
        __m256 a = _mm256_loadu_ps(s);
        for (int64_t t = 1; t < k; t++)
            a = max_nan8(a, _mm256_loadu_ps(s + t * step));
        return a;
    }
    __m256 a = _mm256_blendv_ps(fill, _mm256_maskload_ps(s, m), _mm256_castsi256_ps(m));
    for (int64_t t = 1; t < k; t++)
        a = max_nan8(a, _mm256_blendv_ps(fill, _mm256_maskload_ps(s + t * step, m), _mm256_castsi256_ps(m)));
    return a;
}
AVX2 static inline __attribute__((always_inline)) void s2w8(float *y, const float *s, int64_t step, const int64_t k, const int32_t *m,
                                                            int64_t nv, int64_t ow, const int FULL)
{
    const __m256 fill = _mm256_set1_ps(-INFINITY);
#define MK(v) _mm256_loadu_si256((const __m256i *)(m + 8 * (v)))
    __m256 a = vcol8(s, step, k, MK(0), FULL), b = 1 < nv ? vcol8(s + 8, step, k, MK(1), FULL) : fill;
    for (int64_t q = 0, v = 2; q < ow; q += 8, v += 2) {
        const __m256 na = v < nv ? vcol8(s + 8 * v, step, k, MK(v), FULL) : fill;
        const __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
        const __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
        const __m256 t = _mm256_permute2f128_ps(e, na, 0x21); /* e's high half, the next step's low */
        const __m256 e2 = _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(t), _mm256_castps_si256(e), 4));
        const __m256 r = max3_8(e, o, e2);
        if (q + 8 <= ow)
            _mm256_storeu_ps(y + q, r);
        else
            _mm256_maskstore_ps(y + q, tail_mask(ow - q), r);
        a = na;
        b = v + 1 < nv ? vcol8(s + 8 * v + 8, step, k, MK(v + 1), FULL) : fill;
    }
#undef MK
}
/* 3x3 s2 valid (no pads, the windows inside the row): the leading output rows whose windows are
 * 3 rows inside the plane (all but a ceil mode overhang) run a plane at a time, the rows' pointers
 * stepping (per-row span look-ups and branches cost 768x17x17 a fifth), the rest as before. */
static int64_t uniform3(const int64_t *g, const struct scratch *sc)
{
    int64_t n = 0;
    if (g[G_KH] == 3 && !g[G_PT] && !g[G_PL] && (g[G_OW] - 1) * 2 + 3 <= g[G_W])
        while (n < g[G_OH] && sc->span[2 * n] == 0 && sc->span[2 * n + 1] == 3)
            n++;
    return n;
}
/* A 3-column stride-2 pass's planes [p0, p1), both tiers: the uniform3 rows (ou of them) with
 * their pointers stepping, then each row by its window's span; ROW is the tier's one-row form
 * (s2w8, s2w) over vectors of L lanes, whole-vector loads (FULL 1) where they stay inside x.
 * k == 3 is spelled out so the common window inlines with a constant. Reads the caller's
 * geometry locals (x, y, hw, wd, sh, dh, pt, pl, oh, ow, step, nv, xend, span, ou, full, m). */
#define S2_PLANES(ROW, L)                                                                   \
    for (int64_t p = p0; p < p1; p++) {                                                     \
        int64_t r = 0;                                                                      \
        if (ou && x + p * hw + (ou - 1) * sh * wd + 2 * step + (L) * nv <= xend)             \
            for (const float *s = x + p * hw; r < ou; r++, s += sh * wd)                    \
                ROW(y + (p * oh + r) * ow, s, step, 3, m, nv, ow, 1);                       \
        for (; r < oh; r++) {                                                               \
            const int64_t i0 = span[2 * r], k = span[2 * r + 1] - i0;                       \
            const float *s = x + p * hw + (r * sh - pt + i0 * dh) * wd - pl;                \
            float *yr = y + (p * oh + r) * ow;                                              \
            if (k == 3 && full && s + 2 * step + (L) * nv <= xend)                          \
                ROW(yr, s, step, 3, m, nv, ow, 1);                                          \
            else if (k == 3)                                                                \
                ROW(yr, s, step, 3, m, nv, ow, 0);                                          \
            else                                                                            \
                ROW(yr, s, step, k, m, nv, ow, 0);                                          \
        }                                                                                   \
    }
/* 2x2 stride 2 over even planes without pads (pair2_v, both tiers) */
static int is_pair2(const int64_t *g)
{
    return g[G_KH] == 2 && g[G_KW] == 2 && g[G_SH] == 2 && g[G_SW] == 2 && g[G_DH] == 1 && g[G_DW] == 1 && !g[G_PT] &&
           !g[G_PL] && !g[G_PB] && !g[G_PR] && g[G_H] % 2 == 0 && g[G_W] % 2 == 0 && g[G_OH] * 2 == g[G_H] &&
           g[G_OW] * 2 == g[G_W];
}
/* The AVX2 tier's 2x2 stride-2 pool over even planes without pads (is_pair2, any width): the
 * planes' row pairs are consecutive in x and their output rows in y, so one loop runs them all
 * (a row at a time through the separable pass took 832x14x14 -> 7x7 86 us, onnxruntime's
 * AVX-512 node 19). Per 16 input columns: the two rows reduced down, the even and odd lanes
 * shuffled out and reduced, one lane permute, 8 outputs. Loads past the row pair read the next
 * one's (their outputs are never kept) but at the end of x, read masked; a store past the row
 * is overwritten by the next row's but at the last. Rows, then columns, then times 1 / 4: the
 * separable pass's order and bits. */
AVX2 static inline __attribute__((always_inline)) void pair2_8n(const float *x, float *y, int64_t pairs, int64_t wd, const int AVG)
{
    const int64_t ow = wd / 2, n = pairs * 2 * wd;
    const __m256 quarter = _mm256_set1_ps(0.25f);
    for (int64_t R = 0; R < pairs; R++, x += 2 * wd, y += ow)
        for (int64_t c = 0; c < wd; c += 16) {
            const int64_t left = n - R * 2 * wd - c - wd; /* values of x from the bottom row's column c */
            __m256 t0, t1, b0, b1;
            if (left >= 16) {
                t0 = _mm256_loadu_ps(x + c);
                t1 = _mm256_loadu_ps(x + c + 8);
                b0 = _mm256_loadu_ps(x + wd + c);
                b1 = _mm256_loadu_ps(x + wd + c + 8);
            } else {
                const __m256i m0 = tail_mask(left), m1 = tail_mask(left - 8);
                t0 = _mm256_maskload_ps(x + c, m0);
                t1 = _mm256_maskload_ps(x + c + 8, m1);
                b0 = _mm256_maskload_ps(x + wd + c, m0);
                b1 = _mm256_maskload_ps(x + wd + c + 8, m1);
            }
            const __m256 a = AVG ? _mm256_add_ps(t0, b0) : max_nan8(t0, b0), b = AVG ? _mm256_add_ps(t1, b1) : max_nan8(t1, b1);
            const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD);
            __m256 r = AVG ? _mm256_add_ps(e, o) : max_nan8(e, o);
            if (AVG)
                r = _mm256_mul_ps(r, quarter);
            r = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(r), 0xD8));
            if (c + 16 <= wd || R * ow + c / 2 + 8 <= pairs * ow)
                _mm256_storeu_ps(y + c / 2, r);
            else
                _mm256_maskstore_ps(y + c / 2, tail_mask(ow - c / 2), r);
        }
}
#ifndef __AVX512F__ /* the AVX-512 tier runs s2x3_v */
AVX2 static void s2x3_8(const float *x, float *y, int64_t p0, int64_t p1, const int64_t *g, const struct scratch *sc)
{
    const int64_t wd = g[G_W], sh = g[G_SH], dh = g[G_DH], pt = g[G_PT], pl = g[G_PL], oh = g[G_OH], ow = g[G_OW], hw = g[G_H] * wd,
                  need = (ow - 1) * 2 + 3, nv = (need + 7) / 8, step = dh * wd;
    const float *xend = x + p1 * hw;
    const int full = !pl && need <= wd; /* the lanes past a row are never picked */
    int32_t m[8 * (128 + 3)];
    for (int64_t v = 0; v < nv + 2; v++) /* the lanes of padded columns [8 v, 8 v + 8) inside the row */
        for (int64_t l = 0; l < 8; l++)
            m[8 * v + l] = -(8 * v + l >= pl && 8 * v + l < pl + wd);
    const int64_t *span = sc->span, ou = uniform3(g, sc);
    S2_PLANES(s2w8, 8);
}
AVX2 static void pair2_v(const float *x, float *y, int64_t planes, const int64_t *g)
{
    if (g[G_AVG])
        pair2_8n(x, y, planes * g[G_OH], g[G_W], 1);
    else
        pair2_8n(x, y, planes * g[G_OH], g[G_W], 0);
}
#endif
#ifdef __AVX512F__
/* The AVX-512 tier's pass for column stride 1 or 2 with every tap's shift (j * dw / sw) under
 * 16: one output row 16 columns at a time in registers. The window's input rows (those inside
 * the plane) are reduced 16 (stride 2: 32) columns at a time, read masked where a vector runs
 * off the row (the pads read as the identity), stride 2 split into its even and odd columns; a
 * kernel column j is then phase j * dw % sw of this block and the next shifted by j * dw / sw
 * lanes (one two-source permute), and the kernel columns are reduced in order into the output
 * row, an average times 1 / its count as the other passes do: the same bits. A max keeps a
 * NaN from either side: VMAXPS takes the second operand's, and lanes whose first is NaN are
 * masked off. */
static inline __m512 max16(__m512 a, __m512 v)
{
    return _mm512_mask_max_ps(a, _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a, v);
}
/* the k rows x0 + t * step reduced over input columns [c0, c0 + 16) */
static inline __m512 vert16(const float *x0, int64_t step, int64_t k, int64_t c0, int64_t wd, int avg, __m512 fill)
{
    const int64_t lo = c0 < 0 ? -c0 : 0, hi = wd - c0 < 16 ? wd - c0 : 16;
    if (hi <= lo)
        return fill;
    const __mmask16 m = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
    __m512 a = _mm512_mask_loadu_ps(fill, m, x0 + c0);
    for (int64_t t = 1; t < k; t++) {
        const __m512 v = _mm512_mask_loadu_ps(fill, m, x0 + t * step + c0);
        a = avg ? _mm512_add_ps(a, v) : max16(a, v);
    }
    return a;
}
static inline void phases16(__m512 *ph, const float *x0, int64_t step, int64_t k, int64_t c0, int64_t wd, int64_t sw, int avg,
                            __m512 fill)
{
    const __m512 a = vert16(x0, step, k, c0, wd, avg, fill);
    if (sw == 1) {
        ph[0] = a;
        return;
    }
    const __m512 b = vert16(x0, step, k, c0 + 16, wd, avg, fill);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    ph[0] = _mm512_permutex2var_ps(a, ev, b);
    ph[1] = _mm512_permutex2var_ps(a, _mm512_add_epi32(ev, _mm512_set1_epi32(1)), b);
}
static int is_small16(const int64_t *g);
static int fits16(const int64_t *g) { return ((g[G_SW] == 1 || g[G_SW] == 2) && (g[G_KW] - 1) * g[G_DW] / g[G_SW] < 16) || is_small16(g); }
/* One output row: the k window rows from x0, KW, SW, DW, AVG (and k, where the caller can)
 * constants where it is inlined (the taps unrolled, the blocks in registers). */
static inline __attribute__((always_inline)) void row16(float *yr, const float *x0, const float *inv, int64_t step, const int64_t k,
                                                        int64_t wd, int64_t pl, int64_t ow, const int64_t KW, const int64_t SW,
                                                        const int64_t DW, const int AVG)
{
    const __m512 fill = _mm512_set1_ps(AVG ? 0.0f : -INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 cur[2], next[2];
    phases16(cur, x0, step, k, -pl, wd, SW, AVG, fill);
    for (int64_t q = 0; q < ow; q += 16) {
        phases16(next, x0, step, k, (q + 16) * SW - pl, wd, SW, AVG, fill);
        __m512 a = cur[0];
        for (int64_t j = 1; j < KW; j++) {
            const int64_t p = j * DW % SW;
            const __m512 v = _mm512_permutex2var_ps(cur[p], _mm512_add_epi32(lane, _mm512_set1_epi32((int)(j * DW / SW))), next[p]);
            a = AVG ? _mm512_add_ps(a, v) : max16(a, v);
        }
        if (AVG)
            a = _mm512_mul_ps(a, _mm512_loadu_ps(inv + q));
        if (q + 16 <= ow)
            _mm512_storeu_ps(yr + q, a);
        else
            _mm512_mask_storeu_ps(yr + q, (__mmask16)((1u << (ow - q)) - 1), a);
        cur[0] = next[0];
        cur[1] = next[1];
    }
}
/* One plane; a window of KH rows all inside the plane takes row16 with k a constant. */
static inline __attribute__((always_inline)) void sep16(const float *xp, float *yp, const int64_t *g, const struct scratch *sc,
                                                        const int64_t KH, const int64_t KW, const int64_t SW, const int64_t DW,
                                                        const int AVG)
{
    const int64_t wd = g[G_W], sh = g[G_SH], dh = g[G_DH], pt = g[G_PT], pl = g[G_PL], oh = g[G_OH], ow = g[G_OW];
    for (int64_t r = 0; r < oh; r++) {
        const int64_t i0 = sc->span[2 * r], i1 = sc->span[2 * r + 1];
        float *yr = yp + r * ow;
        const float *x0 = xp + (r * sh - pt + i0 * dh) * wd, *inv = sc->inv ? sc->inv + r * (ow + 2 * V) : NULL;
        if (KH && i1 - i0 == KH)
            row16(yr, x0, inv, dh * wd, KH, wd, pl, ow, KW, SW, DW, AVG);
        else if (i1 > i0)
            row16(yr, x0, inv, dh * wd, i1 - i0, wd, pl, ow, KW, SW, DW, AVG);
        else
            for (int64_t q = 0; q < ow; q++)
                yr[q] = AVG ? 0.0f : -INFINITY;
    }
}
/* A plane whose output row is one vector and whose windows span at most 32 padded columns
 * ((ow - 1) * sw + (kw - 1) * dw + 1): per output row the window rows reduced over the two
 * vectors of padded columns [0, 32) (read masked, the same masks every row), then kernel column
 * j is one permute of the pair (lane q: padded column q * sw + j * dw): no per-row scalar work,
 * the taps at any stride and dilation. */
static inline __attribute__((always_inline)) void small16(const float *xp, float *yp, const int64_t *g, const struct scratch *sc,
                                                          const int64_t KH, const int64_t KW, const int TWO, const int AVG)
{
    const int64_t wd = g[G_W], sh = g[G_SH], sw = g[G_SW], dh = g[G_DH], dw = g[G_DW], pt = g[G_PT], pl = g[G_PL], oh = g[G_OH],
                  ow = g[G_OW];
    const __m512 fill = _mm512_set1_ps(AVG ? 0.0f : -INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i idx[33];
    for (int64_t j = 0; j < KW; j++)
        idx[j] = _mm512_min_epi32(_mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sw)), _mm512_set1_epi32((int)(j * dw))),
                                  _mm512_set1_epi32(31));
    const int64_t alo = pl, ahi = wd + pl < 16 ? wd + pl : 16, bhi = wd + pl - 16 < 16 ? wd + pl - 16 : 16;
    const __mmask16 ma = (__mmask16)(((1u << ahi) - 1) & ~((1u << alo) - 1)), mb = bhi > 0 ? (__mmask16)((1u << bhi) - 1) : 0;
    const __mmask16 mo = (__mmask16)((1u << ow) - 1);
    for (int64_t r = 0; r < oh; r++) {
        const int64_t i0 = sc->span[2 * r], i1 = sc->span[2 * r + 1], k = KH ? KH : i1 - i0;
        float *yr = yp + r * ow;
        if (!KH && i1 <= i0) {
            _mm512_mask_storeu_ps(yr, mo, fill);
            continue;
        }
        const float *x0 = xp + (r * sh - pt + i0 * dh) * wd - pl;
        __m512 a = _mm512_mask_loadu_ps(fill, ma, x0), b = TWO ? _mm512_mask_loadu_ps(fill, mb, x0 + 16) : fill;
        for (int64_t t = 1; t < k; t++) {
            const __m512 va = _mm512_mask_loadu_ps(fill, ma, x0 + t * dh * wd);
            a = AVG ? _mm512_add_ps(a, va) : max16(a, va);
            if (TWO) {
                const __m512 vb = _mm512_mask_loadu_ps(fill, mb, x0 + t * dh * wd + 16);
                b = AVG ? _mm512_add_ps(b, vb) : max16(b, vb);
            }
        }
        __m512 y = _mm512_permutex2var_ps(a, idx[0], b);
        for (int64_t j = 1; j < KW; j++) {
            const __m512 v = _mm512_permutex2var_ps(a, idx[j], b);
            y = AVG ? _mm512_add_ps(y, v) : max16(y, v);
        }
        if (AVG)
            y = _mm512_mul_ps(y, _mm512_loadu_ps(sc->inv + r * (ow + 2 * V)));
        _mm512_mask_storeu_ps(yr, mo, y);
    }
}
/* small16 with its window rows constant where they are all inside the plane */
static inline __attribute__((always_inline)) void small16k(const float *xp, float *yp, const int64_t *g, const struct scratch *sc,
                                                           const int64_t KW, const int TWO, const int AVG)
{
    int full = 1;
    for (int64_t r = 0; r < g[G_OH]; r++)
        full &= sc->span[2 * r + 1] - sc->span[2 * r] == g[G_KH];
    if (full && g[G_KH] == 3)
        small16(xp, yp, g, sc, 3, KW, TWO, AVG);
    else if (full && g[G_KH] == 2)
        small16(xp, yp, g, sc, 2, KW, TWO, AVG);
    else
        small16(xp, yp, g, sc, 0, KW, TWO, AVG);
}
static int is_small16(const int64_t *g) { return g[G_OW] <= 16 && (g[G_OW] - 1) * g[G_SW] + (g[G_KW] - 1) * g[G_DW] + 1 <= 32 && g[G_PL] < 16 && g[G_KW] <= 33; }
/* 2x2 stride 2, no pads, even planes at most 16 wide (oh = h / 2, ow = w / 2: the 14x14
 * transition AvgPool and GoogLeNet's 2x2 MaxPool): the block of planes as one flat array of
 * row pairs (2R, 2R + 1, across planes), two row pairs a step: each pair's 2w values from two
 * vectors, its bottom row one permute down, reduced down; the two pairs' columns then pair off
 * across both (even against odd lanes, a two-source permute) into w outputs, one store, no
 * per-row work. 832x14x14 max took 27.5 us a row at a time (small16), now 11.9 (onnxruntime
 * 12.0). Wider planes run a row pair at a time (pair2_16w, pair2_8n: 32 flat positions reduced
 * down and across and the even rows' values compressed out had lost, 256x28x28 avg 20.1 ->
 * 32.6 us). The same order as the other passes: rows, then columns,
 * then times 1 / 4: the same bits. */
static inline __attribute__((always_inline)) __m512 down2(const float *s, int64_t left, int64_t wd, const int AVG)
{
    const __m512 fill = _mm512_set1_ps(AVG ? 0.0f : -INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 a, b;
    if (left >= 32) {
        a = _mm512_loadu_ps(s);
        b = _mm512_loadu_ps(s + 16);
    } else {
        a = _mm512_mask_loadu_ps(fill, left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1), s);
        b = _mm512_mask_loadu_ps(fill, left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0, s + 16);
    }
    const __m512 bot = _mm512_permutex2var_ps(a, _mm512_add_epi32(lane, _mm512_set1_epi32((int)wd)), b);
    return AVG ? _mm512_add_ps(a, bot) : max16(a, bot);
}
static inline __attribute__((always_inline)) void pair2n(const float *x, float *y, int64_t pairs, int64_t wd, const int AVG)
{
    const int64_t half = wd / 2;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* output lane l: column pair l of row pair R (l < w / 2), else l - w / 2 of R + 1 (the second source) */
    const __mmask16 hi = (__mmask16)(((1u << wd) - 1) & ~((1u << half) - 1));
    const __m512i ev = _mm512_mask_add_epi32(_mm512_add_epi32(lane, lane), hi, _mm512_add_epi32(lane, lane), _mm512_set1_epi32((int)(16 - wd)));
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    const __m512 quarter = _mm512_set1_ps(0.25f);
    const int64_t n = pairs * 2 * wd;
    for (int64_t R = 0; R < pairs; R += 2, y += 2 * half) {
        const int64_t i = R * 2 * wd;
        const __m512 v0 = down2(x + i, n - i, wd, AVG), v1 = R + 1 < pairs ? down2(x + i + 2 * wd, n - i - 2 * wd, wd, AVG) : v0;
        const __m512 e = _mm512_permutex2var_ps(v0, ev, v1), o = _mm512_permutex2var_ps(v0, od, v1);
        __m512 r = AVG ? _mm512_add_ps(e, o) : max16(e, o);
        if (AVG)
            r = _mm512_mul_ps(r, quarter);
        _mm512_mask_storeu_ps(y, (__mmask16)((1u << (R + 1 < pairs ? wd : half)) - 1), r);
    }
}
/* planes over 16 wide: pair2_8n's loop at 32 columns a step (they took the 16-column pass:
 * 64x56x56 -> 28x28 max 22 us, now 15; 512x28x28 max 48 -> 43.5; averages take pair2_8n) */
static inline __attribute__((always_inline)) void pair2_16w(const float *x, float *y, int64_t pairs, int64_t wd, const int AVG)
{
    const int64_t ow = wd / 2, n = pairs * 2 * wd;
    const __m512 quarter = _mm512_set1_ps(0.25f);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i ev = _mm512_add_epi32(lane, lane), od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (int64_t R = 0; R < pairs; R++, x += 2 * wd, y += ow)
        for (int64_t c = 0; c < wd; c += 32) {
            const int64_t left = n - R * 2 * wd - c - wd; /* values of x from the bottom row's column c */
            const __mmask16 m0 = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            const __mmask16 m1 = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
            const __m512 t0 = _mm512_maskz_loadu_ps(m0, x + c), t1 = _mm512_maskz_loadu_ps(m1, x + c + 16);
            const __m512 b0 = _mm512_maskz_loadu_ps(m0, x + wd + c), b1 = _mm512_maskz_loadu_ps(m1, x + wd + c + 16);
            const __m512 a = AVG ? _mm512_add_ps(t0, b0) : max16(t0, b0), b = AVG ? _mm512_add_ps(t1, b1) : max16(t1, b1);
            const __m512 e = _mm512_permutex2var_ps(a, ev, b), o = _mm512_permutex2var_ps(a, od, b);
            __m512 r = AVG ? _mm512_add_ps(e, o) : max16(e, o);
            if (AVG)
                r = _mm512_mul_ps(r, quarter);
            if (c + 32 <= wd || R * ow + c / 2 + 16 <= pairs * ow)
                _mm512_storeu_ps(y + c / 2, r);
            else
                _mm512_mask_storeu_ps(y + c / 2, (__mmask16)((1u << (ow - c / 2)) - 1), r);
        }
}
static void pair2_v(const float *x, float *y, int64_t planes, const int64_t *g)
{
    if (g[G_W] > 16 && g[G_AVG]) /* an average ran faster 8 lanes a step (256x28x28 17.0 -> 15.8 us, 128x56x56 42.7 -> 35-42) */
        pair2_8n(x, y, planes * g[G_OH], g[G_W], 1);
    else if (g[G_W] > 16)
        pair2_16w(x, y, planes * g[G_OH], g[G_W], 0);
    if (g[G_W] > 16)
        return;
    if (g[G_AVG])
        pair2n(x, y, planes * g[G_OH], g[G_W], 1);
    else
        pair2n(x, y, planes * g[G_OH], g[G_W], 0);
}
/* MaxPool with 3 kernel columns at column stride 2 (dilation 1; any kernel rows, row stride,
 * pads, ceil mode), the planes' output rows as one sequence (no per-plane setup: 768x17x17 -> 8x8
 * took 58 us a plane at a time, onnxruntime 22). Per output row the window rows are reduced over
 * the padded columns 16 at a time, then:
 * - narrow rows (3 + 2 (ow - 1) <= 17 padded columns: ow <= 8): two output rows a vector. Each
 *   row's columns [0, 16) and [1, 17) reduced down (a, b), z = max(a, b) holds the max of column
 *   pairs (2j, 2j + 1) at its even lanes and b column 2j + 2 at its odd: one permute of the two
 *   rows' z, one of their b, one max, one store of 2 ow outputs.
 * - wider rows, 16 outputs a step: the 32 columns' even and odd lanes (two permutes), the third
 *   tap the even lanes one on (a permute with the next step's), two maxes.
 * Where the pads are 0 and the windows stay inside the row (FULL) the loads are whole vectors
 * (the lanes past the row are never picked) but near the end of x; else masked, the pads the
 * identity. */
static inline __attribute__((always_inline)) __m512 vcol16(const float *s, int64_t step, const int64_t k, __mmask16 m, const int FULL)
{
    const __m512 fill = _mm512_set1_ps(-INFINITY);
    if (!k)
        return fill;
    if (FULL && k == 3) { /* max16's chain, its NaN test once for rows 0 and 1 (row 2 the second operand) */
        const __m512 x0 = _mm512_loadu_ps(s), x1 = _mm512_loadu_ps(s + step);
        const __m512 r = _mm512_max_ps(_mm512_max_ps(x0, x1), _mm512_loadu_ps(s + 2 * step));
        return _mm512_mask_sub_ps(r, _mm512_cmp_ps_mask(x0, x1, _CMP_UNORD_Q), x0, x1);
    }
    if (FULL || m == 0xFFFF) { /* whole: plain loads */
        __m512 a = _mm512_loadu_ps(s);
        for (int64_t t = 1; t < k; t++)
            a = max16(a, _mm512_loadu_ps(s + t * step));
        return a;
    }
    __m512 a = _mm512_mask_loadu_ps(fill, m, s);
    for (int64_t t = 1; t < k; t++)
        a = max16(a, _mm512_mask_loadu_ps(fill, m, s + t * step));
    return a;
}
/* two narrow output rows into y (n outputs: 2 ow, or ow for the last alone): their window rows
 * from s0 and s1 (padded column 0), k0 and k1 of them */
static inline __attribute__((always_inline)) void s2n(float *y, const float *s0, const float *s1, int64_t step, const int64_t k0,
                                                      const int64_t k1, const __mmask16 *m, __m512i ie, __m512i io, __mmask16 mo,
                                                      const int FULL)
{
    const __m512 a0 = vcol16(s0, step, k0, m[0], FULL), b0 = vcol16(s0 + 1, step, k0, m[1], FULL);
    const __m512 a1 = vcol16(s1, step, k1, m[0], FULL), b1 = vcol16(s1 + 1, step, k1, m[1], FULL);
    const __m512 o = max16(_mm512_permutex2var_ps(max16(a0, b0), ie, max16(a1, b1)), _mm512_permutex2var_ps(b0, io, b1));
    if (mo == 0xFFFF)
        _mm512_storeu_ps(y, o);
    else
        _mm512_mask_storeu_ps(y, mo, o);
}
/* one wider output row: vector v (padded columns [16 v, 16 v + 16)) of the nv the windows reach */
static inline __attribute__((always_inline)) void s2w(float *y, const float *s, int64_t step, const int64_t k, const __mmask16 *m,
                                                      int64_t nv, int64_t ow, const int FULL)
{
    const __m512 fill = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i ev = _mm512_add_epi32(lane, lane), od = _mm512_add_epi32(ev, _mm512_set1_epi32(1)),
                  up = _mm512_add_epi32(lane, _mm512_set1_epi32(1));
    __m512 a = vcol16(s, step, k, m[0], FULL), b = 1 < nv ? vcol16(s + 16, step, k, m[1], FULL) : fill;
    __m512 e = _mm512_permutex2var_ps(a, ev, b), o = _mm512_permutex2var_ps(a, od, b);
    for (int64_t q = 0, v = 2; q < ow; q += 16, v += 2) {
        const __m512 na = v < nv ? vcol16(s + 16 * v, step, k, m[v], FULL) : fill;
        const __m512 nb = v + 1 < nv ? vcol16(s + 16 * v + 16, step, k, m[v + 1], FULL) : fill;
        const __m512 ne = _mm512_permutex2var_ps(na, ev, nb);
        const __m512 r = max16(max16(e, o), _mm512_permutex2var_ps(e, up, ne));
        if (q + 16 <= ow)
            _mm512_storeu_ps(y + q, r);
        else
            _mm512_mask_storeu_ps(y + q, (__mmask16)((1u << (ow - q)) - 1), r);
        e = ne;
        o = _mm512_permutex2var_ps(na, od, nb);
    }
}
static void s2x3_v(const float *x, float *y, int64_t p0, int64_t p1, const int64_t *g, const struct scratch *sc)
{
    const int64_t wd = g[G_W], kh = g[G_KH], sh = g[G_SH], dh = g[G_DH], pt = g[G_PT], pl = g[G_PL], oh = g[G_OH], ow = g[G_OW],
                  hw = g[G_H] * wd, need = (ow - 1) * 2 + 3, nv = (need + 15) / 16, step = dh * wd;
    const float *xend = x + p1 * hw;
    const int full = !pl && need <= wd; /* the lanes past a row are never picked */
    __mmask16 m[66];
    for (int64_t v = 0; v < nv + 2; v++) { /* the lanes of padded columns [16 v, 16 v + 16) inside the row */
        const int64_t lo = pl - 16 * v, hi = pl + wd - 16 * v;
        const uint32_t below = lo <= 0 ? 0 : lo >= 16 ? 0xFFFF : (1u << lo) - 1, upto = hi <= 0 ? 0 : hi >= 16 ? 0xFFFF : (1u << hi) - 1;
        m[v] = (__mmask16)(upto & ~below);
    }
    /* row r of a plane: its first window row's padded column 0 (from the plane) and its rows */
    const int64_t *span = sc->span;
    if (need <= 17) {
        __mmask16 mn[2];
        for (int64_t j = 0; j < 2; j++) { /* narrow: columns [j, 16 + j) */
            const int64_t lo = pl - j, hi = pl + wd - j;
            const uint32_t below = lo <= 0 ? 0 : (1u << lo) - 1, upto = hi >= 16 ? 0xFFFF : hi <= 0 ? 0 : (1u << hi) - 1;
            mn[j] = (__mmask16)(upto & ~below);
        }
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __mmask16 second = (__mmask16)(0xFFFF & ~((1u << ow) - 1));
        /* lane l < ow: row R's output l (its even lane 2 l); else row R + 1's output l - ow (lane 16 + 2 (l - ow)) */
        const __m512i ie = _mm512_mask_add_epi32(_mm512_add_epi32(lane, lane), second, _mm512_add_epi32(lane, lane),
                                                 _mm512_set1_epi32((int)(16 - 2 * ow)));
        const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
        const int64_t rows = (p1 - p0) * oh;
        int64_t R = 0;
        if (uniform3(g, sc) == oh) { /* the rows' pointers step, a plane's end jumps */
            const int64_t rs = sh * wd, jump = hw - (oh - 1) * rs;
            const __mmask16 mo = (__mmask16)((1u << 2 * ow) - 1);
            const float *s = x + p0 * hw;
            float *yr = y + p0 * oh * ow;
            for (int64_t r = 0; R + 1 < rows; R += 2, yr += 2 * ow) {
                const float *s0 = s;
                s += r + 1 == oh ? jump : rs;
                r = r + 1 == oh ? 0 : r + 1;
                const float *s1 = s;
                if (s1 + 2 * step + 17 > xend)
                    break;
                s += r + 1 == oh ? jump : rs;
                r = r + 1 == oh ? 0 : r + 1;
                s2n(yr, s0, s1, step, 3, 3, mn, ie, io, mo, 1);
            }
        }
        int64_t p = p0 + R / oh, r = R % oh;
        float *yr = y + (p0 * oh + R) * ow;
        for (; R < rows; R += 2, yr += 2 * ow) {
            const int64_t i0 = span[2 * r], k0 = span[2 * r + 1] - i0;
            const float *s0 = x + p * hw + (r * sh - pt + i0 * dh) * wd - pl;
            if (++r == oh) {
                r = 0;
                p++;
            }
            const int two = R + 1 < rows;
            const int64_t i1 = two ? span[2 * r] : 0, k1 = two ? span[2 * r + 1] - i1 : 0;
            const float *s1 = two ? x + p * hw + (r * sh - pt + i1 * dh) * wd - pl : s0;
            const __mmask16 mo = (__mmask16)((1u << (two ? 2 * ow : ow)) - 1);
            if (two && ++r == oh) {
                r = 0;
                p++;
            }
            if (k0 == 3 && k1 == 3 && full && s1 + 2 * step + 17 <= xend)
                s2n(yr, s0, s1, step, 3, 3, mn, ie, io, mo, 1);
            else if (k0 == 3 && (k1 == 3 || !two))
                s2n(yr, s0, s1, step, 3, two ? 3 : 0, mn, ie, io, mo, 0);
            else
                s2n(yr, s0, s1, step, k0, k1, mn, ie, io, mo, 0);
        }
        return;
    }
    const int64_t ou = uniform3(g, sc);
    S2_PLANES(s2w, 16);
    (void)kh;
}
static void separable16(const float *xp, float *yp, const int64_t *g, const struct scratch *sc)
{
    const int64_t kh = g[G_KH], kw = g[G_KW], sw = g[G_SW], dw = g[G_DW];
    const int avg = (int)g[G_AVG];
    if (is_small16(g)) {
        const int two = g[G_W] + g[G_PL] > 16;
#define SMALL16(K, T)                                                                                                  \
    if (kw == K && two == T) {                                                                                         \
        if (avg)                                                                                                       \
            small16k(xp, yp, g, sc, K, T, 1);                                                                          \
        else                                                                                                           \
            small16k(xp, yp, g, sc, K, T, 0);                                                                          \
        return;                                                                                                        \
    }
        SMALL16(3, 0)
        SMALL16(3, 1)
        SMALL16(2, 0)
        SMALL16(2, 1)
#undef SMALL16
        small16(xp, yp, g, sc, 0, kw, two, avg);
        return;
    }
#define SEP16(K, S)                                                                                                    \
    if (kh == K && kw == K && sw == S && dw == 1) {                                                                    \
        if (avg)                                                                                                       \
            sep16(xp, yp, g, sc, K, K, S, 1, 1);                                                                       \
        else                                                                                                           \
            sep16(xp, yp, g, sc, K, K, S, 1, 0);                                                                       \
        return;                                                                                                        \
    }
    SEP16(3, 1)
    SEP16(3, 2)
    SEP16(2, 2)
    SEP16(2, 1)
#undef SEP16
    if (kw > 33)
        return; /* fits16 allows none */
    sep16(xp, yp, g, sc, 0, kw, sw, dw, avg);
}
#endif
/* -- the flat form: column stride 1 with the output row as wide as the input's (the "same"
 * pools: 3x3 s1 p1 and the like) and row stride 1 over small planes. A block of planes is
 * reduced over its window rows into a scratch copy of its output rows (runs of output rows
 * whose window rows are the same taps are contiguous in the input: one vector loop a run, no
 * per-row work), then the kernel columns are reduced over the whole block as one flat array:
 * tap j is the scratch shifted by j * dw - pl, its lanes outside the row masked to the
 * identity (the column of flat position i is i mod w: a mask table of w / gcd(w, V) vectors).
 * The same order of operations as the other passes: the same bits. -- */
struct flat {
    float *v, *inv;      /* v: the block's rows reduced (slack both sides); inv: 1 / count over a block */
    const void *masks;   /* per mask slot, per kernel column: lanes whose tap lies in the row */
    const __mmask16 *rows; /* AVX-512, output rows as many as input rows: per vector of a block, per kernel row, lanes inside the plane */
    int64_t planes, slots, slack;
};
static int is_flat(const int64_t *g)
{
#ifdef __AVX512F__
    if (g[G_W] > 24) /* the 16-column pass is as fast from 28x28 up (56x56 max: 63 us, flat 71) */
        return 0;
#endif
    return g[G_SH] == 1 && g[G_SW] == 1 && g[G_OW] == g[G_W] && g[G_OH] * g[G_W] <= 4096 && g[G_H] * g[G_W] <= 4096 &&
           (g[G_KW] - 1) * g[G_DW] + g[G_PL] <= 64;
}
#ifdef __AVX512F__
/* the k rows s + t * step reduced into d[0, n rounded up to 16), the last vector read masked */
static inline __attribute__((always_inline)) void vrun16(float *d, const float *s, int64_t step, const int64_t k, int64_t n,
                                                         const int AVG)
{
    const __m512 fill = _mm512_set1_ps(AVG ? 0.0f : -INFINITY);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 a = _mm512_mask_loadu_ps(fill, m, s + i);
        for (int64_t t = 1; t < k; t++) {
            const __m512 v = _mm512_mask_loadu_ps(fill, m, s + t * step + i);
            a = AVG ? _mm512_add_ps(a, v) : max16(a, v);
        }
        _mm512_storeu_ps(d + i, a);
    }
}
/* a max over the lanes of m, NaN kept from either side (max16's) */
static inline __m512 maxm16(__m512 a, __mmask16 m, __m512 v)
{
    return _mm512_mask_max_ps(a, _mm512_mask_cmp_ps_mask(m, a, a, _CMP_ORD_Q), a, v);
}
/* the kh rows s + t * step reduced over 16 flat positions, row t's lanes m[t] & tail (the rest
 * the identity; masked loads read nothing outside) */
#define FLAT_ROWS vrun16
#define FLAT_ATTR
#else
#define FLAT_ROWS rows_v
#define FLAT_ATTR AVX2
#endif
/* The flat form's rows pass, a plane at a time: planes [p0, p0 + np) of x reduced over the
 * window's rows into v, one call a run of output rows with the same window rows (none: the
 * fill), by the tier's row reducer. */
FLAT_ATTR static inline __attribute__((always_inline)) void flat_runs(float *v, const float *x, int64_t p0, int64_t np, const int64_t *g,
                                                                      const struct scratch *sc, const int64_t KH, const int AVG)
{
    const int64_t wd = g[G_W], dh = g[G_DH], pt = g[G_PT], oh = g[G_OH], hw = g[G_H] * wd, ohw = oh * wd;
    for (int64_t p = 0; p < np; p++)
        for (int64_t r0 = 0, r1; r0 < oh; r0 = r1) {
            const int64_t i0 = sc->span[2 * r0], i1 = sc->span[2 * r0 + 1];
            for (r1 = r0 + 1; r1 < oh && sc->span[2 * r1] == i0 && sc->span[2 * r1 + 1] == i1; r1++)
                ;
            float *d = v + p * ohw + r0 * wd;
            const float *s = x + (p0 + p) * hw + (r0 - pt + i0 * dh) * wd;
            if (i1 <= i0)
                for (int64_t i = 0; i < (r1 - r0) * wd; i++)
                    d[i] = AVG ? 0.0f : -INFINITY;
            else if (KH && i1 - i0 == KH)
                FLAT_ROWS(d, s, dh * wd, KH, (r1 - r0) * wd, AVG);
            else
                FLAT_ROWS(d, s, dh * wd, i1 - i0, (r1 - r0) * wd, AVG);
        }
}
#undef FLAT_ROWS
#undef FLAT_ATTR
#ifdef __AVX512F__
static inline __attribute__((always_inline)) __m512 vflat16(const float *s, const __mmask16 *m, const __mmask16 tail,
                                                            const int64_t kh, int64_t step, const int AVG)
{
    const __mmask16 m0 = _kand_mask16(_load_mask16((__mmask16 *)m), tail);
    __m512 a = AVG ? _mm512_maskz_loadu_ps(m0, s) : _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m0, s);
    for (int64_t t = 1; t < kh; t++) {
        const __mmask16 mt = _kand_mask16(_load_mask16((__mmask16 *)m + t), tail);
        const __m512 b = _mm512_maskz_loadu_ps(mt, s + t * step);
        a = AVG ? _mm512_add_ps(a, b) : maxm16(a, mt, b);
    }
    return a;
}
static inline __attribute__((always_inline)) void flat16(const float *x, float *y, int64_t planes, const int64_t *g,
                                                         const struct scratch *sc, const struct flat *fl, const int64_t KH,
                                                         const int64_t KW, const int AVG)
{
    const int64_t wd = g[G_W], dh = g[G_DH], dw = g[G_DW], pt = g[G_PT], pl = g[G_PL], oh = g[G_OH], hw = g[G_H] * wd, ohw = oh * wd;
    const __m512 fill = _mm512_set1_ps(AVG ? 0.0f : -INFINITY);
    const __mmask16 *hm = fl->masks;
    float *v = fl->v;
    for (int64_t p0 = 0; p0 < planes; p0 += fl->planes) {
        const int64_t np = planes - p0 < fl->planes ? planes - p0 : fl->planes, n = np * ohw;
        if (fl->rows) { /* the block as one flat array, kernel row t shifted by (t * dh - pt) rows, masked */
            const int64_t kh = KH ? KH : g[G_KH], full = n / 16 * 16;
            const float *xb = x + p0 * hw - pt * wd;
            for (int64_t i = 0; i < full; i += 16)
                _mm512_storeu_ps(v + i, vflat16(xb + i, fl->rows + i / 16 * kh, 0xFFFF, kh, dh * wd, AVG));
            if (full < n)
                _mm512_storeu_ps(v + full, vflat16(xb + full, fl->rows + full / 16 * kh, (__mmask16)((1u << (n - full)) - 1), kh, dh * wd, AVG));
        } else
            flat_runs(v, x, p0, np, g, sc, KH, AVG);
        float *yb = y + p0 * ohw;
        for (int64_t i = 0, t = 0; i < n; i += 16) {
            const __mmask16 *m = hm + t * KW;
            const __m512 a0 = _mm512_loadu_ps(v + i - pl);
            __m512 a = AVG ? _mm512_maskz_mov_ps(_load_mask16((__mmask16 *)m), a0) : _mm512_mask_mov_ps(fill, _load_mask16((__mmask16 *)m), a0);
            for (int64_t j = 1; j < KW; j++) {
                const __mmask16 mj = _load_mask16((__mmask16 *)m + j);
                a = AVG ? _mm512_add_ps(a, _mm512_maskz_loadu_ps(mj, v + i + j * dw - pl)) : maxm16(a, mj, _mm512_loadu_ps(v + i + j * dw - pl));
            }
            if (AVG)
                a = _mm512_mul_ps(a, _mm512_loadu_ps(fl->inv + i));
            if (i + 16 <= n)
                _mm512_storeu_ps(yb + i, a);
            else
                _mm512_mask_storeu_ps(yb + i, (__mmask16)((1u << (n - i)) - 1), a);
            t = t + 1 == fl->slots ? 0 : t + 1;
        }
    }
}
static void flat_v(const float *x, float *y, int64_t planes, const int64_t *g, const struct scratch *sc, const struct flat *fl)
{
    const int64_t kh = g[G_KH], kw = g[G_KW];
#define FLAT(KH, KW)                                                                                                   \
    if (kh == KH && kw == KW) {                                                                                        \
        if (g[G_AVG])                                                                                                  \
            flat16(x, y, planes, g, sc, fl, KH, KW, 1);                                                                \
        else                                                                                                           \
            flat16(x, y, planes, g, sc, fl, KH, KW, 0);                                                                \
        return;                                                                                                        \
    }
    FLAT(3, 3)
    FLAT(2, 2)
#undef FLAT
    if (g[G_AVG])
        flat16(x, y, planes, g, sc, fl, 0, kw, 1);
    else
        flat16(x, y, planes, g, sc, fl, 0, kw, 0);
}
#define FLAT_V 16
#else
AVX2 static inline __attribute__((always_inline)) void flat8(const float *x, float *y, int64_t planes, const int64_t *g,
                                                             const struct scratch *sc, const struct flat *fl, const int64_t KH,
                                                             const int64_t KW, const int AVG)
{
    const int64_t wd = g[G_W], dw = g[G_DW], pl = g[G_PL], oh = g[G_OH], ohw = oh * wd;
    const __m256 fill = _mm256_set1_ps(AVG ? 0.0f : -INFINITY);
    const int32_t *hm = fl->masks;
    float *v = fl->v;
    for (int64_t p0 = 0; p0 < planes; p0 += fl->planes) {
        const int64_t np = planes - p0 < fl->planes ? planes - p0 : fl->planes, n = np * ohw;
        flat_runs(v, x, p0, np, g, sc, KH, AVG);
        float *yb = y + p0 * ohw;
        for (int64_t i = 0, t = 0; i < n; i += V) {
            const int32_t *m = hm + t * KW * V;
            const __m256 m0 = _mm256_loadu_ps((const float *)m);
            __m256 a = AVG ? _mm256_and_ps(m0, _mm256_loadu_ps(v + i - pl)) : _mm256_blendv_ps(fill, _mm256_loadu_ps(v + i - pl), m0);
            if (KW == 3 && !AVG) {
                const __m256 m1 = _mm256_loadu_ps((const float *)(m + V)), m2 = _mm256_loadu_ps((const float *)(m + 2 * V));
                a = max3_8(a, _mm256_blendv_ps(fill, _mm256_loadu_ps(v + i + dw - pl), m1),
                           _mm256_blendv_ps(fill, _mm256_loadu_ps(v + i + 2 * dw - pl), m2));
            }
            for (int64_t j = 1; j < KW && (KW != 3 || AVG); j++) {
                const __m256 mj = _mm256_loadu_ps((const float *)(m + j * V)), b = _mm256_loadu_ps(v + i + j * dw - pl);
                a = AVG ? _mm256_add_ps(a, _mm256_and_ps(mj, b)) : max_nan8(a, _mm256_blendv_ps(fill, b, mj));
            }
            if (AVG)
                a = _mm256_mul_ps(a, _mm256_loadu_ps(fl->inv + i));
            if (i + V <= n)
                _mm256_storeu_ps(yb + i, a);
            else
                _mm256_maskstore_ps(yb + i, tail_mask(n - i), a);
            t = t + 1 == fl->slots ? 0 : t + 1;
        }
    }
}
AVX2 static void flat_v(const float *x, float *y, int64_t planes, const int64_t *g, const struct scratch *sc, const struct flat *fl)
{
    const int64_t kh = g[G_KH], kw = g[G_KW];
#define FLAT(KH, KW)                                                                                                   \
    if (kh == KH && kw == KW) {                                                                                        \
        if (g[G_AVG])                                                                                                  \
            flat8(x, y, planes, g, sc, fl, KH, KW, 1);                                                                 \
        else                                                                                                           \
            flat8(x, y, planes, g, sc, fl, KH, KW, 0);                                                                 \
        return;                                                                                                        \
    }
    FLAT(3, 3)
    FLAT(2, 2)
#undef FLAT
    if (g[G_AVG])
        flat8(x, y, planes, g, sc, fl, 0, kw, 1);
    else
        flat8(x, y, planes, g, sc, fl, 0, kw, 0);
}
#define FLAT_V V
#endif
/* The flat form's tables for planes of g (NULL v: no memory); inv the separable pass's. */
static struct flat flat_tables(const int64_t *g, const float *inv)
{
    const int64_t wd = g[G_W], kw = g[G_KW], dw = g[G_DW], pl = g[G_PL], ohw = g[G_OH] * wd, L = FLAT_V;
    struct flat fl = {0};
    int64_t a = wd, b = L;
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    fl.slots = wd / a;
    fl.planes = 2048 / ohw > 1 ? 2048 / ohw : 1;
    fl.slack = ((kw - 1) * dw + pl + 2 * L) / L * L;
    const int64_t n = fl.planes * ohw, cells = fl.slots * kw * L, kh = g[G_KH];
    const int flat_rows = L == 16 && g[G_OH] == g[G_H] && kh <= 64;
    const int64_t vslots = (n + L - 1) / L, rcells = flat_rows ? (vslots * kh + 1) / 2 : 0;
    float *buf = aioge_calloc(sizeof(float) * (size_t)(2 * fl.slack + n + (inv ? n + L : 0) + cells + rcells));
    if (!buf)
        return fl;
    fl.v = buf + fl.slack;
    float *tab = buf + 2 * fl.slack + n;
    if (inv) {
        fl.inv = tab;
        for (int64_t r = 0; r < g[G_OH]; r++) /* one plane's, then copies (a divide a value cost 2x on 8x8 planes) */
            memcpy(fl.inv + r * wd, inv + r * (wd + 2 * V), sizeof(float) * (size_t)wd);
        for (int64_t p = 1; p < fl.planes; p++)
            memcpy(fl.inv + p * ohw, fl.inv, sizeof(float) * (size_t)ohw);
        tab += n + L;
    }
    fl.masks = tab;
    if (flat_rows) { /* lane l of vector s, kernel row t: output row r of its plane reads input row r + t * dh - pt */
        uint16_t *rm = (uint16_t *)(tab + cells); /* by intervals: a lane at a time cost 7 us a 28x28 job */
        for (int64_t sl = 0, pos = 0; sl < vslots; sl++, pos = (pos + L) % ohw)
            for (int64_t t = 0; t < kh; t++) {
                const int64_t top = (g[G_PT] - t * g[G_DH]) * wd, lo = top < 0 ? 0 : top, hi = top + g[G_H] * wd < ohw ? top + g[G_H] * wd : ohw;
                uint32_t m = 0;
                for (int64_t k = 0; k < pos + L; k += ohw) { /* plane k / ohw's inside cells, from lane pos */
                    int64_t a = k + lo - pos, b = k + hi - pos;
                    a = a < 0 ? 0 : a > L ? L : a;
                    b = b < 0 ? 0 : b > L ? L : b;
                    if (b > a)
                        m |= (uint32_t)(((1ull << b) - 1) & ~((1ull << a) - 1));
                }
                rm[sl * kh + t] = (uint16_t)m;
            }
        fl.rows = rm;
    }
    for (int64_t t = 0, c0 = 0; t < fl.slots; t++, c0 = (c0 + L) % wd)
        for (int64_t j = 0; j < kw; j++) {
            uint32_t m = 0;
            for (int64_t l = 0, col = c0; l < L; l++, col = col + 1 == wd ? 0 : col + 1) {
                const int64_t c = col + j * dw - pl;
                const int in = c >= 0 && c < wd;
                m |= (uint32_t)in << l;
                if (L != 16)
                    ((int32_t *)tab)[(t * kw + j) * L + l] = -in;
            }
            if (L == 16)
                ((uint16_t *)tab)[t * kw + j] = (uint16_t)m;
        }
    return fl;
}
/* -- 3x3, stride 1, pads 1 on every side (the "same" pools of GoogLeNet and Inception), planes
 * up to 4096 values: each plane as one flat run of vectors (flat position i = row * w + column,
 * the output's the input's). Vector v's window rows are 3 loads (the rows above and below read
 * masked at the plane's first and last rows: scalar masks from i) reduced down, and its kernel
 * columns come from that vector and its neighbours in registers (one lane shift each way), the
 * first and last columns masked by a table of w / gcd(w, lanes) slots: one pass, no scratch
 * rows (the flat form stored the reduced rows and read them 3 times: 768x17x17 average 80 us,
 * a copy of the plane 22). The flat form's order of operations (rows top down, then columns
 * left to right, times 1 / count): the same bits. -- */
static int is_same3(const int64_t *g)
{
    return g[G_KH] == 3 && g[G_KW] == 3 && g[G_SH] == 1 && g[G_SW] == 1 && g[G_DH] == 1 && g[G_DW] == 1 && g[G_PT] == 1 &&
           g[G_PL] == 1 && g[G_PB] == 1 && g[G_PR] == 1 && g[G_OH] == g[G_H] && g[G_OW] == g[G_W] && g[G_H] * g[G_W] <= SAME3_MAX;
}
#ifdef __AVX512F__
static inline __mmask16 from16(int64_t k) { return k <= 0 ? (__mmask16)0xFFFF : k >= 16 ? 0 : (__mmask16)(0xFFFFu << k); } /* lanes >= k */
static inline __mmask16 below16(int64_t k) { return k <= 0 ? 0 : k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << k) - 1); } /* lanes < k */
static inline __attribute__((always_inline)) __m512 vert3_16(const float *x, int64_t i, int64_t wd, int64_t hw, const int AVG)
{
    const __m512 fill = _mm512_set1_ps(AVG ? 0.0f : -INFINITY);
    const __mmask16 tail = below16(hw - i);
    __m512 u, m, d;
    if (i >= wd && i + 16 <= hw - wd) { /* rows 1 .. h - 2 only: whole loads */
        u = _mm512_loadu_ps(x + i - wd);
        m = _mm512_loadu_ps(x + i);
        d = _mm512_loadu_ps(x + i + wd);
    } else {
        u = _mm512_mask_loadu_ps(fill, from16(wd - i) & tail, x + i - wd);
        m = _mm512_mask_loadu_ps(fill, tail, x + i);
        d = _mm512_mask_loadu_ps(fill, below16(hw - wd - i), x + i + wd);
    }
    return AVG ? _mm512_add_ps(_mm512_add_ps(u, m), d) : max16(max16(u, m), d);
}
static inline __attribute__((always_inline)) void same3_16(const float *x, float *y, int64_t planes, int64_t hw, int64_t wd,
                                                           const __mmask16 *cm, int64_t slots, const float *inv, const int AVG)
{
    const __m512 fill = _mm512_set1_ps(AVG ? 0.0f : -INFINITY);
    for (int64_t p = 0; p < planes; p++, x += hw, y += hw) {
        __m512 prev = fill, cur = vert3_16(x, 0, wd, hw, AVG);
        for (int64_t i = 0, t = 0; i < hw; i += 16) {
            /* the row below, 256 values on (768x17x17 average 62.7 -> 57.0 us warm, 78.0 -> 72.0
             * with the input evicted; the AVX2 tier lost 8x8 planes 23.7 -> 30.4) */
            _mm_prefetch((const char *)(x + i + wd + 256), _MM_HINT_T0);
            const __m512 next = i + 16 < hw ? vert3_16(x, i + 16, wd, hw, AVG) : fill;
            const __m512 l = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(cur), _mm512_castps_si512(prev), 15)),
                         r = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(next), _mm512_castps_si512(cur), 1));
            __m512 a;
            if (AVG)
                a = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(_mm512_maskz_mov_ps(cm[2 * t], l), cur), _mm512_maskz_mov_ps(cm[2 * t + 1], r)),
                                  _mm512_loadu_ps(inv + i));
            else
                a = maxm16(max16(_mm512_mask_mov_ps(fill, cm[2 * t], l), cur), cm[2 * t + 1], r);
            if (i + 16 <= hw)
                _mm512_storeu_ps(y + i, a);
            else
                _mm512_mask_storeu_ps(y + i, below16(hw - i), a);
            prev = cur;
            cur = next;
            t = t + 1 == slots ? 0 : t + 1;
        }
    }
}
#define SAME3_L 16
#define SAME3_ATTR
#else
AVX2 static inline __attribute__((always_inline)) __m256 vert3_8(const float *x, int64_t i, int64_t wd, int64_t hw, const int AVG)
{
    const __m256 fill = _mm256_set1_ps(AVG ? 0.0f : -INFINITY);
    __m256 u, m, d;
    if (i >= wd && i + 8 <= hw - wd) { /* rows 1 .. h - 2 only: whole loads */
        u = _mm256_loadu_ps(x + i - wd);
        m = _mm256_loadu_ps(x + i);
        d = _mm256_loadu_ps(x + i + wd);
    } else { /* lanes l with i + l in [wd, hw), [0, hw), [0, hw - wd) */
        const __m256i pos = _mm256_add_epi32(_mm256_set1_epi32((int)i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hw), pos);
        const __m256i mu = _mm256_and_si256(tail, _mm256_cmpgt_epi32(pos, _mm256_set1_epi32((int)wd - 1)));
        const __m256i md = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(hw - wd)), pos);
        u = _mm256_blendv_ps(fill, _mm256_maskload_ps(x + i - wd, mu), _mm256_castsi256_ps(mu));
        m = _mm256_blendv_ps(fill, _mm256_maskload_ps(x + i, tail), _mm256_castsi256_ps(tail));
        d = _mm256_blendv_ps(fill, _mm256_maskload_ps(x + i + wd, md), _mm256_castsi256_ps(md));
    }
    return AVG ? _mm256_add_ps(_mm256_add_ps(u, m), d) : max3_8(u, m, d);
}
AVX2 static inline __attribute__((always_inline)) void same3_8(const float *x, float *y, int64_t planes, int64_t hw, int64_t wd,
                                                               const int32_t *cm, int64_t slots, const float *inv, const int AVG)
{
    const __m256 fill = _mm256_set1_ps(AVG ? 0.0f : -INFINITY);
    for (int64_t p = 0; p < planes; p++, x += hw, y += hw) {
        __m256 prev = fill, cur = vert3_8(x, 0, wd, hw, AVG);
        for (int64_t i = 0, t = 0; i < hw; i += 8) {
            const __m256 next = i + 8 < hw ? vert3_8(x, i + 8, wd, hw, AVG) : fill;
            const __m256 t0 = _mm256_permute2f128_ps(prev, cur, 0x21), t1 = _mm256_permute2f128_ps(cur, next, 0x21);
            const __m256 l = _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(cur), _mm256_castps_si256(t0), 12));
            const __m256 r = _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(t1), _mm256_castps_si256(cur), 4));
            const __m256 ml = _mm256_loadu_ps((const float *)(cm + 16 * t)), mr = _mm256_loadu_ps((const float *)(cm + 16 * t + 8));
            __m256 a;
            if (AVG)
                a = _mm256_mul_ps(_mm256_add_ps(_mm256_add_ps(_mm256_and_ps(ml, l), cur), _mm256_and_ps(mr, r)), _mm256_loadu_ps(inv + i));
            else
                a = max3_8(_mm256_blendv_ps(fill, l, ml), cur, _mm256_blendv_ps(fill, r, mr));
            if (i + 8 <= hw)
                _mm256_storeu_ps(y + i, a);
            else
                _mm256_maskstore_ps(y + i, tail_mask(hw - i), a);
            prev = cur;
            cur = next;
            t = t + 1 == slots ? 0 : t + 1;
        }
    }
}
#define SAME3_L 8
#define SAME3_ATTR AVX2
#endif
/* planes [0, planes) of x into y; inv: the separable pass's 1 / count rows (NULL: a max) */
SAME3_ATTR static int same3_v(const float *x, float *y, int64_t planes, const int64_t *g, const float *inv)
{
    const int64_t h = g[G_H], wd = g[G_W], hw = h * wd, L = SAME3_L;
    int64_t a = wd, b = L;
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    const int64_t slots = wd / a;
    /* one plane's 1 / count, flat, a vector of slack; then per slot the lanes with a column to
     * the left and to the right (AVX-512: two masks; AVX2: two vectors of lanes) */
    float *flat = aioge_calloc(sizeof(float) * (size_t)((inv ? hw + L : 0) + 2 * L * slots));
    if (!flat)
        return AIOGE_ENOMEM;
    for (int64_t r = 0; r < h && inv; r++)
        memcpy(flat + r * wd, inv + r * (wd + 2 * V), sizeof(float) * (size_t)wd);
    void *tab = flat + (inv ? hw + L : 0);
    for (int64_t t = 0; t < slots; t++) {
        uint32_t ml = 0, mr = 0;
        for (int64_t l = 0; l < L; l++) {
            const int64_t col = (t * L + l) % wd;
            ml |= (uint32_t)(col > 0) << l;
            mr |= (uint32_t)(col < wd - 1) << l;
            if (L == 8) {
                ((int32_t *)tab)[16 * t + l] = -(col > 0);
                ((int32_t *)tab)[16 * t + 8 + l] = -(col < wd - 1);
            }
        }
        if (L == 16) {
            ((uint16_t *)tab)[2 * t] = (uint16_t)ml;
            ((uint16_t *)tab)[2 * t + 1] = (uint16_t)mr;
        }
    }
#ifdef __AVX512F__
    if (inv)
        same3_16(x, y, planes, hw, wd, tab, slots, flat, 1);
    else
        same3_16(x, y, planes, hw, wd, tab, slots, flat, 0);
#else
    if (inv)
        same3_8(x, y, planes, hw, wd, tab, slots, flat, 1);
    else
        same3_8(x, y, planes, hw, wd, tab, slots, flat, 0);
#endif
    free(flat);
    return 0;
}
AVX2 static void separable_v(const float *xp, float *yp, const int64_t *g, const struct scratch *sc)
{
    separable(xp, yp, g, sc, 1);
}
static void separable_c(const float *xp, float *yp, const int64_t *g, const struct scratch *sc)
{
    separable(xp, yp, g, sc, 0);
}

/* Pooling over planes [p0, p1) (a plane: one image's channel), geometry g (POOL_GEO slots:
 * input rows and columns, kernel, strides, dilations, begin pads, end pads, output rows and
 * columns, average, count_include_pad, storage_order). y gets the max or the average of each
 * window's cells inside the plane (a window with none: -inf or 0); an average divides by the
 * window's cells inside the plane, or inside the plane grown by its declared pads
 * (count_include_pad: a ceil_mode window's overhang never counts). ind, when not NULL, gets
 * each maximum's flat index in x (storage_order 1: the plane's columns first). Returns 0,
 * AIOGE_EGEOMETRY, or AIOGE_ENOMEM (nothing written). */
int aioge_pool_f32(const float *x, float *y, int64_t *ind, const int64_t *g, int64_t p0, int64_t p1)
{
    if (p0 >= p1 || g[G_OH] <= 0 || g[G_OW] <= 0)
        return AIOGE_OK;
    const int64_t h = g[G_H], wd = g[G_W], kh = g[G_KH], kw = g[G_KW], sh = g[G_SH], sw = g[G_SW], dh = g[G_DH], dw = g[G_DW],
                  pt = g[G_PT], pl = g[G_PL], oh = g[G_OH], ow = g[G_OW];
    if (h <= 0 || wd <= 0 || kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 || pt < 0 || pl < 0 || p0 < 0 ||
        (ind && h * wd >= INT32_MAX))
        return AIOGE_EGEOMETRY;
    const int avg = (int)g[G_AVG], vec = aioge_simd_avx2(-1);
    /* the padded row: every window's columns, from input column -pl */
    const int64_t need = (ow - 1) * sw + (kw - 1) * dw + 1, wpad = (need > pl + wd ? need : pl + wd) + V;
    const int64_t wph = wpad / sw + 2 * V; /* one phase of it */
    const size_t floats = (size_t)(wpad + sw * wph + 3 * (ow + 2 * V) + 6 * oh + 2 * kw + 2);
    float *buf = aioge_calloc(sizeof(float) * floats);
    if (!buf)
        return AIOGE_ENOMEM;
    float *pad = buf, *phase = pad + wpad, *yrow = phase + sw * wph, *cnt = yrow + ow + V, *rows = cnt + ow + 2 * V;
    int32_t *at = (int32_t *)(rows + 2 * oh);
    const float fill = avg ? 0.0f : -INFINITY;
    for (int64_t k = 0; k < wpad; k++)
        pad[k] = fill;
    const int include = (int)g[G_INCLUDE];
    /* A window with no cell in the plane (its dilated taps all in the padding) sums nothing:
     * an infinite count makes its average 0, as onnxruntime's, not 0 / 0. */
    for (int64_t q = 0; q < ow; q++) {
        const int64_t n = cells(q, sw, pl, kw, dw, include ? -pl : 0, include ? wd + g[G_PR] : wd);
        cnt[q] = n ? (float)n : INFINITY;
    }
    for (int64_t q = ow; q < ow + 2 * V; q++) /* the AVX-512 pass reads 16 */
        cnt[q] = 1.0f;
    for (int64_t r = 0; r < oh; r++) {
        const int64_t n = cells(r, sh, pt, kh, dh, include ? -pt : 0, include ? h + g[G_PB] : h);
        rows[r] = n ? (float)n : INFINITY;
    }
    int64_t *span = (int64_t *)(rows + 2 * oh + ow + V + 1); /* after ``at``, 8-byte aligned */
    span = (int64_t *)(((uintptr_t)span + 7) & ~(uintptr_t)7);
    for (int64_t r = 0; r < oh; r++)
        inside(r * sh - pt, dh, h, kh, &span[2 * r], &span[2 * r + 1]);
    int64_t *coff = span + 2 * oh;
    for (int64_t j = 0; j < kw; j++)
        coff[j] = sw > 1 ? (j * dw % sw) * wph + j * dw / sw : j * dw;
    float *inv = NULL; /* an average's 1 / count per output, rows of ow + 2V */
    if (avg && !ind) {
        inv = aioge_calloc(sizeof(float) * (size_t)(oh * (ow + 2 * V)));
        if (!inv) {
            free(buf);
            return AIOGE_ENOMEM;
        }
        for (int64_t r = 0; r < oh; r++)
            for (int64_t q = 0; q < ow + 2 * V; q++)
                inv[r * (ow + 2 * V) + q] = 1.0f / (cnt[q] * rows[r]);
    }
    const struct scratch sc = {pad, phase, yrow, cnt, rows, inv, span, coff, wpad, wph};
    const int64_t plane = h * wd;
    if (vec && !ind && is_same3(g)) {
        const int rc = same3_v(x + p0 * plane, y + p0 * oh * ow, p1 - p0, g, inv);
        free(buf);
        free(inv);
        return rc;
    }
    if (vec && !ind && is_flat(g)) {
        const struct flat fl = flat_tables(g, inv);
        if (fl.v)
            flat_v(x + p0 * plane, y + p0 * oh * ow, p1 - p0, g, &sc, &fl);
        free(buf);
        free(inv);
        if (!fl.v)
            return AIOGE_ENOMEM;
        free(fl.v - fl.slack);
        return 0;
    }
    if (vec && !ind && is_pair2(g)) {
        pair2_v(x + p0 * plane, y + p0 * oh * ow, p1 - p0, g);
        free(buf);
        free(inv);
        return 0;
    }
    if (vec && !ind && is_s2x3(g)) {
#ifdef __AVX512F__
        s2x3_v(x, y, p0, p1, g, &sc);
#else
        s2x3_8(x, y, p0, p1, g, &sc);
#endif
        free(buf);
        free(inv);
        return 0;
    }
    for (int64_t p = p0; p < p1; p++) {
        const float *xp = x + p * plane;
        float *yp = y + p * oh * ow;
        if (ind) {
            int64_t *ip = ind + p * oh * ow;
            for (int64_t r = 0; r < oh; r++) {
                indices_row(xp, g, r, yrow, at, pad, phase, wpad, wph, vec);
                memcpy(yp + r * ow, yrow, sizeof(float) * (size_t)ow);
                for (int64_t q = 0; q < ow; q++)
                    ip[r * ow + q] = p * plane + (g[G_ORDER] ? at[q] % wd * h + at[q] / wd : at[q]);
            }
            continue;
        }
#ifdef __AVX512F__
        if (vec && fits16(g)) {
            separable16(xp, yp, g, &sc);
            continue;
        }
#endif
        (vec ? separable_v : separable_c)(xp, yp, g, &sc);
    }
    free(buf);
    free(inv);
    return 0;
}
