/* Windowed kernels over NCHW float32 planes: depthwise convolution, max and average pooling,
 * (aioge.kernels.conv_algos and pool_algos call them through ctypes).
 *
 * Every function works on a range [p0, p1) of output planes (a plane is one (image, channel)
 * pair, numbered n * channels + c), so two threads can each take half of the planes; they
 * share nothing but read-only inputs. Padding is never materialised: for each kernel tap the
 * output columns whose input column falls inside the row are worked out once (``tap_cols``)
 * and the inner loop runs over that interval only, a contiguous run of input at stride 1.
 * Output rows are accumulated in place in ``y`` (one row is at most a few KiB: it stays in L1
 * across the taps).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"

/* The output columns [lo, hi) whose input column q * stride + off lies in [0, width). */
static void tap_cols(int64_t off, int64_t stride, int64_t width, int64_t ow, int64_t *lo, int64_t *hi) {
    int64_t a = 0, b;
    if (off < 0)
        a = (-off + stride - 1) / stride; /* first q with q * stride + off >= 0 */
    if (width - 1 - off < 0)
        b = 0;
    else
        b = (width - 1 - off) / stride + 1; /* one past the last q with q * stride + off <= width - 1 */
    if (b > ow)
        b = ow;
    if (a > b)
        a = b;
    *lo = a;
    *hi = b;
}

/* A depthwise convolution's geometry, passed as one int64 array (one ctypes argument, not
 * eighteen): channels, input rows and columns, filters per channel, kernel rows and columns,
 * strides, dilations, begin pads (rows, columns), output rows and columns; then the activation
 * applied to the output (aioge.h's code, its two parameters' float32 bits) and the layout (1: a
 * plane at a time along its rows, 0: LANES planes interleaved). */
#define UNPACK_GEOMETRY(g)                                                                                   \
    const int64_t c = (g)[0], h = (g)[1], wd = (g)[2], mult = (g)[3], kh = (g)[4], kw = (g)[5], sh = (g)[6], \
                  sw = (g)[7], dh = (g)[8], dw = (g)[9], pt = (g)[10], pl = (g)[11], oh = (g)[12], ow = (g)[13]; \
    const int act = (int)(g)[14];                                                                            \
    const float act_p0 = aioge_float_of((g)[15]), act_p1 = aioge_float_of((g)[16])
enum { DW_ROWS = 17 };

/* Lanes of the depthwise kernel: planes computed side by side, one per float of a vector
 * register (16 floats: one AVX-512 register, or two AVX2 ones). */
#define LANES 16
/* LANES floats as one value (GCC and Clang vector extensions): arithmetic on it compiles to the
 * widest vector instructions -march allows, and it is kept in registers. */
typedef float vec __attribute__((vector_size(LANES * sizeof(float)), aligned(LANES * sizeof(float))));
typedef float vecu __attribute__((vector_size(LANES * sizeof(float)), aligned(sizeof(float)))); /* unaligned */

/* Moving 8 planes x 8 pixels between the planar and the interleaved layout: an 8x8 transpose in
 * registers (three rounds of two-vector shuffles) where the compiler has __builtin_shufflevector
 * (Clang, GCC 12+); elsewhere, and for the ragged edges, one float at a time. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define HAVE_TRANSPOSE 1
typedef float v8 __attribute__((vector_size(8 * sizeof(float)), aligned(sizeof(float)))); /* unaligned */
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)

/* An 8x8 block of floats transposed: 8 rows of 8 read ``src_stride`` apart, their columns
 * written as rows ``dst_stride`` apart. */
