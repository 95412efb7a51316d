/* The packed GEMM of a constant B (MatMul and Gemm with a weight, the conv_t's packing) and the
 * one-row products (gemv), with the register tile of tile.h; the direct convolutions that
 * share it are in conv_direct.c.
 */
#include <stdint.h>
#include <stdlib.h>

#include "aioge.h"
#include "tile.h"
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* -- a constant B: y = a @ B (+ bias) ----------------------------------------------------------
 *
 * B (K x N) is packed once by the caller (aioge.kernels.matmul_algos.pack_columns) into panels
 * of NR columns, k-major: bpack[p][k][NR], zero past N. The roles of the conv's micro-kernel
 * swap: per k, nv vector loads of the panel and MR broadcasts of a, which is read in place
 * (MR rows lda apart, unit stride in k; rows past the range repeat the last one and are not
 * stored). KCG values of k at a time: the panel's kc x NR block (up to 256 KB) stays in L2
 * while every MR-row block of a runs over it, and a tile stays in registers over all of
 * it (measured against 128-value blocks kept in L1: 3-15% faster, most at K = 3072). The k-blocks
 * are the outer loop, so a's kc columns stay in L2 over every panel (K = 3072 re-read all of a
 * per panel). The first PF_TILES tiles over a block prefetch the next block (the next panel's, or
 * the first panel's next k-block) into L2, one line a k: the first tile over a block otherwise
 * waited on memory (AVX-512, 128 rows, one thread: 128x768x3072 127 -> 152 GF/s, 128x3072x768
 * 129 -> 150, 128x768x768 158 -> 165). A last panel narrower than NR accumulates in a local tile,
 * copied out with the bias.
 */
#define KCG 1024
#define PF_TILES ((NR + 15) / 16) /* a k's NR floats are NR / 16 cache lines */

/* A tile of mr <= MR rows (mv of them stored; rows past mv repeat the last) by nv vectors. */
static inline __attribute__((always_inline)) void
gtile(int nv, int mr, int64_t kc, const float *restrict a, int64_t lda, int64_t mv, const float *restrict b,
      float *restrict c, int64_t ldc, const float *restrict bias, int first, const float *pf)
{
    const float *r[MR];
    for (int i = 0; i < mr; i++)
        r[i] = a + (i < mv ? i : mv - 1) * lda;
    vf acc[MR][NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = first ? (bias ? *(const vfu *)(bias + VL * v) : (vf){0})
                              : (i < mv ? *(const vfu *)(c + i * ldc + VL * v) : (vf){0});
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        vf bv[NV];
        if (pf)
            __builtin_prefetch(pf + k * 16, 0, 2);
        for (int v = 0; v < nv; v++)
            bv[v] = *(const vfu *)(b + k * NR + VL * v);
        for (int i = 0; i < mr; i++) {
            float s = r[i][k];
            for (int v = 0; v < nv; v++)
                acc[i][v] += s * bv[v];
        }
    }
    for (int i = 0; i < mr; i++)
        if (i < mv)
            for (int v = 0; v < nv; v++)
                *(vfu *)(c + i * ldc + VL * v) = acc[i][v];
}

typedef void (*gtile_fn)(int64_t, const float *, int64_t, int64_t, const float *, float *, int64_t, const float *, int,
                         const float *);
#define GTILE(NAME, NVS, ROWS)                                                                                     \
    static void NAME(int64_t kc, const float *a, int64_t lda, int64_t mv, const float *b, float *c, int64_t ldc,   \
                     const float *bias, int first, const float *pf)                                                \
    {                                                                                                              \
        gtile(NVS, ROWS, kc, a, lda, mv, b, c, ldc, bias, first, pf);                                              \
    }
GTILE(gtile1, 1, MR)
GTILE(gtile2, 2, MR)
#if NV == 4
GTILE(gtile3, 3, MR)
GTILE(gtile4, 4, MR)
static const gtile_fn GTILES[NV + 1] = {0, gtile1, gtile2, gtile3, gtile4};
#define gtile_full gtile4
#else
static const gtile_fn GTILES[NV + 1] = {0, gtile1, gtile2};
#define gtile_full gtile2
#endif
/* A full panel's last block of fewer than MR rows: only its rows' multiply-adds (the same per
 * element), 2 mr (at least 4, the multiply-add's latency) cycles a k in place of MR's 12 on
 * AVX-512. BERT's and GPT-2's 128 rows end in a block of 2, ConvNeXt's 49 in one of 1. */
GTILE(gtile_r1, NV, 1)
GTILE(gtile_r2, NV, 2)
GTILE(gtile_r3, NV, 3)
GTILE(gtile_r4, NV, 4)
GTILE(gtile_r5, NV, 5)
static const gtile_fn GROWS[MR] = {0, gtile_r1, gtile_r2, gtile_r3, gtile_r4, gtile_r5};

/* One row of a against a whole panel (a GEMV: a classifier at batch 1). The MR-row tile would
 * compute MR - 1 repeated rows; here each k is one broadcast and NV multiply-adds, split over two
 * sets of accumulators (even and odd k) so that consecutive multiply-adds do not wait on each
 * other. The panel streams from memory once. All NR columns are computed (the panel is zero past
 * N) with the same operations, so equal weight columns still give equal outputs. */
static void grow(int64_t K, const float *restrict a, const float *restrict b, const float *restrict bias,
                 float *restrict c)
{
    vf acc[NV], odd[NV];
    for (int v = 0; v < NV; v++) {
        acc[v] = bias ? *(const vfu *)(bias + VL * v) : (vf){0};
        odd[v] = (vf){0};
    }
    int64_t k = 0;
    for (; k + 2 <= K; k += 2) {
        const float s0 = a[k], s1 = a[k + 1];
        for (int v = 0; v < NV; v++) {
            acc[v] += s0 * *(const vf *)(b + k * NR + VL * v);
            odd[v] += s1 * *(const vf *)(b + (k + 1) * NR + VL * v);
        }
    }
    for (; k < K; k++)
        for (int v = 0; v < NV; v++)
            acc[v] += a[k] * *(const vf *)(b + k * NR + VL * v);
    for (int v = 0; v < NV; v++)
        *(vf *)(c + VL * v) = acc[v] + odd[v];
}

/* Rows [r0, r1) of y and its column panels [p0, p1): y[r][n] = bias[n] + sum_k a[r][k] * B[k][n]
 * (bias may be NULL). a's rows are lda floats apart, y's ldy. K >= 1. */
void aioge_gemm_packed_f32(const float *a, int64_t lda, const float *bpack, const float *bias, float *y, int64_t ldy,
                           int64_t N, int64_t K, int64_t r0, int64_t r1, int64_t p0, int64_t p1)
{
    const int64_t kblocks = (K + KCG - 1) / KCG, kstep = (K + kblocks - 1) / kblocks;
    if (r0 == 0 && r1 == 1) { /* a product of one row (a split's one-row last block runs the tile, as whole) */
        for (int64_t p = p0; p < p1; p++) {
            const int64_t col0 = p * NR, ncols = N - col0 < NR ? N - col0 : NR;
            float tile[NR] __attribute__((aligned(64)));
            float bpad[NR] __attribute__((aligned(64))) = {0};
            for (int64_t j = 0; bias && j < ncols; j++)
                bpad[j] = bias[col0 + j];
            grow(K, a + r0 * lda, bpack + p * K * NR, bias ? bpad : 0, tile);
            for (int64_t j = 0; j < ncols; j++)
                y[r0 * ldy + col0 + j] = tile[j];
        }
        return;
    }
    const int64_t pfull = p1 > p0 && N - (p1 - 1) * NR < NR ? p1 - 1 : p1; /* panels [p0, pfull) are NR wide */
    for (int64_t k0 = 0; k0 < K; k0 += kstep) {
        const int64_t kc = K - k0 < kstep ? K - k0 : kstep;
        for (int64_t p = p0; p < pfull; p++) {
            const float *bp = bpack + p * K * NR + k0 * NR;
            const float *next = p + 1 < pfull ? bp + K * NR : k0 + kc < K ? bpack + p0 * K * NR + (k0 + kc) * NR : 0;
            for (int64_t i = r0, t = 0; i < r1; i += MR, t++) {
                const int64_t mv = r1 - i < MR ? r1 - i : MR;
                (mv < MR ? GROWS[mv] : gtile_full)(kc, a + i * lda + k0, lda, mv, bp, y + i * ldy + p * NR, ldy,
                                                   bias ? bias + p * NR : 0, k0 == 0,
                                                   next && t < PF_TILES ? next + t * kc * 16 : 0);
            }
        }
    }
    for (int64_t p = pfull; p < p1; p++) { /* the last, narrower panel */
        const int64_t col0 = p * NR, ncols = N - col0;
        const float *bp = bpack + p * K * NR;
        const float *bb = bias ? bias + col0 : 0;
        const gtile_fn fn = GTILES[(ncols + VL - 1) / VL];
        float tile[MR * NR] __attribute__((aligned(64)));
        float bpad[NR] __attribute__((aligned(64))) = {0};
        for (int64_t j = 0; bb && j < ncols; j++)
            bpad[j] = bb[j]; /* the same operations as a full panel's columns, so equal columns stay equal */
        for (int64_t i = r0; i < r1; i += MR) {
            const int64_t mv = r1 - i < MR ? r1 - i : MR;
            for (int64_t k0 = 0; k0 < K; k0 += kstep) {
                const int64_t kc = K - k0 < kstep ? K - k0 : kstep;
                fn(kc, a + i * lda + k0, lda, mv, bp + k0 * NR, tile, NR, bb ? bpad : 0, k0 == 0, 0);
            }
            for (int64_t r = 0; r < mv; r++) {
                float *restrict d = y + (i + r) * ldy + col0;
                const float *restrict s = tile + r * NR;
                for (int64_t j = 0; j < ncols; j++)
                    d[j] = s[j];
            }
        }
    }
}

#define PACK_KB 64 /* rows of a panel a transposed pack fills at a time: 16 KB of it, in L1 */

/* pack_columns for B = W^T, W row-major (N x K, rows ldw floats apart: a conv's weight, Gemm's
 * transB): each row of W read once in order, written down a column of the panel, PACK_KB rows
 * of the panel at a time. numpy's strided copy of the transpose packed resnet18's weights in
 * 45 ms on the first run after a graph-cache load. */
static void pack_columns_t(const float *w, int64_t ldw, int64_t K, int64_t N, float *bpack, int64_t p0, int64_t p1)
{
    for (int64_t p = p0; p < p1; p++) {
        const int64_t col0 = p * NR, ncols = N - col0 < NR ? N - col0 : NR;
        float *restrict dst = bpack + p * K * NR;
        for (int64_t k0 = 0; k0 < K; k0 += PACK_KB) {
            const int64_t k1 = k0 + PACK_KB < K ? k0 + PACK_KB : K;
            for (int64_t j = 0; j < ncols; j++) {
                const float *restrict src = w + (col0 + j) * ldw;
                for (int64_t k = k0; k < k1; k++)
                    dst[k * NR + j] = src[k];
            }
            for (int64_t k = k0; k < k1; k++)
                for (int64_t j = ncols; j < NR; j++)
                    dst[k * NR + j] = 0.0f;
        }
    }
}

/* pack_columns for B (K x N) with element (k, n) at b[k * sk + n * sn]: panels [p0, p1) of
 * bpack[p][k][NR], zero past N. Row-major (sn 1) or a row-major W transposed (sk 1); any
 * other B is the caller's to copy first. numpy's strided copy packed BERT-base's 340 MB of
 * weights in 0.44 s on the first run; these loops run at memory speed, over two cores through
 * par.c. */
void aioge_pack_columns_f32(const float *b, int64_t sk, int64_t sn, int64_t K, int64_t N, float *bpack, int64_t p0,
                            int64_t p1)
{
    if (sn != 1) {
        pack_columns_t(b, sn, K, N, bpack, p0, p1);
        return;
    }
    const int64_t ldb = sk;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t col0 = p * NR, ncols = N - col0 < NR ? N - col0 : NR;
        float *restrict dst = bpack + p * K * NR;
        for (int64_t k = 0; k < K; k++) {
            const float *restrict src = b + k * ldb + col0;
            float *restrict d = dst + k * NR;
            if (ncols == NR)
                for (int64_t j = 0; j < NR; j++)
                    d[j] = src[j];
            else {
                for (int64_t j = 0; j < ncols; j++)
                    d[j] = src[j];
                for (int64_t j = ncols; j < NR; j++)
                    d[j] = 0.0f;
            }
        }
    }
}

