"""ONNX control flow the frontend can resolve at load time: If with a known condition, Scan unrolled.

aioge graphs have no control flow at run time. An ``If`` whose condition follows from the
model's constants is replaced by the branch it takes; a ``Scan`` over a sequence of static
length is unrolled into one copy of its body per step (the step's slices are Gathers, the
scan outputs are Unsqueeze + Concat). Anything else is refused with a GraphError that says
what would have to be known.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx

from aioge.frontends.onnx_context import NodeContext
from aioge.ir.graph import Value

__all__ = ["convert_if", "convert_scan", "convert_scan_8"]

# Unrolling multiplies the body: refuse beyond this many converted body nodes per Scan.
_MAX_UNROLLED_NODES = 50_000


def convert_if(ctx: NodeContext) -> Sequence[Value | None]:
    """If: the branch the (load-time known) condition selects, inlined."""
    cond = ctx.computable(0)
    if cond is None:
        raise ctx.fail("the condition must follow from the model's constants: aioge inlines the branch taken "
                       "and has no control flow at run time")
    if cond.size != 1:
        raise ctx.fail(f"the condition must hold one element, got shape {list(cond.shape)}")
    taken = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    branch = ctx.attrs.get(taken)
    if not isinstance(branch, onnx.GraphProto) or ctx.inline is None:
        raise ctx.fail(f"has no {taken} subgraph")
    outs = ctx.inline(branch, [], taken.split("_")[0])
    if len(outs) != len(ctx.outputs):
        raise ctx.fail(f"the {taken} has {len(outs)} outputs, the node {len(ctx.outputs)}")
    return outs


def convert_scan(ctx: NodeContext) -> Sequence[Value | None]:
    """Scan (opset 9 on): states and scan inputs, unrolled over the static sequence length."""
    body, m = _body(ctx), int(ctx.attrs.get("num_scan_inputs", 0))
    values = list(ctx.inputs)
    n = len(values) - m
    k = len(body.output) - n
    if m <= 0 or n < 0 or k < 0:
        raise ctx.fail(f"num_scan_inputs={m} does not fit {len(values)} inputs and {len(body.output)} body outputs")
    plan = _Plan(
        in_axes=_ints(ctx.attrs.get("scan_input_axes"), m, 0),
        in_dirs=_ints(ctx.attrs.get("scan_input_directions"), m, 0),
        out_axes=_ints(ctx.attrs.get("scan_output_axes"), k, 0),
        out_dirs=_ints(ctx.attrs.get("scan_output_directions"), k, 0),
    )
    states, stacked = _unroll(ctx, body, values[:n], values[n:], plan, "")
    return [*states, *stacked]


def convert_scan_8(ctx: NodeContext) -> Sequence[Value | None]:
    """Scan-8: everything has a leading batch axis and the body sees one batch item at a time."""
    body, m = _body(ctx), int(ctx.attrs.get("num_scan_inputs", 0))
    if ctx.input(0) is not None:
        raise ctx.fail("sequence_lens is not supported: aioge unrolls every sequence to its full length")
    values = list(ctx.inputs[1:])
    n = len(values) - m
    k = len(body.output) - n
    if m <= 0 or n < 0 or k < 0:
        raise ctx.fail(f"num_scan_inputs={m} does not fit {len(values)} inputs and {len(body.output)} body outputs")
    batch = _static_dim(ctx, values, 0, "batch")
    plan = _Plan([0] * m, _ints(ctx.attrs.get("directions"), m, 0), [0] * k, [0] * k)
    per_item: list[list[Value]] = []
    for b in range(batch):
        index = ctx.const(np.asarray(b, np.int64), "batch")
        items = [ctx.emit("Gather", [v, index], {"axis": 0})[0] for v in values]
        states, stacked = _unroll(ctx, body, items[:n], items[n:], plan, f"b{b}/")
        per_item.append([*states, *stacked])
    return [_stack(ctx, [item[j] for item in per_item], 0) for j in range(n + k)]


class _Plan:
    __slots__ = ("in_axes", "in_dirs", "out_axes", "out_dirs")

    def __init__(self, in_axes: list[int], in_dirs: list[int], out_axes: list[int], out_dirs: list[int]) -> None:
        self.in_axes, self.in_dirs, self.out_axes, self.out_dirs = in_axes, in_dirs, out_axes, out_dirs


def _unroll(ctx: NodeContext, body: onnx.GraphProto, states: Sequence[Value | None], xs: Sequence[Value | None],
            plan: _Plan, tag: str) -> tuple[list[Value], list[Value]]:
    if any(v is None for v in [*states, *xs]):
        raise ctx.fail("every state and scan input must be given")
    axes, lengths = [], set()
    for x, axis in zip(xs, plan.in_axes):
        shape = _shape(ctx, x)  # type: ignore[arg-type]
        if shape is None:
            raise ctx.fail("scan inputs need a known rank")
        axis = axis + len(shape) if axis < 0 else axis
        if not 0 <= axis < len(shape) or not isinstance(shape[axis], int):
            raise ctx.fail(f"the sequence length must be static to unroll, got shape {shape} (axis {axis})")
        axes.append(axis)
        lengths.add(int(shape[axis]))
    if len(lengths) != 1:
        raise ctx.fail(f"scan inputs have different sequence lengths {sorted(lengths)}")
    steps = lengths.pop()
    if steps == 0:
        raise ctx.fail("a Scan over an empty sequence is not supported")
    if steps * max(len(body.node), 1) > _MAX_UNROLLED_NODES:
        raise ctx.fail(f"unrolling {steps} steps of a {len(body.node)}-node body exceeds {_MAX_UNROLLED_NODES} nodes")
    assert ctx.inline is not None
    carried: list[Value] = list(states)  # type: ignore[arg-type]
    collected: list[list[Value]] = []
    for t in range(steps):
        slices = []
        for x, axis, direction in zip(xs, axes, plan.in_dirs):
            index = ctx.const(np.asarray(steps - 1 - t if direction else t, np.int64), "step")
            slices.append(ctx.emit("Gather", [x, index], {"axis": axis})[0])
        outs = ctx.inline(body, [*carried, *slices], f"{tag}step{t}")
        carried = outs[: len(carried)]
        collected.append(outs[len(carried):])
    stacked = []
    for j, (axis, direction) in enumerate(zip(plan.out_axes, plan.out_dirs)):
        items = [step[j] for step in collected]
        stacked.append(_stack(ctx, items[::-1] if direction else items, axis))
    return carried, stacked


def _stack(ctx: NodeContext, items: list[Value], axis: int) -> Value:
    rank = _shape(ctx, items[0])
    if axis < 0:
        if rank is None:
            raise ctx.fail("a negative scan output axis needs outputs of known rank")
        axis += len(rank) + 1
    axes = ctx.const(np.asarray([axis], np.int64), "axes")
    lifted = [ctx.emit("Unsqueeze", [v, axes])[0] for v in items]
    if len(lifted) == 1:
        return lifted[0]
    return ctx.emit("Concat", lifted, {"axis": axis})[0]


def _body(ctx: NodeContext) -> onnx.GraphProto:
    body = ctx.attrs.get("body")
    if not isinstance(body, onnx.GraphProto) or ctx.inline is None:
        raise ctx.fail("has no body subgraph")
    return body


def _shape(ctx: NodeContext, v: Value) -> tuple[Any, ...] | None:
    return ctx.facts.desc(v).shape if ctx.facts is not None else v.shape


def _static_dim(ctx: NodeContext, values: Sequence[Value | None], axis: int, what: str) -> int:
    dims = set()
    for v in values:
        shape = None if v is None else _shape(ctx, v)
        if shape is None or axis >= len(shape) or not isinstance(shape[axis], int):
            raise ctx.fail(f"the {what} length must be static to unroll, got shape {shape}")
        dims.add(int(shape[axis]))
    if len(dims) != 1:
        raise ctx.fail(f"inputs disagree on the {what} length: {sorted(dims)}")
    return dims.pop()


def _ints(value: Any, n: int, default: int) -> list[int]:
    out = [int(v) for v in value] if value else [default] * n
    if len(out) != n:
        raise ValueError(f"expected {n} values, got {out}")
    return out
