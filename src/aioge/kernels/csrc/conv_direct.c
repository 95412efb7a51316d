/* A 2-D convolution (group 1, float32, NCHW) as a GEMM with its own micro-kernel:
 *
 *     y[n, m, p] = bias[m] + sum_k W[m, k] * x_k[n, p]      k = (c, ky, kx), p = (oh, ow)
 *
 * The weight is packed once by the caller (aioge.kernels.conv_algos.pack_rows) into blocks of
 * MR rows, k-major: wpack[mb][k][MR] (rows past M are zero). The micro-kernel holds an
 * MR x (VL * nv) tile in vector registers (tile.h's, per tier: 6 x 64 in 24 zmm, 6 x 16 in 12
 * ymm): per k, nv vector loads of the input, MR broadcasts of the weight and 6 * nv
 * multiply-adds. KC values of k at a time, so
 * the input they read stays in L1 while every MR-row block of the weight runs over it; the
 * products accumulate in a per-thread buffer of the panel's M rows, which gets the bias and
 * goes to y when the panel is done.
 *
 * The caller hands each thread a range of panels (or of MR-row blocks when there is one
 * panel), so two threads never write the same outputs.
 */
#include <stdint.h>
#include <stdlib.h>

#include "aioge.h"
#include "convgeo.h"
#include "mathf.h"
#include "tile.h"
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

int aioge_conv_gemm_mr(void) { return MR; }
int aioge_conv_gemm_nr(void) { return NR; }

/* -- direct: no im2col at all ------------------------------------------------------------------
 *
 * With the input split into its stride phases (xph[n][c][py][px][i][j] = x[n][c][i*SH + py - PT]
 * [j*SW + px - PL], zero outside x), every kernel tap reads one phase plane at a fixed offset
 * with unit stride, and over the flattened positions q = oh * WPH + ow of an output plane
 * WPH wide those reads are contiguous: tap k reads xph + koff[k] + q. So the micro-kernel loads
 * its NR positions straight from xph and nothing is packed. The WPH - OW columns past each
 * output row are computed and dropped (2 of 58 for a 3x3 kernel on 56 columns).
 */

/* geometry: convgeo.h. G_Z: the address of a residual z of y's layout (0: none): y = act(conv + bias + z), the sum
 * rounded as the conv's output and then JOB_RESIDUAL's y + z (FusedConv's Z: ResNet's blocks),
 * so the same bits; read where each output is stored, never where y is not yet written. */
static inline const float *zof(const int64_t *g) { return (const float *)(intptr_t)g[G_Z]; }

/* y[j] = act(y[j] + z[j]) for j < n: JOB_RESIDUAL's sum (act_span's with its bias) over a run
 * of outputs just stored */
static void residual_run(float *y, const float *z, int64_t n, int act, float p0, float p1)
{
    if (act)
        aioge_act_span(y, z, y, n, act, p0, p1);
    else
        for (int64_t j = 0; j < n; j++)
            y[j] = y[j] + z[j];
}

int aioge_conv_fits(const int64_t *g, int64_t xn, int64_t yn, int reads_x)
{
    const int fits_x = reads_x ? aioge_fits(xn, g[G_N], g[G_C], g[G_H], g[G_W]) : aioge_fits(xn, g[G_N], g[G_IMAGE], 1, 1);
    return fits_x && aioge_fits(yn, g[G_N], g[G_M], g[G_OH], g[G_OW]);
}

/* Whether some tap of a kernel of k taps d apart reads phase p of stride s. */
static int phase_read(int64_t p, int64_t k, int64_t d, int64_t s)
{
    for (int64_t t = 0; t < k; t++)
        if (t * d % s == p)
            return 1;
    return 0;
}

/* The columns j of a phase row that read x (source column j * SW + px - PL in [0, W)): [*lo, *hi). */
static void phase_cols(const int64_t *g, int64_t px, int64_t *lo, int64_t *hi)
{
    const int64_t W = g[G_W], SW = g[G_SW], PL = g[G_PL], WPH = g[G_WPH];
    int64_t l = PL - px <= 0 ? 0 : (PL - px + SW - 1) / SW, h = W - 1 + PL - px < 0 ? 0 : (W - 1 + PL - px) / SW + 1;
    h = h > WPH ? WPH : h;
    *lo = l > h ? h : l;
    *hi = h;
}

/* Rows [i0, i1) of the two column phases (px 0 and 1, planes HPH * WPH apart from d) of row phase
 * py of one plane at a column stride of 2, both from one pass over each source row: the two
 * passes of strided loads took ResNet-18's stride-2 3x3 phase images ~1.7x as long as stride-1
 * ones of as many floats. */
static void pair_rows(const float *restrict plane, float *restrict d, const int64_t *g, int64_t py, int64_t i0, int64_t i1)
{
    const int64_t H = g[G_H], W = g[G_W], PT = g[G_PT], PL = g[G_PL], WPH = g[G_WPH], SH = g[G_SH], HW = g[G_HPH] * WPH;
    int64_t lo0, hi0, lo1, hi1;
    phase_cols(g, 0, &lo0, &hi0);
    phase_cols(g, 1, &lo1, &hi1);
    const int64_t jl = lo0 > lo1 ? lo0 : lo1, jh = (hi0 < hi1 ? hi0 : hi1) > jl ? (hi0 < hi1 ? hi0 : hi1) : jl;
    for (int64_t i = i0; i < i1; i++) {
        float *restrict r0 = d + i * WPH, *restrict r1 = r0 + HW;
        const int64_t ih = i * SH + py - PT;
        if (ih < 0 || ih >= H) {
            for (int64_t j = 0; j < WPH; j++)
                r0[j] = r1[j] = 0.0f;
            continue;
        }
        const float *restrict src = plane + ih * W; /* column j of phase px reads src[2 * j + px - PL] */
        for (int64_t j = jl > 0 ? 0 : jh; j < WPH; j = j + 1 == jl ? jh : j + 1) { /* the border columns */
            r0[j] = j >= lo0 && j < hi0 ? src[2 * j - PL] : 0.0f;
            r1[j] = j >= lo1 && j < hi1 ? src[2 * j + 1 - PL] : 0.0f;
        }
        const float *restrict s2 = src + 2 * jl - PL; /* the columns both phases read */
        float *restrict e0 = r0 + jl, *restrict e1 = r1 + jl;
        int64_t j = 0;
#ifdef __AVX2__ /* 16 source columns into 8 of each phase: even and odd lanes, then the 64-bit quarters in order */
        for (; j + 8 <= jh - jl; j += 8) {
            const __m256 a = _mm256_loadu_ps(s2 + 2 * j), b = _mm256_loadu_ps(s2 + 2 * j + 8);
            _mm256_storeu_ps(e0 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8)));
            _mm256_storeu_ps(e1 + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8)));
        }
#endif
        for (; j < jh - jl; j++) {
            e0[j] = s2[2 * j];
            e1[j] = s2[2 * j + 1];
        }
    }
}

/* Rows [i0, i1) of every phase plane of channels [c0, c1) of one image that a tap reads: x one
 * image of C planes, xph its IMAGE floats. The planes no tap reads are left as they are: a 1x1 conv at stride 2 reads
 * one of four (ResNet's 64x56x56 -> 128 downsample copied 4x what it read). */
static void phases_rows(const float *restrict x, float *restrict img, const int64_t *g, int64_t i0, int64_t i1, int64_t c0,
                        int64_t c1)
{
    const int64_t H = g[G_H], W = g[G_W], SH = g[G_SH], SW = g[G_SW];
    const int64_t PT = g[G_PT], PL = g[G_PL], HPH = g[G_HPH], WPH = g[G_WPH];
    /* both column phases of a stride of 2 read: each source row split into the two in one pass */
    const int pair = SW == 2 && phase_read(0, g[G_KW], g[G_DW], 2) && phase_read(1, g[G_KW], g[G_DW], 2);
    for (int64_t c = c0; c < c1; c++) {
        const float *plane = x + c * H * W;
        for (int64_t py = 0; py < SH; py++)
            for (int64_t px = 0; px < SW; px++) {
                if (!phase_read(py, g[G_KH], g[G_DH], SH) || !phase_read(px, g[G_KW], g[G_DW], SW))
                    continue;
                if (pair) {
                    pair_rows(plane, img + ((c * SH + py) * 2) * HPH * WPH, g, py, i0, i1);
                    break;
                }
                float *dst = img + ((c * SH + py) * SW + px) * HPH * WPH;
                int64_t lo, hi;
                phase_cols(g, px, &lo, &hi);
                for (int64_t i = i0; i < i1; i++) {
                    float *restrict row = dst + i * WPH;
                    const int64_t ih = i * SH + py - PT;
                    if (ih < 0 || ih >= H) {
                        for (int64_t j = 0; j < WPH; j++)
                            row[j] = 0.0f;
                        continue;
                    }
                    const float *restrict src = plane + ih * W + px - PL;
                    for (int64_t j = 0; j < lo; j++)
                        row[j] = 0.0f;
                    if (SW == 1)
                        for (int64_t j = lo; j < hi; j++)
                            row[j] = src[j];
                    else if (SW == 2) /* a constant stride vectorises (loads and permutes): a 3x224x224 stem 49 -> 26 us */
                        for (int64_t j = lo; j < hi; j++)
                            row[j] = src[2 * j];
                    else
                        for (int64_t j = lo; j < hi; j++)
                            row[j] = src[j * SW];
                    for (int64_t j = hi; j < WPH; j++)
                        row[j] = 0.0f;
                }
            }
    }
}