/* y[n] = bias[n] + sum_k x[k] * w[n][k] for n in [n0, n1): a (1, K) row times the transpose of a
 * row-major (N, K) weight (Gemm with transB: a classifier at batch 1), the weight read in place,
 * 8 rows at a time in 8-float vectors, each row a contiguous stream. Bound by reading w: two
 * threads each take half of the rows. (4 rows in 16-float vectors read MobileNetV3's 1024 x 1000
 * classifier in 300 us, this 94; thread CPU, load 11.) Every row goes through the same
 * operations (a short last block repeats its last row), so equal rows give equal outputs. */
typedef float v8f __attribute__((vector_size(32), aligned(32)));
typedef float v8fu __attribute__((vector_size(32), aligned(4)));

void aioge_gemv_t_f32(const float *x, const float *w, int64_t ldw, const float *bias, float *y, int64_t K, int64_t n0,
                      int64_t n1)
{
    const int64_t kv = K / 8 * 8;
    for (int64_t n = n0; n < n1; n += 8) {
        const int64_t rows = n1 - n < 8 ? n1 - n : 8;
        const float *r[8];
        for (int i = 0; i < 8; i++)
            r[i] = w + (n + (i < rows ? i : rows - 1)) * ldw;
        v8f acc[8];
        for (int i = 0; i < 8; i++)
            acc[i] = (v8f){0};
        for (int64_t k = 0; k < kv; k += 8) {
            const v8f xv = *(const v8fu *)(x + k);
            for (int i = 0; i < 8; i++)
                acc[i] += xv * *(const v8fu *)(r[i] + k);
        }
        for (int i = 0; i < rows; i++) {
            float s = 0.0f;
            for (int l = 0; l < 8; l++)
                s += acc[i][l];
            for (int64_t k = kv; k < K; k++)
                s += x[k] * r[i][k];
            y[n + i] = bias ? s + bias[n + i] : s;
        }
    }
}

