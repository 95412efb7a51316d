"""The ONNX op table: one converter per op type and opset range, onto aioge's canonical ops.

aioge's ops take the form of the newest ONNX opset. An op whose meaning never changed
across the opsets aioge reads is converted by ``passthrough`` (same name, inputs and
attributes) and needs no entry. Every op whose inputs, attributes or semantics changed has
entries here, one per opset range, each saying which aioge ops it emits; a node is
supported when its converter's ops are all in the registry.

Opset ranges are inclusive and refer to the model's opset for the node's domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.frontends.onnx_context import NodeContext
from aioge.frontends.onnx_control import convert_if, convert_loop, convert_scan, convert_scan_8
from aioge.frontends.onnx_gradient import GRADIENT_DOMAIN, convert_gradient
from aioge.frontends.onnx_sequence import SEQUENCE_CONVERTERS, SEQUENCE_EMITS
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Value
from aioge.ops.registry import REGISTRY

__all__ = ["CONVERTERS", "MIN_OPSET", "Converter", "find_converter", "passthrough"]

# The oldest default-domain opset aioge reads. Opset 6 dropped the legacy
# ``consumed_inputs`` attributes; what 6 and 7 still differ in (legacy broadcasting,
# ``is_test``) is converted below.
MIN_OPSET = 6
NEWEST = 10**6

ConvertFn = Callable[[NodeContext], Sequence["Value | None"]]


@dataclass(frozen=True, slots=True)
class Converter:
    """How ONNX ``op_type`` at opsets ``since``..``until`` becomes aioge ops (``emits``)."""

    op_type: str
    since: int
    until: int
    convert: ConvertFn
    emits: tuple[str, ...]
    domain: str = ""

    def missing(self) -> list[str]:
        """The aioge ops this converter may emit that the registry lacks (empty: supported)."""
        return [op for op in self.emits if (self.domain if op == self.op_type else "", op) not in REGISTRY]


def passthrough(ctx: NodeContext) -> Sequence[Value | None]:
    """The ONNX node as the aioge op of the same name, inputs and attributes."""
    return ctx.emit(ctx.op_type, ctx.inputs, ctx.attrs, outputs=ctx.outputs, domain=ctx.domain)


def find_converter(domain: str, op_type: str, opset: int) -> Converter:
    """The converter for an op at an opset: its table entry, or ``passthrough``."""
    for conv in CONVERTERS.get((domain, op_type), ()):
        if conv.since <= opset <= conv.until:
            return conv
    return Converter(op_type, 1, NEWEST, passthrough, (op_type,), domain)


# -- building blocks --------------------------------------------------------------------


def _int64s(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _scalar_like(ctx: NodeContext, value: Any, i: int = 0) -> np.ndarray:
    v = ctx.input(i)
    dtype = numpy_dtype(v.dtype) if v is not None else np.float32
    return np.asarray(value, dtype=dtype)


# How a moved attribute becomes an input tensor.
_AS: dict[str, Callable[[NodeContext, Any], np.ndarray]] = {
    "int64s": lambda ctx, v: _int64s(v),
    "int64": lambda ctx, v: np.asarray(v, dtype=np.int64),
    "like0": lambda ctx, v: _scalar_like(ctx, v),
    "float32": lambda ctx, v: np.asarray(v, dtype=np.float32),
    "floats": lambda ctx, v: np.asarray(v, dtype=np.float32).reshape(-1),
}


def _moved(*moves: tuple[str, int, str], drop: tuple[str, ...] = (), then: ConvertFn | None = None) -> ConvertFn:
    """A converter that turns attributes into constant inputs: ``(attr, input index, as)``.

    Older opsets took Reshape's shape, Squeeze's axes, Slice's starts/ends, Pad's pads and
    so on as attributes; the canonical ops take them as inputs. ``drop`` lists legacy
    attributes with no effect on inference; ``then`` converts the rewritten node further.
    """

    def convert(ctx: NodeContext) -> Sequence[Value | None]:
        inputs = list(ctx.inputs)
        attrs = dict(ctx.attrs)
        for key in drop:
            attrs.pop(key, None)
        for key, index, kind in moves:
            if key not in attrs:
                continue
            value = attrs.pop(key)
            while len(inputs) <= index:
                inputs.append(None)
            inputs[index] = ctx.const(_AS[kind](ctx, value), key)
        ctx.inputs, ctx.attrs = inputs, attrs
        return (then or passthrough)(ctx)

    return convert


def _dropping(*keys: str, then: ConvertFn | None = None) -> ConvertFn:
    """A converter that drops legacy attributes that do not change inference."""
    return _moved(drop=keys, then=then)


def _renamed(op_type: str, **attrs: Any) -> ConvertFn:
    """The node as another canonical op (``Scatter`` -> ``ScatterElements``), with fixed attrs."""

    def convert(ctx: NodeContext) -> Sequence[Value | None]:
        return ctx.emit(op_type, ctx.inputs, {**ctx.attrs, **attrs}, outputs=ctx.outputs)

    return convert


# -- per-op conversions -----------------------------------------------------------------


def _constant(ctx: NodeContext) -> Sequence[Value | None]:
    a = ctx.attrs
    if "sparse_value" in a:
        raise ctx.fail("sparse_value constants are not supported")
    forms: dict[str, Callable[[Any], np.ndarray]] = {
        "value": lambda v: np.asarray(v),
        "value_float": lambda v: np.asarray(v, dtype=np.float32),
        "value_floats": lambda v: np.asarray(v, dtype=np.float32).reshape(-1),
        "value_int": lambda v: np.asarray(v, dtype=np.int64),
        "value_ints": lambda v: _int64s(v),
        "value_string": lambda v: np.asarray(v, dtype=object),
        "value_strings": lambda v: np.asarray(list(v), dtype=object).reshape(-1),
    }
    given = [k for k in forms if k in a]
    if len(given) != 1:
        raise ctx.fail(f"a Constant needs exactly one value attribute, got {given or 'none'}")
    return [ctx.graph.constant(forms[given[0]](a[given[0]]), ctx.outputs[0])]


def _split_outputs(ctx: NodeContext) -> Sequence[Value | None]:
    """Split with no ``split`` input divides evenly into as many outputs as the node has."""
    if ctx.input(1) is None:
        ctx.attrs = {**ctx.attrs, "num_outputs": len(ctx.outputs)}
    return passthrough(ctx)


def _flattened(ctx: NodeContext) -> Sequence[Value | None]:
    """Softmax/LogSoftmax/Hardmax before opset 13: over the input flattened to 2-D at ``axis``.

    When ``axis`` is the last axis both meanings agree and the op is used directly;
    otherwise it is Flatten -> op over axis 1 -> Reshape back to the input's shape.
    """
    x = ctx.input(0)
    assert x is not None
    axis = int(ctx.attrs.get("axis", 1))
    rank = ctx.rank(0)
    if rank is not None and rank > 0:
        axis = axis + rank if axis < 0 else axis
        if axis == rank - 1:
            return ctx.emit(ctx.op_type, [x], {"axis": axis}, outputs=ctx.outputs)
    (flat,) = ctx.emit("Flatten", [x], {"axis": axis})
    (y,) = ctx.emit(ctx.op_type, [flat], {"axis": 1})
    if x.desc.static:
        shape = ctx.const(_int64s(x.shape), "shape")
    else:
        (shape,) = ctx.emit("Shape", [x])
    # allowzero: a 0 in the input's shape is a real 0, not "copy this dimension".
    return ctx.emit("Reshape", [y, shape], {"allowzero": 1}, outputs=ctx.outputs)


def _inference_only(ctx: NodeContext, keep: int) -> list[str]:
    """The node's outputs past ``keep``, checked unused: they exist only in training mode."""
    extra = [ctx.outputs[k] for k in range(keep, len(ctx.outputs)) if ctx.wants(k)]
    if extra:
        raise ctx.fail(f"outputs {extra} exist only in training mode, which aioge does not run")
    return ctx.outputs[:keep]


