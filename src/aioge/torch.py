"""PyTorch front end: a ``torch.compile`` backend and ``torch.export`` import (extra ``torch``).

Modelled on TorchAir, GE's PyTorch front end::

    backend = aioge.torch.backend(options={"ge.exec.exclude_engines": "AiVec"})
    model = torch.compile(module, backend=backend, dynamic=True)
    y = model(x)                                   # a torch tensor, computed by aioge

    graph = aioge.torch.from_module(module.eval(), (x,))   # an aioge.Graph, weights as constants
    outputs = await session.run(graph, {"x": x.numpy()})  # numpy arrays

The backend takes the FX graphs that TorchDynamo captures (one per graph break), lowers
each to ATen through AOTAutograd (with torch's core decompositions minus the ops converted
whole) and converts it with ``aioge.frontends.torch_fx``, in one ``Session`` that the backend
owns, so GE options (excluded engines, optimisation switch, kernel and graph caches) apply to
all graphs. Nodes with no converter (or that a converter refuses) split the graph with torch's
``CapabilityBasedPartitioner``: each partition of convertible nodes is an aioge graph, the
rest runs eagerly between them, with one ``EagerFallbackWarning`` naming the eager ops.
Weights are fed on every call on this path (PyTorch may update them between calls);
``from_module`` bakes them in as constants, a snapshot like ``torch.export``'s.
A call whose input layout ran before runs the built graph in the calling thread
(``Session.run_graph_here``), when no other run holds a CPU token; the first call of a layout,
and one that finds the tokens taken, goes through the session's loop thread.

A symbolic batch (dim 0 of the inputs symbolic, no other symbolic dim, no size fed or returned
as an int) pads to the next power of two when every op keeps the rows apart (``_row_mixer``),
so it builds once per power of two; with ``ge.dynamicBatchSize`` in the options ("1,2,4,8",
GE's batch gears) it is compiled once for every gear instead, and a batch beyond the largest
runs eagerly with an ``EagerFallbackWarning`` (as in GE, the rows must be independent). Other
graphs compile per shape.
"""

from __future__ import annotations

import itertools
import logging
import operator
import warnings
import weakref
from collections import OrderedDict
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import anyio.from_thread
import numpy as np


def _check_import_order() -> None:
    """Refuse to load torch's compiler after TensorFlow where that crashes the process.

    On CUDA builds torch._dynamo loads triton, whose LLVM clashes with the one TensorFlow
    has already loaded: a segmentation fault (torch 2.14.1 + triton with TensorFlow 2.21).
    Loaded the other way round, both work.
    """
    import importlib.util
    import sys

    if "tensorflow" in sys.modules and "triton" not in sys.modules and importlib.util.find_spec("triton") is not None:
        raise ImportError(
            "aioge.torch must be imported before tensorflow in one process: torch's compiler loads triton, "
            "whose LLVM crashes the process when TensorFlow's is already loaded"
        )


_check_import_order()

import torch  # noqa: E402
import torch.fx  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._functorch.aot_autograd import make_boxed_func  # noqa: E402

from aioge.errors import AiogeError, GraphError  # noqa: E402
from aioge.frontends.torch_fx import (  # noqa: E402
    ConvertedGraph,
    Converters,
    convert_fx,
    decompositions,
    is_supported,
    unsupported_nodes,
)
from aioge.ir.graph import Graph  # noqa: E402
from aioge.options import OPTIONS, check_options  # noqa: E402
from aioge.session import Session  # noqa: E402

__all__ = ["AiogeBackend", "EagerFallbackWarning", "backend", "call_async", "from_module"]

log = logging.getLogger(__name__)


class EagerFallbackWarning(UserWarning):
    """Warned when a captured graph runs eagerly in PyTorch because aioge cannot convert or compile it."""


def backend(
    options: Mapping[str, str] | None = None,
    *,
    frozen_parameters: bool = True,
    name: str = "torch",
    converters: Converters | None = None,
) -> AiogeBackend:
    """A ``torch.compile`` backend that runs captured graphs on aioge.

    ``options`` are GE session options (as for ``aioge.Session``) and two graph options applied
    to every captured graph: ``ge.dynamicBatchSize`` (gears) and ``ge.graph_key``: with
    ``ge.graph_compiler_cache_dir`` each graph is cached as ``<key>_<n>`` (``<name>_<n>``
    without a key), so that another process compiling the same module with the same options
    loads its graphs from the cache; the ATen traces of graphs captured with gradients off are
    stored there too (``trace_<sha256>.aiot``), so that process skips tracing. ``name`` prefixes the aioge graph names (``torch_0``,
    ``torch_1``, ... one per captured graph or partition).
    ``frozen_parameters`` (TorchAir's ``frozen_parameter``, on by default): graphs captured
    with gradients off bake the module's parameters and buffers in as constants, so aioge can
    fold them (batch norm into convolution) and need not take them on every call. A call
    whose parameters changed since (in place, or replaced: ``_version`` or ``data_ptr``)
    rebuilds the graph with the new values first. Graphs captured with gradients on, and all
    graphs with ``frozen_parameters=False``, take them as inputs on every call. ``converters`` map ATen ops to user converters (see ``AiogeBackend.register_converter``).

    Raises:
        OptionError: a bad option.
    """
    return AiogeBackend(options, frozen_parameters=frozen_parameters, name=name, converters=converters)


