/* ONNX RNN, GRU and LSTM in float32: the recurrence over time steps, one direction at a time.
 *
 * JOB_RNN (below) computes the input projection X W^T of every time step (xw: a row of D * G * H
 * values per (t, b), direction d at column d * G * H) through the BLAS numpy links, unless the
 * caller did; then each step is the product of the batch's hidden rows with R^T, packed once per
 * weight into panels of 16 columns, a panel being one gate's columns for a block of 16 hidden
 * units (pk[ub][g][k][16], zero past H), followed by the gates of each row in a few vectorised
 * passes over the units while they sit in L1. Rows past their sequence length keep their state
 * and write zeros to Y, as ONNX says; a reverse direction reads each row's steps from its own
 * length backwards.
 *
 * Two threads may share each step of a direction (the job's team form): each takes half of the
 * unit blocks, so half of R^T's panels and all of those units' gates, meeting once a step (twice
 * for GRU without linear_before_reset, whose candidate needs every unit's r h) with the step's
 * hidden rows double-buffered in hs. A direction's R^T of more than a core's L2 (4 MB for LSTM
 * at H 512) streamed from L3 every step at 161 us; halved, each core's half mostly stays in its
 * L2 (onnxruntime splits a step's GEMM over its threads the same way): bidirectional LSTM,
 * batch 1, 512 steps, H 512 went 80 -> 39 ms (ort 43).
 *
 * Geometry (aioge.h's RNN_ slots): cell (0 RNN, 1 GRU, 2 LSTM), seq, batch, hidden, directions,
 * reverse (direction 0 runs backwards: "reverse"), linear_before_reset, input_forget, has_clip,
 * the strides of xw per step and per batch row, Y's per step, row and direction, then three
 * activation codes per direction (aioge.kernels.rnn's _CODES). fp: clip, then (alpha, beta) per
 * activation slot (d * 3 + slot). pk: R (D, G*H, H) as aioge_rnn_pack packed it (once per weight);
 * bias: (D, 2*G*H) or NULL; peep: (D, 3*H) or NULL; lens: (batch) or NULL (every row the whole
 * sequence); h (and c for LSTM): (D, batch, H) holding the initial states, left holding the last
 * ones.
 */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"
#include "mathf.h"
#include "spin.h"

#define NP 16 /* columns of a packed panel of R^T: two 8-float vectors */

/* The AVX-512 tier's -mtune=native (Sapphire Rapids) prefers 256-bit vectors for loops the compiler
 * vectorises: the gates' loops (omp simd) took ymm registers, half of what the tier has. */
#ifdef __AVX512F__
#define WIDE __attribute__((target("prefer-vector-width=512")))
#else
#define WIDE
#endif