def _batch_norm_old(ctx: NodeContext) -> Sequence[Value | None]:
    """BatchNormalization before opset 14: inference only; ``spatial=0`` (opset < 9) normalises
    per activation, with statistics shaped like one sample."""
    attrs = dict(ctx.attrs)
    for key in ("is_test", "consumed_inputs", "momentum"):
        attrs.pop(key, None)
    spatial = int(attrs.pop("spatial", 1))
    outputs = _inference_only(ctx, 1)
    if spatial:
        return ctx.emit("BatchNormalization", ctx.inputs, attrs, outputs=outputs)
    x, scale, bias, mean, var = ctx.inputs[:5]
    eps = ctx.const(_scalar_like(ctx, attrs.get("epsilon", 1e-5)), "epsilon")
    axes = ctx.const(_int64s([0]), "axes")
    s, b, m, v = (ctx.emit("Unsqueeze", [t, axes])[0] for t in (scale, bias, mean, var))
    (centred,) = ctx.emit("Sub", [x, m])
    (std,) = ctx.emit("Sqrt", [ctx.emit("Add", [v, eps])[0]])
    (normed,) = ctx.emit("Div", [centred, std])
    (scaled,) = ctx.emit("Mul", [normed, s])
    return ctx.emit("Add", [scaled, b], outputs=outputs)


