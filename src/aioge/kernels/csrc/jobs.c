/* The jobs of aioge_par_run (par.c): each adapts one kernel of dwconv.c, pool.c, conv_direct.c,
 * gemm.c, qgemm.c, lowp.c or norm.c (or a small loop of its own) to a range [lo, hi) and an
 * int64 argument block, numbered by aioge.h's enum aioge_job. The windowed ones check their
 * geometry against the sizes of the buffers they are told before they touch them. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"

typedef int (*job_fn)(const int64_t *args, int64_t lo, int64_t hi);

/* gemm: a, lda, bpack, bias, y, ldy, N, K, M, panels, by_rows, MR: [lo, hi) are panels, or MR-row
 * blocks when by_rows */
static int job_gemm(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *a = (const float *)(intptr_t)g[0], *bp = (const float *)(intptr_t)g[2];
    const float *bias = (const float *)(intptr_t)g[3];
    float *y = (float *)(intptr_t)g[4];
    const int64_t M = g[8], panels = g[9], mr = g[11];
    if (g[10]) {
        const int64_t r1 = hi * mr < M ? hi * mr : M;
        aioge_gemm_packed_f32(a, g[1], bp, bias, y, g[5], g[6], g[7], lo * mr, r1, 0, panels);
    } else
        aioge_gemm_packed_f32(a, g[1], bp, bias, y, g[5], g[6], g[7], 0, M, lo, hi);
    return 0;
}

typedef int (*conv_fn)(const float *, const float *, const int64_t *, const float *, float *, const int64_t *, int64_t,
                       int64_t, int64_t, int64_t);

/* The two direct convs' jobs: xph, wpack, koff, bias, y, geometry, then the two ranges' sizes and
 * which of them [lo, hi) cuts (g[8]: the second), then the floats of xph (x itself for the local
 * job) and y */
static int conv_job(conv_fn fn, const int64_t *g, int64_t lo, int64_t hi)
{
    if (!aioge_conv_fits((const int64_t *)(intptr_t)g[5], g[9], g[10], fn == aioge_conv_direct_local_f32))
        return AIOGE_EGEOMETRY;
    const float *x = (const float *)(intptr_t)g[0], *w = (const float *)(intptr_t)g[1];
    const int64_t *koff = (const int64_t *)(intptr_t)g[2], *geom = (const int64_t *)(intptr_t)g[5];
    const float *bias = (const float *)(intptr_t)g[3];
    float *y = (float *)(intptr_t)g[4];
    if (g[8])
        return fn(x, w, koff, bias, y, geom, 0, g[6], lo, hi);
    return fn(x, w, koff, bias, y, geom, lo, hi, 0, g[7]);
}

/* Winograd conv: x, U, koff, bias, y, geometry, V, Mo, stage, R, TH, TW, then the floats of x, y, V
 * and Mo: [lo, hi) are tile rows (stages 0 and 2) or tile points (stage 1) */
static int job_winograd(const int64_t *g, int64_t lo, int64_t hi)
{
    const int64_t *geom = (const int64_t *)(intptr_t)g[5], R = g[9], TH = g[10], TW = g[11];
    const int64_t A = R + 2, T = geom[14] * TH * TW, NR = aioge_conv_gemm_nr(), NP = (geom[3] + NR - 1) / NR;
    if (!aioge_conv_fits(geom, g[12], g[13], 1) || R < 2 || g[14] / (A * A) < T * geom[0] || g[15] / (A * A) < T * NP * NR ||
        hi > (g[8] == 1 ? A * A : geom[14] * TH))
        return AIOGE_EGEOMETRY;
    return aioge_conv_winograd_f32((const float *)(intptr_t)g[0], (const float *)(intptr_t)g[1], (const int64_t *)(intptr_t)g[2],
                                   (const float *)(intptr_t)g[3], (float *)(intptr_t)g[4], geom, (float *)(intptr_t)g[6],
                                   (float *)(intptr_t)g[7], (int)g[8], (int)R, TH, TW, lo, hi);
}

/* conv direct: ..., panels, blocks, by_blocks: [lo, hi) are panels, or MR-row blocks of the
 * weight when by_blocks */
static int job_conv_direct(const int64_t *g, int64_t lo, int64_t hi) { return conv_job(aioge_conv_direct_f32, g, lo, hi); }

/* conv, channels in the lanes: ..., units, panels, by_panels: [lo, hi) are image-and-MR-position
 * units, or panels of NR output channels when by_panels */
static int job_conv_t(const int64_t *g, int64_t lo, int64_t hi) { return conv_job(aioge_conv_t_f32, g, lo, hi); }

/* depthwise conv: x, w, bias, y, geometry, unit, planes, floats of x and y: [lo, hi) are blocks of unit output
 * planes (the interleaved layout computes 16 planes at a time: a chunk of 4 filled 4 of its 16
 * lanes) */
static int job_depthwise(const int64_t *g, int64_t lo, int64_t hi)
{
    const int64_t unit = g[5], planes = g[6], *geom = (const int64_t *)(intptr_t)g[4];
    /* then the floats of x and y: planes of oh x ow outputs, each from one of h x w inputs */
    if (unit <= 0 || geom[3] <= 0 || !aioge_fits(g[8], planes, geom[12], geom[13], 1) ||
        !aioge_fits(g[7], planes / geom[3], geom[1], geom[2], 1) || lo * unit > planes)
        return AIOGE_EGEOMETRY;
    return aioge_conv_depthwise_f32((const float *)(intptr_t)g[0], (const float *)(intptr_t)g[1],
                                    (const float *)(intptr_t)g[2], (float *)(intptr_t)g[3], (const int64_t *)(intptr_t)g[4],
                                    lo * unit, hi * unit < planes ? hi * unit : planes);
}