typedef float v8 __attribute__((vector_size(32), aligned(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

enum { A_RELU, A_TANH, A_SIGMOID, A_AFFINE, A_LEAKY, A_THRESH, A_SCALEDTANH, A_HARDSIGMOID, A_ELU, A_SOFTSIGN,
       A_SOFTPLUS, A_COUNT };

/* tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)), within 1e-7 absolute. */
static inline float tanh_f32(float x)
{
    float t = 1.0f - 2.0f / (exp_f32(2.0f * fabsf(x)) + 1.0f);
    return copysignf(t, x);
}

#define ACT_EACH(EXPR) _Pragma("omp simd") for (int64_t i = 0; i < n; i++) { float x = v[i]; v[i] = (EXPR); }

/* v = act(v) in place over n values; the switch is outside the loops so each vectorises. */
WIDE static void act_apply(float *v, int64_t n, int64_t code, float a, float b)
{
    switch (code) {
    case A_RELU: ACT_EACH(x > 0.0f || x != x ? x : 0.0f) break; /* NaN stays NaN, as numpy's maximum */
    case A_TANH: ACT_EACH(tanh_f32(x)) break;
    case A_SIGMOID: ACT_EACH(1.0f / (1.0f + exp_f32(-x))) break;
    case A_AFFINE: ACT_EACH(a * x + b) break;
    case A_LEAKY: ACT_EACH(x >= 0.0f ? x : a * x) break;
    case A_THRESH: ACT_EACH(x > a ? x : 0.0f) break;
    case A_SCALEDTANH: ACT_EACH(a * tanh_f32(b * x)) break;
    case A_HARDSIGMOID: ACT_EACH(fminf(fmaxf(a * x + b, 0.0f), 1.0f)) break;
    case A_ELU: ACT_EACH(x >= 0.0f ? x : a * (exp_f32(x) - 1.0f)) break;
    case A_SOFTSIGN: ACT_EACH(x / (1.0f + fabsf(x))) break;
    default: /* softplus log(1 + e^x) = max(x, 0) + log1p(e^-|x|): libm's log1pf, scalar */
        for (int64_t i = 0; i < n; i++) v[i] = fmaxf(v[i], 0.0f) + log1pf(exp_f32(-fabsf(v[i])));
        break;
    }
}

WIDE static void clip_apply(float *v, int64_t n, int has, float clip)
{
    if (has)
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) v[i] = fminf(fmaxf(v[i], -clip), clip);
}

/* Panel (ub, g) of a set of G gates starting at gate g0: the columns (g0 + g) * n + ub * NP + j
 * of R^T (R's rows), j < NP, each of n values: pk[(ub * G + g)][kk][j], zero past unit n. */
static void pack(const float *r, int64_t n, int64_t g0, int64_t G, float *pk)
{
    const int64_t units = (n + NP - 1) / NP;
    for (int64_t ub = 0; ub < units; ub++)
        for (int64_t g = 0; g < G; g++)
            for (int64_t kk = 0; kk < n; kk++)
                for (int64_t j = 0; j < NP; j++) {
                    const int64_t u = ub * NP + j;
                    pk[((ub * G + g) * n + kk) * NP + j] = u < n ? r[((g0 + g) * n + u) * n + kk] : 0.0f;
                }
}

/* out[b][col(p) ..+NP) = h[b] . panel p over k, panels [p0, p1), rows [0, rows); panel p = (ub, g)
 * lands at column g * npad + ub * NP (its gate's block of npad columns). Four rows by one panel
 * (eight accumulators), the leftover rows one at a time by four panels (eight accumulators too). */
__attribute__((unused)) static void recur(const float *h, int64_t rows, int64_t k, const float *pk, int64_t p0, int64_t p1, int64_t G,
                  int64_t npad, float *out, int64_t ld)
{
#define COL(p) (((p) % G) * npad + ((p) / G) * NP)
    int64_t b = 0;
    const int64_t blocks = rows / 4;
    for (int64_t p = p0; p < p1; p++) /* a panel (k x 16 values) stays in L1 for every block */
        for (b = 0; b < 4 * blocks; b += 4) {
            const float *h0 = h + b * k, *h1 = h0 + k, *h2 = h1 + k, *h3 = h2 + k;
            const float *w = pk + p * k * NP;
            v8 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
            for (int64_t kk = 0; kk < k; kk++) {
                v8 w0 = *(const v8 *)(w + kk * NP), w1 = *(const v8 *)(w + kk * NP + 8);
#ifdef __AVX__ /* a v8 fits one register from AVX on (the baseline tier has none that wide) */
                __asm__("" : "+x"(w0), "+x"(w1)); /* in registers: not reloaded by each multiply-add */
#endif
                a00 += h0[kk] * w0, a01 += h0[kk] * w1;
                a10 += h1[kk] * w0, a11 += h1[kk] * w1;
                a20 += h2[kk] * w0, a21 += h2[kk] * w1;
                a30 += h3[kk] * w0, a31 += h3[kk] * w1;
            }
            float *o = out + b * ld + COL(p);
            *(v8u *)o = a00, *(v8u *)(o + 8) = a01;
            *(v8u *)(o + ld) = a10, *(v8u *)(o + ld + 8) = a11;
            *(v8u *)(o + 2 * ld) = a20, *(v8u *)(o + 2 * ld + 8) = a21;
            *(v8u *)(o + 3 * ld) = a30, *(v8u *)(o + 3 * ld + 8) = a31;
        }
    for (b = 4 * blocks; b < rows; b++) {
        const float *hb = h + b * k;
        float *o = out + b * ld;
        int64_t p = p0;
        for (; p + 4 <= p1; p += 4) {
            const float *w = pk + p * k * NP;
            v8 a[8] = {{0}};
            for (int64_t kk = 0; kk < k; kk++) {
                const float hv = hb[kk];
                for (int q = 0; q < 4; q++) {
                    const float *wq = w + (q * k + kk) * NP;
                    a[2 * q] += hv * *(const v8 *)wq;
                    a[2 * q + 1] += hv * *(const v8 *)(wq + 8);
                }
            }
            for (int q = 0; q < 4; q++)
                *(v8u *)(o + COL(p + q)) = a[2 * q], *(v8u *)(o + COL(p + q) + 8) = a[2 * q + 1];
        }
        for (; p < p1; p++) {
            const float *w = pk + p * k * NP;
            v8 a0 = {0}, a1 = {0};
            for (int64_t kk = 0; kk < k; kk++) {
                a0 += hb[kk] * *(const v8 *)(w + kk * NP);
                a1 += hb[kk] * *(const v8 *)(w + kk * NP + 8);
            }
            *(v8u *)(o + COL(p)) = a0, *(v8u *)(o + COL(p) + 8) = a1;
        }
    }
#undef COL
}

#ifdef __AVX512F__
typedef float v16 __attribute__((vector_size(64), aligned(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* recur with a panel's row as one 16-float vector (AVX-512; the same sums lane by lane): eight
 * rows by one panel (eight accumulators, the panel's row loaded once for the eight), then four,
 * then each leftover row by eight panels at a time. */
static void recur16(const float *h, int64_t rows, int64_t k, const float *pk, int64_t p0, int64_t p1, int64_t G,
                    int64_t npad, float *out, int64_t ld)
{
#define COL(p) (((p) % G) * npad + ((p) / G) * NP)
    const int64_t r8 = rows / 8 * 8, r4 = rows - r8 >= 4 ? r8 + 4 : r8;
    int64_t p2 = p0;
    if (r8) /* eight rows by two panels: 16 accumulators, 10 loads (8 of them broadcasts) a 16 FMAs */
        for (; p2 + 2 <= p1; p2 += 2) {
            const float *w = pk + p2 * k * NP;
            for (int64_t b = 0; b < r8; b += 8) {
                const float *hb = h + b * k;
                v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
                v16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0}, c6 = {0}, c7 = {0};
                for (int64_t kk = 0; kk < k; kk++) {
                    const v16 wv = *(const v16u *)(w + kk * NP), wu = *(const v16u *)(w + (k + kk) * NP);
                    float x = hb[kk];
                    a0 += x * wv, c0 += x * wu, x = hb[k + kk], a1 += x * wv, c1 += x * wu;
                    x = hb[2 * k + kk], a2 += x * wv, c2 += x * wu, x = hb[3 * k + kk], a3 += x * wv, c3 += x * wu;
                    x = hb[4 * k + kk], a4 += x * wv, c4 += x * wu, x = hb[5 * k + kk], a5 += x * wv, c5 += x * wu;
                    x = hb[6 * k + kk], a6 += x * wv, c6 += x * wu, x = hb[7 * k + kk], a7 += x * wv, c7 += x * wu;
                }
                float *o = out + b * ld + COL(p2), *q = out + b * ld + COL(p2 + 1);
                *(v16u *)o = a0, *(v16u *)(o + ld) = a1, *(v16u *)(o + 2 * ld) = a2, *(v16u *)(o + 3 * ld) = a3;
                *(v16u *)(o + 4 * ld) = a4, *(v16u *)(o + 5 * ld) = a5, *(v16u *)(o + 6 * ld) = a6, *(v16u *)(o + 7 * ld) = a7;
                *(v16u *)q = c0, *(v16u *)(q + ld) = c1, *(v16u *)(q + 2 * ld) = c2, *(v16u *)(q + 3 * ld) = c3;
                *(v16u *)(q + 4 * ld) = c4, *(v16u *)(q + 5 * ld) = c5, *(v16u *)(q + 6 * ld) = c6, *(v16u *)(q + 7 * ld) = c7;
            }
            if (r4 > r8) { /* the four rows after them, these two panels */
                const float *hb = h + r8 * k;
                v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
                for (int64_t kk = 0; kk < k; kk++) {
                    const v16 wv = *(const v16u *)(w + kk * NP), wu = *(const v16u *)(w + (k + kk) * NP);
                    a0 += hb[kk] * wv, a1 += hb[k + kk] * wv, a2 += hb[2 * k + kk] * wv, a3 += hb[3 * k + kk] * wv;
                    c0 += hb[kk] * wu, c1 += hb[k + kk] * wu, c2 += hb[2 * k + kk] * wu, c3 += hb[3 * k + kk] * wu;
                }
                float *o = out + r8 * ld + COL(p2), *q = out + r8 * ld + COL(p2 + 1);
                *(v16u *)o = a0, *(v16u *)(o + ld) = a1, *(v16u *)(o + 2 * ld) = a2, *(v16u *)(o + 3 * ld) = a3;
                *(v16u *)q = c0, *(v16u *)(q + ld) = c1, *(v16u *)(q + 2 * ld) = c2, *(v16u *)(q + 3 * ld) = c3;
            }
        }
    for (int64_t p = p2; p < p1; p++) {
        const float *w = pk + p * k * NP;
        for (int64_t b = 0; b < r8; b += 8) {
            const float *hb = h + b * k;
            v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
            for (int64_t kk = 0; kk < k; kk++) {
                const v16 wv = *(const v16u *)(w + kk * NP);
                a0 += hb[kk] * wv, a1 += hb[k + kk] * wv, a2 += hb[2 * k + kk] * wv, a3 += hb[3 * k + kk] * wv;
                a4 += hb[4 * k + kk] * wv, a5 += hb[5 * k + kk] * wv, a6 += hb[6 * k + kk] * wv, a7 += hb[7 * k + kk] * wv;
            }
            float *o = out + b * ld + COL(p);
            *(v16u *)o = a0, *(v16u *)(o + ld) = a1, *(v16u *)(o + 2 * ld) = a2, *(v16u *)(o + 3 * ld) = a3;
            *(v16u *)(o + 4 * ld) = a4, *(v16u *)(o + 5 * ld) = a5, *(v16u *)(o + 6 * ld) = a6, *(v16u *)(o + 7 * ld) = a7;
        }
        if (r4 > r8) {
            const float *hb = h + r8 * k;
            v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t kk = 0; kk < k; kk++) {
                const v16 wv = *(const v16u *)(w + kk * NP);
                a0 += hb[kk] * wv, a1 += hb[k + kk] * wv, a2 += hb[2 * k + kk] * wv, a3 += hb[3 * k + kk] * wv;
            }
            float *o = out + r8 * ld + COL(p);
            *(v16u *)o = a0, *(v16u *)(o + ld) = a1, *(v16u *)(o + 2 * ld) = a2, *(v16u *)(o + 3 * ld) = a3;
        }
    }
    for (int64_t b = r4; b < rows; b++) {
        const float *hb = h + b * k;
        float *o = out + b * ld;
        int64_t p = p0;
        for (; p + 8 <= p1; p += 8) {
            const float *w = pk + p * k * NP;
            v16 a[8] = {{0}};
            for (int64_t kk = 0; kk < k; kk++) {
                const float hv = hb[kk];
                for (int q = 0; q < 8; q++)
                    a[q] += hv * *(const v16u *)(w + (q * k + kk) * NP);
            }
            for (int q = 0; q < 8; q++)
                *(v16u *)(o + COL(p + q)) = a[q];
        }
        for (; p < p1; p++) {
            const float *w = pk + p * k * NP;
            v16 a0 = {0};
            for (int64_t kk = 0; kk < k; kk++)
                a0 += hb[kk] * *(const v16u *)(w + kk * NP);
            *(v16u *)(o + COL(p)) = a0;
        }
    }
#undef COL
}
#define recur recur16
#endif

typedef struct {
    const int64_t *geo;
    const float *fp;
    int64_t cell, seq, batch, n, gh;
    int64_t g1, g2;  /* gates in the first panel set and the second (GRU's h gate, multiplied after r) */
    int64_t units;   /* blocks of NP hidden units */
    int64_t npad;    /* units * NP: a gate's columns in a step's product */
    int64_t packed;  /* floats of one direction's packed R^T */
} Rnn;

/* The geometry in s, checked: 0, or -1 when it is not one rnn.c runs. */
static int setup(const int64_t *geo, const float *fp, Rnn *s)
{
    if (!geo)
        return AIOGE_EGEOMETRY;
    *s = (Rnn){geo, fp, geo[RNN_CELL], geo[RNN_SEQ], geo[RNN_BATCH], geo[RNN_HIDDEN], 0, 0, 0, 0, 0, 0};
    if (s->cell < 0 || s->cell > 2 || s->seq < 0 || s->batch < 0 || s->n < 0 || geo[RNN_DIRS] < 1 || geo[RNN_DIRS] > 2)
        return AIOGE_EGEOMETRY;
    if (s->n > (INT64_C(1) << 16) || s->batch > (INT64_C(1) << 30) || s->seq > (INT64_C(1) << 40))
        return AIOGE_EGEOMETRY;
    for (int i = RNN_XW_ST; i <= RNN_Y_SD; i++)
        if (geo[i] < 0)
            return AIOGE_EGEOMETRY;
    for (int i = 0; i < 3 * geo[RNN_DIRS]; i++)
        if (geo[RNN_ACTS + i] < 0 || geo[RNN_ACTS + i] >= A_COUNT)
            return AIOGE_EGEOMETRY;
    s->gh = (s->cell == 0 ? 1 : s->cell == 1 ? 3 : 4) * s->n;
    /* GRU without linear_before_reset multiplies r into h before the candidate's product, so its
     * R^T is two panel sets: z and r's columns, then h's. */
    s->g2 = s->cell == 1 && !geo[RNN_LBR];
    s->g1 = s->gh / (s->n ? s->n : 1) - s->g2;
    s->units = (s->n + NP - 1) / NP;
    s->npad = s->units * NP;
    s->packed = s->units * (s->g1 + s->g2) * NP * s->n;
    return 0;
}

/* The floats of R^T packed for every direction, or -1 on a bad geometry. */
int64_t aioge_rnn_packed_floats(const int64_t *geo)
{
    Rnn s;
    return setup(geo, NULL, &s) ? AIOGE_EGEOMETRY : s.packed * geo[RNN_DIRS];
}

/* R (directions, G*H, H) packed for aioge_rnn into pk, which holds `floats` floats (at least
 * aioge_rnn_packed_floats(geo)); 0, or -1 on a bad geometry or a short pk. */
int aioge_rnn_pack(const int64_t *geo, const float *r, float *pk, int64_t floats)
{
    Rnn s;
    if (setup(geo, NULL, &s) || floats < s.packed * geo[RNN_DIRS] || (s.packed && (!r || !pk)))
        return AIOGE_EGEOMETRY;
    for (int64_t d = 0; d < geo[RNN_DIRS]; d++) {
        const float *rd = r + d * s.gh * s.n;
        float *pd = pk + d * s.packed;
        pack(rd, s.n, 0, s.g1, pd);
        if (s.g2)
            pack(rd, s.n, s.g1, s.g2, pd + s.units * s.g1 * NP * s.n);
    }
    return 0;
}

/* JOB_RNN: one recurrent layer, the input projection included (aioge.h's RJ_ argument slots).
 *
 * Its range is the layer's directions (the two of a bidirectional one on two cores, par.c's
 * chunks: a helper that comes late leaves the second to the caller), or, with a team block, two
 * parts that share each step of one direction at a time by hidden units: the first part takes
 * the lower half of the unit blocks (so half of R^T's panels and all of those units' gates), the
 * second the upper half. Each direction runs as stages, the first its projection (the columns of
 * a half's units: xw = X W^T through the BLAS numpy links, when sgemm is given; else the caller
 * computed xw) and the copy of the initial state, then each step (two stages for GRU without
 * linear_before_reset, whose candidate needs every unit's r h). A stage's two halves are claimed,
 * not owned: a thread claims its own half of a stage, then the other half too if no thread has
 * claimed it by then, runs what it claimed and waits until both halves are done. So a partner
 * that has not started (a helper woken late, or its core held by another process's spinning
 * threads: onnxruntime's pool beside us in one process) or that was descheduled between two
 * steps costs no wait: the caller runs both halves of the stages it finds unclaimed, and the
 * partner joins at the stage it finds, whenever it comes. Whole (range [0, 2) in one call) the
 * caller runs both halves of every stage in turn, the same sums as split.
 *
 * The team block: 32 int64s zeroed before each run, the claims (stages claimed) and dones (stages
 * done) of the two halves, each on its own cache line. hs: aioge_rnn_shared_floats(geo) floats,
 * per direction the hidden rows twice (read by one step and written by it), GRU's r h and the
 * step's products (g1: the first panel set's, g2: GRU's candidate's), shared by both halves. */
typedef void (*sgemm32_fn)(int, int, int, int32_t, int32_t, int32_t, float, const float *, int32_t, const float *, int32_t,
                           float, float *, int32_t);
typedef void (*sgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t,
                           float, float *, int64_t);

typedef struct {
    Rnn s;
    const float *x, *w, *pk, *bias, *peep;
    const int64_t *lens;
    float *xw, *y, *h, *c, *hs;
    int64_t in, rows, wide, dirs;
    intptr_t sgemm;
    int64_t rows3;  /* 3 * batch * n rounded up to 16 floats: where a direction's products start */
    int64_t region; /* floats of one direction's shared rows and products */
    int64_t P, K;   /* stages a step (2: GRU without linear_before_reset, else 1); a direction's */
} Job;

#define T_CLAIM(h) (16 * (h))
#define T_DONE(h) (16 * (h) + 8)

static int64_t shared_floats(const Rnn *s, int64_t *rows3)
{
    const int64_t r3 = (3 * s->batch * s->n + 15) / 16 * 16;
    if (rows3)
        *rows3 = r3;
    return r3 + s->batch * (s->g1 + s->g2) * s->npad;
}

/* The floats of JOB_RNN's shared rows (hs) for every direction, or -1 on a bad geometry. */
int64_t aioge_rnn_shared_floats(const int64_t *geo)
{
    Rnn s;
    return setup(geo, NULL, &s) ? AIOGE_EGEOMETRY : shared_floats(&s, NULL) * geo[RNN_DIRS];
}

/* xw's columns of gate rows [col, col + cols) of direction d: X W_d[col..]^T, every row. */
static void project(const Job *J, int64_t d, int64_t col, int64_t cols)
{
    const int64_t gh = J->s.gh, ld = J->dirs * gh;
    const float *wd = J->w + (d * gh + col) * J->in;
    float *out = J->xw + d * gh + col;
    if (J->in == 0) { /* no inputs: X W^T is zero (not every BLAS writes C when K is 0) */
        for (int64_t r = 0; r < J->rows; r++)
            memset(out + r * ld, 0, (size_t)cols * sizeof(float));
    } else if (J->wide)
        ((sgemm64_fn)J->sgemm)(101, 111, 112, J->rows, cols, J->in, 1.0f, J->x, J->in, wd, J->in, 0.0f, out, ld);
    else
        ((sgemm32_fn)J->sgemm)(101, 111, 112, (int32_t)J->rows, (int32_t)cols, (int32_t)J->in, 1.0f, J->x, (int32_t)J->in, wd,
                               (int32_t)J->in, 0.0f, out, (int32_t)ld);
}

/* Stage k of direction d for the hidden units of blocks [u0, u1): 0 the projection of those
 * units' columns and the initial state's copy; then step (k - 1) / P, its part (k - 1) % P.
 * bx: what every step adds to the projection; bh: GRU's Rbh, kept apart as it meets r. */
WIDE static void stage(const Job *J, int d, int64_t k, int64_t u0, int64_t u1, const float *bx, const float *bh, float *tmp)
{
    const Rnn *s = &J->s;
    const int64_t *geo = s->geo, *lens = J->lens;
    const int64_t n = s->n, B = s->batch, cell = s->cell, npad = s->npad;
    const int64_t j0 = u0 * NP, j1 = u1 * NP < n ? u1 * NP : n, m = j1 - j0;
    if (m <= 0)
        return;
    const int rev = (int)(geo[RNN_REVERSE] || d == 1), lbr = (int)geo[RNN_LBR], couple = (int)geo[RNN_COUPLE];
    const int has_clip = (int)geo[RNN_HAS_CLIP];
    const float clip = s->fp[0];
    const int64_t *code = geo + RNN_ACTS + 3 * d;
    const float *ab = s->fp + 1 + 6 * d;
    const int64_t ld1 = s->g1 * npad, ld2 = npad;
    const float *pk1 = J->pk + d * s->packed, *pk2 = pk1 + s->units * s->g1 * NP * n;
    float *base = J->hs + d * J->region, *hbuf[2] = {base, base + B * n}, *rh = base + 2 * B * n;
    float *g1 = base + J->rows3, *g2 = g1 + B * ld1;
    const float *xw = J->xw + d * s->gh;
    float *y = J->y + d * geo[RNN_Y_SD], *h = J->h + d * B * n, *c = J->c ? J->c + d * B * n : NULL;
    if (k == 0) {
        if (J->sgemm) {
            if (j0 == 0 && m == n)
                project(J, d, 0, s->gh);
            else
                for (int64_t g = 0; g < s->gh / n; g++)
                    project(J, d, g * n + j0, m);
        }
        for (int64_t b = 0; b < B; b++) {
            memcpy(hbuf[0] + b * n + j0, h + b * n + j0, (size_t)m * sizeof(float));
            memset(rh + b * n + j0, 0, (size_t)m * sizeof(float));
        }
        return;
    }
    const int64_t t = (k - 1) / J->P, part = (k - 1) % J->P;
    const float *hin = hbuf[t & 1];
    float *hout = hbuf[(t + 1) & 1];
    const float *pi = J->peep ? J->peep + 3 * d * n + j0 : NULL, *po = pi ? pi + n : NULL, *pf = pi ? pi + 2 * n : NULL;
    if (part == 0) {
        recur(hin, B, n, pk1, u0 * s->g1, u1 * s->g1, s->g1, npad, g1, ld1);
        for (int64_t b = 0; b < B; b++) {
            const int64_t len = lens ? lens[b] : s->seq;
            const float *hp = hin + b * n + j0;
            float *hb = hout + b * n + j0, *gb = g1 + b * ld1 + j0;
            if (t >= len) { /* the state stays; Y's step is zero */
                memcpy(hb, hp, (size_t)m * sizeof(float));
                memset(y + t * geo[RNN_Y_ST] + b * geo[RNN_Y_SB] + j0, 0, (size_t)m * sizeof(float));
                continue;
            }
            const int64_t tt = rev ? len - 1 - t : t;
            const float *xb = xw + tt * geo[RNN_XW_ST] + b * geo[RNN_XW_SB] + j0;
            const int64_t added = cell == 1 ? 2 : s->g1; /* GRU's h gate adds them after r */
            for (int64_t g = 0; g < added; g++) {
                float *gg = gb + g * npad;
                const float *xg = xb + g * n, *bg = bx + g * n + j0;
                _Pragma("omp simd") for (int64_t j = 0; j < m; j++) gg[j] += xg[j] + bg[j];
            }
            if (cell == 0) {
                clip_apply(gb, m, has_clip, clip);
                act_apply(gb, m, code[0], ab[0], ab[1]);
                memcpy(hb, gb, (size_t)m * sizeof(float));
            } else if (cell == 1) { /* z, r: f; r h or r (h Rh^T + Rbh) */
                float *z = gb, *rg = gb + npad;
                clip_apply(z, m, has_clip, clip);
                act_apply(z, m, code[0], ab[0], ab[1]);
                clip_apply(rg, m, has_clip, clip);
                act_apply(rg, m, code[0], ab[0], ab[1]);
                if (lbr) {
                    float *cand = gb + 2 * npad;
                    const float *xh = xb + 2 * n, *bxh = bx + 2 * n + j0, *bhh = bh + 2 * n + j0;
                    _Pragma("omp simd") for (int64_t j = 0; j < m; j++) cand[j] = xh[j] + bxh[j] + rg[j] * (cand[j] + bhh[j]);
                    clip_apply(cand, m, has_clip, clip);
                    act_apply(cand, m, code[1], ab[2], ab[3]);
                    _Pragma("omp simd") for (int64_t j = 0; j < m; j++) hb[j] = (1.0f - z[j]) * cand[j] + z[j] * hp[j];
                } else {
                    float *rhb = rh + b * n + j0;
                    _Pragma("omp simd") for (int64_t j = 0; j < m; j++) rhb[j] = rg[j] * hp[j];
                }
            } else { /* LSTM gates i, o, f, c */
                float *gi = gb, *go = gb + npad, *gf = gb + 2 * npad, *gc = gb + 3 * npad, *cb = c + b * n + j0;
                if (pi) _Pragma("omp simd") for (int64_t j = 0; j < m; j++) gi[j] += pi[j] * cb[j];
                clip_apply(gi, m, has_clip, clip);
                act_apply(gi, m, code[0], ab[0], ab[1]);
                if (couple) {
                    _Pragma("omp simd") for (int64_t j = 0; j < m; j++) gf[j] = 1.0f - gi[j];
                } else {
                    if (pf) _Pragma("omp simd") for (int64_t j = 0; j < m; j++) gf[j] += pf[j] * cb[j];
                    clip_apply(gf, m, has_clip, clip);
                    act_apply(gf, m, code[0], ab[0], ab[1]);
                }
                clip_apply(gc, m, has_clip, clip);
                act_apply(gc, m, code[1], ab[2], ab[3]);
                _Pragma("omp simd") for (int64_t j = 0; j < m; j++) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
                if (po) _Pragma("omp simd") for (int64_t j = 0; j < m; j++) go[j] += po[j] * cb[j];
                clip_apply(go, m, has_clip, clip);
                act_apply(go, m, code[0], ab[0], ab[1]);
                memcpy(tmp, cb, (size_t)m * sizeof(float));
                act_apply(tmp, m, code[2], ab[4], ab[5]);
                _Pragma("omp simd") for (int64_t j = 0; j < m; j++) hb[j] = go[j] * tmp[j];
            }
        }
        if (J->P == 2)
            return; /* GRU's candidate, from (r h) Rh^T: every unit's r h first (the next stage) */
    } else {
        recur(rh, B, n, pk2, u0, u1, 1, npad, g2, ld2);
        for (int64_t b = 0; b < B; b++) {
            const int64_t len = lens ? lens[b] : s->seq;
            if (t >= len)
                continue;
            const int64_t tt = rev ? len - 1 - t : t;
            const float *xh = xw + tt * geo[RNN_XW_ST] + b * geo[RNN_XW_SB] + 2 * n + j0;
            const float *z = g1 + b * ld1 + j0, *hp = hin + b * n + j0, *bxh = bx + 2 * n + j0, *bhh = bh + 2 * n + j0;
            float *hb = hout + b * n + j0, *cand = g2 + b * ld2 + j0;
            _Pragma("omp simd") for (int64_t j = 0; j < m; j++) cand[j] += xh[j] + bxh[j] + bhh[j];
            clip_apply(cand, m, has_clip, clip);
            act_apply(cand, m, code[1], ab[2], ab[3]);
            _Pragma("omp simd") for (int64_t j = 0; j < m; j++) hb[j] = (1.0f - z[j]) * cand[j] + z[j] * hp[j];
        }
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t len = lens ? lens[b] : s->seq;
        if (t < len) {
            const int64_t tt = rev ? len - 1 - t : t;
            memcpy(y + tt * geo[RNN_Y_ST] + b * geo[RNN_Y_SB] + j0, hout + b * n + j0, (size_t)m * sizeof(float));
        }
        if (t == s->seq - 1) /* the last state: only this half's stages wrote (and read) these units */
            memcpy(h + b * n + j0, hout + b * n + j0, (size_t)m * sizeof(float));
    }
}

/* The shared-step form, as part `part` (0 the caller's lower half first, 1 the upper): every
 * stage of every direction, its own half when unclaimed, then the other's when unclaimed, then
 * a wait until both are done. A part that finds stages done skips them. */
static void team_run(const Job *J, int64_t *team, int part, const float *bias_mem, float *tmp)
{
    const int64_t total = J->dirs * J->K, mid = J->s.units / 2, gh = J->s.gh;
    const int64_t d0 = __atomic_load_n(team + T_DONE(0), __ATOMIC_ACQUIRE), d1 = __atomic_load_n(team + T_DONE(1), __ATOMIC_ACQUIRE);
    for (int64_t k = d0 < d1 ? d0 : d1; k < total; k++) {
        const int d = (int)(k / J->K);
        for (int i = 0; i < 2; i++) {
            const int hh = i ? !part : part;
            int64_t want = k;
            if (__atomic_load_n(team + T_CLAIM(hh), __ATOMIC_RELAXED) != k ||
                !__atomic_compare_exchange_n(team + T_CLAIM(hh), &want, k + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                continue;
            stage(J, d, k % J->K, hh ? mid : 0, hh ? J->s.units : mid, bias_mem + 2 * d * gh, bias_mem + (2 * d + 1) * gh, tmp);
            __atomic_store_n(team + T_DONE(hh), k + 1, __ATOMIC_RELEASE);
        }
        for (unsigned spins = 0;
             __atomic_load_n(team + T_DONE(0), __ATOMIC_ACQUIRE) <= k || __atomic_load_n(team + T_DONE(1), __ATOMIC_ACQUIRE) <= k;
             spins++) {
            aioge_relax();
            if (spins > 20000) /* the other was descheduled in the middle of its half: let it have the CPU */
                sched_yield();
        }
    }
}

/* JOB_RNN over [lo, hi): directions (no team block), or parts (a team block; [0, 2) one thread
 * running both halves). 0, or a negative code (checked before anything is claimed or written). */
int aioge_rnn_job(const int64_t *a, int64_t lo, int64_t hi)
{
    Job J = {0};
    const int64_t *geo = (const int64_t *)(intptr_t)a[RJ_GEO];
    const float *fp = (const float *)(intptr_t)a[RJ_FP];
    int64_t *team = (int64_t *)(intptr_t)a[RJ_TEAM];
    if (setup(geo, fp, &J.s) || !fp)
        return AIOGE_EGEOMETRY;
    const Rnn *s = &J.s;
    J.dirs = geo[RNN_DIRS];
    if (lo < 0 || lo >= hi || hi > (team ? 2 : J.dirs))
        return AIOGE_EGEOMETRY;
    J.lens = (const int64_t *)(intptr_t)a[RJ_LENS];
    if (J.lens)
        for (int64_t b = 0; b < s->batch; b++)
            if (J.lens[b] < 0 || J.lens[b] > s->seq)
                return AIOGE_EGEOMETRY;
    if (s->seq == 0 || s->batch == 0 || s->n == 0)
        return 0;
    J.x = (const float *)(intptr_t)a[RJ_X], J.w = (const float *)(intptr_t)a[RJ_W];
    J.pk = (const float *)(intptr_t)a[RJ_PK], J.bias = (const float *)(intptr_t)a[RJ_BIAS];
    J.peep = (const float *)(intptr_t)a[RJ_PEEP];
    J.xw = (float *)(intptr_t)a[RJ_XW], J.y = (float *)(intptr_t)a[RJ_Y], J.h = (float *)(intptr_t)a[RJ_H];
    J.c = (float *)(intptr_t)a[RJ_C], J.hs = (float *)(intptr_t)a[RJ_HS];
    J.in = a[RJ_IN], J.rows = a[RJ_ROWS], J.sgemm = (intptr_t)a[RJ_SGEMM], J.wide = a[RJ_WIDE];
    J.region = shared_floats(s, &J.rows3);
    J.P = s->g2 ? 2 : 1;
    J.K = 1 + s->seq * J.P;
    if (!J.xw || !J.pk || a[RJ_PK_FLOATS] < s->packed * J.dirs || ((uintptr_t)J.pk & 31) || !J.y || !J.h || !J.hs ||
        a[RJ_HS_FLOATS] < J.region * J.dirs || (s->cell == 2 && !J.c))
        return AIOGE_EGEOMETRY;
    if (J.sgemm && (!J.x || !J.w || J.in < 0 || J.rows != s->seq * s->batch))
        return AIOGE_EGEOMETRY;
    /* what every step adds to the projection (bx) and GRU's Rbh (bh), per direction; a row of c */
    float *mem = aioge_aligned_alloc(64, (size_t)(2 * J.dirs * s->gh + s->npad + 16) * sizeof(float));
    if (!mem)
        return AIOGE_ENOMEM;
    float *tmp = mem + 2 * J.dirs * s->gh;
    for (int64_t d = 0; d < J.dirs; d++)
        for (int64_t j = 0; j < s->gh; j++) {
            const float wb = J.bias ? J.bias[2 * d * s->gh + j] : 0.0f, rb = J.bias ? J.bias[2 * d * s->gh + s->gh + j] : 0.0f;
            const int apart = s->cell == 1 && j >= 2 * s->n;
            mem[2 * d * s->gh + j] = apart ? wb : wb + rb;
            mem[(2 * d + 1) * s->gh + j] = apart ? rb : 0.0f;
        }
    if (team)
        team_run(&J, team, (int)lo, mem, tmp);
    else
        for (int64_t d = lo; d < hi; d++)
            for (int64_t k = 0; k < J.K; k++)
                stage(&J, (int)d, k, 0, s->units, mem + 2 * d * s->gh, mem + (2 * d + 1) * s->gh, tmp);
    free(mem);
    return 0;
}