def _batch_norm_9(ctx: NodeContext) -> Sequence[Value | None]:
    return ctx.emit("BatchNormalization", ctx.inputs, ctx.attrs, outputs=_inference_only(ctx, 1))


def _batch_norm_14(ctx: NodeContext) -> Sequence[Value | None]:
    """BatchNormalization from opset 14; ``training_mode=1`` becomes its definition in ops.

    Training normalises with the batch's own mean and (population) variance over every axis
    but the channel axis 1, and outputs the running statistics
    ``input * momentum + batch * (1 - momentum)``.
    """
    attrs = dict(ctx.attrs)
    if not int(attrs.pop("training_mode", 0)):
        return ctx.emit("BatchNormalization", ctx.inputs, attrs, outputs=_inference_only(ctx, 1))
    x, scale, bias, mean, var = ctx.inputs[:5]
    rank = ctx.rank(0)
    if x is None or scale is None or bias is None or mean is None or var is None or rank is None or rank < 2:
        raise ctx.fail("training_mode=1 needs X of known rank >= 2 and all four statistics inputs")
    momentum = float(attrs.get("momentum", 0.9))
    axes = ctx.const(_int64s([0, *range(2, rank)]), "axes")
    (batch_mean,) = ctx.emit("ReduceMean", [x, axes], {"keepdims": 1})
    (centred,) = ctx.emit("Sub", [x, batch_mean])
    (batch_var,) = ctx.emit("ReduceMean", [ctx.emit("Mul", [centred, centred])[0], axes], {"keepdims": 1})
    eps = ctx.const(_scalar_like(ctx, attrs.get("epsilon", 1e-5)), "epsilon")
    (std,) = ctx.emit("Sqrt", [ctx.emit("Add", [batch_var, eps])[0]])
    per_channel = ctx.const(_int64s([-1, *([1] * (rank - 2))]), "per_channel")
    s, b = (ctx.emit("Reshape", [t, per_channel])[0] for t in (scale, bias))
    (normed,) = ctx.emit("Div", [centred, std])
    results: list[Value | None] = list(ctx.emit("Add", [ctx.emit("Mul", [normed, s])[0], b], outputs=[ctx.outputs[0]]))
    keep, take = ctx.const(_scalar_like(ctx, momentum), "momentum"), ctx.const(_scalar_like(ctx, 1 - momentum), "rest")
    channel = ctx.const(_int64s([-1]), "channel")
    for k, (running, batch) in enumerate(((mean, batch_mean), (var, batch_var)), start=1):
        if not ctx.wants(k):
            results.append(None)
            continue
        (flat,) = ctx.emit("Reshape", [batch, channel])
        (old,) = ctx.emit("Mul", [running, keep])
        results += ctx.emit("Add", [old, ctx.emit("Mul", [flat, take])[0]], outputs=[ctx.outputs[k]])
    return results


