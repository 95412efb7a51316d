"""KernelDesc: a compiled kernel as data, and its key built from named parts."""

from __future__ import annotations

import functools
import hashlib
import logging
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.fingerprint import canonical_attr
from aioge.ir.graph import Node

__all__ = [
    "KernelDesc",
    "desc_from_plain",
    "desc_to_plain",
    "kernel_code_digest",
    "kernel_key",
    "kernel_key_parts",
    "signature_of",
]

log = logging.getLogger(__name__)

Signature = tuple[tuple[Any, ...] | None, ...]


@dataclass(frozen=True, slots=True)
class KernelDesc:
    """A compiled kernel: data, never code. Loading binds ``impl`` to a trusted kernel in ``aioge.kernels``."""

    key: str
    op_type: str
    domain: str
    engine: str
    inputs: Signature  # (shape or None, dtype, format) per input; None for an absent optional input
    outputs: Signature
    impl: str
    params: Mapping[str, Any] = field(default_factory=dict)
    workspace_bytes: int = 0
    tuned: bool = False  # True when the impl was chosen by timing candidates


def signature_of(node: Node) -> tuple[Signature, Signature]:
    """The (inputs, outputs) desc signature of a node."""

    def desc(v: Any) -> tuple[Any, ...] | None:
        if v is None:
            return None
        shape = None if v.desc.shape is None else tuple(v.desc.shape)
        return (shape, v.desc.dtype, v.desc.format)

    return tuple(desc(v) for v in node.inputs), tuple(desc(v) for v in node.outputs)


def kernel_key_parts(
    node: Node,
    engine: str,
    *,
    soc: str,
    op_debug_level: int,
    impl_version: int,
    const_inputs: Mapping[int, str] | None = None,
    op_debug_config: str = "",
    tune_mode: str = "heuristic",
    impls: Sequence[str] = (),
    code: str | None = None,
) -> dict[str, Any]:
    """Everything that can change a kernel, by name. Names and ids of nodes are left out.

    ``const_inputs`` maps input index to the digest of a constant input whose value the
    kernel may specialise on (GE keys const_value too). ``op_debug_config`` is a digest of
    the debug config file's content (empty without one); ``tune_mode`` is part of the key
    because a heuristic pick is not a tuned kernel; ``impls`` names the op's candidate
    implementations (a new candidate may win); ``code`` is a digest of the kernel library's
    source (default: ``kernel_code_digest()``), so a local edit never loads a stale kernel.
    """
    from aioge import __version__

    ins, outs = signature_of(node)
    return {
        "op": [node.domain, node.op_type],
        "inputs": [list(i) if i is not None else None for i in ins],
        "outputs": [list(o) if o is not None else None for o in outs],
        "attrs": [[k, canonical_attr(node.attrs[k])] for k in sorted(node.attrs)],
        "const_inputs": sorted((const_inputs or {}).items()),
        "engine": engine,
        "soc": soc,
        "debug": op_debug_level,
        "debug_config": op_debug_config,
        "tune": tune_mode,
        "impls": list(impls),
        "impl_version": impl_version,
        "code": kernel_code_digest() if code is None else code,
        "aioge": __version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def kernel_key(parts: Mapping[str, Any]) -> str:
    """``<op>_<sha256>`` over the named parts; each part's hash is logged at DEBUG so a miss can be explained."""
    import msgpack

    h = hashlib.sha256(b"aioge-kernel-v1")
    for name in sorted(parts):
        blob = msgpack.packb(_plain(parts[name]), use_bin_type=True)
        digest = hashlib.sha256(blob).hexdigest()
        log.debug("kernel key part %s = %s", name, digest[:16])
        h.update(name.encode() + b"=" + digest.encode())
    # GE's kernel names: te_<optype>_<sha256>, lower case, only file-name-safe characters.
    op = re.sub(r"[^a-z0-9]", "_", str(parts["op"][1]).lower()) or "op"
    return f"{op}_{h.hexdigest()}"


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


@functools.cache
def kernel_code_digest() -> str:
    """sha256 over the source of the kernel library (``aioge.kernels``, ``aioge.ops`` and the
    tuner), computed once per process: a version string alone lets a locally edited kernel
    load stale entries (JAX's lesson), the code itself does not."""
    import aioge

    root = Path(aioge.__file__).parent
    files = sorted([*root.joinpath("kernels").glob("*.py"), *root.joinpath("ops").glob("*.py"), root / "compiler" / "tuning.py"])
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError:  # a file removed while we read: the digest still differs from the old code's
            h.update(b"<missing>")
    return h.hexdigest()


def desc_to_plain(desc: KernelDesc) -> dict[str, Any]:
    """The desc as plain msgpack-able data (lists for tuples)."""
    return {
        "key": desc.key,
        "op_type": desc.op_type,
        "domain": desc.domain,
        "engine": desc.engine,
        "inputs": [None if i is None else [None if i[0] is None else list(i[0]), i[1], i[2]] for i in desc.inputs],
        "outputs": [None if o is None else [None if o[0] is None else list(o[0]), o[1], o[2]] for o in desc.outputs],
        "impl": desc.impl,
        "params": _plain_params(desc.params),
        "workspace_bytes": desc.workspace_bytes,
        "tuned": desc.tuned,
    }


def desc_from_plain(data: Any) -> KernelDesc:
    """Rebuild a desc from ``desc_to_plain`` data, checking every field's type.

    Raises:
        ValueError: a missing field or a field of the wrong type (names the field).
    """
    if not isinstance(data, dict):
        raise ValueError(f"a kernel desc is a map, got {type(data).__name__}")

    def field_(name: str, kind: type | tuple[type, ...]) -> Any:
        if name not in data:
            raise ValueError(f"kernel desc has no field {name!r}")
        value = data[name]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise ValueError(f"kernel desc field {name!r} is {type(value).__name__}")
        return value

    params = field_("params", dict)
    if not all(isinstance(k, str) for k in params):
        raise ValueError("kernel desc params have non-string names")
    return KernelDesc(
        key=field_("key", str),
        op_type=field_("op_type", str),
        domain=field_("domain", str),
        engine=field_("engine", str),
        inputs=_signature(field_("inputs", list), "inputs"),
        outputs=_signature(field_("outputs", list), "outputs"),
        impl=field_("impl", str),
        params=_frozen_params(params),
        workspace_bytes=field_("workspace_bytes", int),
        tuned=field_("tuned", bool),
    )


def _signature(items: list[Any], what: str) -> Signature:
    out: list[Any] = []
    for item in items:
        if item is None:
            out.append(None)
            continue
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[1], str) and isinstance(item[2], str)):
            raise ValueError(f"kernel desc {what} entry {item!r} is not [shape, dtype, format]")
        shape = item[0]
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(d, (int, str)) and not isinstance(d, bool) for d in shape):
                raise ValueError(f"kernel desc {what} shape {shape!r} is not a list of dims")
            shape = tuple(shape)
        out.append((shape, item[1], item[2]))
    return tuple(out)


def _plain_params(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in params.items()}


def _frozen_params(params: Mapping[str, Any]) -> dict[str, Any]:
    # Lists come back from msgpack where tuples went in; parameters compare as tuples.
    def freeze(v: Any) -> Any:
        return tuple(freeze(x) for x in v) if isinstance(v, list) else v

    return {k: freeze(v) for k, v in params.items()}
