/* An inverted-residual block (1x1 expand conv -> depthwise conv -> 1x1 project conv, as
 * MobileNetV2, MnasNet and EfficientNet chain them) in bands of output rows: JOB_IRB's unit is a
 * band, and one thread computes the band's expand (its input rows and the halo the depthwise
 * window reaches), its depthwise and its project, in scratch of its own, and writes only the
 * band's rows of the block's output. Split per op, the depthwise's planes and the 1x1 convs'
 * positions went to different cores, so at each edge every core read what the other had just
 * written (a 14x14 project conv: 65.5 us after a whole depthwise, 83 after a split one); here
 * the wide tensors never leave the core (nor L2) that made them, at the cost of the halo rows'
 * expand done twice. The three ops are conv_direct.c's and dwconv.c's own functions (conv_t for
 * the 1x1 convs, the depthwise with its plane forms) over band-sized geometries.
 *
 * Argument block: x, expand (wpack, koff, bias, geometry), depthwise (w, bias, geometry),
 * project (wpack, bias, geometry), y, band rows, floats of x and y. The geometries are the whole
 * image's (conv_t's G_* slots, N = 1; the depthwise's 17, multiplier 1); koff the expand's offsets
 * in x (k H W). [lo, hi) are bands. With band 0, the channel form (irb_channels): the expand's
 * and the project's of part 0 (its channels [0, k0)), then the expanded image, the depthwise's
 * output, k0, the second part's project weight and geometry, the partial sums, the floats of
 * those three buffers, the second part's expand weight, bias and geometry, and the y the sum
 * of the parts goes to when it is not the parts' y (0: it is; the planner laid it over x, which
 * the parts read while they write), and x when the block's residual y += x is the parts' (0: not
 * the block's); [lo, hi) parts. Then (both forms; slots 15-28 unread by bands) the block's own
 * jobs for a whole run (irb_whole): how many, and (job, args, total) each. */
#include <stdint.h>
#include <string.h>

#include "aioge.h"
#include "convgeo.h" /* the conv geometry (G_Z: its residual, never set here) */

enum { D_C, D_H, D_W, D_MULT, D_KH, D_KW, D_SH, D_SW, D_DH, D_DW, D_PT, D_PL, D_OH, D_OW, D_LEN = 18 };

/* Whether the three geometries chain: expand C -> (E, or part of it) at H x W, the depthwise E planes of H x W to
 * OH x OW, the project E -> M at OH x OW, 1x1 convs at stride 1 without pads, one image. */
static int irb_fits(const int64_t *ge, const int64_t *gd, const int64_t *gp, int64_t E, int64_t pc, int64_t xn, int64_t yn)
{
    const int64_t H = ge[G_H], W = ge[G_W];
    for (int i = 0; i < 2; i++) {
        const int64_t *g = i ? gp : ge;
        if (g[G_N] != 1 || g[G_KH] != 1 || g[G_KW] != 1 || g[G_SH] != 1 || g[G_SW] != 1 || g[G_PT] || g[G_PL] || g[G_C] <= 0 ||
            g[G_M] <= 0 || g[G_OH] != g[G_H] || g[G_OW] != g[G_W] || g[G_HPH] != g[G_H] || g[G_WPH] != g[G_W])
            return 0;
    }
    if (gd[D_C] != E || gd[D_H] != H || gd[D_W] != W || gd[D_MULT] != 1 || gd[D_KH] <= 0 || gd[D_SH] <= 0 || gd[D_DH] <= 0 ||
        gd[D_PT] < 0 || gp[G_C] != pc || gp[G_H] != gd[D_OH] || gp[G_W] != gd[D_OW] || H <= 0 || W <= 0 || gd[D_OH] <= 0 ||
        gd[D_OW] <= 0)
        return 0;
    return aioge_fits(xn, ge[G_C], H, W, 1) && aioge_fits(yn, gp[G_M], gp[G_OH], gp[G_OW], 1);
}