def _dropout_old(ctx: NodeContext) -> Sequence[Value | None]:
    """Dropout before opset 12 (ratio an attribute); before opset 10 its mask had the input's dtype."""
    attrs = {k: v for k, v in ctx.attrs.items() if k not in ("is_test", "ratio")}
    x = ctx.input(0)
    assert x is not None
    if not ctx.wants(1) or ctx.opset >= 10:
        return ctx.emit("Dropout", [x], attrs, outputs=ctx.outputs)
    y, mask = ctx.emit("Dropout", [x], attrs, outputs=[ctx.outputs[0], ""])
    (typed,) = ctx.emit("Cast", [mask], {"to": x.dtype}, outputs=[ctx.outputs[1]])
    return [y, typed]


def _legacy_broadcast(ctx: NodeContext) -> Sequence[Value | None]:
    """Binary ops before opset 7: with ``broadcast=1`` and ``axis``, B lines up with A from
    ``axis`` on; numpy broadcasting lines it up from the end, so B gets trailing 1s."""
    attrs = dict(ctx.attrs)
    broadcast = int(attrs.pop("broadcast", 0))
    axis = attrs.pop("axis", None)
    attrs.pop("consumed_inputs", None)
    inputs = list(ctx.inputs)
    if broadcast and axis is not None:
        ra, rb = ctx.rank(0), ctx.rank(1)
        if ra is None or rb is None:
            raise ctx.fail("legacy broadcasting with an axis needs the ranks of both inputs")
        axis = axis + ra if axis < 0 else axis
        trailing = ra - axis - rb
        if trailing > 0:
            axes = ctx.const(_int64s(range(rb, rb + trailing)), "axes")
            inputs[1] = ctx.emit("Unsqueeze", [inputs[1], axes])[0]
    return ctx.emit(ctx.op_type, inputs, attrs, outputs=ctx.outputs)


def _prelu_6(ctx: NodeContext) -> Sequence[Value | None]:
    """PRelu before opset 7: a 1-D slope is per channel (axis 1), not per last axis."""
    slope_shape, rank = ctx.shape(1), ctx.rank(0)
    inputs = list(ctx.inputs)
    if slope_shape is not None and len(slope_shape) == 1 and slope_shape[0] != 1 and rank is not None and rank > 2:
        axes = ctx.const(_int64s(range(1, rank - 1)), "axes")
        inputs[1] = ctx.emit("Unsqueeze", [inputs[1], axes])[0]
    return ctx.emit("PRelu", inputs, {}, outputs=ctx.outputs)


def _upsample(ctx: NodeContext) -> Sequence[Value | None]:
    """Upsample (and Resize-10): asymmetric coordinates, nearest rounds down, as ONNX defines."""
    attrs = dict(ctx.attrs)
    mode = attrs.pop("mode", "nearest")
    scales = ctx.input(1)
    if "scales" in attrs:
        scales = ctx.const(np.asarray(attrs.pop("scales"), dtype=np.float32), "scales")
    elif "height_scale" in attrs or "width_scale" in attrs:  # Upsample-1
        hw = [attrs.pop("height_scale", 1.0), attrs.pop("width_scale", 1.0)]
        scales = ctx.const(np.asarray([1.0] * ((ctx.rank(0) or 4) - 2) + hw, dtype=np.float32), "scales")
    if scales is None:
        raise ctx.fail("needs scales")
    canon: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "nearest":
        canon["nearest_mode"] = "floor"
    return ctx.emit("Resize", [ctx.input(0), None, scales], canon, outputs=ctx.outputs)