/* activation: x, y, act, the bits of p0 and p1 as float32: [lo, hi) are elements */
static int job_activation(const int64_t *g, int64_t lo, int64_t hi)
{
    aioge_activation_f32((const float *)(intptr_t)g[0], (float *)(intptr_t)g[1], (int)g[2], aioge_float_of(g[3]), aioge_float_of(g[4]), lo,
                         hi);
    return 0;
}

/* packing a GEMM's B: b, its row stride, K, N, bpack, its column stride (1, or B = W^T with a
 * row stride of 1): [lo, hi) are panels */
static int job_pack(const int64_t *g, int64_t lo, int64_t hi)
{
    aioge_pack_columns_f32((const float *)(intptr_t)g[0], g[1], g[5], g[2], g[3], (float *)(intptr_t)g[4], lo, hi);
    return 0;
}

/* gemv with a transposed weight: x, w, ldw, bias, y, K: [lo, hi) are output values */
static int job_gemv_t(const int64_t *g, int64_t lo, int64_t hi)
{
    aioge_gemv_t_f32((const float *)(intptr_t)g[0], (const float *)(intptr_t)g[1], g[2], (const float *)(intptr_t)g[3],
                     (float *)(intptr_t)g[4], g[5], lo, hi);
    return 0;
}

/* channel chain: x, y, C, hw, nsteps, ops, k, act, the bits of p0 and p1: [lo, hi) are planes */
static int job_chain(const int64_t *g, int64_t lo, int64_t hi)
{
    aioge_channel_chain_f32((const float *)(intptr_t)g[0], (float *)(intptr_t)g[1], g[2], g[3], g[4],
                            (const int64_t *)(intptr_t)g[5], (const float *const *)(intptr_t)g[6], (int)g[7],
                            aioge_float_of(g[8]), aioge_float_of(g[9]), lo, hi);
    return 0;
}

/* 2-D pool: x, y, geometry (pool.c's 17 slots), indices or 0, planes, floats of x and y: [lo,
 * hi) are planes */
static int job_pool(const int64_t *g, int64_t lo, int64_t hi)
{
    const int64_t *geom = (const int64_t *)(intptr_t)g[2], planes = g[4];
    if (hi > planes || !aioge_fits(g[5], planes, geom[0], geom[1], 1) || !aioge_fits(g[6], planes, geom[12], geom[13], 1))
        return AIOGE_EGEOMETRY;
    return aioge_pool_f32((const float *)(intptr_t)g[0], (float *)(intptr_t)g[1], (int64_t *)(intptr_t)g[3], geom, lo, hi);
}

/* conv direct by images: x, wpack, koff, bias, y, geometry, floats of x and y: [lo, hi) are
 * images, each one's stride phases built by the thread that computes it */
static int job_conv_images(const int64_t *g, int64_t lo, int64_t hi)
{
    if (!aioge_conv_fits((const int64_t *)(intptr_t)g[5], g[6], g[7], 1))
        return AIOGE_EGEOMETRY;
    return aioge_conv_direct_images_f32((const float *)(intptr_t)g[0], (const float *)(intptr_t)g[1],
                                        (const int64_t *)(intptr_t)g[2], (const float *)(intptr_t)g[3], (float *)(intptr_t)g[4],
                                        (const int64_t *)(intptr_t)g[5], lo, hi);
}

/* conv grouped: a direct conv's arguments (its geometry that of one group over N·group images
 * of C/group channels), then the cut range's size (panels, or units with g[13]), the other's
 * (weight row blocks, or channel panels), 0, groups, the floats of one group's packed weight,
 * cut units per image, output channels per group, g[13]: channels in the lanes
 * (aioge_conv_t_f32), then the floats of xph and y. [lo, hi) are the cut units; image i computes with group i % groups'
 * weight and bias. */
static int job_conv_grouped(const int64_t *g, int64_t lo, int64_t hi)
{
    if (!aioge_conv_fits((const int64_t *)(intptr_t)g[5], g[14], g[15], 0))
        return AIOGE_EGEOMETRY;
    const float *x = (const float *)(intptr_t)g[0], *w = (const float *)(intptr_t)g[1];
    const int64_t *koff = (const int64_t *)(intptr_t)g[2], *geom = (const int64_t *)(intptr_t)g[5];
    const float *bias = (const float *)(intptr_t)g[3];
    float *y = (float *)(intptr_t)g[4];
    const int64_t groups = g[9], wstride = g[10], per = g[11], mg = g[12];
    const conv_fn fn = g[13] ? aioge_conv_t_f32 : aioge_conv_direct_f32;
    while (lo < hi) {
        const int64_t image = lo / per, end = (image + 1) * per < hi ? (image + 1) * per : hi, k = image % groups;
        const int r = fn(x, w + k * wstride, koff, bias ? bias + k * mg : NULL, y, geom, lo, end, 0, g[7]);
        if (r)
            return r;
        lo = end;
    }
    return 0;
}

/* SqueezeExcite's squeeze in two split stages, so that both cores share its plane sums and the
 * reads of its two weights (MobileNetV3's 576 -> 144 -> 576: 27-29 us whole, most of it the
 * 0.66 MB of weights from L3; EfficientNet's 16 squeezes 0.49 ms of 11). Stage 1, over units of
 * cu channels of each image: the units' plane means (each plane's sum, lanes in their own order,
 * times 1/hw) times their rows of w1t summed into the unit's partial (C1 values, from zero,
 * rows in order); the planes are those the depthwise conv before it wrote, on the same core
 * when the splits line up. Stage 2, over blocks of cv columns of each image's scale: the
 * hidden vector b1 + partial 0 + partial 1 + ... (in order, act1), then the block's outputs
 * act2(b2[j] + w2[j] . hidden), w2 (C, C1) as it is: a block's weights one run of rows. Every unit is computed the same way whole or split: the same bits. */
