"""KernelDesc: a compiled kernel as data, and its codec (plain msgpack-able data, checked on the way back).

Its key is built in ``aioge.keys``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from aioge.keys import Signature
from aioge.keys import plain as _plain

__all__ = ["KernelDesc", "desc_from_plain", "desc_to_plain"]


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