def _resize(ctx: NodeContext) -> Sequence[Value | None]:
    """Resize from opset 11: an empty roi or scales tensor means the input is absent."""
    inputs = list(ctx.inputs)
    for i in (1, 2):
        known = ctx.known(i)
        if known is not None and known.size == 0:
            inputs[i] = None
    return ctx.emit("Resize", inputs, ctx.attrs, outputs=ctx.outputs)


def _group_norm_18(ctx: NodeContext) -> Sequence[Value | None]:
    """GroupNormalization-18 took scale and bias per group; the canonical op takes them per channel."""
    shape = ctx.shape(0)
    groups = int(ctx.attrs.get("num_groups", 0))
    if shape is None or len(shape) < 2 or not isinstance(shape[1], int) or groups <= 0 or shape[1] % groups:
        raise ctx.fail(f"needs a static channel count divisible by num_groups={groups}, got shape {shape}")
    per = shape[1] // groups
    inputs = list(ctx.inputs)
    for i in (1, 2):
        known = ctx.known(i)
        if known is not None:
            inputs[i] = ctx.const(np.repeat(known, per), "per_channel")
            continue
        (col,) = ctx.emit("Unsqueeze", [inputs[i], ctx.const(_int64s([1]), "axes")])
        (grid,) = ctx.emit("Expand", [col, ctx.const(_int64s([groups, per]), "grid")])
        inputs[i] = ctx.emit("Reshape", [grid, ctx.const(_int64s([shape[1]]), "channels")])[0]
    return ctx.emit("GroupNormalization", inputs, ctx.attrs, outputs=ctx.outputs)


def _image_scaler(ctx: NodeContext) -> Sequence[Value | None]:
    """ImageScaler (experimental, opsets 1 to 9): x * scale + bias[c]."""
    x = ctx.input(0)
    assert x is not None
    rank = ctx.rank(0) or 4
    scale = ctx.const(_scalar_like(ctx, ctx.attrs.get("scale", 1.0)), "scale")
    bias = np.asarray(ctx.attrs.get("bias", [0.0]), dtype=numpy_dtype(x.dtype)).reshape((-1,) + (1,) * (rank - 2))
    (scaled,) = ctx.emit("Mul", [x, scale])
    return ctx.emit("Add", [scaled, ctx.const(bias, "bias")], outputs=ctx.outputs)


def _cast_like(ctx: NodeContext) -> Sequence[Value | None]:
    """CastLike is Cast to the dtype of its second input, which is known when the graph is built."""
    target = ctx.input(1)
    if target is None:
        raise ctx.fail("needs a target_type input")
    return ctx.emit("Cast", [ctx.input(0)], {**ctx.attrs, "to": target.dtype}, outputs=ctx.outputs)