static void squeeze_rows(const float *v, const float *w, int64_t ldw, float *out, int64_t K, int64_t N)
{
    for (int64_t k = 0; k < K; k++) {
        const float s = v[k], *wk = w + k * ldw;
        _Pragma("omp simd") for (int64_t j = 0; j < N; j++) out[j] += s * wk[j];
    }
}

static int squeeze_stage(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *x = (const float *)(intptr_t)g[0], *w1t = (const float *)(intptr_t)g[1], *b1 = (const float *)(intptr_t)g[2];
    const float *w2 = (const float *)(intptr_t)g[3], *b2 = (const float *)(intptr_t)g[4];
    float *scale = (float *)(intptr_t)g[5], *part = (float *)(intptr_t)g[18];
    const int64_t C = g[6], hw = g[7], C1 = g[8], *acts = g + 9, cu = g[16], U = g[17], cv = g[19], V = g[20];
    if (C <= 0 || C1 <= 0 || cu <= 0 || cv <= 0 || U != (C + cu - 1) / cu || V != (C + cv - 1) / cv)
        return AIOGE_EGEOMETRY;
    if (g[15] == 1) { /* [lo, hi): image-and-channel units */
        float mean[64];
        const float inv = 1.0f / (float)hw;
        for (int64_t u = lo; u < hi; u++) {
            const int64_t i = u / U, c0 = (u % U) * cu, c1 = c0 + cu < C ? c0 + cu : C;
            float *pu = part + u * C1;
            memset(pu, 0, sizeof(float) * (size_t)C1);
            for (int64_t c = c0; c < c1; c += 64) {
                const int64_t nc = c1 - c < 64 ? c1 - c : 64;
                for (int64_t k = 0; k < nc; k++) {
                    const float *p = x + (i * C + c + k) * hw;
                    float s = 0.0f;
                    _Pragma("omp simd reduction(+ : s)") for (int64_t j = 0; j < hw; j++) s += p[j];
                    mean[k] = s * inv;
                }
                squeeze_rows(mean, w1t + c * C1, C1, pu, nc, C1);
            }
        }
        return 0;
    }
    float *hidden = aioge_malloc(sizeof(float) * (size_t)C1);
    if (!hidden)
        return AIOGE_ENOMEM;
    for (int64_t v = lo; v < hi; v++) { /* [lo, hi): image-and-column-block units */
        const int64_t i = v / V, j0 = (v % V) * cv, n = C - j0 < cv ? C - j0 : cv;
        memcpy(hidden, b1, sizeof(float) * (size_t)C1);
        for (int64_t u = 0; u < U; u++) {
            const float *pu = part + (i * U + u) * C1;
            _Pragma("omp simd") for (int64_t j = 0; j < C1; j++) hidden[j] += pu[j];
        }
        if (acts[0])
            aioge_act_span(hidden, NULL, hidden, C1, (int)acts[0], aioge_float_of(acts[1]), aioge_float_of(acts[2]));
        float *out = scale + i * C + j0;
        for (int64_t j = 0; j < n; j++) {
            const float *wj = w2 + (j0 + j) * C1;
            float s = 0.0f;
            _Pragma("omp simd reduction(+ : s)") for (int64_t k = 0; k < C1; k++) s += hidden[k] * wj[k];
            out[j] = b2[j0 + j] + s;
        }
        if (acts[3])
            aioge_act_span(out, NULL, out, n, (int)acts[3], aioge_float_of(acts[4]), aioge_float_of(acts[5]));
    }
    free(hidden);
    return 0;
}

/* SqueezeExcite's squeeze: x, w1t (C, C1), b1, w2t (C1, C), b2, scale, C, hw, C1, acts (6 values),
 * then stage (0: whole, [lo, hi) images; 1, 2: squeeze_stage's), cu, U, the partials (N x U x C1
 * floats), cv, V */
static int job_squeeze(const int64_t *g, int64_t lo, int64_t hi)
{
    if (g[15]) /* then g[3] is w2 (C, C1), not w2t */
        return squeeze_stage(g, lo, hi);
    return aioge_squeeze_f32((const float *)(intptr_t)g[0], (const float *)(intptr_t)g[1], (const float *)(intptr_t)g[2],
                             (const float *)(intptr_t)g[3], (const float *)(intptr_t)g[4], (float *)(intptr_t)g[5], g[6], g[7],
                             g[8], g + 9, lo, hi);
}

/* a row times a row-major weight: x, w, ldw, bias, y, K, N, act, the bits of p0 and p1, and
 * the 16-column groups a unit of [lo, hi) holds (the last unit may hold fewer) */
static int job_gemv_n(const int64_t *g, int64_t lo, int64_t hi)
{
    const int64_t groups = (g[6] + 15) / 16, g1 = hi * g[10] < groups ? hi * g[10] : groups;
    return aioge_gemv_n_f32((const float *)(intptr_t)g[0], (const float *)(intptr_t)g[1], g[2], (const float *)(intptr_t)g[3],
                            (float *)(intptr_t)g[4], g[5], g[6], (int)g[7], aioge_float_of(g[8]), aioge_float_of(g[9]),
                            lo * g[10], g1);
}

/* conv direct with each thread's own phase rows, x in place of xph: as job_conv_direct */
static int job_conv_local(const int64_t *g, int64_t lo, int64_t hi) { return conv_job(aioge_conv_direct_local_f32, g, lo, hi); }

