/* The register tile of the micro-kernels the GEMM (gemm.c) and the direct convolutions
 * (conv_direct.c) share, per ISA tier at compile time; the packed operands' layouts follow it
 * (aioge.kernels.native.gemm_tile). Internal to the C files: Python reads MR and NR through
 * aioge_conv_gemm_mr and _nr. A tile is MR rows by NV vectors of VL floats (NR = NV * VL
 * columns), its MR * NV accumulators plus NV loaded vectors within the tier's vector registers. */
#ifndef AIOGE_TILE_H
#define AIOGE_TILE_H
#include <stdint.h>

#ifdef __AVX512F__ /* 6 x 4 of 16 floats: 24 of the 32 zmm registers */
#define VL 16
#define NV 4
#define MR8 8  /* row panels' weight rows when M is a multiple of 8 ... */
#define NR8 48 /* ... and their positions: 8 x 3 vectors (this tier only) */
#elif defined(__AVX__) /* 6 x 2 of 8 floats: 12 of the 16 ymm registers (a 64-byte vector here is a pair of ymm, */
#define VL 8           /* and 6 x 4 of them spilled: the GEMM and conv ran 15-25x slower than OpenBLAS) */
#define NV 2
#else /* SSE2: 6 x 2 of 4 floats in 12 of the 16 xmm registers */
#define VL 4
#define NV 2
#endif
#define MR 6
#define NR (NV * VL)
#define KC 160

typedef float vf __attribute__((vector_size(VL * 4), aligned(VL * 4)));
typedef float vfu __attribute__((vector_size(VL * 4), aligned(4)));
/* 16 floats, whatever the tier: the one-row products' column groups (gemv_n's groups of 16) */
typedef float v16 __attribute__((vector_size(64), aligned(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

/* This thread's accumulator buffer of at least n floats (alloc.c's thread scratch, slot 0). */
static inline float *accumulator(size_t n) { return aioge_thread_scratch(0, n); }

#endif