def _flex_attention(ctx: NodeContext) -> Sequence[Value | None]:
    """FlexAttention with its score_mod / prob_mod subgraphs: the op's definition in ops, each
    modifier inlined on the whole (batch, heads, q, kv) tensor; without them, the fused op."""
    attrs = dict(ctx.attrs)
    mods = {key: attrs.pop(key) for key in ("score_mod", "prob_mod") if key in attrs}
    if not mods:
        return ctx.emit("FlexAttention", ctx.inputs, attrs, outputs=ctx.outputs, domain=ctx.domain)
    q, k, v = ctx.inputs[:3]
    qs, ks = ctx.sharp_shape(0), ctx.sharp_shape(1)
    if q is None or k is None or v is None or qs is None or ks is None or len(qs) != 4 or len(ks) != 4:
        raise ctx.fail("needs rank-4 Q, K and V")
    if qs[1] != ks[1]:
        raise ctx.fail(f"modifier subgraphs with grouped-query heads ({qs[1]} query, {ks[1]} key/value) are not supported")
    if attrs.get("softmax_precision"):
        from aioge.kernels.convert import dtype_of_code

        work = dtype_of_code(attrs["softmax_precision"], "softmax_precision")
    else:
        work = "float64" if q.dtype == "float64" else "float32"
    scale = attrs.get("scale")
    if scale is None:
        if not isinstance(qs[3], int):
            raise ctx.fail("the default scale needs a static head size")
        scale = 1 / float(np.sqrt(qs[3]))
    q, k, v = (t if t.dtype == work else ctx.emit("Cast", [t], {"to": work})[0] for t in (q, k, v))
    (kt,) = ctx.emit("Transpose", [k], {"perm": [0, 1, 3, 2]})
    (scores,) = ctx.emit("Mul", [ctx.emit("MatMul", [q, kt])[0], ctx.const(np.asarray(scale, numpy_dtype(work)), "scale")])
    assert ctx.inline is not None
    if "score_mod" in mods:
        (scores,) = ctx.inline(mods["score_mod"], [scores], "score_mod")
    (probs,) = ctx.emit("Softmax", [scores], {"axis": -1})
    if "prob_mod" in mods:
        (probs,) = ctx.inline(mods["prob_mod"], [probs], "prob_mod")
    out_dtype = ctx.inputs[0].dtype  # type: ignore[union-attr]
    if out_dtype == work:
        return ctx.emit("MatMul", [probs, v], outputs=ctx.outputs)
    (y,) = ctx.emit("MatMul", [probs, v])
    return ctx.emit("Cast", [y], {"to": out_dtype}, outputs=ctx.outputs)


def _roi_align_old(ctx: NodeContext) -> Sequence[Value | None]:
    """RoiAlign before opset 16 behaved as ``coordinate_transformation_mode=output_half_pixel``."""
    return ctx.emit(
        "RoiAlign", ctx.inputs, {"coordinate_transformation_mode": "output_half_pixel", **ctx.attrs}, outputs=ctx.outputs
    )


# -- the table ----------------------------------------------------------------------------

_REDUCE_18 = (
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
)
_LEGACY_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less")
_SOFTMAX_FAMILY = ("Softmax", "LogSoftmax", "Hardmax")

