/* The C tier's one contract with Python (aioge.kernels.native) and between its files: every
 * exported function, the jobs of aioge_par_run, the error codes and the activation codes.
 * Every .c file of this folder includes it; tests/engines/test_native_header.py parses it and
 * checks native.py's job numbers, activation codes and ctypes signatures against it.
 * AIOGE_ABI bumps with any change here (module.c's aioge_native_abi returns it).
 *
 * One error rule: a function that can fail returns 0 (or a count) on success and a negative
 * AIOGE_E* code on failure, never a positive one; aioge_par_run and aioge_run_jobs pass a
 * job's negative code on unchanged, and the Python side raises on any negative return. */
#ifndef AIOGE_H
#define AIOGE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define AIOGE_ABI 29

enum aioge_error {
    AIOGE_OK = 0,
    AIOGE_ENOMEM = -1,    /* a scratch buffer could not be allocated (nothing written) */
    AIOGE_EGEOMETRY = -2, /* the geometry does not fit the buffer sizes it came with (nothing written) */
    AIOGE_EINDEX = -3,    /* an index (JOB_GATHER's) outside its axis */
    AIOGE_EJOB = -1000,   /* an unknown job */
};

/* The jobs of aioge_par_run (jobs.c's JOBS[] in this order); their argument blocks are
 * described beside each job in jobs.c. The windowed ones (the convolutions, pools and phase
 * images) end with the sizes in floats of the buffers they read and write, checked against
 * their geometry at entry (a job whose geometry reaches past them writes nothing and returns
 * AIOGE_EGEOMETRY): the geometry comes from descs a crafted .om could have made up. */
enum aioge_job {
    JOB_GEMM = 0,
    JOB_CONV_DIRECT = 1,
    JOB_CONV_T = 2,
    JOB_DEPTHWISE = 3,
    JOB_ACTIVATION = 4,
    JOB_PACK = 5,
    JOB_GEMV_T = 6,
    JOB_CHAIN = 7,
    JOB_POOL = 8,
    JOB_CONV_IMAGES = 9,
    JOB_SQUEEZE = 10,
    JOB_CONV_GROUPED = 11,
    JOB_GEMV_N = 12,
    JOB_CONV_LOCAL = 13,
    JOB_SOFTMAX = 14,
    JOB_LAYERNORM = 15,
    JOB_PHASES = 16,
    JOB_GLOBAL_MEAN = 17,
    JOB_STRIDED = 18,
    JOB_BINARY = 19,
    JOB_SGEMM = 20,
    JOB_RESIDUAL = 21,
    JOB_QGEMM = 22,
    JOB_LOWP_GEMM = 23,
    JOB_LOWP_ROUND = 24,
    JOB_ELEMWISE = 25,
    JOB_GATHER = 26,
    JOB_CUMULATIVE = 27,
    JOB_ARG_REDUCE = 28,
    JOB_GATHER_ELEMENTS = 29,
    JOB_WINOGRAD = 30,
    JOB_IRB = 31,
    JOB_RNN = 32,
    AIOGE_NJOBS = 33,
};

/* The activations the C kernels apply (norm.c computes them; the convolutions of dwconv.c and
 * gemm.c apply one to each output tile while it is still in L1). */
enum aioge_act {
    ACT_NONE = 0,
    ACT_ERF = 1,
    ACT_GELU = 2,
    ACT_GELU_TANH = 3,
    ACT_SIGMOID = 4,
    ACT_SWISH = 5,
    ACT_HARDSIGMOID = 6,
    ACT_HARDSWISH = 7,
    ACT_RELU = 8,
    ACT_LEAKY_RELU = 9,
    ACT_CLIP = 10,
    ACT_TANH = 11,
};

