/* Splitting a C kernel over an idle core without a Python thread hop.
 *
 * kernels.parallel.split_range hands half of a range to a Python helper thread: the wake-up
 * (a condition variable, the GIL, and on this VM a halted vCPU to wake) costs 60-75 us, a
 * sixth of a 0.45 ms GEMM half. Here the caller posts the job to a C helper thread that spins
 * for a while after each job (SPIN_US, or AIOGE_SPIN_US in the environment), so a kernel that
 * follows within that time is picked up in about a microsecond; past it the helper sleeps on a
 * condition variable. onnxruntime's thread pool spins the same way.
 *
 * The range is cut into up to CHUNKS chunks that the caller and the helper take in turn, so a
 * helper that starts late only leaves more chunks to the caller. This VM's scheduler packs
 * threads onto few vCPUs (sched_vcpu_pack): a helper woken by the caller landed on the caller's
 * vCPU and ran only when the caller was done (1.4 ms for a 0.9 ms GEMM). So a caller that finds
 * the helper on its CPU, or asleep, first sets the helper's affinity to every other CPU
 * (aioge_keep_off; queue.c's runners get the same).
 *
 * Whether to split at all (an idle CPU token of the run) is the Python side's decision
 * (kernels.parallel.split_native); this file runs aioge_par_run(job, args, total, split), a job
 * being one of the kernels below with its arguments in an int64 array. Helpers are claimed one
 * caller at a time, up to the cores less one; with none free the job runs whole. A forked child
 * starts with no helpers (pthread_atfork), so a fork in the middle cannot leave a job waiting.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aioge.h"

#define MAX_HELPERS 64
#define SPIN_US 300
#define CHUNKS 8 /* a split range is cut into this many chunks at most */

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
    if (planes < 0 || unit <= 0 || geom[3] <= 0 || g[8] < planes * geom[12] * geom[13] ||
        g[7] < planes / geom[3] * geom[1] * geom[2] || lo * unit > planes)
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

/* 2-D pool: x, y, geometry, average, include_pad, per_pixel, planes, floats of x and y: [lo, hi)
 * are planes */