/* The channel form (band 0): part i of 2 computes the expanded channels [c0, c1) (c0 = 0 or
 * g[17]; its expand's packed weight, bias and geometry of M = c1 - c0: g[1], g[3], g[4] or g[24],
 * g[25], g[26]) into the whole expanded image g[15], the depthwise over those planes into g[16],
 * and the project over those input channels: part 0 with the bias into y (its weight g[8],
 * geometry g[10] of C = c1), part 1 without it into the partial sums g[20] (g[18], g[19]); a
 * JOB_RESIDUAL after adds them. Each core reads half of every weight (the 7x7 blocks' 1x1 convs
 * are weight-bound at 49 positions) and what the other core wrote only as partial sums. */
static int irb_channels(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *x = (const float *)(intptr_t)g[0];
    const int64_t *koffe = (const int64_t *)(intptr_t)g[2], *gd = (const int64_t *)(intptr_t)g[7];
    const float *wd = (const float *)(intptr_t)g[5], *bd = (const float *)(intptr_t)g[6];
    float *mid = (float *)(intptr_t)g[15], *dwo = (float *)(intptr_t)g[16];
    const int64_t nr = aioge_conv_gemm_nr(), mr = aioge_conv_gemm_mr(), E = gd[D_C], split = g[17];
    if (split <= 0 || split >= E || hi > 2 || lo < 0)
        return AIOGE_EGEOMETRY;
    for (int64_t part = lo; part < hi; part++) {
        const int64_t *ge = (const int64_t *)(intptr_t)g[part ? 26 : 4], *gp = (const int64_t *)(intptr_t)g[part ? 19 : 10];
        const float *we = (const float *)(intptr_t)g[part ? 24 : 1], *be = (const float *)(intptr_t)g[part ? 25 : 3];
        const int64_t c0 = part ? split : 0, c1 = part ? E : split;
        if (gp[G_C] != c1 - c0 || ge[G_M] != c1 - c0)
            return AIOGE_EGEOMETRY;
        const int64_t P = ge[G_H] * ge[G_W], OP = gd[D_OH] * gd[D_OW];
        int err = aioge_conv_t_f32(x, we, koffe, be, mid + c0 * P, ge, 0, (P + mr - 1) / mr, 0, (c1 - c0 + nr - 1) / nr);
        if (!err)
            err = aioge_conv_depthwise_f32(mid, wd, bd, dwo, gd, c0, c1);
        if (!err) {
            int64_t *koff = (int64_t *)aioge_thread_scratch(1, (size_t)(c1 - c0) * 2);
            if (!koff)
                return AIOGE_ENOMEM;
            for (int64_t k = 0; k < c1 - c0; k++)
                koff[k] = k * OP;
            const float *wp = (const float *)(intptr_t)g[part ? 18 : 8], *bp = part ? NULL : (const float *)(intptr_t)g[9];
            float *out = (float *)(intptr_t)g[part ? 20 : 11];
            err = aioge_conv_t_f32(dwo + c0 * OP, wp, koff, bp, out, gp, 0, (OP + mr - 1) / mr, 0, (gp[G_M] + nr - 1) / nr);
            const float *skip = (const float *)(intptr_t)g[28];
            const int64_t half = gp[G_M] / 2 * OP, a = part ? half : 0, b = part ? gp[G_M] * OP : half;
            for (int64_t k = a; skip && !err && k < b; k++) /* y += x: half of it into each part's sum */
                out[k] += skip[k];
        }
        if (err)
            return err;
    }
    return 0;
}

/* A whole run (the range in one call: no helper, or splits backing off) runs the block's own
 * jobs (g[29] of them, (job, args, total) from g[30]) whole when it has them: on one core the
 * band and channel forms' conv_t expand and halo rows cost more than the tuned kernels (MobileNetV2's
 * blocks, whole: 14x14 96-576-96 405 -> 440 us, 7x7 160-960-160 285 -> 330). The channel form's
 * partial sums, added after, are zeroed then. */
