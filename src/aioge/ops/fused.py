"""Fused ops: what the fusion passes put in place of op patterns.

They are ordinary ops of the registry (schema, inference, engines, kernels), so a fused
node compiles, caches and plans like any other. Their attributes are plain data (strings,
ints, floats and lists of them) so they serialise and hash into kernel keys.

- ``FusedElementwise``: a chain of elementwise ops as a small program (``ops``,
  ``operands``, ``params``; see ``aioge.kernels.fused``) run in one blocked pass.
- ``FusedConv``, ``FusedGemm``: Conv and Gemm (same attributes, same kernels, tuned the
  same way) followed by an activation applied in place to the output; FusedConv's optional
  fourth input Z (a residual of the output's shape) is added before the activation.
- ``SqueezeExcite``: a squeeze-and-excitation block (MobileNetV3, EfficientNet): the
  global average pool, the two 1x1 convs of the squeezed vector with their activations
  (``activation1``, ``activation2``) and the channel scale of x, as one node.
- ``ChannelShuffle``: ShuffleNet's channel shuffle of ``group`` groups, of the inputs joined
  along axis 1 (the Concat before it), split along axis 1 (``splits``: the Slices after it),
  as one node of strided copies.
- ``FusedMatMul``: MatMul with either operand's last two axes transposed, a scale
  ``alpha``, an optional bias ``C`` added to the product (as Gemm's with beta 1) and an
  optional activation. A product of a batch of rows by a matrix (A not transposed, B 2-D,
  C one value per column) also runs every FusedGemm kernel, A's leading axes folded into
  the Gemm's rows.

An activation is named by its op (``activation``, empty for none) with its parameters in
``activation_params``: LeakyRelu (alpha), HardSigmoid (alpha, beta), Clip (lo, hi; -inf and
inf when absent), Gelu (1 for the tanh approximation, else 0).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import fused as k
from aioge.kernels import native
from aioge.kernels.matmul_algos import MATMUL_BLAS, build_fused_matmul
from aioge.kernels.shape import build_channel_shuffle
from aioge.ops import conv, nn
from aioge.ops.infer import broadcast_shapes
from aioge.ops.schema import (
    ALL_ENGINES,
    CPU_ONLY,
    FLOAT_DTYPES,
    REQUIRED,
    Attr,
    InferContext,
    InferError,
    KernelImpl,
    OpSchema,
    RunFn,
    low_precision,
)

__all__ = ["ACTIVATIONS", "EW_OPS", "SCHEMAS", "rows_shapes"]

_FLOATS = FLOAT_DTYPES

# The elementwise ops a FusedElementwise program may hold (passes see them through this floor).
EW_OPS = k.EW_OPS

# The activations a FusedConv, FusedGemm or FusedMatMul may apply, by their op names.
ACTIVATIONS: tuple[str, ...] = ("", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "Clip", "Tanh", "Gelu")


def _check_ops(ops: tuple[str, ...]) -> str | None:
    bad = [op for op in ops if op not in k.EW_OPS]
    return f"ops {bad} cannot be fused; fusable: {sorted(k.EW_OPS)}" if bad else None


def _infer_elementwise(ctx: InferContext) -> list[TensorDesc]:
    descs = [d for d in ctx.inputs if d is not None]
    if not descs or len(descs) != len(ctx.inputs):
        raise InferError("FusedElementwise takes one or more inputs, none absent")
    dtypes = {d.dtype for d in descs}
    if len(dtypes) != 1 or descs[0].dtype not in _FLOATS:
        raise InferError(f"inputs must be float tensors of one dtype, got {[d.dtype for d in descs]}")
    reason = k.check_program(ctx.attrs["ops"], ctx.attrs["operands"], ctx.attrs.get("params", ()), len(descs))
    if reason:
        raise InferError(f"bad program: {reason}")
    return [TensorDesc(broadcast_shapes(*(d.shape for d in descs)), descs[0].dtype)]


def _block_candidates(descs: object, attrs: object) -> list[dict[str, int]]:
    # The tuner times these on the real shapes; the first is the default.
    return [{"block_bytes": k.BLOCK_BYTES}, {"block_bytes": 64 * 1024}, {"block_bytes": 256 * 1024}]


_FUSED_ELEMENTWISE = OpSchema(
    "FusedElementwise",
    _infer_elementwise,
    (KernelImpl("blocked", k.build_fused_elementwise, candidates=_block_candidates, native=True),),
    ALL_ENGINES,
    {
        "ops": Attr("strings", REQUIRED, check=_check_ops),
        "operands": Attr("ints", REQUIRED),
        "params": Attr("floats", ()),
    },
    (1, -1),
    domain="aioge",
    family="fused",
    elementwise=True,
    doc="a chain of elementwise ops run as one program over cache-sized chunks of the output",
)

_ACTIVATION_ATTRS = {
    "activation": Attr("string", "", ACTIVATIONS),
    "activation_params": Attr("floats", ()),
}


def _check_activation(attrs: Mapping[str, Any]) -> None:
    name = attrs.get("activation", "")
    if name:
        want = k.EW_OPS[name].nparams
        got = len(attrs.get("activation_params", ()))
        if got != want:
            raise InferError(f"activation {name} takes {want} activation_params, got {got}")


def _with_activation(base: OpSchema, name: str, doc: str, residual: bool = False) -> OpSchema:
    """``base`` followed by an in-place activation: its attributes, inference and every one
    of its kernels (so tuning chooses among the same candidates). With ``residual`` one more
    optional input, Z of the output's shape, added before the activation: act(base + Z)."""
    n_base = base.inputs[1]

    def infer(ctx: InferContext) -> list[TensorDesc]:
        _check_activation(ctx.attrs)
        (out,) = base.infer(InferContext(ctx.inputs[:n_base], ctx.values[:n_base], k.without_activation(ctx.attrs), 1))
        if (z := (ctx.inputs[n_base:] or [None])[0]) is not None and (z.dtype, z.shape, out.static) != (
            out.dtype,
            out.shape,
            True,
        ):
            raise InferError(f"Z must be the output's {out.dtype} {out.shape}, got {z.dtype} {z.shape}")
        return [out]

    def wrap(impl: KernelImpl) -> KernelImpl:
        def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
            if len(ins) > n_base and ins[n_base] is not None:
                return k.build_then_residual(impl.build, attrs, params, ins[:n_base], outs)
            if attrs.get("activation", "") in impl.activations:
                return impl.build(attrs, params, ins, outs)  # it applies the activation itself
            return k.build_then_activation(impl.build, attrs, params, ins, outs, outs[0].dtype)

        return KernelImpl(
            impl.name,
            build,
            lambda descs, attrs: impl.applies(descs[:n_base], k.without_activation(attrs)),
            lambda descs, attrs: impl.candidates(descs[:n_base], k.without_activation(attrs)),
            impl.offered,
            impl.eager,
            impl.activations,
            impl.native,
            impl.packs,
        )

    return OpSchema(
        name,
        infer,
        tuple(wrap(i) for i in base.impls),
        base.engines,
        {**base.attrs, **_ACTIVATION_ATTRS},
        (base.inputs[0], n_base + 1) if residual else base.inputs,
        base.outputs,
        domain="aioge",
        family="fused",
        doc=doc,
        version=base.version,
        cost=base.cost,
    )