/* One image's stride phases: x one image of C planes, xph its IMAGE floats (zero past what the
 * phases use). */
static void phases_image(const float *restrict x, float *restrict img, const int64_t *g)
{
    const int64_t used = g[G_C] * g[G_SH] * g[G_SW] * g[G_HPH] * g[G_WPH];
    for (int64_t t = used; t < g[G_IMAGE]; t++)
        img[t] = 0.0f;
    phases_rows(x, img, g, 0, g[G_HPH], 0, g[G_C]);
}

void aioge_conv_phases_f32(const float *restrict x, float *restrict xph, const int64_t *g)
{
    for (int64_t n = 0; n < g[G_N]; n++)
        phases_image(x + n * g[G_C] * g[G_H] * g[G_W], xph + n * g[G_IMAGE], g);
}

/* The same for the channel planes u = n * C + c in [u0, u1), the image's zero tail with its last
 * channel: JOB_PHASES shared with the C helper (ResNet-18's 18 phase images took 0.9 ms on one
 * core while the other waited for the conv after). */
void aioge_conv_phases_planes_f32(const float *restrict x, float *restrict xph, const int64_t *g, int64_t u0, int64_t u1)
{
    const int64_t C = g[G_C], used = C * g[G_SH] * g[G_SW] * g[G_HPH] * g[G_WPH];
    for (int64_t u = u0; u < u1; u++) {
        const int64_t n = u / C, c = u % C;
        float *img = xph + n * g[G_IMAGE];
        phases_rows(x + n * C * g[G_H] * g[G_W], img, g, 0, g[G_HPH], c, c + 1);
        for (int64_t t = used; c == C - 1 && t < g[G_IMAGE]; t++)
            img[t] = 0.0f;
    }
}

#ifdef MR8
#define TILE_ROWS MR8
#else
#define TILE_ROWS MR
#endif

/* The first ``tail`` (0 < tail < VL) floats at p, zeros in the other lanes, nothing past them read:
 * a ragged last panel's last vector (a 1x1 conv reads x in place whatever its plane's size, and
 * the last channel's plane ends the buffer: SqueezeNet's 128->16 squeeze at 55x55, 3025 positions,
 * had x copied into phase rows with slack for it, 287 us against 177 at 56x56). */
static inline __attribute__((always_inline)) vf load_tail(const float *p, int64_t tail)
{
#if VL == 16 && defined(__AVX512F__)
    return (vf)_mm512_maskz_loadu_ps((__mmask16)((1u << tail) - 1), p);
#elif VL == 8 && defined(__AVX2__)
    const __m256i lanes = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    return (vf)_mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)tail), lanes));
#else
    vf v = {0};
    for (int64_t j = 0; j < tail; j++)
        v[j] = p[j];
    return v;
#endif
}

/* nv vectors of positions at b, with ``masked`` (a constant) the last one's first ``tail`` lanes only */
#define LOAD_PANEL(bv, b, nv, masked, tail)                                                                              \
    for (int v = 0; v < (nv); v++)                                                                                      \
        (bv)[v] = (masked) && v == (nv) - 1 ? load_tail((b) + VL * v, (tail)) : *(const vfu *)((b) + VL * v);

/* A tile of mr weight rows (MR, or MR8 for row panels over M a multiple of 8: no rows of zeros
 * computed, as MR = 6 computes 36 for 32 channels) by nv vectors of positions, over kc taps;
 * with ``masked`` the last vector holds ``tail`` positions (load_tail). */
static inline __attribute__((always_inline)) void
dtile_m(const int mr, int nv, int64_t kc, const float *restrict a, const float *restrict xq, const int64_t *restrict koff,
        float *restrict c, int first, const int masked, int64_t tail)
{
    vf acc[TILE_ROWS][NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = first ? (vf){0} : *(const vf *)(c + i * NR + VL * v);
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        const float *b = xq + koff[k];
        vf bv[NV];
        LOAD_PANEL(bv, b, nv, masked, tail)
        for (int i = 0; i < mr; i++) {
            float s = a[k * mr + i];
            for (int v = 0; v < nv; v++)
                acc[i][v] += s * bv[v];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            *(vf *)(c + i * NR + VL * v) = acc[i][v];
}

typedef int32_t vfi_hard __attribute__((vector_size(VL * 4)));
static inline __attribute__((always_inline)) vf pick(vfi_hard mask, vf a, vf b) /* a where mask, else b */
{
    return (vf)((mask & (vfi_hard)a) | (~mask & (vfi_hard)b));
}

/* norm.c's act_span for HardSigmoid (max(0, min(1, alpha x + beta)), NaN kept), HardSwish (x
 * times that for 1/6, 1/2) and Clip (max with lo, then min with hi, NaN kept: clip_f32), the
 * same operations in the same order on a vector: the same bits as the pass after the conv. */
static inline __attribute__((always_inline)) vf hard_vf(vf v, int act, float p0, float p1)
{
    const vf zero = {0}, one = zero + 1.0f;
    if (act == ACT_CLIP) {
        const vf lo = zero + p0, hi = zero + p1;
        v = pick((v > lo) | (v != v), v, lo);
        return pick((v < hi) | (v != v), v, hi);
    }
    const float alpha = act == ACT_HARDSWISH ? 1.0f / 6.0f : p0, beta = act == ACT_HARDSWISH ? 0.5f : p1;
    vf h = alpha * v;
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+x"(h)); /* two roundings, as act_span's loop: no multiply-add contracted */
#endif
    h = h + beta;
    h = pick(h < zero, zero, h);
    h = pick(h > one, one, h);
    return act == ACT_HARDSWISH ? v * h : h;
}

#if VL == 16 && defined(__AVX512F__)
#define SIG_REGS 1 /* Sigmoid and Swish in the tiles' registers (mathf.h's sigmoid16: EfficientNet's
                    * expansion convs called act_span, 8 lanes, on every tile) */
#elif VL == 8 && defined(__AVX2__) && defined(__FMA__)
#define sigmoid_vf(v, alpha, swish) (vf) sigmoid8((__m256)(v), (alpha), (swish))
#define SIG_REGS 1
#endif
#if VL == 16 && defined(__AVX512F__)
#define sigmoid_vf(v, alpha, swish) (vf) sigmoid16((__m512)(v), (alpha), (swish))
typedef __m512 vsig;
#define sig_alpha(p) _mm512_set1_ps(p)
#elif defined(SIG_REGS)
typedef __m256 vsig;
#define sig_alpha(p) _mm256_set1_ps(p)
#endif

/* A whole tile over all of K, straight from the registers to the first ``rows`` of its MR rows
 * of y (ldy apart), ``ncols`` columns each (the last vector's tail masked off), with each row's
 * bias added as the copy-out adds it and the activation applied after: for a conv whose tile
 * columns are consecutive outputs of a row of y (a 1x1 conv at stride 1 read in place, or a
 * row panel) and K in one block. A small-K conv (EfficientNet's 16->96 1x1 at 112x112, K = 16)
 * spent as long on the round trip through the accumulator buffer as on its multiply-adds. */
static inline __attribute__((always_inline)) void
dtile_out(const int mr, int nv, int64_t kc, const float *restrict a, const float *restrict xq, const int64_t *restrict koff,
          float *restrict y, const float *restrict z, int64_t ldy, int64_t rows, int64_t ncols, const float *restrict bias, int act,
          float p0, float p1, const int masked)
{
    const int64_t tail = ncols % VL; /* with masked: the last vector's positions */
    vf acc[TILE_ROWS][NV];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[i][v] = (vf){0};
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        const float *b = xq + koff[k];
        vf bv[NV];
        LOAD_PANEL(bv, b, nv, masked, tail)
        for (int i = 0; i < mr; i++) {
            float s = a[k * mr + i];
            for (int v = 0; v < nv; v++)
                acc[i][v] += s * bv[v];
        }
    }
#ifdef __AVX512F__
    const int relu = act == ACT_RELU; /* in the registers (act_span's rule: NaN and x > 0 kept), not a pass per row */
#else
    const int relu = act == ACT_RELU; /* the same rule in the tier's vectors: keep where !(x <= 0) */
    typedef int32_t vfi __attribute__((vector_size(VL * 4)));
#endif
    /* Any other activation: over the whole tile in one call (EfficientNet's 16->96 1x1 swish
     * conv at 112x112 took 3.96 ms calling it per row of 16 values, 2.1 through numpy's GEMM and a
     * pass), the same elementwise function as the pass after the conv, so the same bits. */
#ifdef SIG_REGS /* Sigmoid and Swish in the registers, as act_span computes them */
    const int sig = act == ACT_SIGMOID || act == ACT_SWISH;
    const vsig alpha = sig_alpha(p0);
#else
    const int sig = 0;
#endif
    /* HardSwish, HardSigmoid and Clip in the registers too (hard_vf: act_span's expressions) */
    const int hard = act == ACT_HARDSWISH || act == ACT_HARDSIGMOID || act == ACT_CLIP;
    const int other = act && !relu && !sig && !hard;
    float t[TILE_ROWS * NV * VL] __attribute__((aligned(VL * 4)));
    /* z's vector at row i, vector v (its tail alone past a ragged end): added to conv + bias */
#define ZVEC(i, v) (VL * (v) + VL <= ncols ? *(const vfu *)(z + (i) * ldy + VL * (v)) : load_tail(z + (i) * ldy + VL * (v), ncols - VL * (v)))
    if (other) {
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) {
                vf s = acc[i][v] + (bias && i < rows ? bias[i] : 0.0f);
                if (z && i < rows)
                    s += ZVEC(i, v);
                *(vf *)(t + (i * nv + v) * VL) = s;
            }
        aioge_act_span(t, NULL, t, mr * nv * VL, act, p0, p1);
    }
    /* unrolled over the constant mr (rows <= mr stops it early), so acc never leaves the registers */
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        if (i >= rows)
            break;
        const float add = bias ? bias[i] : 0.0f;
        float *yr = y + i * ldy;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            vf out = other ? *(const vf *)(t + (i * nv + v) * VL) : acc[i][v] + add;
            if (z && !other)
                out += ZVEC(i, v);