static int irb_whole(const int64_t *g, int64_t parts)
{
    for (int64_t i = 0; i < g[29]; i++) {
        const int64_t *e = g + 30 + 3 * i;
        if (e[0] == JOB_IRB)
            return AIOGE_EGEOMETRY;
        const int err = aioge_job((int)e[0], (const int64_t *)(intptr_t)e[1], 0, e[2]);
        if (err)
            return err;
    }
    if (parts == 2 && g[12] == 0) {
        memset((float *)(intptr_t)g[20], 0, sizeof(float) * (size_t)g[23]);
        if (g[27]) /* the own jobs wrote the planned y: the parts' y is what the sum reads */
            memcpy((float *)(intptr_t)g[11], (const float *)(intptr_t)g[27], sizeof(float) * (size_t)g[23]);
    }
    return 0;
}

/* The streaming form (band -g[12] > 0): the 1x1 convs are the program's own conv_direct jobs'
 * (packed weight, offsets, bias; geometries as built with row panels, G_ROWS), and a unit is a
 * segment of the output rows (g[15] of them, output rows s OH / S up to (s + 1) OH / S) that one
 * thread runs top to bottom in bands of `band` output rows: each band's expanded rows go into a
 * window of cap = (band - 1) sh + reach rows a plane (rows outside the image zero: the
 * depthwise's pads), the rows the last band's windows share moved up, not expanded again; the
 * depthwise reads the window as its whole input, and the project writes the band's rows of y in
 * place. The expanded tensor (144x56x56, 1.8 MB) never leaves this core's L2; only a segment's
 * first window expands rows another segment expands too. g[16], g[17]: the expand's and the
 * project's weight row blocks; g[18], g[19]: their row panels per output row. */
static int irb_stream(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *x = (const float *)(intptr_t)g[0], *we = (const float *)(intptr_t)g[1], *be = (const float *)(intptr_t)g[3];
    const int64_t *koffe = (const int64_t *)(intptr_t)g[2], *ge0 = (const int64_t *)(intptr_t)g[4];
    const float *wd = (const float *)(intptr_t)g[5], *bd = (const float *)(intptr_t)g[6];
    const int64_t *gd0 = (const int64_t *)(intptr_t)g[7], *gp0 = (const int64_t *)(intptr_t)g[10];
    const float *wp = (const float *)(intptr_t)g[8], *bp = (const float *)(intptr_t)g[9];
    float *y = (float *)(intptr_t)g[11];
    const int64_t band = -g[12], S = g[15], E = ge0[G_M], H = ge0[G_H], W = ge0[G_W], OH = gd0[D_OH], OW = gd0[D_OW];
    if (!irb_fits(ge0, gd0, gp0, E, E, g[13], g[14]) || !ge0[G_ROWS] || !gp0[G_ROWS] || S <= 0 || S > OH || lo < 0 || hi > S ||
        g[16] <= 0 || g[17] <= 0 || g[18] <= 0 || g[19] <= 0 || ge0[G_WPH] != W || gp0[G_WPH] != OW || gd0[D_DW] <= 0 ||
        gd0[D_KW] <= 0 || gd0[D_SW] <= 0)
        return AIOGE_EGEOMETRY;
    const int64_t sh = gd0[D_SH], pt = gd0[D_PT], reach = (gd0[D_KH] - 1) * gd0[D_DH] + 1, cap = (band - 1) * sh + reach;
    const size_t win_n = (size_t)(E * cap * W + 15) / 16 * 16, mid_n = (size_t)(E * band * OW + 15) / 16 * 16;
    float *win = aioge_thread_scratch(1, win_n + mid_n + (size_t)E * 2 + 64);
    if (!win)
        return AIOGE_ENOMEM;
    float *mid = win + win_n;
    int64_t *koffp = (int64_t *)(mid + mid_n);
    int64_t ge[G_DIRECT_LEN], gd[D_LEN], gp[G_DIRECT_LEN];
    memcpy(ge, ge0, sizeof ge);
    memcpy(gd, gd0, sizeof gd);
    memcpy(gp, gp0, sizeof gp);
    ge[G_Z] = gp[G_Z] = 0; /* a band's rows of y: no whole-y residual */
    ge[G_H] = ge[G_OH] = ge[G_HPH] = cap; /* y's planes: the window's */
    gd[D_H] = cap;
    gd[D_PT] = 0;
    for (int64_t s = lo; s < hi; s++) {
        const int64_t R0 = s * OH / S, R1 = (s + 1) * OH / S;
        for (int64_t r0 = R0; r0 < R1; r0 += band) {
            const int64_t orows = R1 - r0 < band ? R1 - r0 : band, top = r0 * sh - pt, need = (orows - 1) * sh + reach;
            int64_t f0 = 0;
            if (r0 > R0 && cap > band * sh) { /* the last window's rows this one shares */
                f0 = cap - band * sh;
                for (int64_t c = 0; c < E; c++)
                    memmove(win + c * cap * W, win + (c * cap + band * sh) * W, sizeof(float) * (size_t)(f0 * W));
            }
            const int64_t v0 = f0 > -top ? f0 : -top, v1 = need < H - top ? need : H - top; /* rows in the image */
            for (int64_t c = 0; c < E; c++) {
                float *pl = win + c * cap * W;
                if (v0 > f0)
                    memset(pl + f0 * W, 0, sizeof(float) * (size_t)((v0 < need ? v0 : need) - f0) * (size_t)W);
                const int64_t z = v1 > f0 ? v1 : f0;
                if (need > z)
                    memset(pl + z * W, 0, sizeof(float) * (size_t)((need - z) * W));
            }
            int err = 0;
            if (v1 > v0)
                err = aioge_conv_direct_f32(x + (top + v0) * W, we, koffe, be, win + v0 * W, ge, 0, (v1 - v0) * g[18], 0, g[16]);
            gd[D_OH] = orows;
            if (!err)
                err = aioge_conv_depthwise_f32(win, wd, bd, mid, gd, 0, E);
            for (int64_t k = 0; k < E; k++)
                koffp[k] = k * orows * OW;
            if (!err)
                err = aioge_conv_direct_f32(mid, wp, koffp, bp, y + r0 * OW, gp, 0, orows * g[19], 0, g[17]);
            if (err)
                return err;
        }
    }
    return 0;
}

