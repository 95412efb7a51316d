"""KernelDesc: a compiled kernel as data, and its plain form (the plan codec's, checked on the way back).

Its key is built in ``aioge.keys``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Container, Mapping, Sequence

import numpy as np

from aioge.errors import ModelFormatError
from aioge.ir.desc import TensorDesc
from aioge.ir.graph import Node
from aioge.keys import Signature, signature_of

if TYPE_CHECKING:
    from aioge.ops.schema import KernelImpl, OpSchema

__all__ = ["KernelDesc", "TuningRecord", "candidates_of", "check_kernel", "desc_from_plain", "desc_to_plain", "same_params"]


@dataclass(frozen=True, slots=True)
class TuningRecord:
    """What tuning saw, for ``compiler.tuning.revisit``: the choice's best time, the next fastest
    verified candidate and its time over the choice's (0.0: none), re-checks since, and the
    fastest candidate with a native form when the choice has none, with its time and how often
    a cache hit has re-timed the two (``compiler.ops``' native re-check)."""

    tuned_ms: float = 0.0
    runner_up: str = ""
    runner_up_params: Mapping[str, Any] = field(default_factory=dict)
    margin: float = 0.0
    checks: int = 0
    native_alt: str = ""
    native_alt_params: Mapping[str, Any] = field(default_factory=dict)
    native_ms: float = 0.0
    native_checks: int = 0


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
    history: TuningRecord = field(default_factory=TuningRecord)


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


# -- what the compiler could have chosen (kernel-cache entries and .om node plans are checked by this) --


def candidates_of(
    schema: OpSchema,
    in_descs: Sequence[TensorDesc | None],
    attrs: Mapping[str, Any],
    *,
    stored: bool = False,
    names: Container[str] | None = None,
) -> list[tuple[KernelImpl, dict[str, Any]]]:
    """Every applicable (implementation, parameter set), in the schema's order of preference:
    those a compile in this process may choose, or with ``stored`` every one a compile in any
    process may have chosen (a compiled kernel's choice, read where its tier is missing).
    ``names``: only those of these implementations."""
    out = []
    lowp = bool(attrs.get("precision"))  # GE's precision modes: only, or never, the low-precision kernels
    for impl in schema.impls:
        if ("lowp" in impl.name) != lowp or (names is not None and impl.name not in names):
            continue
        if impl.applies(in_descs, attrs) and (stored or impl.offered()):
            for params in impl.candidates(in_descs, attrs) or [{}]:
                out.append((impl, dict(params)))
    return out


def check_kernel(desc: KernelDesc, node: Node, engine: str) -> str:
    """Why ``desc`` cannot be the kernel of ``node`` on ``engine``, or '' when it can: the same
    op and engine, the node's signature, and an (implementation, parameters) pair the tuner
    could have chosen for it. Kernel-cache entries and the node plans of an .om are checked
    by this one rule: data from disk never picks a kernel or parameters the compiler would
    not (a block size outside the candidates runs, but orders of magnitude slower)."""
    if (desc.op_type, desc.domain, desc.engine) != (node.op_type, node.domain, engine):
        return f"it is a {desc.op_type} kernel for {desc.engine}"
    if (desc.inputs, desc.outputs) != signature_of(node):
        return "its signature differs from the node's"
    from aioge.ops.registry import get_schema

    schema = get_schema(node.op_type, node.domain)
    descs = [v.desc if v is not None else None for v in node.inputs]
    if not any(e.value == engine for e in schema.engines_for(descs)):
        return f"{node.op_type} does not run on {engine} for these inputs"
    h = desc.history  # only the named implementations' candidates (a .om's decode: resnet18 -2 ms)
    stored = candidates_of(schema, descs, node.attrs, stored=True, names={desc.impl, h.runner_up, h.native_alt})
    for name, params, what in (
        (desc.impl, desc.params, "implementation"),
        (h.runner_up, h.runner_up_params, "runner-up"),
        (h.native_alt, h.native_alt_params, "native alternative"),
    ):
        if name and not any(impl.name == name and same_params(p, params) for impl, p in stored):
            return f"{what} {name!r} with {dict(params)} is not a candidate for this node"
    if min(h.margin, h.tuned_ms, h.checks, h.native_ms, h.native_checks) < 0:
        return f"negative tuning figures (tuned_ms {h.tuned_ms}, margin {h.margin}, checks {h.checks}, native_ms {h.native_ms})"
    return ""


def same_params(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two parameter sets are equal, lists and tuples alike (a decoded desc has tuples)."""

    def norm(v: Any) -> Any:
        return tuple(norm(x) for x in v) if isinstance(v, (list, tuple)) else v.item() if isinstance(v, np.generic) else v

    return {k: norm(v) for k, v in a.items()} == {k: norm(v) for k, v in b.items()}
