/* The activations the C kernels apply, shared by norm.c (which computes them) and the
 * convolutions of conv.c and gemm.c (which apply one to each output tile while it is still in
 * L1, instead of a second pass over the whole output). The codes are aioge.kernels.native_rows'
 * (its _ACT and _EPILOGUE tables). */
#ifndef AIOGE_ACT_H
#define AIOGE_ACT_H
#include <stdint.h>
#include <string.h>

enum {
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
};

/* y[i] = act(x[i] + bias[i]) for i < n (no bias when it is NULL); y may be x. p0, p1: Swish's
 * alpha, HardSigmoid's alpha and beta, LeakyRelu's alpha, Clip's bounds. */
void aioge_act_span(const float *x, const float *bias, float *y, int64_t n, int act, float p0, float p1);

/* A float32 parameter travelling in an int64 geometry slot as its bit pattern. */
static inline float aioge_float_of(int64_t bits)
{
    const int32_t b = (int32_t)bits;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

#endif
