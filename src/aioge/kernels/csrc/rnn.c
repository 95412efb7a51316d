/* ONNX RNN, GRU and LSTM in float32: the recurrence over time steps, one direction at a time.
 *
 * The caller (aioge.kernels.rnn) has computed the input projection X W^T of every time step as
 * one GEMM (xw: a row of D * G * H values per (t, b), direction d at column d * G * H); here each
 * step is the product of the batch's hidden rows with R^T, packed once per weight into panels
 * of 16 columns (pk[p][k][16], k over the hidden units), followed by the gates of each row in a
 * few vectorised passes over H values while they sit in L1. Rows past their sequence length
 * keep their state and write zeros to Y, as ONNX says; a reverse direction reads each row's
 * steps from its own length backwards.
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
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aioge.h"
#include "mathf.h"

#define NP 16 /* columns of a packed panel of R^T: two 8-float vectors */

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
static void act_apply(float *v, int64_t n, int64_t code, float a, float b)
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

static void clip_apply(float *v, int64_t n, int has, float clip)
{
    if (has)
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) v[i] = fminf(fmaxf(v[i], -clip), clip);
}

/* The columns [c0, c0 + n) of R^T (R's rows c0.., each of k values) in panels of NP columns:
 * pk[p][kk][j] = R[c0 + p * NP + j][kk], zero past n. */
static void pack(const float *r, int64_t c0, int64_t n, int64_t k, float *pk)
{
    const int64_t panels = (n + NP - 1) / NP;
    for (int64_t p = 0; p < panels; p++)
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t j = 0; j < NP; j++) {
                const int64_t col = p * NP + j;
                pk[(p * k + kk) * NP + j] = col < n ? r[(c0 + col) * k + kk] : 0.0f;
            }
}

/* out[b][0 .. panels * NP) = h[b] . pk over k for rows [0, rows): four rows by one panel (eight
 * accumulators), the leftover rows one at a time by four panels (eight accumulators too). */
static void recur(const float *h, int64_t rows, int64_t k, const float *pk, int64_t panels, float *out)
{
    const int64_t ld = panels * NP;
    int64_t b = 0;
    const int64_t blocks = rows / 4;
    for (int64_t p = 0; p < panels; p++) /* a panel (k x 16 values) stays in L1 for every block */
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
            float *o = out + b * ld + p * NP;
            *(v8u *)o = a00, *(v8u *)(o + 8) = a01;
            *(v8u *)(o + ld) = a10, *(v8u *)(o + ld + 8) = a11;
            *(v8u *)(o + 2 * ld) = a20, *(v8u *)(o + 2 * ld + 8) = a21;
            *(v8u *)(o + 3 * ld) = a30, *(v8u *)(o + 3 * ld + 8) = a31;
        }
    for (b = 4 * blocks; b < rows; b++) {
        const float *hb = h + b * k;
        float *o = out + b * ld;
        int64_t p = 0;
        for (; p + 4 <= panels; p += 4) {
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
            for (int q = 0; q < 8; q++) *(v8u *)(o + p * NP + 8 * q) = a[q];
        }
        for (; p < panels; p++) {
            const float *w = pk + p * k * NP;
            v8 a0 = {0}, a1 = {0};
            for (int64_t kk = 0; kk < k; kk++) {
                a0 += hb[kk] * *(const v8 *)(w + kk * NP);
                a1 += hb[kk] * *(const v8 *)(w + kk * NP + 8);
            }
            *(v8u *)(o + p * NP) = a0, *(v8u *)(o + p * NP + 8) = a1;
        }
    }
}

typedef struct {
    const int64_t *geo;
    const float *fp;
    int64_t cell, seq, batch, n, gh;
    int64_t cols1;  /* R^T's columns in the first panel set (the rest, GRU's h gate, in a second) */
    int64_t packed; /* floats of one direction's packed R^T */
} Rnn;

static inline int64_t panels_of(int64_t cols) { return (cols + NP - 1) / NP; }

/* The geometry in s, checked: 0, or -1 when it is not one rnn.c runs. */
static int setup(const int64_t *geo, const float *fp, Rnn *s)
{
    if (!geo)
        return AIOGE_EGEOMETRY;
    *s = (Rnn){geo, fp, geo[RNN_CELL], geo[RNN_SEQ], geo[RNN_BATCH], geo[RNN_HIDDEN], 0, 0, 0};
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
    s->cols1 = s->cell == 1 && !geo[RNN_LBR] ? 2 * s->n : s->gh;
    s->packed = (panels_of(s->cols1) + panels_of(s->gh - s->cols1)) * NP * s->n;
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
        pack(rd, 0, s.cols1, s.n, pd);
        if (s.gh > s.cols1)
            pack(rd, s.cols1, s.gh - s.cols1, s.n, pd + panels_of(s.cols1) * NP * s.n);
    }
    return 0;
}

