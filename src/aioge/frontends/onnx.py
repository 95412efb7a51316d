"""ONNX model -> ``aioge.Graph``.

``load_onnx(path_or_bytes_or_proto, shapes=None)``: initializers become constants, graph
inputs that are not initializers become data inputs, and each node becomes aioge ops in
their canonical (newest-opset) form through the converter table in
``aioge.frontends.onnx_ops``. Dimensions named by the model (``dim_param``) stay symbolic
until feeds fix them, unless ``shapes=`` fixes them here; dimensions with neither a value
nor a name get fresh symbols. Control flow is resolved here where the model allows: an If
whose condition follows from the constants becomes the branch it takes, a Scan over a
static length is unrolled (``aioge.frontends.onnx_control``); the rest become the run-time
Loop and If ops. Sequence and optional values are first-class values (fed and returned as
lists of arrays, and None or the value), held unrolled as the tensors they contain where
the model fixes them (``aioge.frontends.onnx_sequence``): a sequence input ``s`` given a
length n in ``lengths={"s": n}`` becomes inputs ``s[0]``... The ``onnx`` package parses;
aioge maps.
"""

from __future__ import annotations

import logging
import os
from collections import ChainMap
from typing import Any, Iterable, Iterator, Mapping, MutableMapping, Sequence

import onnx
import onnx.defs

from aioge.errors import AiogeError, GraphError, UnsupportedOpError
from aioge.frontends.onnx_context import KnownValues, Names, NodeContext
from aioge.frontends.onnx_model import (
    MAX_TENSOR_BYTES,
    ModelSource,
    attribute_value,
    dtype_of_enum,
    read_model,
    sorted_nodes,
    tensor_to_array,
)
from aioge.frontends.onnx_ops import MIN_OPSET, find_converter
from aioge.frontends.onnx_sequence import (
    OptionalValue,
    SequenceValue,
    container_of,
    elem_dtype,
    element_name,
    is_structured,
    materialise,
)
from aioge.ir.desc import Dim, numpy_dtype
from aioge.ir.fingerprint import prehash
from aioge.ir.graph import Graph, Value

__all__ = ["MIN_OPSET", "load_onnx", "newest_opset", "newest_opsets"]

log = logging.getLogger(__name__)

ShapeSpec = Sequence["int | str | None"]