/* softmax (log_form: LogSoftmax): x, y, width, log_form: [lo, hi) are rows */
static int job_softmax(const int64_t *g, int64_t lo, int64_t hi)
{
    aioge_softmax_f32((const float *)(intptr_t)g[0], (float *)(intptr_t)g[1], g[2], (int)g[3], lo, hi);
    return 0;
}

/* layer normalization: x, scale, bias, y, mean, inv_std (0: absent), width, the bits of eps:
 * [lo, hi) are rows */
static int job_layernorm(const int64_t *g, int64_t lo, int64_t hi)
{
    aioge_layernorm_f32((const float *)(intptr_t)g[0], (const float *)(intptr_t)g[1], (const float *)(intptr_t)g[2],
                        (float *)(intptr_t)g[3], (float *)(intptr_t)g[4], (float *)(intptr_t)g[5], g[6], aioge_float_of(g[7]), lo,
                        hi);
    return 0;
}

/* a direct conv's stride-phase image: x, xph, geometry (aioge_conv_phases_f32), floats of x and
 * xph; [lo, hi) are channel planes of the batch (aioge_conv_phases_planes_f32) */
static int job_phases(const int64_t *g, int64_t lo, int64_t hi)
{
    if (!aioge_conv_fits((const int64_t *)(intptr_t)g[2], g[3], INT64_MAX, 1) || !aioge_conv_fits((const int64_t *)(intptr_t)g[2], g[4], INT64_MAX, 0))
        return AIOGE_EGEOMETRY;
    const int64_t *geo = (const int64_t *)(intptr_t)g[2];
    if (lo < 0 || hi > geo[0] * geo[14]) /* channel planes: C * N */
        return AIOGE_EGEOMETRY;
    aioge_conv_phases_planes_f32((const float *)(intptr_t)g[0], (float *)(intptr_t)g[1], geo, lo, hi);
    return 0;
}

/* global average pooling: x, y, hw: [lo, hi) are planes, each the sum of its hw values over
 * eight lanes (value i in lane i % 8), the lanes summed pairwise, times 1/hw */
typedef float f32x8 __attribute__((vector_size(32)));

static int job_global_mean(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *x = (const float *)(intptr_t)g[0];
    float *y = (float *)(intptr_t)g[1];
    const int64_t hw = g[2];
    const float inv = 1.0f / (float)hw;
    for (int64_t p = lo; p < hi; p++) {
        const float *xp = x + p * hw;
        f32x8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= hw; i += 8) {
            f32x8 v;
            memcpy(&v, xp + i, sizeof v);
            acc += v;
        }
        for (int j = 0; i < hw; i++, j++)
            acc[j] += xp[i];
        y[p] = (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) * inv;
    }
    return 0;
}

typedef uint32_t u32u __attribute__((aligned(1)));

/* d[r][c] = s[c][r] for r < rows, c < cols, 4-byte values: s's rows sstep bytes apart, each r
 * one value on; eight values of a source row at a time, down eight rows of d, so that each
 * source line is read once (a transpose in the last two axes: the heads' K^T of an attention,
 * BERT's (128, 12 x 64) -> (12 x 64, 128) took 131 us value by value) */
#if defined(__AVX2__)
#include <immintrin.h>
/* d[k][j] = s[j][k] for an 8 x 8 block of 4-byte values (s's rows sstep bytes apart, d's ldd values) */
static inline __attribute__((always_inline)) void transpose8x8(const char *s, int64_t sstep, float *d, int64_t ldd)
{
    __m256 r[8], t[8];
    for (int j = 0; j < 8; j++)
        r[j] = _mm256_loadu_ps((const float *)(s + j * sstep));
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 8; j += 4) {
        r[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
        r[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xEE);
        r[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        r[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        _mm256_storeu_ps(d + j * ldd, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
        _mm256_storeu_ps(d + (j + 4) * ldd, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
    }
}
#endif

static void transpose_u32(const char *s, int64_t cols, int64_t sstep, int64_t rows, u32u *d)
{
    int64_t b0 = 0;
#if defined(__AVX2__)
    /* 16 rows of d a pass, as 8 x 8 blocks in registers: a source line read whole at once */
    for (; b0 + 16 <= rows && cols >= 8; b0 += 16) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) {
            transpose8x8(s + c0 * sstep + b0 * 4, sstep, (float *)(d + b0 * cols + c0), cols);
            transpose8x8(s + c0 * sstep + b0 * 4 + 32, sstep, (float *)(d + (b0 + 8) * cols + c0), cols);
        }
        for (int64_t r = b0; r < b0 + 16; r++)
            for (int64_t c = c0; c < cols; c++)
                d[r * cols + c] = *((const u32u *)(s + c * sstep) + r);
    }
#endif
    for (int64_t b = b0; b < rows; b += 8) {
        const int64_t nb = rows - b < 8 ? rows - b : 8;
        for (int64_t c = 0; c < cols; c++) {
            const u32u *sp = (const u32u *)(s + c * sstep) + b;
            for (int64_t k = 0; k < nb; k++)
                d[(b + k) * cols + c] = sp[k];
        }
    }
}

/* a strided copy into a C-contiguous destination: src, dst, itemsize, then 6 sizes and 6
 * source strides in bytes (leading sizes 1 for a lower rank): [lo, hi) index the first axis */
static int job_strided(const int64_t *g, int64_t lo, int64_t hi)
{
    const char *src = (const char *)(intptr_t)g[0];
    char *dst = (char *)(intptr_t)g[1];
    const int64_t item = g[2], *n = g + 3, *st = g + 9;
    const int64_t inner = n[5] * item;
    dst += lo * n[1] * n[2] * n[3] * n[4] * inner;
    if (item == 4 && st[0] == 4 && st[5] != 4 && n[1] * n[2] * n[3] * n[4] == 1) {
        transpose_u32(src + lo * 4, n[5], st[5], hi - lo, (u32u *)dst); /* the range is dst's rows */
        return 0;
    }
    for (int64_t i0 = lo; i0 < hi; i0++)
        for (int64_t i1 = 0; i1 < n[1]; i1++)
            for (int64_t i2 = 0; i2 < n[2]; i2++)
                for (int64_t i3 = 0; i3 < n[3]; i3++) {
                    if (item == 4 && st[4] == 4 && st[5] != 4) {
                        transpose_u32(src + i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3], n[5], st[5], n[4], (u32u *)dst);
                        dst += n[4] * inner;
                        continue;
                    }
                    for (int64_t i4 = 0; i4 < n[4]; i4++) {
                        const char *s = src + i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3] + i4 * st[4];
                        if (st[5] == item)
                            memcpy(dst, s, (size_t)inner);
                        else if (item == 4)
                            for (int64_t i5 = 0; i5 < n[5]; i5++)
                                memcpy(dst + 4 * i5, s + i5 * st[5], 4);
                        else
                            for (int64_t i5 = 0; i5 < n[5]; i5++)
                                memcpy(dst + item * i5, s + i5 * st[5], (size_t)item);
                        dst += inner;
                    }
                }
    return 0;
}

