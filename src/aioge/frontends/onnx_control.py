"""ONNX control flow the frontend can resolve at load time: If, Scan and Loop.

An ``If`` whose condition follows from the model's constants is replaced by the branch it
takes; one whose condition is known only at run time, and whose branches give tensors of one
dtype and static shape, runs both branches and selects with ``Where`` (as XLA lowers small
conditionals; both branches are computed); any other becomes the run-time ``If`` op over the
two branches as programs (``aioge.ops.control``). A ``Scan`` over a sequence of static length
is unrolled into one copy of its body per step (the step's slices are Gathers, the scan
outputs are Unsqueeze + Concat); so is a ``Loop`` whose trip count and condition follow from
the constants; any other Loop becomes the run-time ``Loop`` op, whose states may be
sequences and optionals.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx

from aioge.errors import GraphError
from aioge.frontends.onnx_context import NodeContext
from aioge.ir.desc import TensorDesc
from aioge.ir.graph import Value
from aioge.ops.control import type_of

__all__ = ["convert_if", "convert_loop", "convert_scan", "convert_scan_8", "runtime_sequence_map"]

# Unrolling multiplies the body: refuse beyond this many converted body nodes per Scan.
_MAX_UNROLLED_NODES = 50_000


def convert_if(ctx: NodeContext) -> Sequence[Value | None]:
    """If: the branch the (load-time known) condition selects, inlined."""
    cond = ctx.computable(0)
    if cond is None:
        return _select_if(ctx)
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


def _select_if(ctx: NodeContext) -> Sequence[Any]:
    """If on a run-time condition: both branches inlined, each output pair joined by Where."""
    from aioge.frontends.onnx_sequence import SequenceValue

    branches = [ctx.attrs.get(b) for b in ("then_branch", "else_branch")]
    cond = ctx.input(0)
    if cond is None or ctx.inline is None or not all(isinstance(b, onnx.GraphProto) for b in branches):
        raise ctx.fail("needs a condition and both branches")
    if any(_gives_containers(b) for b in branches):  # type: ignore[arg-type]
        return _runtime_if(ctx, branches)  # type: ignore[arg-type]
    then, other = (ctx.inline(b, [], tag) for b, tag in zip(branches, ("then", "else")))  # type: ignore[arg-type]
    if len(then) != len(ctx.outputs) or len(other) != len(ctx.outputs):
        raise ctx.fail(f"the branches have {len(then)} and {len(other)} outputs, the node {len(ctx.outputs)}")
    unknown = (
        "the condition must follow from the model's constants, or both branches must give outputs "
        "of one dtype and static shape (aioge then computes both and selects)"
    )

    def select(a: Any, b: Any) -> Any:
        if isinstance(a, SequenceValue) and isinstance(b, SequenceValue) and len(a.items) == len(b.items):
            return SequenceValue(tuple(select(x, y) for x, y in zip(a.items, b.items)), a.dtype)
        if not isinstance(a, Value) or not isinstance(b, Value) or a.dtype != b.dtype:
            raise ctx.fail(unknown)
        sa, sb = _shape(ctx, a), _shape(ctx, b)
        if sa is None or sa != sb or not all(isinstance(d, int) for d in sa):
            raise ctx.fail(f"{unknown}; got {a.desc} and {b.desc}")
        return ctx.emit("Where", [cond, a, b])[0]

    try:
        return [select(a, b) for a, b in zip(then, other)]
    except GraphError:
        # Outputs Where cannot join (shapes known only at run time): the run-time If. The
        # inlined branches are left unread, for dead-node removal.
        return _runtime_if(ctx, branches)  # type: ignore[arg-type]


def _gives_containers(branch: onnx.GraphProto) -> bool:
    """Whether a branch's outputs include sequences or optionals (both branches cannot
    simply run and be selected from: OptionalGetElement on the branch not taken may fail)."""
    typed = {vi.name: vi.type for vi in [*branch.output, *branch.value_info]}
    if any(typed.get(o.name, onnx.TypeProto()).WhichOneof("value") in ("sequence_type", "optional_type") for o in branch.output):
        return True
    makes = {"SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SplitToSequence", "Optional"}
    makes |= {"OptionalGetElement"}
    return any(node.op_type in makes for node in branch.node)


def convert_loop(ctx: NodeContext) -> Sequence[Any]:
    """Loop: unrolled when its trip count and every step's condition follow from the constants."""
    body = _body(ctx)
    trip = ctx.computable(0) if ctx.input(0) is not None else None
    cond = ctx.computable(1) if ctx.input(1) is not None else np.asarray(True)
    if ctx.input(0) is not None and trip is None or cond is None:
        return _runtime_loop(ctx, body)
    n = len(ctx.inputs) - 2
    k = len(body.output) - 1 - n
    if n < 0 or k < 0:
        raise ctx.fail(f"{len(ctx.inputs)} inputs do not fit a body of {len(body.output)} outputs")
    steps = int(trip.reshape(-1)[0]) if trip is not None else None
    carried: list[Any] = list(ctx.inputs[2:])
    collected: list[list[Any]] = []
    going, t = bool(cond.reshape(-1)[0]), 0
    while going and (steps is None or t < steps):
        if (t + 1) * max(len(body.node), 1) > _MAX_UNROLLED_NODES:
            raise ctx.fail(f"unrolling over {t} steps of a {len(body.node)}-node body exceeds {_MAX_UNROLLED_NODES} nodes")
        assert ctx.inline is not None
        outs = ctx.inline(
            body, [ctx.const(np.asarray(t, np.int64), "iter"), ctx.const(np.asarray(True), "cond"), *carried], f"iter{t}"
        )
        flag = ctx.facts.value(outs[0]) if ctx.facts is not None and isinstance(outs[0], Value) else None
        if flag is None:
            if t == 0:
                return _runtime_loop(ctx, body)
            raise ctx.fail("the loop condition must follow from the model's constants at every step")
        going = bool(flag.reshape(-1)[0])
        carried, t = outs[1 : 1 + n], t + 1
        collected.append(outs[1 + n :])
    if k and not collected:
        raise ctx.fail("a Loop that runs no step has scan outputs of unknown shape")
    return [*carried, *(_stack(ctx, [step[j] for step in collected], 0) for j in range(k))]