def newest_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` knows (the newest aioge reads)."""
    return int(onnx.defs.onnx_opset_version())


def newest_opsets() -> dict[str, int]:
    """The newest opset of every domain the installed ``onnx`` defines (``""`` for ai.onnx).
    Domains it does not define (custom ones) have no limit here: their ops must still be
    ones aioge knows."""
    newest = {"": newest_opset(), "ai.onnx.ml": int(onnx.defs.onnx_ml_opset_version())}
    try:
        from onnx.onnx_cpp2py_export.defs import schema_version_map

        newest.update({d: int(hi) for d, (_, hi) in schema_version_map().items() if d not in newest})
    except (ImportError, AttributeError, TypeError, ValueError):  # the two public figures are enough
        pass
    return newest


def load_onnx(
    source: Any,
    shapes: Mapping[str, ShapeSpec | int] | None = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    lengths: Mapping[str, int | None] | None = None,
) -> Graph:
    """Load an ONNX model as an aioge Graph.

    ``source`` is a path, the model's bytes, or an ``onnx.ModelProto``. ``shapes`` fixes
    dynamic dimensions: an input name maps to its full shape (ints; ``None`` keeps a
    dimension as declared), a dimension symbol (``dim_param``) maps to its size.
    ``base_dir`` is where external data may be read from (default: the model file's
    directory; bytes and protos have none). A sequence input is fed as a list of arrays, an
    optional one as None or its value, and sequence and optional outputs come back the same
    way. ``lengths`` fixes a sequence input's number of tensors ahead, an optimisation: the
    input ``s`` then becomes inputs ``s[0]``, ``s[1]``, ... (tensors the planner places and
    fuses), and an optional input is None when it is empty (else, for an optional sequence,
    its length; an optional tensor is the input itself).

    Returns the graph, with the model's value names. Loading is blocking work (file reads,
    conversion): from async code, run it in a worker thread (``anyio.to_thread.run_sync``).

    Raises:
        UnsupportedOpError: the model uses op types aioge lacks (all of them are listed).
        GraphError: the file is unreadable, truncated or corrupt; the graph is malformed
            (a cycle, a dangling input); an opset older than ``MIN_OPSET`` for an op that
            changed since, or newer than the installed ``onnx`` defines; an unsupported
            dtype; external data outside the model's directory; control flow that cannot be
            resolved at load time; or
            ``shapes`` that do not fit the model.
    """
    src = read_model(source, base_dir)
    return _Builder(src, shapes, lengths).build()


class _Builder:
    """One model's conversion; read top to bottom in ``build``."""

    def __init__(
        self, src: ModelSource, shapes: Mapping[str, ShapeSpec | int] | None, lengths: Mapping[str, int | None] | None = None
    ) -> None:
        self.src = src
        self.model = src.model
        self.shapes = dict(shapes or {})
        self.lengths = dict(lengths or {})
        name = self.model.graph.name or (os.path.splitext(os.path.basename(src.label))[0] if src.label[0] != "<" else "onnx")
        self.graph = Graph(name)
        self.env: dict[str, Any] = {}  # a Value, or a SequenceValue / OptionalValue of values
        self.known = KnownValues()

    def build(self) -> Graph:
        self.opsets = self._opsets()
        nodes = sorted_nodes(self.model.graph, self.src.label)
        self._check_supported(nodes, self.opsets)
        self.names = Names(_all_names(self.model.graph))
        self._constants()
        self._inputs()
        needed = _needed(self.model.graph)
        for node in nodes:
            self._convert(node, needed, self.env, "")
        self._outputs()
        return self.graph

    # -- opsets and support -----------------------------------------------------------

    def _opsets(self) -> dict[str, int]:
        opsets: dict[str, int] = {}
        for imp in self.model.opset_import:
            opsets[_domain(imp.domain)] = int(imp.version)
        if "" not in opsets and self.model.ir_version < 3:
            opsets[""] = 1  # IR versions 1 and 2 predate opset_import: opset 1
        newest = newest_opsets()
        for domain, version in opsets.items():
            name = domain or "ai.onnx"
            if version < 1:
                raise GraphError(
                    f"{self.src.label}: the model imports {name} opset {version}; opset versions start at 1",
                    graph=self.graph.name,
                )
            if domain in newest and version > newest[domain]:
                # Read as the newest known, an op whose definition changed would silently mean
                # something else (as onnxruntime, refuse what the schemas do not cover).
                raise GraphError(
                    f"{self.src.label}: the model imports {name} opset {version}, newer than the newest this aioge "
                    f"supports ({newest[domain]}, from the installed onnx {onnx.__version__}); upgrade onnx or convert "
                    "the model with onnx.version_converter",
                    graph=self.graph.name,
                )
        return opsets

    def _check_supported(self, nodes: Sequence[onnx.NodeProto], opsets: Mapping[str, int]) -> None:
        missing: list[tuple[str, str]] = []
        old: set[str] = set()
        for node in _with_subgraph_nodes(nodes):
            domain = _domain(node.domain)
            if domain not in opsets:
                if domain == "":
                    raise GraphError(
                        f"{self.src.label}: the model imports no opset for the default domain ai.onnx, "
                        f"but node {node.name or node.op_type!r} is in it",
                        graph=self.graph.name,
                    )
                missing.append((domain, node.op_type))
                continue
            if find_converter(domain, node.op_type, opsets[domain]).missing():
                missing.append((domain, node.op_type))
            elif domain == "" and opsets[""] < MIN_OPSET and _changed_since(node.op_type, opsets[""]):
                old.add(node.op_type)
        if missing:
            raise UnsupportedOpError(missing, graph=self.graph.name)
        if old:
            raise GraphError(
                f"{self.src.label}: ai.onnx opset {opsets['']} is older than aioge supports ({MIN_OPSET} to "
                f"{newest_opset()}) for {sorted(old)}, whose definitions changed since; convert the model with "
                "onnx.version_converter first",
                graph=self.graph.name,
            )

    # -- values -----------------------------------------------------------------------

    def _constants(self) -> None:
        g = self.model.graph
        for i, t in enumerate(g.initializer):
            array = tensor_to_array(t, self.src, "initializer", self.src.raw.get(i))
            array.setflags(write=False)  # the graph shares a read-only array instead of copying it
            self.env[t.name] = self.graph.constant(array, t.name)
        prehash([c.data for c in self.graph.constants.values() if c.data is not None])
        if g.sparse_initializer:
            names = [s.values.name for s in g.sparse_initializer]
            raise GraphError(f"{self.src.label}: sparse initializers {names[:5]} are not supported", graph=self.graph.name)

    def _inputs(self) -> None:
        given: list[tuple[str, tuple[Dim | None, ...] | None, str]] = []
        symbols: set[str] = set()
        structured: dict[str, Any] = {}  # input name -> how its tensors make it up
        unknown = set(self.lengths) - {vi.name for vi in self.model.graph.input}
        if unknown:
            raise GraphError(f"lengths=: {sorted(unknown)} are not inputs of the model", graph=self.graph.name)
        containers: dict[str, str] = {}  # first-class sequence and optional inputs
        for vi in self.model.graph.input:
            if vi.name in self.env:
                continue  # an initializer also listed as an input (IR < 4): it is a constant
            kind = vi.type.WhichOneof("value")
            if kind in ("sequence_type", "optional_type") and vi.name not in self.lengths:
                try:
                    containers[vi.name] = container_of(vi.type)
                except ValueError as exc:
                    raise GraphError(f"{self.src.label}: input {vi.name!r}: {exc}", graph=self.graph.name) from None
                shape, dtype = _tensor_type(_element_type(vi.type), vi.name, self.src.label)
                # The elements' dims that are not numbers may differ from element to element.
                given.append((vi.name, None if shape is None else tuple(d if isinstance(d, int) else "?" for d in shape), dtype))
                continue
            for name, t in self._input_tensors(vi, structured):
                shape, dtype = _tensor_type(t, name, self.src.label)
                if name != vi.name and shape is not None:
                    shape = tuple(None if isinstance(d, str) else d for d in shape)  # elements differ in size
                given.append((name, shape, dtype))
                symbols |= {d for d in (shape or ()) if isinstance(d, str)}
        # Dimensions with neither a value nor a name: a fresh symbol each, never a clash.
        fresh = Names(symbols)
        declared: list[tuple[str, tuple[Dim, ...] | None, str]] = [
            (n, None if s is None else tuple(fresh.fresh(f"{n}_dim{i}") if d is None else d for i, d in enumerate(s)), t)
            for n, s, t in given
        ]
        declared = _fix_shapes(declared, symbols, self.shapes, self.graph.name)
        for name, shape, dtype in declared:
            if name in containers:
                original = next(s for n, s, _ in given if n == name)
                self.env[name] = self.graph.input(name, original, dtype, containers[name])
                continue
            self.env[name] = self.graph.input(name, shape, dtype)
            _check_size(self.env[name], self.graph.name, None, "input")
        for name, make in structured.items():
            self.env[name] = make(self.env)

    def _input_tensors(self, vi: onnx.ValueInfoProto, structured: dict[str, Any]) -> list[tuple[str, onnx.TypeProto]]:
        """The tensor inputs standing for graph input ``vi``: itself, or a sequence's elements.

        Raises:
            GraphError: a sequence or optional input without its entry in ``lengths``.
        """
        kind = vi.type.WhichOneof("value")
        if kind not in ("sequence_type", "optional_type"):
            return [(vi.name, vi.type)]
        if vi.name not in self.lengths:
            what = "its length" if kind == "sequence_type" else "None when it is empty, else its length (or 1 for a tensor)"
            raise GraphError(f"{self.src.label}: input {vi.name!r} is a {kind}: give {what} in lengths=", graph=self.graph.name)
        n = self.lengths[vi.name]
        inner = vi.type
        if kind == "optional_type":
            inner = vi.type.optional_type.elem_type
            if n is None:
                structured[vi.name] = lambda env: OptionalValue(None)
                return []
            if inner.WhichOneof("value") != "sequence_type":
                structured[vi.name] = lambda env, name=vi.name: OptionalValue(env.pop(name))
                return [(vi.name, inner)]
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise GraphError(f"lengths=: input {vi.name!r} needs a non-negative int length, got {n!r}", graph=self.graph.name)
        names = [element_name(vi.name, i) for i in range(n)]
        dtype = elem_dtype(inner)

        def make(env: dict[str, Any], names: list[str] = names, optional: bool = kind == "optional_type") -> Any:
            seq = SequenceValue(tuple(env.pop(x) for x in names), dtype)
            return OptionalValue(seq) if optional else seq

        structured[vi.name] = make
        return [(x, inner.sequence_type.elem_type) for x in names]

    def _outputs(self) -> None:
        values: list[Value] = []
        for vi in self.model.graph.output:
            if vi.name not in self.env:
                raise GraphError(f"graph output {vi.name!r} is not produced by any node", graph=self.graph.name)
            found = self.env[vi.name]
            if is_structured(found):
                # A sequence output is one value, a list at run time; an optional, None or its value.
                label = self.names.fresh(f"{vi.name}/output")
                ctx = NodeContext(self.graph, "Output", "", self.opsets[""], label, [], {}, [""], frozenset(), self.names)
                found = materialise(ctx, found)
            named = [] if found is None else [(vi.name, found)]
            for name, v in named:
                if v.producer is None or v.name != name or any(o is v for o in values):
                    if not v.desc.is_tensor:
                        v = self._container_output(v, name, values)
                        values.append(v)
                        continue
                    # Outputs are always node outputs under their ONNX names: route the rest through Identity.
                    if v.name == name and v.is_const:
                        self.graph.rename(v, self.names.fresh(name))
                    out_name = self.names.fresh(name) if self.graph.has_value(name) else name
                    v = self.graph.add_node(
                        "Identity",
                        [v],
                        {},
                        [v.desc],
                        name=self.names.claim(f"{name}/output", generated=True),
                        output_names=[out_name],
                    ).outputs[0]
                values.append(v)
        self.graph.output(*values)

    def _container_output(self, v: Value, name: str, values: list[Value]) -> Value:
        """A sequence or optional as graph output ``name``: renamed when it can be (Identity
        takes tensors only), else its copy (OptionalGetElement is the identity on a sequence,
        the Optional op on an optional)."""
        if v.producer is not None and not any(o is v for o in values) and not self.graph.has_value(name):
            self.graph.rename(v, name)
            return v
        op = "OptionalGetElement" if v.desc.container == "sequence" else "Optional"
        out_name = self.names.fresh(name) if self.graph.has_value(name) else name
        return self.graph.add_node(
            op, [v], {}, [v.desc], name=self.names.claim(f"{name}/output", generated=True), output_names=[out_name]
        ).outputs[0]

    # -- nodes ------------------------------------------------------------------------

    def _convert(self, node: onnx.NodeProto, needed: frozenset[str], env: MutableMapping[str, Value], scope: str) -> None:
        """Convert one node, reading and binding values in ``env``.

        Inside an inlined subgraph (``scope`` set) every value the node defines gets a
        fresh name under the scope, so a body unrolled many times never clashes.
        """
        domain = _domain(node.domain)
        opset = self.opsets[domain]
        if node.name and not scope:
            name = self.names.claim(node.name)
        else:
            name = self.names.claim(f"{scope}{node.name or node.op_type}_{len(self.graph.nodes)}", generated=True)
        outputs = list(node.output) if not scope else [self.names.fresh(f"{scope}{o}") if o else "" for o in node.output]
        wanted = needed if not scope else frozenset(a for o, a in zip(node.output, outputs) if o in needed)
        try:
            attrs = {a.name: attribute_value(a, self.src, name) for a in node.attribute}
            inputs: list[Any] = [env[x] if x else None for x in node.input]
            if (
                node.op_type == "Identity"
                and len(node.output) == 1
                and isinstance(inputs[0], Value)
                and not inputs[0].desc.is_tensor
            ):
                env[node.output[0]] = inputs[0]  # a first-class sequence or optional passes through
                return
            if any(is_structured(v) for v in inputs) and node.op_type not in _TAKES_STRUCTURED:
                if node.op_type == "Identity" and len(node.output) == 1:
                    env[node.output[0]] = inputs[0]
                    return
                raise GraphError(
                    f"{node.op_type} (opset {opset}) does not take sequence or optional inputs", graph=self.graph.name, node=name
                )
            ctx = NodeContext(
                self.graph,
                node.op_type,
                domain,
                opset,
                name,
                inputs,
                attrs,
                outputs,
                wanted,
                self.names,
                inline=lambda body, bound, tag: self._inline(body, bound, f"{name}/{tag}/", env),
                facts=self.known,
                lookup=env.get,
            )
            results = list(find_converter(domain, node.op_type, opset).convert(ctx))
        except AiogeError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise GraphError(
                f"cannot convert {node.op_type} (opset {opset}): {type(exc).__name__}: {exc}", graph=self.graph.name, node=name
            ) from exc
        for k, out in enumerate(node.output):
            if not out:
                continue
            v = results[k] if k < len(results) else None
            if v is None:
                if out in needed:
                    raise GraphError(
                        f"{node.op_type} produced no value for its output {k} ({out!r})", graph=self.graph.name, node=name
                    )
                continue
            if isinstance(v, Value):
                _check_size(v, self.graph.name, name, f"output {k} of {node.op_type}")
            env[out] = v

    def _inline(self, body: onnx.GraphProto, bound: Sequence[Value], scope: str, outer: Mapping[str, Value]) -> list[Value]:
        """Convert a subgraph (If branch, Scan body) into the main graph; returns its outputs.

        Raises:
            GraphError: the number of bound inputs differs from the body's, or the body is malformed.
        """
        if len(bound) != len(body.input):
            raise GraphError(
                f"{scope.rstrip('/')}: the body takes {len(body.input)} inputs, {len(bound)} given", graph=self.graph.name
            )
        env: MutableMapping[str, Value] = ChainMap({}, dict(outer))
        for vi, v in zip(body.input, bound):
            env[vi.name] = v
        for t in body.initializer:
            array = tensor_to_array(t, self.src, "initializer")
            array.setflags(write=False)
            env[t.name] = self.graph.constant(array, self.names.fresh(f"{scope}{t.name}"))
        nodes = sorted_nodes(body, f"{self.src.label}: {scope.rstrip('/')}", outer=env.keys())
        needed = _needed(body)
        for node in nodes:
            self._convert(node, needed, env, scope)
        missing = [o.name for o in body.output if o.name not in env]
        if missing:
            raise GraphError(f"{scope.rstrip('/')}: body outputs {missing} are not produced", graph=self.graph.name)
        return [env[o.name] for o in body.output]


# -- helpers ------------------------------------------------------------------------------


def _check_size(v: Value, graph: str, node: str | None, what: str) -> None:
    """Refuse a tensor whose static shape is larger than any this simulator runs.

    Raises:
        GraphError: naming the value, its shape and the bound.
    """
    desc = v.desc
    if not desc.static:
        return
    count = desc.size
    if count * numpy_dtype(desc.dtype).itemsize > MAX_TENSOR_BYTES:  # str: the size of a pointer per element
        raise GraphError(
            f"{what} {v.name!r} is {desc.dtype}{list(desc.shape or ())} ({count} elements), larger than the "
            f"{MAX_TENSOR_BYTES >> 30} GiB a tensor may have",
            graph=graph,
            node=node,
        )


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _changed_since(op_type: str, opset: int) -> bool:
    """True when an op's definition at ``opset`` differs from the one at MIN_OPSET."""
    try:
        then = onnx.defs.get_schema(op_type, opset, "").since_version
        now = onnx.defs.get_schema(op_type, MIN_OPSET, "").since_version
    except onnx.defs.SchemaError:
        return True
    return bool(then != now)


def _with_subgraph_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """The nodes and, recursively, the nodes of their subgraphs (If branches, Scan bodies)."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                yield from _with_subgraph_nodes(sub.node)


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {v.name for v in graph.output} | {t.name for t in graph.initializer}
    for node in _with_subgraph_nodes(graph.node):
        names.add(node.name)
        names.update(node.input)
        names.update(node.output)
    names.discard("")
    return names


def _needed(graph: onnx.GraphProto) -> frozenset[str]:
    """Every value name read by a node or listed as a graph output."""
    names = {v.name for v in graph.output}
    for node in graph.node:
        names.update(x for x in node.input if x)
    return frozenset(names)


# Ops whose converters take sequence and optional values (the rest take tensors only).
_TAKES_STRUCTURED = frozenset(
    {
        "SequenceConstruct",
        "SequenceAt",
        "SequenceInsert",
        "SequenceErase",
        "SequenceLength",
        "ConcatFromSequence",
        "SequenceMap",
        "Optional",
        "OptionalHasElement",
        "OptionalGetElement",
        "If",
        "Scan",
        "Loop",
    }
)


def _element_type(t: onnx.TypeProto) -> onnx.TypeProto:
    """The tensor type inside a (sequence or optional of) tensor type."""
    while t.WhichOneof("value") in ("sequence_type", "optional_type"):
        t = t.sequence_type.elem_type if t.HasField("sequence_type") else t.optional_type.elem_type
    if t.WhichOneof("value") is None:
        t = onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None)  # an untyped element: float32 of any shape
    return t


def _tensor_type(t: onnx.TypeProto, name: str, label: str) -> tuple[tuple[Dim | None, ...] | None, str]:
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        raise GraphError(
            f"{label}: input {name!r} is a {kind or 'untyped value'}; aioge supports tensor inputs, and "
            "sequences and optionals of them"
        )
    tt = t.tensor_type
    dtype = dtype_of_enum(tt.elem_type, f"input {name!r}")
    if not tt.HasField("shape"):
        return None, dtype
    dims: list[Dim | None] = []
    for d in tt.shape.dim:
        which = d.WhichOneof("value")
        if which == "dim_value":
            if d.dim_value < 0:
                raise GraphError(f"{label}: input {name!r} has a negative dimension {d.dim_value}")
            dims.append(int(d.dim_value))
        elif which == "dim_param" and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims), dtype


def _fix_shapes(
    declared: list[tuple[str, tuple[Dim, ...] | None, str]],
    symbols: set[str],
    shapes: Mapping[str, ShapeSpec | int],
    graph: str,
) -> list[tuple[str, tuple[Dim, ...] | None, str]]:
    """Apply ``shapes=``: full shapes for inputs by name, sizes for dimension symbols.

    Raises:
        GraphError: an unknown key, a shape of the wrong rank or contradicting a static
            dimension, or one symbol given two sizes.
    """
    if not shapes:
        return declared
    inputs = {n: s for n, s, _ in declared}
    bound: dict[str, int] = {}

    def bind(sym: str, size: int, where: str) -> None:
        if bound.setdefault(sym, size) != size:
            raise GraphError(f"dimension {sym!r} is given as {bound[sym]} and as {size} ({where})", graph=graph)

    for key, spec in shapes.items():
        if key in inputs:
            if isinstance(spec, int) or not isinstance(spec, Sequence):
                raise GraphError(f"input {key!r} needs a shape (a sequence of ints), got {spec!r}", graph=graph)
            have = inputs[key]
            if have is not None and len(have) != len(spec):
                raise GraphError(f"input {key!r} has rank {len(have)} {list(have)}, got shape {list(spec)}", graph=graph)
            fixed: list[Dim] = []
            for i, d in enumerate(spec):
                old = have[i] if have is not None else None
                if d is None or isinstance(d, str):
                    fixed.append(old if old is not None else (d or f"{key}_dim{i}"))
                    continue
                if not isinstance(d, int) or d < 0:
                    raise GraphError(f"input {key!r} dimension {i} must be a non-negative int, got {d!r}", graph=graph)
                if isinstance(old, int) and old != d:
                    raise GraphError(f"input {key!r} dimension {i} is {old} in the model, got {d}", graph=graph)
                if isinstance(old, str):
                    bind(old, d, f"input {key!r}")
                fixed.append(d)
            inputs[key] = tuple(fixed)
        elif key in symbols:
            if not isinstance(spec, int) or isinstance(spec, bool) or spec < 0:
                raise GraphError(f"dimension {key!r} needs a non-negative int size, got {spec!r}", graph=graph)
            bind(key, spec, "its size given")
        else:
            raise GraphError(
                f"{key!r} is neither an input ({sorted(inputs)}) nor a dimension symbol ({sorted(symbols)})",
                graph=graph,
            )
    out = []
    for name, _, dtype in declared:
        shape = inputs[name]
        if shape is not None:
            shape = tuple(bound.get(d, d) if isinstance(d, str) else d for d in shape)
        out.append((name, shape, dtype))
    return out