async def call_async(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``await aioge.torch.call_async(compiled, x)``: call a compiled module (or any function)
    in a worker thread, so that the event loop runs other tasks for the length of the call.

    A ``torch.compile``'d module called directly from ``async def`` blocks its loop while
    PyTorch and aioge run (its graphs run in the calling thread, or on the backend's own loop
    thread while the caller waits). The caller's grad mode (``torch.no_grad()``) applies to the call.
    """
    import anyio.to_thread

    grad = torch.is_grad_enabled()  # thread-local: the worker thread gets the caller's mode

    def call() -> Any:
        with torch.set_grad_enabled(grad):
            return fn(*args, **kwargs)

    return await anyio.to_thread.run_sync(call)


def from_module(
    module: torch.nn.Module,
    example_inputs: Sequence[Any],
    dynamic_shapes: Any = None,
    *,
    name: str | None = None,
    converters: Converters | None = None,
) -> Graph:
    """Export ``module`` with ``torch.export`` and convert it to an aioge Graph.

    ``example_inputs`` are the positional arguments of ``module.forward``; ``dynamic_shapes``
    is passed to ``torch.export.export`` (``torch.export.Dim`` dims become symbolic aioge
    dims named by PyTorch, e.g. ``s0``). Parameters and buffers become constants; graph
    inputs keep the names of ``forward``'s arguments; outputs are ``output_0``, ``output_1``...
    Put the module in eval mode first: training-mode batch norm and dropout are refused.

    Returns the graph; run it with ``Session.run`` (outputs are numpy arrays).

    Raises:
        GraphError: ``torch.export`` cannot trace the module, or an op cannot be expressed.
        UnsupportedOpError: ops aioge lacks, listed with their FX node names.
    """
    label = name or type(module).__name__
    try:
        exported = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        # torch's core table minus the ops aioge maps whole (linear, layer_norm, attention);
        # in-place and training-only forms go too.
        exported = exported.run_decompositions(decompositions(converters))
    except (RuntimeError, TypeError, ValueError, AssertionError) as exc:  # torch.export's errors derive from these
        raise GraphError(f"torch.export could not trace {type(module).__name__}: {exc}", graph=label) from None
    from torch.export.graph_signature import InputKind

    constants: dict[str, torch.Tensor] = {}
    input_names: dict[str, str] = {}
    for spec in exported.graph_signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            source = exported.state_dict if spec.target in exported.state_dict else exported.constants
            constants[spec.arg.name] = source[spec.target]
        elif spec.kind is InputKind.USER_INPUT:
            input_names[spec.arg.name] = spec.arg.name
        else:
            raise GraphError(f"input {spec.arg.name!r} of kind {spec.kind.name} is not supported", graph=label)
    converted = convert_fx(exported.graph_module, name=label, constants=constants, input_names=input_names, converters=converters)
    if any(n is None for n in converted.outputs):
        raise GraphError("the module returns values that are not tensors; from_module needs tensor outputs", graph=label)
    return converted.graph


class AiogeBackend:
    """The ``torch.compile`` backend object: one aioge Session, one aioge graph per captured graph.

    ``graphs`` lists the aioge graphs converted so far (in capture order, one per partition);
    ``fallbacks`` the names of those that run eagerly; ``partitioned`` the ops that ran
    eagerly between partitions, per captured graph that needed partitions. ``close()`` ends the session (also done when the
    backend is garbage-collected or at exit).
    """

    def __init__(
        self,
        options: Mapping[str, str] | None = None,
        *,
        frozen_parameters: bool = True,
        name: str = "torch",
        converters: Converters | None = None,
    ) -> None:
        self.name = name
        self.converters: dict[Any, Callable[..., Any]] = dict(converters or {})
        self.frozen_parameters = frozen_parameters
        self.graphs: list[Graph] = []
        self.fallbacks: list[str] = []
        self.partitioned: list[tuple[str, ...]] = []  # per partitioned graph: the ops run eagerly
        self._ids = itertools.count()
        options = dict(options or {})
        # A graph option: each captured graph gets it with the ge.inputShape of its own inputs.
        self._batch_gears = options.pop("ge.dynamicBatchSize", None)
        if self._batch_gears is not None:
            check_options({"ge.dynamicBatchSize": self._batch_gears}, "graph")
        # The graph cache: each captured graph (and partition) is cached as <key>_<n>, n in capture
        # order, so that a process compiling the same module the same way loads them.
        key = options.pop("ge.graph_key", None)
        if key is not None:
            check_options({"ge.graph_key": key}, "graph")
        self._graph_key = key or (name if options.get("ge.graph_compiler_cache_dir") else None)
        self._trace_dir = options.get("ge.graph_compiler_cache_dir") or None  # inference traces on disk too
        self._runner = _SessionThread(options)
        self._frozen: tuple[dict[int, torch.Tensor], int] = ({}, 0)
        self.traces = 0  # ATen traces run (AOTAutograd's or the inference trace)
        self.trace_hits = 0  # compiles that took a memoised inference trace instead

    def register_converter(self, op: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A decorator registering ``fn`` as this backend's converter for an ATen op
        (``torch.ops.aten.erfinv`` for every overload, or ``torch.ops.aten.erfinv.default``)::

            @be.register_converter(torch.ops.aten.erfinv)
            def erfinv(x): ...   # aioge values in (Python values for non-tensor arguments), aioge values out

        It overrides the built-in table and keeps the op whole (out of the decomposition
        table) in graphs captured from then on.
        """
        if not isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            raise GraphError(f"register_converter takes an ATen op such as torch.ops.aten.cumsum, not {op!r}")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.converters[op] = fn
            return fn

        return register

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        frozen = _parameter_inputs(gm, example_inputs) if self.frozen_parameters and not torch.is_grad_enabled() else []
        # AOTAutograd traces with fake tensors, so the real weights are handed to _compile
        # aside; its inference graph takes the same inputs in the same order.
        self._frozen = ({i: example_inputs[i] for i in frozen}, len(example_inputs))
        try:
            if not torch.is_grad_enabled():
                traced = self._inference_trace(gm, example_inputs)
                if traced is not None:
                    boxed = self._compile(traced, example_inputs)
                    return lambda *args: boxed(list(args))
            self.traces += 1
            aot = aot_autograd(
                fw_compiler=self._compile,
                inference_compiler=self._compile,
                bw_compiler=_eager,
                decompositions=decompositions(self.converters),
            )
            return aot(gm, example_inputs)
        finally:
            self._frozen = ({}, 0)

    def _inference_trace(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.fx.GraphModule | None:
        """The ATen graph of a graph captured with gradients off, by one ``make_fx`` trace with
        the decomposition table (AOTAutograd's inference graph, without its metadata trace and
        wrappers: about a third of its time), memoised in the process by the captured graph's
        code and its inputs' metadata (``_trace_key``): a second compile of the same module
        skips the trace; with a graph cache dir, a second process too (``_load_trace``). None when that graph cannot stand for AOTAutograd's: symbolic shapes,
        a captured graph holding tensors or modules of its own (not in the key), an in-place op,
        or an output that is an input or a view of one (AOTAutograd returns those as aliases)."""
        key = _trace_key(gm, example_inputs, self.converters)
        if key is None:
            return None
        traced = _TRACES.get(key)
        if traced is None and self._trace_dir:  # another process's trace
            traced = _load_trace(self._trace_dir, key)
        if traced is not None:
            _TRACES[key] = traced
            _TRACES.move_to_end(key)
            self.trace_hits += 1
            return traced
        from torch._dispatch.python import enable_python_dispatcher
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx

        self.traces += 1
        try:
            # fake tensors of a mode of its own: Dynamo's (ambient) would give them symbols of its shape env
            with FakeTensorMode() as mode, enable_python_dispatcher():
                fakes = [mode.from_tensor(x) for x in example_inputs]
                functional = torch.func.functionalize(gm, remove="mutations")  # in-place ops (ReLU(inplace)) out of place
                traced = make_fx(functional, decomposition_table=decompositions(self.converters))(*fakes)
        except Exception as exc:  # noqa: BLE001 - whatever make_fx cannot trace, AOTAutograd is asked next
            log.debug("aioge.torch: the inference trace failed (%s); AOTAutograd traces", exc)
            return None
        traced.graph.eliminate_dead_code()  # as AOTAutograd's graph: unused results (layer norm's statistics) go
        traced.recompile()
        if not _functional(traced, gm.graph.output_node().args[0]):
            return None
        _TRACES[key] = traced
        if self._trace_dir:
            _save_trace(self._trace_dir, key, traced)
        while len(_TRACES) > _TRACE_MEMO:
            _TRACES.popitem(last=False)
        return traced

    def close(self) -> None:
        """Close the backend's session; compiled functions from it must not be called afterwards."""
        self._runner.close()

    def _compile(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        constants = self._constants(gm)
        refused: dict[str, str] = {}  # node -> why: converters that failed on it
        names = {n.name for n in gm.graph.nodes}
        while True:
            try:
                if not refused and not unsupported_nodes(gm, self.converters):
                    return make_boxed_func(self._compile_graph(gm, constants))
                return make_boxed_func(self._compile_partitions(gm, constants, refused))
            except GraphError as exc:
                if exc.node is None or exc.node not in names or exc.node in refused:
                    return make_boxed_func(self._fallback(f"{self.name}_{next(self._ids)}", gm, exc))
                refused[exc.node] = str(exc)  # run that node eagerly and partition again

    def _compile_partitions(
        self, gm: torch.fx.GraphModule, constants: Mapping[str, torch.Tensor], refused: Mapping[str, str]
    ) -> torch.fx.GraphModule:
        """Split ``gm`` into partitions of convertible nodes (torch's capability-based
        partitioner); each becomes an aioge graph, the rest runs eagerly between them."""
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupportBase

        converters = self.converters

        class Support(OperatorSupportBase):
            def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
                return node.name not in refused and is_supported(node, converters)

        graph = torch.fx.Graph()
        outputs = graph.graph_copy(gm.graph, {})
        graph.output(outputs)
        copy = torch.fx.GraphModule(gm, graph)  # the partitioner fuses in place: keep gm whole
        partitioner = CapabilityBasedPartitioner(copy, Support(), allows_single_node_partition=True)
        fused = partitioner.fuse_partitions(partitioner.propose_partitions())
        eager = [n for n in fused.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]
        for node in fused.graph.nodes:
            if node.op == "call_module":
                sub = getattr(fused, node.target)
                single = isinstance(sub.graph.output_node().args[0], torch.fx.Node)
                setattr(fused, node.target, _Partition(self._compile_graph(sub, constants), single))
        ops = sorted({_op_label(n) for n in eager})
        warnings.warn(
            EagerFallbackWarning(
                f"aioge.torch: {len(eager)} node(s) run eagerly in PyTorch between aioge partitions: {', '.join(ops)}"
                + "".join(f"; {n}: {why}" for n, why in refused.items())
            ),
            stacklevel=4,
        )
        self.partitioned.append(tuple(ops))
        return fused

    def _compile_graph(self, gm: torch.fx.GraphModule, constants: Mapping[str, torch.Tensor]) -> _CompiledGraph:
        graph_id = next(self._ids)
        label = f"{self.name}_{graph_id}"
        converted = convert_fx(gm, name=label, constants=constants, converters=self.converters)
        gears = self._add(graph_id, converted)
        self.graphs.append(converted.graph)
        log.debug("aioge.torch: %s has %d nodes%s", label, len(converted.graph.nodes), " (batch gears)" if gears else "")
        compiled = _CompiledGraph(self, graph_id, converted, gm)
        compiled.stamps = _stamps(converted, gm, constants)
        if gears:
            compiled.max_batch = max(OPTIONS["ge.dynamicBatchSize"].parse(gears["ge.dynamicBatchSize"]))
            compiled.batched = frozenset(n.split(":", 1)[0] for n in gears["ge.inputShape"].split(";"))
        elif self._batch_gears is None:
            compiled.buckets = _batch_buckets(gm, converted)
            if compiled.buckets is None and any(isinstance(d, str) for v in converted.graph.inputs for d in v.shape or ()):
                compiled.pad(constants)
        return compiled

    def _add(self, graph_id: int, converted: ConvertedGraph) -> dict[str, str]:
        """Add a converted graph to the session with its graph options; returns its gears' options."""
        gears = self._gear_options(converted)
        graph_options = {**gears, "ge.graph_key": f"{self._graph_key}_{graph_id}"} if self._graph_key else gears
        self._runner.call(self._runner.session.add_graph, graph_id, converted.graph, graph_options)
        return gears

    def _gear_options(self, converted: ConvertedGraph) -> dict[str, str]:
        """The graph options of batch gears for this graph: ``ge.inputShape`` with -1 for dim 0 of
        the inputs whose batch is dynamic, or none (compiled per shape) when the gears could not
        hold it: no gears asked for, no symbolic batch, other symbolic dims, or a size that
        PyTorch feeds or takes back as an int (it would see the padded batch)."""
        batched = _batched_inputs(converted) if self._batch_gears is not None else {}
        if len({shape[0] for shape in batched.values()}) != 1:
            symbolic = any(isinstance(d, str) for v in converted.graph.inputs for d in v.shape or ())
            if self._batch_gears is not None and symbolic:
                warnings.warn(
                    f"aioge.torch: ge.dynamicBatchSize is not applied to graph {converted.graph.name}: gears need one "
                    "symbolic dim, dim 0 of its inputs, and no size passed as an int; it compiles per shape",
                    UserWarning,
                    stacklevel=2,
                )
            return {}
        pattern = ";".join(f"{n}:{','.join(['-1', *map(str, s[1:])])}" for n, s in batched.items())
        return {"ge.inputShape": pattern, "ge.dynamicBatchSize": str(self._batch_gears)}

    def _constants(self, gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
        frozen, count = self._frozen
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if not frozen or len(placeholders) != count:
            return {}  # AOTAutograd added or merged inputs: keep them all as inputs, which is always right
        constants = {}
        for i, tensor in frozen.items():
            val = placeholders[i].meta.get("val")
            if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(tensor.shape) or val.dtype != tensor.dtype:
                return {}
            constants[placeholders[i].name] = tensor
        return constants

    def _fallback(self, label: str, gm: torch.fx.GraphModule, exc: AiogeError) -> Callable[..., Any]:
        warnings.warn(EagerFallbackWarning(f"aioge.torch: graph {label} runs eagerly in PyTorch: {exc}"), stacklevel=2)
        self.fallbacks.append(label)
        return gm.forward


class _CompiledGraph:
    """Calls one aioge graph with PyTorch's arguments; returns torch tensors."""

    def __init__(self, owner: AiogeBackend, graph_id: int, converted: ConvertedGraph, gm: torch.fx.GraphModule) -> None:
        self.owner = owner
        self.graph_id = graph_id
        self.converted = converted
        self.gm = gm
        self.eager: Callable[..., Any] | None = None
        self.max_batch = 0  # with batch gears: the largest, and the inputs they batch
        self.batched: frozenset[str] = frozenset()
        self.buckets: _Buckets | None = None  # a symbolic batch padded to powers of two
        self._stamps: list[tuple[int, str, tuple[int, int]]] = []
        self._stamped: list[int] = []
        self._stamp_values: list[tuple[int, int]] = []
        self.padded = False  # symbolic dims fed padded (convert_fx(padded=True))

    @property
    def stamps(self) -> list[tuple[int, str, tuple[int, int]]]:
        """Per frozen weight: its argument index, placeholder and stamp when the graph was built."""
        return self._stamps

    @stamps.setter
    def stamps(self, stamps: list[tuple[int, str, tuple[int, int]]]) -> None:
        self._stamps = stamps
        self._stamped, self._stamp_values = [i for i, _, _ in stamps], [st for _, _, st in stamps]

    def pad(self, constants: Mapping[str, torch.Tensor]) -> None:
        """Replace the graph by its padded form (``convert_fx(padded=True)``): symbolic dims are
        fed padded to the next power of two and sliced back inside, so that one build serves
        every size up to it; kept per shape when that form cannot be converted."""
        try:
            self._replace(constants, padded=True)
        except GraphError as exc:
            log.debug("aioge.torch: %s compiles per shape: %s", self.converted.graph.name, exc)

    def _replace(self, constants: Mapping[str, torch.Tensor], *, padded: bool) -> None:
        owner = self.owner
        graph_id = next(owner._ids)
        name = f"{owner.name}_{graph_id}"
        converted = convert_fx(self.gm, name=name, constants=constants, converters=owner.converters, padded=padded)
        owner._add(graph_id, converted)
        owner._runner.call(owner._runner.session.remove_graph, self.graph_id)
        self.graph_id, self.converted, self.padded = graph_id, converted, padded
        self.stamps = _stamps(converted, self.gm, constants)

    def _refresh(self, args: Sequence[Any]) -> None:
        """Rebuild the graph with the frozen weights' current values when one changed since."""
        if [(a.data_ptr(), a._version) for a in map(args.__getitem__, self._stamped)] == self._stamp_values:
            return
        old = self.converted.graph.name
        self._replace({name: args[i] for i, name, _ in self.stamps}, padded=self.padded)
        log.info("aioge.torch: %s rebuilt as %s: its frozen parameters changed", old, self.converted.graph.name)

    def __call__(self, *args: Any) -> list[Any]:
        if self.eager is not None:
            return list(self.eager(*args))
        if self.stamps:
            self._refresh(args)
        if self.max_batch:
            rows = max((args[s.index].shape[0] for s in self.converted.inputs if s.name in self.batched), default=0)
            if rows > self.max_batch:  # this call only: a later one may fit the gears again
                warnings.warn(
                    EagerFallbackWarning(
                        f"aioge.torch: graph {self.converted.graph.name} runs eagerly in PyTorch for a batch of {rows}: "
                        f"beyond its gears (ge.dynamicBatchSize={self.owner._batch_gears})"
                    ),
                    stacklevel=2,
                )
                return list(self.gm.forward(*args))
        feeds: dict[str, np.ndarray] = {}
        device = None
        buckets, rows = self.buckets, 0
        for slot in self.converted.inputs:
            arg = args[slot.index]
            if slot.kind == "tensor":
                device = device or arg.device
                feeds[slot.name] = arg.detach().cpu().numpy()
            elif slot.kind == "symint":
                feeds[slot.name] = np.array([int(arg)], np.int64)
            elif slot.kind == "size":
                feeds[slot.name] = np.array([arg.shape[slot.axis]], np.int64)
        if self.padded:  # symbolic dims padded to the next power of two
            for v in self.converted.graph.inputs:
                if v.shape and any(isinstance(d, str) for d in v.shape):
                    a = feeds[v.name]
                    width = [
                        (0, (1 << max(n - 1, 0).bit_length()) - n if isinstance(d, str) else 0) for d, n in zip(v.shape, a.shape)
                    ]
                    feeds[v.name] = np.pad(a, width) if any(w for _, w in width) else a
        if buckets is not None and len({feeds[n].shape[0] for n in buckets.inputs}) > 1:
            buckets = None  # the batched inputs disagree: no padding, this shape compiles as it is
        if buckets is not None:
            rows = feeds[next(iter(buckets.inputs))].shape[0]
            gear = 1 << max(rows - 1, 0).bit_length()
            for name in buckets.inputs:  # repeat the last row: padding rows stay ordinary data
                a = feeds[name]
                feeds[name] = np.concatenate([a, np.repeat(a[-1:], gear - rows, axis=0)]) if gear > rows else a
        runner = self.owner._runner
        try:
            # A layout run before goes in this thread (no hop to the session's loop and back:
            # 0.1-1 ms a call, the most of a small model's); the first, or one that cannot, hops.
            outputs = runner.session.run_graph_here(self.graph_id, feeds)
            if outputs is None:
                outputs = runner.call(runner.session.run_graph, self.graph_id, feeds)
        except (GraphError, AiogeError) as exc:
            if not _is_compile_failure(exc):
                raise
            if self.padded:  # the padded graph did not compile: per shape, then
                log.info("aioge.torch: %s compiles per shape: the padded form failed: %s", self.converted.graph.name, exc)
                self._replace({name: args[i] for i, name, _ in self.stamps}, padded=False)
                return self(*args)
            self.eager = self.owner._fallback(self.converted.graph.name, self.gm, exc)
            return list(self.eager(*args))
        result: list[Any] = []
        for i, (out_name, literal, symint) in enumerate(
            zip(self.converted.outputs, self.converted.literals, self.converted.symints)
        ):
            if out_name is None:
                result.append(literal)
            elif symint:
                result.append(int(outputs[out_name].reshape(-1)[0]))
            else:
                array = outputs[out_name]  # np.ascontiguousarray would make a 0-d array 1-d
                if buckets is not None and buckets.rows[i] is not None:
                    array = array[: int(buckets.rows[i].subs({s: rows for s in buckets.symbols}))]
                t = torch.from_numpy(array if array.flags.c_contiguous else np.ascontiguousarray(array).reshape(array.shape))
                result.append(t if device is None or device.type == "cpu" else t.to(device))
        return result


@dataclass(frozen=True)
class _Buckets:
    """A graph whose symbolic batch pads to the next power of two, so that it compiles once
    per power of two rather than once per batch size: the inputs padded (dim 0 is the batch)
    and, per output, the expression of its dim 0 in the batch (None: not batched)."""

    symbols: frozenset[Any]  # the sympy symbols of the batch (one per input, when TorchDynamo gives them apart)
    inputs: frozenset[str]
    rows: tuple[Any, ...]


def _batched_inputs(converted: ConvertedGraph) -> dict[str, tuple[Any, ...]]:
    """The inputs whose dim 0 is symbolic (the batch), or none when the graph has other
    symbolic dims or takes or gives back sizes as ints (they would see a padded batch)."""
    if any(s.kind == "symint" for s in converted.inputs) or any(converted.symints):
        return {}
    batched: dict[str, tuple[Any, ...]] = {}
    for v in converted.graph.inputs:
        shape = v.shape
        if shape is None or any(isinstance(d, str) for d in shape[1:]):
            return {}  # another dim varies: padding fills dim 0 only
        if shape and isinstance(shape[0], str):
            batched[v.name] = shape
    return batched


def _batch_buckets(gm: torch.fx.GraphModule, converted: ConvertedGraph) -> _Buckets | None:
    """Power-of-two buckets for a graph whose rows are independent along its symbolic batch
    (checked op by op: see ``_row_mixer``), else None (compiled per shape)."""
    batched = _batched_inputs(converted)
    names = {shape[0] for shape in batched.values()}
    placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    # TorchDynamo may give each input's batch its own symbol: all are the batch (equal at run time)
    dims0: list[Any] = [v.shape[0] for v in placeholders if isinstance(v, torch.Tensor) and v.dim()]
    symbols = frozenset(d.node.expr for d in dims0 if isinstance(d, torch.SymInt) and str(d) in names)
    if not batched or len(symbols) != len(names):
        return None
    mixer = _row_mixer(gm, symbols)
    if mixer is not None:
        log.debug("aioge.torch: %s compiles per batch size: node %s mixes rows of the batch", converted.graph.name, mixer)
        return None
    out_vals = [x.meta.get("val") if isinstance(x, torch.fx.Node) else None for x in _flat(gm.graph.output_node().args[0])]
    rows: list[Any] = []
    for v in out_vals:
        dim0 = v.shape[0] if isinstance(v, torch.Tensor) and v.dim() else None
        expr = dim0.node.expr if isinstance(dim0, torch.SymInt) else None
        rows.append(expr if expr is not None and expr.free_symbols & symbols else None)
    return _Buckets(symbols, frozenset(batched), tuple(rows))


def _flat(x: Any) -> list[Any]:
    return [y for item in x for y in _flat(item)] if isinstance(x, (list, tuple)) else [x]


# Ops that mix rows along the dim their argument names (position, default when absent; None:
# absent means every dim, which the output check catches).
_DIM_ARGS: dict[str, tuple[int, int | None]] = {
    **dict.fromkeys(["_softmax", "softmax", "_log_softmax", "log_softmax", "cumsum", "select", "index_select"], (1, None)),
    **dict.fromkeys(["gather", "argmax", "argmin", "sum", "mean", "prod", "amax", "amin", "any", "all"], (1, None)),
    **dict.fromkeys(["max", "min", "var", "std", "var_mean", "std_mean"], (1, None)),
    **dict.fromkeys(["cat", "stack", "slice"], (1, 0)),
    **dict.fromkeys(["split", "split_with_sizes"], (2, 0)),
    "topk": (2, -1),
    "roll": (2, None),
}
# Ops whose second (matrix) operand, when batched, is contracted over the batch.
_MATRIX_ARGS = {"mm": 1, "addmm": 2, "linear": 1}


def _row_mixer(gm: torch.fx.GraphModule, symbol: frozenset[Any]) -> str | None:
    """The first node through which rows of the batch can reach one another (None: row i of
    every output depends on row i of the batched inputs only, so padding rows change nothing). Conservative: every tensor keeps the batch in dim 0 alone
    (no transpose moves it), no op reduces, sorts, slices, concatenates or contracts along it,
    and no tensor that depends on the batch loses it (a reduction over it)."""

    def batched(n: Any) -> bool:
        v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
        vals = _flat(v)
        return any(isinstance(t, torch.Tensor) and any(_has(d, symbol) for d in t.shape) for t in vals)

    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        outs = [t for t in _flat(node.meta.get("val")) if isinstance(t, torch.Tensor)]
        if any(_has(d, symbol) for t in outs for d in t.shape[1:]):
            return node.name  # the batch moved away from dim 0
        ins = [a for a in _flat(list(node.args) + list(node.kwargs.values())) if isinstance(a, torch.fx.Node)]
        if outs and any(batched(a) for a in ins) and not all(t.dim() and _has(t.shape[0], symbol) for t in outs):
            return node.name  # reduced over the batch, or rows picked from it
        name = node.target.overloadpacket.__name__
        first = node.args[0] if node.args else None
        first = first[0] if isinstance(first, (list, tuple)) and first else first
        if name in _DIM_ARGS and batched(first):
            pos, default = _DIM_ARGS[name]
            dims = node.args[pos] if len(node.args) > pos else node.kwargs.get("dim", default)
            if isinstance(dims, torch.fx.Node):
                continue  # max.other, min.other: elementwise
            rank = first.meta["val"].dim()  # type: ignore[union-attr]
            if dims is None or any(int(d) % max(rank, 1) == 0 for d in _flat(dims)):
                if name == "slice" and _whole(*node.args[2:]):
                    continue  # x[:, i] slices all of dim 0 first
                return node.name
        if name in _MATRIX_ARGS and batched(node.args[_MATRIX_ARGS[name]]):
            return node.name
        if name in ("index", "_unsafe_index") and batched(first) and node.args[1] and not _row_iota(node.args[1][0], symbol):
            return node.name
        if name == "repeat" and int(node.args[1][0]) != 1 or name == "constant_pad_nd" and batched(first):
            return node.name  # tiles the batch, or pads it
    return None


def _row_iota(node: Any, symbols: frozenset[Any]) -> bool:
    """Whether ``node`` is None or ``arange(batch)`` reshaped: indexing dim 0 with it picks row i for row i
    (transformers' masks index ``mask[arange(batch)[:, None, None, None], kv]``)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        name = node.target.overloadpacket.__name__
        if name == "arange":
            ends = [a for a in node.args if not isinstance(a, int) or a != 0]
            end = ends[0].meta.get("val") if len(ends) == 1 and isinstance(ends[0], torch.fx.Node) else None
            return len(ends) == 1 and _has(end, symbols)
        if name == "slice" and not _whole(*node.args[2:]):
            return False
        if name not in ("unsqueeze", "view", "reshape", "_unsafe_view", "expand", "clone", "_to_copy", "alias", "slice"):
            return False
        node = node.args[0]
    return node is None


def _whole(start: Any = None, end: Any = None, step: Any = 1) -> bool:
    return start in (None, 0) and (end is None or isinstance(end, int) and end >= 2**62) and step == 1


def _has(d: Any, symbols: frozenset[Any]) -> bool:
    return isinstance(d, torch.SymInt) and bool(symbols & d.node.expr.free_symbols)


def _stamp(t: torch.Tensor) -> tuple[int, int]:
    return t.data_ptr(), t._version


def _stamps(
    converted: ConvertedGraph, gm: torch.fx.GraphModule, constants: Mapping[str, torch.Tensor]
) -> list[tuple[int, str, tuple[int, int]]]:
    """Per frozen weight of the graph: its argument index, placeholder and current stamp."""
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return [
        (s.index, placeholders[s.index], _stamp(constants[placeholders[s.index]]))
        for s in converted.inputs
        if s.kind == "constant"
    ]


class _Partition(torch.nn.Module):
    """A fused partition of a split graph, run by aioge: the parent graph calls it as a submodule."""

    def __init__(self, compiled: _CompiledGraph, single: bool) -> None:
        super().__init__()
        self.compiled = compiled
        self.single = single

    def forward(self, *args: Any) -> Any:
        out = self.compiled(*args)
        return out[0] if self.single else tuple(out)


def _op_label(node: torch.fx.Node) -> str:
    return node.target.name()  # type: ignore[union-attr]


def _parameter_inputs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> list[int]:
    """Indices of the graph inputs that are a module's parameters or buffers (TorchDynamo passes them as inputs)."""
    found = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        grapharg = node.meta.get("grapharg")
        source = grapharg.source.name if grapharg is not None and grapharg.source is not None else ""
        source = source() if callable(source) else source
        if isinstance(value, torch.Tensor) and (isinstance(value, torch.nn.Parameter) or "._buffers[" in source):
            found.append(i)
    return found


def _is_compile_failure(exc: AiogeError) -> bool:
    from aioge.errors import CompileError, FeedError

    return isinstance(exc, (CompileError, GraphError)) and not isinstance(exc, FeedError)


# The inference traces of this process by _trace_key, least recently used first.
_TRACES: OrderedDict[tuple[Any, ...], torch.fx.GraphModule] = OrderedDict()
_TRACE_MEMO = 64
# ATen ops that return a view of an input (an output reached through them from a placeholder aliases it).
_VIEWS = frozenset(
    "view _unsafe_view reshape expand permute transpose t slice select squeeze unsqueeze alias detach as_strided".split()
)


def _trace_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], converters: Converters) -> tuple[Any, ...] | None:
    """What the ATen graph of ``gm`` depends on: its code (the ops and their arguments), every
    input's type, shape, strides, dtype, device and whether it requires grad, and the backend's
    converters (the decomposition table leaves their ops whole). Parameters are inputs of the
    captured graph, so their values are not in it: frozen ones are baked in after the trace,
    from the call's own tensors. None when the graph holds state the code only names (tensor
    constants, submodules) or an input is not a tensor of static shape."""
    if any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        return None
    metas = []
    for x in example_inputs:
        if type(x) not in (torch.Tensor, torch.nn.Parameter) or not all(type(d) is int for d in (*x.shape, *x.stride())):
            return None
        metas.append((type(x), tuple(x.shape), x.stride(), x.dtype, x.device, x.requires_grad))
    return gm.code, tuple(metas), tuple(sorted(map(str, converters)))


# -- inference traces on disk: the graph cache dir's trace_<sha256>.aiot, msgpack in a plan.io envelope

_TRACE_KIND = "aioge-torch-trace"
_ENUMS = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}


def _trace_path(directory: str, key: tuple[Any, ...]) -> str:
    import hashlib
    import os

    from aioge.frontends.torch_fx import _ATEN

    # what the trace decomposed: torch's table (its version) less the ops aioge converts (_ATEN's
    # names) and the user's (key[2]); named without building the table, which a warm compile skips
    text = repr((_TRACE_KIND, torch.__version__, sorted(_ATEN), key[0], [tuple(map(str, m)) for m in key[1]], key[2]))
    return os.path.join(directory, f"trace_{hashlib.sha256(text.encode()).hexdigest()}.aiot")


def _encode(x: Any) -> Any:
    """An FX argument or traced value as msgpack data; TypeError for what a trace file does not hold."""
    if x is None or type(x) in (bool, int, float, str):
        return x
    if isinstance(x, torch.fx.Node):
        return {"node": x.name}
    if isinstance(x, (list, tuple)):
        return {"list" if isinstance(x, list) else "tuple": [_encode(y) for y in x]}
    if isinstance(x, torch.Tensor):
        return {"tensor": [list(x.shape), list(x.stride()), str(x.dtype).removeprefix("torch.")]}
    if isinstance(x, torch.device):
        return {"device": str(x)}
    for kind, cls in _ENUMS.items():
        if isinstance(x, cls):
            return {kind: str(x).removeprefix("torch.")}
    raise TypeError(f"a trace file holds no {type(x).__name__}")


def _decode(x: Any, env: Mapping[str, torch.fx.Node]) -> Any:
    if not isinstance(x, dict):
        return x
    ((kind, v),) = x.items()
    if kind in ("list", "tuple"):
        items = [_decode(y, env) for y in v]
        return items if kind == "list" else tuple(items)
    if kind == "node":
        return env[v]
    if kind == "tensor":  # shape, strides and dtype stand for the fake tensor: what convert_fx reads
        return torch.empty_strided(v[0], v[1], dtype=_enum(torch.dtype, v[2]), device="meta")
    return torch.device(v) if kind == "device" else _enum(_ENUMS[kind], v)


def _enum(cls: type, name: str) -> Any:
    value = getattr(torch, name, None)
    if not isinstance(value, cls):
        raise ValueError(f"{name!r} is not a torch {cls.__name__}")
    return value


def _save_trace(directory: str, key: tuple[Any, ...], traced: torch.fx.GraphModule) -> None:
    """Store the trace (placeholders, ATen calls and getitems, the output) for other processes; best effort."""
    from aioge.plan import io

    try:
        nodes = []
        for n in traced.graph.nodes:
            if n.op == "call_function":
                target = "getitem" if n.target is operator.getitem else n.target
                if not isinstance(target, (str, torch._ops.OpOverload)):
                    return  # a Python function traced in: not data
                target = str(target)
            elif n.op in ("placeholder", "output"):
                target = n.target
            elif n.op == "get_attr" and isinstance(value := getattr(traced, n.target), torch.Tensor):
                target = [n.target, value.detach().cpu().numpy()]  # a constant made in the trace (a mask's -inf)
            else:
                return
            kwargs = [[k, _encode(v)] for k, v in n.kwargs.items()]
            nodes.append([n.op, n.name, target, _encode(n.args), kwargs, _encode(n.meta.get("val"))])
        io.write_atomic_sync(_trace_path(directory, key), io.make_envelope(_TRACE_KIND, io.pack(nodes)))
    except (TypeError, OSError) as exc:
        log.debug("aioge.torch: the inference trace is not stored: %s", exc)


def _load_trace(directory: str, key: tuple[Any, ...]) -> torch.fx.GraphModule | None:
    """The trace another process stored for ``key``, or None: absent, untrusted, corrupt or stale files are misses."""
    from aioge.plan import io

    path = _trace_path(directory, key)
    try:
        nodes = io.unpack(io.open_envelope(io.read_trusted_sync(path, max_bytes=64 << 20), _TRACE_KIND, path=path)[1])
        graph, root, env = torch.fx.Graph(), torch.nn.Module(), dict[str, torch.fx.Node]()
        for op, name, target, args, kwargs, val in nodes:
            if op not in ("placeholder", "get_attr", "call_function", "output"):  # what make_fx writes
                raise ValueError(f"node {name!r} is a {op!r}, which a trace does not hold")
            if op == "get_attr":
                if not isinstance(target[0], str) or not target[0].isidentifier():
                    raise ValueError(f"bad constant name {target[0]!r}")
                setattr(root, target[0], torch.from_numpy(np.array(target[1])))
                target = target[0]
            if op == "call_function":  # namespace.op.overload looked up in torch.ops, nothing else
                parts = [] if target == "getitem" else target.split(".")
                if len(parts) not in (0, 3) or any(p.startswith("__") for p in parts):
                    raise ValueError(f"{target!r} is not an ATen op")
                target = operator.getitem if not parts else getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
                if not isinstance(target, torch._ops.OpOverload) and target is not operator.getitem:
                    raise ValueError(f"{target!r} is not an ATen op")
            kw = {k: _decode(v, env) for k, v in kwargs}
            node = graph.create_node(op, target, _decode(args, env), kw, name)
            if node.name != name:
                raise ValueError(f"node {name!r} came back as {node.name!r}")
            node.meta["val"] = _decode(val, env)
            env[name] = node
        return torch.fx.GraphModule(root, graph)
    except FileNotFoundError:
        return None
    except (AiogeError, OSError, ValueError, TypeError, KeyError, AttributeError, RuntimeError) as exc:
        log.warning("aioge.torch: the stored inference trace %s is not used: %s", path, exc)
        return None


def _functional(traced: torch.fx.GraphModule, captured: Any) -> bool:
    """Whether an inference trace stands for AOTAutograd's graph: no in-place op, as many
    outputs as the captured graph's (``captured``, its output node's argument), none of them an
    input or a view of one."""
    placeholders = {n for n in traced.graph.nodes if n.op == "placeholder"}
    for n in traced.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable:
            return False
    outs = traced.graph.output_node().args[0]
    if not isinstance(outs, (tuple, list)) or not isinstance(captured, (tuple, list)) or len(outs) != len(captured):
        return False
    for out in outs:
        while isinstance(out, torch.fx.Node) and out.op == "call_function" and _op_name(out) in _VIEWS:
            out = out.args[0]
        if out in placeholders:
            return False
    return True


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    return target._schema.name.split("::")[-1] if isinstance(target, torch._ops.OpOverload) else ""


def _eager(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    # The backward pass runs in PyTorch: aioge runs forward graphs.
    return make_boxed_func(gm.forward)


class _SessionThread:
    """A ``Session`` living on its own event-loop thread (an anyio blocking portal).

    PyTorch calls a backend synchronously, possibly from a thread whose event loop is
    running (a model called inside ``async def``); ``anyio.run`` would refuse there, and
    blocking that loop on itself would deadlock. The portal's loop runs in its own thread,
    so a synchronous call from anywhere else just waits for it.
    """

    def __init__(self, options: Mapping[str, str] | None) -> None:
        self._cm: AbstractContextManager[anyio.from_thread.BlockingPortal] = anyio.from_thread.start_blocking_portal()
        self.portal = self._cm.__enter__()
        try:
            self.session: Session = self.portal.call(_open_session, dict(options or {}))
        except BaseException:
            self._cm.__exit__(None, None, None)
            raise
        self._close = weakref.finalize(self, _close_session, self._cm, self.portal, self.session)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.portal.call(fn, *args)

    def close(self) -> None:
        self._close()


async def _open_session(options: dict[str, str]) -> Session:
    session = Session(options)
    await session.__aenter__()
    return session


def _close_session(cm: AbstractContextManager[Any], portal: anyio.from_thread.BlockingPortal, session: Session) -> None:
    try:
        portal.call(session.aclose)
    finally:
        cm.__exit__(None, None, None)
