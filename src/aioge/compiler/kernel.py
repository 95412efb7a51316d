"""KernelDesc: a compiled kernel as data, and its key built from named parts."""

from __future__ import annotations

import hashlib
import logging
import platform
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from aioge.ir.fingerprint import canonical_attr
from aioge.ir.graph import Node

__all__ = ["KernelDesc", "kernel_key", "kernel_key_parts", "signature_of"]

log = logging.getLogger(__name__)

Signature = tuple[tuple[Any, ...], ...]


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

    return tuple(desc(v) for v in node.inputs), tuple(desc(v) for v in node.outputs)  # type: ignore[return-value]


def kernel_key_parts(
    node: Node,
    engine: str,
    *,
    soc: str,
    op_debug_level: int,
    impl_version: int,
    const_inputs: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """Everything that can change a kernel, by name. Names and ids of nodes are left out.

    ``const_inputs`` maps input index to the digest of a constant input whose value the
    kernel may specialise on (GE keys const_value too).
    """
    from aioge import __version__

    ins, outs = signature_of(node)
    return {
        "op": [node.domain, node.op_type],
        "inputs": [list(i) if i is not None else None for i in ins],
        "outputs": [list(o) for o in outs],
        "attrs": [[k, canonical_attr(node.attrs[k])] for k in sorted(node.attrs)],
        "const_inputs": sorted((const_inputs or {}).items()),
        "engine": engine,
        "soc": soc,
        "debug": op_debug_level,
        "impl_version": impl_version,
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
    op = str(parts["op"][1]).lower()
    return f"{op}_{h.hexdigest()}"


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
