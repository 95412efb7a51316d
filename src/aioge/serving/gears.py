"""GE's dynamic gears: the concrete shapes a graph is compiled for ahead of time, and the
choice of one for a run.

``ge.inputShape`` marks the varying dims with -1; ``ge.dynamicBatchSize`` ("1,2,4,8") fills
the batch dim (dim 0) of every such input with each size, ``ge.dynamicDims`` ("4;8;16" or
"1,64;2,32") fills every -1, in the order ``ge.inputShape`` lists them, with each gear's
values. Every gear is compiled when the graph is added and all of them travel in one
``CompiledModel`` (``CompiledModel.gears``), hence one ``.om`` and one graph-cache entry. A run
with batch gears pads its batch to the smallest gear that holds it and slices the outputs
back; with dims gears the feed must match a gear exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from aioge.errors import FeedError, ModelFormatError, OptionError
from aioge.ir.graph import Graph
from aioge.options import OPTIONS, CompileOptions
from aioge.plan.model import CompiledModel

__all__ = ["GEAR_KEYS", "GearSet", "batched_outputs", "gear_set", "gear_set_of_model", "gear_shapes", "pad_rows"]

Signature = tuple[tuple[str, tuple[int, ...]], ...]

GEAR_KEYS = ("ge.inputShape", "ge.dynamicBatchSize", "ge.dynamicDims")


@dataclass(frozen=True, slots=True)
class GearSet:
    """A graph's gears: one concrete input signature each, in the order given (batch gears by size)."""

    graph: str
    signatures: tuple[Signature, ...]
    batch: tuple[int, ...]  # the batch size of each gear (ge.dynamicBatchSize); () for dims gears
    batched_inputs: frozenset[str]  # inputs whose dim 0 is the batch (the -1 of batch gears)

    def describe(self) -> str:
        """The gears as the error messages show them."""
        if self.batch:
            return f"batch sizes {list(self.batch)}"
        return "; ".join(", ".join(f"{n}{list(s)}" for n, s in sig) for sig in self.signatures)

    def pick(self, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, int]:
        """``(gear index, rows)`` for feeds of these shapes: the smallest batch gear that holds
        the rows (rows = the batch; 0 for dims gears), or the dims gear that matches exactly.

        Raises:
            FeedError: no gear fits; the message names the gears.
        """
        if not self.batch:
            for i, sig in enumerate(self.signatures):
                if all(shapes[n] == s for n, s in sig):
                    return i, 0
            got = ", ".join(f"{n}{list(shapes[n])}" for n, _ in self.signatures[0])
            raise FeedError(f"feeds {got} fit none of the graph's dims gears: {self.describe()}", graph=self.graph)
        rows = {shapes[n][0] if shapes[n] else -1 for n in self.batched_inputs}
        if len(rows) != 1 or -1 in rows:
            got = ", ".join(f"{n}{list(shapes[n])}" for n in sorted(self.batched_inputs))
            raise FeedError(f"batched inputs must share their dim 0 (the batch); got {got}", graph=self.graph)
        (n,) = rows
        for i, (b, sig) in enumerate(zip(self.batch, self.signatures)):
            if b < n:
                continue
            for name, want in sig:
                have = shapes[name]
                if (have[1:], len(have)) != (want[1:], len(want)) if name in self.batched_inputs else have != want:
                    raise FeedError(
                        f"input {name!r} has shape {list(have)}; the graph's gears expect {list(want)} "
                        f"with dim 0 up to {max(self.batch)}",
                        graph=self.graph,
                        input=name,
                    )
            return i, n
        raise FeedError(f"a batch of {n} rows fits none of the graph's gears: {self.describe()}", graph=self.graph)


