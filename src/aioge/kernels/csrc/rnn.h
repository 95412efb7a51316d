/* The recurrent kernels of rnn.c (ONNX RNN, GRU and LSTM in float32); see rnn.c for the
 * geometry block and aioge.kernels.rnn for the caller. */
#ifndef AIOGE_RNN_H
#define AIOGE_RNN_H
#include <stdint.h>

/* The slots of aioge_rnn's geometry block. */
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

/* Runs directions [d0, d1) of one recurrent layer; 0 on success, negative on bad geometry (-1)
 * or no memory for scratch (-2). */
int aioge_rnn(const int64_t *geo, const float *fp, const float *xw, const float *pk, int64_t pk_floats, const float *bias,
              const float *peep, const int64_t *lens, float *y, float *h, float *c, int64_t d0, int64_t d1);

#endif