/* A float32 parameter travelling in an int64 geometry slot as its bit pattern. */
static inline float aioge_float_of(int64_t bits)
{
    const int32_t b = (int32_t)bits;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Whether a buffer of `have` values holds a * b * c * d of them (computed without overflow; a
 * negative factor never fits): the checked boundary's one test. */
static inline int aioge_fits(int64_t have, int64_t a, int64_t b, int64_t c, int64_t d)
{
    if (a < 0 || b < 0 || c < 0 || d < 0)
        return 0;
    return (__int128)have >= (__int128)a * b * c * d;
}

/* module.c; aioge_native_isa: the instruction sets the compiler targeted, one bit each in the
 * order of native.py's ISA (avx, avx2, fma, avx512f, avx512bw, avx512vl, avx512_bf16,
 * avx512_vnni, asimd), so Python can refuse a build this CPU cannot run; aioge_cpu_isa: what
 * this CPU runs, in the same bits (from CPUID; -1 where unknown), so Python picks the ISA tier */
int aioge_native_abi(void);
int64_t aioge_native_isa(void);
int64_t aioge_cpu_isa(void);

/* alloc.c: every allocation of the tier, which tests can make fail (the nth from now) */
void *aioge_malloc(size_t n);
void *aioge_calloc(size_t n);
void *aioge_aligned_alloc(size_t align, size_t n);
void aioge_fail_alloc(int64_t nth);

/* dwconv.c */
int aioge_conv_depthwise_f32(const float *x, const float *w, const float *bias, float *y, const int64_t *geometry,
                             int64_t p0, int64_t p1);

/* gemm.c */
/* The checked boundary of the direct convolutions: whether buffers of xn and yn floats hold
 * what geometry g reaches (x itself with reads_x, else its stride-phase image; y whole). */
int aioge_conv_fits(const int64_t *g, int64_t xn, int64_t yn, int reads_x);
int aioge_conv_gemm_mr(void);
int aioge_conv_gemm_nr(void);
float *aioge_thread_scratch(int slot, size_t n);
void aioge_conv_phases_f32(const float *x, float *xph, const int64_t *g);
void aioge_conv_phases_planes_f32(const float *x, float *xph, const int64_t *g, int64_t u0, int64_t u1);
int aioge_conv_direct_f32(const float *xph, const float *wpack, const int64_t *koff, const float *bias, float *y,
                          const int64_t *g, int64_t p0, int64_t p1, int64_t mb0, int64_t mb1);
int aioge_conv_direct_images_f32(const float *x, const float *wpack, const int64_t *koff, const float *bias, float *y,
                                 const int64_t *g, int64_t n0, int64_t n1);
int aioge_conv_direct_local_f32(const float *x, const float *wpack, const int64_t *koff, const float *bias, float *y,
                                const int64_t *g, int64_t p0, int64_t p1, int64_t mb0, int64_t mb1);
void aioge_gemm_packed_f32(const float *a, int64_t lda, const float *bpack, const float *bias, float *y, int64_t ldy,
                           int64_t N, int64_t K, int64_t r0, int64_t r1, int64_t p0, int64_t p1);
int aioge_conv_t_f32(const float *xph, const float *wpack, const int64_t *koff, const float *bias, float *y,
                     const int64_t *g, int64_t u0, int64_t u1, int64_t p0, int64_t p1);
int aioge_conv_winograd_f32(const float *x, const float *U, const int64_t *koff, const float *bias, float *y, const int64_t *g,
                            float *V, float *Mo, int stage, int R, int64_t TH, int64_t TW, int64_t lo, int64_t hi);
void aioge_pack_columns_f32(const float *b, int64_t sk, int64_t sn, int64_t K, int64_t N, float *bpack, int64_t p0,
                            int64_t p1);
void aioge_gemv_t_f32(const float *x, const float *w, int64_t ldw, const float *bias, float *y, int64_t K, int64_t n0,
                      int64_t n1);
int aioge_gemv_n_f32(const float *x, const float *w, int64_t ldw, const float *bias, float *y, int64_t K, int64_t N,
                     int act, float p0, float p1, int64_t g0, int64_t g1);

/* norm.c */
void aioge_layernorm_f32(const float *x, const float *scale, const float *bias, float *y, float *mean_out, float *inv_out,
                         int64_t width, float eps, int64_t r0, int64_t r1);
void aioge_softmax_f32(const float *x, float *y, int64_t width, int log_form, int64_t r0, int64_t r1);
/* y[i] = act(x[i] + bias[i]) for i < n (no bias when it is NULL); y may be x. p0, p1: Swish's
 * alpha, HardSigmoid's alpha and beta, LeakyRelu's alpha, Clip's bounds. */
void aioge_act_span(const float *x, const float *bias, float *y, int64_t n, int act, float p0, float p1);
void aioge_activation_f32(const float *x, float *y, int act, float p0, float p1, int64_t n0, int64_t n1);
void aioge_bias_activation_f32(const float *x, const float *bias, float *y, int64_t width, int act, float p0, float p1,
                               int64_t r0, int64_t r1);
void aioge_channel_chain_f32(const float *x, float *y, int64_t C, int64_t hw, int64_t nsteps, const int64_t *ops,
                             const float *const *k, int act, float a0, float a1, int64_t p0, int64_t p1);
int aioge_squeeze_f32(const float *x, const float *w1t, const float *b1, const float *w2t, const float *b2, float *scale,
                      int64_t C, int64_t hw, int64_t C1, const int64_t *acts, int64_t i0, int64_t i1);

/* irblock.c: JOB_IRB, an inverted-residual block in bands of output rows */
int aioge_irb(const int64_t *g, int64_t lo, int64_t hi);

/* jobs.c */
int aioge_job(int job, const int64_t *args, int64_t lo, int64_t hi);

/* par.c */
int aioge_par_run(int job, const int64_t *args, int64_t total, int split);
int aioge_run_jobs(const int64_t *entries, int64_t n, int split, int64_t *failed);
int aioge_par_helpers(void);
int64_t aioge_par_backoff(int64_t caller_ns, int64_t mine, int64_t wait_ns, int64_t now);
void aioge_par_stats(int64_t *out);
void aioge_par_last(int64_t *out);

/* affinity.c */
int aioge_allowed_cpus(void);
int aioge_this_cpu(void);
void aioge_keep_off(int tid, int at, int cpu, _Atomic int *excluded);

/* queue.c */
void *aioge_queue_new(int runners);
int aioge_queue_fd(void *handle);
int64_t aioge_queue_push(void *handle, int64_t *record);
int aioge_queue_take(void *handle);
int64_t aioge_queue_arm(void *handle);
void aioge_queue_free(void *handle);

/* rnn.c: the recurrences of RNN, GRU and LSTM (geometry slots RNN_*) */
enum {
    RNN_CELL, RNN_SEQ, RNN_BATCH, RNN_HIDDEN, RNN_DIRS, RNN_REVERSE, RNN_LBR, RNN_COUPLE, RNN_HAS_CLIP,
    RNN_XW_ST, RNN_XW_SB, RNN_Y_ST, RNN_Y_SB, RNN_Y_SD, RNN_ACTS, /* 3 codes per direction */
    RNN_GEO = RNN_ACTS + 6
};

/* The floats of R^T packed for every direction (aioge_rnn_pack's pk), or -1 on a bad geometry. */
int64_t aioge_rnn_packed_floats(const int64_t *geo);

/* R (directions, G*H, H) packed into pk (floats long, 32-byte aligned); 0, or -1 on a bad
 * geometry or a short pk. */
int aioge_rnn_pack(const int64_t *geo, const float *r, float *pk, int64_t floats);

/* JOB_RNN (rnn.c: a recurrent layer, its input projection included): its argument slots, then
 * the job (range: directions, or with a team block the two parts sharing each step) and the
 * floats of its shared rows (RJ_HS) for every direction, or -1 on a bad geometry. */
enum {
    RJ_GEO, RJ_FP, RJ_X, RJ_W, RJ_IN, RJ_ROWS, RJ_SGEMM, RJ_WIDE, RJ_XW, RJ_PK, RJ_PK_FLOATS, RJ_BIAS, RJ_PEEP, RJ_LENS,
    RJ_Y, RJ_H, RJ_C, RJ_HS, RJ_HS_FLOATS, RJ_TEAM, RJ_ARGS
};
int aioge_rnn_job(const int64_t *args, int64_t lo, int64_t hi);
int64_t aioge_rnn_shared_floats(const int64_t *geo);

/* pool.c: 2-D max and average pools (geometry: POOL_GEO slots, pool.c's G_*), ind NULL or
 * MaxPool's Indices; aioge_simd_avx2: whether pool.c and dwconv.c run AVX2 (force 0 or 1: plain
 * loops, or AVX2 where the CPU has it; dwconv.c's forms forced, its tests' and benches' switch:
 * 2 the flat-phase form, 3 eight planes at a time, 4 the choice before the line form, 5 the line
 * form where it applies; -1 asks) */
int aioge_pool_f32(const float *x, float *y, int64_t *ind, const int64_t *g, int64_t p0, int64_t p1);
int aioge_simd_avx2(int force);
/* qgemm.c: the int8 GEMM of the quantised ops. aioge_qgemm_packed: the int16 values of B (K x N)
 * packed (-1 on a bad geometry); aioge_qgemm_pack: B (element (k, j) at b[k * sk + j * sn], u8 or
 * s8) less its zero points (1 or N of them) into packed; aioge_qgemm_rows: row blocks [b0, b1) (4
 * rows each) of y = requant((a - za) @ packed + bias), by the geometry block of qgemm.c (also
 * JOB_QGEMM's); aioge_qgemm_path: the tile in use (0 scalar, 1 AVX2, 2 AVX512-VNNI), forced down
 * to `force` when it is not negative (tests). */
int64_t aioge_qgemm_packed(int64_t k, int64_t n);
int aioge_qgemm_pack(const void *b, int b_signed, int64_t k, int64_t n, int64_t sk, int64_t sn, const int32_t *zb,
                     int64_t nzb, int16_t *packed, int64_t packed_len);
int aioge_qgemm_rows(const int64_t *g, int64_t b0, int64_t b1);
int aioge_qgemm_path(int force);
/* The u8 x s8 form of B (bytes; -1 on a bad geometry) and its packing: B (less its zero points)
 * as B' + R, B' with |b[k][j]| + |b[k+1][j]| <= 128 for every even k (vpmaddubsw exact) and R
 * sparse (rptr: N + 1 offsets, ridx/rval: k and value); 1 + R's size when written, 0 when R
 * would pass rcap (nothing written), negative on a bad geometry. */
int64_t aioge_qgemm_packed8(int64_t k, int64_t n);
int aioge_qgemm_pack8(const void *b, int b_signed, int64_t k, int64_t n, int64_t sk, int64_t sn, const int32_t *zb,
                      int64_t nzb, int8_t *packed, int64_t packed_len, int32_t *colsum, int32_t *rptr, int32_t *ridx,
                      int16_t *rval, int64_t rcap);
/* DynamicQuantizeMatMul's quantisation of A (as DynamicQuantizeLinear; QuantizeLinear's per-tensor
 * one too): lohi = (min(x, 0), max(x, 0)); y = saturate(rint(x / scale) + zero) to uint8 or int8
 * (is_signed), scale > 0. */
int aioge_qgemm_range(const float *x, int64_t n, float *lohi);
int aioge_qgemm_quantize(const float *x, int64_t n, float scale, float zero, int is_signed, void *y);
/* DequantizeLinear's per-tensor 8-bit case: y = (x - zero) * scale, x uint8 or int8 (is_signed). */
int aioge_qgemm_dequantize(const void *x, int is_signed, int64_t n, float scale, float zero, float *y);
/* lowp.c: bf16 (kind 0) and fp16 (kind 1) operands, float32 accumulation (GE's precision modes) */
void aioge_lowp_force_scalar(int on);
int aioge_lowp_isa(void);
void aioge_lowp_round_f32(int kind, const float *x, float *y, int64_t n);
int aioge_lowp_pack(int kind, const float *b, int64_t sk, int64_t sn, int64_t K, int64_t N, uint16_t *bp, int64_t bp_len);
int aioge_lowp_gemm(int kind, const float *a, int64_t lda, const uint16_t *bp, int64_t bp_len, const float *bias, float *y,
                    int64_t ldy, int64_t M, int64_t K, int64_t N, int act, float p0, float p1, int64_t m0, int64_t m1);

/* par.c: wake the sleeping C helpers ahead of a run (kernels.parallel.wake_helpers) */
int aioge_par_wake(void);
/* qgemm.c: an 8-bit (batch, rows, cols) -> (batch, cols, rows) transpose (QLinearConv's NCHW <-> NHWC) */
int aioge_transpose8(const uint8_t *x, int64_t batch, int64_t rows, int64_t cols, uint8_t *y);
/* qgemm.c: a QDQ model's DQ(a) + DQ(b) -> Q in one pass (float32, rounding as the three nodes do) */
int aioge_qdq_add(const void *a, float sa, float za, const void *b, float sb, float zb, int is_signed, int64_t n,
                  float sc, float zc, void *y);
/* index.c: the jobs along one axis of an (outer, n, inner) tensor (JOB_CUMULATIVE, JOB_ARG_REDUCE,
 * JOB_GATHER_ELEMENTS; argument blocks beside each) */
int aioge_cumulative(const int64_t *g, int64_t lo, int64_t hi);
int aioge_arg_reduce(const int64_t *g, int64_t lo, int64_t hi);
int aioge_gather_elements(const int64_t *g, int64_t lo, int64_t hi);

#endif
