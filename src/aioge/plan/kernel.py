"""KernelDesc: a compiled kernel as data, and its plain form (the plan codec's, checked on the way back).

Its key is built in ``aioge.keys``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from aioge.errors import ModelFormatError
from aioge.keys import Signature

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


def desc_to_plain(desc: KernelDesc) -> Any:
    """The desc as plain msgpack-able data: the plan codec's encoding (``plan.codec``), the one
    every plan dataclass travels in, in a kernel cache entry as in an ``.om``."""
    from aioge.plan.codec import encode_value

    return encode_value(desc)


def desc_from_plain(data: Any) -> KernelDesc:
    """Rebuild a desc from ``desc_to_plain`` data, checking every field against its annotation.

    Raises:
        ValueError: not a desc, a missing or unknown field, or a field of the wrong type (names the field).
    """
    from aioge.plan.codec import decode_value

    try:
        desc = decode_value(data)
    except ModelFormatError as exc:
        raise ValueError(f"malformed kernel desc: {exc}") from None
    if not isinstance(desc, KernelDesc):
        raise ValueError(f"a kernel desc was expected, got {type(desc).__name__}")
    return desc
