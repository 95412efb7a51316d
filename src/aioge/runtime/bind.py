"""Binding a compiled model for the runtime: env slots, arena views, each node's kernel bound
to its descs, and the layout every execution context of it shares.

``bind`` is a pure function of the model: it plans nothing (streams, events and the thread
grouping come from the compiler) and touches no arena.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import ValueKind
from aioge.kernels import native
from aioge.kernels.contract import bind_kernel
from aioge.ops.registry import get_schema
from aioge.plan.model import CompiledModel
from aioge.runtime.context import Layout, Step

__all__ = ["Binding", "bind"]

_SHARED = native.with_native(lambda ins, outs: outs, lambda ins, outs: [])


@dataclass(frozen=True, slots=True)
class Binding:
    """A model bound for the runtime: the shared layout, and the slots it binds by name."""

    layout: Layout
    inputs: list[tuple[str, int]]  # (feed name, slot)
    variables: list[tuple[str, int]]  # (variable name, slot)
    outputs: list[tuple[str, int, bool]]  # (name, slot, an intermediate: copied out of the arena)
    groups: list[tuple[int, ...]]  # stream ids per sink-mode thread


def bind(model: CompiledModel, *, threads: str = "auto", check_finite: bool = False) -> Binding:
    """Bind ``model``'s kernels and lay out its slots and views.

    ``threads`` (sink mode): ``"auto"`` runs the streams in the compiler's thread groups
    (``model.threads``), ``"streams"`` each in a thread of its own.
    """
    g = model.graph
    slot: dict[str, int] = {}
    for v in g.values():
        slot[v.name] = len(slot)
    inputs = [(v.name, slot[v.name]) for v in g.inputs]
    var_slots = [(name, slot[name]) for name in g.variables]
    outputs = [(v.name, slot[v.name], v.kind is ValueKind.INTERMEDIATE) for v in g.outputs]
    offsets = model.memory.offsets()
    views = []
    for name, (offset, _) in offsets.items():
        desc = g.value(name).desc
        views.append((slot[name], offset, tuple(int(d) for d in desc.shape), numpy_dtype(desc.dtype)))  # type: ignore[union-attr]
    waits: dict[int, list[int]] = {}
    records: dict[int, list[int]] = {}
    for e in model.streams.events:
        waits.setdefault(e.consumer, []).append(e.id)
        records.setdefault(e.producer, []).append(e.id)
    by_name = {n.name: n for n in g.nodes}
    shared = {v for v, _ in model.memory.views}  # view ops' outputs on their input's bytes: the step copies nothing
    steps = []
    unplanned: set[int] = set()
    fresh: dict[int, tuple[tuple[int, ...], np.dtype]] = {}
    for plan in model.nodes:
        node = by_name[plan.name]
        impl = get_schema(node.op_type, node.domain).impl(plan.kernel.impl)
        descs = ([v.desc if v is not None else None for v in node.inputs], [o.desc for o in node.outputs])
        run = _SHARED if {o.name for o in node.outputs} <= shared else bind_kernel(impl, node.attrs, plan.kernel.params, *descs)
        outs = tuple(slot[o.name] for o in node.outputs)
        planned = all(o.name in offsets for o in node.outputs)
        if not planned:
            unplanned.update(outs)
            for o in node.outputs:
                if o.name not in offsets and o.desc.is_tensor and o.desc.static:
                    fresh[slot[o.name]] = (tuple(int(d) for d in o.desc.shape), numpy_dtype(o.desc.dtype))  # type: ignore[union-attr]
        steps.append(
            Step(
                index=plan.index,
                name=plan.name,
                op_type=plan.op_type,
                engine=plan.engine,
                stream=plan.stream,
                run=run,
                inputs=tuple(slot[v.name] if v is not None else -1 for v in node.inputs),
                outputs=outs,
                planned=planned,
                waits=tuple(waits.get(plan.index, ())),
                records=tuple(records.get(plan.index, ())),
            )
        )
    sp = model.streams
    groups: list[tuple[int, ...]] = list(model.threads) if threads == "auto" and model.threads else [(s.id,) for s in sp.streams]
    thread_of = {s: k for k, group in enumerate(groups) for s in group}
    layout = Layout(
        graph=g.name,
        nslots=len(slot),
        arena_bytes=model.memory.arena_bytes,
        constants={slot[v.name]: v.data for v in g.constants.values()},  # type: ignore[misc]
        views=tuple(views),
        runtime=frozenset(unplanned | {s for _, s in inputs} | {s for _, s in var_slots}),
        steps=tuple(steps),
        streams=tuple(s.nodes for s in sp.streams),
        num_events=len(sp.events),
        poison=(),  # computed on first use (tests only)
        check_finite=check_finite,
        threads=tuple(tuple(sorted(i for s in group for i in sp.streams[s].nodes)) for group in groups),
        fresh=fresh,
        local_events=frozenset(
            e.id for e in sp.events if thread_of[sp.node_stream[e.producer]] == thread_of[sp.node_stream[e.consumer]]
        ),
    )
    return Binding(layout, inputs, var_slots, outputs, groups)