int aioge_irb(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *x = (const float *)(intptr_t)g[0];
    const float *we = (const float *)(intptr_t)g[1], *be = (const float *)(intptr_t)g[3];
    const int64_t *koffe = (const int64_t *)(intptr_t)g[2], *ge0 = (const int64_t *)(intptr_t)g[4];
    const float *wd = (const float *)(intptr_t)g[5], *bd = (const float *)(intptr_t)g[6];
    const int64_t *gd0 = (const int64_t *)(intptr_t)g[7];
    const float *wp = (const float *)(intptr_t)g[8], *bp = (const float *)(intptr_t)g[9];
    const int64_t *gp0 = (const int64_t *)(intptr_t)g[10];
    float *y = (float *)(intptr_t)g[11];
    const int64_t band = g[12];
    if (band < 0)
        return lo == 0 && hi == g[15] && hi > 1 && g[29] > 0 ? irb_whole(g, hi) : irb_stream(g, lo, hi);
    if (band == 0) {
        const int64_t *gp1 = (const int64_t *)(intptr_t)g[19], *ge1 = (const int64_t *)(intptr_t)g[26];
        const int64_t E = gd0[D_C], OP = gd0[D_OH] * gd0[D_OW], k0 = g[17];
        if (!irb_fits(ge0, gd0, gp0, E, k0, g[13], g[14]) || !irb_fits(ge1, gd0, gp1, E, E - k0, g[13], g[14]) ||
            ge0[G_M] != k0 || ge1[G_M] != E - k0 || ge0[G_C] != ge1[G_C] || gp1[G_M] != gp0[G_M] || !aioge_fits(g[21], E, ge0[G_H], ge0[G_W], 1) || !aioge_fits(g[22], E, OP, 1, 1) ||
            !aioge_fits(g[23], gp0[G_M], OP, 1, 1))
            return AIOGE_EGEOMETRY;
        if (g[28] && (gp0[G_M] != ge0[G_C] || OP != ge0[G_H] * ge0[G_W]))
            return AIOGE_EGEOMETRY; /* the residual's x: y's shape */
        return lo == 0 && hi == 2 && g[29] > 0 ? irb_whole(g, 2) : irb_channels(g, lo, hi);
    }
    if (band < 0 || !irb_fits(ge0, gd0, gp0, ge0[G_M], ge0[G_M], g[13], g[14]))
        return AIOGE_EGEOMETRY;
    const int64_t H = ge0[G_H], W = ge0[G_W], E = ge0[G_M], M = gp0[G_M], OH = gd0[D_OH], OW = gd0[D_OW];
    const int64_t sh = gd0[D_SH], pt = gd0[D_PT], reach = (gd0[D_KH] - 1) * gd0[D_DH] + 1;
    if (lo < 0 || hi > (OH + band - 1) / band)
        return AIOGE_EGEOMETRY;
    if (lo == 0 && hi == (OH + band - 1) / band && hi > 1 && g[29] > 0)
        return irb_whole(g, hi);
    const int64_t mr = aioge_conv_gemm_mr(), nr = aioge_conv_gemm_nr();
    /* the largest band's input rows: its windows' reach, within the image */
    const int64_t rows_max = (band - 1) * sh + reach < H ? (band - 1) * sh + reach : H;
    const size_t in_n = (size_t)(E * rows_max * W + 15) / 16 * 16, mid_n = (size_t)(E * band * OW + 15) / 16 * 16,
                 out_n = (size_t)(M * band * OW + 15) / 16 * 16;
    float *buf = aioge_thread_scratch(1, in_n + mid_n + out_n + (size_t)E * 2 + 64);
    if (!buf)
        return AIOGE_ENOMEM;
    float *bin = buf, *bmid = bin + in_n, *bout = bmid + mid_n;
    int64_t *koffp = (int64_t *)(bout + out_n);
    for (int64_t b = lo; b < hi; b++) {
        const int64_t r0 = b * band, r1 = r0 + band < OH ? r0 + band : OH, orows = r1 - r0;
        if (orows <= 0)
            break;
        const int64_t top = r0 * sh - pt, end = (r1 - 1) * sh - pt + reach;
        const int64_t a = top > 0 ? top : 0, e = end < H ? end : H, irows = e - a;
        int64_t ge[G_DIRECT_LEN], gd[D_LEN], gp[G_DIRECT_LEN];
        memcpy(ge, ge0, sizeof ge);
        memcpy(gd, gd0, sizeof gd);
        memcpy(gp, gp0, sizeof gp);
        ge[G_Z] = gp[G_Z] = 0; /* a band's rows of y: no whole-y residual */
        int err = 0;
        if (irows > 0) {
            ge[G_H] = ge[G_OH] = ge[G_HPH] = irows;
            ge[G_IMAGE] = ge[G_C] * irows * W;
            const int64_t units = (irows * W + mr - 1) / mr;
            err = aioge_conv_t_f32(x + a * W, we, koffe, be, bin, ge, 0, units, 0, (E + nr - 1) / nr);
        }
        gd[D_H] = irows > 0 ? irows : 0;
        gd[D_PT] = a - top;
        gd[D_OH] = orows;
        if (!err)
            err = aioge_conv_depthwise_f32(bin, wd, bd, bmid, gd, 0, E);
        gp[G_H] = gp[G_OH] = gp[G_HPH] = orows;
        gp[G_IMAGE] = E * orows * OW;
        for (int64_t k = 0; k < E; k++)
            koffp[k] = k * orows * OW;
        if (!err)
            err = aioge_conv_t_f32(bmid, wp, koffp, bp, bout, gp, 0, (orows * OW + mr - 1) / mr, 0, (M + nr - 1) / nr);
        if (err)
            return err;
        for (int64_t m = 0; m < M; m++)
            memcpy(y + m * OH * OW + r0 * OW, bout + m * orows * OW, sizeof(float) * (size_t)(orows * OW));
    }
    return 0;
}
