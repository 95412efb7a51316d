"""Values, nodes and graphs.

A graph owns its values and nodes. Edits go through a few methods (``add_node``,
``Node.set_input``, ``replace_all_uses``, ``remove_node``) that keep every value's use
list consistent, so passes never poke at lists directly.
"""

from __future__ import annotations

import enum
import heapq
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from aioge.errors import GraphError
from aioge.ir.desc import Dim, TensorDesc, canonical_dtype

__all__ = ["Graph", "Node", "Value", "ValueKind"]

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

    # Arithmetic sugar: x + y builds an Add node, and so on. Imported lazily: ops depends on ir.
    def _binary(self, op: str, other: object, reverse: bool = False) -> Value:
        from aioge import ops

        fn: Callable[[object, object], Value] = getattr(ops, op)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, other: object) -> Value:
        return self._binary("add", other)

    def __radd__(self, other: object) -> Value:
        return self._binary("add", other, True)

    def __sub__(self, other: object) -> Value:
        return self._binary("sub", other)

    def __rsub__(self, other: object) -> Value:
        return self._binary("sub", other, True)

    def __mul__(self, other: object) -> Value:
        return self._binary("mul", other)

    def __rmul__(self, other: object) -> Value:
        return self._binary("mul", other, True)

    def __truediv__(self, other: object) -> Value:
        return self._binary("div", other)

    def __rtruediv__(self, other: object) -> Value:
        return self._binary("div", other, True)

    def __matmul__(self, other: object) -> Value:
        return self._binary("matmul", other)

    def __neg__(self) -> Value:
        # Through apply, not ops.neg: a builder is found by the module __getattr__ of aioge.ops,
        # which mypy cannot resolve inside the ir <-> ops import cycle (it crashed on it).
        from aioge.ops import apply

        return apply("Neg", [self])[0]


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


class Graph:
    """A computation graph with named data inputs, constants, variables, nodes and outputs."""

    __slots__ = ("name", "inputs", "constants", "variables", "nodes", "outputs", "_values", "_node_names", "_counter")

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.constants: dict[str, Value] = {}
        self.variables: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._values: dict[str, Value] = {}
        self._node_names: set[str] = set()
        self._counter = 0

    # -- building ---------------------------------------------------------------------

    def input(self, name: str, shape: Iterable[Dim | None] | None, dtype: object = "float32") -> Value:
        """Add a data input fed at run time. A dimension may be a symbol (``"N"``) or None.

        Raises:
            GraphError: the name is taken, or the shape or dtype is invalid.
        """
        desc = self._desc(name, shape, dtype)
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
        self._node_names.add(node_name)
        self.nodes.append(node)
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
            GraphError: an output of the node is still used or is a graph output.
        """
        for out in node.outputs:
            if out.uses or any(o is out for o in self.outputs):
                raise GraphError(f"cannot remove: output {out.name!r} is still used", graph=self.name, node=node.name)
        for i in range(len(node.inputs)):
            node.set_input(i, None)
        self.nodes.remove(node)
        self._node_names.discard(node.name)
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

    def consumers(self, value: Value) -> list[Node]:
        return [n for n, _ in value.uses]

    def topological_order(self) -> list[Node]:
        """Return the nodes in a dependency order, stable by insertion order.

        Raises:
            GraphError: the graph has a cycle (naming the nodes on it).
        """
        position = {id(n): i for i, n in enumerate(self.nodes)}
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
        for node in self.nodes:
            for i, v in enumerate(node.inputs):
                if v is not None and id(v) not in known:
                    raise GraphError(f"input {i} ({v.name!r}) is not a value of this graph", graph=self.name, node=node.name)
                if v is not None and v.kind is ValueKind.INTERMEDIATE and v.producer not in self.nodes:
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
        from aioge.ir.fingerprint import graph_fingerprint

        return graph_fingerprint(self)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"

    # -- internals --------------------------------------------------------------------

    def _desc(self, name: str, shape: Iterable[Dim | None] | None, dtype: object) -> TensorDesc:
        try:
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


def _as_array(data: object, graph: str, name: str | None) -> np.ndarray:
    if isinstance(data, np.ndarray) and not data.flags.writeable and data.dtype.kind not in "OU":
        return data  # already a frozen tensor (another graph's constant): share, don't copy
    try:
        array = np.array(data, copy=True)
        canonical_dtype(array.dtype)
    except ValueError as exc:
        raise GraphError(f"tensor {name!r}: {exc}", graph=graph) from None
    return array