#ifdef SIG_REGS
            if (sig)
                out = sigmoid_vf(out, alpha, act == ACT_SWISH);
#endif
            if (hard)
                out = hard_vf(out, act, p0, p1);
#ifdef __AVX512F__
            if (relu)
                out = (vf)_mm512_maskz_mov_ps(_mm512_cmp_ps_mask((__m512)out, _mm512_setzero_ps(), _CMP_NLE_UQ), (__m512)out);
#else
            if (relu)
                out = (vf)((vfi)out & ~(out <= (vf){0}));
#endif
            if (VL * v + VL <= ncols) {
                *(vfu *)(yr + VL * v) = out;
            } else { /* a masked store: memcpy of the tail cost a quarter of SqueezeNet's stem */
#ifdef __AVX512F__
                _mm512_mask_storeu_ps(yr + VL * v, (__mmask16)((1u << (ncols - VL * v)) - 1), (__m512)out);
#elif defined(__AVX2__) /* lanes below the count: a 7-column row's tile stored in one instruction, not 7 */
                const __m256i lanes = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
                _mm256_maskstore_ps(yr + VL * v, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(ncols - VL * v)), lanes), (__m256)out);
#else
                for (int64_t j = VL * v; j < ncols; j++)
                    yr[j] = out[j - VL * v];
#endif
            }
        }
    }
#undef ZVEC
}

/* A tile out per activation (dtile_out with ``act`` a constant): EfficientNet's 16->96 1x1 Swish
 * conv at 112x112, 1397 -> 1196 us of thread CPU, and 598 -> 501 without its Swish; 24->144 at
 * 56x56 with Swish 599 -> 514 (medians of 100, load 4.5). */
typedef void (*dout_fn)(int64_t, const float *, const float *, const int64_t *, float *, const float *, int64_t, int64_t,
                        int64_t, const float *, int, float, float);
#define DOUT(M, NV)                                                                                                      \
    static void dout##M##_##NV(int64_t kc, const float *a, const float *xq, const int64_t *o, float *y, const float *z,   \
                               int64_t ldy, int64_t r, int64_t nc, const float *b, int act, float p0, float p1)           \
    {                                                                                                                    \
        if (z) { /* a residual: ResNet's blocks end in Relu or nothing */                                               \
            if (act == ACT_RELU)                                                                                         \
                dtile_out(M, NV, kc, a, xq, o, y, z, ldy, r, nc, b, ACT_RELU, p0, p1, 0);                                \
            else                                                                                                         \
                dtile_out(M, NV, kc, a, xq, o, y, z, ldy, r, nc, b, act, p0, p1, 0);                                     \
            return;                                                                                                      \
        }                                                                                                                \
        switch (act) { /* the common activations as constants: no per-vector tests, no spilled accumulators */        \
        case ACT_NONE: dtile_out(M, NV, kc, a, xq, o, y, 0, ldy, r, nc, b, ACT_NONE, p0, p1, 0); break;                   \
        case ACT_RELU: dtile_out(M, NV, kc, a, xq, o, y, 0, ldy, r, nc, b, ACT_RELU, p0, p1, 0); break;                   \
        case ACT_SWISH: dtile_out(M, NV, kc, a, xq, o, y, 0, ldy, r, nc, b, ACT_SWISH, p0, p1, 0); break;                 \
        case ACT_HARDSWISH: dtile_out(M, NV, kc, a, xq, o, y, 0, ldy, r, nc, b, ACT_HARDSWISH, p0, p1, 0); break;         \
        default: dtile_out(M, NV, kc, a, xq, o, y, 0, ldy, r, nc, b, act, p0, p1, 0);                                     \
        }                                                                                                                \
    }                                                                                                                    \
    __attribute__((unused)) static void doutm##M##_##NV(int64_t kc, const float *a, const float *xq, const int64_t *o,   \
                                                        float *y, const float *z, int64_t ldy, int64_t r, int64_t nc,     \
                                                        const float *b, int act, float p0, float p1)                      \
    { /* a ragged last panel: its last vector's loads masked (one panel an image, the activation not a constant) */     \
        dtile_out(M, NV, kc, a, xq, o, y, z, ldy, r, nc, b, act, p0, p1, 1);                                             \
    }
DOUT(6, 1)
DOUT(6, 2)
#if NV == 4
DOUT(6, 3)
DOUT(6, 4)
DOUT(8, 1)
DOUT(8, 2)
DOUT(8, 3)
static const dout_fn DOUTS[NV + 1] = {0, dout6_1, dout6_2, dout6_3, dout6_4};
static const dout_fn DOUTMS[NV + 1] = {0, doutm6_1, doutm6_2, doutm6_3, doutm6_4};
static const dout_fn DOUTS8[4] = {0, dout8_1, dout8_2, dout8_3}; /* 8 x 3 vectors: 24 accumulators, as 6 x 4 */
#else
static const dout_fn DOUTS[NV + 1] = {0, dout6_1, dout6_2};
static const dout_fn DOUTMS[NV + 1] = {0, doutm6_1, doutm6_2};
#endif

typedef void (*dtile_fn)(int64_t, const float *, const float *, const int64_t *, float *, int, int64_t);
#define DTILE(M, NV)                                                                                                       \
    static void dtile##M##_##NV(int64_t kc, const float *a, const float *b, const int64_t *o, float *c, int f, int64_t t) \
    {                                                                                                                      \
        (void)t;                                                                                                           \
        dtile_m(M, NV, kc, a, b, o, c, f, 0, 0);                                                                           \
    }                                                                                                                      \
    __attribute__((unused)) static void dtilem##M##_##NV(int64_t kc, const float *a, const float *b, const int64_t *o,   \
                                                         float *c, int f, int64_t t)                                   \
    { /* the last vector's first t lanes loaded (load_tail) */                                                           \
        dtile_m(M, NV, kc, a, b, o, c, f, 1, t);                                                                           \
    }
DTILE(6, 1)
DTILE(6, 2)
#if NV == 4
DTILE(6, 3)
DTILE(6, 4)
DTILE(8, 1)
DTILE(8, 2)
DTILE(8, 3)
static const dtile_fn DTILES[NV + 1] = {0, dtile6_1, dtile6_2, dtile6_3, dtile6_4};
static const dtile_fn DTILEMS[NV + 1] = {0, dtilem6_1, dtilem6_2, dtilem6_3, dtilem6_4};
static const dtile_fn DTILES8[4] = {0, dtile8_1, dtile8_2, dtile8_3};
#else
static const dtile_fn DTILES[NV + 1] = {0, dtile6_1, dtile6_2};
static const dtile_fn DTILEMS[NV + 1] = {0, dtilem6_1, dtilem6_2};
#endif

/* Panels per image: of NR flattened positions, or with G_ROWS of up to NR outputs of one row. */
#ifdef MR8
static int64_t row_panel(const int64_t *g) { return g[G_MR] == MR8 ? NR8 : NR; }
static int64_t block_rows(const int64_t *g) { return g[G_ROWS] && g[G_MR] == MR8 ? MR8 : MR; }
#else /* no 8-row tile on this tier: conv_algos asks for none (G_MR 0) */
static int64_t row_panel(const int64_t *g) { return (void)g, NR; }
static int64_t block_rows(const int64_t *g) { return (void)g, MR; }
#endif

static int64_t panels_per_image(const int64_t *g)
{
    if (g[G_ROWS])
        return g[G_OH] * ((g[G_OW] + row_panel(g) - 1) / row_panel(g));
    return ((g[G_OH] - 1) * g[G_WPH] + g[G_OW] + NR - 1) / NR;
}

#define PW_KMAX 1024 /* a 1x1 conv's K up to this in one block, every tile straight to y */