/* float32 y = a op b (op 0 add, 1 sub, 2 mul, 3 div) over rows of width values: a, b, y, op,
 * width, then per operand its step between rows (0: the same row again) and within a row
 * (0: one value), a's then b's: [lo, hi) are rows */
static int job_binary(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *a = (const float *)(intptr_t)g[0], *b = (const float *)(intptr_t)g[1];
    float *y = (float *)(intptr_t)g[2];
    const int op = (int)g[3];
    const int64_t w = g[4], ar = g[5], as = g[6], br = g[7], bs = g[8];
    for (int64_t r = lo; r < hi; r++) {
        const float *x0 = a + r * ar, *x1 = b + r * br;
        float *yr = y + r * w;
#define BINARY_LOOP(EXPR)                                                                                              \
    if (as && bs)                                                                                                      \
        for (int64_t j = 0; j < w; j++) {                                                                              \
            const float u = x0[j], v = x1[j];                                                                          \
            yr[j] = EXPR;                                                                                              \
        }                                                                                                              \
    else if (as)                                                                                                       \
        for (int64_t j = 0; j < w; j++) {                                                                              \
            const float u = x0[j], v = x1[0];                                                                          \
            yr[j] = EXPR;                                                                                              \
        }                                                                                                              \
    else if (bs)                                                                                                       \
        for (int64_t j = 0; j < w; j++) {                                                                              \
            const float u = x0[0], v = x1[j];                                                                          \
            yr[j] = EXPR;                                                                                              \
        }                                                                                                              \
    else                                                                                                               \
        for (int64_t j = 0; j < w; j++) {                                                                              \
            const float u = x0[0], v = x1[0];                                                                          \
            yr[j] = EXPR;                                                                                              \
        }
        switch (op) {
        case 0:
            BINARY_LOOP(u + v)
            break;
        case 1:
            BINARY_LOOP(u - v)
            break;
        case 2:
            BINARY_LOOP(u * v)
            break;
        default:
            BINARY_LOOP(u / v)
            break;
        }
#undef BINARY_LOOP
    }
    return 0;
}

/* The BLAS numpy links (kernels.native.sgemm): cblas_sgemm with 32- or 64-bit integers. */
typedef void (*sgemm32_fn)(int, int, int, int32_t, int32_t, int32_t, float, const float *, int32_t, const float *, int32_t,
                           float, float *, int32_t);
typedef void (*sgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                           float, float *, int64_t);

/* y[i] = alpha * op(a[i]) @ op(b[i]) through BLAS: sgemm, 64-bit ints, transA, transB, M, N, K,
 * a, lda, b, ldb, y, ldy, the element strides between matrices of a, b and y, the bits of
 * alpha, pieces: [lo, hi) are matrices, or with pieces > 0 (one matrix, a not transposed) pieces
 * of its rows, one sgemm each whether split or not (so the same sums) */
static int job_sgemm(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *a = (const float *)(intptr_t)g[7], *b = (const float *)(intptr_t)g[9];
    float *y = (float *)(intptr_t)g[11];
    const int ta = g[2] ? 112 : 111, tb = g[3] ? 112 : 111; /* CblasTrans, CblasNoTrans */
    const float alpha = aioge_float_of(g[16]);
    const int64_t pieces = g[17];
    if (pieces > 0 && (g[2] || hi > pieces))
        return AIOGE_EGEOMETRY;
    for (int64_t m = lo; m < hi; m++) {
        const int64_t r0 = pieces ? m * g[4] / pieces : 0, rows = pieces ? (m + 1) * g[4] / pieces - r0 : g[4];
        const float *am = pieces ? a + r0 * g[8] : a + m * g[13], *bm = pieces ? b : b + m * g[14];
        float *ym = pieces ? y + r0 * g[12] : y + m * g[15];
        if (rows < 1)
            continue;
        if (g[1])
            ((sgemm64_fn)(intptr_t)g[0])(101, ta, tb, rows, g[5], g[6], alpha, am, g[8], bm, g[10], 0.0f, ym, g[12]);
        else
            ((sgemm32_fn)(intptr_t)g[0])(101, ta, tb, (int32_t)rows, (int32_t)g[5], (int32_t)g[6], alpha, am, (int32_t)g[8],
                                         bm, (int32_t)g[10], 0.0f, ym, (int32_t)g[12]);
    }
    return 0;
}