def _runtime_loop(ctx: NodeContext, body: onnx.GraphProto) -> Sequence[Any]:
    """Loop with a run-time trip count or condition: the Loop op over the body as a program.

    The body is loaded as a graph of its own whose extra inputs are the outer values it reads;
    states and outer values may be sequences and optionals (first-class there).
    """
    from onnx import helper

    from aioge.frontends.onnx_sequence import materialise

    if ctx.lookup is None:
        raise ctx.fail("has no enclosing values to read")
    states = [materialise(ctx, v) for v in ctx.inputs[2:]]
    if any(v is None for v in states):
        raise ctx.fail("every loop state must be given")
    free = sorted(_free_names(body))
    outer = [materialise(ctx, ctx.lookup(n)) for n in free]
    it, cond = body.input[0].name, body.input[1].name
    head = [
        helper.make_tensor_value_info(it, onnx.TensorProto.INT64, []),
        helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, []),
    ]
    n = len(states)
    program, sub = _program(ctx, body, head, [vi.name for vi in body.input[2:]], states, free, outer)  # type: ignore[arg-type]
    scan_dtypes = tuple(v.dtype for v in sub.outputs[1 + n :])
    trip, cond_in = ctx.input(0), ctx.input(1)
    return ctx.emit(
        "Loop",
        [trip, cond_in, *states, *outer],
        {"body": program, "num_states": n, "scan_dtypes": scan_dtypes},
        outputs=ctx.outputs,
    )


def _runtime_if(ctx: NodeContext, branches: Sequence[onnx.GraphProto]) -> Sequence[Any]:
    """If on a run-time condition whose branches cannot both run and be selected from: the If
    op over the two branches as programs, each reading every outer value either reads."""
    from aioge.frontends.onnx_sequence import materialise

    if ctx.lookup is None:
        raise ctx.fail("has no enclosing values to read")
    free = sorted(_free_names(branches[0]) | _free_names(branches[1]))
    outer = [materialise(ctx, ctx.lookup(n)) for n in free]
    then, then_graph = _program(ctx, branches[0], [], [], [], free, outer)
    other, else_graph = _program(ctx, branches[1], [], [], [], free, outer)
    types = []
    for a, b in zip(then_graph.outputs, else_graph.outputs):
        if a.desc.container != b.desc.container or a.dtype != b.dtype:
            raise ctx.fail(f"the branches give outputs of different types: {a.desc} and {b.desc}")
        types.append(type_of(a.desc))
    if len(types) != len(ctx.outputs) or len(then_graph.outputs) != len(else_graph.outputs):
        raise ctx.fail(
            f"the branches have {len(then_graph.outputs)} and {len(else_graph.outputs)} outputs, the node {len(ctx.outputs)}"
        )
    return ctx.emit(
        "If",
        [ctx.input(0), *outer],
        {"then_branch": then, "else_branch": other, "out_types": tuple(types)},
        outputs=ctx.outputs,
    )