/* Panels [p0, p1) of NR flattened positions (image-major), or with the geometry's G_ROWS of up
 * to NR outputs of one output row (image-, then row-major: no junk columns, and with K in one
 * block every tile goes straight to y), and MR-row blocks [mb0, mb1) of y, reading xph (aioge_conv_phases_f32, or x itself for a 1x1 kernel at stride 1 without pads)
 * at the offsets koff[k] of the K taps. Returns AIOGE_ENOMEM when the work buffer cannot be
 * had, AIOGE_EGEOMETRY for a geometry without taps (K = 0: the caller computes the bias), and
 * does nothing for an empty output. */
int aioge_conv_direct_f32(const float *xph, const float *wpack, const int64_t *koff, const float *bias, float *y,
                          const int64_t *g, int64_t p0, int64_t p1, int64_t mb0, int64_t mb1)
{
    if (p0 >= p1 || mb0 >= mb1 || g[G_OH] <= 0 || g[G_OW] <= 0 || g[G_M] <= 0 || g[G_N] <= 0)
        return AIOGE_OK;
    if (g[G_C] <= 0 || g[G_KH] <= 0 || g[G_KW] <= 0 || g[G_WPH] <= 0 || p0 < 0 || mb0 < 0)
        return AIOGE_EGEOMETRY;
    const int64_t C = g[G_C], M = g[G_M], OH = g[G_OH], OW = g[G_OW], WPH = g[G_WPH], IMAGE = g[G_IMAGE];
    const int64_t K = C * g[G_KH] * g[G_KW], P = OH * OW, Q = (OH - 1) * WPH + OW;
    const int act = (int)g[G_ACT];
    const float act_p0 = aioge_float_of(g[G_ACT_P0]), act_p1 = aioge_float_of(g[G_ACT_P1]);
    const float *z = zof(g); /* a residual: y's offsets (the tile paths add it before act, the others after storing) */
    const int64_t per_image = panels_per_image(g);
    const int64_t rows = (mb1 - mb0) * block_rows(g);
    const int64_t kblocks = (K + KC - 1) / KC, kstep = (K + kblocks - 1) / kblocks;
    float *acc = accumulator((size_t)(rows > 0 ? rows : 1) * NR);
    if (!acc)
        return AIOGE_ENOMEM;
    if (g[G_ROWS]) { /* row panels: up to nr outputs of one output row, never a junk column */
        const int64_t mr = block_rows(g), nr = row_panel(g), per_row = (OW + nr - 1) / nr;
#ifdef MR8
        const dout_fn *outs = mr == MR8 ? DOUTS8 : DOUTS;
        const dtile_fn *tiles = mr == MR8 ? DTILES8 : DTILES;
#else
        const dout_fn *outs = DOUTS;
        const dtile_fn *tiles = DTILES;
#endif
        /* K in one block and this range's input in half of L2 (SqueezeNet's 3->64 3x3 s2 stem: 0.3 MB
         * a thread): a block of mr rows of y over the whole range before the next block, so y is
         * written as mr long runs at a time, not a row's piece of each of M planes (64 store streams,
         * past what the L2 prefetcher follows: 437 us warm, 1211 with every cache evicted first) */
        if (kblocks == 1 && IMAGE * 4 * (p1 - p0) / per_image <= 1 << 20) {
            for (int64_t mb = mb0; mb < mb1 && mb * mr < M; mb++)
                for (int64_t q = p0; q < p1; q++) {
                    const int64_t n = q / per_image, oh = q % per_image / per_row, c0 = q % per_row * nr;
                    const int64_t nc = OW - c0 < nr ? OW - c0 : nr, off = n * M * P + oh * OW + c0 + mb * mr * P;
                    outs[(nc + VL - 1) / VL](K, wpack + mb * K * mr, xph + n * IMAGE + oh * WPH + c0, koff, y + off,
                                             z ? z + off : 0, P, M - mb * mr < mr ? M - mb * mr : mr, nc,
                                             bias ? bias + mb * mr : 0, act, act_p0, act_p1);
                }
            return 0;
        }
        for (int64_t q = p0; q < p1; q++) {
            const int64_t n = q / per_image, oh = q % per_image / per_row, c0 = q % per_row * nr;
            const int64_t ncols = OW - c0 < nr ? OW - c0 : nr, nv = (ncols + VL - 1) / VL;
            const float *xq = xph + n * IMAGE + oh * WPH + c0;
            float *yq = y + n * M * P + oh * OW + c0;
            const float *zq = z ? z + n * M * P + oh * OW + c0 : 0;
            if (kblocks == 1) { /* this output row's panels in [q, p1) a block at a time: each of its rows of y
                                 * written in one run, not a panel's piece of each of M rows (SqueezeNet's 3->64
                                 * 3x3 s2 stem, 3.1 MB out: 388 -> 343 us with 8-row blocks, 369 -> 349 with 6) */
                const int64_t q1 = (q / per_row + 1) * per_row < p1 ? (q / per_row + 1) * per_row : p1;
                for (int64_t mb = mb0; mb < mb1 && mb * mr < M; mb++)
                    for (int64_t u = q; u < q1; u++) {
                        const int64_t cu = u % per_row * nr, nc = OW - cu < nr ? OW - cu : nr;
                        outs[(nc + VL - 1) / VL](K, wpack + mb * K * mr, xq + (cu - c0), koff, yq + (cu - c0) + mb * mr * P,
                                                 zq ? zq + (cu - c0) + mb * mr * P : 0, P, M - mb * mr < mr ? M - mb * mr : mr,
                                                 nc, bias ? bias + mb * mr : 0, act, act_p0, act_p1);
                    }
                q = q1 - 1;
                continue;
            }
            for (int64_t mb = mb0; mb < mb1 && mb * mr < M; mb++) {
                const int64_t rows = M - mb * mr < mr ? M - mb * mr : mr;
                const float *b = bias ? bias + mb * mr : 0;
                for (int64_t k0 = 0; k0 < K; k0 += kstep)
                    tiles[nv](K - k0 < kstep ? K - k0 : kstep, wpack + mb * K * mr + k0 * mr, xq, koff + k0, acc, k0 == 0, 0);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = 0; j < ncols; j++)
                        acc[r * NR + j] += b ? b[r] : 0.0f;
                if (act && !z) /* one call over the tile's rows */
                    aioge_act_span(acc, NULL, acc, rows * NR, act, act_p0, act_p1);
                for (int64_t r = 0; r < rows; r++) {
                    for (int64_t j = 0; j < ncols; j++)
                        yq[(mb * mr + r) * P + j] = acc[r * NR + j];
                    if (z)
                        residual_run(yq + (mb * mr + r) * P, zq + (mb * mr + r) * P, ncols, act, act_p0, act_p1);
                }
            }
        }
        return 0;
    }
    /* a full panel is NR consecutive outputs of a row of y, K in one block: with 16-position
     * panels (AVX2) up to K = 256, 16 KB of input a panel in L1 (1x1 convs at 28x28: 192->64
     * 269 -> 210 us, 240->40 206 -> 198; 256->256 at 14x14 341 -> 325); a 1x1 conv up to
     * PW_KMAX, the panel in L2 (AVX-512, 64 positions: 480->80 at 14x14 273 -> 222 us, 672->112
     * 482 -> 433, 192->64 at 28x28 322 -> 261; AVX2: 320->128 at 28x28 1168 -> 895, 480->80
     * 359 -> 279; medians of 80-100 interleaved, load 4-6) */
    const int in_rows = (kblocks == 1 || (NR == 16 && K <= 256) || (g[G_KH] * g[G_KW] == 1 && K <= PW_KMAX)) && WPH == OW;
    /* The straight blocks of a group of panels whose inputs fit in half of L1, block by block:
     * each of a block's MR rows of y is written as a run of the group's panels, not one line of
     * each of M rows a panel (EfficientNet's 16->96 1x1 at 112x112 wrote 96 rows, 50 KB apart,
     * a line at a time: 1646 -> 1443 us of thread CPU, interleaved, load 7; the 24..112-channel
     * ones level). */
    const int64_t fit = 4096 / (NR * K), group = !in_rows ? 1 : fit < 1 ? 1 : fit > 16 ? 16 : fit;
    int64_t done = p0; /* the panels below have had their straight blocks */
    for (int64_t q = p0; q < p1; q++) {
        const int64_t n = q / per_image, start = (q % per_image) * NR;
        const int64_t ncols = Q - start < NR ? Q - start : NR;
        const int64_t tail = ncols % VL; /* a ragged panel: its last vector's loads masked, nothing past the image read */
        const dtile_fn fn = (tail ? DTILEMS : DTILES)[(ncols + VL - 1) / VL];
        const float *xq = xph + n * IMAGE + start;
        float *yn = y + n * M * P;
        const float *zn = z ? z + n * M * P : 0;
        /* blocks below ``straight`` go from the registers to y (dtile_out), the last one's rows
         * past M not stored (32->16 1x1 at 112x112: 280 -> 250 us), and so does an image's short
         * last panel, its tail masked (on AVX-512 the acc path ran act_span over all NR lanes of
         * each row, the uncomputed ones whatever the buffer held, subnormals among them:
         * EfficientNet's 112->672 Swish at 14x14 0.85-1.0 ms, 0.33 without); the rest through acc */
        const int64_t straight = in_rows ? ((M + MR - 1) / MR < mb1 ? (M + MR - 1) / MR : mb1) : mb0;
        if (straight > mb0 && q >= done) { /* the straight blocks of the panels [q, q1) of this image */
            int64_t q1 = q + 1;
            while (ncols == NR && q1 < p1 && q1 < q + group && q1 / per_image == n && Q - (q1 % per_image) * NR >= NR)
                q1++;
            const dout_fn out = (tail ? DOUTMS : DOUTS)[(ncols + VL - 1) / VL];
            for (int64_t mb = mb0; mb < straight; mb++)
                for (int64_t u = 0; u < q1 - q; u++)
                    out(K, wpack + mb * K * MR, xq + u * NR, koff, yn + mb * MR * P + start + u * NR,
                        zn ? zn + mb * MR * P + start + u * NR : 0, P, M - mb * MR < MR ? M - mb * MR : MR, ncols,
                        bias ? bias + mb * MR : 0, act, act_p0, act_p1);
            done = q1;
        }
        const int64_t first = straight > mb0 ? straight : mb0;
        for (int64_t k0 = 0; k0 < K; k0 += kstep) {
            const int64_t kc = K - k0 < kstep ? K - k0 : kstep;
            for (int64_t mb = first; mb < mb1; mb++)
                fn(kc, wpack + mb * K * MR + k0 * MR, xq, koff + k0, acc + (mb - mb0) * MR * NR, k0 == 0, tail);
        }
        const int64_t r_lo = (first - mb0) * MR, r_hi = rows < M - mb0 * MR ? rows : M - mb0 * MR;
        for (int64_t r = r_lo; r < r_hi; r++) {
            const float add = bias ? bias[mb0 * MR + r] : 0.0f;
            float *src = acc + r * NR;
            for (int64_t j = 0; j < ncols; j++)
                src[j] += add;
        }
        if (act && !z && r_hi > r_lo && ncols == NR) /* one call over the rows */
            aioge_act_span(acc + r_lo * NR, NULL, acc + r_lo * NR, (r_hi - r_lo) * NR, act, act_p0, act_p1);
        for (int64_t r = r_lo; act && !z && ncols < NR && r < r_hi; r++) /* only the computed lanes: the others hold junk */
            aioge_act_span(acc + r * NR, NULL, acc + r * NR, ncols, act, act_p0, act_p1);
        for (int64_t r = r_lo; r < r_hi; r++) {
            const int64_t m = mb0 * MR + r;
            const float *src = acc + r * NR;
            float *dst = yn + m * P;
            /* flattened positions start + j: row oh = (start + j) / WPH, kept when its column < OW */
            for (int64_t j = 0; j < ncols;) {
                const int64_t qq = start + j, oh = qq / WPH, ow = qq % WPH;
                const int64_t run = WPH - ow < ncols - j ? WPH - ow : ncols - j;
                const int64_t keep = ow < OW ? (OW - ow < run ? OW - ow : run) : 0;
                float *restrict d = dst + oh * OW + ow;
                const float *restrict s = src + j;
                for (int64_t t = 0; t < keep; t++)
                    d[t] = s[t];
                if (z && keep > 0)
                    residual_run(d, zn + m * P + oh * OW + ow, keep, act, act_p0, act_p1);
                j += run;
            }
        }
    }
    return 0;
}