static int job_pool(const int64_t *g, int64_t lo, int64_t hi)
{
    const int64_t *geom = (const int64_t *)(intptr_t)g[2], planes = g[6];
    if (hi > planes || g[7] < planes * geom[0] * geom[1] || g[8] < planes * geom[12] * geom[13] || geom[12] < 0 || geom[13] < 0)
        return AIOGE_EGEOMETRY;
    return aioge_pool2d_f32((const float *)(intptr_t)g[0], (float *)(intptr_t)g[1], (const int64_t *)(intptr_t)g[2],
                            (int32_t)g[3], (int32_t)g[4], (int32_t)g[5], lo, hi);
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

/* SqueezeExcite's squeeze: x, w1t (C, C1), b1, w2t (C1, C), b2, scale, C, hw, C1, acts (6 values): [lo, hi) are images */
static int job_squeeze(const int64_t *g, int64_t lo, int64_t hi)
{
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
 * xph; one unit */
static int job_phases(const int64_t *g, int64_t lo, int64_t hi)
{
    if (!aioge_conv_fits((const int64_t *)(intptr_t)g[2], g[3], INT64_MAX, 1) || !aioge_conv_fits((const int64_t *)(intptr_t)g[2], g[4], INT64_MAX, 0))
        return AIOGE_EGEOMETRY;
    if (lo < hi)
        aioge_conv_phases_f32((const float *)(intptr_t)g[0], (float *)(intptr_t)g[1], (const int64_t *)(intptr_t)g[2]);
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

/* a strided copy into a C-contiguous destination: src, dst, itemsize, then 6 sizes and 6
 * source strides in bytes (leading sizes 1 for a lower rank): [lo, hi) index the first axis */
static int job_strided(const int64_t *g, int64_t lo, int64_t hi)
{
    const char *src = (const char *)(intptr_t)g[0];
    char *dst = (char *)(intptr_t)g[1];
    const int64_t item = g[2], *n = g + 3, *st = g + 9;
    const int64_t inner = n[5] * item;
    dst += lo * n[1] * n[2] * n[3] * n[4] * inner;
    for (int64_t i0 = lo; i0 < hi; i0++)
        for (int64_t i1 = 0; i1 < n[1]; i1++)
            for (int64_t i2 = 0; i2 < n[2]; i2++)
                for (int64_t i3 = 0; i3 < n[3]; i3++)
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
 * alpha: [lo, hi) are matrices */
static int job_sgemm(const int64_t *g, int64_t lo, int64_t hi)
{
    const float *a = (const float *)(intptr_t)g[7], *b = (const float *)(intptr_t)g[9];
    float *y = (float *)(intptr_t)g[11];
    const int ta = g[2] ? 112 : 111, tb = g[3] ? 112 : 111; /* CblasTrans, CblasNoTrans */
    const float alpha = aioge_float_of(g[16]);
    for (int64_t m = lo; m < hi; m++) {
        const float *am = a + m * g[13], *bm = b + m * g[14];
        float *ym = y + m * g[15];
        if (g[1])
            ((sgemm64_fn)(intptr_t)g[0])(101, ta, tb, g[4], g[5], g[6], alpha, am, g[8], bm, g[10], 0.0f, ym, g[12]);
        else
            ((sgemm32_fn)(intptr_t)g[0])(101, ta, tb, (int32_t)g[4], (int32_t)g[5], (int32_t)g[6], alpha, am, (int32_t)g[8], bm,
                                         (int32_t)g[10], 0.0f, ym, (int32_t)g[12]);
    }
    return 0;
}

/* By aioge.h's job numbers: a table out of step with them does not compile. */
static const job_fn JOBS[] = {
    [JOB_GEMM] = job_gemm,           [JOB_CONV_DIRECT] = job_conv_direct, [JOB_CONV_T] = job_conv_t,
    [JOB_DEPTHWISE] = job_depthwise, [JOB_ACTIVATION] = job_activation,   [JOB_PACK] = job_pack,
    [JOB_GEMV_T] = job_gemv_t,       [JOB_CHAIN] = job_chain,             [JOB_POOL] = job_pool,
    [JOB_CONV_IMAGES] = job_conv_images, [JOB_SQUEEZE] = job_squeeze,     [JOB_CONV_GROUPED] = job_conv_grouped,
    [JOB_GEMV_N] = job_gemv_n,       [JOB_CONV_LOCAL] = job_conv_local,   [JOB_SOFTMAX] = job_softmax,
    [JOB_LAYERNORM] = job_layernorm, [JOB_PHASES] = job_phases,           [JOB_GLOBAL_MEAN] = job_global_mean,
    [JOB_STRIDED] = job_strided,     [JOB_BINARY] = job_binary,           [JOB_SGEMM] = job_sgemm,
};
_Static_assert(sizeof JOBS / sizeof JOBS[0] == AIOGE_NJOBS, "a job of aioge.h has no entry in JOBS");
#define NJOBS AIOGE_NJOBS

/* A job's result by the one error rule: negative is an error (a job that answered a positive
 * code, as some once did for "no memory", counts as that error too); 0 is success. */
static inline int job_error(int r) { return r > 0 ? -r : r; }

/* One split job, on the caller's stack: its range cut into chunks that the caller and the
 * helper take in turn, so a helper that starts late (or not at all: on a VM a vCPU may be
 * slow to wake, or the scheduler may have put the helper on the caller's own vCPU) only ever
 * leaves more chunks to the caller, never a wait. */
struct split {
    int job;
    const int64_t *args;
    int64_t total, chunk, nchunks;
    _Atomic int64_t next, done;
    _Atomic int error;
};

struct helper {
    _Atomic int claimed;                /* a caller owns it (compare-and-swap 0 -> 1) */
    _Atomic uint64_t posted;            /* bumped by the caller for each job */
    _Atomic(struct split *) current;    /* the job, NULL once its caller stopped waiting */
    _Atomic int inside;                 /* the helper may be reading *current */
    _Atomic int sleeping;
    _Atomic int cpu;                    /* where the helper last looked for work, -1 unknown */
    _Atomic pid_t tid;
    int started;
    _Atomic int excluded;               /* the CPU its affinity leaves out, -1 none */
    uint64_t initial;                   /* posted when the thread was created */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static struct helper helpers[MAX_HELPERS];
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int nhelpers = -1;
static int64_t spin_ns;
#ifdef __linux__
static cpu_set_t allowed; /* the process's CPUs when the first split came (taskset, cpusets) */
#endif

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int this_cpu(void)
{
#ifdef __linux__
    return sched_getcpu();
#else
    return -1;
#endif
}

/* Take chunks of s until none is left. */
static void work(struct split *s)
{
    int64_t i;
    while ((i = atomic_fetch_add(&s->next, 1)) < s->nchunks) {
        const int64_t lo = i * s->chunk, hi = lo + s->chunk < s->total ? lo + s->chunk : s->total;
        const int err = job_error(JOBS[s->job](s->args, lo, hi));
        if (err)
            atomic_store(&s->error, err);
        atomic_fetch_add(&s->done, 1);
    }
}

static void *helper_main(void *arg)
{
    struct helper *h = arg;
#ifdef __linux__
    atomic_store(&h->tid, (pid_t)syscall(SYS_gettid));
#endif
    uint64_t seen = h->initial; /* not posted: the first job may be posted before this thread runs */
    for (;;) {
        uint64_t now;
        const int64_t deadline = now_ns() + spin_ns;
        unsigned spins = 0;
        atomic_store_explicit(&h->cpu, this_cpu(), memory_order_relaxed);
        while ((now = atomic_load_explicit(&h->posted, memory_order_acquire)) == seen) {
            relax();
            if ((++spins & 255) != 0)
                continue;
            sched_yield(); /* a lane's thread on this CPU runs first: spinning holds no CPU token */
            if (now_ns() > deadline) {
                pthread_mutex_lock(&h->mu);
                atomic_store(&h->sleeping, 1);
                atomic_store_explicit(&h->cpu, -1, memory_order_relaxed);
                while ((now = atomic_load(&h->posted)) == seen)
                    pthread_cond_wait(&h->cv, &h->mu);
                atomic_store(&h->sleeping, 0);
                pthread_mutex_unlock(&h->mu);
                break;
            }
        }
        seen = now;
        atomic_store(&h->inside, 1); /* sequentially consistent, against the caller's store of NULL */
        struct split *s = atomic_load(&h->current);
        if (s)
            work(s);
        atomic_store(&h->inside, 0);
    }
    return NULL;
}

static void reset_helpers(void)
{
    for (int i = 0; i < MAX_HELPERS; i++) {
        struct helper *h = &helpers[i];
        atomic_store(&h->claimed, 0);
        atomic_store(&h->posted, 0);
        atomic_store(&h->current, NULL);
        atomic_store(&h->inside, 0);
        atomic_store(&h->sleeping, 0);
        atomic_store(&h->cpu, -1);
        atomic_store(&h->tid, 0);
        h->started = 0;
        atomic_store(&h->excluded, -1);
        pthread_mutex_init(&h->mu, NULL);
        pthread_cond_init(&h->cv, NULL);
    }
}

static void after_fork_in_child(void) /* the helper threads stayed in the parent */
{
    reset_helpers();
    pthread_mutex_init(&start_mu, NULL);
}

static void init(void)
{
    pthread_mutex_lock(&start_mu);
    if (nhelpers < 0) {
        const char *env = getenv("AIOGE_SPIN_US");
        const long us = env ? strtol(env, NULL, 10) : SPIN_US;
        spin_ns = (int64_t)(us > 0 ? us : 0) * 1000;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
        if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
            cores = CPU_COUNT(&allowed);
        else
            CPU_ZERO(&allowed);
#endif
        reset_helpers();
        pthread_atfork(NULL, NULL, after_fork_in_child);
        nhelpers = cores > 1 ? (cores - 1 < MAX_HELPERS ? (int)cores - 1 : MAX_HELPERS) : 0;
    }
    pthread_mutex_unlock(&start_mu);
}

/* A free helper, its thread started, or NULL. */
static struct helper *claim(void)
{
    if (nhelpers < 0)
        init();
    for (int i = 0; i < nhelpers; i++) {
        struct helper *h = &helpers[i];
        int free_ = 0;
        if (!atomic_compare_exchange_strong(&h->claimed, &free_, 1))
            continue;
        if (!h->started) {
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            h->initial = atomic_load(&h->posted);
            const int err = pthread_create(&t, &attr, helper_main, h);
            pthread_attr_destroy(&attr);
            if (err) {
                atomic_store(&h->claimed, 0);
                return NULL;
            }
            h->started = 1;
        }
        return h;
    }
    return NULL;
}

/* A thread that waits for work from a caller on `cpu` (a split's helper, a program queue's
 * runner) would, spinning on that CPU, only run when the caller yields it, and asleep it is woken
 * onto the waker's CPU (the scheduler packs threads onto few vCPUs here: sched_vcpu_pack) and
 * shares it with the caller, while the other vCPU idles, for as long as the scheduler finds it
 * cache-hot: 12 ms of a 14 ms program-queue burst. So let thread `tid` (last seen on `at`, -1
 * asleep or unknown) run anywhere but there. The scheduler moves it at once; the set stays
 * until a caller on another CPU finds the thread beside it (*excluded: the CPU its set leaves
 * out, -1 none). */
void aioge_keep_off(int tid, int at, int cpu, _Atomic int *excluded)
{
#ifdef __linux__
    if (nhelpers < 0)
        init(); /* the process's CPUs */
    if (cpu < 0 || tid <= 0 || (at != cpu && at != -1) || atomic_load(excluded) == cpu)
        return;
    cpu_set_t set = allowed; /* never a CPU the process may not use */
    if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set))
        return;
    CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) == 0)
        return;
    atomic_store(excluded, cpu);
    sched_setaffinity(tid, sizeof set, &set);
#else
    (void)tid;
    (void)at;
    (void)cpu;
    (void)excluded;
#endif
}

/* The CPU this thread runs on, -1 unknown. */
int aioge_this_cpu(void) { return this_cpu(); }

/* Run job over [0, total): whole, or with split != 0 and a helper free, in chunks that this
 * thread and the helper take in turn. Returns the number of threads that were offered the job
 * (1 or 2), or the job's (negative) error code, or AIOGE_EJOB for an unknown job. */
int aioge_par_run(int job, const int64_t *args, int64_t total, int split)
{
    if (job < 0 || job >= NJOBS || !JOBS[job])
        return AIOGE_EJOB;
    if (total < 0)
        return AIOGE_EGEOMETRY;
    struct helper *h = split && total >= 2 ? claim() : NULL;
    if (!h) {
        const int r = job_error(JOBS[job](args, 0, total));
        return r ? r : 1;
    }
    struct split s = {.job = job, .args = args, .total = total};
    s.nchunks = total < CHUNKS ? total : CHUNKS;
    s.chunk = (total + s.nchunks - 1) / s.nchunks;
    s.nchunks = (total + s.chunk - 1) / s.chunk;
    atomic_store(&s.next, 0);
    atomic_store(&s.done, 0);
    atomic_store(&s.error, 0);
    aioge_keep_off(atomic_load(&h->tid), atomic_load_explicit(&h->cpu, memory_order_relaxed), this_cpu(), &h->excluded);
    atomic_store(&h->current, &s);
    atomic_fetch_add(&h->posted, 1); /* sequentially consistent: pairs with the helper's sleeping flag */
    if (atomic_load(&h->sleeping)) {
        pthread_mutex_lock(&h->mu);
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    work(&s);
    unsigned spins = 0;
    while (atomic_load(&s.done) < s.nchunks) /* chunks the helper took and has not finished */
        if (++spins < 1u << 14)
            relax();
        else
            sched_yield();
    atomic_store(&h->current, NULL);
    while (atomic_load(&h->inside)) /* the helper may still hold &s: wait until it lets go */
        if (++spins < 1u << 14)
            relax();
        else
            sched_yield();
    atomic_store(&h->claimed, 0);
    const int err = atomic_load(&s.error);
    return err ? err : 2;
}

/* A native program: n jobs run in order in this thread, entries holding (job, args, total,
 * worth) each; a job whose worth is set splits over a helper when split is. The GIL is released
 * once for the whole run (kernels.native.run_program). Returns 0, or the job's error (minus)
 * with *failed set to its entry. */
int aioge_run_jobs(const int64_t *entries, int64_t n, int split, int64_t *failed)
{
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = entries + 4 * i;
        const int r = aioge_par_run((int)e[0], (const int64_t *)(intptr_t)e[1], e[2], split && e[3]);
        if (r < 0) {
            *failed = i;
            return r;
        }
    }
    return 0;
}

/* How many helpers a split may use (the cores less one; 0 on one core). */
int aioge_par_helpers(void)
{
    init();
    return nhelpers;
}