/* lowp gemm (lowp.c): kind, a, lda, bp, bp_len, bias, y, ldy, M, K, N, act, the bits of p0 and p1:
 * [lo, hi) are rows */
static int job_lowp_gemm(const int64_t *g, int64_t lo, int64_t hi)
{
    return aioge_lowp_gemm((int)g[0], (const float *)(intptr_t)g[1], g[2], (const uint16_t *)(intptr_t)g[3], g[4],
                           (const float *)(intptr_t)g[5], (float *)(intptr_t)g[6], g[7], g[8], g[9], g[10], (int)g[11],
                           aioge_float_of(g[12]), aioge_float_of(g[13]), lo, hi);
}

/* lowp round (lowp.c): kind, x, y: [lo, hi) are elements */
static int job_lowp_round(const int64_t *g, int64_t lo, int64_t hi)
{
    aioge_lowp_round_f32((int)g[0], (const float *)(intptr_t)g[1] + lo, (float *)(intptr_t)g[2] + lo, hi - lo);
    return 0;
}

/* By aioge.h's job numbers: a table out of step with them does not compile. */
/* a conv's residual: y = act(a + z): a, z, y, act, the bits of p0 and p1, n: [lo, hi) are
 * elements (FusedConv's Z, added while the output is hot) */
static int job_residual(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *a = (const float *)(intptr_t)g[0], *z = (const float *)(intptr_t)g[1];
    float *y = (float *)(intptr_t)g[2];
    if (hi > g[6])
        return AIOGE_EGEOMETRY;
    if (!g[3])
        for (int64_t i = lo; i < hi; i++)
            y[i] = a[i] + z[i];
    else
        aioge_act_span(a + lo, z + lo, y + lo, hi - lo, (int)g[3], aioge_float_of(g[4]), aioge_float_of(g[5]));
    return 0;
}

/* JOB_ELEMWISE's dtypes: 0 float32, 1 int64, 2 int32, 3 bool (a byte), 4 float64 */
#define EW_LOAD(T, p, t)                                                                                               \
    ((t) == 0 ? (T) * (const float *)(p)                                                                               \
     : (t) == 1 ? (T) * (const int64_t *)(p)                                                                           \
     : (t) == 2 ? (T) * (const int32_t *)(p)                                                                           \
     : (t) == 3 ? (T)(*(const uint8_t *)(p) != 0)                                                                      \
                : (T) * (const double *)(p))

static void ew_cast(char *y, int yt, const char *a, int at)
{
    switch (yt) {
    case 0: *(float *)y = EW_LOAD(float, a, at); break;
    case 1: *(int64_t *)y = EW_LOAD(int64_t, a, at); break;
    case 2: *(int32_t *)y = EW_LOAD(int32_t, a, at); break;
    case 3: *(uint8_t *)y = at == 0 ? *(const float *)a != 0 : at == 4 ? *(const double *)a != 0 : EW_LOAD(int64_t, a, at) != 0; break;
    default: *(double *)y = EW_LOAD(double, a, at);
    }
}

/* y[i] = a[i] op b[i] (op 5 add, 6 sub, 7 mul, 8 div) over n float32, a or b read in place or
 * (byte step 0) one value: a loop per case, so that each vectorises (one rounding an operation,
 * as the per-value loop of job_elemwise) */
static void ew_arith_row(int op, float *y, const float *a, int64_t sa, const float *b, int64_t sb,
                         int64_t n)
{
#define EW_ROW(E)                                                                                                      \
    if (sa && sb)                                                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                                              \
            const float u = a[i], v = b[i];                                                                            \
            y[i] = E;                                                                                                  \
        }                                                                                                              \
    else if (sa) {                                                                                                     \
        const float v = b[0];                                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                                              \
            const float u = a[i];                                                                                      \
            y[i] = E;                                                                                                  \
        }                                                                                                              \
    } else if (sb) {                                                                                                   \
        const float u = a[0];                                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                                              \
            const float v = b[i];                                                                                      \
            y[i] = E;                                                                                                  \
        }                                                                                                              \
    } else {                                                                                                           \
        const float u = a[0], v = b[0], r = E;                                                                         \
        for (int64_t i = 0; i < n; i++)                                                                                \
            y[i] = r;                                                                                                  \
    }
    switch (op) {
    case 5: EW_ROW(u + v) break;
    case 6: EW_ROW(u - v) break;
    case 7: EW_ROW(u * v) break;
    default: EW_ROW(u / v) break;
    }
#undef EW_ROW
}

/* Where over a row of 4-byte values: y[i] = c[i] ? a[i] : b[i], each read in place or (step 0)
 * one value; the values' bits copied */
static void ew_where_row(uint32_t *y, const uint8_t *c, int64_t sc, const uint32_t *a, int64_t sa, const uint32_t *b,
                         int64_t sb, int64_t n)
{
    /* unit conditions, each value in place or one: a loop per case, both sides loaded and one
     * picked, so that each vectorises (GPT-2's Where(IsNaN(softmax), 0, softmax): 247 -> 40 us) */
#define EW_PICK(U, V)                                                                                                      _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                                                    {                                                                                                                          const uint32_t u = (U), v = (V);                                                                                       y[i] = c[i] ? u : v;                                                                                               }
    if (sc == 1 && sa == 1 && sb == 1)
        EW_PICK(a[i], b[i])
    else if (sc == 1 && sa == 0 && sb == 1)
        EW_PICK(a[0], b[i])
    else if (sc == 1 && sa == 1 && sb == 0)
        EW_PICK(a[i], b[0])
    else
        for (int64_t i = 0; i < n; i++)
            y[i] = c[i * sc] ? a[i * sa] : b[i * sb];
#undef EW_PICK
}