/* Images [n0, n1) of x whole: each one's stride phases built in this thread's own buffer right
 * before its panels read them. Building the whole batch's phases up front in the caller cost
 * the builder CNN's 16->32 3x3 conv at batch 8 49 of its 170 us, three times as long as the
 * same copy alone: the helper had read the buffer last, so every line of it moved between the
 * cores; here a buffer never leaves its thread and the copy splits with the work. */
int aioge_conv_direct_images_f32(const float *x, const float *wpack, const int64_t *koff, const float *bias, float *y,
                                 const int64_t *g, int64_t n0, int64_t n1)
{
    const int64_t image = g[G_C] * g[G_H] * g[G_W], P = g[G_OH] * g[G_OW];
    const int64_t per_img = panels_per_image(g);
    if (n0 >= n1 || g[G_OH] <= 0 || g[G_OW] <= 0 || g[G_M] <= 0)
        return AIOGE_OK;
    if (zof(g)) /* each image's call offsets y alone: no residual here */
        return AIOGE_EGEOMETRY;
    float *img = aioge_thread_scratch(2, (size_t)g[G_IMAGE]);
    if (!img)
        return AIOGE_ENOMEM;
    for (int64_t n = n0; n < n1; n++) {
        phases_image(x + n * image, img, g);
        /* the panels of image 0 of a one-image xph, written to image n of y */
        const int err = aioge_conv_direct_f32(img, wpack, koff, bias, y + n * g[G_M] * P, g, 0, per_img, 0,
                                              (g[G_M] + block_rows(g) - 1) / block_rows(g));
        if (err)
            return err;
    }
    return 0;
}

/* Panels [p0, p1) (image-major, as aioge_conv_direct_f32 numbers them) and MR-row blocks
 * [mb0, mb1) of y, x read through this thread's own phase rows: for each image's share, only
 * the phase rows its panels' outputs read are built, here, right before they are read (two
 * threads that split the blocks both build all of them). Building the whole phase image in the caller
 * before a split made the helper pull every line of it from the caller's core: the builder
 * CNN's 16->32 3x3 conv at batch 1 took 63-69 us split against 28 whole (25.5 split on phases
 * already in both caches). Rows outside the share hold whatever the buffer held: only junk
 * columns and masked lanes read them. Returns 1 when a buffer cannot be had. */
int aioge_conv_direct_local_f32(const float *x, const float *wpack, const int64_t *koff, const float *bias, float *y,
                                const int64_t *g, int64_t p0, int64_t p1, int64_t mb0, int64_t mb1)
{
    const int64_t image = g[G_C] * g[G_H] * g[G_W], P = g[G_OH] * g[G_OW], per_img = panels_per_image(g);
    const int64_t OH = g[G_OH], OW = g[G_OW], WPH = g[G_WPH], HPH = g[G_HPH];
    if (p0 >= p1 || mb0 >= mb1 || OH <= 0 || OW <= 0 || g[G_M] <= 0)
        return AIOGE_OK;
    if (g[G_SH] <= 0 || zof(g)) /* each image's call offsets y alone: no residual here */
        return AIOGE_EGEOMETRY;
    const int64_t reach = (g[G_KH] - 1) * g[G_DH] / g[G_SH]; /* phase rows below an output row that its taps read */
    float *img = aioge_thread_scratch(2, (size_t)g[G_IMAGE]);
    if (!img)
        return AIOGE_ENOMEM;
    const int64_t used = g[G_C] * g[G_SH] * g[G_SW] * HPH * WPH;
    for (int64_t t = used; t < g[G_IMAGE]; t++)
        img[t] = 0.0f;
    for (int64_t q = p0; q < p1;) {
        const int64_t n = q / per_img, q0 = q % per_img, q1 = (p1 - n * per_img < per_img ? p1 - n * per_img : per_img);
        int64_t r0, r1; /* the output rows of panels [q0, q1) of this image */
        if (g[G_ROWS]) {
            const int64_t per_row = (OW + row_panel(g) - 1) / row_panel(g);
            r0 = q0 / per_row;
            r1 = (q1 - 1) / per_row + 1;
        } else {
            r0 = q0 * NR / WPH;
            r1 = ((q1 * NR < (OH - 1) * WPH + OW ? q1 * NR : (OH - 1) * WPH + OW) - 1) / WPH + 1;
        }
        phases_rows(x + n * image, img, g, r0, r1 + reach < HPH ? r1 + reach : HPH, 0, g[G_C]);
        const int err = aioge_conv_direct_f32(img, wpack, koff, bias, y + n * g[G_M] * P, g, q0, q1, mb0, mb1);
        if (err)
            return err;
        q = n * per_img + q1;
    }
    return 0;
}

/* conv_t prefetches the weight panel this many rows ahead: a deep layer's weight streams from
 * L3 once per call (ResNet's 512x512x3x3, 9.4 MB, for a 7x7 plane: 1.85 -> 1.68 ms, one core) */
#define PF_ROWS 16
#define KCT 256 /* conv_t: K values at a time, a 64 KB block of a weight panel */

/* -- convolutions on small planes: y^T = patches^T @ W^T ---------------------------------------
 *
 * conv_direct puts positions in the vector lanes; a 7x7 plane fills 49 of 64 and a 14x14 one
 * wastes the panel tails, and the 1x1 convs of EfficientNet's and MobileNet's last stages and
 * ResNet's 7x7 and 14x14 layers ran at 30-60 GMAC/s through it or through BLAS. Here the roles
 * swap: output channels go in the lanes, from W^T packed once into panels of NR channels
 * (pack_columns, as for a GEMM's B), and MR output positions are broadcast straight from the
 * stride-phase image, tap k of position q at xph[q + koff[k]] (the offsets of conv_direct; a
 * 1x1 conv at stride 1 without pads reads x itself, koff[k] = k * P). Over all of K at once (a
 * K x NR panel stays in L2); the MR x NR tile goes out transposed, the MR positions of each
 * channel side by side in y. Only valid positions are computed: the junk columns past OW that
 * conv_direct computes and drops are skipped.
 */