def gear_set(graph: Graph, options: CompileOptions) -> GearSet | None:
    """The gears ``options`` ask for on ``graph``, or None when it has none.

    Raises:
        OptionError: ``ge.inputShape`` names an unknown input or disagrees with its rank,
            or an input it leaves out has no static shape.
    """
    if not (options.dynamic_batch_size or options.dynamic_dims):
        return None
    pattern = dict(options.input_shape)
    raw = options.raw.get("ge.inputShape", "")
    names = [v.name for v in graph.inputs]
    unknown = sorted(set(pattern) - set(names))
    if unknown:
        raise OptionError("ge.inputShape", raw, f"names no input {unknown[0]!r} of graph {graph.name!r}; inputs are {names}")
    base: dict[str, tuple[int, ...]] = {}
    for v in graph.inputs:
        want = pattern.get(v.name)
        if want is None:
            if v.shape is None or not all(isinstance(d, int) for d in v.shape):
                raise OptionError(
                    "ge.inputShape", raw, f"gives no shape for input {v.name!r}, whose shape {v.shape} is not static"
                )
            base[v.name] = tuple(int(d) for d in v.shape)
        elif v.shape is not None and len(v.shape) != len(want):
            raise OptionError("ge.inputShape", raw, f"gives input {v.name!r} rank {len(want)}; the graph's is {len(v.shape)}")
        else:
            base[v.name] = want
    sigs: list[Signature] = []
    if options.dynamic_batch_size:
        batched = frozenset(n for n, s in pattern.items() if s and s[0] == -1)
        for b in options.dynamic_batch_size:
            sigs.append(tuple((n, (b, *s[1:]) if n in batched else s) for n, s in base.items()))
        return GearSet(graph.name, tuple(sigs), tuple(options.dynamic_batch_size), batched)
    for gear in options.dynamic_dims:
        # GE's rule: the values fill the -1s in ge.inputShape's order; the signature lists the graph's order
        values = iter(gear)
        filled = {n: tuple(next(values) if d == -1 else d for d in s) for n, s in pattern.items()}
        sigs.append(tuple((n, filled.get(n, s)) for n, s in base.items()))
    return GearSet(graph.name, tuple(sigs), (), frozenset())


def gear_shapes(model: CompiledModel) -> dict[str, tuple[int, ...]]:
    """Each input's and output's shape over a geared model's gears, -1 for a dim that differs
    between gears or is the batch of batch gears (what KServe metadata and ``aioge info`` show)."""
    gears = model.all_gears()
    found = gear_set_of_model(model)
    batched = set(found.batched_inputs) if found is not None and found.batch else set()
    if batched:
        batched |= batched_outputs(dict(zip(found.batch, gears))) if found is not None else set()
    out: dict[str, tuple[int, ...]] = {}
    for v in (*model.graph.inputs, *model.graph.outputs):
        shapes = [g.graph.value(v.name).desc.shape for g in gears]
        if any(s is None or len(s) != len(shapes[0] or ()) for s in shapes):
            continue
        out[v.name] = tuple(
            -1
            if (i == 0 and v.name in batched) or len({s[i] for s in shapes if s is not None}) > 1 or not isinstance(d, int)
            else d
            for i, d in enumerate(shapes[0] or ())
        )
    return out


def gear_set_of_model(model: CompiledModel) -> GearSet | None:
    """The gears a compiled model (from an .om) was made with, from the options stored in it.

    Raises:
        ModelFormatError: the stored gears are not the ones the options give (an .om of an
            aioge that filled ``ge.dynamicDims`` in the graph's input order: compile it again).
    """
    if not model.gears:
        return None
    stored = {k: model.options[k] for k in GEAR_KEYS if k in model.options}
    options = CompileOptions(
        input_shape=OPTIONS["ge.inputShape"].parse(stored.get("ge.inputShape", "")),
        dynamic_batch_size=OPTIONS["ge.dynamicBatchSize"].parse(stored.get("ge.dynamicBatchSize", "")),
        dynamic_dims=OPTIONS["ge.dynamicDims"].parse(stored.get("ge.dynamicDims", "")),
        raw=stored,
    )
    found = gear_set(model.graph, options)
    stored_sigs = [tuple((n, tuple(s)) for n, s in m.signature) for m in model.all_gears()]
    if found is None or list(found.signatures) != stored_sigs:
        raise ModelFormatError(
            f"its gears {stored_sigs} are not those of its options {stored} (ge.dynamicDims fills the -1s in "
            "ge.inputShape's order since this aioge); compile it again"
        )
    return found


def batched_outputs(models: Mapping[int, CompiledModel]) -> frozenset[str]:
    """The outputs whose dim 0 is the batch: it equals the batch size in the model of every size."""
    names = [v.name for v in next(iter(models.values())).graph.outputs]
    out = set()
    for name in names:
        if all(_dim0(m, name) == size for size, m in models.items()):
            out.add(name)
    return frozenset(out)


def _dim0(model: CompiledModel, name: str) -> int | None:
    shape = model.graph.value(name).desc.shape
    return shape[0] if shape and isinstance(shape[0], int) else None


def pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    """``x`` with its last row repeated up to ``rows`` rows: padding rows are real data, so a
    kernel sees no zeros it would turn into inf or NaN (log, division). An empty batch has
    no row to repeat: zeros pad it (every row of its outputs is dropped)."""
    if x.shape[0] == rows:
        return x
    if x.shape[0] == 0:
        return np.zeros((rows, *x.shape[1:]), x.dtype)
    return np.concatenate([x, np.repeat(x[-1:], rows - x.shape[0], axis=0)])
