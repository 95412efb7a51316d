"""A native program's inverted-residual blocks (1x1 expand conv, depthwise conv, 1x1 project conv)
as one ``JOB_IRB`` (``csrc/irblock.c``) in its channel form. Split per op, the depthwise's planes
and the 1x1 convs' positions went to different cores, and every edge crossed them; here each
core expands half the channels (whole 16-plane groups), runs their depthwise and the project
over them (half of each weight), and a ``JOB_RESIDUAL`` adds the two partial sums (so only a
project without an activation). MobileNetV2's jobs in program order (chrt, load 8.4, medians of
200): 14x14 64-384-64 155-161 -> 125-136 us, 96-576-96 282 -> 256-260, 7x7 160-960-160 219-224
-> 210-212, the 14->7 stride-2 block 212 -> 224 (so stride 1 only); the run 5036 -> 4845. The
band form (each core all three ops over half the output rows) won alone (28x28 32-192-32
227 -> 176 us) but not in program order (184 -> 174-244), nor at 56x56. A whole run takes the
block's own jobs (irblock.c's irb_whole): on one core the conv_t expand costs more than the
tuned kernels. Blocks over 20 rows whose depthwise outputs are at least 28 wide take the streaming
form (``_stream``): two segments of output rows, one a core, each in bands whose expanded rows stay
in L2, the program's own conv_direct weights. Per block in program order (chrt, load 7-8, medians
of 15), split wall: MobileNetV2's 112x112 16-96-24 s2 645 -> 504 us, 56x56 24-144-24 423 -> 331,
56x56 s2 244 -> 234, 28x28 32-192-32 159 -> 153; MnasNet's 56x56 24-72-24 195 -> 149. Whole (one
core, thread CPU) the 112 and 56 s1 blocks 1168 -> 919, 676 -> 629; outputs under 48 wide lose
whole (row panels leave lanes idle: 28x28 239 -> 304), so their whole run is the own jobs."""

from __future__ import annotations

from typing import Any

import numpy as np

from aioge.kernels import native
from aioge.kernels.matmul_algos import pack_columns

__all__ = ["fuse"]

_CONVS = (native.JOB_CONV_T, native.JOB_CONV_DIRECT, native.JOB_CONV_LOCAL)


def _pointwise(g: np.ndarray) -> bool:  # a 1x1 conv at stride 1 without pads, one image
    return bool((g[4:10] == 1).all() and not g[10:12].any() and g[14] == 1)


def fuse(calls: list[native.NativeCall], nodes: list[int], kept: list[np.ndarray]) -> tuple[list[native.NativeCall], list[int]]:
    """``calls`` with every expand, depthwise, project run (the wide tensors read by nothing else,
    ``kept`` the program's outputs) as the block's job; the 1x1 convs' phase images go with them.
    ``nodes`` (each call's step) follows: a block's jobs are the project conv's, whose output they write."""
    out: list[native.NativeCall] = []
    at: list[int] = []
    i = 0
    while i < len(calls):
        made = _block(calls, i, kept) or _stream(calls, i, kept)
        if made is None:
            out.append(calls[i])
            at.append(nodes[i])
            i += 1
            continue
        if out and out[-1].job == native.JOB_PHASES and out[-1].keep is calls[i].keep:
            out.pop()
            at.pop()
        out += made[0]
        at += [nodes[made[1] - 1]] * len(made[0])
        i = made[1]
    return out, at


def _pack(w: Any) -> np.ndarray:  # a 1x1 conv's weight (M, K) as conv_t's packed columns
    return pack_columns(np.ascontiguousarray(np.asarray(w, np.float32).T), native.gemm_tile()[1])  # type: ignore[index]


_overlap = np.shares_memory  # whether the planner laid a block's y over its x