def _base(schemas: Sequence[OpSchema], name: str) -> OpSchema:
    return next(s for s in schemas if s.name == name)


_MATMUL = _base(nn.SCHEMAS, "MatMul")


def _swap(desc: TensorDesc | None, flag: int) -> TensorDesc | None:
    if desc is None or not flag or desc.shape is None:
        return desc
    if len(desc.shape) < 2:
        raise InferError(f"a transposed operand needs rank >= 2, got shape {desc.shape}")
    return desc.with_shape((*desc.shape[:-2], desc.shape[-1], desc.shape[-2]))


def _infer_fused_matmul(ctx: InferContext) -> list[TensorDesc]:
    _check_activation(ctx.attrs)
    ins = [_swap(ctx.inputs[0], ctx.attrs["transA"]), _swap(ctx.inputs[1], ctx.attrs["transB"])]
    (out,) = _MATMUL.infer(InferContext(ins, [None, None], {}, ctx.num_outputs))
    c = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if c is not None and (c.dtype != out.dtype or broadcast_shapes(c.shape, out.shape) not in (None, out.shape)):
        raise InferError(f"bias C ({c.dtype} {c.shape}) must be {out.dtype} and broadcast onto the product's {out.shape}")
    return [out]


def rows_shapes(descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(rows, K, N) when A' @ B' (+ C) is one Gemm of A's leading axes folded into rows: A not
    transposed, B a matrix, static shapes, any bias C one value per column."""
    a, b, c = (*descs, None)[:3]
    if a is None or b is None or not (a.static and b.static) or attrs.get("transA", 0) or (a.rank or 0) < 2 or b.rank != 2:
        return None
    ash, bsh = [int(d) for d in a.shape or ()], [int(d) for d in b.shape or ()]
    k, n = bsh[::-1] if attrs.get("transB", 0) else bsh
    cs = [int(d) for d in c.shape or ()] if c is not None and c.static else None
    if ash[-1] != k or (c is not None and (cs is None or any(d != 1 for d in cs[:-1]) or cs[-1:] not in ([], [1], [n]))):
        return None
    return int(np.prod(ash[:-1], dtype=np.int64)), k, n


def _as_gemm(
    descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any], rows: int, k: int, n: int
) -> tuple[list[Any], dict[str, Any]]:
    """The Gemm's descs (A as (rows, K), C as (N,) or a scalar) and attributes."""
    gd: list[Any] = [descs[0].with_shape((rows, k)), descs[1]]  # type: ignore[union-attr]
    if len(descs) > 2 and descs[2] is not None:
        gd.append(descs[2].with_shape(tuple(int(d) for d in descs[2].shape[-1:])))  # type: ignore[index]
    return gd, {**attrs, "transA": 0, "beta": 1.0}


def _rows_of(gemm: KernelImpl) -> KernelImpl:
    """A FusedGemm kernel run as a FusedMatMul of a batch of rows (a transformer's
    (batch, seq, d) @ (d, n) + bias): A's leading axes folded into the rows of one Gemm, the
    operands reshaped (views when contiguous), the bias and activation the Gemm's."""

    def applies(descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> bool:
        shapes = rows_shapes(descs, attrs)
        return shapes is not None and gemm.applies(*_as_gemm(descs, attrs, *shapes))

    def candidates(descs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
        shapes = rows_shapes(descs, attrs)
        return gemm.candidates(*_as_gemm(descs, attrs, *shapes)) if shapes else [{}]

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        rows, kk, n = rows_shapes(ins, attrs)  # type: ignore[misc]
        gd, ga = _as_gemm(ins, attrs, rows, kk, n)
        inner = gemm.build(ga, params, gd, [TensorDesc((rows, n), outs[0].dtype)])

        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            gin = [inputs[0].reshape(rows, kk), inputs[1], *(c.reshape(c.shape[-1:]) for c in inputs[2:3] if c is not None)]
            y = outputs[0] if outputs is not None else None
            if y is not None and y.flags.c_contiguous:
                inner(gin, [y.reshape(rows, n)])
                return (y,)
            got = inner(gin, None)[0].reshape(*inputs[0].shape[:-1], n)
            if y is not None:
                np.copyto(y, got)
            return (got if y is None else y,)

        inner_form = native.native_form(inner)
        if inner_form is None:
            return run

        def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
            a, y = inputs[0], outputs[0]
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and y.flags.c_contiguous):
                return None
            gin = [a.reshape(rows, kk), inputs[1], *(c.reshape(c.shape[-1:]) for c in inputs[2:3] if c is not None)]
            return inner_form(gin, [y.reshape(rows, n)])

        return native.with_native(run, form)

    return KernelImpl(
        f"rows_{gemm.name}", build, applies, candidates, gemm.offered, gemm.eager, native=gemm.native, packs=gemm.packs
    )


_FUSED_GEMM = _with_activation(_base(nn.SCHEMAS, "Gemm"), "FusedGemm", "Gemm then an activation, in place")

_FUSED_MATMUL = low_precision(
    OpSchema(
        "FusedMatMul",
        _infer_fused_matmul,
        (
            KernelImpl("numpy", build_fused_matmul),
            *(_rows_of(impl) for impl in _FUSED_GEMM.impls),
            MATMUL_BLAS,
        ),
        _MATMUL.engines,
        {"transA": Attr("int", 0, (0, 1)), "transB": Attr("int", 0, (0, 1)), "alpha": Attr("float", 1.0), **_ACTIVATION_ATTRS},
        (2, 3),
        domain="aioge",
        family="fused",
        cost="matmul",
        doc="alpha * A' @ B' + C (A', B': last two axes swapped when transA / transB; C optional) then an optional activation",
    )
)


def _infer_squeeze_excite(ctx: InferContext) -> list[TensorDesc]:
    for i in ("1", "2"):
        _check_activation(
            {"activation": ctx.attrs.get("activation" + i, ""), "activation_params": ctx.attrs.get(f"activation{i}_params", ())}
        )
    descs = [d for d in ctx.inputs if d is not None and d.static]
    if len(ctx.inputs) != 5 or len(descs) != 5:
        raise InferError("SqueezeExcite takes x, W1, B1, W2 and B2, all of static shapes")
    x, w1, b1, w2, b2 = descs
    if x.dtype not in _FLOATS or any(d.dtype != x.dtype for d in descs):
        raise InferError(f"inputs must be float tensors of one dtype, got {[d.dtype for d in descs]}")
    shapes = [tuple(int(v) for v in d.shape or ()) for d in descs]
    if len(shapes[0]) != 4 or len(shapes[1]) != 4:
        raise InferError(f"x and W1 must be 4-D, got {shapes[0]} and {shapes[1]}")
    c, c1 = shapes[0][1], shapes[1][0]
    want = {"W1": (c1, c, 1, 1), "B1": (c1,), "W2": (c, c1, 1, 1), "B2": (c,)}
    for (name, shape), got in zip(want.items(), shapes[1:]):
        if got != shape:
            raise InferError(f"{name} must have shape {list(shape)} for x {list(shapes[0])}, got {list(got)}")
    return [x]


_SQUEEZE_EXCITE = OpSchema(
    "SqueezeExcite",
    _infer_squeeze_excite,
    (
        KernelImpl("numpy", k.build_squeeze_excite),
        KernelImpl(
            "squeeze_excite_native",
            k.build_squeeze_excite_native,
            offered=native.available,
            eager=True,
            native=True,
            packs=(1, 3),
        ),
    ),
    ALL_ENGINES,
    {
        "activation1": Attr("string", "", ACTIVATIONS),
        "activation1_params": Attr("floats", ()),
        "activation2": Attr("string", "", ACTIVATIONS),
        "activation2_params": Attr("floats", ()),
    },
    (5, 5),
    domain="aioge",
    family="fused",
    doc="a squeeze-and-excitation block: x * act2(Conv1x1(act1(Conv1x1(GlobalAveragePool(x), W1, B1)), W2, B2))",
)


def _infer_channel_shuffle(ctx: InferContext) -> list[TensorDesc]:
    descs = [d for d in ctx.inputs if d is not None and d.static]
    if len(descs) != len(ctx.inputs):
        raise InferError("ChannelShuffle takes one or more inputs, all of static shapes")
    shapes = [tuple(int(v) for v in d.shape or ()) for d in descs]
    if len({d.dtype for d in descs}) != 1 or len(shapes[0]) < 2 or len({s[:1] + s[2:] for s in shapes}) != 1:
        raise InferError(f"inputs must share one dtype and every dim but axis 1 (rank 2 or more), got {shapes}")
    c, g = sum(s[1] for s in shapes), int(ctx.attrs["group"])
    if g < 1 or c % g:
        raise InferError(f"group {g} must divide the {c} channels")
    splits = [int(v) for v in ctx.attrs.get("splits") or (c,)]
    if min(splits) < 1 or sum(splits) != c or ctx.num_outputs not in (0, len(splits)):
        raise InferError(f"splits {splits} must be positive, add up to the {c} channels and name every output")
    return [TensorDesc((shapes[0][0], k, *shapes[0][2:]), descs[0].dtype) for k in splits]


# ShuffleNet's channel shuffle (and the channel Concat before it): Reshape (N, group, C/group,
# ...), Transpose of the two, Reshape back, as one node (passes.patterns.fuse_channel_shuffle).
_CHANNEL_SHUFFLE = OpSchema(
    "ChannelShuffle",
    _infer_channel_shuffle,
    (KernelImpl("numpy", build_channel_shuffle, native=True),),
    CPU_ONLY,
    {"group": Attr("int", REQUIRED), "splits": Attr("ints", ())},
    (1, -1),
    (1, -1),
    domain="aioge",
    family="fused",
    float_only=False,
    doc="join the inputs along axis 1, then channel i * group + j takes channel j * (C / group) + i; split along axis 1 by splits",
)

SCHEMAS: tuple[OpSchema, ...] = (
    _FUSED_ELEMENTWISE,
    _SQUEEZE_EXCITE,
    _CHANNEL_SHUFFLE,
    _with_activation(
        _base(conv.SCHEMAS, "Conv"), "FusedConv", "Conv, plus Z (a residual) when given, then an activation, in place", True
    ),
    _FUSED_GEMM,
    _FUSED_MATMUL,
)