static inline __attribute__((always_inline)) void
ttile(const int mr, int nv, int64_t kc, const float *const *restrict r, const int64_t *restrict koff, const float *restrict b,
      float *restrict part, int first, const float *restrict bias, int relu)
{
    vf acc[MR][NV];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            acc[i][v] = !first ? *(const vf *)(part + i * NR + VL * v) : bias ? *(const vfu *)(bias + VL * v) : (vf){0};
#pragma GCC unroll 4 /* fewer loop instructions: 9-12% less CPU on ResNet's 3x3 convs at load 11 (a core shared), level when quiet */
    for (int64_t k = 0; k < kc; k++) {
        const int64_t o = koff[k];
        vf bv[NV];
        for (int v = 0; v < nv; v++)
            bv[v] = *(const vfu *)(b + k * NR + VL * v);
        __builtin_prefetch(b + (k + PF_ROWS) * NR, 0, 3); /* one line: NR floats are 64 bytes on AVX2 */
#if NV * VL > 16
        __builtin_prefetch(b + (k + PF_ROWS) * NR + 16, 0, 3);
        __builtin_prefetch(b + (k + PF_ROWS) * NR + 32, 0, 3);
        __builtin_prefetch(b + (k + PF_ROWS) * NR + 48, 0, 3);
#endif
        for (int i = 0; i < mr; i++) {
            const float s = r[i][o];
            for (int v = 0; v < nv; v++)
                acc[i][v] += s * bv[v];
        }
    }
#ifndef __AVX512F__
    typedef int32_t vfi __attribute__((vector_size(VL * 4)));
#endif
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) {
            vf out = acc[i][v];
            if (relu) /* the last K block: act_span's rule in the registers (NaN and x > 0 kept) */
#ifdef __AVX512F__
                out = (vf)_mm512_maskz_mov_ps(_mm512_cmp_ps_mask((__m512)out, _mm512_setzero_ps(), _CMP_NLE_UQ), (__m512)out);
#else
                out = (vf)((vfi)out & ~(out <= (vf){0}));
#endif
            *(vf *)(part + i * NR + VL * v) = out;
        }
}

/* Tiles of MR positions, and of the 1 to MR - 1 a plane's last block holds (ResNet's 7x7 planes:
 * 49 = 8 x 6 + 1, and an MR-row tile over the last one computed 5 repeated positions, a tenth of
 * the layer), by 1 to NV vectors of channels. */
typedef void (*ttile_fn)(int64_t, const float *const *, const int64_t *, const float *, float *, int, const float *, int);
#define TTILE(M, NV)                                                                                                   \
    static void ttile##M##_##NV(int64_t kc, const float *const *r, const int64_t *koff, const float *b, float *part,   \
                                int first, const float *bias, int relu)                                                \
    {                                                                                                                  \
        ttile(M, NV, kc, r, koff, b, part, first, bias, relu);                                                         \
    }
#define TTILE_ROW(M) TTILE(M, 1) TTILE(M, 2)
TTILE_ROW(1) TTILE_ROW(2) TTILE_ROW(3) TTILE_ROW(4) TTILE_ROW(5) TTILE_ROW(6)
#if NV == 4
#define TTILE_ROW4(M) TTILE(M, 3) TTILE(M, 4)
TTILE_ROW4(1) TTILE_ROW4(2) TTILE_ROW4(3) TTILE_ROW4(4) TTILE_ROW4(5) TTILE_ROW4(6)
#define TT(M) {0, ttile##M##_1, ttile##M##_2, ttile##M##_3, ttile##M##_4}
#else
#define TT(M) {0, ttile##M##_1, ttile##M##_2}
#endif
_Static_assert(MR == 6, "TTILES lists tiles of 1 to 6 positions");
static const ttile_fn TTILES[MR + 1][NV + 1] = {{0}, TT(1), TT(2), TT(3), TT(4), TT(5), TT(6)};

/* An mv x NR tile (positions by channels) out transposed, the mv positions of each of its ncols
 * channels side by side in y (P apart). On AVX2 eight channels at a time through an 8x8
 * transpose in the registers, each channel's run in stores of 4, 2 and 1 (never past it: the
 * next block may be another thread's): 96 scalar loads and stores a full tile were a sixth of
 * a K = 80 conv's tile. */
static inline void store_t(const float *restrict part, float *restrict yt, int64_t P, int64_t mv, int64_t ncols)
{
#ifdef __AVX2__ /* and the AVX-512 tier: rows NR apart, 8 channels at a time either way */
    for (int64_t c0 = 0; c0 < ncols; c0 += 8) {
        __m256 r[8], t[8], s[8];
        for (int i = 0; i < 8; i++)
            r[i] = i < mv ? _mm256_loadu_ps(part + i * NR + c0) : _mm256_setzero_ps();
        for (int i = 0; i < 8; i += 2) {
            t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int h = 0; h < 8; h += 4) /* s[h + j]: channels j and j + 4 of rows h .. h + 3 */
            for (int j = 0; j < 2; j++) {
                s[h + 2 * j] = _mm256_shuffle_ps(t[h + j], t[h + j + 2], 0x44);
                s[h + 2 * j + 1] = _mm256_shuffle_ps(t[h + j], t[h + j + 2], 0xEE);
            }
        for (int j = 0; j < 8 && c0 + j < ncols; j++) {
            const __m256 v = j < 4 ? _mm256_permute2f128_ps(s[j], s[j + 4], 0x20) : _mm256_permute2f128_ps(s[j - 4], s[j], 0x31);
            float *d = yt + (c0 + j) * P;
            __m128 lo = _mm256_castps256_ps128(v);
            int64_t left = mv;
            if (left >= 4) {
                _mm_storeu_ps(d, lo);
                lo = _mm256_extractf128_ps(v, 1);
                d += 4;
                left -= 4;
            }
            if (left >= 2) {
                _mm_storel_pi((__m64 *)d, lo);
                lo = _mm_movehl_ps(lo, lo);
                d += 2;
                left -= 2;
            }
            if (left)
                _mm_store_ss(d, lo);
        }
    }
#else
    for (int64_t c = 0; c < ncols; c++)
        for (int64_t i = 0; i < mv; i++)
            yt[c * P + i] = part[i * NR + c];
#endif
}

/* y[n][m][p] = bias[m] + sum_k xph[n][q(p) + koff[k]] * W[m][k] for the images and MR-position
 * blocks u = n * blocks + block in [u0, u1) and the panels [p0, p1) of NR output channels;
 * q(p) = (p / OW) * WPH + p % OW. wpack = pack_columns(W^T), W of M rows of K = C * KH * KW. */