def _geometry(g: np.ndarray, c: int = 0, m: int = 0) -> np.ndarray:  # a 1x1 conv's (c inputs, m outputs), as conv_t reads x
    c, h, w, m = c or int(g[0]), int(g[1]), int(g[2]), m or int(g[3])
    return np.array([c, h, w, m, 1, 1, 1, 1, 1, 1, 0, 0, h, w, 1, h, w, c * h * w, *g[18:21], 0, 0, 0], np.int64)


def _block(calls: list[native.NativeCall], i: int, kept: list[np.ndarray]) -> tuple[list[native.NativeCall], int] | None:
    j = i + 2  # the project conv, after its phase image if it has one
    if j < len(calls) and calls[j].job == native.JOB_PHASES:
        j += 1
    if j >= len(calls) or calls[i].job not in _CONVS or calls[i + 1].job != native.JOB_DEPTHWISE or calls[j].job not in _CONVS:
        return None
    e, d, p = calls[i].keep, calls[i + 1].keep, calls[j].keep
    if len(e) < 6 or len(p) < 6 or e[1] is not d[0] or d[3] is not p[0] or (j > i + 2 and calls[i + 2].keep is not p):
        return None
    ge, gd, gp = e[4][0], d[4], p[4][0]
    if not (_pointwise(ge) and _pointwise(gp) and gd[3] == 1 and gd[6] == 1 and ge[1] <= 20 and ge[3] >= 32 and not gp[18]):
        return None
    wide = (e[1], d[3])
    if any(a is w for w in wide for a in kept) or any(
        a is w for n, c in enumerate(calls) if not i - 1 <= n <= j for a in c.keep for w in wide
    ):
        return None
    # the planner may lay a buffer over one dead by then in the ops' order (x once the expand has read it, the
    # expanded image once the depthwise has): here the two cores run the ops at once, so x and y must be apart
    # (else the parts write a y of the job's own, their sum the planned y), the wide images from them and each other
    x, out, wp = e[0], p[1], np.asarray(p[5], np.float32).reshape(int(gp[3]), -1)
    r = calls[j + 1].args if j + 1 < len(calls) and calls[j + 1].job == native.JOB_RESIDUAL else np.zeros(7, np.int64)
    skip = bool(r[0] == r[2] == native.ptr(out) and r[1] == native.ptr(x) and not r[3] and r[6] == x.size == out.size)  # y += x
    own = [v for c in calls[i - 1 if i and calls[i - 1].keep is e else i : j + 1 + skip] for v in (c.job, c.addr, c.total)]
    c, e_ = int(ge[0]), int(ge[3])
    k0 = min(max((e_ // 2 + 8) // 16 * 16, 16), e_ - 16)  # halves in whole 16-plane groups of the depthwise
    we, koff = np.asarray(e[5], np.float32).reshape(e_, -1), np.arange(c, dtype=np.int64) * ge[1] * ge[2]
    ge0, ge1, we0, we1 = _geometry(ge, m=k0), _geometry(ge, m=e_ - k0), _pack(we[:k0]), _pack(we[k0:])
    y = np.empty(out.shape, np.float32) if _overlap(x, out) else out
    P = native.ptr
    be = (P(e[3]), P(e[3]) + 4 * k0) if e[3] is not None else (0, 0)
    block: list[Any] = [P(x), P(we0), P(koff), be[0], P(ge0), P(d[1]), P(d[2]) if d[2] is not None else 0, P(gd)]
    keep: tuple[Any, ...] = (e, d, p, ge0, ge1, we0, we1, koff, calls[i : j + 1 + skip])
    bias = P(p[3]) if p[3] is not None else 0
    g0, g1, w0, w1 = _geometry(gp, k0), _geometry(gp, e_ - k0), _pack(wp[:, :k0]), _pack(wp[:, k0:])
    part = np.zeros(y.shape, np.float32)
    mid, dwo = e[1], d[3]
    if any(np.shares_memory(mid, b) for b in (x, dwo, y)):
        mid = np.empty(mid.shape, np.float32)
    if any(np.shares_memory(dwo, b) for b in (x, mid, y)):
        dwo = np.empty(dwo.shape, np.float32)
    block += [P(w0), bias, P(g0), P(y), 0, x.size, y.size, P(mid), P(dwo), k0, P(w1), P(g1), P(part)]
    block += [mid.size, dwo.size, part.size, P(we1), be[1], P(ge1), P(out) if y is not out else 0, P(x) if skip else 0]
    add = np.array([P(y), P(part), P(out), 0, 0, 0, y.size], np.int64)
    keep += (g0, g1, w0, w1, part, mid, dwo, y)
    made = [
        native.NativeCall(native.JOB_IRB, np.array(block + [len(own) // 3, *own], np.int64), 2, True, keep),
        native.NativeCall(native.JOB_RESIDUAL, add, y.size, False, (y, part, out)),
    ]
    return made, j + 1 + skip


def _rows(g: np.ndarray, args: np.ndarray) -> tuple[np.ndarray, int]:  # a conv_direct geometry with row panels; panels a row
    g = np.array(g, np.int64)
    if g[21]:
        return g, int(args[6]) // int(g[12])
    g[21:23] = 1, 0  # the weight packed in MR-row blocks, as without row panels
    return g, -(-int(g[13]) // native.gemm_tile()[1])  # type: ignore[index]


def _stream(calls: list[native.NativeCall], i: int, kept: list[np.ndarray]) -> tuple[list[native.NativeCall], int] | None:
    """A block over 20 rows as JOB_IRB's streaming form (irblock.c's irb_stream): the program's own conv_direct
    weights, two segments of output rows, each a core's, in bands whose expanded rows stay in its L2."""
    j = i + 2
    if j >= len(calls) or (calls[i].job, calls[i + 1].job, calls[j].job) != _STREAM:
        return None
    e, d, p = calls[i].keep, calls[i + 1].keep, calls[j].keep
    if len(e) < 6 or len(p) < 6 or e[1] is not d[0] or d[3] is not p[0]:
        return None
    ge, gd, gp, ea, pa = e[4][0], d[4], p[4][0], calls[i].args, calls[j].args
    if not (
        _pointwise(ge)
        and _pointwise(gp)
        and gd[3] == 1
        and ge[1] > 20
        and gd[13] >= MIN_OW
        and ea[0] == native.ptr(e[0])
        and pa[0] == native.ptr(d[3])
    ):
        return None
    big, x, y = (e[1], d[3]), e[0], p[1]
    if (
        _overlap(x, y)
        or any(a is w for w in big for a in kept)
        or any(a is w for n, c in enumerate(calls) if not i <= n <= j for a in c.keep for w in big)
    ):
        return None
    (g1, r1), (g2, r2) = _rows(ge, ea), _rows(gp, pa)
    P = native.ptr
    wide = bool(gd[13] >= WIDE)  # whole (one core) the own jobs win where row panels leave lanes idle
    own = [v for c in calls[i : j + 1] for v in (c.job, c.addr, c.total)] if WHOLE_OWN and not wide else []
    block = [
        *ea[:4],
        P(g1),
        P(d[1]),
        P(d[2]) if d[2] is not None else 0,
        P(gd),
        pa[1],
        pa[3],
        P(g2),
        pa[4],
        -(BAND if wide else NARROW),
    ]
    block += [ea[9], pa[10], 2, ea[7], pa[7], r1, r2, *[0] * 9, len(own) // 3, *own]
    keep = (e, d, p, g1, g2, calls[i : j + 1])
    return [native.NativeCall(native.JOB_IRB, np.array(block, np.int64), 2, True, keep)], j + 1


_STREAM = (native.JOB_CONV_DIRECT, native.JOB_DEPTHWISE, native.JOB_CONV_DIRECT)
BAND, NARROW, WIDE, MIN_OW, WHOLE_OWN = 8, 14, 48, 28, True  # output rows a band (outputs under WIDE wide: NARROW); narrowest