/* One direction d over every step. */
static int run_direction(const Rnn *s, int d, const float *xw, const float *pk, const float *bias, const float *peep,
                         const int64_t *lens, float *y, float *h, float *c)
{
    const int64_t *geo = s->geo;
    const int64_t n = s->n, B = s->batch, gh = s->gh, cell = s->cell;
    const int rev = (int)(geo[RNN_REVERSE] || d == 1), lbr = (int)geo[RNN_LBR], couple = (int)geo[RNN_COUPLE];
    const int has_clip = (int)geo[RNN_HAS_CLIP];
    const float clip = s->fp[0];
    const int64_t *code = geo + RNN_ACTS + 3 * d;
    const float *ab = s->fp + 1 + 6 * d;
    const int64_t cols1 = s->cols1, p1 = panels_of(cols1), p2 = panels_of(gh - cols1);
    const size_t floats = (size_t)(B * (p1 + p2) * NP + B * n + 2 * gh + 4 * n + 64);
    float *mem = aioge_aligned_alloc(64, floats * sizeof(float));
    if (!mem)
        return AIOGE_ENOMEM;
    const float *pk1 = pk + d * s->packed, *pk2 = pk1 + p1 * NP * n;
    float *g1 = mem, *g2 = g1 + B * p1 * NP, *rh = g2 + B * p2 * NP;
    float *bx = rh + B * n, *bh = bx + gh, *tmp = bh + gh;
    xw += d * gh;
    y += d * geo[RNN_Y_SD];
    h += d * B * n;
    if (c)
        c += d * B * n;
    memset(rh, 0, (size_t)(B * n) * sizeof(float));
    /* bx: what every step adds to the projection; bh: GRU's Rbh, kept apart as it meets r. */
    for (int64_t j = 0; j < gh; j++) {
        const float wb = bias ? bias[2 * d * gh + j] : 0.0f, rb = bias ? bias[2 * d * gh + gh + j] : 0.0f;
        const int apart = cell == 1 && j >= 2 * n;
        bx[j] = apart ? wb : wb + rb;
        bh[j] = apart ? rb : 0.0f;
    }
    const float *pi = peep ? peep + 3 * d * n : NULL, *po = pi ? pi + n : NULL, *pf = pi ? pi + 2 * n : NULL;
    const int64_t ld1 = p1 * NP, ld2 = p2 * NP;
    for (int64_t t = 0; t < s->seq; t++) {
        recur(h, B, n, pk1, p1, g1);
        for (int64_t b = 0; b < B; b++) {
            const int64_t len = lens ? lens[b] : s->seq;
            float *hb = h + b * n, *gb = g1 + b * ld1;
            if (t >= len) {
                memset(y + t * geo[RNN_Y_ST] + b * geo[RNN_Y_SB], 0, (size_t)n * sizeof(float));
                continue;
            }
            const int64_t tt = rev ? len - 1 - t : t;
            const float *xb = xw + tt * geo[RNN_XW_ST] + b * geo[RNN_XW_SB];
            const int64_t added = cell == 1 ? 2 * n : gh; /* GRU's h gate adds them after r */
            _Pragma("omp simd") for (int64_t j = 0; j < added; j++) gb[j] += xb[j] + bx[j];
            if (cell == 0) {
                clip_apply(gb, n, has_clip, clip);
                act_apply(gb, n, code[0], ab[0], ab[1]);
                memcpy(hb, gb, (size_t)n * sizeof(float));
            } else if (cell == 1) { /* z, r: f; r h or r (h Rh^T + Rbh) */
                clip_apply(gb, 2 * n, has_clip, clip);
                act_apply(gb, 2 * n, code[0], ab[0], ab[1]);
                const float *rg = gb + n;
                if (lbr) {
                    float *gh3 = gb + 2 * n;
                    const float *xh = xb + 2 * n, *bxh = bx + 2 * n, *bhh = bh + 2 * n;
                    _Pragma("omp simd") for (int64_t j = 0; j < n; j++) gh3[j] = xh[j] + bxh[j] + rg[j] * (gh3[j] + bhh[j]);
                } else {
                    _Pragma("omp simd") for (int64_t j = 0; j < n; j++) rh[b * n + j] = rg[j] * hb[j];
                }
            } else { /* LSTM gates i, o, f, c */
                float *gi = gb, *go = gb + n, *gf = gb + 2 * n, *gc = gb + 3 * n;
                if (pi) _Pragma("omp simd") for (int64_t j = 0; j < n; j++) gi[j] += pi[j] * c[b * n + j];
                clip_apply(gi, n, has_clip, clip);
                act_apply(gi, n, code[0], ab[0], ab[1]);
                if (couple) {
                    _Pragma("omp simd") for (int64_t j = 0; j < n; j++) gf[j] = 1.0f - gi[j];
                } else {
                    if (pf) _Pragma("omp simd") for (int64_t j = 0; j < n; j++) gf[j] += pf[j] * c[b * n + j];
                    clip_apply(gf, n, has_clip, clip);
                    act_apply(gf, n, code[0], ab[0], ab[1]);
                }
                clip_apply(gc, n, has_clip, clip);
                act_apply(gc, n, code[1], ab[2], ab[3]);
                float *cb = c + b * n;
                _Pragma("omp simd") for (int64_t j = 0; j < n; j++) cb[j] = gf[j] * cb[j] + gi[j] * gc[j];
                if (po) _Pragma("omp simd") for (int64_t j = 0; j < n; j++) go[j] += po[j] * cb[j];
                clip_apply(go, n, has_clip, clip);
                act_apply(go, n, code[0], ab[0], ab[1]);
                memcpy(tmp, cb, (size_t)n * sizeof(float));
                act_apply(tmp, n, code[2], ab[4], ab[5]);
                _Pragma("omp simd") for (int64_t j = 0; j < n; j++) hb[j] = go[j] * tmp[j];
            }
        }
        if (cell == 1) {
            if (!lbr)
                recur(rh, B, n, pk2, p2, g2);
            for (int64_t b = 0; b < B; b++) {
                const int64_t len = lens ? lens[b] : s->seq;
                if (t >= len)
                    continue;
                const int64_t tt = rev ? len - 1 - t : t;
                const float *xh = xw + tt * geo[RNN_XW_ST] + b * geo[RNN_XW_SB] + 2 * n;
                float *hb = h + b * n, *gb = g1 + b * ld1, *cand = lbr ? gb + 2 * n : g2 + b * ld2;
                if (!lbr)
                    _Pragma("omp simd") for (int64_t j = 0; j < n; j++) cand[j] += xh[j] + bx[2 * n + j] + bh[2 * n + j];
                clip_apply(cand, n, has_clip, clip);
                act_apply(cand, n, code[1], ab[2], ab[3]);
                const float *z = gb;
                _Pragma("omp simd") for (int64_t j = 0; j < n; j++) hb[j] = (1.0f - z[j]) * cand[j] + z[j] * hb[j];
            }
        }
        for (int64_t b = 0; b < B; b++) {
            const int64_t len = lens ? lens[b] : s->seq;
            if (t < len) {
                const int64_t tt = rev ? len - 1 - t : t;
                memcpy(y + tt * geo[RNN_Y_ST] + b * geo[RNN_Y_SB], h + b * n, (size_t)n * sizeof(float));
            }
        }
    }
    free(mem);
    return 0;
}

int aioge_rnn(const int64_t *geo, const float *fp, const float *xw, const float *pk, int64_t pk_floats, const float *bias,
              const float *peep, const int64_t *lens, float *y, float *h, float *c, int64_t d0, int64_t d1)
{
    Rnn s;
    if (setup(geo, fp, &s) || !fp || d0 < 0 || d1 > geo[RNN_DIRS] || d0 > d1)
        return AIOGE_EGEOMETRY;
    if (lens)
        for (int64_t b = 0; b < s.batch; b++)
            if (lens[b] < 0 || lens[b] > s.seq)
                return AIOGE_EGEOMETRY;
    if (s.seq == 0 || s.batch == 0 || s.n == 0)
        return 0;
    if (!xw || !pk || pk_floats < s.packed * geo[RNN_DIRS] || ((uintptr_t)pk & 31) || !y || !h || (s.cell == 2 && !c))
        return AIOGE_EGEOMETRY;
    for (int64_t d = d0; d < d1; d++) {
        const int err = run_direction(&s, (int)d, xw, pk, bias, peep, lens, y, h, c);
        if (err)
            return err;
    }
    return 0;
}