/* nv 16-column vectors of y = x @ w (+ bias): even k summed in a0, odd k in a1, then a0 + a1 and
 * the bias, each column through the same operations whatever the block it falls in. */
static inline __attribute__((always_inline)) void
gvn(int nv, const float *restrict x, const float *restrict w, int64_t ldw, int64_t K, const float *restrict bias,
    float *restrict y)
{
    v16 a0[8], a1[8];
    for (int j = 0; j < nv; j++)
        a0[j] = a1[j] = (v16){0};
    int64_t k = 0;
    for (; k + 1 < K; k += 2) {
        const float x0 = x[k], x1 = x[k + 1];
        const float *r0 = w + k * ldw, *r1 = r0 + ldw;
        for (int j = 0; j < nv; j++) {
            a0[j] += x0 * *(const v16u *)(r0 + 16 * j);
            a1[j] += x1 * *(const v16u *)(r1 + 16 * j);
        }
    }
    if (k < K) {
        const float x0 = x[k];
        for (int j = 0; j < nv; j++)
            a0[j] += x0 * *(const v16u *)(w + k * ldw + 16 * j);
    }
    for (int j = 0; j < nv; j++) {
        v16 s = a0[j] + a1[j];
        if (bias)
            s += *(const v16u *)(bias + 16 * j);
        *(v16u *)(y + 16 * j) = s;
    }
}

