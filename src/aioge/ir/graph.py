"""Values, nodes and graphs.

A graph owns its values and nodes. Edits go through a few methods (``add_node``,
``Node.set_input``, ``replace_all_uses``, ``remove_node``) that keep every value's use
list consistent, so passes never poke at lists directly.
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from aioge.errors import GraphError
from aioge.ir.desc import Dim, TensorDesc, canonical_dtype
from aioge.ir.fingerprint import graph_fingerprint

__all__ = ["Graph", "IOInfo", "Node", "OpBuilder", "Value", "ValueKind", "set_op_builder"]

AttrValue = Any  # int | float | str | bytes | list of those | np.ndarray


class ValueKind(enum.Enum):
    INPUT = "input"
    CONSTANT = "constant"
    VARIABLE = "variable"
    INTERMEDIATE = "intermediate"


class Value:
    """A tensor in a graph: a data input, a constant, a variable or a node's output."""

    __slots__ = ("graph", "name", "desc", "kind", "producer", "index", "uses", "data", "__weakref__")

    def __init__(
        self,
        graph: Graph,
        name: str,
        desc: TensorDesc,
        kind: ValueKind,
        producer: Node | None = None,
        index: int = 0,
        data: np.ndarray | None = None,
    ) -> None:
        self.graph = graph
        self.name = name
        self.desc = desc
        self.kind = kind
        self.producer = producer
        self.index = index
        self.uses: list[tuple[Node, int]] = []
        self.data = data
        graph._values[name] = self  # Graph._claim checked the name is free

    @property
    def shape(self) -> tuple[Dim, ...] | None:
        return self.desc.shape

    @property
    def dtype(self) -> str:
        return self.desc.dtype

    @property
    def is_const(self) -> bool:
        return self.kind is ValueKind.CONSTANT

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.desc}, {self.kind.value})"

    # Arithmetic sugar: x + y builds an Add node, and so on, through the op builder that the
    # op registry's floor installs (``set_op_builder``): ir stays below ops.
    def _binary(self, op_type: str, other: object, reverse: bool = False) -> Value:
        return _build(op_type, (other, self) if reverse else (self, other))

    def __add__(self, other: object) -> Value:
        return self._binary("Add", other)

    def __radd__(self, other: object) -> Value:
        return self._binary("Add", other, True)

    def __sub__(self, other: object) -> Value:
        return self._binary("Sub", other)

    def __rsub__(self, other: object) -> Value:
        return self._binary("Sub", other, True)

    def __mul__(self, other: object) -> Value:
        return self._binary("Mul", other)

    def __rmul__(self, other: object) -> Value:
        return self._binary("Mul", other, True)

    def __truediv__(self, other: object) -> Value:
        return self._binary("Div", other)

    def __rtruediv__(self, other: object) -> Value:
        return self._binary("Div", other, True)

    def __matmul__(self, other: object) -> Value:
        return self._binary("MatMul", other)

    def __neg__(self) -> Value:
        return _build("Neg", (self,))


class OpBuilder(Protocol):
    """Adds one ``op_type`` node over ``inputs`` (values of one graph, or numbers and arrays
    that become its constants) to the graph of its inputs and returns its single output."""

    def __call__(self, op_type: str, inputs: Sequence[object], /) -> Value: ...


_op_builder: OpBuilder | None = None


def set_op_builder(builder: OpBuilder) -> None:
    """Install the function Value arithmetic (``x + y``, ``-x``, ``a @ b``) adds nodes with.

    ``aioge.ops`` installs ``aioge.ops.build.apply_one`` when it is imported, which importing
    ``aioge`` does: the registry and shape inference live above ir, and ir never imports them.
    """
    global _op_builder
    _op_builder = builder


def _build(op_type: str, inputs: tuple[object, ...]) -> Value:
    if _op_builder is None:
        raise GraphError(f"{op_type} by Value arithmetic needs the op registry: import aioge (or aioge.ops) first")
    return _op_builder(op_type, inputs)


