"""Reading an ONNX model safely: parse, check the structure, resolve external data, decode tensors.

Everything here turns a malformed input into a ``GraphError`` that names the file, tensor or
node at fault: a truncated or garbage file never escapes as a protobuf traceback, a cycle
or a dangling input is reported before any conversion starts, and external data files are
read only from inside the model's own directory.
"""

from __future__ import annotations

import functools
import heapq
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

from aioge.errors import GraphError
from aioge.frontends.onnx_lean import NotLean, raw_array, read_lean
from aioge.ir.desc import canonical_dtype, numpy_dtype

__all__ = [
    "ModelSource",
    "attribute_value",
    "dtype_of_enum",
    "read_model",
    "sorted_nodes",
    "tensor_to_array",
]

# No tensor of a model this simulator runs is larger; a model declaring one is refused before
# anything is decoded, planned or allocated.
MAX_TENSOR_BYTES = 16 << 30
# The external-data keys ONNX defines; anything else is ignored, as onnx itself does.
_EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A parsed model and where its external data may be read from (None: nowhere). ``raw``:
    the raw bytes of top-level initializers read apart from the proto (``onnx_lean``), by
    their index in ``model.graph.initializer``."""

    model: onnx.ModelProto
    base_dir: str | None
    label: str  # the path, or "<bytes>" / "<ModelProto>", for error messages
    raw: dict[int, np.ndarray] = field(default_factory=dict)


def read_model(source: Any, base_dir: str | os.PathLike[str] | None = None) -> ModelSource:
    """Parse ``source`` (a path, bytes or an ``onnx.ModelProto``) without loading external data.

    ``base_dir`` is the directory external data is confined to; it defaults to the model
    file's directory, and to nowhere (external data refused) for bytes and protos.

    Raises:
        GraphError: the file cannot be read, is not a protobuf ModelProto, or holds no graph.
    """
    raw: dict[int, np.ndarray] = {}
    if isinstance(source, onnx.ModelProto):
        model, label = source, "<ModelProto>"
        root = None
    elif isinstance(source, (bytes, bytearray, memoryview)):
        label, root = "<bytes>", None
        try:
            model, raw = read_lean(bytes(source))
        except NotLean:  # parsed whole: an error says what is wrong
            model = _parse(bytes(source), label)
    elif isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        try:
            with open(label, "rb") as f:
                try:
                    model, raw = read_lean(f, os.fstat(f.fileno()).st_size)
                except NotLean:
                    f.seek(0)
                    model = _parse(f.read(), label)
        except OSError as exc:
            raise GraphError(f"cannot read ONNX model {label!r}: {exc.strerror or exc}") from None
        root = os.path.dirname(os.path.abspath(label))
    else:
        raise GraphError(f"load_onnx expects a path, bytes or onnx.ModelProto, got {type(source).__name__}")
    if base_dir is not None:
        root = os.fspath(base_dir)
    _check_model(model, label)
    return ModelSource(model, root, label, raw)


def _parse(data: bytes, label: str) -> onnx.ModelProto:
    if not data:
        raise GraphError(f"{label}: the model file is empty")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise GraphError(
            f"{label}: not a valid ONNX model (protobuf decoding failed: {exc}); is it truncated or corrupt?"
        ) from None
    return model


def _check_model(model: onnx.ModelProto, label: str) -> None:
    if model.ir_version <= 0:
        raise GraphError(f"{label}: not an ONNX model (no ir_version); is it truncated or another kind of file?")
    if not model.HasField("graph"):
        raise GraphError(f"{label}: the model holds no graph; is it truncated?")
    if not model.graph.output:
        raise GraphError(f"{label}: the graph declares no outputs; is it truncated?")
    _check_text(model, label, "model")


def _repeated(fd: Any) -> bool:
    """protobuf 6 dropped ``FieldDescriptor.label`` for ``is_repeated``; older ones only have ``label``."""
    return bool(fd.is_repeated) if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED


def _check_text(msg: Any, label: str, where: str) -> None:
    """Every string field must be text: protobuf hands invalid UTF-8 in a proto2 string back as bytes,
    which would otherwise surface far from here as a TypeError. Only string and message fields
    are read: ``ListFields`` handed back every set field, so each weight's ``raw_data`` was
    copied out (BERT-base: 440 MB, 0.1 s) only to be skipped."""
    for name, repeated, text in _text_fields(msg.DESCRIPTOR):
        if repeated:
            items = getattr(msg, name)
        elif msg.HasField(name):
            items = (getattr(msg, name),)
        else:
            continue
        if text:
            if not all(isinstance(v, str) for v in items):
                raise GraphError(f"{label}: {where}.{name} is not valid UTF-8 text; is the file corrupt?")
        else:
            for sub in items:
                _check_text(sub, label, f"{where}.{name}")


@functools.cache
def _text_fields(descriptor: Any) -> tuple[tuple[str, bool, bool], ...]:
    """``(name, repeated, is a string)`` of a message type's string and (non-map) message fields,
    once per type: asking each field of each of BERT-base's 1,200 messages took 0.06 s. A map's
    entry type has options: ``GetOptions`` only then (it imports descriptor_pb2, 1.2 ms of a start)."""
    return tuple(
        (fd.name, _repeated(fd), fd.type == fd.TYPE_STRING)
        for fd in descriptor.fields
        if fd.type == fd.TYPE_STRING
        or (fd.type == fd.TYPE_MESSAGE and not (fd.message_type.has_options and fd.message_type.GetOptions().map_entry))
    )


def sorted_nodes(graph: onnx.GraphProto, label: str, outer: Iterable[str] = ()) -> list[onnx.NodeProto]:
    """The graph's nodes in a dependency order (ONNX requires it, but files do not always obey).

    ``outer`` names the values a subgraph may read from the scopes around it.

    Raises:
        GraphError: a node reads a value nothing defines, two nodes define one value, or the
            nodes form a cycle (naming the nodes on it).
    """
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""} | set(outer)
    defined |= {t.values.name for t in graph.sparse_initializer}
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            if not out:
                continue
            if out in producer or out in defined:
                raise GraphError(f"{label}: value {out!r} is defined twice (second time by node {_node_label(node, i)})")
            producer[out] = i
    waiting = [0] * len(graph.node)
    users: list[list[int]] = [[] for _ in graph.node]
    for i, node in enumerate(graph.node):
        preds = set()
        for name in _reads(node):
            if name in producer:
                preds.add(producer[name])
            elif name not in defined:
                raise GraphError(
                    f"{label}: node {_node_label(node, i)} reads {name!r}, which no node, initializer or graph input defines"
                )
        waiting[i] = len(preds)
        for p in preds:
            users[p].append(i)
    # Kahn's algorithm, always taking the earliest ready node: a file already in a valid
    # order keeps it exactly.
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[onnx.NodeProto] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(graph.node[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.node):
        stuck = [_node_label(graph.node[i], i) for i, n in enumerate(waiting) if n > 0]
        raise GraphError(f"{label}: the graph has a cycle through nodes {', '.join(stuck[:10])}")
    return order


def _reads(node: onnx.NodeProto) -> Iterable[str]:
    """Names a node reads: its inputs and, for control-flow bodies, outer values they capture."""
    yield from (x for x in node.input if x)
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            inner = {i.name for i in sub.input} | {t.name for t in sub.initializer}
            inner |= {o for n in sub.node for o in n.output}
            for n in sub.node:
                yield from (x for x in _reads(n) if x not in inner)


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


# -- tensors ------------------------------------------------------------------------------


def dtype_of_enum(enum: int, what: str) -> str:
    """The aioge dtype name of an ONNX ``TensorProto.DataType`` value.

    Raises:
        GraphError: the enum is unknown or names a dtype aioge does not support (bfloat16,
            the float8 and int4 families...).
    """
    try:
        name = onnx.TensorProto.DataType.Name(enum)
    except ValueError:
        raise GraphError(f"{what}: unknown ONNX data type {enum}") from None
    if enum == onnx.TensorProto.UNDEFINED:
        raise GraphError(f"{what}: data type is UNDEFINED")
    try:
        return canonical_dtype(helper.tensor_dtype_to_np_dtype(enum))
    except (ValueError, TypeError, KeyError):
        raise GraphError(f"{what}: ONNX data type {name} is not supported by aioge") from None


def tensor_to_array(
    tensor: onnx.TensorProto, source: ModelSource, what: str = "tensor", raw: np.ndarray | None = None
) -> np.ndarray:
    """Decode a TensorProto (inline or external data) to a numpy array; ``raw``: its
    ``raw_data``, read apart from the proto (``ModelSource.raw``), used as the array itself when
    the element type allows.

    Raises:
        GraphError: an unsupported dtype, data of the wrong size, or external data that is
            missing, out of bounds or outside the model's directory.
    """
    label = f"{what} {tensor.name!r}" if tensor.name else what
    dtype = dtype_of_enum(tensor.data_type, label)
    count = 1
    for d in tensor.dims:
        if d < 0:
            raise GraphError(f"{source.label}: {label} has a negative dimension in {list(tensor.dims)}")
        count *= int(d)
    if count * np.dtype(numpy_dtype(dtype)).itemsize > MAX_TENSOR_BYTES:
        raise GraphError(
            f"{source.label}: {label} declares {list(tensor.dims)} ({count} elements), larger than the "
            f"{MAX_TENSOR_BYTES >> 30} GiB a tensor may have"
        )
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        if dtype == "str":
            raise GraphError(
                f"{source.label}: {label}: string tensors cannot keep their data externally (ONNX stores them inline)"
            )
        resolved = onnx.TensorProto()
        resolved.CopyFrom(tensor)
        resolved.raw_data = _read_external(tensor, source, label, count, np.dtype(numpy_dtype(dtype)).itemsize)
        resolved.data_location = onnx.TensorProto.DEFAULT
        del resolved.external_data[:]
        tensor = resolved
    elif raw is not None:
        array = raw_array(tensor, raw, count)
        if array is not None:
            return array
        resolved = onnx.TensorProto()  # another element type, or the wrong size: onnx decodes (or refuses) it
        resolved.CopyFrom(tensor)
        resolved.raw_data = raw.tobytes()
        tensor = resolved
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise GraphError(f"{source.label}: {label} cannot be decoded ({exc}); is the file truncated?") from None
    if array.dtype.kind == "O":
        array = np.array(
            [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in array.reshape(-1)], dtype=object
        ).reshape(array.shape)
    return array


def _read_external(tensor: onnx.TensorProto, source: ModelSource, label: str, count: int, itemsize: int) -> bytes:
    """Exactly the bytes the tensor takes (``count`` elements x ``itemsize``), from its external file.

    The declared length, or without one the rest of the file after the offset (ONNX's
    rule), must be ``nbytes``: this is checked against the file's size before anything is
    read, so a huge (or sparse) file costs nothing to refuse."""
    info = {e.key: e.value for e in tensor.external_data if e.key in _EXTERNAL_KEYS}
    location = info.get("location", "")
    if not location:
        raise GraphError(f"{source.label}: {label} is marked as external data but names no location")
    if source.base_dir is None:
        raise GraphError(
            f"{source.label}: {label} keeps its data in external file {location!r}, but the model was not "
            "loaded from a path; load it from its file or pass base_dir="
        )
    path = _confined_path(source.base_dir, location, label, source.label)
    try:
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise GraphError(f"{source.label}: {label}: external data offset/length are not integers: {info}") from None
    if offset < 0 or (length is not None and length < 0):
        raise GraphError(f"{source.label}: {label}: negative external data offset or length: {info}")
    nbytes = count * itemsize
    wants = f"{list(tensor.dims)} x {itemsize} bytes = {nbytes} bytes"
    if length is not None and length != nbytes:
        raise GraphError(
            f"{source.label}: {label}: external data {location!r} declares length {length}, but the tensor is {wants}"
        )
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset + nbytes > size or (length is None and size - offset != nbytes):
                raise GraphError(
                    f"{source.label}: {label}: external data {location!r} holds {size} bytes, so {max(0, size - offset)} "
                    f"from offset {offset}{'' if length is None else ' (length ' + str(length) + ')'}, but the tensor is {wants}"
                )
            f.seek(offset)
            data = f.read(nbytes)
    except OSError as exc:
        raise GraphError(f"{source.label}: {label}: cannot read external data {location!r}: {exc.strerror or exc}") from None
    except MemoryError:
        raise GraphError(
            f"{source.label}: {label}: not enough memory to read {nbytes} bytes of external data {location!r}"
        ) from None
    if len(data) != nbytes:  # the file shrank under us
        raise GraphError(f"{source.label}: {label}: external data {location!r} ended after {len(data)} of {nbytes} bytes")
    return data


def _confined_path(base_dir: str, location: str, label: str, model: str) -> str:
    """The real path of an external data file, which must lie inside ``base_dir``.

    Raises:
        GraphError: the location is absolute, or resolves (through ``..`` or symlinks) to a
            place outside the model's directory, or does not exist.
    """
    refuse = f"{model}: {label}: external data location {location!r} "
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise GraphError(refuse + f"is an absolute path; external data must lie inside the model's directory {base_dir!r}")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise GraphError(refuse + f"escapes the model's directory {base_dir!r} (it resolves to {path!r})")
    if not os.path.isfile(path):
        raise GraphError(refuse + f"does not exist (looked for {path!r})")
    return path


# -- attributes ---------------------------------------------------------------------------


def attribute_value(attr: onnx.AttributeProto, source: ModelSource, node: str) -> Any:
    """An attribute as a Python value: int, float, str, lists of those, a numpy array, or
    (for control flow, which the frontend inlines) the subgraph's ``onnx.GraphProto``.

    Raises:
        GraphError: a sparse tensor or type-proto attribute (aioge has none), or an
            undecodable tensor.
    """
    kind = attr.type
    A = onnx.AttributeProto
    if kind == A.INT:
        return int(attr.i)
    if kind == A.FLOAT:
        return float(attr.f)
    if kind == A.STRING:
        return attr.s.decode("utf-8", "replace")
    if kind == A.INTS:
        return [int(v) for v in attr.ints]
    if kind == A.FLOATS:
        return [float(v) for v in attr.floats]
    if kind == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in attr.strings]
    if kind == A.TENSOR:
        return tensor_to_array(attr.t, source, f"attribute {attr.name!r} of node {node!r}")
    if kind == A.GRAPH:
        return attr.g
    if kind == A.TYPE_PROTO:
        return attr.tp  # Optional's and SequenceEmpty's element type
    if kind == A.TENSORS:
        return [tensor_to_array(t, source, f"attribute {attr.name!r} of node {node!r}") for t in attr.tensors]
    kind_name = A.AttributeType.Name(kind) if kind in A.AttributeType.values() else str(kind)
    raise GraphError(f"node {node!r}: attribute {attr.name!r} of type {kind_name} is not supported by aioge")