typedef void (*gvn_fn)(const float *, const float *, int64_t, int64_t, const float *, float *);
#define GVN(n)                                                                                                         \
    static void gvn##n(const float *x, const float *w, int64_t l, int64_t K, const float *b, float *y)               \
    {                                                                                                                  \
        gvn(n, x, w, l, K, b, y);                                                                                      \
    }
GVN(1)
GVN(2)
GVN(3)
GVN(4)
GVN(5)
GVN(6)
GVN(7)
GVN(8)
static const gvn_fn GVNS[9] = {NULL, gvn1, gvn2, gvn3, gvn4, gvn5, gvn6, gvn7, gvn8};

/* y[n] = act(bias[n] + sum_k x[k] * w[k][n]) for the 16-column groups [g0, g1) of N columns: a
 * (1, K) row times a row-major (K, N) weight (a MatMul or Gemm at batch 1: an MLP's layers), read
 * in place, up to 128 columns a pass over K, so each pass streams rows of w. Bound by reading w:
 * two threads take groups of columns. The last group's columns past N go through a zero-padded
 * copy of their weights (same operations, so columns with equal weights give equal outputs).
 * Returns AIOGE_ENOMEM when that copy finds no memory, else 0. */
int aioge_gemv_n_f32(const float *x, const float *w, int64_t ldw, const float *bias, float *y, int64_t K, int64_t N,
                     int act, float p0, float p1, int64_t g0, int64_t g1)
{
    const int64_t full = N / 16, c0 = g0 * 16;
    int64_t g = g0;
    while (g < g1 && g < full) {
        const int64_t nv = (g1 < full ? g1 : full) - g > 8 ? 8 : (g1 < full ? g1 : full) - g;
        GVNS[nv](x, w + g * 16, ldw, K, bias ? bias + g * 16 : NULL, y + g * 16);
        g += nv;
    }
    if (g < g1 && full * 16 < N) { /* the partial last group */
        const int64_t tail = N - full * 16;
        float *wt = aioge_thread_scratch(1, (size_t)K * 16);
        if (!wt)
            return AIOGE_ENOMEM; /* no memory for the copy */
        for (int64_t k = 0; k < K; k++) {
            for (int64_t i = 0; i < 16; i++)
                wt[k * 16 + i] = i < tail ? w[k * ldw + full * 16 + i] : 0.0f;
        }
        float yt[16], bt[16];
        for (int64_t i = 0; i < 16; i++)
            bt[i] = bias && i < tail ? bias[full * 16 + i] : 0.0f;
        gvn1(x, wt, 16, K, bias ? bt : NULL, yt);
        memcpy(y + full * 16, yt, (size_t)tail * sizeof(float));
    }
    const int64_t c1 = g1 * 16 < N ? g1 * 16 : N;
    if (act && c1 > c0)
        aioge_act_span(y + c0, NULL, y + c0, c1 - c0, act, p0, p1);
    return 0;
}