class Node:
    """One op application: an op type, its attributes, input values and output values."""

    __slots__ = ("graph", "name", "op_type", "domain", "attrs", "_inputs", "outputs")

    def __init__(
        self,
        graph: Graph,
        name: str,
        op_type: str,
        inputs: Sequence[Value | None],
        attrs: Mapping[str, AttrValue],
        domain: str = "",
    ) -> None:
        self.graph = graph
        self.name = name
        self.op_type = op_type
        self.domain = domain
        self.attrs: dict[str, AttrValue] = dict(attrs)
        self._inputs: tuple[Value | None, ...] = tuple(inputs)
        self.outputs: tuple[Value, ...] = ()

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return self._inputs

    def set_input(self, index: int, value: Value | None) -> None:
        """Replace input ``index``, keeping the use lists of the old and new value right."""
        old = self._inputs[index]
        if old is not None:
            old.uses.remove((self, index))
        if value is not None:
            value.uses.append((self, index))
        items = list(self._inputs)
        items[index] = value
        self._inputs = tuple(items)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op_type})"


@dataclass(frozen=True, slots=True)
class IOInfo:
    """A graph input or output as a user sees it (onnxruntime's ``NodeArg``): its name, its
    shape (a dimension may be a symbol such as ``"N"``; None when even the rank is unknown)
    and its dtype name (``"float32"``)."""

    name: str
    shape: tuple[Dim, ...] | None
    dtype: str
    container: str = "tensor"  # or "sequence", "optional", "optional_sequence" (of tensors of shape and dtype)


