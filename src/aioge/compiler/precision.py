"""GE's precision modes: which nodes compute in bf16 or fp16 (float32 accumulation).

``place_precision`` runs on the optimised graph (the last step of ``compiler.graph.optimised_graph``)
and sets the ``precision`` attribute of every float32 matrix node (MatMul, Gemm, Conv,
ConvTranspose and their fused forms: the ops ``ops.schema.low_precision`` marks) it lowers;
the kernel compile then offers that node only its low-precision kernels (``kernels.lowp``).
The attribute is part of the node, so of kernel keys and of the optimised graph's fingerprint;
the mode itself is a compiler option, so of the graph-cache key.

- ``must_keep_origin_dtype`` / ``origin`` (the default): nothing changes, bit for bit.
- ``allow_fp32_to_bf16``: matrix ops in bf16; ``allow_fp32_to_fp16``, ``force_fp16``, ``fp16``,
  and ``force_fp32`` / ``cube_fp16in_fp32out`` (GE: "the same effect", fp16 in and float32 out
  for cube ops): matrix ops in fp16. Vector ops keep float32 in every mode (aioge has no
  fp16 vector kernels: GE keeps an op in float32 when its implementation has no fp16).
- the mixed modes (``allow_mix_precision[_fp16|_bf16]``, ``mixed_float16``, ``mixed_bfloat16``):
  an op type on the white (allow) list is lowered, on the black (deny) list kept float32, and
  any other (gray) follows the producer of its first non-constant input (GE's precision_reduce
  rule); ``ge.exec.modify_mixlist`` moves op types between the lists.
- ``ge.keep_dtype`` (node names, ``OpType::X`` lines) keeps nodes float32 in every mode.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from aioge.errors import OptionError
from aioge.ir.graph import Graph, Node, ValueKind
from aioge.kernels.lowp import PRECISION_ATTR
from aioge.ops.registry import get_schema
from aioge.options import CompileOptions

__all__ = ["BLACK", "MODES", "Mixlist", "Policy", "WHITE", "place_precision", "policy", "read_keep_dtype", "read_mixlist"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Policy:
    """What a mode does: the precision it lowers to ("" for none) and whether lists decide."""

    precision: str = ""
    mixed: bool = False


MODES: dict[str, Policy] = {
    "must_keep_origin_dtype": Policy(),
    "origin": Policy(),
    "force_fp32": Policy("fp16"),
    "cube_fp16in_fp32out": Policy("fp16"),
    "force_fp16": Policy("fp16"),
    "fp16": Policy("fp16"),
    "allow_fp32_to_fp16": Policy("fp16"),
    "allow_fp32_to_bf16": Policy("bf16"),
    "allow_mix_precision": Policy("fp16", True),
    "allow_mix_precision_fp16": Policy("fp16", True),
    "mixed_float16": Policy("fp16", True),
    "allow_mix_precision_bf16": Policy("bf16", True),
    "mixed_bfloat16": Policy("bf16", True),
}

# The mixed modes' built-in lists (by ONNX op type; a fused node is listed by its base op too).
WHITE = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
BLACK = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "ReduceMean",
        "ReduceSum",
        "ReduceL2",
        "Exp",
        "Log",
        "Pow",
        "Sqrt",
        "Div",
        "Erf",
    }
)
_BASE = {"FusedMatMul": "MatMul", "FusedGemm": "Gemm", "FusedConv": "Conv"}
_LISTS = ("white-list", "black-list", "gray-list")
_MAX_BYTES = 1 << 20


def policy(options: CompileOptions) -> Policy:
    """The mode ``options`` set (``precision_mode_v2`` when given, else ``precision_mode``)."""
    return MODES[options.precision_mode_v2 or options.precision_mode]


@dataclass(frozen=True, slots=True)
class Mixlist:
    """The mixed modes' lists after ``modify_mixlist``: op types by list."""

    white: frozenset[str] = WHITE
    black: frozenset[str] = BLACK
    gray: frozenset[str] = frozenset()

    def of(self, node: Node) -> str:
        """ "white", "black" or "gray" for ``node`` (its own type first, then its base op's)."""
        for op in (node.op_type, _BASE.get(node.op_type)):
            if op in self.white:
                return "white"
            if op in self.black:
                return "black"
            if op in self.gray:
                return "gray"
        return "gray"