/* y = op(a, b, c) over operands broadcast by their byte strides: op 0 cast a to y's dtype, 1 and,
 * 2 or, 3 xor (bools), 4 where (a a bool; b, c of y's dtype), 5 add, 6 sub, 7 mul, 8 div (float32,
 * each rounded as numpy's ufunc rounds it: one operation a statement; add, sub and mul also of
 * int64 or int32, wrapping as numpy's do), 9 ==, 10 <, 11 <=, 12 >, 13 >=
 * (a bool y; as doubles when either side is a float, which holds float32/64 exactly, else as int64:
 * numpy's promotion), 14 not (a bool), 15 sqrt a, 16 1 / a (float32), 17 isnan a (float32/64 to a bool). Arguments: op, y, y's dtype, 6
 * sizes, y's 6 byte strides (a slice: Concat's), then per operand its address, dtype and 6 byte strides: [lo, hi) index the first axis */
static int job_elemwise(const int64_t *g, int64_t lo, int64_t hi)
{
    static const int64_t SIZE[] = {4, 8, 4, 1, 8};
    const int op = (int)g[0], yt = (int)g[2];
    const int64_t *n = g + 3, *ys = g + 9, *o[3] = {g + 15, g + 23, g + 31};
    if (op < 0 || op > 17 || yt < 0 || yt > 4 || o[0][1] < 0 || o[0][1] > 4 || o[1][1] < 0 || o[1][1] > 4)
        return AIOGE_EGEOMETRY;
    const int64_t item = SIZE[yt];
    const int ta = (int)o[0][1], tb = (int)o[1][1], as_float = ta == 0 || ta == 4 || tb == 0 || tb == 4;
    /* a copy of rows contiguous on both sides (Concat's slices, a cast to the same dtype) */
    const int copy = op == 0 && o[0][1] == yt && ys[5] == item && o[0][7] == item;
    /* float32 arithmetic along rows of y with each operand a row or one value: vector loops */
    const int arith = op >= 5 && op <= 8 && yt == 0 && ys[5] == 4 && (o[0][7] | 4) == 4 && (o[1][7] | 4) == 4;
    for (int64_t i0 = lo; i0 < hi; i0++)
        for (int64_t i1 = 0; i1 < n[1]; i1++)
            for (int64_t i2 = 0; i2 < n[2]; i2++)
                for (int64_t i3 = 0; i3 < n[3]; i3++)
                    for (int64_t i4 = 0; i4 < n[4]; i4++) {
                        const char *r[3];
                        for (int k = 0; k < 3; k++) {
                            const int64_t *s = o[k] + 2;
                            r[k] = (const char *)(intptr_t)o[k][0] + i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3] + i4 * s[4];
                        }
                        char *yr = (char *)(intptr_t)g[1] + i0 * ys[0] + i1 * ys[1] + i2 * ys[2] + i3 * ys[3] + i4 * ys[4];
                        if (copy) {
                            memcpy(yr, r[0], (size_t)(n[5] * item));
                            continue;
                        }
                        if (op == 4 && item == 4 && ys[5] == 4 && (o[0][7] | 1) == 1 && (o[1][7] | 4) == 4 && (o[2][7] | 4) == 4) {
                            ew_where_row((uint32_t *)yr, (const uint8_t *)r[0], o[0][7], (const uint32_t *)r[1], o[1][7] / 4,
                                         (const uint32_t *)r[2], o[2][7] / 4, n[5]);
                            continue;
                        }
                        if (op == 17 && ta == 0 && o[0][7] == 4 && ys[5] == 1) {
                            const float *x = (const float *)r[0];
                            const int64_t w = n[5]; /* not re-read past each byte stored: the loop vectorises */
#pragma omp simd
                            for (int64_t i5 = 0; i5 < w; i5++)
                                yr[i5] = x[i5] != x[i5]; /* NaN alone is unequal to itself */
                            continue;
                        }
                        if (arith) {
                            ew_arith_row(op, (float *)yr, (const float *)r[0], o[0][7], (const float *)r[1], o[1][7], n[5]);
                            continue;
                        }
                        for (int64_t i5 = 0; i5 < n[5]; i5++) {
                            const char *p[3] = {r[0] + i5 * o[0][7], r[1] + i5 * o[1][7], r[2] + i5 * o[2][7]};
                            char *y = yr + i5 * ys[5];
                            const uint8_t u = op && op < 4 ? *(const uint8_t *)p[0] != 0 : 0;
                            const uint8_t v = op && op < 4 ? *(const uint8_t *)p[1] != 0 : 0;
                            switch (op) {
                            case 0: ew_cast(y, yt, p[0], (int)o[0][1]); break;
                            case 1: *(uint8_t *)y = u & v; break;
                            case 2: *(uint8_t *)y = u | v; break;
                            case 3: *(uint8_t *)y = u ^ v; break;
                            case 4: memcpy(y, *(const uint8_t *)p[0] ? p[1] : p[2], (size_t)item); break;
                            case 5:
                            case 6:
                            case 7:
                                if (yt == 0) {
                                    const float a = *(const float *)p[0], b = *(const float *)p[1];
                                    *(float *)y = op == 5 ? a + b : op == 6 ? a - b : a * b;
                                } else { /* unsigned: wraps as numpy's int32 and int64 do */
                                    const uint64_t a = (uint64_t)EW_LOAD(int64_t, p[0], ta), b = (uint64_t)EW_LOAD(int64_t, p[1], tb);
                                    const uint64_t r = op == 5 ? a + b : op == 6 ? a - b : a * b;
                                    if (yt == 1)
                                        *(int64_t *)y = (int64_t)r;
                                    else
                                        *(int32_t *)y = (int32_t)(uint32_t)r;
                                }
                                break;
                            case 8: *(float *)y = *(const float *)p[0] / *(const float *)p[1]; break;
                            case 14: *(uint8_t *)y = *(const uint8_t *)p[0] == 0; break;
                            case 15: *(float *)y = sqrtf(*(const float *)p[0]); break;
                            case 16: *(float *)y = 1.0f / *(const float *)p[0]; break;
                            case 17: *(uint8_t *)y = isnan(EW_LOAD(double, p[0], ta)) != 0; break;
                            default: {
                                int c; /* -1, 0, 1, or 2 when unordered (a NaN: every comparison false) */
                                if (as_float) {
                                    const double a = EW_LOAD(double, p[0], ta), b = EW_LOAD(double, p[1], tb);
                                    c = a < b ? -1 : a > b ? 1 : a == b ? 0 : 2;
                                } else {
                                    const int64_t a = EW_LOAD(int64_t, p[0], ta), b = EW_LOAD(int64_t, p[1], tb);
                                    c = a < b ? -1 : a > b;
                                }
                                *(uint8_t *)y = op == 9    ? c == 0
                                                : op == 10 ? c == -1
                                                : op == 11 ? c == -1 || c == 0
                                                : op == 12 ? c == 1
                                                           : c == 1 || c == 0;
                            }
                            }
                        }
                    }
    return 0;
}