def runtime_sequence_map(ctx: NodeContext, body: onnx.GraphProto, args: Sequence[Value | None]) -> Sequence[Any]:
    """SequenceMap over sequences whose length is known only at run time: the SequenceMap op
    over the body as a program (its inputs: one element of each sequence, or the tensor).

    Raises:
        GraphError: an absent input, or a body aioge cannot load.
    """
    from aioge.frontends.onnx_sequence import materialise

    if ctx.lookup is None or any(v is None for v in args):
        raise ctx.fail("needs every input and its enclosing values")
    free = sorted(_free_names(body))
    outer = [materialise(ctx, ctx.lookup(n)) for n in free]
    # The body sees one element of each sequence: a tensor of the element desc.
    head = [_tensor_info(vi.name, v.desc.element) for vi, v in zip(body.input, args) if v is not None]
    program, sub = _program(ctx, body, head, [], [], free, outer)
    return ctx.emit(
        "SequenceMap",
        [*args, *outer],
        {"body": program, "num_inputs": len(args), "out_dtypes": tuple(v.dtype for v in sub.outputs)},
        outputs=ctx.outputs,
    )


def _program(
    ctx: NodeContext,
    body: onnx.GraphProto,
    head: Sequence[onnx.ValueInfoProto],
    names: Sequence[str],
    bound: Sequence[Value],
    free: Sequence[str],
    outer: Sequence[Value | None],
) -> tuple[tuple[Any, ...], Any]:
    """``body`` as a program (``aioge.ops.control``) over its ``head`` inputs, then ``names``
    bound to values like ``bound``, then the outer values ``free`` it reads; and its graph.

    Raises:
        GraphError: an outer value that is absent, or a body aioge cannot load.
    """
    from onnx import helper

    from aioge.frontends.onnx import load_onnx

    if any(v is None for v in outer):
        raise ctx.fail(f"the body reads outer values that are absent: {[n for n, v in zip(free, outer) if v is None]}")
    g = onnx.GraphProto()
    g.CopyFrom(body)
    del g.input[:]
    g.input.extend(head)
    g.input.extend(_info(name, v) for name, v in zip(names, bound))
    g.input.extend(_info(name, v) for name, v in zip(free, outer))  # type: ignore[arg-type]
    opsets = [helper.make_opsetid("", ctx.opset)]
    model = helper.make_model(g, opset_imports=opsets)
    sub = load_onnx(model)
    constants = tuple((name, v.data) for name, v in sub.constants.items())
    nodes = tuple(
        (
            node.op_type,
            node.domain,
            tuple(sorted(node.attrs.items())),
            tuple("" if v is None else v.name for v in node.inputs),
            tuple(o.name for o in node.outputs),
            tuple(type_of(o.desc) for o in node.outputs),
        )
        for node in sub.topological_order()
    )
    return (tuple(v.name for v in sub.inputs), tuple(v.name for v in sub.outputs), constants, nodes), sub


def _info(name: str, v: Value) -> onnx.ValueInfoProto:
    """An ONNX value info for a subgraph input standing for ``v`` (a tensor, sequence or optional)."""
    from onnx import helper

    t = _tensor_info(name, v.desc).type
    if v.desc.container in ("sequence", "optional_sequence"):
        t = helper.make_sequence_type_proto(t)
    if v.desc.container.startswith("optional"):
        t = helper.make_optional_type_proto(t)
    return helper.make_value_info(name, t)


def _tensor_info(name: str, d: TensorDesc) -> onnx.ValueInfoProto:
    """An ONNX tensor value info of ``d``'s dtype and shape (its tensors', for a container)."""
    from onnx import helper

    from aioge.ir.desc import numpy_dtype

    shape = None if d.shape is None else [x if isinstance(x, int) else None for x in d.shape]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(numpy_dtype(d.dtype)), shape)


def _free_names(g: onnx.GraphProto) -> set[str]:
    """The names a subgraph (and the subgraphs inside it) reads without defining."""
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    used: set[str] = set()
    for node in g.node:
        used.update(x for x in node.input if x)
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                used |= _free_names(sub)
        defined.update(node.output)
    used.update(o.name for o in g.output)
    return used - defined


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


def _unroll(
    ctx: NodeContext, body: onnx.GraphProto, states: Sequence[Value | None], xs: Sequence[Value | None], plan: _Plan, tag: str
) -> tuple[list[Value], list[Value]]:
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
        collected.append(outs[len(carried) :])
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
