"""Op schemas: what an op is called, its attributes, shape inference, engines and kernels.

One ``OpSchema`` holds everything about an op type, declared next to its family's kernels
(``aioge/ops/<family>.py``). The registry (``aioge.ops.registry``) is the constant table of
all of them; nothing registers itself at import time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels.contract import Engine, KernelImpl, RunFn  # the kernel contract, re-exported for the families

__all__ = [
    "ALL_ENGINES",
    "CPU_ONLY",
    "CostClass",
    "FLOAT_DTYPES",
    "Attr",
    "InferContext",
    "InferError",
    "InferFn",
    "KernelImpl",
    "OpSchema",
    "REQUIRED",
    "RunFn",
    "low_precision",
    "VECTOR_ENGINES",
]

ALL_ENGINES = frozenset({Engine.AICORE, Engine.AIVEC, Engine.AICPU})
VECTOR_ENGINES = frozenset({Engine.AIVEC, Engine.AICPU})
CPU_ONLY = frozenset({Engine.AICPU})
FLOAT_DTYPES: tuple[str, ...] = ("float16", "float32", "float64")
_FLOATS = frozenset(FLOAT_DTYPES)


# How the stream planner estimates a node's run time (``compiler.streams.node_cost``): memory
# traffic alone, or the multiply-adds of a matrix product or of a convolution on top.
CostClass = Literal["memory", "matmul", "conv"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


class InferError(ValueError):
    """Raised by shape inference; the caller wraps it in a GraphError naming the node."""


_KINDS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "ints": lambda v: isinstance(v, (list, tuple)) and all(_KINDS["int"](x) for x in v),
    "floats": lambda v: isinstance(v, (list, tuple)) and all(_KINDS["float"](x) for x in v),
    "strings": lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v),
    "tensor": lambda v: isinstance(v, np.ndarray),
    "dtype": lambda v: True,
    "any": lambda v: True,
}


@dataclass(frozen=True, slots=True)
class Attr:
    """One attribute: its kind, default (or REQUIRED), allowed choices and an extra check."""

    kind: str
    default: Any = None
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any], str | None] | None = None  # returns the reason it is invalid, or None

    def normalise(self, value: Any) -> Any:
        """Return the value in canonical form (ints as int, lists as tuples).

        Raises:
            ValueError: the value is of the wrong kind or not allowed.
        """
        if not _KINDS[self.kind](value):
            raise ValueError(f"expected {self.kind}, got {value!r}")
        if self.kind == "int":
            value = int(value)
        elif self.kind == "float":
            value = float(value)
        elif self.kind == "ints":
            value = tuple(int(v) for v in value)
        elif self.kind == "floats":
            value = tuple(float(v) for v in value)
        elif self.kind == "strings":
            value = tuple(value)
        elif self.kind == "dtype":
            from aioge.ir.desc import canonical_dtype

            value = canonical_dtype(value)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"expected one of {list(self.choices)}, got {value!r}")
        if self.check is not None:
            reason = self.check(value)
            if reason:
                raise ValueError(reason)
        return value


@dataclass(slots=True)
class InferContext:
    """What shape inference sees of a node: input descs, known input values, attributes."""

    inputs: Sequence[TensorDesc | None]
    values: Sequence[np.ndarray | None]
    attrs: Mapping[str, Any]
    num_outputs: int

    def shape(self, i: int) -> tuple[Dim, ...] | None:
        d = self.inputs[i] if i < len(self.inputs) else None
        return None if d is None else d.shape

    def dtype(self, i: int) -> str:
        d = self.inputs[i]
        if d is None:
            raise InferError(f"input {i} is required")
        return d.dtype

    def value(self, i: int) -> np.ndarray | None:
        return self.values[i] if i < len(self.values) else None

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None


# Shape inference: the output descs of a node, or InferError.
InferFn = Callable[[InferContext], "list[TensorDesc]"]


@dataclass(frozen=True, slots=True)
class OpSchema:
    """Everything about one op type."""

    name: str
    infer: InferFn
    impls: tuple[KernelImpl, ...]
    engines: frozenset[Engine]
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    inputs: tuple[int, int] = (1, 1)  # min, max; max -1 = variadic
    outputs: tuple[int, int] = (1, 1)
    domain: str = ""
    family: str = ""
    elementwise: bool = False
    builder: str | None = None  # the aioge.ops function name; default: snake_case of the name
    doc: str = ""
    version: int = 1  # bump when a kernel's numerics change: it is part of every kernel key
    float_only: bool = True  # AiCore and AiVec take only float tensors; other dtypes go to AiCpu
    containers: bool = False  # inputs may be sequences or optionals (aioge.ir.desc.CONTAINERS); else tensors only
    # Facts the compiler acts on (``aioge.ops.evaluate``, the passes, the stream planner):
    random: bool = False  # outputs are not a function of the inputs: never evaluated ahead, folded or merged
    shape_only: bool = False  # outputs follow from the inputs' descs alone (their data is never read)
    cost: CostClass = "memory"

    def engines_for(self, in_descs: Sequence[TensorDesc | None]) -> frozenset[Engine]:
        """The engines that can run this op on inputs of these descs."""
        if self.float_only and any(d is not None and d.dtype not in _FLOATS for d in in_descs):
            return self.engines & CPU_ONLY
        return self.engines

    def normalise_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Validate attributes and fill in defaults.

        Raises:
            ValueError: an unknown attribute, a missing required one, or a bad value
                (the message names the attribute).
        """
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise ValueError(f"unknown attribute(s) {unknown} for {self.name}; known: {sorted(self.attrs)}")
        out: dict[str, Any] = {}
        for key, spec in self.attrs.items():
            if key in attrs and attrs[key] is not None:
                try:
                    out[key] = spec.normalise(attrs[key])
                except ValueError as exc:
                    raise ValueError(f"attribute {key!r} of {self.name}: {exc}") from None
            elif spec.default is REQUIRED:
                raise ValueError(f"attribute {key!r} of {self.name} is required")
            elif spec.default is not None:
                out[key] = spec.default
        return out

    def impl(self, name: str) -> KernelImpl:
        for impl in self.impls:
            if impl.name == name:
                return impl
        raise KeyError(f"{self.name} has no implementation {name!r}")


def low_precision(schema: OpSchema, *first: KernelImpl) -> OpSchema:
    """``schema`` as GE's precision modes may place it in bf16 or fp16 (a matrix op): its
    ``precision`` attribute (``aioge.compiler.precision`` sets it) and its low-precision
    kernels (``first``, then its own over operands rounded at its input: ``kernels.lowp``)."""
    from aioge.kernels.lowp import PRECISION_ATTR, lowp_impls

    attrs = {**schema.attrs, PRECISION_ATTR: Attr("string", None, ("bf16", "fp16"))}
    return dataclasses.replace(schema, impls=(*schema.impls, *first, *lowp_impls(schema.impls)), attrs=attrs)
