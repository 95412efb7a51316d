"""Writes ``aioge/ops/builders.py``: one typed ``def`` per op schema in the registry.

Run ``python -m aioge.ops.gen`` after adding or changing a schema (its attributes, defaults,
input or output counts, builder name or doc); ``tests/ops/test_builders.py`` fails while the
committed file differs from what ``render()`` makes. Input names come from the ONNX schema
of the op (positional-only, so they document and never bind). The output is already in ``ruff
format``'s layout, so the formatter leaves it alone.
"""

from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path

import onnx.defs

from aioge.ops.registry import REGISTRY, builder_name
from aioge.ops.schema import REQUIRED, Attr, OpSchema

__all__ = ["ALIASES", "builder_names", "main", "render"]

# Extra names of a builder: alias -> builder name.
ALIASES: dict[str, str] = {"conv": "conv2d"}

# Builder keywords of their own: an attribute of the same name cannot be set through a builder
# (Split's num_outputs attribute: ``apply`` sets it).
_RESERVED = frozenset({"name", "num_outputs"})
_LINE = 130  # ruff's line-length in pyproject.toml

_KIND_TYPES = {
    "int": "int",
    "float": "float",
    "string": "str",
    "ints": "Sequence[int]",
    "floats": "Sequence[float]",
    "strings": "Sequence[str]",
    "tensor": "np.ndarray",
    "dtype": "DTypeLike",
    "any": "Any",
}

_HEADER = '''"""Typed graph builders, one per op schema in the registry. Generated: do not edit.

Made by ``python -m aioge.ops.gen`` from ``aioge.ops.registry``; a test fails when this file is
stale. Each builder adds one node through ``aioge.ops.build.apply`` (attributes validated, output
descs inferred) and returns its output value, or a tuple of values for several outputs.
Inputs are positional; numbers, lists and numpy arrays become constants of the inputs' graph.
"""

from __future__ import annotations

from typing import Any, Never, Sequence

import numpy as np
from numpy.typing import DTypeLike

from aioge.ir.graph import Graph, Value
from aioge.ops.build import Operand, call_builder

'''


def builder_names() -> dict[str, str]:
    """Every ``aioge.ops`` builder name -> the op type it adds (aliases included)."""
    names = {builder_name(s): s.name for s in _schemas()}
    names.update({alias: names[target] for alias, target in ALIASES.items()})
    return names


def render() -> str:
    """The text of ``builders.py`` for the registry as it is now.

    Raises:
        RuntimeError: two schemas share a builder name, or an alias names no builder.
    """
    schemas = _schemas()
    names = [builder_name(s) for s in schemas]
    if len(set(names)) != len(names):
        raise RuntimeError(f"builder names declared twice: {sorted({n for n in names if names.count(n) > 1})}")
    missing = sorted(a for a, target in ALIASES.items() if target not in names)
    if missing:
        raise RuntimeError(f"aliases of no builder: {missing}")
    exported = sorted([*names, *ALIASES])
    parts = [_HEADER, "__all__ = [\n", *(f'    "{n}",\n' for n in exported), "]\n"]
    for schema in schemas:
        parts.append("\n\n" + _builder(schema))
    parts.append("\n\n" + "".join(f"{alias} = {target}\n" for alias, target in sorted(ALIASES.items())))
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Write ``builders.py`` beside this module (or to the path given); returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else Path(__file__).with_name("builders.py")
    text = render()
    if target.exists() and target.read_text(encoding="utf-8") == text:
        print(f"{target}: up to date")
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"{target}: written ({len(REGISTRY)} schemas)")
    return 0


def _schemas() -> list[OpSchema]:
    return sorted(REGISTRY.values(), key=lambda s: builder_name(s))