def _read(key: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise OptionError(key, path, f"a readable file ({exc.strerror})") from None
    if len(data) > _MAX_BYTES:
        raise OptionError(key, path, f"a file of at most {_MAX_BYTES} bytes")
    return data


def read_mixlist(path: str) -> Mixlist:
    """GE's modify_mixlist JSON: ``{"white-list": {"to-add": [...], "to-remove": [...]}, ...}``
    (any of the three lists, op types as strings); an op type added to a list leaves the others.

    Raises:
        OptionError: the file cannot be read or is not that JSON (naming file and what is wrong).
    """
    if not path:
        return Mixlist()
    key = "ge.exec.modify_mixlist"
    want = 'JSON {"white-list"|"black-list"|"gray-list": {"to-add": [op types], "to-remove": [op types]}}'
    try:
        doc = json.loads(_read(key, path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise OptionError(key, path, f"{want}; not JSON: {exc}") from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(key, path, f"{want}; got a {type(doc).__name__}")
    lists = {"white-list": set(WHITE), "black-list": set(BLACK), "gray-list": set()}
    for name, edit in doc.items():
        if name not in lists:
            raise OptionError(key, path, f"{want}; {name!r} is not one of {', '.join(_LISTS)}")
        if not isinstance(edit, dict) or set(edit) - {"to-add", "to-remove"}:
            raise OptionError(key, path, f'{want}; {name!r} must hold only "to-add" and "to-remove"')
        for verb, ops in edit.items():
            if not isinstance(ops, list) or not all(isinstance(o, str) and o for o in ops):
                raise OptionError(key, path, f"{want}; {name!r} {verb!r} must be a list of op type strings")
    for name, edit in doc.items():
        for op in edit.get("to-remove", []):
            lists[name].discard(op)
        for op in edit.get("to-add", []):
            for other in lists.values():
                other.discard(op)
            lists[name].add(op)
    return Mixlist(frozenset(lists["white-list"]), frozenset(lists["black-list"]), frozenset(lists["gray-list"]))


def read_keep_dtype(path: str) -> tuple[frozenset[str], frozenset[str]]:
    """GE's keep_dtype file: one node name or ``OpType::X`` a line (blank lines and ``#``
    comments skipped): (node names, op types).

    Raises:
        OptionError: the file cannot be read, or a line is malformed.
    """
    if not path:
        return frozenset(), frozenset()
    key = "ge.keep_dtype"
    names, types = set(), set()
    for number, raw in enumerate(_read(key, path).decode("utf-8", "replace").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        prefix, colons, op = line.partition("::")
        if not colons:
            names.add(line)
        elif prefix.lower() == "optype" and op.strip():
            types.add(op.strip())
        else:
            raise OptionError(key, path, f"line {number} {line!r}: expected a node name or OpType::<op type>")
    return frozenset(names), frozenset(types)


def _lowerable(node: Node) -> bool:
    schema = get_schema(node.op_type, node.domain)
    ins = [v for v in node.inputs[:2] if v is not None]
    return PRECISION_ATTR in schema.attrs and len(ins) == 2 and all(v.desc.dtype == "float32" for v in (*ins, *node.outputs[:1]))


def place_precision(graph: Graph, options: CompileOptions) -> dict[str, str]:
    """Set ``precision`` on the nodes ``options``' mode lowers; return every node's placement
    by name ("bf16", "fp16", or "fp32": the mixed modes' gray rule reads it for any op).

    Raises:
        OptionError: a bad modify_mixlist or keep_dtype file.
    """
    pol = policy(options)
    placed: dict[str, str] = {}
    if not pol.precision:
        return placed
    names, types = read_keep_dtype(options.keep_dtype)
    lists = read_mixlist(options.modify_mixlist) if pol.mixed else Mixlist()
    if options.modify_mixlist and not pol.mixed:
        log.warning("ge.exec.modify_mixlist %s is ignored: it applies to the mixed precision modes only", options.modify_mixlist)
    producer = {id(out): n for n in graph.nodes for out in n.outputs}
    for node in graph.topological_order():
        kept = node.name in names or node.op_type in types or _BASE.get(node.op_type) in types
        if kept:
            want = "fp32"
        elif not pol.mixed:
            want = pol.precision
        else:
            kind = lists.of(node)
            if kind == "gray":
                src = next((v for v in node.inputs if v is not None and v.kind is not ValueKind.CONSTANT), None)
                up = producer.get(id(src)) if src is not None else None
                want = placed.get(up.name, "fp32") if up is not None else "fp32"
            else:
                want = pol.precision if kind == "white" else "fp32"
        placed[node.name] = want
        if want != "fp32" and _lowerable(node):
            node.attrs[PRECISION_ATTR] = want
    log.info("precision %s: %d node(s) lowered", options.precision_mode_v2 or options.precision_mode, len(lowered(graph)))
    return placed


def lowered(graph: Graph) -> dict[str, str]:
    """The nodes of ``graph`` that compute in low precision, with it."""
    return {n.name: str(n.attrs[PRECISION_ATTR]) for n in graph.nodes if n.attrs.get(PRECISION_ATTR)}