_ENTRIES: tuple[Converter, ...] = (
    Converter("Constant", 1, NEWEST, _constant, ()),
    Converter("Reshape", 1, 4, _moved(("shape", 1, "int64s"), drop=("consumed_inputs",)), ("Reshape",)),
    Converter("Squeeze", 1, 12, _moved(("axes", 1, "int64s")), ("Squeeze",)),
    Converter("Unsqueeze", 1, 12, _moved(("axes", 1, "int64s")), ("Unsqueeze",)),
    Converter("Slice", 1, 9, _moved(("starts", 1, "int64s"), ("ends", 2, "int64s"), ("axes", 3, "int64s")), ("Slice",)),
    Converter("Split", 1, 12, _moved(("split", 1, "int64s"), then=_split_outputs), ("Split",)),
    Converter("Split", 13, 17, _split_outputs, ("Split",)),
    Converter("ReduceSum", 1, 12, _moved(("axes", 1, "int64s")), ("ReduceSum",)),
    *(Converter(op, 1, 17, _moved(("axes", 1, "int64s")), (op,)) for op in _REDUCE_18),
    Converter("Pad", 1, 10, _moved(("pads", 1, "int64s"), ("value", 2, "like0")), ("Pad",)),
    Converter("Clip", 1, 10, _moved(("min", 1, "like0"), ("max", 2, "like0"), drop=("consumed_inputs",)), ("Clip",)),
    Converter("TopK", 1, 9, _moved(("k", 1, "int64s")), ("TopK",)),
    Converter("DFT", 17, 19, _moved(("axis", 2, "int64")), ("DFT",)),
    Converter("Dropout", 1, 11, _dropout_old, ("Dropout", "Cast")),
    Converter("Upsample", 1, NEWEST, _upsample, ("Resize",)),
    Converter("Resize", 10, 10, _upsample, ("Resize",)),
    Converter("Resize", 11, NEWEST, _resize, ("Resize",)),
    Converter("Scatter", 9, NEWEST, _renamed("ScatterElements"), ("ScatterElements",)),
    *(Converter(op, 1, 12, _flattened, (op, "Flatten", "Shape", "Reshape")) for op in _SOFTMAX_FAMILY),
    Converter(
        "BatchNormalization", 1, 8, _batch_norm_old, ("BatchNormalization", "Unsqueeze", "Sub", "Add", "Sqrt", "Div", "Mul")
    ),
    Converter("BatchNormalization", 9, 13, _batch_norm_9, ("BatchNormalization",)),
    Converter(
        "BatchNormalization",
        14,
        NEWEST,
        _batch_norm_14,
        ("BatchNormalization", "ReduceMean", "Sub", "Mul", "Add", "Sqrt", "Reshape", "Div"),
    ),
    *(Converter(op, 1, 6, _legacy_broadcast, (op, "Unsqueeze")) for op in _LEGACY_BINARY),
    Converter("Gemm", 1, 6, _dropping("broadcast"), ("Gemm",)),
    Converter("PRelu", 1, 6, _prelu_6, ("PRelu", "Unsqueeze")),
    Converter("GroupNormalization", 18, 20, _group_norm_18, ("GroupNormalization", "Unsqueeze", "Expand", "Reshape")),
    Converter("RoiAlign", 10, 15, _roi_align_old, ("RoiAlign",)),
    Converter("ImageScaler", 1, 9, _image_scaler, ("Mul", "Add")),
    Converter("CastLike", 15, NEWEST, _cast_like, ("Cast",)),
    Converter(
        "FlexAttention",
        1,
        NEWEST,
        _flex_attention,
        ("FlexAttention", "Cast", "Transpose", "MatMul", "Mul", "Softmax"),
        "ai.onnx.preview",
    ),
    # Control flow resolved at load time (onnx_control): the bodies' own ops are checked one by one.
    Converter("If", 1, NEWEST, convert_if, ("Where",)),
    Converter("Loop", 1, NEWEST, convert_loop, ("Unsqueeze", "Concat")),
    Converter("Scan", 8, 8, convert_scan_8, ("Gather", "Unsqueeze", "Concat")),
    Converter("Scan", 9, NEWEST, convert_scan, ("Gather", "Unsqueeze", "Concat")),
    # Gradients emitted at load time (onnx_gradient), by the rules of the ops on the path.
    Converter(
        "Gradient",
        1,
        NEWEST,
        convert_gradient,
        ("Shape", "ConstantOfShape", "Add", "Neg", "Mul", "Div", "ReduceSum", "Reshape", "MatMul", "Transpose"),
        GRADIENT_DOMAIN,
    ),
    # Sequences and optionals: unrolled where the model fixes them, else first-class (onnx_sequence).
    *(Converter(op, 1, NEWEST, fn, SEQUENCE_EMITS.get(op, ())) for op, fn in SEQUENCE_CONVERTERS.items()),
)


def _table(entries: Sequence[Converter]) -> Mapping[tuple[str, str], tuple[Converter, ...]]:
    table: dict[tuple[str, str], list[Converter]] = {}
    for conv in entries:
        group = table.setdefault((conv.domain, conv.op_type), [])
        for other in group:
            if conv.since <= other.until and other.since <= conv.until:
                raise RuntimeError(
                    f"converters for {conv.op_type} overlap: opsets {other.since}-{other.until} and {conv.since}-{conv.until}"
                )
        group.append(conv)
    return MappingProxyType({k: tuple(sorted(v, key=lambda c: c.since)) for k, v in table.items()})


CONVERTERS: Mapping[tuple[str, str], tuple[Converter, ...]] = _table(_ENTRIES)