int aioge_conv_t_f32(const float *xph, const float *wpack, const int64_t *koff, const float *bias, float *y,
                     const int64_t *g, int64_t u0, int64_t u1, int64_t p0, int64_t p1)
{
    if (u0 >= u1 || p0 >= p1 || g[G_OH] <= 0 || g[G_OW] <= 0 || g[G_M] <= 0)
        return AIOGE_OK;
    if (g[G_C] <= 0 || g[G_KH] <= 0 || g[G_KW] <= 0 || u0 < 0 || p0 < 0)
        return AIOGE_EGEOMETRY;
    const int64_t M = g[G_M], OW = g[G_OW], WPH = g[G_WPH], IMAGE = g[G_IMAGE];
    /* P positions in as many blocks as MR-position ones take, base or base + 1 each: a 7x7 plane
     * as 4 x 6 + 5 x 5, not 8 x 6 + 1, whose one-position tile ran 2 multiply-add chains at their
     * latency (EfficientNet's 7x7 1x1 convs: 2-3.5% less thread CPU, minimum of 80, load 6) */
    const int64_t K = g[G_C] * g[G_KH] * g[G_KW], P = g[G_OH] * OW, blocks = (P + MR - 1) / MR;
    const int64_t base = P / blocks, extra = P % blocks;
    const int act = (int)g[G_ACT];
    const float act_p0 = aioge_float_of(g[G_ACT_P0]), act_p1 = aioge_float_of(g[G_ACT_P1]);
    /* A kernel no wider than its stride (1x1, ConvNeXt's 2x2/2) reads every tap from a plane of
     * its own, on lines of its own: on a small plane half the block keeps a block's rows in L1
     * across the units (EfficientNet's 1152x7x7 -> 192 1x1: 0.37 -> 0.33 ms; ConvNeXt's
     * 384x14x14 -> 768 2x2/2: 1.76 -> 1.55). The 3x3 convs' taps share lines (3-7% slower so),
     * and on a 28x28 output no block fits (96x56x56 -> 192 2x2/2: 3-12% slower). */
    const int own = (g[G_KH] - 1) * g[G_DH] < g[G_SH] && (g[G_KW] - 1) * g[G_DW] < g[G_SW];
    const int64_t kct = own && P <= 256 ? KCT / 2 : KCT;
    const int64_t kblocks = (K + kct - 1) / kct, kstep = (K + kblocks - 1) / kblocks;
    float *parts = accumulator((size_t)(u1 > u0 ? u1 - u0 : 1) * MR * NR); /* each unit's tile between K blocks */
    if (!parts)
        return AIOGE_ENOMEM;
    const float *z = zof(g); /* a residual: added once a panel's units are stored, then the activation */
    const int relu = act == ACT_RELU && !z;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t col0 = p * NR, ncols = M - col0 < NR ? M - col0 : NR, nv = (ncols + VL - 1) / VL;
        float bpad[NR] __attribute__((aligned(64))) = {0};
        for (int64_t j = 0; bias && j < ncols; j++)
            bpad[j] = bias[col0 + j];
        const float *bp = wpack + p * K * NR;
        for (int64_t k0 = 0; k0 < K; k0 += kstep) {
            const int64_t kc = K - k0 < kstep ? K - k0 : kstep;
            const int last = k0 + kc == K;
            for (int64_t u = u0; u < u1; u++) {
                const int64_t n = u / blocks, b = u % blocks, q = b * base + (b < extra ? b : extra), mv = base + (b < extra);
                const float *r[MR];
                int64_t oh = q / OW, ow = q % OW; /* one division a tile, not one a position */
                for (int64_t i = 0; i < mv; i++) {
                    r[i] = xph + n * IMAGE + oh * WPH + ow;
                    if (++ow == OW)
                        ow = 0, oh++;
                }
                float *part = parts + (u - u0) * MR * NR;
                TTILES[mv][nv](kc, r, koff + k0, bp + k0 * NR, part, k0 == 0, bias ? bpad : 0, last && relu);
                if (!last)
                    continue; /* more of K to come */
                if (z) {
                    /* the residual's sum comes before the activation: both after the store */
                } else if (act == ACT_HARDSWISH || act == ACT_HARDSIGMOID || act == ACT_CLIP) /* inline, no call a tile */
                    for (int64_t j = 0; j < mv * NR; j += VL)
                        *(vfu *)(part + j) = hard_vf(*(const vfu *)(part + j), act, act_p0, act_p1);
#ifdef SIG_REGS
                else if (act == ACT_SIGMOID || act == ACT_SWISH) /* inline too, as dtile_out: act_span's bits */
                    for (int64_t j = 0; j < mv * NR; j += VL) {
                        const vf in = *(const vfu *)(part + j);
                        *(vfu *)(part + j) = sigmoid_vf(in, sig_alpha(act_p0), act == ACT_SWISH);
                    }
#endif
                else if (act && act != ACT_RELU) /* one call a tile (the lanes past ncols hold zeros' activations, never stored) */
                    aioge_act_span(part, NULL, part, mv * NR, act, act_p0, act_p1);
                store_t(part, y + (n * M + col0) * P + q, P, mv, ncols);
            }
            for (int64_t u = u0; last && z && u < u1;) { /* each image's stored positions, a run per channel */
                const int64_t n = u / blocks, ue = (n + 1) * blocks < u1 ? (n + 1) * blocks : u1;
                const int64_t b0 = u % blocks, b1 = (ue - 1) % blocks;
                const int64_t q0 = b0 * base + (b0 < extra ? b0 : extra), q1 = b1 * base + (b1 < extra ? b1 : extra) + base + (b1 < extra);
                for (int64_t c = 0; c < ncols; c++) {
                    const int64_t at = (n * M + col0 + c) * P;
                    residual_run(y + at + q0, z + at + q0, q1 - q0, act, act_p0, act_p1);
                }
                u = ue;
            }
        }
    }
    return 0;
}

/* -- Winograd F(2x2, 3x3) and F(4x4, 3x3): stride-1 3x3 convs, channels in the lanes --------------
 *
 * Output tiles of R x R (R = 2 or 4) from input tiles of A = R + 2: V = B^T d B per input
 * channel, then per tile point xi of the A x A a GEMM over the input channels, M[xi][t][m] =
 * sum_c U[xi][m][c] V[xi][t][c] (U = G w G^T, packed once as conv_t's weight: [xi][panel][C][NR]),
 * by conv_t's micro-kernel with the taps the channels (koff = 0, 1, ...); Y = A^T M A per tile.
 * Both transforms run on VL channels at a time, from a slab of the input tile row's A rows held
 * channels-last in this thread's scratch. Three stages (JOB_WINOGRAD): the input transform over
 * tile rows, the GEMMs over tile points xi, the output transform over tile rows. ResNet-18's
 * 3x3 convs take 4 (F43) or 2.25 (F23) times fewer multiply-adds than the direct ones.
 *
 * Layouts: t = (n * TH + th) * TW + tw; V[(xi * T + t) * C + c]; Mo[((xi * NP + p) * T + t) * NR + j]
 * for output channel p * NR + j. */
/* v = B^T d over A = R + 2 values s apart (the points 0, +-1, +-2 of F(4x4, 3x3); F(2x2, 3x3)'s 0, +-1) */
static inline __attribute__((always_inline)) void wino_bt(const int R, const vf *d, int ds, vf *v, int vs)
{
    if (R == 2) {
        v[0] = d[0] - d[2 * ds];
        v[vs] = d[ds] + d[2 * ds];
        v[2 * vs] = d[2 * ds] - d[ds];
        v[3 * vs] = d[ds] - d[3 * ds];
        return;
    }
    const vf d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds], d4 = d[4 * ds], d5 = d[5 * ds];
    const vf t1 = d4 - 4.0f * d2, t2 = d3 - 4.0f * d1, t3 = d4 - d2, t4 = 2.0f * (d3 - d1);
    v[0] = 4.0f * d0 - 5.0f * d2 + d4;
    v[vs] = t1 + t2;
    v[2 * vs] = t1 - t2;
    v[3 * vs] = t3 + t4;
    v[4 * vs] = t3 - t4;
    v[5 * vs] = 4.0f * d1 - 5.0f * d3 + d5;
}

/* y = A^T m: R values s apart from A */
static inline __attribute__((always_inline)) void wino_at(const int R, const vf *m, int ms, vf *y, int ys)
{
    if (R == 2) {
        y[0] = m[0] + m[ms] + m[2 * ms];
        y[ys] = m[ms] - m[2 * ms] - m[3 * ms];
        return;
    }
    const vf a = m[ms] + m[2 * ms], b = m[ms] - m[2 * ms], c = m[3 * ms] + m[4 * ms], d = m[3 * ms] - m[4 * ms];
    y[0] = m[0] + a + c;
    y[ys] = b + 2.0f * d;
    y[2 * ys] = a + 4.0f * c;
    y[3 * ys] = b + 8.0f * d + m[5 * ms];
}

/* dst[col * ldd + k] = src[k * lds + col] for the 8 rows k and the columns [lo, hi): on AVX, 8 x 8
 * blocks through the registers (a scalar store a value, C floats apart, took ResNet-18's 64x56x56
 * input transform 0.8 ms) */
static void wino_rows8(const float *restrict src, int64_t lds, float *restrict dst, int64_t ldd, int64_t lo, int64_t hi)
{
    int64_t col = lo;
#ifdef __AVX__
    for (; col + 8 <= hi; col += 8) {
        __m256 r[8], t[8], u[8];
        for (int k = 0; k < 8; k++)
            r[k] = _mm256_loadu_ps(src + k * lds + col);
        for (int k = 0; k < 8; k += 2) {
            t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
            t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
        }
        for (int h = 0; h < 8; h += 4)
            for (int j = 0; j < 2; j++) {
                u[h + 2 * j] = _mm256_shuffle_ps(t[h + j], t[h + j + 2], 0x44);
                u[h + 2 * j + 1] = _mm256_shuffle_ps(t[h + j], t[h + j + 2], 0xEE);
            }
        for (int j = 0; j < 8; j++)
            _mm256_storeu_ps(dst + (col + j) * ldd,
                             j < 4 ? _mm256_permute2f128_ps(u[j], u[j + 4], 0x20) : _mm256_permute2f128_ps(u[j - 4], u[j], 0x31));
    }
#endif
    for (; col < hi; col++)
        for (int k = 0; k < 8; k++)
            dst[col * ldd + k] = src[k * lds + col];
}

