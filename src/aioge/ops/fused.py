"""Fused ops: what the fusion passes put in place of op patterns.

They are ordinary ops of the registry (schema, inference, engines, kernels), so a fused
node compiles, caches and plans like any other. Their attributes are plain data (strings,
ints, floats and lists of them) so they serialise and hash into kernel keys.

- ``FusedElementwise``: a chain of elementwise ops as a small program (``ops``,
  ``operands``, ``params``; see ``aioge.kernels.fused``) run in one blocked pass.
- ``FusedConv``, ``FusedGemm``: Conv and Gemm (same attributes, same kernels, tuned the
  same way) followed by an activation applied in place to the output.
- ``FusedMatMul``: MatMul with either operand's last two axes transposed, a scale
  ``alpha`` and an optional activation.

An activation is named by its op (``activation``, empty for none) with its parameters in
``activation_params``: LeakyRelu (alpha), HardSigmoid (alpha, beta), Clip (lo, hi; -inf and
inf when absent), Gelu (1 for the tanh approximation, else 0).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import fused as k
from aioge.ops import conv, nn
from aioge.ops.infer import broadcast_shapes
from aioge.ops.schema import ALL_ENGINES, FLOAT_DTYPES, REQUIRED, Attr, InferContext, InferError, KernelImpl, OpSchema, RunFn

__all__ = ["ACTIVATIONS", "EW_OPS", "SCHEMAS"]

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
    (KernelImpl("blocked", k.build_fused_elementwise, candidates=_block_candidates),),
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


def _with_activation(base: OpSchema, name: str, doc: str) -> OpSchema:
    """``base`` followed by an in-place activation: its attributes, inference and every one
    of its kernels (so tuning chooses among the same candidates)."""

    def infer(ctx: InferContext) -> list[TensorDesc]:
        _check_activation(ctx.attrs)
        return base.infer(InferContext(ctx.inputs, ctx.values, k.without_activation(ctx.attrs), ctx.num_outputs))

    def wrap(impl: KernelImpl) -> KernelImpl:
        def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
            if attrs.get("activation", "") in impl.activations:
                return impl.build(attrs, params, ins, outs)  # it applies the activation itself
            return k.build_then_activation(impl.build, attrs, params, ins, outs, outs[0].dtype)

        return KernelImpl(
            impl.name,
            build,
            lambda descs, attrs: impl.applies(descs, k.without_activation(attrs)),
            lambda descs, attrs: impl.candidates(descs, k.without_activation(attrs)),
            impl.offered,
            impl.eager,
            impl.activations,
        )

    return OpSchema(
        name,
        infer,
        tuple(wrap(i) for i in base.impls),
        base.engines,
        {**base.attrs, **_ACTIVATION_ATTRS},
        base.inputs,
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
    return _MATMUL.infer(InferContext(ins, [None, None], {}, ctx.num_outputs))


def _build_fused_matmul(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """matmul of the (transposed) operands straight into the output, scaled, activated."""
    trans_a, trans_b = bool(attrs["transA"]), bool(attrs["transB"])
    alpha = float(attrs["alpha"])
    act = k.activation_runner(attrs.get("activation", ""), attrs.get("activation_params", ()), outs[0].dtype)

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        a = np.swapaxes(a, -1, -2) if trans_a else a
        b = np.swapaxes(b, -1, -2) if trans_b else b
        if outputs is None:
            y = np.matmul(a, b)
        else:
            y = outputs[0]
            np.matmul(a, b, out=y)
        if alpha != 1.0:
            np.multiply(y, alpha, out=y)
        if act is not None:
            act(y)
        return (y,)

    return run


_FUSED_MATMUL = OpSchema(
    "FusedMatMul",
    _infer_fused_matmul,
    (KernelImpl("numpy", _build_fused_matmul),),
    _MATMUL.engines,
    {"transA": Attr("int", 0, (0, 1)), "transB": Attr("int", 0, (0, 1)), "alpha": Attr("float", 1.0), **_ACTIVATION_ATTRS},
    (2, 2),
    domain="aioge",
    family="fused",
    cost="matmul",
    doc="alpha * A' @ B' (A', B': last two axes swapped when transA / transB) then an optional activation",
)

SCHEMAS: tuple[OpSchema, ...] = (
    _FUSED_ELEMENTWISE,
    _with_activation(_base(conv.SCHEMAS, "Conv"), "FusedConv", "Conv then an activation, in place"),
    _with_activation(_base(nn.SCHEMAS, "Gemm"), "FusedGemm", "Gemm then an activation, in place"),
    _FUSED_MATMUL,
)