def _builder(schema: OpSchema) -> str:
    fname = builder_name(schema)
    attrs = {k: a for k, a in schema.attrs.items() if k not in _RESERVED}
    lo, hi = schema.inputs
    variadic = hi < 0
    params: list[str] = []
    if variadic:
        inputs = ["inputs"]
        params.append("*inputs: Operand | Sequence[Operand]")
        args = "inputs"
    else:
        stems = _input_names(schema, hi)
        inputs = [s if s not in attrs else f"in_{s}" for s in stems]
        params += [f"{n}: Operand" if i < lo else f"{n}: Operand | None = None" for i, n in enumerate(inputs)]
        if not inputs:  # an op without inputs (SequenceEmpty) is told its graph
            params.append("graph: Graph")
        params.append("/")
        args = "(" + ", ".join(inputs) + ("," if len(inputs) == 1 else "") + ")"
        params.append("*")
    params += [_param(k, a) for k, a in attrs.items()]
    # **unknown: Never: a type checker rejects any other keyword; at run time apply raises the
    # GraphError naming the node and the attributes it knows.
    params += ["name: str | None = None", "num_outputs: int | None = None", "**unknown: Never"]
    returns = "Value" if schema.outputs == (1, 1) else "Any"
    listed = ", ".join(f"{k}={a.default!r}" for k, a in schema.attrs.items())
    result = "the output value" if returns == "Value" else "the output value, or a tuple of them when there are several"
    doc = f'    """{schema.name}: {schema.doc}.\n\n    Attributes: {listed or "none"}. Returns {result}.\n    """\n'
    attr_map = "{" + ", ".join([*(f'"{k}": {k}' for k in attrs), "**unknown"]) + "}"
    call = [
        f'"{schema.name}"',
        f'"{schema.domain}"',
        args,
        attr_map,
        f"variadic={variadic}",
        "name=name",
        "num_outputs=num_outputs",
        *(["graph=graph"] if not variadic and hi == 0 else []),
    ]
    return _split(f"def {fname}(", params, f") -> {returns}:", 0) + doc + _split("return call_builder(", call, ")", 4)


def _input_names(schema: OpSchema, count: int) -> list[str]:
    """The op's ONNX input names in snake case (``X, W, B`` -> ``x, w, b``); ``x0, x1, ...``
    for ops ONNX does not define (aioge's fused ops)."""
    try:
        formal = [re.sub(r"\W", "_", i.name).lower() for i in onnx.defs.get_schema(schema.name, schema.domain).inputs]
    except onnx.defs.SchemaError:
        formal = []
    names = formal[:count]
    if len(names) < count or len(set(names)) < count or any(keyword.iskeyword(n) or n in _RESERVED for n in names):
        names = ["x"] if count == 1 else [f"x{i}" for i in range(count)]
    return names


def _param(key: str, attr: Attr) -> str:
    kind = _KIND_TYPES[attr.kind]
    if attr.default is REQUIRED:
        return f"{key}: {kind}"
    if attr.default is None:
        return f"{key}: {kind} | None = None"
    return f"{key}: {kind} = {_literal(attr.default)}"


def _literal(value: object) -> str:
    """``repr`` with strings in double quotes, as ruff format writes them."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _split(opening: str, items: list[str], closing: str, indent: int) -> str:
    """``opening items closing`` laid out as ruff format does: one line if it fits, else the
    items on one indented line if they fit, else one item a line with a trailing comma."""
    pad = " " * indent
    one = pad + opening + ", ".join(items) + closing
    if len(one) <= _LINE:
        return one + "\n"
    inner = pad + "    " + ", ".join(items)
    if len(inner) <= _LINE:
        return pad + opening + "\n" + inner + "\n" + pad + closing + "\n"
    lines = []
    for item in items:
        if len(pad) + 4 + len(item) + 1 > _LINE and item.startswith("{"):  # a dict too long for its line
            entries = item[1:-1].split(", ")
            item = "{\n" + "".join(f"{pad}        {e},\n" for e in entries) + pad + "    }"
        lines.append(f"{pad}    {item},\n")
    return pad + opening + "\n" + "".join(lines) + pad + closing + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