/* Tile rows [r0, r1) (over all images) into V. */
static inline __attribute__((always_inline)) void wino_in(const int R, const float *restrict x, float *restrict V,
                                                          const int64_t *g, int64_t TH, int64_t TW, int64_t r0, int64_t r1,
                                                          float *restrict slab)
{
    enum { A_MAX = 6 };
    const int A = R + 2;
    const int64_t C = g[G_C], H = g[G_H], W = g[G_W], PT = g[G_PT], PL = g[G_PL], WP = R * TW + 2, T = g[G_N] * TH * TW;
    for (int64_t u = r0; u < r1; u++) {
        const int64_t n = u / TH, th = u % TH;
        for (int i = 0; i < A; i++) { /* slab[i][col][c] = x[n][c][R th + i - PT][col - PL], zero outside */
            const int64_t ih = R * th + i - PT;
            float *restrict s = slab + (int64_t)i * WP * C;
            if (ih < 0 || ih >= H) {
                for (int64_t j = 0; j < WP * C; j++)
                    s[j] = 0.0f;
                continue;
            }
            for (int64_t col = 0; col < WP; col++)
                if (col - PL < 0 || col - PL >= W)
                    for (int64_t c = 0; c < C; c++)
                        s[col * C + c] = 0.0f;
            const int64_t lo = PL, hi = W + PL < WP ? W + PL : WP;
            for (int64_t c = 0; c < C; c += 8) /* C is a multiple of 8: 8 x 8 blocks transposed */
                wino_rows8(x + ((n * C + c) * H + ih) * W - PL, H * W, s + c, C, lo, hi);
        }
        for (int64_t tw = 0; tw < TW; tw++) {
            const int64_t t = u * TW + tw;
            for (int64_t c = 0; c < C; c += VL) {
                vf d[A_MAX][A_MAX], e[A_MAX][A_MAX], v[A_MAX][A_MAX];
                for (int i = 0; i < A; i++)
                    for (int j = 0; j < A; j++)
                        d[i][j] = *(const vfu *)(slab + ((int64_t)i * WP + R * tw + j) * C + c);
                for (int j = 0; j < A; j++) /* e = B^T d, column by column */
                    wino_bt(R, &d[0][j], A_MAX, &e[0][j], A_MAX);
                for (int i = 0; i < A; i++) /* V = e B, row by row */
                    wino_bt(R, e[i], 1, v[i], 1);
                for (int i = 0; i < A; i++)
                    for (int j = 0; j < A; j++)
                        *(vfu *)(V + (((int64_t)i * A + j) * T + t) * C + c) = v[i][j];
            }
        }
    }
}

/* Tile points [x0, x1): Mo[xi] = V[xi] U[xi] over every tile and output-channel panel. */
static void wino_gemm(const float *restrict V, const float *restrict U, const int64_t *restrict koff, float *restrict Mo,
                      const int64_t *g, int64_t T, int64_t x0, int64_t x1)
{
    const int64_t C = g[G_C], M = g[G_M], NP = (M + NR - 1) / NR;
    const int64_t kblocks = (C + KCT - 1) / KCT, kstep = (C + kblocks - 1) / kblocks;
    const int64_t blocks = (T + MR - 1) / MR, base = T / blocks, extra = T % blocks;
    for (int64_t xi = x0; xi < x1; xi++)
        for (int64_t p = 0; p < NP; p++) {
            const int64_t ncols = M - p * NR < NR ? M - p * NR : NR, nv = (ncols + VL - 1) / VL;
            const float *bp = U + (xi * NP + p) * C * NR;
            float *mo = Mo + (xi * NP + p) * T * NR;
            for (int64_t k0 = 0; k0 < C; k0 += kstep) {
                const int64_t kc = C - k0 < kstep ? C - k0 : kstep;
                for (int64_t b = 0; b < blocks; b++) {
                    const int64_t t0 = b * base + (b < extra ? b : extra), mv = base + (b < extra);
                    const float *r[MR];
                    for (int64_t i = 0; i < mv; i++)
                        r[i] = V + (xi * T + t0 + i) * C;
                    TTILES[mv][nv](kc, r, koff + k0, bp + k0 * NR, mo + t0 * NR, k0 == 0, 0, 0);
                }
            }
        }
}

/* Tile rows [r0, r1) of y from Mo, with the bias and a ReLU (relu); M a multiple of VL and 8.
 * Each tile row's VL channels go through rb (R rows of R * TW positions, channels last), then to
 * y in 8 x 8 transposed blocks. */
static inline __attribute__((always_inline)) void wino_out(const int R, const float *restrict Mo, const float *restrict bias,
                                                           float *restrict y, const int64_t *g, int64_t TH, int64_t TW,
                                                           int64_t r0, int64_t r1, int relu, float *restrict rb,
                                                           const float *restrict z, int act)
{
    enum { A_MAX = 6, R_MAX = 4 };
    const int A = R + 2;
    const int64_t M = g[G_M], OH = g[G_OH], OW = g[G_OW], NP = (M + NR - 1) / NR, T = g[G_N] * TH * TW, RW = R * TW;
#ifndef __AVX512F__
    typedef int32_t vfi __attribute__((vector_size(VL * 4)));
#endif
    for (int64_t u = r0; u < r1; u++) {
        const int64_t n = u / TH, th = u % TH, rows = OH - R * th < R ? OH - R * th : R;
        for (int64_t m0 = 0; m0 < M; m0 += VL) {
            const int64_t p = m0 / NR, j0 = m0 % NR;
            const vf bb = bias ? *(const vfu *)(bias + m0) : (vf){0};
            for (int64_t tw = 0; tw < TW; tw++) {
                const int64_t t = u * TW + tw;
                vf mm[A_MAX][A_MAX], z[R_MAX][A_MAX], yy[R_MAX][R_MAX];
                for (int i = 0; i < A; i++)
                    for (int j = 0; j < A; j++)
                        mm[i][j] = *(const vf *)(Mo + (((int64_t)(i * A + j) * NP + p) * T + t) * NR + j0);
                for (int j = 0; j < A; j++) /* z = A^T m, column by column */
                    wino_at(R, &mm[0][j], A_MAX, &z[0][j], A_MAX);
                for (int i = 0; i < R; i++) /* y = z A, row by row */
                    wino_at(R, z[i], 1, yy[i], 1);
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < R; j++) {
                        vf o = yy[i][j] + bb;
                        if (relu)
#ifdef __AVX512F__
                            o = (vf)_mm512_maskz_mov_ps(_mm512_cmp_ps_mask((__m512)o, _mm512_setzero_ps(), _CMP_NLE_UQ), (__m512)o);
#else
                            o = (vf)((vfi)o & ~(o <= (vf){0}));
#endif
                        *(vf *)(rb + (i * RW + R * tw + j) * VL) = o;
                    }
            }
            for (int64_t i = 0; i < rows; i++)
                for (int64_t l0 = 0; l0 < VL; l0 += 8) {
                    const float *src = rb + i * RW * VL + l0;
                    float *dst = y + ((n * M + m0 + l0) * OH + R * th + i) * OW;
                    int64_t ow = 0;
                    for (; VL >= 8 && ow + 8 <= OW; ow += 8) /* 8 positions of 8 channels */
                        wino_rows8(src + ow * VL, VL, dst + ow, OH * OW, 0, 8);
                    for (; ow < OW; ow++)
                        for (int64_t l = 0; l < 8 && l0 + l < VL; l++)
                            dst[l * OH * OW + ow] = src[ow * VL + l];
                    for (int64_t l = 0; z && l < 8 && l0 + l < VL; l++) /* a residual: its sum, then act, on the rows stored */
                        residual_run(dst + l * OH * OW, z + (dst - y) + l * OH * OW, OW, act, 0.0f, 0.0f);
                }
        }
    }
}

/* Stage 0 (tile rows of the input transform), 1 (tile points of the GEMMs) or 2 (tile rows of
 * the output transform) of a Winograd conv with R x R output tiles, TH x TW of them an image,
 * over [lo, hi). Returns AIOGE_ENOMEM when the slab cannot be had. */
int aioge_conv_winograd_f32(const float *x, const float *U, const int64_t *koff, const float *bias, float *y, const int64_t *g,
                            float *V, float *Mo, int stage, int R, int64_t TH, int64_t TW, int64_t lo, int64_t hi)
{
    const int64_t T = g[G_N] * TH * TW;
    if (lo >= hi)
        return AIOGE_OK;
    if ((R != 2 && R != 4) || g[G_C] % VL || g[G_C] % 8 || g[G_M] % VL || g[G_M] % 8 || g[G_KH] != 3 || g[G_KW] != 3 || TH * R < g[G_OH] || TW * R < g[G_OW])
        return AIOGE_EGEOMETRY;
    if (stage == 0) {
        float *slab = aioge_thread_scratch(2, (size_t)((R + 2) * (R * TW + 2) * g[G_C]));
        if (!slab)
            return AIOGE_ENOMEM;
        if (R == 2)
            wino_in(2, x, V, g, TH, TW, lo, hi, slab);
        else
            wino_in(4, x, V, g, TH, TW, lo, hi, slab);
    } else if (stage == 1)
        wino_gemm(V, U, koff, Mo, g, T, lo, hi);
    else {
        float *rb = aioge_thread_scratch(0, (size_t)(R * R * TW * VL));
        if (!rb)
            return AIOGE_ENOMEM;
        if (R == 2)
            wino_out(2, Mo, bias, y, g, TH, TW, lo, hi, (int)g[G_ACT] == ACT_RELU && !zof(g), rb, zof(g), (int)g[G_ACT]);
        else
            wino_out(4, Mo, bias, y, g, TH, TW, lo, hi, (int)g[G_ACT] == ACT_RELU && !zof(g), rb, zof(g), (int)g[G_ACT]);
    }
    return 0;
}
