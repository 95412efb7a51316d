/* The jobs along one axis (issue 41: RoBERTa's position ids, CLIP's end-of-text token): a running
 * sum or product (CumSum, CumProd), ArgMax/ArgMin and GatherElements, each over a C-contiguous
 * tensor seen as (outer, n, inner) with the axis in the middle; [lo, hi) are outer blocks. Each
 * computes what the numpy kernel computes, bit for bit (sequential float sums, as numpy's
 * accumulate; the first NaN as the extreme, as numpy's argmax), and checks its geometry against
 * the element counts of its buffers first (AIOGE_EGEOMETRY, nothing written). No scratch: the
 * running values of a block of columns live on the stack, so a scan may write over its input. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "aioge.h"

/* dtypes by JOB_ELEMWISE's codes: 0 float32, 1 int64, 2 int32, 3 bool (a byte), 4 float64 */
#define SCAN_COLS 64

/* T the element, A the running value (unsigned for the integers: they wrap as numpy's do) */
#define SCAN(T, A)                                                                                                     \
    for (int64_t o = lo; o < hi; o++)                                                                                  \
        for (int64_t j0 = 0; j0 < inner; j0 += SCAN_COLS) {                                                            \
            const int64_t w = inner - j0 < SCAN_COLS ? inner - j0 : SCAN_COLS;                                         \
            A acc[SCAN_COLS];                                                                                          \
            for (int64_t s = 0; s < n; s++) {                                                                          \
                const int64_t at = (o * n + (reverse ? n - 1 - s : s)) * inner + j0;                                   \
                const T *xr = (const T *)x + at;                                                                       \
                T *yr = (T *)y + at;                                                                                   \
                for (int64_t j = 0; j < w; j++) {                                                                      \
                    const A v = (A)xr[j];                                                                              \
                    const A r = !s ? v : prod ? (A)(acc[j] * v) : (A)(acc[j] + v);                                     \
                    yr[j] = (T)(!exclusive ? r : s ? acc[j] : (A)prod);                                                \
                    acc[j] = r;                                                                                        \
                }                                                                                                      \
            }                                                                                                          \
        }

/* y = cumsum (or cumprod) of x along the axis: x, y, dtype (0, 1, 2 or 4), outer, n, inner,
 * exclusive (y[0] the identity, y[i] over x[:i]), reverse (from the axis's end), prod, then the
 * elements of x and y */
int aioge_cumulative(const int64_t *g, int64_t lo, int64_t hi)
{
    const void *x = (const void *)(intptr_t)g[0];
    void *y = (void *)(intptr_t)g[1];
    const int64_t dt = g[2], outer = g[3], n = g[4], inner = g[5], exclusive = g[6], reverse = g[7], prod = g[8];
    if (lo < 0 || hi > outer || !aioge_fits(g[9], outer, n, inner, 1) || !aioge_fits(g[10], outer, n, inner, 1))
        return AIOGE_EGEOMETRY;
    switch (dt) {
    case 0: SCAN(float, float) break;
    case 1: SCAN(int64_t, uint64_t) break;
    case 2: SCAN(int32_t, uint32_t) break;
    case 4: SCAN(double, double) break;
    default: return AIOGE_EGEOMETRY;
    }
    return 0;
}

/* The index of the extreme of each column: the first (or, with last, the last) one; a NaN is
 * the extreme, as in numpy's argmax and argmin. An element reads as CONV(*(const T *)p). */
#define ARG(T, CONV, ISNAN)                                                                                            \
    for (int64_t o = lo; o < hi; o++)                                                                                  \
        for (int64_t j = 0; j < inner; j++) {                                                                          \
            const T *p = (const T *)x + o * n * inner + j;                                                             \
            int64_t best_i = last ? n - 1 : 0;                                                                         \
            T best = CONV(p[best_i * inner]);                                                                          \
            for (int64_t s = 1; s < n && !ISNAN(best); s++) {                                                          \
                const int64_t i = last ? n - 1 - s : s;                                                                \
                const T v = CONV(p[i * inner]);                                                                        \
                if (ISNAN(v) || (largest ? v > best : v < best)) {                                                     \
                    best = v;                                                                                          \
                    best_i = i;                                                                                        \
                }                                                                                                      \
            }                                                                                                          \
            y[o * inner + j] = best_i;                                                                                 \
        }
#define AS_IS(v) (v)
#define AS_BOOL(v) (uint8_t)((v) != 0)
#define NEVER(v) 0

/* ArgMax (largest) or ArgMin along the axis into int64 y (outer x inner; keepdims changes no
 * layout): x, y, dtype (0-4), outer, n (at least 1), inner, largest, last, then the elements of
 * x and y */
int aioge_arg_reduce(const int64_t *g, int64_t lo, int64_t hi)
{
    const void *x = (const void *)(intptr_t)g[0];
    int64_t *y = (int64_t *)(intptr_t)g[1];
    const int64_t dt = g[2], outer = g[3], n = g[4], inner = g[5], largest = g[6], last = g[7];
    if (lo < 0 || hi > outer || n < 1 || !aioge_fits(g[8], outer, n, inner, 1) || !aioge_fits(g[9], outer, inner, 1, 1))
        return AIOGE_EGEOMETRY;
    switch (dt) {
    case 0: ARG(float, AS_IS, isnan) break;
    case 1: ARG(int64_t, AS_IS, NEVER) break;
    case 2: ARG(int32_t, AS_IS, NEVER) break;
    case 3: ARG(uint8_t, AS_BOOL, NEVER) break;
    case 4: ARG(double, AS_IS, isnan) break;
    default: return AIOGE_EGEOMETRY;
    }
    return 0;
}

#define PICK(T)                                                                                                        \
    for (int64_t o = lo; o < hi; o++)                                                                                  \
        for (int64_t t = 0; t < m; t++)                                                                                \
            for (int64_t j = 0; j < inner; j++) {                                                                      \
                const int64_t at = (o * m + t) * inner + j;                                                            \
                int64_t i = wide ? ((const int64_t *)idx)[at] : ((const int32_t *)idx)[at];                            \
                if (i < 0)                                                                                             \
                    i += n;                                                                                            \
                if (i < 0 || i >= n)                                                                                   \
                    return AIOGE_EINDEX;                                                                               \
                ((T *)out)[at] = ((const T *)data)[(o * n + i) * inner + j];                                           \
            }

/* GatherElements: out[o, t, j] = data[o, idx[o, t, j], j], a negative index counted from the
 * axis's end, one outside it AIOGE_EINDEX (the blocks before it written): data, idx, out, the
 * item size (1, 2, 4 or 8 bytes), wide (int64 indices, else int32), outer, n, inner, m (idx's
 * axis), then the elements of data and of idx (out's too) */
int aioge_gather_elements(const int64_t *g, int64_t lo, int64_t hi)
{
    const void *data = (const void *)(intptr_t)g[0], *idx = (const void *)(intptr_t)g[1];
    void *out = (void *)(intptr_t)g[2];
    const int64_t item = g[3], wide = g[4], outer = g[5], n = g[6], inner = g[7], m = g[8];
    if (lo < 0 || hi > outer || !aioge_fits(g[9], outer, n, inner, 1) || !aioge_fits(g[10], outer, m, inner, 1))
        return AIOGE_EGEOMETRY;
    switch (item) {
    case 1: PICK(uint8_t) break;
    case 2: PICK(uint16_t) break;
    case 4: PICK(uint32_t) break;
    case 8: PICK(uint64_t) break;
    default: return AIOGE_EGEOMETRY;
    }
    return 0;
}
