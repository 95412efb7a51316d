/* The register tile of the micro-kernels the GEMM (gemm.c) and the direct convolutions
 * (conv_direct.c) share; the packed operands' layouts follow it (aioge.kernels.native.gemm_tile).
 * Internal to the C files: Python reads MR and NR through aioge_conv_gemm_mr and _nr. */
#ifndef AIOGE_TILE_H
#define AIOGE_TILE_H
#include <stdint.h>

#define MR 6
#define NR 64
#define MR8 8  /* row panels' weight rows when M is a multiple of 8 ... */
#define NR8 48 /* ... and their positions: 8 x 3 vectors */
#define KC 160

typedef float v16 __attribute__((vector_size(64), aligned(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* This thread's accumulator buffer of at least n floats (alloc.c's thread scratch, slot 0). */
static inline float *accumulator(size_t n) { return aioge_thread_scratch(0, n); }

#endif
