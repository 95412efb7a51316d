"""TensorFlow models -> ``aioge.Graph`` (GE's ATC ``--framework=3``).

``load_tf(source, inputs=None, outputs=None, shapes=None, *, signature="serving_default")``
takes a frozen GraphDef (a ``.pb`` path, its bytes or a ``GraphDef``), a SavedModel
directory, a ``.keras`` file, or a Keras model or ``tf.function`` concrete function in hand.
A SavedModel, ``.keras`` file or model object is frozen first with TensorFlow's own
``convert_variables_to_constants_v2``: that traces and runs TensorFlow's Python on the
user's own model (a SavedModel's or Keras file's code and layers), which is as trusted as
calling the model; load only models you would run. A GraphDef itself is never run:

- ``Const`` nodes become constants, ``Placeholder`` nodes inputs, every other node aioge
  ops (ONNX-shaped) through the table ``_TF`` at the bottom. A value a converter needs at
  load time (a Transpose's permutation computed by AddV2 from two Consts) is computed by
  aioge's own kernels on the constants it depends on (``KnownValues``), never by TensorFlow.
- Nodes reached only through control inputs (``^node``: ``WriteFile``, ``Assert``, ``Print``
  and the like), in the graph or in a library function it calls, are dropped: never
  converted, never run. A ``UserWarning`` names those that are not pure ops of ``_TF``: an
  inference graph's outputs never depend on them, and running them would do what the file says.
- A ``Const`` is checked before it is decoded: one that declares more than ``max_const_bytes``
  (default 2 GiB), or a splat (fewer stored values than its shape) that would expand past
  64 MiB, is a ``GraphError`` naming the node.

NHWC convolutions and pools run in aioge's NCHW; their filters are transposed once, here.
A value a conv or pool makes is ``Transpose(t, NCHW->NHWC)`` with ``t`` kept as its NCHW
twin (``_Builder.nchw``): pointwise ops, BiasAdd, FusedBatchNorm, Pad, spatial reductions
and the next conv read the twins, so a Keras CNN is transposed once at its input and the
NHWC transposes nobody reads are dead code. A BiasAdd or inference FusedBatchNorm of a
conv folds into its weights, and a zero Pad of H and W into the VALID conv or pool after it
(a max pool only over values >= 0). Unknown dims (``-1``) stay symbolic, named ``<input>_<axis>``,
unless ``shapes=`` fixes them. While loops whose trip count is known at load time (Keras
LSTM/GRU over a fixed sequence length) are unrolled: TF2 ``While`` from its body
``FunctionDef``, a TF1 frame (``Enter`` ... ``Exit``, what freezing lowers ``While`` to by
default) from its nodes, a step at a time.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge import ops
from aioge.errors import GraphError, UnsupportedOpError
from aioge.frontends.onnx_context import KnownValues
from aioge.ir.graph import Graph, Value

__all__ = ["load_tf"]

ShapeSpec = Sequence["int | str | None"]

# Nodes that carry no computation in a frozen inference graph.
_SKIP = frozenset({"NoOp", "Assert"})
# Reading variables: the graph is not frozen.
_VARIABLES = frozenset({"ReadVariableOp", "VarHandleOp", "VariableV2", "Variable", "ResourceGather", "VarIsInitializedOp"})
# TF1 while loops (tf.compat.v1 control flow): NextIteration closes a cycle.
_V1_LOOP = frozenset({"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"})
_PURE = _V1_LOOP | {"Const"}  # dropped without a warning when only control inputs reach them
MAX_CONST_BYTES = 2 << 30
_SPLAT_BYTES = 64 << 20


def load_tf(
    source: Any,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    shapes: Mapping[str, ShapeSpec] | None = None,
    *,
    signature: str = "serving_default",
    max_const_bytes: int = MAX_CONST_BYTES,
) -> Graph:
    """Load a TensorFlow model as an aioge Graph.

    ``source`` is a frozen GraphDef (a ``.pb`` path, the serialised bytes, or a ``GraphDef``),
    a SavedModel directory (its ``signature``, default ``serving_default``), a ``.keras``
    file, a Keras model, or a concrete function. Frozen GraphDefs are converted without
    running TensorFlow; SavedModels, ``.keras`` files and models are first frozen by
    TensorFlow's ``convert_variables_to_constants_v2``, which runs TensorFlow's Python on
    that model: pass only models you trust as you would trust running them.

    ``inputs`` names the inputs to feed (default: all), ``outputs`` the outputs to return
    (default: all the signature's, or for a GraphDef the nodes nothing else consumes; a
    GraphDef names tensors as ``node`` or ``node:1``), ``shapes`` maps an input name to its
    shape, fixing unknown dims. SavedModel and Keras inputs and outputs are named as the
    signature (or the model's inputs and outputs) name them.

    Loading is blocking work: from async code, run it in a worker thread.

    Raises:
        GraphError: the file is not a GraphDef, SavedModel or Keras file; a signature, input
            or output does not exist; the GraphDef reads variables (not frozen); a Const is
            bigger than ``max_const_bytes``; a node's inputs cannot be expressed.
        UnsupportedOpError: TensorFlow op types aioge lacks (all listed, with their nodes).
    """
    graph_def, label, ins, outs = _read(source, signature)
    renames: dict[str, str] = {}
    if ins is not None:
        inputs = [_lookup(ins, n, "input", label) for n in inputs] if inputs is not None else list(ins.values())
        shapes = {_lookup(ins, k, "input", label): v for k, v in (shapes or {}).items()}
        renames.update({v: k for k, v in ins.items()})
    if outs is not None:
        outputs = [_lookup(outs, n, "output", label) for n in outputs] if outputs is not None else list(outs.values())
        renames.update({v: k for k, v in outs.items()})
    return _Builder(graph_def, label, inputs, outputs, shapes or {}, renames, max_const_bytes).build()


def _lookup(names: Mapping[str, str], name: str, what: str, label: str) -> str:
    if name not in names:
        raise GraphError(f"{label}: no {what} {name!r}; the model's {what}s are {sorted(names)}")
    return names[name]


_Read = tuple[Any, str, "dict[str, str] | None", "dict[str, str] | None"]


def _read(source: Any, signature: str) -> _Read:
    from google.protobuf.message import DecodeError
    from tensorflow.core.framework import graph_pb2

    if isinstance(source, graph_pb2.GraphDef):
        return source, "<GraphDef>", None, None
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, label = bytes(source), "<bytes>"
    elif isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        if os.path.isdir(label) or os.path.basename(label) == "saved_model.pb":
            return _saved_model(label if os.path.isdir(label) else os.path.dirname(label) or ".", signature)
        if label.endswith(".keras"):
            return _keras_file(label)
        try:
            with open(label, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise GraphError(f"{label}: cannot read: {exc.strerror or exc}") from None
    elif hasattr(source, "structured_outputs") and hasattr(source, "graph"):
        return _frozen(source, "<concrete function>")
    elif _is_keras_model(source):
        return _keras_model(source, f"<{type(source).__name__}>")
    else:
        raise GraphError(
            "load_tf expects a path (.pb, .keras, SavedModel directory), bytes, a GraphDef, a Keras model or a concrete "
            f"function, got {type(source).__name__}"
        )
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise GraphError(f"{label}: not a TensorFlow GraphDef ({exc})") from None
    if not graph_def.node:
        raise GraphError(f"{label}: not a TensorFlow GraphDef (no nodes)")
    return graph_def, label, None, None


def _saved_model(path: str, signature: str) -> _Read:
    import tensorflow as tf

    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise GraphError(f"{path}: a directory without saved_model.pb is not a SavedModel")
    try:
        loaded = tf.saved_model.load(path)
    except Exception as exc:  # noqa: BLE001 - protobuf, OS and TF errors alike
        raise GraphError(f"{path}: cannot load the SavedModel ({type(exc).__name__}: {exc})") from None
    sigs = dict(loaded.signatures)
    if signature not in sigs:
        raise GraphError(f"{path}: the SavedModel has no signature {signature!r}; its signatures are {sorted(sigs)}")
    return _frozen(sigs[signature], path, loaded)


def _keras_file(path: str) -> _Read:
    import keras  # type: ignore[import-untyped]

    if not os.path.isfile(path):
        raise GraphError(f"{path}: cannot read: no such file")
    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as exc:  # noqa: BLE001 - keras raises many kinds (zip, JSON, h5, deserialisation)
        raise GraphError(f"{path}: cannot load the Keras model ({type(exc).__name__}: {exc})") from None
    return _keras_model(model, path)


def _is_keras_model(obj: Any) -> bool:
    return any(c.__name__ == "Model" and c.__module__.startswith(("keras", "tf_keras")) for c in type(obj).__mro__)


def _keras_model(model: Any, label: str) -> _Read:
    import tensorflow as tf

    tensors = list(getattr(model, "inputs", None) or ())
    if not tensors:
        raise GraphError(f"{label}: the Keras model has no defined inputs (build it with keras.Input or call it once)")
    # Named after their InputLayer (what a .keras file keeps), else the tensor.
    names = [getattr(getattr(t, "_keras_history", None), "operation", t).name.split(":")[0] for t in tensors]
    specs = [tf.TensorSpec(t.shape, t.dtype, name=f"input_{i}") for i, t in enumerate(tensors)]

    def call(*xs: Any) -> Any:
        out = model(list(xs) if len(xs) > 1 else xs[0], training=False)
        outs = out if isinstance(out, (list, tuple)) else [out]
        out_names = list(getattr(model, "output_names", None) or [f"output_{i}" for i in range(len(outs))])
        return dict(zip(out_names, outs))

    fn = tf.function(call).get_concrete_function(*specs)
    graph_def, _, ins, outs = _frozen(fn, label)
    assert ins is not None
    return graph_def, label, dict(zip(names, ins.values())), outs


def _frozen(fn: Any, label: str, keep: Any = None) -> _Read:
    """Freeze a concrete function (TensorFlow's own API); its placeholders and outputs by signature name."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(fn, lower_control_flow=False)  # While stays functional
    del keep  # the SavedModel object must outlive the freezing
    kwargs = fn.structured_input_signature[1] if fn.structured_input_signature else {}
    placeholders = [t.name.split(":")[0] for t in frozen.inputs if t.dtype != tf.resource]
    ins = dict(zip(sorted(kwargs), placeholders)) if kwargs else {p: p for p in placeholders}
    structured = frozen.structured_outputs
    if isinstance(structured, Mapping):
        outs = {k: v.name for k, v in structured.items()}
    else:
        flat = tf.nest.flatten(structured)
        outs = {f"output_{i}": t.name for i, t in enumerate(flat)}
    outs = {k: v[:-2] if v.endswith(":0") else v for k, v in outs.items()}
    return frozen.graph.as_graph_def(add_shapes=True), label, ins, outs


class _Builder:
    def __init__(
        self,
        graph_def: Any,
        label: str,
        inputs: Sequence[str] | None,
        outputs: Sequence[str] | None,
        shapes: Mapping[str, ShapeSpec],
        renames: Mapping[str, str] | None = None,
        max_const_bytes: int = MAX_CONST_BYTES,
    ) -> None:
        self.graph_def = graph_def
        self.label = label
        self.nodes = {n.name: n for n in graph_def.node}
        self.functions = {f.signature.name: f for f in graph_def.library.function}
        stem = os.path.splitext(os.path.basename(label.rstrip("/")))[0] if label[0] != "<" else "tf"
        self.graph = Graph(stem or "tf")
        self.want_inputs = list(inputs) if inputs is not None else None
        self.want_outputs = list(outputs) if outputs is not None else None
        self.shapes = dict(shapes)
        self.renames = dict(renames or {})
        self.max_const_bytes = max_const_bytes
        self.env: dict[str, tuple[Any, ...]] = {}
        self.known = KnownValues()
        self.calls = 0
        self.checked: set[str] = set()  # functions whose control-only nodes were reported
        self.arg_shapes: dict[str, list[int] | None] = {}
        self.scope = ""  # a prefix for the constants of an inlined function body
        # An NHWC value made as Transpose(t, NCHW->NHWC) -> (the value, t): the ops that read it
        # read t, so a chain of NHWC convs, pointwise ops and pads stays NCHW between transposes.
        self.nchw: dict[int, tuple[Value, Value]] = {}
        self.frames: _V1Frames | None = None  # TF1 while loops (Enter ... Exit), unrolled
        # SpaceToBatchND -> conv -> BatchToSpaceND (TF's dilated conv) as one dilated conv: a value
        # standing for a space-to-batched one (id -> (the value, each axis' block)), see _dilated
        self.dilated: dict[int, tuple[Value, list[int]]] = {}

    def build(self) -> Graph:
        self.frames = _V1Frames(self.graph_def.node) if any(n.op == "NextIteration" for n in self.graph_def.node) else None
        outputs = self._outputs()
        roots = [_tensor(o)[0] for o in outputs]
        if self.frames is not None:  # TF1 loop bodies, and what they read, are reached through NextIteration
            roots += [_tensor(n.input[0])[0] for n in self.graph_def.node if n.op == "NextIteration"]
        order = self._order(roots)
        self._check_ops(order)
        self._drop_control_only(order)
        self._check_inputs(order)
        for node in order:
            frame = self.frames.member.get(node.name) if self.frames is not None else None
            if frame is None and node.name not in self.env:  # (a loop body may have converted it)
                self.env[node.name] = self._convert(node)
            elif frame is not None and node.op == "Exit" and node.name not in self.env:
                _v1_loop(self, frame)
        values: list[Any] = []
        for out in outputs:
            v = self.value(out, None)
            values.append(ops.identity(v) if v.producer is None or any(v is w for w in values) else v)
        names = [self.renames.get(o, o[:-2] if o.endswith(":0") else o) for o in outputs]
        self.graph.output(*values, names=names)
        return self.graph

    # -- which nodes ---------------------------------------------------------------------------

    def _outputs(self) -> list[str]:
        if self.want_outputs is not None:
            for out in self.want_outputs:
                name, _ = _tensor(out)
                if name not in self.nodes:
                    raise GraphError(f"{self.label}: no node {name!r} for output {out!r}", graph=self.graph.name)
            return self.want_outputs
        consumed = {_tensor(i)[0] for n in self.graph_def.node for i in n.input if not i.startswith("^")}
        found = [
            n.name
            for n in self.graph_def.node
            if n.name not in consumed
            and n.op not in ("Const", "Placeholder")
            and n.op not in _SKIP
            and (self.frames is None or n.name not in self.frames.member)  # a TF1 loop's own bookkeeping
        ]
        if not found:
            raise GraphError(f"{self.label}: the graph has no output nodes; name them with outputs=", graph=self.graph.name)
        # Identity(Const) left by freezing (a variable read that a TF1 loop's Enter no longer reads) is no output
        frozen = [
            n for n in found if self.nodes[n].op == "Identity" and self.nodes[_tensor(self.nodes[n].input[0])[0]].op == "Const"
        ]
        return [n for n in found if n not in frozen] or found

    def _order(self, roots: Sequence[str]) -> list[Any]:
        """The nodes the outputs need, inputs first (iterative DFS; control inputs ignored; a
        TF1 loop's NextIteration is a leaf, so the loop is reported as unsupported ops)."""
        order: list[Any] = []
        state: dict[str, int] = {}
        for root in roots:
            stack = [(root, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    state[name] = 2
                    order.append(self.nodes[name])
                    continue
                if state.get(name):
                    if state[name] == 1:
                        raise GraphError(f"{self.label}: the graph has a cycle through {name!r}", graph=self.graph.name)
                    continue
                if name not in self.nodes:
                    raise GraphError(f"{self.label}: a node reads {name!r}, which does not exist", graph=self.graph.name)
                state[name] = 1
                stack.append((name, True))
                if self.nodes[name].op == "NextIteration":
                    continue
                for inp in reversed(self.nodes[name].input):
                    if not inp.startswith("^"):
                        dep = _tensor(inp)[0]
                        if state.get(dep) != 2:
                            if state.get(dep) == 1:
                                raise GraphError(f"{self.label}: the graph has a cycle through {dep!r}", graph=self.graph.name)
                            stack.append((dep, False))
        return order

    def _drop_control_only(self, order: Sequence[Any], where: str = "") -> None:
        """Warn about the nodes the outputs' nodes reach only through control inputs: never converted, never run."""
        kept = {n.name for n in order}
        seen: set[str] = set()
        stack = [i[1:] for n in order for i in n.input if i.startswith("^")]
        while stack:
            name = stack.pop()
            if name in kept or name in seen or name not in self.nodes or self.nodes[name] is _ARG:
                continue
            seen.add(name)
            stack.extend(_tensor(i.lstrip("^"))[0] for i in self.nodes[name].input)
        # The pure ops aioge maps do nothing when dropped: name the others (WriteFile, Print, ...)
        dropped = sorted(
            n for n in seen if not (self.nodes[n].op in _TF or self.nodes[n].op in _SKIP or self.nodes[n].op in _PURE)
        )
        if dropped:
            shown = ", ".join(f"{n} ({self.nodes[n].op})" for n in dropped[:10])
            more = f" and {len(dropped) - 10} more" if len(dropped) > 10 else ""
            warnings.warn(
                f"{self.label}: dropped {len(dropped)} node(s){' of ' + where if where else ''} reached only through "
                f"control inputs, not run: {shown}{more}",
                UserWarning,
                stacklevel=4,
            )

    def _check_ops(self, order: Sequence[Any]) -> None:
        variables = [n for n in order if n.op in _VARIABLES]
        if variables:
            raise GraphError(
                f"{self.label}: the graph reads variables ({variables[0].op} at node {variables[0].name!r}): it is not "
                "frozen. Freeze it with tensorflow.python.framework.convert_to_constants.convert_variables_to_constants_v2, "
                "or pass load_tf the SavedModel directory or .keras file",
                graph=self.graph.name,
            )
        missing: list[tuple[str, str]] = []
        seen: set[str] = set()
        stack = list(order)
        if self.frames is not None:  # a TF1 loop's body: reached only through its NextIteration nodes
            stack += [self.nodes[m] for m in self.frames.member if self.nodes[m] not in order]
        while stack:
            n = stack.pop()
            if not self._known_op(n):
                missing.append((n.op, n.name))
            for f in [n.attr[k].func.name for k in ("f", "cond", "body", "then_branch", "else_branch") if k in n.attr] + [n.op]:
                if f in self.functions and f not in seen:
                    seen.add(f)
                    stack.extend(_needed(self.functions[f]))
        if missing:
            err = UnsupportedOpError([("tf", op) for op, _ in missing], graph=self.graph.name, nodes=[n for _, n in missing])
            if any(op in _V1_LOOP for op, _ in missing):
                err.args = (
                    f"{err.args[0]}; these are a TF1 while loop: pass load_tf the Keras model, SavedModel or .keras file, "
                    "or freeze with convert_variables_to_constants_v2(fn, lower_control_flow=False)",
                )
            raise err

    def _known_op(self, n: Any) -> bool:
        if n.op in _V1_LOOP:
            return self.frames is not None and n.name in self.frames.member and not self.frames.nested
        return n.op in _TF or n.op in ("Const", "Placeholder") or n.op in _SKIP or n.op in self.functions or self._loop(n)

    def _loop(self, node: Any) -> bool:
        return node.op in ("While", "StatelessWhile") and _has_functions(self, node)

    def _check_inputs(self, order: Sequence[Any]) -> None:
        placeholders = [n.name for n in order if n.op == "Placeholder"]
        if self.want_inputs is None:
            return
        for name in self.want_inputs:
            node = self.nodes.get(name)
            if node is None:
                raise GraphError(f"{self.label}: no node {name!r} for input {name!r}", graph=self.graph.name)
            if node.op != "Placeholder":
                raise GraphError(f"{self.label}: input {name!r} is a {node.op}, not a Placeholder", graph=self.graph.name)
        unfed = sorted(set(placeholders) - set(self.want_inputs))
        if unfed:
            raise GraphError(
                f"{self.label}: the outputs need placeholders {unfed} that are not among inputs={self.want_inputs}",
                graph=self.graph.name,
            )

    # -- conversion --------------------------------------------------------------------------

    def _convert(self, node: Any) -> tuple[Any, ...]:
        if node.op == "Const":
            name = (self.scope + node.name).replace("/", "_")
            return (self.graph.constant(_const(node, self.max_const_bytes, self.label), name),)
        if node.op == "Placeholder":
            return (self._placeholder(node),)
        if node.op in _SKIP:
            return ()
        args = [self.value(i, node) for i in node.input if not i.startswith("^")]
        try:
            convert = _TF.get(node.op) or (_call if node.op in self.functions else _while)
            mark = self.dilated.get(id(args[0])) if args and self.dilated else None
            if mark is not None and mark[0] is args[0]:
                return (_dilated(_Node(self, node), mark[1], args),)
            out = _layout(_Node(self, node), convert, args)
            out = convert(_Node(self, node), *args) if out is None else out
        except GraphError as exc:
            if exc.node is not None or isinstance(exc, UnsupportedOpError):
                raise
            raise GraphError(f"{node.op}: {exc}", graph=self.graph.name, node=node.name) from None
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise GraphError(f"{node.op}: cannot convert ({exc})", graph=self.graph.name, node=node.name) from None
        return out if isinstance(out, tuple) else (out,)

    def _placeholder(self, node: Any) -> Value:
        from tensorflow.dtypes import as_dtype

        dtype = np.dtype(as_dtype(node.attr["dtype"].type).as_numpy_dtype).name
        shape_attr = node.attr["shape"].shape
        name = self.renames.get(node.name, node.name)
        if shape_attr.unknown_rank and node.name not in self.shapes:
            raise GraphError(
                f"{self.label}: input {name!r} has an unknown rank; give its shape with shapes=", graph=self.graph.name
            )
        dims: list[Any] = [d.size for d in shape_attr.dim]
        given = self.shapes.get(node.name)
        if given is not None:
            if not shape_attr.unknown_rank and len(given) != len(dims):
                raise GraphError(
                    f"{self.label}: shapes[{name!r}] has {len(given)} dims, the input has {len(dims)}", graph=self.graph.name
                )
            dims = [g if g is not None else (dims[i] if i < len(dims) else -1) for i, g in enumerate(given)]
        dims = [d if isinstance(d, str) or d >= 0 else f"{name}_{i}" for i, d in enumerate(dims)]
        return self.graph.input(name, dims, dtype)

    def value(self, ref: str, consumer: Any) -> Value:
        name, index = _tensor(ref)
        outs = self.env.get(name, ())
        if index >= len(outs) or outs[index] is None:
            raise GraphError(
                f"{self.label}: tensor {ref!r} is not produced",
                graph=self.graph.name,
                node=consumer.name if consumer is not None else None,
            )
        return outs[index]

    def tf_shape(self, ref: str) -> list[int] | None:
        """The static shape TensorFlow recorded for a tensor (``_output_shapes``, which TF writes
        when asked to, as load_tf's freezing does); None when not recorded or unknown."""
        name, index = _tensor(ref)
        node = self.nodes.get(name)
        if node is _ARG:
            return self.arg_shapes.get(name)
        if node is None or "_output_shapes" not in node.attr or index >= len(node.attr["_output_shapes"].list.shape):
            return None
        shape = node.attr["_output_shapes"].list.shape[index]
        return None if shape.unknown_rank else [d.size for d in shape.dim]

    def _count(self) -> int:
        self.calls += 1
        return self.calls

    def evaluate(self, value: Value) -> np.ndarray | None:
        """The value of a tensor computed from constants only (a permutation built by AddV2), by
        aioge's own kernels on the constants it needs; None when it depends on an input."""
        return self.known.value(value)


class _Node:
    """What a converter reads: the node's attributes, and its constant inputs."""

    def __init__(self, builder: _Builder, node: Any) -> None:
        self.builder = builder
        self.node = node
        self.dilate: list[int] | None = None  # a dilation the conv's input carries (_dilated)

    def attr(self, key: str, default: Any = None) -> Any:
        if key not in self.node.attr:
            return default
        a = self.node.attr[key]
        kind = a.WhichOneof("value")
        if kind == "list":
            lst = a.list
            return list(lst.i) if lst.i else list(lst.f) if lst.f else [s.decode() for s in lst.s]
        if kind == "s":
            return a.s.decode()
        if kind == "type":
            from tensorflow.dtypes import as_dtype

            return np.dtype(as_dtype(a.type).as_numpy_dtype).name
        return getattr(a, kind) if kind else default

    def const(self, v: Value, what: str) -> np.ndarray:
        if v.is_const and v.data is not None:
            return v.data
        known = self.builder.evaluate(v)
        if known is not None:
            return known
        raise GraphError(f"{what} must be a constant in a frozen graph", graph=self.builder.graph.name, node=self.node.name)

    def maybe_const(self, v: Value) -> np.ndarray | None:
        if not isinstance(v, Value):
            return None
        return v.data if v.is_const and v.data is not None else self.builder.evaluate(v)


def _tensor(ref: str) -> tuple[str, int]:
    name, _, index = ref.partition(":")
    return name, int(index) if index else 0


def _const(node: Any, limit: int, label: str) -> np.ndarray:
    """A Const's value, its declared size checked against ``limit`` (and a splat's expansion) before decoding."""
    from tensorflow import make_ndarray
    from tensorflow.dtypes import as_dtype

    proto = node.attr["value"].tensor
    dims = [d.size for d in proto.tensor_shape.dim]
    if any(d < 0 for d in dims):
        raise GraphError(f"{label}: Const {node.name!r} declares a negative dim {dims}", node=node.name)
    try:
        itemsize = max(1, as_dtype(proto.dtype).size) if proto.dtype != 7 else 1  # DT_STRING: one byte an element at least
    except (TypeError, ValueError):
        raise GraphError(f"{label}: Const {node.name!r} has an unknown dtype {proto.dtype}", node=node.name) from None
    declared = itemsize * int(np.prod(dims, dtype=object))
    stored = len(proto.tensor_content) or proto.ByteSize()
    if declared > limit:
        raise GraphError(
            f"{label}: Const {node.name!r} declares {declared} bytes (shape {dims}), more than the {limit}-byte limit "
            "(load_tf's max_const_bytes=)",
            node=node.name,
        )
    if declared > _SPLAT_BYTES and declared > 2 * stored:
        raise GraphError(
            f"{label}: Const {node.name!r} expands its stored values to {declared} bytes (shape {dims}), more than "
            f"the {_SPLAT_BYTES}-byte limit of a splat constant",
            node=node.name,
        )
    return np.asarray(make_ndarray(proto))


# -- converters ---------------------------------------------------------------------------
# Each takes (node, *input values) and returns a value or a tuple of them.

_TO_NCHW = [0, 3, 1, 2]
_TO_NHWC = [0, 2, 3, 1]


def _nhwc(n: _Node) -> bool:
    fmt = n.attr("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise GraphError(f"data_format {fmt!r} is not supported (NHWC, NCHW)")
    return fmt == "NHWC"


def _spatial(n: _Node, key: str, nhwc: bool) -> list[int]:
    vals = n.attr(key, [1, 1, 1, 1])
    out = list(vals[1:3] if nhwc else vals[2:4])
    return [v * d for v, d in zip(out, n.dilate)] if key == "dilations" and n.dilate else out


def _padding(n: _Node, nhwc: bool) -> dict[str, Any]:
    pad = n.attr("padding")
    if pad == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if pad == "VALID":
        return {"auto_pad": "VALID"}
    if pad == "EXPLICIT":
        flat = n.attr("explicit_paddings")
        pairs = [flat[i : i + 2] for i in range(0, len(flat), 2)]
        hw = pairs[1:3] if nhwc else pairs[2:4]
        return {"pads": [hw[0][0], hw[1][0], hw[0][1], hw[1][1]]}
    raise GraphError(f"padding {pad!r} is not supported (SAME, VALID, EXPLICIT)")


def _twin(b: _Builder, x: Value) -> Value | None:
    """The NCHW value ``x`` (NHWC) is a transpose of, or None."""
    pair = b.nchw.get(id(x))
    return pair[1] if pair is not None and pair[0] is x else None


def _to_nchw(b: _Builder, x: Value) -> Value:
    twin = _twin(b, x)
    return twin if twin is not None else ops.transpose(x, perm=_TO_NCHW)


def _from_nchw(b: _Builder, t: Value) -> Value:
    out = ops.transpose(t, perm=_TO_NHWC)  # dead, and dropped, when every reader reads t
    b.nchw[id(out)] = (out, t)
    return out


def _in_nchw(n: _Node, x: Value, fn: Callable[[Value], Value]) -> Value:
    if not _nhwc(n):
        return fn(x)
    return _from_nchw(n.builder, fn(_to_nchw(n.builder, x)))


# Ops computed per element (after broadcasting): on NCHW inputs they give the NCHW result.
_POINTWISE = frozenset(
    "Identity StopGradient Snapshot Add AddV2 Sub Mul RealDiv Maximum Minimum Pow SquaredDifference BiasAdd Neg Abs "
    "Exp Log Sqrt Rsqrt Square Erf Tanh Sigmoid Relu Relu6 Elu Selu Softplus LeakyRelu FusedBatchNorm "
    "FusedBatchNormV3".split()
)
_SMALL = 4096  # elements: a non-constant operand this small may be transposed to join NCHW


def _fold_into_conv(n: _Node, args: list[Value]) -> Value | None:
    """BiasAdd or inference FusedBatchNorm of a Conv's NCHW result, with constant weights and
    parameters, as one Conv with scaled weights and a bias (the product taken in float64)."""
    conv = _twin(n.builder, args[0])
    conv_node = conv.producer if conv is not None else None
    if n.node.op not in ("BiasAdd", "FusedBatchNorm", "FusedBatchNormV3") or conv_node is None or conv_node.op_type != "Conv":
        return None
    params = [n.maybe_const(a) for a in args[1:5]]
    w_in = conv_node.inputs[1]
    w = w_in.data if w_in is not None and w_in.is_const else None
    b_in = conv_node.inputs[2] if len(conv_node.inputs) > 2 else None
    if w is None or any(p is None for p in params) or b_in is not None and not b_in.is_const or n.attr("is_training", False):
        return None
    b64 = np.zeros(w.shape[0]) if b_in is None else np.asarray(b_in.data, np.float64)
    if n.node.op == "BiasAdd":
        a, shift = np.ones(w.shape[0]), params[0].astype(np.float64).reshape(-1)  # type: ignore[union-attr]
    else:
        scale, offset, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
        a = scale / np.sqrt(var + float(n.attr("epsilon", 1e-3)))
        shift = offset - mean * a
    if a.shape != (w.shape[0],) or shift.shape != (w.shape[0],):
        return None
    w2 = (w.astype(np.float64) * a.reshape(-1, 1, 1, 1)).astype(w.dtype)
    g = n.builder.graph
    inputs = [conv_node.inputs[0], g.constant(w2), g.constant((b64 * a + shift).astype(w.dtype))]
    return ops.apply("Conv", inputs, dict(conv_node.attrs), graph=g)[0]


def _reshape_to_channels(n: _Node, convert: Callable[..., Any], args: list[Value]) -> Value:
    """Reshape of [N, C] to [N, 1, 1, C] (a squeeze-and-excite's scales): the same data is
    [N, C, 1, 1], so the result gets that as its NCHW twin."""
    x, out = args[0], convert(n, *args)
    if x.shape is None or len(x.shape) != 2 or out.shape is None or tuple(out.shape) != (x.shape[0], 1, 1, x.shape[1]):
        return out
    n.builder.nchw[id(out)] = (out, ops.unsqueeze(x, np.array([2, 3], np.int64)))
    return out


def _layout(n: _Node, convert: Callable[..., Any], args: list[Value]) -> tuple[Any, ...] | Value | None:
    """Convert a pointwise op, Pad or reduction reading NHWC values that have NCHW twins on
    those twins (the result gets a twin of its own); None when it cannot (then as usual)."""
    b, op = n.builder, n.node.op
    if op == "Reshape":
        return _reshape_to_channels(n, convert, args)
    axis = n.maybe_const(args[-1]) if op == "ConcatV2" and len(args) > 2 else None
    if axis is not None and axis.size == 1 and all(_twin(b, a) is not None and len(a.shape or ()) == 4 for a in args[:-1]):
        # NASNet's cells: NCHW twins concatenated as they are, not each moved to NHWC and back
        return _from_nchw(b, ops.concat(*[_twin(b, a) for a in args[:-1]], axis=_TO_NHWC[int(axis) % 4]))
    if not args or _twin(b, args[0]) is None and not (op in _POINTWISE and any(_twin(b, a) is not None for a in args)):
        return None
    second = n.maybe_const(args[1]) if len(args) > 1 else None
    if op in ("Pad", "PadV2") and second is not None and second.shape == (4, 2):
        p = second.astype(np.int64)[_TO_NCHW]
        value = args[2] if len(args) > 2 else np.asarray(0, args[0].dtype)
        return _from_nchw(b, ops.pad(_twin(b, args[0]), np.concatenate([p[:, 0], p[:, 1]]), value))
    if op in ("Mean", "Sum", "Max", "Min") and second is not None:
        axes = sorted({_TO_NHWC[int(a) % 4] for a in second.reshape(-1)})
        keep = bool(n.attr("keep_dims", False))
        if not keep and [a for a in _TO_NHWC if a not in axes] != [a for a in range(4) if a not in axes]:
            return None  # the kept axes would come out in another order
        out = convert(n, _twin(b, args[0]), b.graph.constant(np.asarray(axes, np.int64)))
        return _from_nchw(b, out) if keep else out
    if op not in _POINTWISE:
        return None
    folded = _fold_into_conv(n, args)
    if folded is not None:
        return (_from_nchw(b, folded),)
    moved: list[Value | np.ndarray] = []
    for a in args:
        twin = _twin(b, a)
        data = n.maybe_const(a)
        if twin is not None:
            moved.append(twin)
        elif data is not None and data.ndim <= 4:
            full = data.reshape((1,) * (4 - data.ndim) + data.shape) if data.ndim else data
            moved.append(np.ascontiguousarray(full.transpose(_TO_NCHW)) if data.ndim else data)
        elif a.shape is not None and len(a.shape) == 4 and all(isinstance(d, int) for d in a.shape):
            if int(np.prod([int(d) for d in a.shape])) > _SMALL:
                return None
            moved.append(ops.transpose(a, perm=_TO_NCHW))
        else:
            return None
    out = convert(n, *[m if isinstance(m, Value) else b.graph.constant(m) for m in moved])
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(_from_nchw(b, o) for o in outs)


def _filter(w: Value, perm: list[int]) -> Value | np.ndarray:
    return np.ascontiguousarray(w.data.transpose(perm)) if w.is_const and w.data is not None else ops.transpose(w, perm=perm)


def _conv2d(n: _Node, x: Value, w: Value) -> Value:
    nhwc = _nhwc(n)
    attrs = {"strides": _spatial(n, "strides", nhwc), "dilations": _spatial(n, "dilations", nhwc), **_padding(n, nhwc)}
    kernel = _filter(w, [3, 2, 0, 1])  # HWIO -> OIHW
    shape = x.shape if x.shape is not None else n.builder.tf_shape(n.node.input[0])
    wshape = w.shape if w.shape is not None else n.builder.tf_shape(n.node.input[1])
    channels = shape[3 if nhwc else 1] if shape is not None and len(shape) == 4 else None
    per_group = wshape[2] if wshape is not None and len(wshape) == 4 else None
    if isinstance(channels, int) and isinstance(per_group, int) and 0 < per_group != channels:
        attrs["group"] = channels // per_group  # a grouped convolution: the filter holds C / groups inputs
    return _conv_nchw(n, x, kernel, attrs)


def _conv_nchw(n: _Node, x: Value, kernel: Value | np.ndarray, attrs: dict[str, Any]) -> Value:
    """Conv of NHWC ``x``; a VALID one reading a zero Pad of H and W (Keras ZeroPadding2D,
    MobileNet's stride-2 pads) takes the pads and reads the Pad's input."""
    if not _nhwc(n):
        return ops.conv(x, kernel, **attrs)
    padded = _zero_padded(n, x) if attrs.get("auto_pad") == "VALID" else None
    if padded is not None:
        rest = {k: v for k, v in attrs.items() if k != "auto_pad"}
        return _from_nchw(n.builder, ops.conv(padded[0], kernel, **rest, pads=padded[1]))
    return _from_nchw(n.builder, ops.conv(_to_nchw(n.builder, x), kernel, **attrs))


def _zero_padded(n: _Node, x: Value) -> tuple[Value, list[int], Value] | None:
    """(the NCHW input, its H and W pads [top, left, bottom, right], the Pad's NHWC-or-NCHW
    input) when NHWC ``x`` (or its NCHW twin) is a zero Pad of H and W alone."""
    twin = _twin(n.builder, x)
    pad, hw = (twin.producer, [2, 3, 6, 7]) if twin is not None else (x.producer, [1, 2, 5, 6])
    if pad is None or pad.op_type != "Pad" or pad.attrs.get("mode", "constant") != "constant" or len(pad.inputs) > 3:
        return None
    p = pad.inputs[1].data if pad.inputs[1] is not None and pad.inputs[1].is_const else None
    fill = pad.inputs[2] if len(pad.inputs) > 2 else None
    zero = fill is None or fill.is_const and fill.data is not None and not np.any(fill.data)
    if p is None or p.shape != (8,) or not zero or p.min() < 0 or p.sum() != p[hw].sum() or pad.inputs[0] is None:
        return None
    source = pad.inputs[0] if twin is not None else _to_nchw(n.builder, pad.inputs[0])
    return source, [int(v) for v in p[hw]], pad.inputs[0]


def _non_negative(v: Value) -> bool:
    """Whether ``v`` is >= 0 wherever it is defined by what makes it (a Relu, a Clip at >= 0, a Sigmoid)."""
    node = v.producer
    if node is None:
        return False
    if node.op_type in ("Relu", "Sigmoid", "Softplus", "Abs", "HardSigmoid"):
        return True
    low = node.inputs[1] if node.op_type == "Clip" and len(node.inputs) > 1 else None
    return low is not None and low.is_const and low.data is not None and float(low.data) >= 0


def _depthwise(n: _Node, x: Value, w: Value) -> Value:
    nhwc = _nhwc(n)
    wd = n.const(w, "the depthwise filter")  # H W C M -> (C*M) 1 H W, one group per input channel
    h, wid, c, m = wd.shape
    kernel = np.ascontiguousarray(wd.transpose(2, 3, 0, 1).reshape(c * m, 1, h, wid))
    attrs = {
        "strides": _spatial(n, "strides", nhwc),
        "dilations": _spatial(n, "dilations", nhwc),
        "group": int(c),
        **_padding(n, nhwc),
    }
    return _conv_nchw(n, x, kernel, attrs)


def _conv_backprop_input(n: _Node, sizes: Value, w: Value, x: Value) -> Value:
    """Conv2DBackpropInput / Conv3DBackpropInputV2 (Keras Conv2DTranspose, Conv3DTranspose) as
    ConvTranspose: TF names the output size, ONNX takes pads and an output_padding; both are
    worked out from the forward conv's padding."""
    op = n.node.op
    rank = 5 if op.startswith("Conv3D") else 4
    if rank == 5:
        last, strides, dilations, pad = _nd(n, 5)
    else:
        last = _nhwc(n)
        strides, dilations, pad = _spatial(n, "strides", last), _spatial(n, "dilations", last), _padding(n, last)
    sp = slice(1, rank - 1) if last else slice(2, rank)
    out = _partial(n.builder, n.node.input[0])
    found = None if out is None or len(out) != rank else out[sp]
    ws = w.shape if w.shape is not None else n.builder.tf_shape(n.node.input[1])
    if found is None or not all(isinstance(d, int) for d in found) or ws is None or not all(isinstance(d, int) for d in ws):
        raise GraphError(f"{op} needs a static output size and filter shape")
    hw = [int(d) for d in found if isinstance(d, int)]
    shape = x.shape if x.shape is not None else n.builder.tf_shape(n.node.input[2])
    ins = shape[sp] if shape is not None and len(shape) == rank else None
    if ins is None or not all(isinstance(d, int) for d in ins):
        raise GraphError(f"{op} needs a static input size")
    begin, extra = [], []
    for i in range(rank - 2):
        span = (int(ws[i]) - 1) * dilations[i] + 1
        full = (int(ins[i]) - 1) * strides[i] + span  # the transposed conv's output before padding
        if "pads" in pad:
            before, after = pad["pads"][i], pad["pads"][i + rank - 2]
        elif pad["auto_pad"] == "SAME_UPPER":
            total = max((int(ins[i]) - 1) * strides[i] + span - int(hw[i]), 0)
            before, after = total // 2, total - total // 2
        else:
            before = after = 0
        begin.append((before, after))
        extra.append(int(hw[i]) - (full - before - after))
    if min(extra) < 0:
        raise GraphError(f"{op}: output size {list(hw)} is smaller than its input gives")
    kernel = _filter(w, [rank - 1, rank - 2, *range(rank - 2)])  # spatial O I -> I O spatial
    pads = [p for p, _ in begin] + [p for _, p in begin]

    def conv(t: Value) -> Value:
        return ops.conv_transpose(t, kernel, strides=strides, dilations=dilations, pads=pads, output_padding=extra)

    return _in_nchw(n, x, conv) if rank == 4 else _channels_first(last, 5, x, conv)


def _nd(n: _Node, rank: int) -> tuple[bool, list[int], list[int], dict[str, Any]]:
    """A 3-D conv's or pool's (channels last, strides, dilations, padding), for any spatial rank."""
    fmt = n.attr("data_format", "NDHWC")
    if fmt not in ("NDHWC", "NCDHW"):
        raise GraphError(f"data_format {fmt!r} is not supported (NDHWC, NCDHW)")
    last = fmt == "NDHWC"
    sp = slice(1, rank - 1) if last else slice(2, rank)
    strides, dilations = list(n.attr("strides", [1] * rank))[sp], list(n.attr("dilations", [1] * rank))[sp]
    if n.dilate:
        dilations = [d * e for d, e in zip(dilations, n.dilate)]
    pad = n.attr("padding")
    if pad not in ("SAME", "VALID"):
        raise GraphError(f"padding {pad!r} is not supported (SAME, VALID)")
    return last, strides, dilations, {"auto_pad": "SAME_UPPER" if pad == "SAME" else "VALID"}


def _channels_first(last: bool, rank: int, x: Value, fn: Callable[[Value], Value]) -> Value:
    if not last:
        return fn(x)
    t = fn(ops.transpose(x, perm=[0, rank - 1, *range(1, rank - 1)]))
    return ops.transpose(t, perm=[0, *range(2, rank), 1])


def _conv3d(n: _Node, x: Value, w: Value) -> Value:
    last, strides, dilations, pad = _nd(n, 5)
    kernel = _filter(w, [4, 3, 0, 1, 2])  # DHWIO -> OIDHW
    attrs: dict[str, Any] = {"strides": strides, "dilations": dilations, **pad}
    channels = x.shape[4 if last else 1] if x.shape is not None and len(x.shape) == 5 else None
    per_group = w.shape[3] if w.shape is not None and len(w.shape) == 5 else None
    if isinstance(channels, int) and isinstance(per_group, int) and 0 < per_group != channels:
        attrs["group"] = channels // per_group
    return _channels_first(last, 5, x, lambda t: ops.conv(t, kernel, **attrs))


def _pool3d(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(n: _Node, x: Value) -> Value:
        last, strides, _, pad = _nd(n, 5)
        kernel = list(n.attr("ksize"))[1:4] if last else list(n.attr("ksize"))[2:5]
        return _channels_first(last, 5, x, lambda t: op(t, kernel_shape=kernel, strides=strides, **pad))

    return convert


def _resize(mode: str) -> Callable[..., Value]:
    """ResizeBilinear / ResizeNearestNeighbor / ResizeBicubic of NHWC images to ``size`` (H, W),
    with TF's align_corners and half_pixel_centers as Resize's coordinate modes."""

    def convert(n: _Node, x: Value, size: Value) -> Value:
        hw = [int(s) for s in n.const(size, "the size").reshape(-1)]
        corners, half = bool(n.attr("align_corners", False)), bool(n.attr("half_pixel_centers", False))
        coords = "align_corners" if corners else "half_pixel" if half else "asymmetric"
        # TF's nearest: floor((y + 0.5) * in / out) with half pixels (= round_prefer_ceil of
        # ONNX's half_pixel coordinate), round with align_corners, else floor.
        nearest = "floor" if not (corners or half) else "round_prefer_ceil"
        if mode != "nearest" and x.dtype != "float32":
            x = ops.cast(x, to="float32")  # TF's bilinear and bicubic resizes give float32

        def resize(t: Value) -> Value:
            return ops.resize(
                t,
                None,
                None,
                np.array(hw, np.int64),
                mode=mode,
                coordinate_transformation_mode=coords,
                nearest_mode=nearest,
                cubic_coeff_a=-0.5 if half else -0.75,  # half pixels: Keys' cubic, taps outside dropped
                exclude_outside=int(half and mode == "cubic"),
                axes=[2, 3],
            )

        return _in_nchw(n, x, resize)

    return convert


def _area_weights(n_in: int, n_out: int, corners: bool) -> np.ndarray:
    """ResizeArea along one axis: each output cell averages the input cells its span overlaps, by overlap."""
    scale = (n_in - 1) / (n_out - 1) if corners and n_out > 1 else n_in / n_out
    w = np.zeros((n_out, n_in), np.float64)
    for o in range(n_out):
        lo, hi = o * scale, (o + 1) * scale
        for i in range(int(np.floor(lo)), min(int(np.ceil(hi)), n_in + 1)):
            w[o, min(i, n_in - 1)] += (min(i + 1, hi) - max(i, lo)) / scale
    return w.astype(np.float32)


def _resize_area(n: _Node, x: Value, size: Value) -> Value:
    """ResizeArea of NHWC images as two constant matmuls, one per spatial axis (area weights are separable)."""
    hw = [int(s) for s in n.const(size, "the size").reshape(-1)]
    shape = x.shape if x.shape is not None else n.builder.tf_shape(n.node.input[0])
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[1:3]):
        raise GraphError("ResizeArea needs a static input height and width")
    corners = bool(n.attr("align_corners", False))
    wh, ww = (_area_weights(int(d), o, corners) for d, o in zip(shape[1:3], hw))
    x = x if x.dtype == "float32" else ops.cast(x, to="float32")
    return ops.einsum(wh, ops.einsum(ww, x, equation="pw,nhwc->nhpc"), equation="oh,nhpc->nopc")


# ScaleAndTranslate's kernels: (radius, weight of |distance|), as TF's sampling_kernels (np.sinc: sin(pi x) / (pi x))
_KERNELS: dict[str, tuple[float, Callable[[np.ndarray], np.ndarray]]] = {
    "lanczos3": (3.0, lambda x: np.sinc(x) * np.sinc(x / 3)),
    "lanczos5": (5.0, lambda x: np.sinc(x) * np.sinc(x / 5)),
    "gaussian": (1.5, lambda x: np.exp(-2.0 * x * x)),  # sigma 1/2, radius 3 sigma
    "triangle": (1.0, lambda x: np.maximum(1.0 - x, 0.0)),
    "keyscubic": (2.0, lambda x: np.where(x < 1, (1.5 * x - 2.5) * x * x + 1, ((-0.5 * x + 2.5) * x - 4) * x + 2)),
    "mitchellcubic": (
        2.0,
        lambda x: np.where(x < 1, (7 / 6 * x - 2) * x * x + 8 / 9, ((-7 / 18 * x + 2) * x - 10 / 3) * x + 16 / 9),
    ),
}


def _scale_weights(n_in: int, n_out: int, scale: float, shift: float, kernel: str, antialias: bool) -> np.ndarray:
    """ScaleAndTranslate along one axis, as TF computes its spans: (n_out, n_in) normalised kernel weights."""
    radius, fn = _KERNELS[kernel]
    inv = 1.0 / scale
    kscale = max(inv, 1.0) if antialias else 1.0
    w = np.zeros((n_out, n_in), np.float64)
    for o in range(n_out):
        sample = (o + 0.5) * inv - inv * shift
        if sample < 0 or sample > n_in:
            continue
        lo = min(max(int(np.ceil(sample - radius * kscale - 0.5)), 0), n_in - 1)
        hi = min(max(int(np.floor(sample + radius * kscale - 0.5)), 0), n_in - 1) + 1
        src = np.arange(lo, hi)
        dist = np.abs((src + 0.5 - sample) / kscale)
        k = np.where(dist < radius, fn(dist), 0.0).astype(np.float32).astype(np.float64)
        total = k.sum()
        w[o, lo:hi] = k / total if abs(total) >= 1000 * np.finfo(np.float32).eps else k
    return w.astype(np.float32)


def _scale_and_translate(n: _Node, x: Value, size: Value, scale: Value, shift: Value) -> Value:
    """ScaleAndTranslate (tf.image.resize's lanczos, gaussian, mitchellcubic and antialiased
    methods) of NHWC images as two constant matmuls, one per spatial axis."""
    hw = [int(s) for s in n.const(size, "the size").reshape(-1)]
    sc, tr = n.const(scale, "the scale").reshape(-1), n.const(shift, "the translation").reshape(-1)
    shape = x.shape if x.shape is not None else n.builder.tf_shape(n.node.input[0])
    kernel = n.attr("kernel_type", "lanczos3")
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[1:3]) or kernel not in _KERNELS:
        raise GraphError(f"ScaleAndTranslate needs a static input height and width and a known kernel (got {kernel!r})")
    anti = bool(n.attr("antialias", True))
    wh, ww = (_scale_weights(int(d), o, float(a), float(t), kernel, anti) for d, o, a, t in zip(shape[1:3], hw, sc, tr))
    x = x if x.dtype == "float32" else ops.cast(x, to="float32")
    return ops.einsum(wh, ops.einsum(ww, x, equation="pw,nhwc->nhpc"), equation="oh,nhpc->nopc")


def _space_to_batch(n: _Node, x: Value, block: Value, paddings: Value) -> Value:
    """SpaceToBatchND: pad the M spatial dims, split each into (dim / b, b), move the b's to the front of the batch."""
    bs = [int(v) for v in n.const(block, "the block shape").reshape(-1)]
    m = len(bs)
    p = n.const(paddings, "the paddings").astype(np.int64).reshape(m, 2)
    if x.shape is not None and _dilated_conv_chain(n, bs):
        # TF's dilated conv: the padded x stands for its space-to-batched self; the conv dilates, BatchToSpaceND crops
        rank = len(x.shape)
        full = np.zeros((rank, 2), np.int64)
        full[1 : m + 1] = p
        out = ops.pad(x, np.concatenate([full[:, 0], full[:, 1]]), np.asarray(0, x.dtype)) if p.any() else ops.identity(x)
        n.builder.dilated[id(out)] = (out, [1, *bs] + [1] * (rank - 1 - m))
        return out
    shape = x.shape if x.shape is not None else n.builder.tf_shape(n.node.input[0])
    if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape[1:]):
        raise GraphError("SpaceToBatchND needs static dims after the batch")
    dims = [int(d) for d in shape[1:]]
    rank = len(dims) + 1
    full = np.zeros((rank, 2), np.int64)
    full[1 : m + 1] = p
    x = ops.pad(x, np.concatenate([full[:, 0], full[:, 1]]), np.asarray(0, x.dtype)) if p.any() else x
    padded = [dims[i] + int(p[i].sum()) for i in range(m)]
    if any(d % b for d, b in zip(padded, bs)):
        raise GraphError(f"SpaceToBatchND: padded dims {padded} are not multiples of the block shape {bs}")
    split = [-1] + [v for d, b in zip(padded, bs) for v in (d // b, b)] + dims[m:]
    x = ops.reshape(x, np.array(split, np.int64))
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(2 * m + 1, 2 * m + 1 + rank - 1 - m))
    x = ops.transpose(x, perm=perm)
    return ops.reshape(x, np.array([-1] + [d // b for d, b in zip(padded, bs)] + dims[m:], np.int64))


_CONVS = frozenset({"Conv2D", "DepthwiseConv2dNative", "Conv3D"})


def _dilated_conv_chain(n: _Node, bs: list[int]) -> bool:
    """Whether this SpaceToBatchND's only reader chain is [ExpandDims] -> a stride-1 VALID
    undilated conv -> [Squeeze] -> BatchToSpaceND with the same blocks (as TF builds a dilated conv)."""
    nodes = n.builder.nodes
    at, conv = n.node, None
    while True:
        refs = (at.name, at.name + ":0")
        readers = [r for r in nodes.values() if r is not _ARG and any(i in refs for i in r.input)]
        if len(readers) != 1 or readers[0].input[0] not in refs or sum(i in refs for i in readers[0].input) > 1:
            return False
        at = readers[0]
        if at.op in _CONVS and at.op in _TF and conv is None:
            ones = [1] * len(at.attr["strides"].list.i)
            plain = list(at.attr["strides"].list.i) == ones and list(at.attr["dilations"].list.i or ones) == ones
            if not plain or at.attr["padding"].s != b"VALID":
                return False
            conv = at
        elif at.op == "BatchToSpaceND":
            block = nodes.get(_tensor(at.input[1])[0])
            if conv is None or block is None or block is _ARG or block.op != "Const":
                return False
            return [int(v) for v in _const(block, 1 << 10, n.builder.label).reshape(-1)] == bs
        elif at.op not in ("ExpandDims", "Squeeze", "Identity"):
            return False


def _dilated(n: _Node, dil: list[int], args: list[Value]) -> Value:
    """One op of a dilated conv's chain (_dilated_conv_chain) on the value standing for the
    space-to-batched one: its result stands for the op's result, blocks following their axes."""
    op, x, b = n.node.op, args[0], n.builder
    rank = len(dil)
    if op == "Identity":
        return x
    if op == "ExpandDims":
        axis = int(n.const(args[1], "the axis").reshape(-1)[0]) % (rank + 1)
        out, dil = _expand_dims(n, *args), dil[:axis] + [1] + dil[axis:]
    elif op == "Squeeze":
        axes = {int(a) % rank for a in n.attr("squeeze_dims", [])}
        if not axes or any(dil[a] != 1 for a in axes):
            raise GraphError("a dilated conv's Squeeze must name its axes, none of them dilated")
        out, dil = _squeeze(n, x), [d for i, d in enumerate(dil) if i not in axes]
    elif op in _CONVS:
        spatial = list(range(1, rank - 1)) if n.attr("data_format", "NHWC").endswith("C") else list(range(2, rank))
        if any(dil[i] != 1 for i in range(rank) if i not in spatial):
            raise GraphError("a dilated conv's blocks must be on its spatial axes")
        n.dilate = [dil[i] for i in spatial]
        out = _TF[op](n, *args)
    else:  # BatchToSpaceND: the conv's result already is the whole space; its crops remain
        crops = n.const(args[2], "the crops").astype(np.int64).reshape(-1, 2)
        del b.dilated[id(x)]  # the chain's only reader: what reads on reads the plain value
        if not crops.any():
            return x
        ends = np.array([-c if c else _BIG for c in crops[:, 1]], np.int64)
        return ops.slice(x, crops[:, 0].copy(), ends, np.arange(1, len(crops) + 1, dtype=np.int64))
    b.dilated[id(out)] = (out, dil)
    return out


def _batch_to_space(n: _Node, x: Value, block: Value, crops: Value) -> Value:
    """BatchToSpaceND: SpaceToBatchND undone, then the crops."""
    bs = [int(v) for v in n.const(block, "the block shape").reshape(-1)]
    m = len(bs)
    c = n.const(crops, "the crops").astype(np.int64).reshape(m, 2)
    shape = x.shape if x.shape is not None else n.builder.tf_shape(n.node.input[0])
    if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape[1:]):
        raise GraphError("BatchToSpaceND needs static dims after the batch")
    dims = [int(d) for d in shape[1:]]
    x = ops.reshape(x, np.array(bs + [-1] + dims, np.int64))
    perm = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + list(range(2 * m + 1, m + 1 + len(dims)))
    x = ops.transpose(x, perm=perm)
    x = ops.reshape(x, np.array([-1] + [d * b for d, b in zip(dims[:m], bs)] + dims[m:], np.int64))
    if not c.any():
        return x
    ends = [d * b - int(c[i, 1]) for i, (d, b) in enumerate(zip(dims[:m], bs))]
    return ops.slice(x, c[:, 0].copy(), np.array(ends, np.int64), np.arange(1, m + 1, dtype=np.int64))


def _any_all(op: Callable[..., Value]) -> Callable[..., Value]:
    """Any / All of bools as ReduceMax / ReduceMin of 0/1."""

    def convert(n: _Node, x: Value, axes: Value) -> Value:
        out = _reduce(op)(n, ops.cast(x, to="int32"), axes)
        return ops.cast(out, to="bool")

    return convert


def _pool(op: Callable[..., Value]) -> Callable[..., Value]:
    """MaxPool / AvgPool; a VALID one reading a zero Pad of H and W takes the pads: an
    average counting them (count_include_pad), a max over values >= 0 (a padded 0 never wins)."""

    def convert(n: _Node, x: Value) -> Value:
        nhwc = _nhwc(n)
        attrs = {"kernel_shape": _spatial(n, "ksize", nhwc), "strides": _spatial(n, "strides", nhwc), **_padding(n, nhwc)}
        padded = _zero_padded(n, x) if nhwc and attrs["auto_pad"] == "VALID" else None
        within = padded is not None and all(p < k for p, k in zip(padded[1], attrs["kernel_shape"] * 2))
        if padded is not None and within and (op is ops.average_pool or _non_negative(padded[2])):
            del attrs["auto_pad"]
            extra = {"count_include_pad": 1} if op is ops.average_pool else {}
            return _from_nchw(n.builder, op(padded[0], **attrs, pads=padded[1], **extra))
        return _in_nchw(n, x, lambda t: op(t, **attrs))

    return convert


def _bias_add(n: _Node, x: Value, b: Value) -> Value:
    if _nhwc(n):
        return ops.add(x, b)
    rank = len(x.shape or ())
    return ops.add(x, ops.reshape(b, np.array([-1] + [1] * (rank - 2), np.int64)))


def _fused_batch_norm(
    n: _Node, x: Value, scale: Value, offset: Value, mean: Value, var: Value, *rest: Value
) -> tuple[Value, ...]:
    if n.attr("is_training", False):
        raise GraphError("FusedBatchNorm in training mode is not an inference graph")
    eps = float(n.attr("epsilon", 1e-3))
    a = ops.mul(scale, ops.reciprocal(ops.sqrt(ops.add(var, np.asarray(eps, var.dtype)))))
    b = ops.sub(offset, ops.mul(mean, a))
    if not _nhwc(n):
        shape = np.array([-1, 1, 1], np.int64)
        a, b = ops.reshape(a, shape), ops.reshape(b, shape)
    return (ops.add(ops.mul(x, a), b),)


def _matmul(n: _Node, a: Value, b: Value) -> Value:
    if n.attr("transpose_a", False) or n.attr("adj_x", False):
        a = ops.transpose(a, perm=_swap_last(len(a.shape or ())))
    if n.attr("transpose_b", False) or n.attr("adj_y", False):
        b = ops.transpose(b, perm=_swap_last(len(b.shape or ())))
    flat = _unflattened(a)
    if flat is not None and b.shape is not None and len(b.shape) == 2:
        # Tensordot's Reshape(x, [-1, K]) @ W: x @ W keeps x's dims (a -1 over a symbolic batch
        # loses the shape, and later a grouped Conv2D needs its channels), then flattened alike.
        return ops.reshape(ops.matmul(flat, b), np.array([-1, b.shape[1]], np.int64))
    return ops.matmul(a, b)


def _unflattened(a: Value) -> Value | None:
    """``x`` when ``a`` is an unknown-shaped Reshape of ``x`` (of known shape) to [-1, x's last dim]."""
    node = a.producer
    if a.shape is not None or node is None or node.op_type != "Reshape":
        return None
    x, target = node.inputs[0], node.inputs[1]
    if x is None or x.shape is None or len(x.shape) < 2 or target is None or not target.is_const or target.data is None:
        return None
    t = [int(d) for d in np.asarray(target.data).reshape(-1)]
    return x if len(t) == 2 and t[0] == -1 and t[1] == x.shape[-1] else None


def _swap_last(rank: int) -> list[int]:
    if rank < 2:
        raise GraphError("a transposed matmul operand needs a known rank of at least 2")
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


def _reduce(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(n: _Node, x: Value, axes: Value) -> Value:
        ax = axes if not axes.is_const else np.asarray(axes.data, np.int64).reshape(-1)
        if not isinstance(ax, np.ndarray):
            ax = ops.cast(ops.reshape(ax, np.array([-1], np.int64)), to="int64")
        return op(x, ax, keepdims=int(bool(n.attr("keep_dims", False))))

    return convert


def _int64(n: _Node, v: Value) -> Value | np.ndarray:
    """An int64 operand: the value when constants give it (so shapes stay inferable), else a cast."""
    known = n.maybe_const(v)
    if known is not None:
        return np.asarray(known, np.int64)
    return v if v.dtype == "int64" else ops.cast(v, to="int64")


def _partial(b: _Builder, ref: str, depth: int = 0) -> list[int | str | None] | None:
    """The entries of a 1-D int tensor that the graph fixes at load time (a dim's symbol, or
    None, where it is known only at run time): Keras builds ``Reshape`` shapes as Pack(batch, consts)."""
    name, index = _tensor(ref)
    node, value = b.nodes.get(name), b.env.get(name, ())[index : index + 1]
    if node is None or not value or depth > 8:
        return None
    known = b.evaluate(value[0]) if value[0] is not None else None
    if known is not None:
        return [int(k) for k in np.asarray(known).reshape(-1)]
    args = [i for i in node.input if not i.startswith("^")]
    if node.op in ("Cast", "Identity"):
        return _partial(b, args[0], depth + 1)
    if node.op == "StridedSlice" and node.attr["shrink_axis_mask"].i == 1 and len(args) == 4:
        whole, at = _partial(b, args[0], depth + 1), b.evaluate(b.value(args[1], None))
        if whole is not None and at is not None and -len(whole) <= int(at.reshape(-1)[0]) < len(whole):
            return [whole[int(at.reshape(-1)[0])]]
    if node.op in ("Pack", "ConcatV2"):
        parts = [_partial(b, a, depth + 1) for a in (args if node.op == "Pack" else args[:-1])]
        return None if any(p is None for p in parts) else [x for p in parts for x in p]  # type: ignore[union-attr]
    if node.op == "GatherV2" and len(args) == 3:
        src, at, axis = _partial(b, args[0], depth + 1), b.evaluate(b.value(args[1], None)), b.evaluate(b.value(args[2], None))
        if src is not None and at is not None and axis is not None and int(axis) == 0 and at.ndim <= 1:
            return [src[int(i)] for i in at.reshape(-1)]
    if node.op == "Prod" and len(args) == 2:
        src = _partial(b, args[0], depth + 1)
        if src is not None and all(isinstance(d, int) for d in src):
            return [int(np.prod([int(d) for d in src if isinstance(d, int)], dtype=np.int64))]
        return [None] if src is not None and not node.attr["keep_dims"].b else None
    if node.op == "Shape":
        shape_of = b.value(args[0], None)
        return None if shape_of.shape is None else list(shape_of.shape)
    shape = value[0].shape
    if shape is not None and len(shape) <= 1 and all(isinstance(d, int) for d in shape):
        return [None] * int(np.prod(shape, dtype=np.int64))
    return None


def _reshape(n: _Node, x: Value, shape: Value) -> Value:
    inner = x.producer
    if x.shape is None and inner is not None and inner.op_type == "Reshape" and inner.inputs[0] is not None:
        x = inner.inputs[0]  # a reshape of a reshape reshapes the original: its shape may be known
    part = _partial(n.builder, n.node.input[1]) if n.maybe_const(shape) is None else None
    if part is not None and x.shape is not None:
        # a run-time dim is the input's own dim at the same place (copied: 0), or the one -1
        part = [0 if isinstance(p, str) and i < len(x.shape) and x.shape[i] == p else p for i, p in enumerate(part)]
        if sum(not isinstance(p, int) or p < 0 for p in part) <= 1:
            return ops.reshape(x, np.array([p if isinstance(p, int) else -1 for p in part], np.int64))
    return ops.reshape(x, _int64(n, shape))


def _squeeze(n: _Node, x: Value) -> Value:
    dims = n.attr("squeeze_dims", [])
    return ops.squeeze(x, np.array(dims, np.int64)) if dims else ops.squeeze(x)


def _expand_dims(n: _Node, x: Value, axis: Value) -> Value:
    return ops.unsqueeze(x, np.asarray(n.const(axis, "the axis"), np.int64).reshape(-1))


def _transpose(n: _Node, x: Value, perm: Value) -> Value:
    order = [int(p) for p in n.const(perm, "the permutation").reshape(-1)]
    return x if order == list(range(len(order))) else ops.transpose(x, perm=order)  # Tensordot's identity


def _concat(n: _Node, *args: Value) -> Value:
    *parts, axis = args
    return ops.concat(*parts, axis=int(n.const(axis, "the axis")))


def _pack(n: _Node, *parts: Value) -> Value:
    axis = np.array([int(n.attr("axis", 0))], np.int64)
    return ops.concat(*[ops.unsqueeze(p, axis) for p in parts], axis=int(axis[0]))


def _gather(n: _Node, x: Value, idx: Value, axis: Value) -> Value:
    if n.attr("batch_dims", 0):
        raise GraphError("GatherV2 with batch_dims is not supported")
    return ops.gather(x, idx, axis=int(n.const(axis, "the axis")))


def _shape(n: _Node, x: Value) -> Value:
    out = ops.shape(x)
    dtype = n.attr("out_type", "int32")
    return out if dtype == "int64" else ops.cast(out, to=dtype)


def _cast(n: _Node, x: Value) -> Value:
    dtype = n.attr("DstT")
    return x if x.dtype == dtype else ops.cast(x, to=dtype)


def _softmax(n: _Node, x: Value) -> Value:
    return ops.softmax(x, axis=-1)


def _einsum(n: _Node, *xs: Value) -> Value:
    """Einsum; a batched product of two operands (Keras' attention: ``BTNH,BSNH->BNTS``,
    ``BNTS,BSNH->BTNH``) as MatMul between the transposes it needs, which have C forms."""
    eq = n.attr("equation").replace(" ", "")
    terms, _, out = eq.partition("->")
    ins = terms.split(",")
    if len(xs) == 2 and out and len(ins) == 2 and all(len(set(t)) == len(t) and t.isalpha() for t in (*ins, out)):
        a, b = ins
        batch = [c for c in out if c in a and c in b]
        m, k, n_ = [c for c in a if c not in b], [c for c in a if c in b and c not in out], [c for c in b if c not in a]
        if len(m) == len(k) == len(n_) == 1 and set(a) | set(b) == set(out) | set(k) and set(b) <= set(out) | set(k):
            lhs = _permute(xs[0], a, "".join(batch) + m[0] + k[0])
            y = ops.matmul(lhs, _permute(xs[1], b, "".join(batch) + k[0] + n_[0]))
            return _permute(y, "".join(batch) + m[0] + n_[0], out)
    return ops.einsum(*xs, equation=eq)


def _permute(x: Value, have: str, want: str) -> Value:
    return x if have == want else ops.transpose(x, perm=[have.index(c) for c in want])


def _unary(op: Callable[..., Value]) -> Callable[..., Value]:
    return lambda n, x: op(x)


def _binary(op: Callable[..., Value]) -> Callable[..., Value]:
    return lambda n, a, b: op(a, b)


def _mul(n: _Node, a: Value, b: Value) -> Value:
    """Mul; by a constant 1 that does not broadcast (Keras swish's beta), the other operand,
    so the SiLU is Mul(x, Sigmoid(x)) for the passes to fuse."""
    for x, one in ((a, b), (b, a)):
        c = one.data if one.is_const else None
        if c is not None and c.size == 1 and c.dtype == x.dtype and x.shape is not None and c.ndim <= len(x.shape):
            if c.reshape(-1)[0] == 1:
                return x
    return ops.mul(a, b)


def _relu6(n: _Node, x: Value) -> Value:
    return ops.clip(x, np.asarray(0, x.dtype), np.asarray(6, x.dtype))


def _erfc(n: _Node, x: Value) -> Value:
    return ops.sub(np.asarray(1, x.dtype), ops.erf(x))


def _squared_difference(n: _Node, a: Value, b: Value) -> Value:
    d = ops.sub(a, b)
    return ops.mul(d, d)


def _rsqrt(n: _Node, x: Value) -> Value:
    return ops.reciprocal(ops.sqrt(x))


_BIG = np.iinfo(np.int64).max


def _vector(parts: Sequence[int | Value]) -> Value | np.ndarray:
    """An int64 vector of known ints and 1-element Values."""
    if all(isinstance(p, (int, np.integer)) for p in parts):
        return np.array(parts, np.int64)
    return ops.concat(*[np.array([p], np.int64) if isinstance(p, (int, np.integer)) else p for p in parts], axis=0)


def _element(n: _Node, v: Value, known: np.ndarray | None, i: int) -> int | Value:
    if known is not None:
        return int(known.reshape(-1)[i])
    return ops.cast(ops.slice(v, np.array([i], np.int64), np.array([i + 1], np.int64)), to="int64")


def _strided_slice(n: _Node, x: Value, begin: Value, end: Value, strides: Value) -> Value:
    """TF's StridedSlice (every mask) as Unsqueeze (new axes), Slice, and Gather (shrunk axes)."""
    b, e = n.maybe_const(begin), n.maybe_const(end)
    st = n.const(strides, "the strides").reshape(-1).astype(np.int64)
    masks = {k: int(n.attr(f"{k}_mask", 0)) for k in ("begin", "end", "ellipsis", "new_axis", "shrink_axis")}
    known = _sliced_shape(n, x, b, e, st, masks)
    if known is not None:
        return n.builder.graph.constant(known)
    sparse = len(st)
    bit = lambda k, j: bool(masks[k] >> j & 1)  # noqa: E731
    real = sum(1 for j in range(sparse) if not bit("new_axis", j) and not bit("ellipsis", j))
    # The dense spec: one entry per axis of x with its new axes inserted: (kind, sparse index).
    dense: list[tuple[str, int]] = []
    seen_ellipsis = False
    for j in range(sparse):
        if bit("ellipsis", j) and not seen_ellipsis:
            if x.shape is None:
                raise GraphError("StridedSlice with an ellipsis needs an input of known rank")
            seen_ellipsis = True
            dense += [("full", -1)] * (len(x.shape) - real)
        elif bit("new_axis", j):
            dense.append(("new", j))
        elif bit("shrink_axis", j):
            dense.append(("shrink", j))
        else:
            dense.append(("slice", j))
    if x.shape is not None:
        dense += [("full", -1)] * (len(x.shape) + sum(k == "new" for k, _ in dense) - len(dense))
    new_axes = [a for a, (k, _) in enumerate(dense) if k == "new"]
    if new_axes:
        x = ops.unsqueeze(x, np.array(new_axes, np.int64))
    axes, starts, ends, steps = [], [], [], []
    for a, (kind, j) in enumerate(dense):
        if kind != "slice":
            continue
        step = int(st[j])
        axes.append(a)
        steps.append(step)
        starts.append((0 if step > 0 else _BIG) if bit("begin", j) else _element(n, begin, b, j))
        ends.append((_BIG if step > 0 else -_BIG - 1) if bit("end", j) else _element(n, end, e, j))
    whole = [s == 0 and t == _BIG and p == 1 for s, t, p in zip(starts, ends, steps)]  # slices of a symbolic dim lose it
    keep = [i for i, w in enumerate(whole) if not w]
    if keep:
        pick = lambda xs: [xs[i] for i in keep]  # noqa: E731
        x = ops.slice(
            x, _vector(pick(starts)), _vector(pick(ends)), np.array(pick(axes), np.int64), np.array(pick(steps), np.int64)
        )
    for a in reversed([a for a, (k, _) in enumerate(dense) if k == "shrink"]):
        j = dense[a][1]
        at = _element(n, begin, b, j)
        x = ops.gather(x, np.asarray(at, np.int64) if isinstance(at, int) else ops.reshape(at, np.zeros(0, np.int64)), axis=a)
    return x


def _sliced_shape(n: _Node, x: Value, b: Any, e: Any, st: np.ndarray, masks: dict[str, int]) -> np.ndarray | None:
    """A 1-D slice of a shape vector whose picked dims are static (a loop's trip count from
    ``Shape(x)[1]`` while the batch is symbolic): known at load time."""
    if x.shape is None or len(x.shape) != 1 or len(st) != 1 or b is None or e is None or masks["ellipsis"] or masks["new_axis"]:
        return None
    part = _partial(n.builder, n.node.input[0])
    if part is None:
        return None
    begin = None if masks["begin"] & 1 else int(b.reshape(-1)[0])
    if masks["shrink_axis"] & 1:
        picked = [part[begin or 0]] if -len(part) <= (begin or 0) < len(part) else [None]
    else:
        picked = part[slice(begin, None if masks["end"] & 1 else int(e.reshape(-1)[0]), int(st[0]))]
    if not all(isinstance(p, int) for p in picked):
        return None
    out = np.array(picked, np.dtype(x.dtype))
    return out.reshape(()) if masks["shrink_axis"] & 1 else out


def _slice(n: _Node, x: Value, begin: Value, size: Value) -> Value:
    b, s = n.maybe_const(begin), n.maybe_const(size)
    if b is None or s is None:
        raise GraphError("Slice needs constant begin and size")
    b, s = b.reshape(-1).astype(np.int64), s.reshape(-1).astype(np.int64)
    ends = np.where(s < 0, _BIG, b + s)
    return ops.slice(x, b, ends, np.arange(len(b), dtype=np.int64))


def _pads(n: _Node, paddings: Value) -> np.ndarray:
    p = n.const(paddings, "the paddings").astype(np.int64)
    return np.concatenate([p[:, 0], p[:, 1]])


def _pad(n: _Node, x: Value, paddings: Value, value: Value | None = None) -> Value:
    return ops.pad(x, _pads(n, paddings), value if value is not None else np.asarray(0, x.dtype))


def _mirror_pad(n: _Node, x: Value, paddings: Value) -> Value:
    mode = n.attr("mode")
    if mode == "REFLECT":
        return ops.pad(x, _pads(n, paddings), mode="reflect")
    if mode != "SYMMETRIC":
        raise GraphError(f"MirrorPad mode {mode!r} is not supported (REFLECT, SYMMETRIC)")
    p = n.const(paddings, "the paddings").astype(np.int64)
    for axis, (before, after) in enumerate(p):  # SYMMETRIC repeats the edge: reversed slices either side
        parts = []
        if before:
            parts.append(ops.slice(x, np.array([before - 1]), np.array([-_BIG - 1]), np.array([axis]), np.array([-1])))
        parts.append(x)
        if after:
            parts.append(ops.slice(x, np.array([-1]), np.array([-int(after) - 1]), np.array([axis]), np.array([-1])))
        x = ops.concat(*parts, axis=axis) if len(parts) > 1 else x
    return x


def _identity_n(n: _Node, *xs: Value) -> tuple[Value, ...]:
    return tuple(xs)


def _select(n: _Node, c: Value, a: Value, b: Value) -> Value:
    if n.node.op == "Select" and c.shape is not None and a.shape is not None and len(c.shape) == 1 < len(a.shape):
        c = ops.reshape(c, np.array([-1] + [1] * (len(a.shape) - 1), np.int64))  # TF1 Select picks rows
    return ops.where(c, a, b)


def _fill(n: _Node, dims: Value, value: Value) -> Value:
    out = _broadcast_to(n.builder, value, _partial(n.builder, n.node.input[0]))
    return out if out is not None else ops.expand(value, _int64(n, dims))


def _broadcast_to(b: _Builder, value: Value, dims: Sequence[int | str | None] | None) -> Value | None:
    """A constant ``value`` broadcast to ``dims`` whose unknown entries are the inputs' symbols
    (a Keras RNN's zero state: Fill([batch, units])) with that shape known at load time, as
    Where(True shaped by each symbol, v, v); None when some entry is not known so."""
    v = b.evaluate(value) if value.shape == () else None
    if v is None or dims is None or not all(isinstance(d, (int, str)) for d in dims):
        return None
    rank, mask = len(dims), None
    for j, d in enumerate(dims):
        if isinstance(d, str):
            found = [(x, x.shape.index(d)) for x in b.graph.inputs if x.shape is not None and d in x.shape]
            if not found:
                return None
            x, k = found[0]
            r = len(x.shape or ())
            others = [a for a in range(r) if a != k]
            one = ops.slice(x, np.zeros(len(others), np.int64), np.ones(len(others), np.int64), np.array(others, np.int64))
            col = ops.squeeze(one, np.array(others, np.int64)) if others else one  # (d,): its values unused
            col = ops.unsqueeze(col, np.array([a for a in range(rank) if a != j], np.int64)) if rank > 1 else col
            same = ops.equal(col, col)
            true = ops.or_(same, ops.not_(same))  # True, NaN or not
            mask = true if mask is None else ops.and_(mask, true)
    full = np.broadcast_to(np.asarray(v), [d if isinstance(d, int) else 1 for d in dims]).copy()
    return b.graph.constant(full) if mask is None else ops.where(mask, full, full)


def _like(fill: int) -> Callable[..., Value]:
    def convert(n: _Node, x: Value) -> Value:
        value = n.builder.graph.constant(np.asarray(fill, x.dtype))
        out = _broadcast_to(n.builder, value, x.shape) if x.shape is not None else None  # the shape kept
        return out if out is not None else ops.expand(value, ops.shape(x))

    return convert


def _tile(n: _Node, x: Value, reps: Value) -> Value:
    return ops.tile(x, _int64(n, reps))


def _split(n: _Node, axis: Value, x: Value) -> tuple[Value, ...]:
    k = int(n.attr("num_split"))
    out = ops.split(x, axis=int(n.const(axis, "the axis")), num_outputs=k)
    return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def _split_v(n: _Node, x: Value, sizes: Value, axis: Value) -> tuple[Value, ...]:
    ax = int(n.const(axis, "the axis"))
    s = n.const(sizes, "the sizes").astype(np.int64).reshape(-1)
    if (s < 0).any():
        if x.shape is None or not isinstance(x.shape[ax], int):
            raise GraphError("SplitV with a -1 size needs a static dim")
        s[s < 0] = x.shape[ax] - s[s >= 0].sum()
    out = ops.split(x, s, axis=ax, num_outputs=len(s))
    return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def _unpack(n: _Node, x: Value) -> tuple[Value, ...]:
    axis = int(n.attr("axis", 0))
    return tuple(ops.gather(x, np.asarray(i, np.int64), axis=axis) for i in range(int(n.attr("num"))))


def _range(n: _Node, start: Value, limit: Value, delta: Value) -> Value:
    known = [k.item() for k in (n.maybe_const(v) for v in (start, limit, delta)) if k is not None]
    if len(known) == 3:
        return n.builder.graph.constant(np.arange(*known, dtype=np.dtype(start.dtype)))
    return ops.range(start, limit, delta)


def _arg(op: Callable[..., Value]) -> Callable[..., Value]:
    def convert(n: _Node, x: Value, axis: Value) -> Value:
        out = op(x, axis=int(n.const(axis, "the axis")), keepdims=0)
        dtype = n.attr("output_type", "int64")
        return out if dtype == "int64" else ops.cast(out, to=dtype)

    return convert


def _leaky_relu(n: _Node, x: Value) -> Value:
    return ops.leaky_relu(x, alpha=float(n.attr("alpha", 0.2)))


def _floor_div(n: _Node, a: Value, b: Value) -> Value:
    if np.dtype(a.dtype).kind == "f":
        return ops.floor(ops.div(a, b))
    return ops.div(ops.sub(a, ops.mod(a, b)), b)  # exact: a - floor_mod(a, b) is a multiple of b


def _floor_mod(n: _Node, a: Value, b: Value) -> Value:
    if np.dtype(a.dtype).kind == "f":
        return ops.sub(a, ops.mul(ops.floor(ops.div(a, b)), b))
    return ops.mod(a, b)  # the divisor's sign, as TF's


def _logical(op: Callable[..., Value]) -> Callable[..., Value]:
    return lambda n, *xs: op(*xs)


def _l2_loss(n: _Node, x: Value) -> Value:
    return ops.mul(ops.reduce_sum(ops.mul(x, x), keepdims=0), np.asarray(0.5, x.dtype))


def _reverse(n: _Node, x: Value, axis: Value) -> Value:
    axes = n.const(axis, "the axes").astype(np.int64).reshape(-1)
    k = len(axes)
    return ops.slice(x, np.full(k, -1, np.int64), np.full(k, -_BIG - 1, np.int64), axes, np.full(k, -1, np.int64))


class _TensorList(list[Any]):
    """A TF ``TensorList`` (a TensorArray in a While loop), held at load time as a list of
    Values: loops are unrolled, so every index is known when it is used."""


def _index(n: _Node, v: Value, size: int | None = None) -> int:
    i = int(n.const(v, "a TensorList index").reshape(-1)[0])
    if size is not None and not -size <= i < size:
        raise GraphError(f"TensorList index {i} is out of range for {size} elements")
    return i


def _list_from_tensor(n: _Node, x: Value, shape: Value) -> _TensorList:
    if x.shape is None or not x.shape or not isinstance(x.shape[0], int):
        raise GraphError("TensorListFromTensor needs a static leading dim (the sequence length)")
    return _TensorList(ops.gather(x, np.asarray(i, np.int64), axis=0) for i in range(x.shape[0]))


def _list_reserve(n: _Node, shape: Value, count: Value) -> _TensorList:
    return _TensorList([None] * _index(n, count))


def _list_get(n: _Node, items: _TensorList, index: Value, shape: Value) -> Value:
    item = items[_index(n, index, len(items))]
    if item is None:
        raise GraphError("TensorListGetItem reads an element never set")
    return item


def _list_set(n: _Node, items: _TensorList, index: Value, item: Value) -> _TensorList:
    out = _TensorList(items)
    out[_index(n, index, len(items))] = item
    return out


def _list_stack(n: _Node, items: _TensorList, shape: Value) -> Value:
    if not items or any(i is None for i in items):
        raise GraphError("TensorListStack of a list with unset elements")
    zero = np.array([0], np.int64)
    return ops.concat(*[ops.unsqueeze(i, zero) for i in items], axis=0)


def _call(n: _Node, *args: Value) -> tuple[Value, ...]:
    """PartitionedCall / StatefulPartitionedCall / a call of a library function by name: inlined."""
    f = n.attr("f")
    name = f.name if f is not None else n.node.op
    return tuple(_inline(n.builder, name, list(args), n.node.name, [i for i in n.node.input if not i.startswith("^")]))


def _cumsum(n: _Node, x: Value, axis: Value) -> Value:
    ax = np.asarray(n.const(axis, "the axis"), np.int64).reshape(())
    return ops.cum_sum(x, ax, exclusive=int(bool(n.attr("exclusive", False))), reverse=int(bool(n.attr("reverse", False))))


def _depth_space(op: Callable[..., Value]) -> Callable[..., Value]:
    """DepthToSpace / SpaceToDepth: TF's NHWC channel order is ONNX's DCR."""
    return lambda n, x: _in_nchw(n, x, lambda t: op(t, blocksize=int(n.attr("block_size")), mode="DCR"))


def _one_hot(n: _Node, idx: Value, depth: Value, on: Value, off: Value) -> Value:
    values = ops.concat(ops.reshape(off, np.array([1], np.int64)), ops.reshape(on, np.array([1], np.int64)), axis=0)
    return ops.one_hot(idx, _int64(n, depth), values, axis=int(n.attr("axis", -1)))


def _finite(n: _Node, x: Value) -> Value:
    return ops.not_(ops.or_(ops.is_inf(x), ops.is_na_n(x)))


def _band_part(n: _Node, x: Value, lower: Value, upper: Value) -> Value:
    """MatrixBandPart (a causal mask's ones): Trilu on each side that is bounded (>= 0)."""
    lo, up = int(n.const(lower, "num_lower")), int(n.const(upper, "num_upper"))
    if lo >= 0:
        x = ops.trilu(x, np.asarray(-lo, np.int64), upper=1)  # i - j <= lo
    return ops.trilu(x, np.asarray(up, np.int64), upper=0) if up >= 0 else x  # j - i <= up


def _bucketize(n: _Node, x: Value) -> Value:
    """Bucketize: how many boundaries each value reaches (x >= b)."""
    bounds = np.asarray(n.attr("boundaries", []), x.dtype if x.dtype.startswith("float") else np.float32)
    if not bounds.size:
        return ops.expand(np.asarray(0, np.int32), ops.shape(x))
    reached = ops.cast(ops.greater_or_equal(ops.unsqueeze(x, np.array([-1], np.int64)), bounds.astype(x.dtype)), to="int32")
    return ops.reduce_sum(reached, np.array([-1], np.int64), keepdims=0)


def _dense_bincount(n: _Node, x: Value, size: Value, weights: Value) -> Value:
    """DenseBincount of each row's values below ``size`` (Keras CategoryEncoding): a one-hot sum."""
    w = n.maybe_const(weights)
    if w is None or w.size:
        raise GraphError("DenseBincount with weights is not supported")
    known = n.maybe_const(size)
    depth = int(known) if known is not None else _clamp_bound(n.builder, n.node.input[1])
    hot = ops.one_hot(x, np.asarray(depth, np.int64), np.array([0, 1], n.attr("T", "float32")), axis=-1)
    counts = ops.reduce_sum(hot, np.array([-2 if len(x.shape or ()) > 1 else 0], np.int64), keepdims=0)
    return ops.min(counts, np.asarray(1, counts.dtype)) if n.attr("binary_output", False) else counts


def _clamp_bound(b: _Builder, ref: str) -> int:
    """The value of Minimum(Maximum(v, lo), hi) with constants lo >= hi, whatever v: hi (tf.math.bincount's
    size when minlength == maxlength, as Keras CategoryEncoding gives num_tokens)."""
    node = b.nodes.get(_tensor(ref)[0])
    args = [i for i in getattr(node, "input", ()) if not i.startswith("^")]
    if node is not None and node.op == "Minimum" and len(args) == 2:
        for inner, hi in (args, args[::-1]):
            top, low = b.evaluate(b.value(hi, None)), b.nodes.get(_tensor(inner)[0])
            if top is not None and low is not None and low.op == "Maximum":
                los = [b.evaluate(b.value(i, None)) for i in low.input if not i.startswith("^")]
                if any(v is not None and int(v) >= int(top) for v in los):
                    return int(top)
    raise GraphError("DenseBincount's size must be a constant (or minlength == maxlength) in a frozen graph")


def _size(n: _Node, x: Value) -> Value:
    return ops.cast(ops.size(x), to=n.attr("out_type", "int32"))


def _if(n: _Node, cond: Value, *args: Value) -> tuple[Value, ...]:
    """If / StatelessIf whose condition constants give at load time: that branch, inlined."""
    known = n.maybe_const(cond)
    if known is None:
        raise UnsupportedOpError(
            [("tf", f"{n.node.op} (a condition known only at run time)")], graph=n.builder.graph.name, nodes=[n.node.name]
        )
    branch = n.node.attr["then_branch" if bool(np.asarray(known).reshape(-1)[0]) else "else_branch"].func.name
    inputs = [i for i in n.node.input if not i.startswith("^")][1:]
    return tuple(_inline(n.builder, branch, list(args), n.node.name, inputs))


_TF: dict[str, Callable[..., Any]] = {
    "Identity": _unary(lambda x: x),
    "StopGradient": _unary(lambda x: x),
    "Snapshot": _unary(lambda x: x),
    "Add": _binary(ops.add),
    "AddV2": _binary(ops.add),
    "Sub": _binary(ops.sub),
    "Mul": _mul,
    "RealDiv": _binary(ops.div),
    "Maximum": _binary(ops.max),
    "Minimum": _binary(ops.min),
    "Pow": _binary(ops.pow),
    "SquaredDifference": _squared_difference,
    "BiasAdd": _bias_add,
    "Neg": _unary(ops.neg),
    "Abs": _unary(ops.abs),
    "Exp": _unary(ops.exp),
    "Log": _unary(ops.log),
    "Sqrt": _unary(ops.sqrt),
    "Rsqrt": _rsqrt,
    "Square": _unary(lambda x: ops.mul(x, x)),
    "Erf": _unary(ops.erf),
    "Erfc": _erfc,
    "Tanh": _unary(ops.tanh),
    "Sigmoid": _unary(ops.sigmoid),
    "Relu": _unary(ops.relu),
    "Relu6": _relu6,
    "Elu": _unary(ops.elu),
    "Softmax": _softmax,
    "Cast": _cast,
    "Conv2D": _conv2d,
    "DepthwiseConv2dNative": _depthwise,
    "Conv2DBackpropInput": _conv_backprop_input,
    "Conv3D": _conv3d,
    "Conv3DBackpropInputV2": _conv_backprop_input,
    "MaxPool3D": _pool3d(ops.max_pool),
    "AvgPool3D": _pool3d(ops.average_pool),
    "ResizeBilinear": _resize("linear"),
    "ResizeNearestNeighbor": _resize("nearest"),
    "ResizeBicubic": _resize("cubic"),
    "ResizeArea": _resize_area,
    "ScaleAndTranslate": _scale_and_translate,
    "SpaceToBatchND": _space_to_batch,
    "BatchToSpaceND": _batch_to_space,
    "Any": _any_all(ops.reduce_max),
    "All": _any_all(ops.reduce_min),
    "MaxPool": _pool(ops.max_pool),
    "AvgPool": _pool(ops.average_pool),
    "FusedBatchNorm": _fused_batch_norm,
    "FusedBatchNormV3": _fused_batch_norm,
    "MatMul": _matmul,
    "BatchMatMul": _matmul,
    "BatchMatMulV2": _matmul,
    "BatchMatMulV3": _matmul,
    "Einsum": _einsum,
    "Mean": _reduce(ops.reduce_mean),
    "Sum": _reduce(ops.reduce_sum),
    "Max": _reduce(ops.reduce_max),
    "Min": _reduce(ops.reduce_min),
    "Prod": _reduce(ops.reduce_prod),
    "Reshape": _reshape,
    "Squeeze": _squeeze,
    "ExpandDims": _expand_dims,
    "Transpose": _transpose,
    "ConcatV2": _concat,
    "Pack": _pack,
    "GatherV2": _gather,
    "Shape": _shape,
    "Pad": _pad,
    "PadV2": _pad,
    "MirrorPad": _mirror_pad,
    "StridedSlice": _strided_slice,
    "Slice": _slice,
    "IdentityN": _identity_n,
    "Less": _binary(ops.less),
    "LessEqual": _binary(ops.less_or_equal),
    "Greater": _binary(ops.greater),
    "GreaterEqual": _binary(ops.greater_or_equal),
    "Equal": _binary(ops.equal),
    "NotEqual": _binary(lambda a, b: ops.not_(ops.equal(a, b))),
    "LogicalAnd": _logical(ops.and_),
    "LogicalOr": _logical(ops.or_),
    "LogicalNot": _logical(ops.not_),
    "Select": _select,
    "SelectV2": _select,
    "Fill": _fill,
    "ZerosLike": _like(0),
    "OnesLike": _like(1),
    "Tile": _tile,
    "Split": _split,
    "SplitV": _split_v,
    "Unpack": _unpack,
    "Range": _range,
    "ArgMax": _arg(ops.arg_max),
    "ArgMin": _arg(ops.arg_min),
    "LeakyRelu": _leaky_relu,
    "Selu": _unary(ops.selu),
    "Softplus": _unary(ops.softplus),
    "Sign": _unary(ops.sign),
    "Floor": _unary(ops.floor),
    "Ceil": _unary(ops.ceil),
    "Round": _unary(ops.round),
    "Reciprocal": _unary(ops.reciprocal),
    "Inv": _unary(ops.reciprocal),
    "Sin": _unary(ops.sin),
    "Cos": _unary(ops.cos),
    "FloorDiv": _floor_div,
    "FloorMod": _floor_mod,
    "DivNoNan": _binary(lambda a, b: ops.where(ops.equal(b, np.asarray(0, b.dtype)), np.asarray(0, a.dtype), ops.div(a, b))),
    "LogSoftmax": lambda n, x: ops.log_softmax(x, axis=-1),
    "PreventGradient": _unary(lambda x: x),
    "EnsureShape": _unary(lambda x: x),
    "CheckNumerics": _unary(lambda x: x),
    "TensorListFromTensor": _list_from_tensor,
    "TensorListReserve": _list_reserve,
    "TensorListGetItem": _list_get,
    "TensorListSetItem": _list_set,
    "TensorListStack": _list_stack,
    "ReverseV2": _reverse,
    "Log1p": _unary(lambda x: ops.log(ops.add(x, np.asarray(1, x.dtype)))),
    "Expm1": _unary(lambda x: ops.sub(ops.exp(x), np.asarray(1, x.dtype))),
    "ClipByValue": lambda n, x, lo, hi: ops.min(ops.max(x, lo), hi),
    "IsNan": _unary(ops.is_na_n),
    "IsInf": _unary(ops.is_inf),
    "IsFinite": _finite,
    "AddN": lambda n, *xs: ops.sum(*xs) if len(xs) > 1 else xs[0],
    "BroadcastTo": lambda n, x, shape: ops.expand(x, _int64(n, shape)),
    "Cumsum": _cumsum,
    "DepthToSpace": _depth_space(ops.depth_to_space),
    "SpaceToDepth": _depth_space(ops.space_to_depth),
    "OneHot": _one_hot,
    "LogicalXor": _logical(ops.xor),
    "MatrixBandPart": _band_part,
    "Bucketize": _bucketize,
    "DenseBincount": _dense_bincount,
    "Size": _size,
    "If": _if,
    "StatelessIf": _if,
    **{op: _unary(getattr(ops, op.lower())) for op in "Softsign Tan Atan Asin Acos Sinh Cosh Asinh Acosh Atanh".split()},
    "PartitionedCall": _call,
    "StatefulPartitionedCall": _call,
}


# -- functions: calls inlined, While loops unrolled -------------------------------------------


def _has_functions(builder: _Builder, node: Any) -> bool:
    return all(node.attr[k].func.name in builder.functions for k in ("cond", "body"))


def _needed(fdef: Any) -> list[Any]:
    """The nodes of a function body its results need through data inputs (control-only ones are dropped)."""
    nodes = {n.name: n for n in fdef.node_def}
    stack = [r.split(":")[0] for r in fdef.ret.values()]
    seen: dict[str, Any] = {}
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen[name] = nodes[name]
        stack.extend(i.split(":")[0] for i in nodes[name].input if not i.startswith("^"))
    return list(seen.values())


def _flat_index(node: Any, arg: str, index: int) -> int:
    """The flat output index of ``node:arg:index`` in a FunctionDef (output args may be lists)."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(node.op)
    if op_def is None:  # a call of a library function: its outputs are named by the function
        return index
    flat = 0
    for out in op_def.output_arg:
        if out.name == arg:
            return flat + index
        if out.number_attr:
            flat += node.attr[out.number_attr].i
        elif out.type_list_attr:
            flat += len(node.attr[out.type_list_attr].list.type)
        else:
            flat += 1
    raise GraphError(f"node {node.name!r} ({node.op}) has no output {arg!r}")


def _inline(builder: _Builder, name: str, args: list[Value], caller: str, inputs: Sequence[str] | None = None) -> list[Value]:
    """The outputs of library function ``name`` applied to ``args``: its nodes converted in a scope of their own."""
    from tensorflow.core.framework import node_def_pb2

    fdef = builder.functions.get(name)
    if fdef is None:
        raise GraphError(f"calls function {name!r}, which the graph's library lacks")
    sig = fdef.signature
    if len(args) != len(sig.input_arg):
        raise GraphError(f"function {name!r} takes {len(sig.input_arg)} inputs, got {len(args)}")
    nodes = {n.name: n for n in fdef.node_def}

    def ref(r: str) -> str:
        parts = r.split(":")
        if len(parts) == 1:
            return f"{r}:0"
        if len(parts) == 3:
            return f"{parts[0]}:{_flat_index(nodes[parts[0]], parts[1], int(parts[2]))}"
        return r

    rets = [ref(fdef.ret[o.name]) for o in sig.output_arg]
    shapes = {a.name: builder.tf_shape(i) for a, i in zip(sig.input_arg, inputs or ())}
    saved = (builder.env, builder.nodes, builder.scope, builder.arg_shapes)
    env: dict[str, tuple[Any, ...]] = {a.name: (v,) for a, v in zip(sig.input_arg, args)}
    rewritten: dict[str, Any] = {}
    for node in fdef.node_def:
        copy = node_def_pb2.NodeDef()
        copy.CopyFrom(node)
        del copy.input[:]
        copy.input.extend(i if i.startswith("^") else ref(i) for i in node.input)
        rewritten[node.name] = copy
    builder.env, builder.nodes, builder.arg_shapes = env, {**rewritten}, shapes
    builder.scope = f"{saved[2]}{caller}/{builder._count()}/"
    try:
        for arg in sig.input_arg:
            builder.nodes[arg.name] = _ARG
        order = builder._order([_tensor(r)[0] for r in rets])
        if name not in builder.checked:  # once per function, not once per unrolled step
            builder.checked.add(name)
            builder._drop_control_only(order, f"function {name!r}")
        for node in order:
            if node is not _ARG:
                env[node.name] = builder._convert(node)
        return [builder.value(r, None) for r in rets]
    finally:
        builder.env, builder.nodes, builder.scope, builder.arg_shapes = saved


class _Arg:
    """A function argument in a function body's node table: already in the scope's env."""

    name = "_arg"
    op = "_Arg"
    input: tuple[str, ...] = ()


_ARG: Any = _Arg()


def _while(n: _Node, *state: Value) -> tuple[Any, ...]:
    """TF2 ``While``: unrolled, each step's condition computed at load time from constants."""
    builder = n.builder
    cond, body = n.node.attr["cond"].func.name, n.node.attr["body"].func.name
    values: list[Any] = list(state)
    for step in range(_MAX_UNROLL + 1):
        (keep,) = _inline(builder, cond, values, f"{n.node.name}/cond{step}")
        known = n.maybe_const(keep)
        if known is None:
            raise UnsupportedOpError(
                [("tf", f"{n.node.op} (a loop whose trip count is known only at run time)")],
                graph=builder.graph.name,
                nodes=[n.node.name],
            )
        if not bool(known.reshape(-1)[0]):
            return tuple(values)
        values = _inline(builder, body, values, f"{n.node.name}/body{step}")
    raise UnsupportedOpError(
        [("tf", f"{n.node.op} (more than {_MAX_UNROLL} steps)")], graph=builder.graph.name, nodes=[n.node.name]
    )


_MAX_UNROLL = 1024


# -- TF1 while loops (what convert_variables_to_constants_v2 lowers a While to by default) -----


class _V1Frames:
    """The nodes of each TF1 loop frame: those reached from its Enter nodes through data
    inputs, up to and including its Exit nodes (a loop body's constants read no frame value
    and stay outside, converted once)."""

    def __init__(self, nodes: Sequence[Any]) -> None:
        readers: dict[str, list[Any]] = {}
        for n in nodes:
            for i in n.input:
                if not i.startswith("^"):
                    readers.setdefault(_tensor(i)[0], []).append(n)
        self.member: dict[str, str] = {}
        self.nested = False
        for enter in (n for n in nodes if n.op == "Enter"):
            frame = enter.attr["frame_name"].s.decode()
            stack = [enter]
            while stack:
                n = stack.pop()
                if self.member.get(n.name, frame) != frame or n is not enter and n.op == "Enter":
                    self.nested = True  # a loop in a loop: reported as unsupported
                    continue
                if n.name in self.member:
                    continue
                self.member[n.name] = frame
                if n.op != "Exit":
                    stack.extend(readers.get(n.name, ()))


def _v1_loop(b: _Builder, frame: str) -> None:
    """Unroll a TF1 loop: each Merge starts at its Enter's value; each step computes the
    LoopCond from the Merges (known at load time), then the NextIteration values; when the
    condition is false, each Exit takes its Switch's data."""
    names = [m for m, f in b.frames.member.items() if f == frame]  # type: ignore[union-attr]
    nodes = [b.nodes[m] for m in names]
    merges = [n for n in nodes if n.op == "Merge"]
    exits = [n for n in nodes if n.op == "Exit"]
    conds = [n for n in nodes if n.op == "LoopCond"]
    if len(conds) != 1:
        raise UnsupportedOpError([("tf", "LoopCond (a TF1 loop frame without one condition)")], graph=b.graph.name, nodes=[frame])
    outer = b.env
    members = set(names)

    def enter_of(m: Any) -> tuple[Any, Any]:
        ins = [b.nodes[_tensor(i)[0]] for i in m.input if not i.startswith("^")]
        first = [n for n in ins if n.op == "Enter"]
        later = [n for n in ins if n.op == "NextIteration"]
        if len(first) != 1 or len(later) != 1:
            raise GraphError(f"Merge {m.name!r} of a TF1 loop reads no Enter and NextIteration pair", node=m.name)
        return first[0], later[0]

    pairs = {m.name: enter_of(m) for m in merges}
    state = {m: _eval_v1(b, outer, members, pairs[m][0].input[0]) for m in pairs}
    for step in range(_MAX_UNROLL + 1):
        env = dict(outer)
        for m, v in state.items():
            env[m] = (v, b.graph.constant(np.asarray(1 if step else 0, np.int32)))
        keep = _eval_v1(b, env, members, conds[0].input[0], outer)
        known = _Node(b, conds[0]).maybe_const(keep)
        if known is None:
            raise UnsupportedOpError(
                [("tf", "LoopCond (a TF1 loop whose trip count is known only at run time)")],
                graph=b.graph.name,
                nodes=[conds[0].name],
            )
        if not bool(known.reshape(-1)[0]):
            for x in exits:
                switch = b.nodes[_tensor(x.input[0])[0]]
                outer[x.name] = (_eval_v1(b, env, members, switch.input[0], outer),)
            return
        state = {m: _eval_v1(b, env, members, pairs[m][1].input[0], outer) for m in pairs}
    raise UnsupportedOpError([("tf", f"LoopCond (more than {_MAX_UNROLL} steps)")], graph=b.graph.name, nodes=[conds[0].name])


def _eval_v1(b: _Builder, env: dict[str, tuple[Any, ...]], members: set[str], ref: str, outer: Any = None) -> Any:
    """The value of ``ref`` in one step's ``env``: frame nodes converted into it, anything
    else (constants a body reads) converted once into ``outer``."""
    outer = env if outer is None else outer
    stack = [_tensor(ref)[0]]
    while stack:
        name = stack[-1]
        inside = name in members
        scope = env if inside else outer
        if name in scope:
            env.setdefault(name, scope[name])
            stack.pop()
            continue
        node = b.nodes[name]
        other = None if inside or b.frames is None else b.frames.member.get(name)
        if other is not None:  # another loop's result (a stacked RNN's): that loop unrolled first
            if node.op != "Exit":
                raise GraphError(f"a TF1 loop reads {name!r} ({node.op}) inside another loop", node=name)
            _v1_loop(b, other)
            continue
        deps = [_tensor(i)[0] for i in node.input if not i.startswith("^")]
        if node.op in ("Switch", "Enter", "LoopCond"):
            deps = deps[:1]  # a Switch's predicate is the loop's, known to be true here
        todo = [d for d in deps if d not in (env if d in members else outer)]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        saved, b.env = b.env, {**outer, **env} if inside else outer
        try:
            if node.op in ("Enter", "Switch", "LoopCond"):  # the branch taken is known: both outputs are the data
                v = b.value(node.input[0], node)
                out: tuple[Any, ...] = (v, v)
            else:
                out = b._convert(node)
        finally:
            b.env = saved
        scope[name] = out
        env.setdefault(name, out)
    name, index = _tensor(ref)
    return env[name][index]
