"""Convolution algorithms the tuner chooses among (the reference is ``conv.build_conv_im2col``).

- ``conv_im2col_nhwc``: channels-last im2col, so each window row is one contiguous run of
  channels, and one GEMM (N·OH·OW, k·k·C) @ (k·k·C, M); optionally a batch image at a time.
- ``conv_gemm_1x1``: a 1x1 kernel without padding is a GEMM on the (strided) input itself.
- ``conv_depthwise``: group == C: per-channel multiply-adds over the kernel taps, no GEMM.
- ``conv_depthwise_planes``: the same over the stride phases of the padded input, each tap
  one multiply-add over contiguous flattened planes (long rows on small images).
- ``conv_depthwise_native``: group == C, float32, in C (``csrc/dwconv.c``): by geometry eight
  planes at a time channel-interleaved, or a plane at a time over its stride phases (3x3 rows
  four output rows at a time); output planes shared with the C helper. Only with the tier.
- ``conv_direct_native``: group 1, float32, in C (``csrc/conv_direct.c``): the input split into its
  stride phases, so every tap reads contiguous positions, and a register-tiled GEMM (6x64 on
  AVX-512, 6x16 on AVX2, 6x8 on SSE2: ``csrc/tile.h``)
  reading them in place (no im2col) with the weight packed once. Offered only with the tier.
- ``conv_direct_t_native``: the same with the roles swapped: NR output channels in the
  vector lanes (W^T packed once), 6 valid output positions broadcast from the phase image,
  the tile stored transposed; for small planes (7x7, 14x14), where NR-position panels waste
  lanes. Offered only with the tier.
- ``conv_grouped``: 1 < group < C: one im2col and GEMM per group (smaller working sets).
- ``conv_winograd_f23``: Winograd F(2x2, 3x3) for 3x3, stride 1, dilation 1, group 1:
  16 GEMMs of (M, C) @ (C, tiles) instead of one of (M, 9C) @ (9C, 4·tiles), 2.25x fewer
  multiplications.
- ``conv_kn2row``: one GEMM of every tap's weights over the padded input itself,
  (taps·M, C) @ (C, Hp·Wp), then the output as the sum of each tap's plane shifted by the
  tap's offset: no im2col copy, the input is read once. It pays when M is small against C,
  above all for the one-filter convs DuplicateFilterPass leaves (light/ models' constant
  weights), where im2col copies taps·C·OH·OW values to make one output plane.

All work on NCHW tensors (the graph's layout), write into the preallocated output, and
reuse transformed weights across runs when the weight is a (read-only) constant.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, native_rows, packbook
from aioge.kernels.contract import KernelImpl, RunFn, is_constant
from aioge.kernels.conv import window_geometry
from aioge.kernels.fused import build_then_activation
from aioge.kernels.parallel import par_matmul, split_native, split_range

__all__ = [
    "CONV_ALGOS",
    "NATIVE_CONV_ALGOS",
    "NATIVE_SPLIT_MACS",
    "ConvGeometry",
    "WeightDerived",
    "conv_geometry",
    "winograd_weights",
]

Descs = Sequence[TensorDesc | None]


class ConvGeometry:
    """The geometry of a 2-D Conv from static descs and attributes; a 1-D Conv's is that of
    the 2-D one of height 1 (x (N, C, 1, L), w (M, C/group, 1, K): the same memory), with
    ``shape`` its output's own (N, M, OL)."""

    __slots__ = tuple("n c h w m kh kw sh sw dh dw pt pl pb pr oh ow group shape".split())

    def __init__(self, attrs: Mapping[str, Any], x: Sequence[int], w: Sequence[int]) -> None:
        one_d = len(x) == 3
        if one_d:
            x, w, attrs = (x[0], x[1], 1, x[2]), (w[0], w[1], 1, w[2]), as_2d(attrs)
        self.n, self.c, self.h, self.w = (int(d) for d in x)
        self.m, _, self.kh, self.kw = (int(d) for d in w)
        self.group = int(attrs.get("group", 1) or 1)
        self.sh, self.sw = tuple(attrs.get("strides") or (1, 1))
        self.dh, self.dw = tuple(attrs.get("dilations") or (1, 1))
        pads = tuple(attrs.get("pads") or (0, 0, 0, 0))
        begin, end, out = window_geometry(
            (self.h, self.w), (self.kh, self.kw), (self.sh, self.sw), (self.dh, self.dw), pads, attrs.get("auto_pad", "NOTSET")
        )
        self.pt, self.pl = begin
        self.pb, self.pr = end
        self.oh, self.ow = out
        self.shape = (self.n, self.m, self.ow) if one_d else (self.n, self.m, self.oh, self.ow)

    @property
    def unpadded(self) -> bool:
        return not (self.pt or self.pl or self.pb or self.pr)