class Graph:
    """A computation graph with named data inputs, constants, variables, nodes and outputs."""

    __slots__ = (
        "name",
        "inputs",
        "constants",
        "variables",
        "_nodes",
        "_removed",
        "outputs",
        "_values",
        "_node_names",
        "_counter",
    )

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.constants: dict[str, Value] = {}
        self.variables: dict[str, Value] = {}
        self._nodes: list[Node] = []
        # Nodes removed but still in ``_nodes``: dropped in one sweep when ``nodes`` is next
        # read, so a pass removing k nodes costs O(n + k), not O(n k) (list.remove each).
        # The set holds the nodes themselves, so their ids cannot be reused meanwhile.
        self._removed: set[Node] = set()
        self.outputs: list[Value] = []
        self._values: dict[str, Value] = {}
        self._node_names: dict[str, Node] = {}  # the live nodes by name
        self._counter = 0

    @property
    def nodes(self) -> list[Node]:
        """The nodes in insertion (after compiling: execution) order. The list may be edited
        in place (``graph.nodes[:] = order``); nodes are added and removed by the methods."""
        if self._removed:
            removed = self._removed
            self._nodes = [n for n in self._nodes if n not in removed]
            self._removed = set()
        return self._nodes

    def get_inputs(self) -> list[IOInfo]:
        """The data inputs (fed at run time) in order, with their names, shapes and dtypes."""
        return [IOInfo(v.name, v.desc.shape, v.desc.dtype, v.desc.container) for v in self.inputs]

    def get_outputs(self) -> list[IOInfo]:
        """The outputs in order, with their names, shapes and dtypes (as far as inferred)."""
        return [IOInfo(v.name, v.desc.shape, v.desc.dtype, v.desc.container) for v in self.outputs]

    # -- building ---------------------------------------------------------------------

    def input(self, name: str, shape: Iterable[Dim | None] | None, dtype: object = "float32", container: str = "tensor") -> Value:
        """Add a data input fed at run time. A dimension may be a symbol (``"N"``) or None.

        ``container`` makes it a sequence (fed as a list of arrays of ``dtype``, each of
        ``shape`` as far as it is given), an optional (None or an array) or an optional
        sequence (None or a list); see ``aioge.ir.desc.CONTAINERS``.

        Raises:
            GraphError: the name is taken, or the shape, dtype or container is invalid.
        """
        desc = self._desc(name, shape, dtype, container)
        value = Value(self, self._claim(name), desc, ValueKind.INPUT)
        self.inputs.append(value)
        return value

    def constant(self, data: object, name: str | None = None) -> Value:
        """Add a constant tensor (copied unless already read-only; stored read-only)."""
        array = _as_array(data, self.name, name)
        array.setflags(write=False)
        desc = TensorDesc.of(array.shape, array.dtype)
        value = Value(self, self._claim(name or self._fresh("const")), desc, ValueKind.CONSTANT, data=array)
        self.constants[value.name] = value
        return value

    def variable(self, name: str, initial: object) -> Value:
        """Add a variable: named state with an initial value that persists across runs of a session."""
        array = _as_array(initial, self.name, name)
        array.setflags(write=False)
        desc = TensorDesc.of(array.shape, array.dtype)
        value = Value(self, self._claim(name), desc, ValueKind.VARIABLE, data=array)
        self.variables[name] = value
        return value

    def add_node(
        self,
        op_type: str,
        inputs: Sequence[Value | None],
        attrs: Mapping[str, AttrValue],
        output_descs: Sequence[TensorDesc],
        *,
        name: str | None = None,
        output_names: Sequence[str] | None = None,
        domain: str = "",
    ) -> Node:
        """Append a node; its inputs must already belong to this graph.

        Most code calls the builders in ``aioge.ops``, which validate attributes and infer
        ``output_descs`` before calling this.

        Raises:
            GraphError: an input belongs to another graph, or a name is taken.
        """
        node_name = name or self._fresh(op_type.lower())
        if node_name in self._node_names:
            raise GraphError(f"duplicate node name {node_name!r}", graph=self.name, node=node_name)
        for i, v in enumerate(inputs):
            if v is not None and v.graph is not self:
                raise GraphError(
                    f"input {i} ({v.name!r}) belongs to graph {v.graph.name!r}, not this one",
                    graph=self.name,
                    node=node_name,
                )
        node = Node(self, node_name, op_type, inputs, attrs, domain)
        names = list(output_names) if output_names else []
        outs = []
        for i, desc in enumerate(output_descs):
            out_name = names[i] if i < len(names) and names[i] else self._fresh(f"{node_name}:{i}")
            outs.append(Value(self, self._claim(out_name, node_name), desc, ValueKind.INTERMEDIATE, node, i))
        node.outputs = tuple(outs)
        for i, v in enumerate(inputs):
            if v is not None:
                v.uses.append((node, i))
        self._node_names[node_name] = node
        self._nodes.append(node)
        return node

    def output(self, *values: Value, names: Sequence[str] | None = None) -> None:
        """Mark values as graph outputs, optionally renaming them; outputs keep this order."""
        for i, v in enumerate(values):
            if v.graph is not self:
                raise GraphError(f"output {v.name!r} belongs to graph {v.graph.name!r}", graph=self.name)
            if names is not None:
                self.rename(v, names[i])
            self.outputs.append(v)

    def rename(self, value: Value, name: str) -> None:
        """Give a value a new unique name."""
        if value.name == name:
            return
        self._claim(name)
        del self._values[value.name]
        if value.kind is ValueKind.CONSTANT:
            del self.constants[value.name]
            self.constants[name] = value
        elif value.kind is ValueKind.VARIABLE:
            del self.variables[value.name]
            self.variables[name] = value
        value.name = name
        self._values[name] = value

    # -- editing (passes) -------------------------------------------------------------

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every consumer of ``old`` (and the graph outputs) use ``new`` instead."""
        for node, index in list(old.uses):
            node.set_input(index, new)
        self.outputs = [new if v is old else v for v in self.outputs]

    def remove_node(self, node: Node) -> None:
        """Remove a node whose outputs are unused.

        Raises:
            GraphError: an output of the node is still used or is a graph output, or the node
                is not in this graph.
        """
        for out in node.outputs:
            if out.uses or any(o is out for o in self.outputs):
                raise GraphError(f"cannot remove: output {out.name!r} is still used", graph=self.name, node=node.name)
        if self._node_names.get(node.name) is not node:
            raise GraphError("cannot remove: the node is not in this graph", graph=self.name, node=node.name)
        for i in range(len(node.inputs)):
            node.set_input(i, None)
        self._removed.add(node)
        del self._node_names[node.name]
        for out in node.outputs:
            self._values.pop(out.name, None)

    def remove_unused_values(self) -> None:
        """Drop constants and variables that nothing reads."""
        outs = {id(v) for v in self.outputs}
        for table in (self.constants, self.variables):
            for name, v in list(table.items()):
                if not v.uses and id(v) not in outs:
                    del table[name]
                    del self._values[name]

    # -- reading ----------------------------------------------------------------------

    def value(self, name: str) -> Value:
        """Return the value called ``name``.

        Raises:
            GraphError: no such value.
        """
        try:
            return self._values[name]
        except KeyError:
            raise GraphError(f"no value named {name!r}", graph=self.name) from None

    def has_value(self, name: str) -> bool:
        return name in self._values

    def values(self) -> Iterator[Value]:
        return iter(self._values.values())

    def topological_order(self) -> list[Node]:
        """Return the nodes in a dependency order, stable by insertion order.

        Raises:
            GraphError: the graph has a cycle (naming the nodes on it).
        """
        nodes = self.nodes
        position = {id(n): i for i, n in enumerate(nodes)}
        if _in_order(nodes, position):
            return list(nodes)  # what the sort below returns for an order that already holds
        indegree: dict[int, int] = {}
        for n in self.nodes:
            preds = {id(v.producer) for v in n.inputs if v is not None and v.producer is not None}
            indegree[id(n)] = len(preds)
        heap = [position[id(n)] for n in self.nodes if indegree[id(n)] == 0]
        heapq.heapify(heap)
        order: list[Node] = []
        while heap:
            node = self.nodes[heapq.heappop(heap)]
            order.append(node)
            seen: set[int] = set()
            for out in node.outputs:
                for consumer, _ in out.uses:
                    if id(consumer) in seen:
                        continue
                    seen.add(id(consumer))
                    indegree[id(consumer)] -= 1
                    if indegree[id(consumer)] == 0:
                        heapq.heappush(heap, position[id(consumer)])
        if len(order) != len(self.nodes):
            stuck = [n.name for n in self.nodes if indegree[id(n)] > 0]
            raise GraphError(f"graph has a cycle through nodes {stuck[:10]}", graph=self.name, node=stuck[0])
        return order

    def validate(self) -> None:
        """Check the graph is well formed.

        Raises:
            GraphError: no outputs, a cycle, an input used but not in the graph, or an output
                that no node produces.
        """
        if not self.outputs:
            raise GraphError("graph has no outputs; call graph.output(...)", graph=self.name)
        known = {id(v) for v in self._values.values()}
        nodes = {id(n) for n in self.nodes}
        for node in self.nodes:
            for i, v in enumerate(node.inputs):
                if v is not None and id(v) not in known:
                    raise GraphError(f"input {i} ({v.name!r}) is not a value of this graph", graph=self.name, node=node.name)
                if v is not None and v.kind is ValueKind.INTERMEDIATE and id(v.producer) not in nodes:
                    raise GraphError(
                        f"input {i} ({v.name!r}) is produced by a node that is not in the graph",
                        graph=self.name,
                        node=node.name,
                    )
        for v in self.outputs:
            if id(v) not in known:
                raise GraphError(f"output {v.name!r} is not a value of this graph", graph=self.name)
        self.topological_order()

    def fingerprint(self) -> str:
        """A stable structural hash (hex sha256): ops, attrs, descs and a digest of constant data."""
        return graph_fingerprint(self)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"

    # -- internals --------------------------------------------------------------------

    def _desc(self, name: str, shape: Iterable[Dim | None] | None, dtype: object, container: str = "tensor") -> TensorDesc:
        try:
            if container != "tensor":
                return TensorDesc.of_container(container, shape, dtype)  # type: ignore[arg-type]
            return TensorDesc.of(shape, dtype)  # type: ignore[arg-type]
        except ValueError as exc:
            raise GraphError(f"input {name!r}: {exc}", graph=self.name) from None

    def _claim(self, name: str, node: str | None = None) -> str:
        if not isinstance(name, str) or not name:
            raise GraphError(f"value names must be non-empty strings, got {name!r}", graph=self.name, node=node)
        if name in self._values:
            raise GraphError(f"duplicate value name {name!r}", graph=self.name, node=node)
        return name

    def _fresh(self, stem: str) -> str:
        while True:
            self._counter += 1
            name = f"{stem}_{self._counter}"
            if name not in self._values and name not in self._node_names:
                return name


def _in_order(nodes: list[Node], position: dict[int, int]) -> bool:
    """True when every node comes after the producers of its inputs (the usual case: builders
    and the ONNX frontend append in dependency order, passes mostly keep it)."""
    for i, n in enumerate(nodes):
        for v in n._inputs:
            if v is not None and v.producer is not None and position.get(id(v.producer), i) >= i:
                return False
    return True


def _as_array(data: object, graph: str, name: str | None) -> np.ndarray:
    if isinstance(data, np.ndarray) and not data.flags.writeable and data.dtype.kind not in "OU":
        return data  # already a frozen tensor (another graph's constant): share, don't copy
    try:
        array = np.array(data, copy=True)
        canonical_dtype(array.dtype)
    except ValueError as exc:
        raise GraphError(f"tensor {name!r}: {exc}", graph=graph) from None
    return array
