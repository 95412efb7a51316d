/* Windowed kernels over NCHW float32 planes: depthwise convolution
 * (aioge.kernels.conv_algos calls it through ctypes).
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