/* out[o, j] = data[o, idx[j]] over blocks of `inner` bytes, idx[j] a tuple of k int64 indices
 * into k axes (Gather: k = 1; GatherND: the leading k), each negative one counted from its axis's
 * end. Arguments: data, out, the bytes between outer blocks of data, inner bytes, idx, m index
 * tuples, k, k axis sizes (up to 6): [lo, hi) are outer blocks. An index outside its axis:
 * AIOGE_EINDEX (the blocks before it written). */
static int job_gather(const int64_t *g, int64_t lo, int64_t hi)
{
    const char *data = (const char *)(intptr_t)g[0];
    char *out = (char *)(intptr_t)g[1];
    const int64_t ostride = g[2], inner = g[3], *idx = (const int64_t *)(intptr_t)g[4], m = g[5], k = g[6];
    const int64_t *dims = g + 7;
    if (k < 1 || k > 6)
        return AIOGE_EGEOMETRY;
    for (int64_t b = lo; b < hi; b++)
        for (int64_t j = 0; j < m; j++) {
            int64_t off = 0;
            for (int64_t d = 0; d < k; d++) {
                int64_t i = idx[j * k + d];
                if (i < 0)
                    i += dims[d];
                if (i < 0 || i >= dims[d])
                    return AIOGE_EINDEX;
                off = off * dims[d] + i;
            }
            memcpy(out + (b * m + j) * inner, data + b * ostride + off * inner, (size_t)inner);
        }
    return 0;
}

static const job_fn JOBS[] = {
    [JOB_GEMM] = job_gemm,           [JOB_CONV_DIRECT] = job_conv_direct, [JOB_CONV_T] = job_conv_t,
    [JOB_DEPTHWISE] = job_depthwise, [JOB_ACTIVATION] = job_activation,   [JOB_PACK] = job_pack,
    [JOB_GEMV_T] = job_gemv_t,       [JOB_CHAIN] = job_chain,             [JOB_POOL] = job_pool,
    [JOB_CONV_IMAGES] = job_conv_images, [JOB_SQUEEZE] = job_squeeze,     [JOB_CONV_GROUPED] = job_conv_grouped,
    [JOB_GEMV_N] = job_gemv_n,       [JOB_CONV_LOCAL] = job_conv_local,   [JOB_SOFTMAX] = job_softmax,
    [JOB_LAYERNORM] = job_layernorm, [JOB_PHASES] = job_phases,           [JOB_GLOBAL_MEAN] = job_global_mean,
    [JOB_STRIDED] = job_strided,     [JOB_BINARY] = job_binary,           [JOB_SGEMM] = job_sgemm,
    [JOB_RESIDUAL] = job_residual,
    [JOB_QGEMM] = aioge_qgemm_rows,
    [JOB_LOWP_GEMM] = job_lowp_gemm, [JOB_LOWP_ROUND] = job_lowp_round,
    [JOB_ELEMWISE] = job_elemwise,   [JOB_GATHER] = job_gather,
    [JOB_CUMULATIVE] = aioge_cumulative, [JOB_ARG_REDUCE] = aioge_arg_reduce, [JOB_GATHER_ELEMENTS] = aioge_gather_elements,
    [JOB_WINOGRAD] = job_winograd,   [JOB_IRB] = aioge_irb,       [JOB_RNN] = aioge_rnn_job,
};
_Static_assert(sizeof JOBS / sizeof JOBS[0] == AIOGE_NJOBS, "a job of aioge.h has no entry in JOBS");

/* Job `job` over [lo, hi) of its range, by the one error rule: 0, or a negative code (a job that
 * answered a positive code, as some once did for "no memory", counts as that error too). */
int aioge_job(int job, const int64_t *args, int64_t lo, int64_t hi)
{
    if (job < 0 || job >= AIOGE_NJOBS || !JOBS[job])
        return AIOGE_EJOB;
    const int r = JOBS[job](args, lo, hi);
    return r > 0 ? -r : r;
}
