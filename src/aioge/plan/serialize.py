"""CompiledModel <-> ``.om`` bytes: the compiled model as a file.

An ``.om`` is a ``plan.io`` envelope of kind ``"om"`` around one msgpack payload holding the
optimised graph (inputs, constants, variables, nodes with their attributes and output descs,
outputs), every other field of ``CompiledModel`` (node plans with their ``KernelDesc``, the
stream plan and its events, the memory plan, fingerprint, signature, options, versions,
compile statistics), the op versions the kernels were chosen under, and a digest of aioge's
code. Constant and variable data travel inline (one 64-byte-aligned bytes field of the
payload, each tensor a zero-copy read-only view of it on load) or, with
``external=True`` (GE's ``ge.externalWeight=1``), as raw files ``weight/weight_<sha256>``
beside the ``.om``: named by content so identical weights are stored once, and read
into private memory on load, checking their size and sha256 as they are read (never
memory-mapped: a file changed or truncated under a loaded model must not change it).
The graph cache stores a third kind, with ``graph_refs``: a tensor that is, byte for byte,
an array of the graph the model was compiled from (most weights survive the passes) is a
reference by that array's ``ir.fingerprint.array_digest`` (dtype, shape and bytes), and on
load is taken from the graph in hand (``held``), which has just hashed it for its
fingerprint: a hit neither stores, reads nor hashes those bytes again. Such an ``.om``
loads only with that graph (``aioge compile -o`` and ``CompiledModel.save`` never write one).

The plan dataclasses are encoded generically from their fields by ``plan.codec``, with a
digest of their layout stored: a file written under another layout is stale
(``ModelFormatError``), never decoded into the wrong shape. Loading rebuilds the graph from
the stored descs, checks them against shape inference (as a compile made them: kernels size
their C calls from them), checks every field against its annotation and the plans against the graph, and binds each kernel once; anything malformed is a
``ModelFormatError``.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import logging
import os
import struct
import time
from typing import Any, Callable

import anyio
import numpy as np

from aioge.errors import CacheError, GraphError, ModelFormatError
from aioge.ir.desc import CONTAINERS, DTYPES, TensorDesc
from aioge.ir.graph import Graph, Value
from aioge.kernels.contract import bind_kernel
from aioge.keys import code_digest
from aioge.plan import io
from aioge.plan.codec import ARRAY_DTYPES as _ARRAY_DTYPES
from aioge.plan.codec import build_dataclass as _build_dataclass
from aioge.plan.codec import decode_value as _dec
from aioge.plan.codec import encode_value as _enc
from aioge.plan.codec import layout_digest
from aioge.plan.model import CompiledModel, CompileStats

__all__ = [
    "OM_KIND",
    "OM_LAYOUT",
    "WEIGHT_DIR",
    "GraphRefs",
    "Held",
    "code_digest",
    "decode_meta",
    "decode_model",
    "encode_model",
    "load_model",
    "load_model_sync",
    "save_model",
    "save_model_sync",
]

log = logging.getLogger(__name__)

GraphRefs = Callable[[np.ndarray], str | None]  # array -> the digest the source graph holds it under, or None
Held = Callable[[str], np.ndarray | None]  # digest -> the array the graph in hand holds under it, or None

OM_KIND = "om"
# Bump when the payload's structure or the meaning of a plan field changes (a changed set of
# plan fields is caught by the layout digest too). 2: CompiledModel.threads, the thread grouping
# the runtime used to plan itself; a layout-1 file is stale and recompiled. 3: the payload's
# "gears", GE's dynamic gears, each a graph and its plan fields like the model's own. 4: graph
# references ("~g"): an older aioge refuses the file cleanly instead of misreading a tag it lacks.
OM_LAYOUT = 4
# Layouts read besides OM_LAYOUT: 3 is 4 without graph references.
_ALSO_READS = (3,)
WEIGHT_DIR = "weight"
_WEIGHT_PREFIX = "weight_"

# Tags of the data references (plan.codec's generic tags are one-key maps too).
_T_WEIGHT, _T_BLOB = "~w", "~b"
# A splat constant (every element one value: ConstantOfShape, folded zeros or ones) is stored
# as that element's bytes and materialised at load: the light VGG-19's folded weights take
# 495 MB as a blob and a few KB this way.
_T_SPLAT = "~s"
_SPLAT_MIN_BYTES = 1024
# A tensor the source graph holds: [array_digest, nbytes]. Smaller ones stay in the file: a
# reference saves nothing there, and the file stays readable on its own for most small models.
_T_GRAPH = "~g"
_REF_MIN_BYTES = 1024
_BLOB_ALIGN = 64
_WEIGHT_CHUNK = 1 << 20  # bytes read and hashed at a time (fits the CPU's cache)
_MAX_TENSOR_BYTES = 16 << 30  # no tensor or arena of a model this simulator runs is larger
_MAX_META_BYTES = 256 << 20  # a model's graph and plans (tensor data lies outside): ~30 KB for a transformer block


# -- descs ----------------------------------------------------------------------------


def _enc_desc(d: TensorDesc) -> list[Any]:
    # A tensor's desc stays three fields (files written before sequences and optionals read as ever).
    if d.container != "tensor":
        return [None if d.shape is None else list(d.shape), d.dtype, d.format, d.container]
    return [None if d.shape is None else list(d.shape), d.dtype, d.format]


def _dec_desc(x: Any) -> TensorDesc:
    if not isinstance(x, list) or len(x) not in (3, 4):
        raise ModelFormatError(f"malformed tensor desc {x!r:.80}")
    shape, dtype, fmt = x[:3]
    container = x[3] if len(x) == 4 else "tensor"
    if container not in CONTAINERS:
        raise ModelFormatError(f"malformed desc container {container!r:.80}")
    if shape is not None and not (
        isinstance(shape, list)
        and all((isinstance(d, int) and not isinstance(d, bool) and d >= 0) or isinstance(d, str) for d in shape)
    ):
        raise ModelFormatError(f"malformed shape {shape!r:.80}")
    if dtype not in DTYPES or not isinstance(fmt, str):
        raise ModelFormatError(f"malformed desc dtype/format {dtype!r}/{fmt!r}")
    return TensorDesc(None if shape is None else tuple(shape), dtype, fmt, container)


# -- encoding -------------------------------------------------------------------------


def encode_model(
    model: CompiledModel, *, external: bool = False, graph_refs: GraphRefs | None = None
) -> tuple[bytes, dict[str, np.ndarray]]:
    """Serialise a compiled model.

    Returns ``(om_bytes, weights)``: the envelope bytes of the ``.om`` and, with
    ``external=True``, the weight files it references (``weight_<sha256>`` -> array), to be
    written under ``weight/`` beside it (``save_model_sync`` does both). ``graph_refs(array)``
    (the graph cache's) gives the ``array_digest`` under which the source graph holds exactly
    ``array``, or None: such tensors are stored as references, loadable only with that graph.

    Raises:
        ModelFormatError: the model holds something that cannot be stored.
    """
    weights: dict[str, np.ndarray] = {}
    for n in model.graph.nodes:  # what loading will check, checked now: a file that cannot load is not written
        _check_attrs(n.name, n.op_type, n.domain, n.attrs)
    for gear in model.gears:
        for n in gear.graph.nodes:
            _check_attrs(n.name, n.op_type, n.domain, n.attrs)
    blob = _Blob(graph_refs)
    try:
        payload = {
            "layout": OM_LAYOUT,
            "layout_digest": layout_digest(),
            "code": code_digest(),
            "created": time.time(),
            **_enc_one(model, weights if external else None, blob),
            "gears": [_enc_one(g, weights if external else None, blob) for g in model.gears],
        }
        framed = _frame(io.pack(payload), blob.chunks)
    except TypeError as exc:
        raise ModelFormatError(f"graph {model.graph.name!r}: cannot serialise: {exc}") from None
    return io.make_envelope(OM_KIND, framed, {"graph": model.graph.name}), weights


def _enc_one(model: CompiledModel, weights: dict[str, np.ndarray] | None, blob: _Blob) -> dict[str, Any]:
    """One gear's graph, plan fields and op versions (the first gear's are the payload's own)."""
    if any(g.gears for g in model.gears):
        raise TypeError("a gear has gears of its own")
    return {
        "graph": _enc_graph(model.graph, weights, blob),
        "fields": {f.name: _enc(getattr(model, f.name)) for f in dataclasses.fields(model) if f.name not in ("graph", "gears")},
        "ops": _op_versions(model.graph),
    }


def _frame(meta: bytes, blob: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """The envelope payload, in pieces: meta length (8 bytes LE) | meta (msgpack) | zero pad
    to 64 | blob.

    The tensor bytes stay outside msgpack, so loading views them where they lie in the
    payload instead of copying them once more out of a msgpack bin."""
    head = struct.pack("<Q", len(meta)) + meta
    return [head + b"\0" * (-len(head) % _BLOB_ALIGN), *blob]


def _unframe(payload: bytes, path: str | None) -> tuple[Any, memoryview]:
    if len(payload) < 8:
        raise ModelFormatError("payload too short", path=path)
    (n,) = struct.unpack_from("<Q", payload)
    if n > _MAX_META_BYTES:  # decoding allocates up to ~25x its size (plan.io): bound it before
        raise ModelFormatError(
            f"payload declares {n} bytes of metadata, more than the {_MAX_META_BYTES} a model may have", path=path
        )
    start = 8 + n + (-(8 + n) % _BLOB_ALIGN)
    if 8 + n > len(payload) or start > len(payload):
        raise ModelFormatError(f"payload declares {n} bytes of metadata, has {len(payload) - 8}", path=path)
    try:
        meta = io.unpack(payload[8 : 8 + n], what="compiled model")
    except CacheError as exc:
        raise ModelFormatError(str(exc), path=path) from None
    return meta, memoryview(payload)[start:]


class _Blob:
    """Inline tensor data, concatenated at aligned offsets after the payload's metadata.

    On load every tensor is a zero-copy read-only view of the payload (an ExtType per
    tensor would be copied twice and parsed once more)."""

    def __init__(self, graph_refs: GraphRefs | None = None) -> None:
        self.graph_refs = graph_refs  # tensors of the source graph, by reference (the graph cache's)
        self.chunks: list[bytes | memoryview] = []
        self.size = 0
        self.seen: dict[bytes, list[int]] = {}  # sha256 -> span: gears share their weights, stored once

    def add(self, flat: np.ndarray) -> list[int]:
        digest = hashlib.sha256(flat.data).digest()
        if digest in self.seen:
            return self.seen[digest]
        offset = self.size
        self.chunks.append(flat.data)  # a view: the one copy is make_envelope's
        pad = -(offset + flat.size) % _BLOB_ALIGN
        if pad:
            self.chunks.append(b"\0" * pad)
        self.size += flat.size + pad
        self.seen[digest] = [offset, int(flat.size)]
        return [offset, int(flat.size)]


def _data_ref(data: np.ndarray, weights: dict[str, np.ndarray] | None, blob: _Blob) -> Any:
    if data.dtype.name not in _ARRAY_DTYPES or data.size == 0:
        return _enc(data)
    if data.nbytes >= _SPLAT_MIN_BYTES and _is_splat(data):
        return {_T_SPLAT: np.ascontiguousarray(data.reshape(-1)[:1]).view(np.uint8).tobytes()}
    if blob.graph_refs is not None and data.nbytes >= _REF_MIN_BYTES:
        digest = blob.graph_refs(data)
        if digest is not None:
            return {_T_GRAPH: [digest, int(data.nbytes)]}
    flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if weights is None:
        return {_T_BLOB: blob.add(flat)}
    digest = hashlib.sha256(flat.data).hexdigest()
    name = _WEIGHT_PREFIX + digest
    weights[name] = data
    return {_T_WEIGHT: [name, digest, int(flat.size)]}


def _is_splat(data: np.ndarray) -> bool:
    """Whether every element has the first one's bytes (bitwise: NaN and -0.0 count as values)."""
    flat = data.reshape(-1)
    size = data.dtype.itemsize
    rows = flat.view(f"u{size}") if size in (1, 2, 4, 8) else np.ascontiguousarray(flat).view(np.uint8).reshape(-1, size)
    first = rows[0]
    # Most big constants are not splats: two probes decide most of those without a full pass.
    if any(np.any(rows[i] != first) for i in (len(rows) // 2, -1)):
        return False
    return bool(np.all(rows == first))


def _enc_graph(g: Graph, weights: dict[str, np.ndarray] | None, blob: _Blob) -> dict[str, Any]:
    return {
        "name": g.name,
        "inputs": [[v.name, _enc_desc(v.desc)] for v in g.inputs],
        "constants": [[v.name, _enc_desc(v.desc), _data_ref(v.data, weights, blob)] for v in g.constants.values()],  # type: ignore[arg-type]
        "variables": [[v.name, _enc_desc(v.desc), _data_ref(v.data, weights, blob)] for v in g.variables.values()],  # type: ignore[arg-type]
        "nodes": [
            [
                n.name,
                n.op_type,
                n.domain,
                _enc(n.attrs),
                [None if v is None else v.name for v in n.inputs],
                [[o.name, _enc_desc(o.desc)] for o in n.outputs],
            ]
            for n in g.nodes
        ],
        "outputs": [v.name for v in g.outputs],
    }


def _op_versions(g: Graph) -> dict[str, int]:
    """The schema version of every op the graph uses: kernels' numerics are tied to it."""
    from aioge.ops.registry import get_schema

    return {f"{n.domain}::{n.op_type}": get_schema(n.op_type, n.domain).version for n in g.nodes}


# -- decoding -------------------------------------------------------------------------


def _open(data: bytes, path: str | None, check_versions: bool) -> tuple[dict[str, Any], dict[str, Any], memoryview]:
    try:
        header, framed = io.open_envelope(data, OM_KIND, path=path, check_versions=check_versions)
    except CacheError as exc:
        raise ModelFormatError(str(exc).removeprefix(f"{path}: ") if path else str(exc), path=path) from None
    payload, blob = _unframe(framed, path)
    if not isinstance(payload, dict):
        raise ModelFormatError("payload is not a map", path=path)
    if payload.get("layout") != OM_LAYOUT and payload.get("layout") not in _ALSO_READS:
        raise ModelFormatError(f"payload layout {payload.get('layout')!r}, this aioge reads {OM_LAYOUT}", path=path)
    if payload.get("layout_digest") != layout_digest():
        raise ModelFormatError("written under another plan layout (the compiler's plan fields changed); recompile", path=path)
    return header, payload, blob


def decode_meta(data: bytes, *, path: str | None = None, check_versions: bool = True) -> dict[str, Any]:
    """The checked metadata of an .om without rebuilding its graph.

    Returns a dict with ``graph``, ``fingerprint``, ``signature``, ``options``, ``versions``,
    ``code``, ``created``, ``stats`` (of the compile that made it), ``external`` (whether it
    references weight files), ``sha256`` (of the payload) and ``summary`` counts.

    Raises:
        ModelFormatError: not a valid .om for this aioge.
    """
    header, payload, _ = _open(data, path, check_versions)
    try:
        fields = payload["fields"]
        graph = payload["graph"]
        signature = _dec(fields["signature"])
        meta = {
            "graph": graph["name"],
            "fingerprint": fields["fingerprint"],
            "signature": [[n, list(s)] for n, s in signature],
            "options": _dec(fields["options"]),
            "versions": _dec(fields["versions"]),
            "code": payload["code"],
            "created": payload["created"],
            "stats": _stats_dict(_dec(fields["stats"])),
            "external": any(isinstance(c[2], dict) and _T_WEIGHT in c[2] for c in graph["constants"] + graph["variables"]),
            "sha256": header["sha256"],
            "variables": [[v[0], *_enc_desc(_dec_desc(v[1]))] for v in graph["variables"]],
            "gears": [[[n, list(s)] for n, s in _dec(g["fields"]["signature"])] for g in payload["gears"]],
        }
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ModelFormatError(f"malformed compiled model: {type(exc).__name__}: {exc}", path=path) from None
    return meta


def _stats_dict(stats: Any) -> dict[str, Any]:
    if not isinstance(stats, CompileStats):
        raise TypeError("stats is not CompileStats")
    return {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}


def decode_model(
    data: bytes,
    *,
    path: str | None = None,
    weight_dir: str | None = None,
    check_versions: bool = True,
    require_owner: bool = False,
    expect_sha256: str | None = None,
    held: Held | None = None,
) -> CompiledModel:
    """Rebuild a compiled model from ``.om`` bytes.

    ``weight_dir`` is where external weights live (default: ``weight/`` beside ``path``; ``""``:
    nowhere, a reference to a weight file is refused).
    A weight file others may write is refused; with ``require_owner`` it must also be owned
    by this user and not writable by its group; with ``expect_sha256``
    the payload must be that one (an index entry names the file it was made for). ``held(digest)``
    gives the arrays of the graph in hand that a graph cache entry references (``encode_model``'s
    ``graph_refs``); without it, or when it lacks one, a reference is refused. The returned model's
    stats are fresh: nothing was compiled (``kernels_compiled == 0``), ``compile_seconds``
    is the decode time.

    Raises:
        ModelFormatError: corrupt, truncated, foreign or stale, malformed, or referencing a
            weight file that is missing or does not match its size or sha256, or a graph
            array that ``held`` does not give.
    """
    start = time.perf_counter()
    header, payload, blob = _open(data, path, check_versions)
    if expect_sha256 is not None and header.get("sha256") != expect_sha256:
        raise ModelFormatError("is not the file its index entry was made for (sha256 differs)", path=path)
    if weight_dir is None:
        weight_dir = os.path.join(os.path.dirname(os.path.abspath(path)) if path else ".", WEIGHT_DIR)
    try:
        model = _dec_one(payload, weight_dir, require_owner, blob, held)
        gears = payload["gears"]
        if not isinstance(gears, list) or len(gears) > 99:  # GE's limit: 100 gears
            raise TypeError("gears is not a list of at most 99 gears")
        model.gears = tuple(_dec_one(g, weight_dir, require_owner, blob, held) for g in gears)
        if payload["code"] != code_digest():
            log.info("%s: compiled by another build of aioge's code (same versions)", path or "compiled model")
    except ModelFormatError as exc:
        if exc.path is None and path is not None:
            raise ModelFormatError(str(exc), path=path) from None
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, GraphError) as exc:
        raise ModelFormatError(f"malformed compiled model: {type(exc).__name__}: {exc}", path=path) from None
    model.stats.compile_seconds = time.perf_counter() - start
    return model


def _dec_one(x: Any, weight_dir: str, require_owner: bool, blob: memoryview, held: Held | None) -> CompiledModel:
    """One gear: its graph, plan fields (checked against the graph) and fresh stats."""
    if not isinstance(x, dict):
        raise TypeError("a gear is not a map")
    graph = _dec_graph(x["graph"], weight_dir, require_owner, blob, held)
    fields = x["fields"]
    if not isinstance(fields, dict):
        raise TypeError("fields is not a map")
    values = {k: _dec(v) for k, v in fields.items()}
    values["graph"] = graph
    values["gears"] = ()
    model: CompiledModel = _build_dataclass(CompiledModel, "CompiledModel", values)
    _check_ops(model, x["ops"])
    _check_shapes(graph)
    _check_plan(model)
    stored = model.stats
    if not isinstance(stored, CompileStats):
        raise TypeError(f"stats is a {type(stored).__name__}")
    model.stats = CompileStats()  # fresh: nothing was compiled to get this model
    model.stats.passes_applied = [str(p) for p in stored.passes_applied]
    model.stats.nodes_before_passes = int(stored.nodes_before_passes)
    return model


def _dec_graph(x: Any, weight_dir: str, require_owner: bool, blob: memoryview, held: Held | None) -> Graph:
    g = Graph(x["name"])
    if not isinstance(g.name, str):
        raise TypeError("graph name is not a string")
    for name, desc in x["inputs"]:
        d = _dec_desc(desc)
        v = g.input(name, d.shape, d.dtype, d.container)
        v.desc = d  # keep the stored format
    for table, make in (("constants", g.constant), ("variables", None)):
        for name, desc, ref in x[table]:
            d = _dec_desc(desc)
            data = _dec_data(ref, d, weight_dir, require_owner, name, blob, held)
            v = make(data, name) if make is not None else g.variable(name, data)
            _set_desc(v, d)
    for name, op_type, domain, attrs, inputs, outputs in x["nodes"]:
        attr_values = _dec(attrs)
        if not isinstance(attr_values, dict) or not isinstance(op_type, str) or not isinstance(domain, str):
            raise ModelFormatError(f"node {name!r}: malformed op or attributes")
        _check_attrs(name, op_type, domain, attr_values)
        ins = [None if i is None else g.value(i) for i in inputs]
        descs = [_dec_desc(o[1]) for o in outputs]
        g.add_node(op_type, ins, attr_values, descs, name=name, output_names=[o[0] for o in outputs], domain=domain)
    g.output(*(g.value(n) for n in x["outputs"]))
    return g


def _check_attrs(node: str, op_type: str, domain: str, attrs: dict[str, Any]) -> None:
    """Attributes must be what the op's schema accepts: kernels are bound with them."""
    from aioge.ops.registry import get_schema

    try:
        get_schema(op_type, domain).normalise_attrs(attrs)
    except KeyError:
        raise ModelFormatError(f"node {node!r}: op {op_type!r} is unknown to this aioge") from None
    except ValueError as exc:
        raise ModelFormatError(f"node {node!r}: {exc}") from None


def _set_desc(v: Value, d: TensorDesc) -> None:
    if v.desc.shape != d.shape or v.desc.dtype != d.dtype:
        raise ModelFormatError(f"tensor {v.name!r}: data is {v.desc}, its desc says {d}")
    v.desc = d


def _dec_data(
    ref: Any, desc: TensorDesc, weight_dir: str, require_owner: bool, name: str, blob: memoryview, held: Held | None
) -> np.ndarray:
    if isinstance(ref, dict) and _T_WEIGHT in ref:
        return _load_weight(ref[_T_WEIGHT], desc, weight_dir, require_owner, name)
    if isinstance(ref, dict) and _T_GRAPH in ref:
        return _graph_array(ref[_T_GRAPH], desc, name, held)
    if isinstance(ref, dict) and _T_SPLAT in ref:
        one = ref[_T_SPLAT]
        if (
            not isinstance(one, bytes)
            or not desc.static
            or desc.dtype not in _ARRAY_DTYPES
            or len(one) != np.dtype(desc.dtype).itemsize
        ):
            raise ModelFormatError(f"tensor {name!r}: malformed splat value for its desc {desc}")
        value = np.frombuffer(one, dtype=desc.dtype)[0]
        full = np.full(tuple(int(d) for d in desc.shape), value, dtype=desc.dtype)  # type: ignore[union-attr]
        full.flags.writeable = False  # as the blob views are: constants are never written
        return full
    if isinstance(ref, dict) and _T_BLOB in ref:
        span = ref[_T_BLOB]
        if not (isinstance(span, list) and len(span) == 2 and all(type(i) is int and i >= 0 for i in span)):
            raise ModelFormatError(f"tensor {name!r}: malformed inline data reference")
        offset, nbytes = span
        if not desc.static or desc.dtype not in _ARRAY_DTYPES or desc.nbytes != nbytes or offset + nbytes > len(blob):
            raise ModelFormatError(f"tensor {name!r}: {nbytes} bytes at {offset} do not fit its desc {desc} or the data")
        count = nbytes // np.dtype(desc.dtype).itemsize
        shape = tuple(int(d) for d in desc.shape)  # type: ignore[union-attr]
        return np.frombuffer(blob, dtype=desc.dtype, count=count, offset=offset).reshape(shape)  # read-only view
    data = _dec(ref)
    if not isinstance(data, np.ndarray):
        raise ModelFormatError(f"tensor {name!r}: data is {type(data).__name__}, not an array")
    return data


def _graph_array(ref: Any, desc: TensorDesc, name: str, held: Held | None) -> np.ndarray:
    """The array of the graph in hand that a reference names: its digest covers dtype, shape
    and bytes (``array_digest``, what the fingerprint hashed), and both are checked against
    the desc too. The array is the graph's own, as a fresh compile's would be (read-only)."""
    if not (isinstance(ref, list) and len(ref) == 2 and isinstance(ref[0], str) and type(ref[1]) is int):
        raise ModelFormatError(f"tensor {name!r}: malformed graph reference")
    digest, nbytes = ref
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise ModelFormatError(f"tensor {name!r}: bad graph array digest {digest!r:.80}")
    if not desc.static or desc.dtype not in _ARRAY_DTYPES or desc.nbytes != nbytes:
        raise ModelFormatError(f"tensor {name!r}: graph array of {nbytes} bytes does not fit its desc {desc}")
    if held is None:
        raise ModelFormatError(
            f"tensor {name!r} is an array of the graph this model was compiled from (a graph cache entry): "
            "it loads only through the graph cache, with that graph"
        )
    array = held(digest)
    if array is None:
        raise ModelFormatError(f"tensor {name!r}: the graph in hand holds no array with digest {digest[:16]}")
    shape = tuple(int(d) for d in desc.shape)  # type: ignore[union-attr]
    if array.dtype != np.dtype(desc.dtype) or array.shape != shape:
        raise ModelFormatError(f"tensor {name!r}: the graph's array is {array.dtype}{list(array.shape)}, its desc says {desc}")
    if array.flags.writeable or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array).view()  # a view: the flag below must not touch the graph's array
        array.flags.writeable = False
    return array


def _load_weight(ref: Any, desc: TensorDesc, weight_dir: str, require_owner: bool, name: str) -> np.ndarray:
    """Read one external weight file into private memory and check its size and sha256.

    Not memory-mapped: a mapped file that is rewritten in place would change a loaded
    model's weights after they were checked, and one that is truncated would kill the
    process with SIGBUS on the next run. What is checked is what is kept. A file others
    may write is never trusted (``aioge.cache_shared=1`` or not); with ``require_owner``
    one its group may write or another user owns is not either.
    """
    if not (isinstance(ref, list) and len(ref) == 3 and all(isinstance(r, t) for r, t in zip(ref, (str, str, int)))):
        raise ModelFormatError(f"tensor {name!r}: malformed weight reference")
    fname, digest, nbytes = ref
    if fname != _WEIGHT_PREFIX + digest or not all(c in "0123456789abcdef" for c in digest) or len(digest) != 64:
        raise ModelFormatError(f"tensor {name!r}: bad weight file name {fname!r}")
    if desc.shape is None or not desc.static or desc.dtype not in _ARRAY_DTYPES or desc.nbytes != nbytes:
        raise ModelFormatError(f"tensor {name!r}: weight of {nbytes} bytes does not fit its desc {desc}")
    if not weight_dir:
        raise ModelFormatError(
            f"tensor {name!r} references weight file {fname}, and this model may only carry its weights inline"
        )
    path = os.path.join(weight_dir, fname)
    try:
        fd, st = io.open_regular(path)
    except CacheError as exc:
        raise ModelFormatError(f"weight file of tensor {name!r}: {str(exc).removeprefix(f'{path}: ')}", path=path) from None
    except OSError as exc:
        why = (
            "not trusted: it is a symbolic link (links in a cache are not followed)" if exc.errno == errno.ELOOP else exc.strerror
        )
        raise ModelFormatError(f"weight file of tensor {name!r}: {why}", path=path) from None
    try:
        reason = io.untrusted_reason(st, shared=not require_owner)
        if reason is not None:
            raise ModelFormatError(f"weight file is not trusted: {reason}", path=path)
        if st.st_size != nbytes:
            raise ModelFormatError(f"weight file has {st.st_size} bytes, tensor {name!r} ({desc}) needs {nbytes}", path=path)
        flat = np.empty(nbytes, dtype=np.uint8)
        h = hashlib.sha256()
        got = io.read_into(fd, flat.data, chunk=_WEIGHT_CHUNK, each=h.update)
        if got < nbytes:
            raise ModelFormatError(f"weight file of tensor {name!r} shrank to {got} bytes while read", path=path)
    finally:
        os.close(fd)
    if h.hexdigest() != digest:
        raise ModelFormatError(f"weight file of tensor {name!r}: checksum mismatch (corrupt file)", path=path)
    array = flat.view(desc.dtype).reshape(tuple(int(s) for s in desc.shape))
    array.flags.writeable = False
    return array


def _check_ops(model: CompiledModel, ops: Any) -> None:
    from aioge.ops.registry import get_schema

    if not isinstance(ops, dict):
        raise TypeError("ops is not a map")
    for n in model.graph.nodes:
        try:
            schema = get_schema(n.op_type, n.domain)
        except KeyError:
            raise ModelFormatError(f"node {n.name!r}: op {n.op_type!r} is unknown to this aioge") from None
        stored = ops.get(f"{n.domain}::{n.op_type}")
        if stored != schema.version:
            raise ModelFormatError(f"op {n.op_type} was version {stored} when compiled, it is {schema.version} now; recompile")


def _check_shapes(g: Graph) -> None:
    """Every node's stored output descs must be what shape inference gives from its inputs,
    as a compile made them: kernels size their C calls' geometry from the descs, and a desc
    smaller than the tensor its kernel writes (a Conv's output stored as 1x8x1x1 where the
    kernel computes 1x8x32x32) would have the C tier write past its buffer. Small values
    inference may need are evaluated on the way, as specialisation does."""
    from aioge.ops import infer_node
    from aioge.ops.evaluate import known_outputs
    from aioge.ops.registry import get_schema

    known: dict[int, np.ndarray] = {id(v): v.data for v in g.constants.values() if isinstance(v.data, np.ndarray)}
    for node in g.topological_order():
        schema = get_schema(node.op_type, node.domain)
        in_descs = [None if v is None else v.desc for v in node.inputs]
        in_values = [None if v is None else known.get(id(v)) for v in node.inputs]
        try:
            want = infer_node(schema, in_descs, in_values, node.attrs, len(node.outputs), g.name, node.name)
        except GraphError as exc:
            raise ModelFormatError(f"node {node.name!r}: shape inference rejects the stored inputs: {exc}") from None
        for i, (out, inferred) in enumerate(zip(node.outputs, want)):
            reason = _desc_differs(out.desc, inferred)
            if reason:
                raise ModelFormatError(
                    f"node {node.name!r} ({node.op_type}): output {i} {out.name!r} is stored as {out.desc}, "
                    f"shape inference gives {inferred} ({reason})"
                )
        try:
            results = known_outputs(
                schema, node.attrs, in_descs, in_values, [o.desc for o in node.outputs], graph=g.name, node=node.name
            )
        except GraphError as exc:
            raise ModelFormatError(f"node {node.name!r}: {exc}") from None
        for out, res in zip(node.outputs, results or ()):
            known[id(out)] = res


def _desc_differs(stored: TensorDesc, inferred: TensorDesc) -> str:
    """Which field of a stored desc differs from the inferred one ('' when none): dtype,
    container, rank, or a dim (a symbolic dim matches any symbol: it is sized at run time)."""
    if stored.dtype != inferred.dtype:
        return "dtype"
    if stored.container != inferred.container:
        return "container"
    if stored.shape is None or inferred.shape is None:
        return "" if stored.shape is None and (inferred.shape is None or not stored.is_tensor) else "shape"
    if len(stored.shape) != len(inferred.shape):
        return "rank"
    for axis, (a, b) in enumerate(zip(stored.shape, inferred.shape)):
        if a != b and not (isinstance(a, str) and isinstance(b, str)):
            return f"dim {axis}"
    return ""


def _check_plan(model: CompiledModel) -> None:
    """The plans must fit the graph and be plans the compiler could have made: the executor
    trusts indices, names, offsets and event order, and binds the stored kernels as they are.
    A kernel is checked as a kernel-cache entry is (``plan.kernel.check_kernel``), the
    stream plan for cycles and unordered reads (``compiler.streams.check_stream_plan``)."""
    from aioge.ops.registry import get_schema
    from aioge.plan.kernel import check_kernel
    from aioge.plan.streams import check_stream_plan, predecessors

    g = model.graph
    for v in g.values():  # kernels size scratch space from descs when they are bound
        if v.desc.static and v.desc.dtype != "str" and v.desc.nbytes > _MAX_TENSOR_BYTES:
            raise ModelFormatError(f"tensor {v.name!r} ({v.desc}) is larger than {_MAX_TENSOR_BYTES >> 30} GiB")
    if model.memory.arena_bytes > _MAX_TENSOR_BYTES:
        raise ModelFormatError(f"arena of {model.memory.arena_bytes} bytes is larger than {_MAX_TENSOR_BYTES >> 30} GiB")
    n = len(g.nodes)
    if len(model.nodes) != n:
        raise ModelFormatError(f"{len(model.nodes)} node plans for {n} nodes")
    sp = model.streams
    reason = check_stream_plan(sp, predecessors(g.nodes))
    if reason:
        raise ModelFormatError(f"invalid stream plan: {reason}")
    for i, (plan, node) in enumerate(zip(model.nodes, g.nodes)):
        if plan.index != i or plan.name != node.name or plan.op_type != node.op_type or plan.stream != sp.node_stream[i]:
            raise ModelFormatError(f"node plan {i} ({plan.name!r}) does not match node {node.name!r} or its stream")
        reason = check_kernel(plan.kernel, node, plan.engine)
        if reason:
            raise ModelFormatError(
                f"node {node.name!r}: kernel {plan.kernel.impl!r} is not one the compiler could choose: {reason}"
            )
        # Bind once, as the executor will: a kernel that rejects its stored attrs, params or
        # descs makes the file unusable, which must show here as a format error.
        try:
            bind_kernel(
                get_schema(node.op_type, node.domain).impl(plan.kernel.impl),
                node.attrs,
                plan.kernel.params,
                [v.desc if v is not None else None for v in node.inputs],
                [o.desc for o in node.outputs],
            )
        except Exception as exc:
            raise ModelFormatError(
                f"node {node.name!r}: kernel {plan.kernel.impl} rejects the stored node: {type(exc).__name__}: {exc}"
            ) from None
    if model.threads and sorted(s for t in model.threads for s in t) != list(range(len(sp.streams))):
        raise ModelFormatError("thread groups do not hold every stream exactly once")
    _check_memory(model)


def _check_memory(model: CompiledModel) -> None:
    """Each buffer holds one intermediate the planner places (its producer's output, not a graph
    output), inside the arena, sharing bytes only with tensors it cannot be live with."""
    from aioge.plan.memory import check_reuse, is_view, plannable

    g = model.graph
    mem = model.memory
    index = {id(node): i for i, node in enumerate(g.nodes)}
    outputs = {id(v) for v in g.outputs}
    seen: set[str] = set()
    for b in mem.buffers:
        v = g.value(b.value)
        if b.value in seen or not plannable(v, outputs) or index.get(id(v.producer)) != b.producer:
            raise ModelFormatError(
                f"buffer of {b.value!r} is not a planned intermediate of node {b.producer}, or is listed twice"
            )
        seen.add(b.value)
        if b.offset < 0 or b.nbytes < v.desc.nbytes or b.offset + b.nbytes > mem.arena_bytes:
            raise ModelFormatError(f"buffer of {b.value!r} ({v.desc}) does not fit the arena at {b.offset}+{b.nbytes}")
    uses = {b.value: {index[id(c)] for c, _ in g.value(b.value).uses} for b in mem.buffers}
    root: dict[str, str] = {b.value: b.value for b in mem.buffers}
    for name, r in mem.views:  # a view op's output on its input's buffer (or its input's buffer's)
        v = g.value(name)
        x = (node.inputs or (None,))[0] if (node := v.producer) is not None else None
        if name in root or node is None or not plannable(v, outputs) or x is None or root.get(x.name) != r or not is_view(node):
            raise ModelFormatError(f"view {name!r} is not a planned view op's output over the buffer of {r!r}")
        root[name] = r
        uses[r] |= {index[id(c)] for c, _ in v.uses}
    reason = check_reuse([(b, sorted(uses[b.value])) for b in mem.buffers], model.streams)
    if reason:
        raise ModelFormatError(f"invalid memory plan: {reason}")


# -- files ----------------------------------------------------------------------------


def save_model_sync(
    path: str | os.PathLike[str],
    model: CompiledModel,
    *,
    external: bool = False,
    mode: int = 0o600,
    exclusive: bool = False,
    graph_refs: GraphRefs | None = None,
) -> str:
    """Write ``model`` as an ``.om`` at ``path`` (and its weights under ``weight/`` beside it).

    Weight files are published first, each atomically and only when no valid file of that
    content exists, then the ``.om`` (with ``exclusive``, only if ``path`` is free: the graph
    cache claims a name that way). ``graph_refs``: see ``encode_model`` (the graph cache's
    alone: such a file loads only with its graph). Returns the sha256 of the ``.om`` payload.

    Raises:
        ModelFormatError: the model cannot be stored. FileExistsError: ``exclusive`` and
        ``path`` exists. OSError: the files cannot be written.
    """
    path = os.fspath(path)
    data, weights = encode_model(model, external=external, graph_refs=graph_refs)
    if weights:
        wdir = os.path.join(os.path.dirname(os.path.abspath(path)), WEIGHT_DIR)
        os.makedirs(wdir, mode=0o700 if mode == 0o600 else 0o770, exist_ok=True)
        for fname, array in weights.items():
            _write_weight(os.path.join(wdir, fname), fname.removeprefix(_WEIGHT_PREFIX), array, mode)
    io.write_atomic_sync(path, data, mode=mode, exclusive=exclusive)
    digest: str = io.envelope_header(data)["sha256"]  # encode_model just hashed the payload
    return digest


def _write_weight(path: str, digest: str, array: np.ndarray, mode: int) -> None:
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    try:
        st = os.lstat(path)
        if st.st_size == flat.size and os.path.isfile(path) and not os.path.islink(path):
            # Only a file the loader will trust counts: else it is replaced, not reused forever.
            if hashlib.sha256(io.read_trusted_sync(path, shared=mode != 0o600)).hexdigest() == digest:
                return  # the same content is already there (dedupe)
    except (OSError, CacheError):
        pass
    io.write_atomic_sync(path, flat.tobytes(), mode=mode)


def load_model_sync(path: str | os.PathLike[str], *, check_versions: bool = True) -> CompiledModel:
    """Read and decode the ``.om`` at ``path`` (external weights from ``weight/`` beside it).

    Raises:
        ModelFormatError: the file is missing, unreadable, corrupt, foreign or stale.
    """
    path = os.fspath(path)
    try:
        data = io.read_bytes_sync(path)
    except CacheError as exc:
        raise ModelFormatError(str(exc).removeprefix(f"{path}: "), path=path) from None
    except OSError as exc:
        raise ModelFormatError(f"cannot read: {exc.strerror}", path=path) from None
    return decode_model(data, path=path, check_versions=check_versions)


async def save_model(path: str | os.PathLike[str], model: CompiledModel, *, external: bool = False, mode: int = 0o600) -> str:
    """``save_model_sync`` in one worker thread."""
    return await anyio.to_thread.run_sync(functools.partial(save_model_sync, external=external, mode=mode), path, model)


async def load_model(path: str | os.PathLike[str]) -> CompiledModel:
    """``load_model_sync`` in one worker thread."""
    return await anyio.to_thread.run_sync(load_model_sync, path)
