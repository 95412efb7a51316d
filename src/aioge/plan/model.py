"""CompiledModel: everything the runtime needs, and nothing it must recompute."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

from aioge.ir.graph import Graph, IOInfo
from aioge.keys import plan_versions
from aioge.plan.kernel import KernelDesc
from aioge.plan.memory import MemoryPlan
from aioge.plan.streams import StreamPlan

__all__ = ["CompileStats", "CompiledModel", "NodePlan"]


def _made_under() -> dict[str, str]:
    from aioge.kernels import native

    return plan_versions(native.tier())


@dataclass(slots=True)
class CompileStats:
    """What a compile did. Each node's kernel is counted once, by where it came from:
    ``kernels_compiled`` + ``kernel_cache_hits`` + ``kernel_shared_in_session`` +
    ``kernel_reuse_in_compile`` == the number of nodes."""

    kernels_compiled: int = 0  # compiled by this compile
    kernel_cache_hits: int = 0  # served by the kernel cache (disk, or a concurrent compile that reads it); 0 in disable/force
    kernel_shared_in_session: int = 0  # not reading the cache: compiled by a concurrent compile in the session
    kernel_reuse_in_compile: int = 0  # nodes with the same kernel key as an earlier node of this graph
    kernels_rechecked: int = 0  # cache hits whose close call between two kernels was re-timed (still hits)
    kernels_retuned: int = 0  # of those, the ones whose kernel changed
    graph_cache_hit: bool = False
    compile_seconds: float = 0.0
    passes_applied: list[str] = field(default_factory=list)
    nodes_before_passes: int = 0


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One node as the runtime sees it."""

    index: int
    name: str
    op_type: str
    engine: str
    stream: int
    kernel: KernelDesc


@dataclass(slots=True)
class CompiledModel:
    """A compiled graph: the optimised graph, per-node engine/stream/kernel, stream and memory plans."""

    graph: Graph  # specialised and optimised; nodes in execution order
    nodes: tuple[NodePlan, ...]
    streams: StreamPlan
    memory: MemoryPlan
    fingerprint: str  # of the source graph the user added
    signature: tuple[tuple[str, tuple[int, ...]], ...]  # the input shapes it is specialised for
    options: Mapping[str, str]
    # Sink mode: the stream ids each worker thread runs (``compiler.threads``), a partition of
    # the streams; () gives every stream its own thread.
    threads: tuple[tuple[int, ...], ...] = ()
    versions: Mapping[str, str] = field(default_factory=_made_under)  # with the kernels' ISA tier
    stats: CompileStats = field(default_factory=CompileStats)
    # GE's dynamic gears (``serving.gears``): the models of the other gears, compiled with this
    # one and stored in its .om and graph-cache entry; this model is the first gear. () without gears.
    gears: tuple[CompiledModel, ...] = ()

    def all_gears(self) -> tuple[CompiledModel, ...]:
        """This model and its other gears, in gear order."""
        return (self, *self.gears)

    @property
    def arena_bytes(self) -> int:
        return self.memory.arena_bytes

    def get_inputs(self) -> list[IOInfo]:
        """The inputs with the shapes this model is compiled for (onnxruntime's ``get_inputs``)."""
        return self.graph.get_inputs()

    def get_outputs(self) -> list[IOInfo]:
        """The outputs with their shapes and dtypes for the compiled input shapes."""
        return self.graph.get_outputs()

    async def save(self, path: str | os.PathLike[str], *, external: bool = False) -> str:
        """Write this model as an ``.om`` at ``path`` (``aioge.load_model`` or
        ``Session.load_model`` read it back); with ``external`` the constants go to files under
        ``weight/`` beside it. The file is a deployment artefact: its mode follows the umask
        (0644 under the usual 022), unlike the owner-only cache files. Returns the sha256 of
        the ``.om`` payload. The work runs in one worker thread.

        Raises:
            ModelFormatError: the model cannot be stored. OSError: the files cannot be written.
        """
        from aioge.plan.serialize import save_model

        return await save_model(path, self, external=external, mode=0o666)

    def node(self, name: str) -> NodePlan:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def precisions(self) -> list[str]:
        """The precision each node computes in, in plan order: the one a precision mode lowered
        it to (bf16, fp16: operands rounded, float32 accumulation), else its output's dtype."""
        by_name = {n.name: n for n in self.graph.nodes}
        out = []
        for plan in self.nodes:
            n = by_name.get(plan.name)
            out.append("" if n is None else str(n.attrs.get("precision") or (n.outputs[0].desc.dtype if n.outputs else "")))
        return out

    def summary(self) -> dict[str, Any]:
        """Counts per engine and stream, memory figures and compile statistics, as plain data."""
        per_engine: dict[str, int] = {}
        for n in self.nodes:
            per_engine[n.engine] = per_engine.get(n.engine, 0) + 1
        return {
            "graph": self.graph.name,
            "nodes": len(self.nodes),
            "nodes_per_engine": per_engine,
            "streams": [{"id": s.id, "engine": s.engine, "nodes": len(s.nodes)} for s in self.streams.streams],
            "events": len(self.streams.events),
            "threads": [list(t) for t in self.threads],
            "arena_bytes": self.memory.arena_bytes,
            "lower_bound_bytes": self.memory.lower_bound_bytes,
            "no_reuse_bytes": self.memory.no_reuse_bytes,
            "precision": {p: n for p, n in sorted(Counter(self.precisions()).items())},
            "stats": {
                "kernels_compiled": self.stats.kernels_compiled,
                "kernel_cache_hits": self.stats.kernel_cache_hits,
                "kernel_shared_in_session": self.stats.kernel_shared_in_session,
                "kernel_reuse_in_compile": self.stats.kernel_reuse_in_compile,
                "kernels_rechecked": self.stats.kernels_rechecked,
                "kernels_retuned": self.stats.kernels_retuned,
                "graph_cache_hit": self.stats.graph_cache_hit,
                "compile_seconds": round(self.stats.compile_seconds, 6),
                "passes_applied": list(self.stats.passes_applied),
            },
            "versions": dict(self.versions),
        }
