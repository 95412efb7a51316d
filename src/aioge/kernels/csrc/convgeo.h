/* The conv geometry: the int64 slots every direct/conv_t/Winograd conv job reads (conv_direct.c)
 * and the jobs that build or copy one (irblock.c's bands). One list, so a slot added for the
 * convs is in every copy. */
#ifndef AIOGE_CONVGEO_H
#define AIOGE_CONVGEO_H

/* C, H, W, M, KH, KW, SH, SW, DH, DW, PT, PL, OH, OW, N */
enum { G_C, G_H, G_W, G_M, G_KH, G_KW, G_SH, G_SW, G_DH, G_DW, G_PT, G_PL, G_OH, G_OW, G_N, G_LEN };
/* then HPH, WPH, IMAGE (floats per image of xph), the activation applied to the outputs: aioge.h's
 * code and its parameters' float32 bits, row panels (G_ROWS) and their weight rows per block
 * (G_MR: MR, or MR8 with G_ROWS), and G_Z: the address of a residual z of y's layout (0: none):
 * y = act(conv + bias + z) */
enum { G_HPH = G_LEN, G_WPH, G_IMAGE, G_ACT, G_ACT_P0, G_ACT_P1, G_ROWS, G_MR, G_Z, G_DIRECT_LEN };
#endif