static inline void transpose8(const float *src, int64_t src_stride, float *dst, int64_t dst_stride) {
    v8 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = *(const v8 *)(src + i * src_stride);
    for (int p = 0; p < 4; p++) {
        t[2 * p] = SHUF(r[2 * p], r[2 * p + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[2 * p + 1] = SHUF(r[2 * p], r[2 * p + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int b = 0; b < 8; b += 4) {
        u[b] = SHUF(t[b], t[b + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[b + 1] = SHUF(t[b], t[b + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[b + 2] = SHUF(t[b + 1], t[b + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[b + 3] = SHUF(t[b + 1], t[b + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int k = 0; k < 4; k++) {
        *(v8 *)(dst + k * dst_stride) = SHUF(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        *(v8 *)(dst + (k + 4) * dst_stride) = SHUF(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}
#endif

/* The depthwise convolution (aioge_conv_depthwise_f32 below) for small planes: LANES planes at
 * a time sit in the vector lanes: their inputs are interleaved into a
 * zero-padded (rows, cols, LANES) buffer, then every output pixel of the LANES planes is one
 * vector accumulator and every tap one vector multiply-add, with no edge cases (a kernel over
 * one plane's rows runs a few-values-long loop per tap and row on 7x7 and 14x14 planes, most of
 * a MobileNet's: it measured 5-10x slower there). The buffer is the thread's (a fresh one
 * of 1.6 MB at 112x112 paid its page faults on every call). Returns -1 when it cannot be had
 * (nothing written), else 0. */
static int depthwise_interleaved(const float *x, const float *w, const float *bias, float *y, const int64_t *geometry,
                                 int64_t p0, int64_t p1) {
    UNPACK_GEOMETRY(geometry);
    const int64_t m = c * mult, taps = kh * kw;
    /* the padded extent every window reads */
    const int64_t hp = (oh - 1) * sh + (kh - 1) * dh + 1, wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    /* every block of LANES floats in the buffer starts on a vector boundary */
    float *xb = aioge_thread_scratch(1, (size_t)LANES * (size_t)(hp * wp + oh * ow + taps + 1));
    if (!xb)
        return AIOGE_ENOMEM;
    float *yb = xb + hp * wp * LANES, *wb = yb + oh * ow * LANES, *bb = wb + taps * LANES;
    /* cells outside the input stay zero for every block: the interior is rewritten by each */
    memset(xb, 0, sizeof(vec) * (size_t)(hp * wp));
    const int64_t r0 = pt > 0 ? 0 : -pt, r1 = h < hp - pt ? h : hp - pt; /* input rows inside the buffer */
    const int64_t c0 = pl > 0 ? 0 : -pl, c1 = wd < wp - pl ? wd : wp - pl;
    for (int64_t b0 = p0; b0 < p1; b0 += LANES) {
        const int64_t lanes = p1 - b0 < LANES ? p1 - b0 : LANES;
        const float *src[LANES];
        int64_t oc[LANES];
        for (int64_t l = 0; l < LANES; l++) {
            /* spare lanes of a short last block repeat its first plane; their outputs are dropped */
            const int64_t p = b0 + (l < lanes ? l : 0);
            oc[l] = p % m;
            src[l] = x + ((p / m) * c + oc[l] / mult) * h * wd;
            bb[l] = bias ? bias[oc[l]] : 0.0f;
        }
        /* Interleave the filters and the input planes. Done one float at a time, this and the
         * transpose back took as long as the multiply-adds on 7x7 planes; a full block whose
         * planes (filters) are consecutive in memory moves 8x8 blocks through registers. */
#ifdef HAVE_TRANSPOSE
        const int planes_in_a_row = lanes == LANES && mult == 1; /* then input plane == output plane */
        const int filters_in_a_row = lanes == LANES && oc[0] + LANES <= m;
#else
        const int planes_in_a_row = 0;
#endif
        int64_t t = 0;
#ifdef HAVE_TRANSPOSE
        for (; filters_in_a_row && t + 8 <= taps; t += 8)
            for (int half = 0; half < LANES; half += 8)
                transpose8(w + (oc[0] + half) * taps + t, taps, wb + t * LANES + half, LANES);
#endif
        for (; t < taps; t++)
            for (int64_t l = 0; l < LANES; l++)
                wb[t * LANES + l] = w[oc[l] * taps + t];
        /* rows of 8 or more: 8 pixels of a row at a time straight into their cells; narrower
         * ones (7x7 planes) 8 pixels in row-major order at a time, placed one by one */
        const int wide_rows = planes_in_a_row && c1 - c0 >= 8;
        for (int64_t row = r0; wide_rows && row < r1; row++) {
            float *cells = xb + ((row + pt) * wp + pl) * LANES;
            int64_t col = c0;
#ifdef HAVE_TRANSPOSE
            for (; col + 8 <= c1; col += 8)
                for (int half = 0; half < LANES; half += 8)
                    transpose8(src[half] + row * wd + col, h * wd, cells + col * LANES + half, LANES);
#endif
            for (; col < c1; col++)
                for (int64_t l = 0; l < LANES; l++)
                    cells[col * LANES + l] = src[l][row * wd + col];
        }
        int64_t k = wide_rows ? h * wd : 0, ih = 0, iw = 0; /* a row-major pixel and its row, column */
#ifdef HAVE_TRANSPOSE
        for (; planes_in_a_row && k + 8 <= h * wd; k += 8) {
            vec block[8];
            for (int half = 0; half < LANES; half += 8)
                transpose8(src[half] + k, h * wd, (float *)block + half, LANES);
            for (int e = 0; e < 8; e++) {
                if (ih >= r0 && ih < r1 && iw >= c0 && iw < c1)
                    *(vec *)(xb + ((ih + pt) * wp + iw + pl) * LANES) = block[e];
                if (++iw == wd) {
                    iw = 0;
                    ih++;
                }
            }
        }
#endif
        for (; k < h * wd; k++) {
            if (ih >= r0 && ih < r1 && iw >= c0 && iw < c1)
                for (int64_t l = 0; l < LANES; l++)
                    xb[((ih + pt) * wp + iw + pl) * LANES + l] = src[l][k];
            if (++iw == wd) {
                iw = 0;
                ih++;
            }
        }
        const vec bv = *(const vec *)bb;
        for (int64_t r = 0; r < oh; r++) {
            int64_t q = 0;
            /* four output pixels at a time: four accumulators in registers share each weight load */
            for (; q + 4 <= ow; q += 4) {
                vec a0 = bv, a1 = bv, a2 = bv, a3 = bv;
                for (int64_t i = 0; i < kh; i++) {
                    const float *xr = xb + ((r * sh + i * dh) * wp + q * sw) * LANES;
                    for (int64_t j = 0; j < kw; j++) {
                        const vec wv = *(const vec *)(wb + (i * kw + j) * LANES);
                        const float *xt = xr + j * dw * LANES;
                        a0 += wv * *(const vec *)xt;
                        a1 += wv * *(const vec *)(xt + sw * LANES);
                        a2 += wv * *(const vec *)(xt + 2 * sw * LANES);
                        a3 += wv * *(const vec *)(xt + 3 * sw * LANES);
                    }
                }
                vec *out = (vec *)(yb + (r * ow + q) * LANES);
                out[0] = a0;
                out[1] = a1;
                out[2] = a2;
                out[3] = a3;
            }
            for (; q < ow; q++) {
                vec a0 = bv;
                for (int64_t i = 0; i < kh; i++) {
                    const float *xr = xb + ((r * sh + i * dh) * wp + q * sw) * LANES;
                    for (int64_t j = 0; j < kw; j++)
                        a0 += *(const vec *)(wb + (i * kw + j) * LANES) * *(const vec *)(xr + j * dw * LANES);
                }
                *(vec *)(yb + (r * ow + q) * LANES) = a0;
            }
        }
        float *dst = y + b0 * oh * ow; /* the block's output planes are consecutive */
        const int64_t pixels = oh * ow;
        if (act)
            aioge_act_span(yb, NULL, yb, pixels * LANES, act, act_p0, act_p1);
        int64_t o = 0;
#ifdef HAVE_TRANSPOSE
        for (; lanes == LANES && o + 8 <= pixels; o += 8)
            for (int half = 0; half < LANES; half += 8)
                transpose8(yb + o * LANES + half, LANES, dst + half * pixels + o, pixels);
#endif
        for (int64_t l = 0; l < lanes; l++)
            for (int64_t oo = o; oo < pixels; oo++)
                dst[l * pixels + oo] = yb[oo * LANES + l];
    }
    return 0;
}

/* NV vectors of LANES outputs along one output row, from the column phases of one padded
 * plane (see depthwise_rows): the bias, then the taps in order, one multiply-add each. */
static inline __attribute__((always_inline)) void
dw_row_block(int nv, const float *restrict ph, const float *restrict wt, float b, int64_t taps, const int64_t *restrict off,
             float *restrict out) {
    vec acc[4];
    for (int v = 0; v < nv; v++)
        acc[v] = (vec){0} + b;
    for (int64_t t = 0; t < taps; t++) {
        const float *src = ph + off[t];
        const float wv = wt[t];
        for (int v = 0; v < nv; v++)
            acc[v] += wv * *(const vecu *)(src + v * LANES);
    }
    for (int v = 0; v < nv; v++)
        *(vec *)(out + v * LANES) = acc[v];
}

/* The depthwise convolution one plane at a time, for planes wide enough to fill the vector lanes
 * along a row (14 and more columns): the interleaving of depthwise_interleaved, both ways, cost
 * as much as the arithmetic there, and its buffer of LANES planes (1.6 MB at 112x112) missed
 * the caches. The input plane is copied into a zero-padded buffer split into its sw column
 * phases (column j of phase px is padded column j * sw + px), so tap (i, j) of output row r
 * reads a contiguous run at row r * sh + i * dh of phase (j * dw) % sw from column (j * dw) / sw.
 * The buffer (one plane: 52 KB at 112x112) is zeroed once per call; each plane rewrites only
 * the cells that hold input. An output row is computed into a row buffer rounded up to whole
 * vectors and copied out; the plane is activated when all its rows are done. Same operations in the same order as
 * depthwise_interleaved, so the two give equal results. */
static int depthwise_rows(const float *x, const float *w, const float *bias, float *y, const int64_t *geometry,
                          int64_t p0, int64_t p1) {
    UNPACK_GEOMETRY(geometry);
    const int64_t m = c * mult, taps = kh * kw;
    const int64_t hp = (oh - 1) * sh + (kh - 1) * dh + 1;      /* padded rows read */
    const int64_t owv = (ow + LANES - 1) / LANES * LANES;       /* output columns computed */
    const int64_t wq = owv + ((kw - 1) * dw) / sw;             /* columns of a phase */
    const int64_t plane = (hp * wq + LANES - 1) / LANES * LANES; /* floats of a phase, whole vectors */
    float *buf = aioge_thread_scratch(1, (size_t)(sw * plane + owv + taps * 2));
    if (!buf)
        return AIOGE_ENOMEM;
    float *row = buf + sw * plane;
    int64_t *off = (int64_t *)(row + owv); /* tap (i, j)'s offset from its output row's start */
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++)
            off[i * kw + j] = ((j * dw) % sw) * plane + i * dh * wq + (j * dw) / sw;
    memset(buf, 0, sizeof(float) * (size_t)(sw * plane));
    for (int64_t p = p0; p < p1; p++) {
        const int64_t om = p % m;
        const float *src = x + ((p / m) * c + om / mult) * h * wd;
        for (int64_t px = 0; px < sw; px++) {
            /* phase columns j whose input column j * sw + px - pl lies in [0, wd) */
            int64_t lo = pl - px <= 0 ? 0 : (pl - px + sw - 1) / sw;
            int64_t hi = wd - 1 + pl - px < 0 ? 0 : (wd - 1 + pl - px) / sw + 1;
            hi = hi < wq ? hi : wq;
            if (lo >= hi)
                continue;
            for (int64_t r = 0; r < hp; r++) {
                const int64_t ih = r - pt;
                if (ih < 0 || ih >= h)
                    continue;
                float *restrict d = buf + px * plane + r * wq;
                const float *restrict s = src + ih * wd + px - pl;
                if (sw == 1)
                    memcpy(d + lo, s + lo, sizeof(float) * (size_t)(hi - lo));
                else
                    for (int64_t j = lo; j < hi; j++)
                        d[j] = s[j * sw];
            }
        }
        const float *wt = w + om * taps;
        const float b = bias ? bias[om] : 0.0f;
        float *out = y + p * oh * ow;
        for (int64_t r = 0; r < oh; r++) {
            const float *ph = buf + r * sh * wq;
            int64_t q = 0;
            for (; q + 4 * LANES <= owv; q += 4 * LANES)
                dw_row_block(4, ph + q, wt, b, taps, off, row + q);
            switch ((owv - q) / LANES) {
            case 3: dw_row_block(3, ph + q, wt, b, taps, off, row + q); break;
            case 2: dw_row_block(2, ph + q, wt, b, taps, off, row + q); break;
            case 1: dw_row_block(1, ph + q, wt, b, taps, off, row + q); break;
            default: break;
            }
            memcpy(out + r * ow, row, sizeof(float) * (size_t)ow);
        }
        if (act) /* the plane is still in L2 (50 KB at 112x112); a call per row cost more on short rows */
            aioge_act_span(out, NULL, out, oh * ow, act, act_p0, act_p1);
    }
    return 0;
}

/* Depthwise convolution (group == channels, ``mult`` filters per input channel):
 * y[n, m, r, q] = act(bias[m] + sum over taps (i, j) of w[m, 0, i, j] * x[n, m / mult, r*sh - pt + i*dh, q*sw - pl + j*dw]),
 * taps outside the input counting zero, for output planes [p0, p1) numbered over N x (c * mult);
 * ``bias`` may be NULL; the layout and the activation are the geometry's. Returns AIOGE_ENOMEM
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
    return (geometry[DW_ROWS] ? depthwise_rows : depthwise_interleaved)(x, w, bias, y, geometry, p0, p1);
}

typedef int32_t ivec __attribute__((vector_size(LANES * sizeof(int32_t))));

/* np.maximum(y, v) lane by lane: v where it is greater or NaN, else y (so a NaN in either wins). */
static inline vec max_nan(vec y, vec v) {
    const ivec take = (v > y) | (v != v);
    return (vec)(((ivec)v & take) | ((ivec)y & ~take));
}

/* yr[q] = max(yr[q], xr[q * stride]) for q in [lo, hi); a NaN wins, as in np.maximum. At unit
 * stride LANES at a time through explicit vectors: the compiler left the select with its NaN
 * test mostly scalar (a 3x3 max pool over 64x111x111 took 0.3 ms on one core). */
static inline void tap_max(float *restrict yr, const float *restrict xr, int64_t stride, int64_t lo, int64_t hi) {
    if (stride == 1) {
        int64_t q = lo;
        for (; q + LANES <= hi; q += LANES)
            *(vecu *)(yr + q) = max_nan(*(const vecu *)(yr + q), *(const vecu *)(xr + q));
        for (; q < hi; q++) {
            const float v = xr[q];
            yr[q] = v > yr[q] || v != v ? v : yr[q];
        }
    } else { /* stride 2 never comes here: the pool reads its even and odd columns at unit stride */
        for (int64_t q = lo; q < hi; q++)
            yr[q] = xr[q * stride] > yr[q] || xr[q * stride] != xr[q * stride] ? xr[q * stride] : yr[q];
    }
}

/* A 2x2 max pool at stride 2 without pads or dilation, every window inside the input (the
 * small CNNs' pool after their first conv): each output row from two input rows, LANES outputs
 * at a time from 2 LANES columns, the even and odd columns taken apart by a shuffle. The maxima
 * are taken in the separable kernel's order (the two rows, then the window's two columns), so
 * the result is bit-equal to it, NaN and -0 included. The separable path spent more on its
 * per-row set-up (the row copied, split into its even and odd columns, the output row filled
 * with -inf) than on the maxima: 23 ns a 32-wide row, 8x16x32x32 in 46 us on one core. */
static void max_pool_2x2(const float *xp, float *yp, int64_t wd, int64_t oh, int64_t ow) {
    const ivec even = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const ivec odd = even + 1;
    for (int64_t r = 0; r < oh; r++) {
        const float *x0 = xp + 2 * r * wd, *x1 = x0 + wd;
        float *yr = yp + r * ow;
        int64_t q = 0;
        for (; q + LANES <= ow; q += LANES) {
            const vec lo = max_nan(*(const vecu *)(x0 + 2 * q), *(const vecu *)(x1 + 2 * q));
            const vec hi = max_nan(*(const vecu *)(x0 + 2 * q + LANES), *(const vecu *)(x1 + 2 * q + LANES));
            *(vecu *)(yr + q) = max_nan(__builtin_shuffle(lo, hi, even), __builtin_shuffle(lo, hi, odd));
        }
        for (; q < ow; q++) {
            const float a = x1[2 * q] > x0[2 * q] || x1[2 * q] != x1[2 * q] ? x1[2 * q] : x0[2 * q];
            const float b = x1[2 * q + 1] > x0[2 * q + 1] || x1[2 * q + 1] != x1[2 * q + 1] ? x1[2 * q + 1] : x0[2 * q + 1];
            yr[q] = b > a || b != b ? b : a;
        }
    }
}

/* yr[q] += xr[q * stride] for q in [lo, hi). */
static inline void tap_add(float *restrict yr, const float *restrict xr, int64_t stride, int64_t lo, int64_t hi) {
    if (stride == 1) {
#pragma omp simd
        for (int64_t q = lo; q < hi; q++)
            yr[q] += xr[q];
    } else {
        for (int64_t q = lo; q < hi; q++)
            yr[q] += xr[q * stride];
    }
}


/* The cells of window ``o`` along one axis that count towards an average: inside [lo, hi)
 * of input coordinates (the input itself, or the input with its pads). */
static int64_t window_count(int64_t o, int64_t stride, int64_t begin, int64_t k, int64_t dil, int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t t = 0; t < k; t++) {
        const int64_t pos = o * stride - begin + t * dil;
        n += pos >= lo && pos < hi;
    }
    return n;
}

/* One plane of a pool window by window (``per_pixel`` below): each window's rows and columns
 * inside the input are worked out once and summed or maxed directly. For small outputs (a 7x7
 * window over a 7x7 plane) where the row kernel's per-tap loops would be a few values long. */
static void pool_pixels(const float *xp, float *yp, const int64_t *geometry, int32_t average, int32_t include_pad) {
    const int64_t h = geometry[0], wd = geometry[1], kh = geometry[2], kw = geometry[3], sh = geometry[4],
                  sw = geometry[5], dh = geometry[6], dw = geometry[7], pt = geometry[8], pl = geometry[9],
                  pb = geometry[10], pr = geometry[11], oh = geometry[12], ow = geometry[13];
    for (int64_t r = 0; r < oh; r++) {
        int64_t i0, i1;
        tap_cols(r * sh - pt, dh, h, kh, &i0, &i1); /* kernel rows i with 0 <= r*sh - pt + i*dh < h */
        const int64_t rows = include_pad ? window_count(r, sh, pt, kh, dh, -pt, h + pb) : i1 - i0;
        for (int64_t q = 0; q < ow; q++) {
            int64_t j0, j1;
            tap_cols(q * sw - pl, dw, wd, kw, &j0, &j1);
            const int64_t cols = include_pad ? window_count(q, sw, pl, kw, dw, -pl, wd + pr) : j1 - j0;
            float acc = average ? 0.0f : -INFINITY;
            for (int64_t i = i0; i < i1; i++) {
                const float *xr = xp + (r * sh - pt + i * dh) * wd + q * sw - pl;
                for (int64_t j = j0; j < j1; j++) {
                    const float v = xr[j * dw];
                    if (average)
                        acc += v;
                    else if (v > acc || v != v)
                        acc = v;
                }
            }
            const int64_t cells = rows * cols;
            yp[r * ow + q] = average ? acc / (float)(cells > 0 ? cells : 1) : acc;
        }
    }
}

/* 2-D max (average == 0) or average (average == 1) pooling over planes [p0, p1) of N x C.
 * Padding never wins a max and never adds to a sum; an average divides by the window's cells
 * inside the input, or (include_pad) inside the input grown by its pads (pb, pr: the declared
 * end pads, which a ceil_mode window may overhang; overhanging cells never count). A window
 * with no cell in the input gives -inf (max) or 0 (average), as the padded numpy kernels do.
 * Returns AIOGE_ENOMEM when its scratch rows cannot be allocated (nothing written), else 0;
 * an empty output is no work. */
int aioge_pool2d_f32(const float *x, float *y, const int64_t *geometry, int32_t average, int32_t include_pad,
                      int32_t per_pixel, int64_t p0, int64_t p1) {
    if (p0 >= p1 || geometry[12] <= 0 || geometry[13] <= 0)
        return AIOGE_OK;
    if (geometry[4] <= 0 || geometry[5] <= 0 || geometry[6] <= 0 || geometry[7] <= 0 || geometry[0] < 0 || geometry[1] < 0)
        return AIOGE_EGEOMETRY;
    /* input rows and columns, kernel rows and columns, strides, dilations, begin and end pads, output rows and columns */
    const int64_t h = geometry[0], wd = geometry[1], kh = geometry[2], kw = geometry[3], sh = geometry[4],
                  sw = geometry[5], dh = geometry[6], dw = geometry[7], pt = geometry[8], pl = geometry[9],
                  pb = geometry[10], pr = geometry[11], oh = geometry[12], ow = geometry[13];
    const float init = average ? 0.0f : -INFINITY;
    /* scratch: 1 / the cells of each window column inside the input (or input + pads), one
     * count per output column, the same for every row and plane; then one input row */
    const int64_t half = (wd + 1) / 2;
    float *inv_cols = per_pixel ? NULL : aioge_malloc(sizeof(float) * (size_t)(ow + wd + 1 + 2 * half) + sizeof(int64_t) * (size_t)(2 * kw + 2 * oh));
    if (!per_pixel && !inv_cols)
        return AIOGE_ENOMEM;
    /* the kernel rows inside the input per output row, the output columns each kernel column
     * reaches: the same for every plane, worked out once (tap_cols' two divisions per row and
     * kernel column cost more than the maxima themselves: 5 us of a 7 us 111x111 plane) */
    int64_t *rows_in = inv_cols ? (int64_t *)(inv_cols + ow + wd + 1 + 2 * half) : NULL, *cols_in = rows_in ? rows_in + 2 * oh : NULL;
    for (int64_t r = 0; rows_in && r < oh; r++)
        tap_cols(r * sh - pt, dh, h, kh, &rows_in[2 * r], &rows_in[2 * r + 1]);
    for (int64_t j = 0; cols_in && j < kw; j++)
        tap_cols(j * dw - pl, sw, wd, ow, &cols_in[2 * j], &cols_in[2 * j + 1]);
    float *vert = inv_cols ? inv_cols + ow : NULL;
    /* at stride 2 the reduced row split into its even and odd columns: every kernel column then
     * reads one of them at unit stride, which vectorises (the strided loop did not: ResNet's
     * and SqueezeNet's 3x3 stride-2 max pools over 64x112x112 took 0.3 ms on one core) */
    float *phase[2] = {vert ? vert + wd + 1 : NULL, vert ? vert + wd + 1 + half : NULL};
    for (int64_t q = 0; average && inv_cols && q < ow; q++) {
        const int64_t cols = window_count(q, sw, pl, kw, dw, include_pad ? -pl : 0, include_pad ? wd + pr : wd);
        inv_cols[q] = cols ? 1.0f / (float)cols : 1.0f;
    }
    const int pairs = !average && kh == 2 && kw == 2 && sh == 2 && sw == 2 && dh == 1 && dw == 1 && pt == 0 && pl == 0 &&
                      2 * oh <= h && 2 * ow <= wd;
    for (int64_t p = p0; p < p1; p++) {
        const float *xp = x + p * h * wd;
        float *yp = y + p * oh * ow;
        if (pairs) {
            max_pool_2x2(xp, yp, wd, oh, ow);
            continue;
        }
        if (per_pixel) {
            pool_pixels(xp, yp, geometry, average, include_pad);
            continue;
        }
        /* separable, one output row at a time: the window's input rows reduced into ``vert``
         * (whole contiguous rows), then the kernel columns of ``vert`` into the output row */
        for (int64_t r = 0; r < oh; r++) {
            float *yr = yp + r * ow;
            const int64_t i0 = rows_in[2 * r], i1 = rows_in[2 * r + 1]; /* kernel rows inside the input */
            for (int64_t q = 0; q < ow; q++)
                yr[q] = init;
            if (i0 < i1) {
                const float *first = xp + (r * sh - pt + i0 * dh) * wd;
                for (int64_t k = 0; k < wd; k++)
                    vert[k] = first[k];
                for (int64_t i = i0 + 1; i < i1; i++) {
                    const float *xr = xp + (r * sh - pt + i * dh) * wd;
                    if (average)
                        tap_add(vert, xr, 1, 0, wd);
                    else
                        tap_max(vert, xr, 1, 0, wd);
                }
                if (sw == 2)
                    for (int64_t m = 0; m < wd / 2; m++) {
                        phase[0][m] = vert[2 * m];
                        phase[1][m] = vert[2 * m + 1];
                    }
                if (sw == 2 && wd % 2)
                    phase[0][wd / 2] = vert[wd - 1];
                for (int64_t j = 0; j < kw; j++) {
                    const int64_t lo = cols_in[2 * j], hi = cols_in[2 * j + 1], off = j * dw - pl;
                    /* at stride 2, column 2q + off of vert is column q + a of phase b, off = 2a + b */
                    const float *src = sw == 2 ? phase[off & 1] + (off - (off & 1)) / 2 : vert + off;
                    const int64_t step = sw == 2 ? 1 : sw;
                    if (average)
                        tap_add(yr, src, step, lo, hi);
                    else
                        tap_max(yr, src, step, lo, hi);
                }
            }
            if (average) {
                const int64_t rows = window_count(r, sh, pt, kh, dh, include_pad ? -pt : 0, include_pad ? h + pb : h);
#pragma omp simd
                for (int64_t q = 0; q < ow; q++)
                    yr[q] *= rows ? inv_cols[q] / (float)rows : 1.0f;
            }
        }
    }
    free(inv_cols);
    return 0;
}