def as_2d(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A 1-D Conv's attributes as those of the 2-D Conv of height 1."""
    pads = attrs.get("pads") or (0, 0)
    hw = {"strides": (1, *(attrs.get("strides") or (1,))), "dilations": (1, *(attrs.get("dilations") or (1,)))}
    return {**attrs, **hw, "pads": (0, pads[0], 0, pads[1])}


def conv_geometry(descs: Descs, attrs: Mapping[str, Any], rank: tuple[int, ...] = (4,)) -> ConvGeometry | None:
    """The geometry when the Conv is 2-D (or of another ``rank``: 3, 1-D) with static float
    inputs, else None."""
    if len(descs) < 2 or descs[0] is None or descs[1] is None:
        return None
    x, w = descs[0], descs[1]
    if not (x.static and w.static) or x.rank not in rank or w.rank != x.rank or x.dtype not in ("float32", "float64", "float16"):
        return None
    try:
        return ConvGeometry(attrs, x.shape, w.shape)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None


class WeightDerived:
    """A weight-derived array (packed, transformed), recomputed only when the weight changes.
    A read-only weight over read-only memory is a graph constant: the same object is the same
    value (a read-only view of a writeable array is not: its values may change under it).
    A ``layout`` (a name for what ``make`` computes, its tile parameters included) lets a
    model from the graph cache take a constant's derived array from its entry (``packbook``)."""

    __slots__ = ("_src", "_value", "_make", "_layout")

    def __init__(self, make: Callable[[np.ndarray], np.ndarray], layout: str = "") -> None:
        self._src: np.ndarray | None = None
        self._value: np.ndarray | None = None
        self._make = make
        self._layout = layout

    def get(self, w: np.ndarray) -> np.ndarray:
        if self._value is not None and w is self._src and is_constant(w):
            return self._value
        value = packbook.take(w, self._layout) if self._layout else None
        if value is None:
            value = self._make(w)
            if self._layout and is_constant(w):
                packbook.made(w, self._layout, value)
        self._src, self._value = w, value
        return value

    def fixed(self, w: np.ndarray) -> np.ndarray | None:
        """The derived array for a native form, which binds it for good: only for a constant
        weight (read-only, over read-only memory); None for one a run may change (a feed, an
        intermediate), whose derived array would be stale from the next run on."""
        return self.get(w) if is_constant(w) else None


def _output(g: ConvGeometry, outputs: Sequence[np.ndarray] | None, dtype: np.dtype) -> np.ndarray:
    return np.empty(g.shape, dtype) if outputs is None else outputs[0]


def _bias(y: np.ndarray, inputs: Sequence[Any]) -> None:
    b = inputs[2] if len(inputs) > 2 else None
    if b is not None:
        y += b.reshape(1, -1, 1, 1)


def _geometry(attrs: Mapping[str, Any], ins: Descs) -> ConvGeometry:
    g = conv_geometry(ins, attrs, (3, 4))
    if g is None:
        raise ValueError("this convolution algorithm needs a 1-D or 2-D Conv with static float inputs")
    return g


# -- channels-last im2col ----------------------------------------------------------------------


def _nhwc_padded(x: np.ndarray, g: ConvGeometry) -> np.ndarray:
    xh = np.zeros((x.shape[0], g.h + g.pt + g.pb, g.w + g.pl + g.pr, g.c), x.dtype)
    xh[:, g.pt : g.pt + g.h, g.pl : g.pl + g.w, :] = x.transpose(0, 2, 3, 1)
    return xh


def build_conv_im2col_nhwc(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """Channels-last im2col + one GEMM per block of ``params['block']`` images."""
    g = _geometry(attrs, ins)
    block = int(params.get("block", g.n))
    packed = WeightDerived(lambda w: np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(g.kh * g.kw * g.c, g.m)))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        y = _output(g, outputs, x.dtype)
        wm = packed.get(w)
        for n0 in range(0, g.n, block):
            xh = _nhwc_padded(x[n0 : n0 + block], g)
            nb = xh.shape[0]
            s = xh.strides
            cols = as_strided(
                xh,
                (nb, g.oh, g.ow, g.kh, g.kw, g.c),
                (s[0], s[1] * g.sh, s[2] * g.sw, s[1] * g.dh, s[2] * g.dw, s[3]),
                writeable=False,
            )
            cols = np.ascontiguousarray(cols).reshape(nb * g.oh * g.ow, g.kh * g.kw * g.c)
            yh = np.empty((nb * g.oh * g.ow, g.m), x.dtype)  # channels last
            par_matmul(cols, wm, yh)
            np.copyto(y[n0 : n0 + nb], yh.reshape(nb, g.oh, g.ow, g.m).transpose(0, 3, 1, 2))
        _bias(y, inputs)
        return (y,)

    return run


def _applies_nhwc(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    g = conv_geometry(descs, attrs)
    return g is not None and g.group == 1


def _nhwc_candidates(descs: Descs, attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    g = conv_geometry(descs, attrs)
    n = g.n if g is not None else 1
    return [{"block": n}] + ([{"block": 1}] if n > 1 else [])


# -- 1x1 as a GEMM -----------------------------------------------------------------------------


def build_conv_gemm_1x1(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """A 1x1 kernel, no padding: W (M, C) @ x (N, C, OH·OW), straight into the output."""
    g = _geometry(attrs, ins)
    packed = WeightDerived(lambda w: np.ascontiguousarray(w.reshape(g.m, g.c)))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        y = _output(g, outputs, x.dtype)
        xs = x if g.sh == g.sw == 1 else np.ascontiguousarray(x[:, :, :: g.sh, :: g.sw][:, :, : g.oh, : g.ow])
        par_matmul(packed.get(w), xs.reshape(g.n, g.c, g.oh * g.ow), y.reshape(g.n, g.m, g.oh * g.ow))
        _bias(y, inputs)
        return (y,)

    return run


def _applies_1x1(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    g = conv_geometry(descs, attrs)
    return g is not None and g.group == 1 and g.kh == g.kw == 1 and g.unpadded


# -- depthwise ---------------------------------------------------------------------------------


def build_conv_depthwise(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """group == C: y[n, c·k + j] = sum over taps of x[n, c] · w[c·k + j, 0, tap]."""
    g = _geometry(attrs, ins)
    mult = g.m // g.c

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        y = _output(g, outputs, x.dtype)
        xp = np.pad(x, ((0, 0), (0, 0), (g.pt, g.pb), (g.pl, g.pr))) if not g.unpadded else x
        acc = y.reshape(g.n, g.c, mult, g.oh, g.ow)
        wk = w.reshape(g.c, mult, g.kh, g.kw)
        tmp = np.empty_like(acc)
        first = True
        for i in range(g.kh):
            for j in range(g.kw):
                r0, c0 = i * g.dh, j * g.dw
                xt = xp[:, :, r0 : r0 + (g.oh - 1) * g.sh + 1 : g.sh, c0 : c0 + (g.ow - 1) * g.sw + 1 : g.sw]
                target = acc if first else tmp
                np.multiply(xt[:, :, None], wk[None, :, :, i, j, None, None], out=target)
                if not first:
                    acc += tmp
                first = False
        _bias(y, inputs)
        return (y,)

    return run


def build_conv_depthwise_planes(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """group == C, each tap one multiply-add over whole contiguous planes.

    The padded input is split into its stride phases (``xp[:, :, a::sh, b::sw]``, one plane
    each; one plane at stride 1), each flattened row-major. Output (r, q) of tap (i, j) reads
    its phase plane at (r + i·dh // sh, q + j·dw // sw): over the flattened plane, every tap is
    ONE contiguous slice of OH·PW values at offset (i·dh // sh)·PW + j·dw // sw, PW the phase
    width. So the accumulation runs over long contiguous rows (OH·PW per channel) whatever
    the spatial size, with PW - OW junk columns per row dropped at the end; no im2col copy.
    ``params['block_kib']`` (0: all at once) takes the channels in blocks whose accumulators
    fit that much cache: every tap then re-reads them from cache, not memory (2.4x on
    ConvNeXt's 96x56x56 7x7).
    """
    g = _geometry(attrs, ins)
    mult = g.m // g.c
    sh, sw = g.sh, g.sw
    hp, wp = g.h + g.pt + g.pb, g.w + g.pl + g.pr
    ph, pw = -(-hp // sh), -(-wp // sw)  # a phase plane's rows and columns
    taps = [(i, j) for i in range(g.kh) for j in range(g.kw)]
    # (phase index, flat offset) per tap; one spare row so the last row's slice stays in bounds
    where = [((i * g.dh % sh) * sw + j * g.dw % sw, (i * g.dh // sh) * pw + j * g.dw // sw) for i, j in taps]
    rows = ph + 1
    span = g.oh * pw
    nm = g.n * g.m
    itemsize = np.dtype(ins[0].dtype).itemsize  # type: ignore[union-attr]
    kib = int(params.get("block_kib", 0))
    # accumulator + temporary + the block's planes
    block = nm if not kib else max(1, min(nm, kib * 1024 // (itemsize * (2 * span + sh * sw * rows * pw))))
    packed = WeightDerived(lambda w: np.ascontiguousarray(np.tile(w.reshape(g.m, g.kh * g.kw), (g.n, 1)).T[:, :, None]))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        y = _output(g, outputs, x.dtype)
        wt = packed.get(w)  # (taps, N·M, 1)
        if mult > 1:
            x = np.repeat(x, mult, axis=1)
        xs = x.reshape(nm, g.h, g.w)
        planes = np.zeros((nm, sh * sw, rows, pw), x.dtype)
        if sh == sw == 1:
            planes[:, 0, g.pt : g.pt + g.h, g.pl : g.pl + g.w] = xs
        else:
            canvas = np.zeros((nm, ph * sh, pw * sw), x.dtype)
            canvas[:, g.pt : g.pt + g.h, g.pl : g.pl + g.w] = xs
            planes[:, :, :ph] = canvas.reshape(nm, ph, sh, pw, sw).transpose(0, 2, 4, 1, 3).reshape(nm, sh * sw, ph, pw)
        flat = planes.reshape(nm, sh * sw, rows * pw)
        acc = np.empty((nm, span), x.dtype)
        tmp = np.empty((block, span), x.dtype)
        for c0 in range(0, nm, block):
            c1 = min(nm, c0 + block)
            a, t_ = acc[c0:c1], tmp[: c1 - c0]
            for t, (phase, off) in enumerate(where):
                src = flat[c0:c1, phase, off : off + span]
                if t == 0:
                    np.multiply(src, wt[t, c0:c1], out=a)
                else:
                    np.multiply(src, wt[t, c0:c1], out=t_)
                    a += t_
        y[...] = acc.reshape(g.n, g.m, g.oh, pw)[:, :, :, : g.ow]
        _bias(y, inputs)
        return (y,)

    return run


def _depthwise_candidates(descs: Descs, attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"block_kib": 0}, {"block_kib": 192}, {"block_kib": 768}]


def _applies_depthwise(descs: Descs, attrs: Mapping[str, Any], rank: tuple[int, ...] = (4,)) -> bool:
    g = conv_geometry(descs, attrs, rank)
    return g is not None and g.group == g.c > 1 and g.m % g.c == 0


# A compiled windowed kernel with fewer multiply-adds than this runs whole. Through a Python
# helper thread, handing half of its planes to the other core cost 15-20 us per call on 2
# cores and depthwise convs under 1.5M multiply-adds (100 us) ran slower split (576x7x7 5x5:
# 50 -> 66 us); 96x56x56 7x7 (15M) ran 418 -> 346 us. The depthwise conv now shares its
# planes with the C helper (csrc/par.c), which costs about a microsecond when it spins: split
# from 128K, 576x7x7 5x5 ran 43 -> 27 us, 240x14x14 5x5 58 -> 35, 116x14x14 3x3 (204K) 20 -> 16.
NATIVE_SPLIT_MACS = 1 << 17


class NativeOperand:
    """A contiguous form (of ``dtype``) of a kernel input and its address for a C call, taken
    once for a read-only (constant) input: ``native.ptr`` costs about 1 us, several per call
    otherwise."""

    __slots__ = ("_entry", "_dtype")

    def __init__(self, dtype: Any = np.float32) -> None:
        self._entry: tuple[Any, np.ndarray, int] | None = None
        self._dtype = np.dtype(dtype)

    def get(self, a: np.ndarray) -> tuple[np.ndarray, int]:
        """The array to keep alive over the call, and its address."""
        entry = self._entry  # one read: concurrent runs swap whole entries
        if entry is not None and entry[0] is a and is_constant(a):
            return entry[1], entry[2]
        arr = np.ascontiguousarray(a, self._dtype)
        addr = native.ptr(arr)
        self._entry = (a, arr, addr)
        return arr, addr


def _epilogue(attrs: Mapping[str, Any]) -> tuple[int, int, int]:
    """The fused activation a compiled conv applies to its output tiles (``native_rows.epilogue``)."""
    return native_rows.epilogue(attrs.get("activation", ""), attrs.get("activation_params", ()))


def _numpy_instead(
    build: Callable[[Mapping[str, Any], Mapping[str, Any], Descs, Any], RunFn],
    attrs: Mapping[str, Any],
    params: Mapping[str, Any],
    ins: Descs,
    outs: Any,
) -> RunFn:
    """A numpy kernel in place of a compiled one (no tier, or another dtype), with the fused
    activation the compiled one would have applied as a pass of its own."""
    return build_then_activation(build, attrs, params, ins, outs, ins[0].dtype)  # type: ignore[union-attr]


def _for_rank(g: ConvGeometry, build: Callable[..., RunFn]) -> Callable[..., RunFn]:
    """``build`` (a numpy 2-D kernel), or for a 1-D conv the N-D ``im2col``."""
    from aioge.kernels.conv import build_conv_im2col

    return build_conv_im2col if len(g.shape) == 3 else build


def build_conv_depthwise_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """group == C in C (``csrc/dwconv.c``): with AVX2, 3x3 stride-1 rows of 16 and up (stride 2 past
    about 90x90) four output rows at a time from a zero-padded copy split into its stride phases, other
    planes up to about 90x90 eight at a time channel-interleaved, else the flat phases; the activation fused; the output planes
    shared, in units of eight (whole eight-plane groups), with the C helper thread on an idle
    core. Without the compiled tier (a desc stored by a process that had it) the numpy
    ``conv_depthwise_planes``. Thread CPU on MobileNetV3's and EfficientNet's shapes, with their
    layout changes, 0.6-1.0x onnxruntime's reorder, conv and reorder nodes."""
    g = _geometry(attrs, ins)
    par = native.par_run()
    if par is None or ins[0].dtype != "float32":  # type: ignore[union-attr]
        return _numpy_instead(_for_rank(g, build_conv_depthwise_planes), attrs, {"block_kib": 192}, ins, outs)
    mult = g.m // g.c
    planes = g.n * g.m
    # a split's chunks whole groups of the interleaved forms' planes (par.c cuts up to 8): 16 with
    # AVX-512 (a chunk of 8 ran them 8 lanes wide), else 8
    unit = (16 if (native.gemm_tile() or (0, 0))[1] >= 64 and planes >= 32 else 8) if planes >= 16 else 1
    # one plane at a time: 16 units, balanced halves (MnasNet's 48x112x112 s2 in 3: 71 -> 54 us split)
    unit = max(planes // 16, 1) if unit == 16 and _direct16(g, _epilogue(attrs)[0]) else unit
    units = -(-planes // unit)
    worth = planes * g.oh * g.ow * g.kh * g.kw >= NATIVE_SPLIT_MACS
    geometry = np.array(
        [g.c, g.h, g.w, mult, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.oh, g.ow, *_epilogue(attrs), 0], np.int64
    )
    geo = (geometry, native.ptr(geometry))  # the array, kept alive by the closure, and its address
    operands = (NativeOperand(), NativeOperand())  # weight, bias

    def args(x: np.ndarray, wp: int, bp: int, y: np.ndarray) -> np.ndarray:  # [lo, hi) are units of planes
        return np.array([native.ptr(x), wp, bp, native.ptr(y), geo[1], unit, planes, x.size, y.size], np.int64)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = np.ascontiguousarray(inputs[0], np.float32)
        # w and b hold the arrays whose addresses the C call reads
        w, wp = operands[0].get(inputs[1])
        b, bp = operands[1].get(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else (None, None)
        y = _output(g, outputs, x.dtype)
        yc = y if y.flags.c_contiguous else np.empty(y.shape, y.dtype)
        block = args(x, wp, bp or 0, yc)  # held: the C job reads it (a temporary was freed first)
        split_native(par, native.JOB_DEPTHWISE, native.ptr(block), units, worth=worth)
        if yc is not y:
            np.copyto(y, yc)
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x, w, b, y = inputs[0], inputs[1], (inputs[2:3] or [None])[0], outputs[0]  # read where they are
        if not native.f32c(x, w, y, *([] if b is None else [b])):
            return None
        a = args(x, native.ptr(w), 0 if b is None else native.ptr(b), y)
        return [native.NativeCall(native.JOB_DEPTHWISE, a, units, worth, (x, w, b, y, geometry))]

    return native.with_native(run, form)


def _direct16(g: ConvGeometry, act: int) -> bool:  # whether the AVX-512 tier's dwconv.c runs planes one at a time
    k, s, sig = g.kh, g.sh, act in (4, 5)  # (its direct form); aioge.h's ACT_SIGMOID, ACT_SWISH
    fits = k == g.kw and k in (3, 5) and s == g.sw and s in (1, 2) and g.dh == g.dw == 1 and g.ow >= 12
    return fits and ((k == 3 and not (sig and s == 1 and g.ow < 16)) or (s == 2 and not sig))


def _applies_depthwise_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _applies_depthwise(descs, attrs, (3, 4)) and descs[0].dtype == "float32"  # type: ignore[union-attr]


# -- direct GEMM in C --------------------------------------------------------------------------

# The C kernels (direct and 1x1 convs, the packed GEMM) split over an idle core from this many
# multiply-adds, 13-35 us of one core's work (80 GMAC/s on deep layers, 30 on small-K ones).
# The C helper (csrc/par.c) picks a job up in about a microsecond while it spins, and one that
# starts late only leaves the caller more chunks; measured on EfficientNet's 7x7 and 14x14 1x1
# convs (7.5-20M multiply-adds), split against whole: 1.4-1.8x faster, and on the builder
# CNN's 3->16 3x3 conv at batch 8 (3.5M, under the former bound of 4M): 118 -> 85 us. (A
# Python helper's hop cost 60-90 us: the bound was 32M.) MobileNetV3's small-K convs of
# 0.75-0.94M (22-36 us whole: 16->16 1x1 at 56x56, 96->40 and 40->120 at 14x14) split as well
# as the big ones (the fastest tenth of 400 split runs, load 10: 0.61-0.65 of whole): 1 << 19.
DIRECT_SPLIT_MACS = 1 << 19
# a phase image built from this many values of x is shared by channels with the C helper (a copy:
# ResNet-18's 7x7..56x56 ones: 887 -> 677 us of wall, load 6)
PHASES_SPLIT_VALUES = 1 << 14
# Up to this many multiply-adds a split direct conv (one image, or an odd few) builds its
# phase rows in each thread (JOB_CONV_LOCAL) rather than the whole phase image in the caller
# first: the helper pulled every line of that from the caller's core, and on this VM's two
# vCPUs that cost more than the split saved (the builder CNN's 16->32 3x3 at 16x16, 1.2M:
# 67 us split against 32 whole; with local rows 23). On ResNet-18's 3x3 convs (58-116M) the
# local rows were faster alone (64x56x56: 2.13 -> 1.75 ms split) but the tuner then took them
# over conv_direct_t_native, and the model ran slower (23.0 -> 24.7-27.6 ms a run).
LOCAL_PHASES_MACS = 1 << 23


def direct_offsets(g: ConvGeometry, hph: int, wph: int) -> np.ndarray:
    """The offset in a stride-phase image (``aioge_conv_phases_f32``) of every tap k = (c, ky, kx)."""
    c, ky, kx = np.meshgrid(np.arange(g.c), np.arange(g.kh) * g.dh, np.arange(g.kw) * g.dw, indexing="ij")
    plane = (c * g.sh + ky % g.sh) * g.sw + kx % g.sw
    return np.ascontiguousarray(((plane * hph + ky // g.sh) * wph + kx // g.sw).reshape(-1), np.int64)


def pack_rows(w: np.ndarray, rows: int) -> np.ndarray:
    """(M, K) weight rows in blocks of ``rows``, k-major: (ceil(M / rows), K, rows), zero past M."""
    m, k = w.shape[0], int(np.prod(w.shape[1:], dtype=np.int64))
    blocks = -(-m // rows)
    padded = np.zeros((blocks * rows, k), np.float32)
    padded[:m] = w.reshape(m, k)
    return np.ascontiguousarray(padded.reshape(blocks, rows, k).transpose(0, 2, 1))


class _Layout(NamedTuple):
    """How a compiled direct conv reads x and cuts its work (``_layout``)."""

    hph: int  # rows and columns of a stride phase
    wph: int
    in_place: bool  # x read as it is (a 1x1 kernel at stride 1 without pads), no phases built
    image: int  # floats of one image's phases (or of x's image when in place)
    rows: bool  # row panels: no junk columns (conv_direct_native's ``rows`` parameter)
    per_image: int  # units of the cut range per image: position panels, or with t MR-position units
    other: int  # the other range: MR-row blocks of the weight, or with t NR-channel panels
    mr: int = 0  # row panels' weight rows per block when not the compiled MR: ROWS_MR8 (csrc/conv_direct.c's G_MR)


# Row panels may take the weight in blocks of 8 rows, 3 vectors of positions (csrc/tile.h's MR8
# and NR8: 24 accumulators, as MR = 6 by 4 vectors), where M is a multiple of 8 but not of 6:
# MR = 6 computes 36 rows for 32 channels and 18 for 16. The builder CNN's convs at batch 64 on
# one core: 16->32 3x3 1.61 -> 1.45 ms (94 -> 104 GFLOP/s; this core peaks at 117), 3->16 3x3
# 0.68 -> 0.63 ms; onnxruntime's NCHWc kernels take 1.29 and 0.55. Only the AVX-512 tier's
# tile (6, 64) has them: the AVX2 and baseline tiers' 16 registers hold no 8-row tile.
ROWS_MR8, ROWS_NR8, MR8_TILE = 8, 48, (6, 64)


def _layout(g: ConvGeometry, tile: tuple[int, int], *, t: bool = False, rows: bool = False, mr8: bool = False) -> _Layout:
    """``conv_direct_native``'s layout, or with ``t`` ``conv_direct_t_native``'s (output
    channels in the lanes, positions broadcast); ``mr8``: row panels take the weight in blocks
    of ``ROWS_MR8`` rows."""
    mr, nr = tile
    direct = g.kh == g.kw == 1 and g.sh == g.sw == 1 and g.unpadded
    hph, wph = (g.h, g.w) if t and direct else (g.oh + (g.kh - 1) * g.dh // g.sh, g.ow + (g.kw - 1) * g.dw // g.sw)
    q = (g.oh - 1) * wph + g.ow  # flattened positions per image, the last row's tail dropped
    # a 1x1 kernel at stride 1 without pads reads x itself (a ragged last panel's loads masked)
    in_place = direct
    image = g.c * g.h * g.w if in_place else g.c * g.sh * g.sw * hph * wph + (0 if t else nr)
    if t:
        return _Layout(hph, wph, in_place, image, False, -(-(g.oh * g.ow) // mr), -(-g.m // nr))
    rows = rows and wph != g.ow
    mr8 = mr8 and tile == MR8_TILE
    if rows and mr8:
        mr, nr = ROWS_MR8, ROWS_NR8
    return _Layout(
        hph, wph, in_place, image, rows, g.oh * -(-g.ow // nr) if rows else -(-q // nr), -(-g.m // mr), mr if rows and mr8 else 0
    )


def _direct_native(
    g: ConvGeometry,
    ins: Descs,
    lay: _Layout,
    pack: Callable[[np.ndarray], np.ndarray],
    act: tuple[int, int, int],
    layout: str,
) -> Callable[..., RunFn] | None:
    # What the compiled direct convs share: the geometry and tap offsets in a stride-phase
    # image of ``lay.image`` floats per image (x itself when ``lay.in_place``),
    # the weight packed once by ``pack``, the bias, the activation ``act`` (``_epilogue``) applied
    # to each tile before it is stored, and a run that fills the phase image and hands the C job
    # ``(xph, weight, offsets, bias, y, geometry, *tail)`` over ``total`` units to
    # ``split_native``. Returns a maker of that run, or None without the compiled tier.
    par = native.par_run()
    phases = native.function("aioge_conv_phases_f32")
    if par is None or phases is None or ins[0].dtype != "float32":  # type: ignore[union-attr]
        return None
    in_place, image = lay.in_place, lay.image
    geometry = np.array(
        [
            g.c,
            g.h,
            g.w,
            g.m,
            g.kh,
            g.kw,
            g.sh,
            g.sw,
            g.dh,
            g.dw,
            g.pt,
            g.pl,
            g.oh,
            g.ow,
            g.n,
            lay.hph,
            lay.wph,
            image,
            *act,
            lay.rows,
            lay.mr,
            0,  # a residual's address (csrc/conv_direct.c's G_Z): runtime.native_program's fold sets it in a copy
        ],
        np.int64,
    )
    offsets = direct_offsets(g, lay.hph, lay.wph)
    consts = (geometry, offsets, native.ptr(geometry), native.ptr(offsets))  # the arrays kept alive, their addresses
    worth = g.n * g.m * g.c * g.kh * g.kw * g.oh * g.ow >= DIRECT_SPLIT_MACS

    # images: job is JOB_CONV_IMAGES over the batch's images, each image's phases built by the
    # thread that computes it.
    def make(job: int, tail: Sequence[int], total: int, images: bool = False) -> RunFn:
        packed = WeightDerived(pack, layout)
        held: list[tuple[Any, int]] = [(None, 0)]  # the packed weight and its address, swapped whole
        bias = NativeOperand()
        scratch: list[tuple[np.ndarray, int]] = []  # phase images and their addresses, one per run in flight

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = np.ascontiguousarray(inputs[0], np.float32)
            wp = packed.get(inputs[1])
            entry = held[0]
            if entry[0] is not wp:
                entry = held[0] = (wp, native.ptr(wp))
            _, bp = bias.get(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else (None, None)
            y = _output(g, outputs, x.dtype)
            yc = y if y.flags.c_contiguous else np.empty(y.shape, y.dtype)
            xa = native.ptr(x)
            if in_place or images:
                ph = (x, xa)
            elif scratch:
                ph = scratch.pop()
            else:
                image_array = np.empty(g.n * image, np.float32)
                ph = (image_array, native.ptr(image_array))
            try:
                if not in_place and not images:
                    phases(xa, ph[1], consts[2])
                args = np.array(
                    [ph[1], entry[1], consts[3], bp or 0, native.ptr(yc), consts[2], *tail, ph[0].size, yc.size], np.int64
                )
                split_native(par, job, native.ptr(args), total, worth=worth)
            finally:
                if not in_place and not images:
                    scratch.append(ph)
            if yc is not y:
                np.copyto(y, yc)
            return (y,)

        def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
            # The same C calls over operands bound for good: a phase image of its own, if any.
            x, y = inputs[0], outputs[0]
            if not (native.f32c(x, y) and (len(inputs) < 3 or inputs[2] is None or native.f32c(inputs[2]))):
                return None
            wp = packed.fixed(inputs[1])
            if wp is None:
                return None
            b = inputs[2] if len(inputs) > 2 else None
            keep: tuple[Any, ...] = (x, y, wp, b, consts, inputs[1])  # the raw weight: runtime.irb_fuse
            calls = []
            src = x
            if not (in_place or images):
                src = np.empty(g.n * image, np.float32)
                keep += (src,)
                phase_args = np.array([native.ptr(x), native.ptr(src), consts[2], x.size, src.size], np.int64)
                calls.append(native.NativeCall(native.JOB_PHASES, phase_args, g.n * g.c, x.size >= PHASES_SPLIT_VALUES, keep))
            args = np.array(
                [native.ptr(src), native.ptr(wp), consts[3], 0 if b is None else native.ptr(b), native.ptr(y), consts[2], *tail]
                + [src.size, y.size],
                np.int64,
            )
            calls.append(native.NativeCall(job, args, total, worth, keep))
            return calls

        return native.with_native(run, form)

    return make


def build_conv_direct_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """group 1, float32, in C (``csrc/conv_direct.c``): the input split into its stride phases, then
    a GEMM whose micro-kernel reads every tap's positions straight from them (no im2col),
    the weight packed once; panels of positions (or row blocks) shared with the C helper thread
    on an idle core. Without the compiled tier (a desc stored by a process that had it) the
    numpy ``im2col``."""
    from aioge.kernels.conv import build_conv_im2col

    g = _geometry(attrs, ins)
    tile = native.gemm_tile()
    if tile is None:
        return _numpy_instead(build_conv_im2col, attrs, params, ins, outs)
    mr, nr = tile
    lay = _layout(g, tile, rows=bool(params.get("rows", 0)), mr8=int(params.get("mr", 0)) == ROWS_MR8)
    mr = lay.mr or mr
    pack = lambda w: pack_rows(np.asarray(w, np.float32), mr)  # noqa: E731
    make = _direct_native(g, ins, lay, pack, _epilogue(attrs), f"rows{mr}")
    if make is None:
        return _numpy_instead(build_conv_im2col, attrs, params, ins, outs)
    blocks = lay.other
    if not lay.in_place and (g.n % 2 == 0 or g.n >= 7) and g.n > 1:  # whole images split evenly enough over two cores
        return make(native.JOB_CONV_IMAGES, (), g.n, images=True)
    panels = g.n * lay.per_image
    # A small conv's split pays only if each thread builds the phase rows its share reads
    # (LOCAL_PHASES_MACS), its panels' (from 4 of them); x read in place needs no phases at all.
    # Cut by weight blocks, every chunk built every phase row (MobileNetV3's 576 -> 96 1x1 at
    # 7x7, in a run: 72 us whole, 143 split), so then the phases are a split job of their own.
    local = not lay.in_place and g.n * g.m * g.c * g.kh * g.kw * g.oh * g.ow <= LOCAL_PHASES_MACS and panels >= 4
    by_panels = panels >= (4 if local else 8) or blocks < 2
    job = native.JOB_CONV_LOCAL if local else native.JOB_CONV_DIRECT
    return make(job, (panels, blocks, not by_panels), panels if by_panels else blocks, images=local)


def _applies_direct_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    g = conv_geometry(descs, attrs, (3, 4))
    # no input channels (K = 0: the output is the bias) is the numpy kernels' (the C ones refuse it)
    return g is not None and g.group == 1 and g.c > 0 and descs[0].dtype == "float32"  # type: ignore[union-attr]


def build_conv_direct_t_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """group 1, float32, in C (``csrc/conv_direct.c``) with the roles of ``conv_direct_native``
    swapped: output channels in the vector lanes from W^T packed once, 6 output positions
    broadcast from the stride-phase image (x itself for a 1x1 kernel at stride 1 without
    pads), the tile stored transposed. For planes too small to fill 64-position panels (7x7,
    14x14); split by positions or by channel panels over an idle core. Without the compiled
    tier the numpy ``im2col``."""
    from aioge.kernels.conv import build_conv_im2col
    from aioge.kernels.matmul_algos import pack_columns

    g = _geometry(attrs, ins)
    tile = native.gemm_tile()
    if tile is None:
        return _numpy_instead(build_conv_im2col, attrs, params, ins, outs)
    mr, nr = tile
    lay = _layout(g, tile, t=True)
    make = _direct_native(
        g, ins, lay, lambda w: pack_columns(np.asarray(w, np.float32).reshape(g.m, -1).T, nr), _epilogue(attrs), f"convt{nr}"
    )
    if make is None:
        return _numpy_instead(build_conv_im2col, attrs, params, ins, outs)
    units, panels = g.n * lay.per_image, lay.other
    # Cut into csrc/par.c's 8 chunks: by panels from 8 of them, else by position units. ResNet-18's
    # 64x56x56 3x3 convs in 4 panel chunks of 0.65 ms each left a helper that started late the
    # caller's third (caller CPU 1.50-2.14 -> 1.26-1.68 ms of 2.5 by units, load 8).
    by_panels = panels >= 8 or units < 8
    return make(native.JOB_CONV_T, (units, panels, by_panels), panels if by_panels else units)


# -- grouped -----------------------------------------------------------------------------------


def build_conv_grouped(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """1 < group < C: per group, an NCHW im2col of its channels and one GEMM (a 1x1 kernel at
    stride 1 without pads: the GEMM reads the group's channels in place)."""
    g = _geometry(attrs, ins)
    cg, mg = g.c // g.group, g.m // g.group
    if g.kh == g.kw == g.sh == g.sw == 1 and g.unpadded:
        return _grouped_1x1(g, cg, mg)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        y = _output(g, outputs, x.dtype)
        xp = np.pad(x, ((0, 0), (0, 0), (g.pt, g.pb), (g.pl, g.pr))) if not g.unpadded else x
        yg = y.reshape(g.n, g.group, mg, g.oh * g.ow)
        s = xp.strides
        for k in range(g.group):
            part = xp[:, k * cg : (k + 1) * cg]
            cols = as_strided(
                part,
                (g.n, cg, g.kh, g.kw, g.oh, g.ow),
                (s[0], s[1], s[2] * g.dh, s[3] * g.dw, s[2] * g.sh, s[3] * g.sw),
                writeable=False,
            )
            cols = np.ascontiguousarray(cols).reshape(g.n, cg * g.kh * g.kw, g.oh * g.ow)
            np.matmul(w[k * mg : (k + 1) * mg].reshape(mg, -1), cols, out=yg[:, k])
        _bias(y, inputs)
        return (y,)

    return run


def _grouped_1x1(g: ConvGeometry, cg: int, mg: int) -> RunFn:
    """y[n, group k] = w[group k] (mg, cg) @ x[n, group k] (cg, H·W) for every (n, k): the
    group's channels of a contiguous NCHW input are one contiguous (cg, H·W) block, so nothing
    is copied. The (n, k) products go in two halves over an idle core when big enough (light/
    ShuffleNet's 4-group 1x1 convs: 115 -> 45 us against the im2col per group)."""
    hw = g.oh * g.ow
    worth = g.n * g.m * cg * hw >= 1 << 23  # numpy GEMMs over a Python helper thread

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = np.ascontiguousarray(inputs[0]), inputs[1]
        y = _output(g, outputs, x.dtype)
        xg = x.reshape(g.n, g.group, cg, hw)
        yg = y.reshape(g.n, g.group, mg, hw)
        wg = w.reshape(g.group, mg, cg)

        def part(lo: int, hi: int) -> None:
            for i in range(lo, hi):
                n, k = divmod(i, g.group)
                np.matmul(wg[k], xg[n, k], out=yg[n, k])

        split_range(g.n * g.group, part, worth=worth)
        _bias(y, inputs)
        return (y,)

    return run


def build_conv_grouped_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """1 < group < C, float32, in C: the conv over an (N, C, H, W) input is the group-1 direct
    conv over its (N·group, C/group, H, W) view, whose images are the groups' channel blocks
    and whose outputs land as (N, M, OH, OW), image i taking group i % group's packed weight
    and bias (``job_conv_grouped``, csrc/jobs.c): ``conv_direct_native``'s kernel, or with ``t``
    ``conv_direct_t_native``'s (channels in the lanes, for small planes); shared with the C
    helper on an idle core. light/ ShuffleNet's 4-group 1x1 convs: 123 -> 90 us at 56x56 (24
    channels in, 112 out), 93 -> 74 at 28x28. Without the compiled tier, ``conv_grouped``."""
    from aioge.kernels.matmul_algos import pack_columns

    g = _geometry(attrs, ins)
    tile = native.gemm_tile()
    cg, mg = g.c // g.group, g.m // g.group
    sub_ins = [TensorDesc.of((g.n * g.group, cg, g.h, g.w), "float32"), TensorDesc.of((mg, cg, g.kh, g.kw), "float32")]
    sg = conv_geometry(sub_ins, {**(as_2d(attrs) if len(g.shape) == 3 else attrs), "group": 1})
    if tile is None or sg is None:
        return _numpy_instead(_for_rank(g, build_conv_grouped), attrs, params, ins, outs)
    mr, nr = tile
    t = bool(params.get("t", 0))
    lay = _layout(sg, tile, t=t, rows=bool(params.get("rows", 0)))
    one = (  # one group's weight packed: conv_direct_t_native's layout with t, else conv_direct_native's
        (lambda w: pack_columns(w.reshape(mg, -1).T, nr)) if t else (lambda w: pack_rows(w, mr))
    )
    stride = one(np.zeros((mg, cg * g.kh * g.kw), np.float32)).size

    def pack(w: np.ndarray) -> np.ndarray:
        parts = np.asarray(w, np.float32).reshape(g.group, mg, -1)
        return np.concatenate([one(np.ascontiguousarray(p)).reshape(-1) for p in parts])

    make = _direct_native(sg, sub_ins, lay, pack, _epilogue(attrs), f"group{g.group}{'t' if t else 'r'}{mr}x{nr}")
    if make is None:
        return _numpy_instead(_for_rank(g, build_conv_grouped), attrs, params, ins, outs)
    per = lay.per_image
    tail = (sg.n * per, lay.other, 0, g.group, stride, per, mg, int(t))
    run = make(native.JOB_CONV_GROUPED, tail, sg.n * per)

    def grouped(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        (y,) = run(inputs, outputs)
        return (outputs[0] if outputs is not None else y.reshape(g.shape),)  # written in place

    return native.with_native(grouped, run.native)  # type: ignore[attr-defined]  # make's runs carry their forms


def _grouped_native_candidates(descs: Descs, attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*(p for p in _direct_candidates(descs, attrs) if "mr" not in p), {"t": 1}]  # per group: blocks of MR rows


def _applies_grouped_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    return _applies_grouped(descs, attrs, (3, 4)) and descs[0].dtype == "float32"  # type: ignore[union-attr]


def _applies_grouped(descs: Descs, attrs: Mapping[str, Any], rank: tuple[int, ...] = (4,)) -> bool:
    g = conv_geometry(descs, attrs, rank)
    return g is not None and 1 < g.group < g.c and g.c % g.group == 0 and g.m % g.group == 0


# -- Winograd F(2x2, 3x3) ----------------------------------------------------------------------

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """U = G w G^T for every (out, in) channel pair, as (16, M, C)."""
    m, c = w.shape[:2]
    u = np.einsum("ij,mcjk,lk->ilmc", _G, w.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(16, m, c).astype(w.dtype))


def build_conv_winograd_f23(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """Winograd F(2x2, 3x3): 4x4 input tiles at stride 2, transformed (B^T d B), multiplied
    per tile position as 16 GEMMs, transformed back (A^T m A) to 2x2 output tiles."""
    g = _geometry(attrs, ins)
    th, tw = -(-g.oh // 2), -(-g.ow // 2)
    hp, wp = 2 * th + 2, 2 * tw + 2
    tiles = g.n * th * tw
    u_of = WeightDerived(winograd_weights)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        y = _output(g, outputs, x.dtype)
        xp = np.zeros((g.n, g.c, hp, wp), x.dtype)
        xp[:, :, g.pt : g.pt + g.h, g.pl : g.pl + g.w] = x
        s = xp.strides
        # d[a, b, c, n, i, j] = xp[n, c, 2i + a, 2j + b]
        d = as_strided(xp, (4, 4, g.c, g.n, th, tw), (s[2], s[3], s[1], s[0], 2 * s[2], 2 * s[3]), writeable=False)
        t = np.empty((4, 4, g.c, g.n, th, tw), x.dtype)
        np.subtract(d[0], d[2], out=t[0])
        np.add(d[1], d[2], out=t[1])
        np.subtract(d[2], d[1], out=t[2])
        np.subtract(d[1], d[3], out=t[3])
        v = np.empty_like(t)
        np.subtract(t[:, 0], t[:, 2], out=v[:, 0])
        np.add(t[:, 1], t[:, 2], out=v[:, 1])
        np.subtract(t[:, 2], t[:, 1], out=v[:, 2])
        np.subtract(t[:, 1], t[:, 3], out=v[:, 3])
        mm = np.empty((16, g.m, tiles), x.dtype)
        par_matmul(u_of.get(w), v.reshape(16, g.c, tiles), mm)
        mm = mm.reshape(4, 4, g.m, tiles)
        z = np.empty((2, 4, g.m, tiles), x.dtype)
        np.add(mm[0], mm[1], out=z[0])
        z[0] += mm[2]
        np.subtract(mm[1], mm[2], out=z[1])
        z[1] -= mm[3]
        r = np.empty((2, 2, g.m, tiles), x.dtype)
        np.add(z[:, 0], z[:, 1], out=r[:, 0])
        r[:, 0] += z[:, 2]
        np.subtract(z[:, 1], z[:, 2], out=r[:, 1])
        r[:, 1] -= z[:, 3]
        # y[n, m, 2i + a, 2j + b] = r[a, b, m, (n, i, j)]
        tiled = r.reshape(2, 2, g.m, g.n, th, tw).transpose(3, 2, 4, 0, 5, 1)
        if g.oh == 2 * th and g.ow == 2 * tw and y.flags.c_contiguous:
            np.copyto(y.reshape(g.n, g.m, th, 2, tw, 2), tiled)
        else:
            np.copyto(y, tiled.reshape(g.n, g.m, 2 * th, 2 * tw)[:, :, : g.oh, : g.ow])
        _bias(y, inputs)
        return (y,)

    return run


def _applies_winograd(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    g = conv_geometry(descs, attrs)
    return (
        g is not None
        and g.group == 1
        and g.kh == g.kw == 3
        and g.sh == g.sw == 1
        and g.dh == g.dw == 1
        and descs[0].dtype in ("float32", "float64")  # type: ignore[union-attr]  # float16 loses too much in the transforms
    )


# F(4x4, 3x3)'s G (points 0, +-1, +-2); F(2x2, 3x3)'s is _G. csrc/conv_direct.c holds the B and A.
_G4 = np.array([[6, 0, 0], [-4, -4, -4], [-4, 4, -4], [1, 2, 4], [1, -2, 4], [0, 0, 24]]) / 24
_SPACES: dict[int, tuple[Any, list[tuple[np.ndarray, np.ndarray]]]] = {}


def _wino_space(y: np.ndarray, sizes: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """V and Mo for a native form's Winograd conv, shared by those whose outputs share a base array
    (one context's arena, whose program runs one at a time): one buffer pair for ResNet-18's ten,
    not ten that each left the caches between runs (28.4 -> 23.0 ms a run on one core)."""
    root = y
    while isinstance(root.base, np.ndarray):
        root = root.base
    for k in [k for k, (ref, _) in _SPACES.items() if ref() is None]:
        del _SPACES[k]
    ref, spaces = _SPACES.setdefault(id(root), (weakref.ref(root), []))
    for v, mo in spaces:
        if v.size >= sizes[0] and mo.size >= sizes[1]:
            return v, mo
    spaces.append((native.aligned_empty((sizes[0],)), native.aligned_empty((sizes[1],))))
    return spaces[-1]


def build_conv_winograd_native(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """Winograd F(2x2, 3x3) or, with ``params["r"] == 4``, F(4x4, 3x3) in C (``csrc/conv_direct.c``,
    JOB_WINOGRAD): input transform, one GEMM per tile point (U = G w G^T packed as conv_t's weight),
    output transform with bias and ReLU, each a job split over an idle core. ResNet-18's 3x3 convs,
    one core: 64x56x56 1.6-1.76 -> 0.83 ms (F4), 128x28x28 1.63 -> 0.65 (F4), 256x14x14 1.63 -> 0.90 (F2)."""
    g, r = _geometry(attrs, ins), int(params.get("r", 2))
    tile, par = native.gemm_tile(), native.par_run()
    if tile is None or par is None or ins[0].dtype != "float32":  # type: ignore[union-attr]
        return build_then_activation(build_conv_winograd_f23, attrs, params, ins, outs, ins[0].dtype)  # type: ignore[union-attr]
    nr, a, th, tw = tile[1], r + 2, -(-g.oh // r), -(-g.ow // r)
    npan, tiles = -(-g.m // nr), g.n * th * tw

    def pack(w: np.ndarray) -> np.ndarray:  # (a * a, panels, C, nr), zero past M
        u = np.zeros((a * a, g.c, npan * nr))
        gm = _G4 if r == 4 else _G
        u[..., : g.m] = np.einsum("ij,mcjk,lk->ilcm", gm, np.asarray(w, np.float64), gm).reshape(a * a, g.c, g.m)
        out = native.aligned_empty((a * a, npan, g.c, nr))
        out[...] = u.reshape(a * a, g.c, npan, nr).transpose(0, 2, 1, 3)
        return out

    packed, bias = WeightDerived(pack, f"wino{r}_{nr}"), NativeOperand()
    geometry = np.array(
        [g.c, g.h, g.w, g.m, 3, 3, 1, 1, 1, 1, g.pt, g.pl, g.oh, g.ow, g.n, 0, 0, 0, *_epilogue(attrs), 0, 0, 0], np.int64
    )
    koff, sizes = np.arange(g.c, dtype=np.int64), (a * a * tiles * g.c, a * a * tiles * npan * nr)
    pool: list[tuple[np.ndarray, np.ndarray]] = []  # V and Mo of the runs in flight
    worth = g.n * g.m * g.c * g.oh * g.ow * 4 >= DIRECT_SPLIT_MACS

    def calls(x: Any, w: Any, b: Any, y: np.ndarray, v: np.ndarray, mo: np.ndarray) -> list[native.NativeCall]:
        head = [0 if a is None else native.ptr(a) for a in (x, w, koff, b, y, geometry, v, mo)]
        keep, sz = (x, w, b, y, geometry, koff, v, mo), [x.size, y.size, v.size, mo.size]
        stages = ((0, g.n * th), (1, a * a), (2, g.n * th))
        return [
            native.NativeCall(native.JOB_WINOGRAD, np.array([*head, s, r, th, tw, *sz], np.int64), n, worth, keep)
            for s, n in stages
        ]

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, y = np.ascontiguousarray(inputs[0], np.float32), _output(g, outputs, np.dtype(np.float32))
        yc = y if y.flags.c_contiguous else np.empty(y.shape, y.dtype)
        b = bias.get(inputs[2])[0] if len(inputs) > 2 and inputs[2] is not None else None
        v, mo = pool.pop() if pool else (native.aligned_empty((sizes[0],)), native.aligned_empty((sizes[1],)))
        try:
            for c in calls(x, packed.get(inputs[1]), b, yc, v, mo):
                split_native(par, c.job, c.addr, c.total, worth=worth)
        finally:
            pool.append((v, mo))
        if yc is not y:
            np.copyto(y, yc)
        return (y,)

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        wp, b = packed.fixed(inputs[1]), inputs[2] if len(inputs) > 2 else None
        ok = native.f32c(inputs[0], outputs[0]) and (b is None or native.f32c(b))
        return calls(inputs[0], wp, b, outputs[0], *_wino_space(outputs[0], sizes)) if ok and wp is not None else None

    return native.with_native(run, form)


def _applies_winograd_native(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    g, relu = conv_geometry(descs, attrs), attrs.get("activation", "") in ("", "Relu")
    f32 = descs[0] is not None and descs[0].dtype == "float32"
    return _applies_winograd(descs, attrs) and f32 and g is not None and g.c % 16 == g.m % 16 == 0 and relu


# -- kn2row: GEMM over the input, then shift-and-add ---------------------------------------

_KN2ROW_MAX_BYTES = 32 << 20  # the (N, taps·M, Hp·Wp) product; beyond it im2col is the better trade


def build_conv_kn2row(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Descs, outs: Any) -> RunFn:
    """Z = W' (taps·M, C) @ xp (N, C, Hp·Wp); y = sum over taps (i, j) of Z[tap] shifted by
    (i·dh, j·dw) and sampled at the strides."""
    g = _geometry(attrs, ins)
    taps = g.kh * g.kw
    hp, wp = g.h + g.pt + g.pb, g.w + g.pl + g.pr
    packed = WeightDerived(lambda w: np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(taps * g.m, g.c)))
    rows = slice(0, g.sh * (g.oh - 1) + 1, g.sh)
    cols = slice(0, g.sw * (g.ow - 1) + 1, g.sw)

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, w = inputs[0], inputs[1]
        y = _output(g, outputs, x.dtype)
        if g.unpadded:
            xp = np.ascontiguousarray(x)
        else:
            xp = np.zeros((g.n, g.c, hp, wp), x.dtype)
            xp[:, :, g.pt : g.pt + g.h, g.pl : g.pl + g.w] = x
        z = np.empty((g.n, taps * g.m, hp * wp), x.dtype)
        par_matmul(packed.get(w), xp.reshape(g.n, g.c, hp * wp), z)
        z6 = z.reshape(g.n, g.kh, g.kw, g.m, hp, wp)
        for i in range(g.kh):
            for j in range(g.kw):
                zt = z6[:, i, j, :, i * g.dh :, j * g.dw :][:, :, rows, cols]
                if i == j == 0:
                    np.copyto(y, zt)
                else:
                    np.add(y, zt, out=y)
        _bias(y, inputs)
        return (y,)

    return run


def _applies_kn2row(descs: Descs, attrs: Mapping[str, Any]) -> bool:
    g = conv_geometry(descs, attrs)
    if g is None or g.group != 1 or g.kh * g.kw < 2 or min(g.pt, g.pl, g.pb, g.pr) < 0 or g.oh < 1 or g.ow < 1:
        return False
    hp, wp = g.h + g.pt + g.pb, g.w + g.pl + g.pr
    if (g.oh - 1) * g.sh + (g.kh - 1) * g.dh >= hp or (g.ow - 1) * g.sw + (g.kw - 1) * g.dw >= wp:
        return False
    itemsize = np.dtype(descs[0].dtype).itemsize  # type: ignore[union-attr]
    return g.n * g.kh * g.kw * g.m * hp * wp * itemsize <= _KN2ROW_MAX_BYTES


def _no_candidates(descs: Descs, attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{}]


def _direct_candidates(descs: Descs, attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Flattened panels, and where the stride-phase rows carry junk columns (a kernel wider than
    its stride) row panels too: no junk computed and the tiles stored straight, but a short
    last panel per row (the builder CNN's 3->16 3x3 at batch 8: 89 -> 48 us)."""
    g = conv_geometry(descs, attrs)
    if g is None or not (g.kw - 1) * g.dw // g.sw:
        return [{}]
    mr8 = g.m % ROWS_MR8 == 0 and g.m % 6 and native.gemm_tile() == MR8_TILE
    return [{}, {"rows": 1}] + ([{"rows": 1, "mr": ROWS_MR8}] if mr8 else [])


# The schema lists these right after its reference: the tuner tries candidates in order until
# its budget is spent, and the numpy ones on a large depthwise conv (ConvNeXt's 96x56x56 7x7:
# 25-70 ms each on a busy machine) used it up before the one that takes 0.4 ms was tried. They
# apply a FusedConv's activation to each output tile themselves (native_rows.EPILOGUES). A tie
# (tuning.TIE_MARGIN) goes to the channels-in-lanes form: it computes no junk columns and no rows
# past M (a multiple of its lanes), where the other computes both; timed split in wall time it
# came within 5% on ResNet-18's 64-ch 3x3 convs and won the tie at 2.83-3.0 ms of one thread's
# CPU against 2.54 (layer3.0.conv1: 1.71 against 1.38).
NATIVE_CONV_ALGOS: tuple[KernelImpl, ...] = tuple(
    KernelImpl(
        name,
        build,
        applies,
        cands,
        offered=native.available,
        eager=True,
        activations=native_rows.EPILOGUES,
        native=True,  # their runs carry native forms
        packs=() if name == "conv_depthwise_native" else (1,),
    )
    for name, build, applies, cands in (
        ("conv_depthwise_native", build_conv_depthwise_native, _applies_depthwise_native, _no_candidates),
        ("conv_direct_t_native", build_conv_direct_t_native, _applies_direct_native, _no_candidates),
        ("conv_direct_native", build_conv_direct_native, _applies_direct_native, _direct_candidates),
        ("conv_grouped_native", build_conv_grouped_native, _applies_grouped_native, _grouped_native_candidates),
    )
) + (
    KernelImpl(
        "conv_winograd_native",
        build_conv_winograd_native,
        _applies_winograd_native,
        lambda d, a: [{"r": 2}, {"r": 4}],
        offered=native.available,
        eager=True,
        activations=frozenset({"Relu"}),
        native=True,
        packs=(1,),
    ),
)
CONV_ALGOS: tuple[KernelImpl, ...] = (
    KernelImpl("conv_im2col_nhwc", build_conv_im2col_nhwc, _applies_nhwc, _nhwc_candidates),
    KernelImpl("conv_gemm_1x1", build_conv_gemm_1x1, _applies_1x1),
    KernelImpl("conv_depthwise", build_conv_depthwise, _applies_depthwise),
    KernelImpl("conv_depthwise_planes", build_conv_depthwise_planes, _applies_depthwise, _depthwise_candidates),
    KernelImpl("conv_grouped", build_conv_grouped, _applies_grouped),
    KernelImpl("conv_winograd_f23", build_conv_winograd_f23, _applies_winograd),
    KernelImpl("conv_kn2row", build_conv_kn2row, _applies_kn2row),
)
