"""A native program's inverted-residual blocks (1x1 expand conv, depthwise conv, 1x1 project conv)
as one ``JOB_IRB`` each (``csrc/irblock.c``): each core computes a band of output rows through
all three, so the wide tensors stay in the core that made them. Split per op, the depthwise's
planes and the 1x1 convs' positions went to different cores and every edge crossed them
(MobileNetV2's blocks, the three jobs against the band job, chrt, load 6.5: 14x14 64-384-64
163 -> 125 us, 96-576-96 286 -> 250, 14->7 96-576-160 261 -> 197; at 7x7 two bands of 4 and 3
rows lost (110 -> 202), at 28x28 and 56x56 even or lost, so only inputs of 10-20 rows)."""

from __future__ import annotations

import numpy as np

from aioge.kernels import native
from aioge.kernels.matmul_algos import pack_columns

_CONVS = (native.JOB_CONV_T, native.JOB_CONV_DIRECT, native.JOB_CONV_LOCAL)


def _pointwise(g: np.ndarray) -> bool:  # a 1x1 conv at stride 1 without pads, one image
    return bool((g[4:10] == 1).all() and not g[10:12].any() and g[14] == 1)


def fuse(calls: list[native.NativeCall], kept: list[np.ndarray]) -> list[native.NativeCall]:
    """``calls`` with every expand, depthwise, project run (the wide tensors read by nothing else,
    ``kept`` the program's outputs) as one band job; the 1x1 convs' phase images go with them."""
    out: list[native.NativeCall] = []
    i = 0
    while i < len(calls):
        made = _block(calls, i, kept)
        if made is None:
            out.append(calls[i])
            i += 1
            continue
        if out and out[-1].job == native.JOB_PHASES and out[-1].keep is calls[i].keep:
            out.pop()
        out.append(made[0])
        i = made[1]
    return out


def _pack(keep: tuple) -> np.ndarray:  # a 1x1 conv's raw weight as conv_t's packed columns
    w = np.asarray(keep[5], np.float32)
    return pack_columns(np.ascontiguousarray(w.reshape(w.shape[0], -1).T), native.gemm_tile()[1])  # type: ignore[index]


def _geometry(g: np.ndarray) -> np.ndarray:  # a 1x1 conv's, as conv_t reads x in place
    c, h, w, m = (int(v) for v in g[:4])
    return np.array([c, h, w, m, 1, 1, 1, 1, 1, 1, 0, 0, h, w, 1, h, w, c * h * w, *g[18:21], 0, 0], np.int64)


def _block(calls: list[native.NativeCall], i: int, kept: list[np.ndarray]) -> tuple[native.NativeCall, int] | None:
    j = i + 2  # the project conv, after its phase image if it has one
    if j < len(calls) and calls[j].job == native.JOB_PHASES:
        j += 1
    if j >= len(calls) or calls[i].job not in _CONVS or calls[i + 1].job != native.JOB_DEPTHWISE or calls[j].job not in _CONVS:
        return None
    e, d, p = calls[i].keep, calls[i + 1].keep, calls[j].keep
    if len(e) < 6 or len(p) < 6 or e[1] is not d[0] or d[3] is not p[0] or (j > i + 2 and calls[i + 2].keep is not p):
        return None
    ge, gd, gp = e[4][0], d[4], p[4][0]
    if not (_pointwise(ge) and _pointwise(gp) and gd[3] == 1 and 10 <= ge[1] <= 20 and ge[1] * ge[2] <= 400):
        return None
    wide = (e[1], d[3])
    if any(a is w for w in wide for a in kept) or any(
        a is w for n, c in enumerate(calls) if not i - 1 <= n <= j for a in c.keep for w in wide
    ):
        return None
    geo, pgeo, wep, wpp = _geometry(ge), _geometry(gp), _pack(e), _pack(p)
    koff = np.arange(geo[0], dtype=np.int64) * geo[1] * geo[2]
    x, y, oh = e[0], p[1], int(gd[12])
    band = -(-oh // 2)
    P = native.ptr
    addr = [P(x), P(wep), P(koff), P(e[3]) if e[3] is not None else 0, P(geo), P(d[1]), P(d[2]) if d[2] is not None else 0]
    addr += [P(gd), P(wpp), P(p[3]) if p[3] is not None else 0, P(pgeo), P(y), band, x.size, y.size]
    keep = (e, d, p, geo, pgeo, wep, wpp, koff)
    return native.NativeCall(native.JOB_IRB, np.array(addr, np.int64), -(-oh // band), True, keep), j + 1
