"""Every key aioge matches compiled artefacts by, built in one place from named parts.

- ``kernel_key``: a kernel's cache key, from ``kernel_key_parts`` (op, descs, attributes,
  engine, soc, debug and tune settings, candidates, code digest, versions);
- ``graph_match_key``: what a graph cache entry must match to be reused (versions, code
  digest, the source graph's fingerprint, the input signature, the compile options);
- ``versions`` and ``code_digest``: what every compiled artefact is made under;
- ``compile_options``: the options that shape a compile (``stage="compiler"`` in the options
  table), the only ones a key holds.

A key that forgets a part gives false hits (JAX's, vLLM's and torch-xla's bugs), so each part
is named and each part's hash is logged at DEBUG: a miss can be explained in one log read.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from aioge._version import __version__
from aioge.ir.fingerprint import canonical_attr
from aioge.ir.graph import Node

__all__ = [
    "Signature",
    "code_digest",
    "compile_options",
    "digest_of",
    "graph_match_key",
    "kernel_key",
    "kernel_key_parts",
    "plain",
    "plan_versions",
    "remote_graph_key",
    "remote_namespace",
    "signature_of",
    "versions",
]

log = logging.getLogger(__name__)

# (shape or None, dtype, format) per input or output; None for an absent optional input.
# A sequence's or optional's adds its container: (shape or None, dtype, format, container).
_Shape = tuple[int | str, ...] | None
Signature = tuple[tuple[_Shape, str, str] | tuple[_Shape, str, str, str] | None, ...]


def versions() -> dict[str, str]:
    """The versions a compiled artefact is made under; any difference makes it stale."""
    return {"aioge": __version__, "numpy": np.__version__, "python": platform.python_version()}


def plan_versions(native: str) -> dict[str, str]:
    """``versions`` and ``native``, the ISA tier of the compiled kernels (``kernels.native.tier``),
    what a compiled plan is made under: its kernels were tuned among that tier's candidates (an
    AVX2 plan, served from a shared cache to an AVX-512 process, ran resnet50 in 56 ms against its
    own 34)."""
    return {**versions(), "native": native}


# What decides a kernel or a compiled plan: the op schemas and kernels (with their C sources),
# the compiler and the plan, and what they are built on (passes, engine assignment, the IR, the
# option parsers, the keys themselves). Not the CLI, server, serving, session, runtime, caches or
# frontends: editing those never invalidates a cached kernel or graph.
CODE_PARTS = ("ops", "kernels", "compiler", "plan", "passes", "engines", "ir", "keys.py", "options.py")


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 over the source files of ``CODE_PARTS`` (Python, and the C of the compiled
    kernels), computed once per process (JAX #18750: a version string alone lets a locally
    edited kernel or planner load stale entries, the code itself does not). The one code
    digest: kernel keys, ``.om`` files and graph cache entries all use it."""
    return digest_of(Path(__file__).resolve().parent)


def digest_of(root: Path) -> str:
    """The code digest of the package whose directory is ``root``."""
    h = hashlib.sha256(b"aioge-code-v2")
    # os.walk and open, not Path.rglob and read_bytes: 4.1 -> 2.5 ms of a fresh start. Sorted
    # by path parts, as Paths sort.
    rels: list[tuple[str, ...]] = [(part,) for part in CODE_PARTS if part.endswith(".py")]
    for part in CODE_PARTS:
        for d, _, files in os.walk(root / part):
            at = tuple(Path(d).relative_to(root).parts)
            rels += [(*at, f) for f in files if os.path.splitext(f)[1] in (".py", ".c", ".h")]
    for rel in sorted(rels):
        name = "/".join(rel)
        try:
            with open(os.path.join(root, *rel), "rb") as f:
                h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
        except OSError:
            h.update(name.encode() + b"\0unreadable")
    return h.hexdigest()


def signature_of(node: Node) -> tuple[Signature, Signature]:
    """The (inputs, outputs) desc signature of a node."""

    def desc(v: Any) -> tuple[Any, ...] | None:
        if v is None:
            return None
        shape = None if v.desc.shape is None else tuple(v.desc.shape)
        if v.desc.container != "tensor":  # tensors keep their three parts: existing keys stay valid
            return (shape, v.desc.dtype, v.desc.format, v.desc.container)
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
    native: str = "",
) -> dict[str, Any]:
    """Everything that can change a kernel, by name. Names and ids of nodes are left out.

    ``const_inputs`` maps input index to the digest of a constant input whose value the
    kernel may specialise on (GE keys const_value too). ``op_debug_config`` is a digest of
    the debug config file's content (empty without one); ``tune_mode`` is part of the key
    because a heuristic pick is not a tuned kernel; ``impls`` names the op's candidate
    implementations (a new candidate may win); ``code`` is a digest of the kernel library's
    source (default: ``code_digest()``), so a local edit never loads a stale kernel; ``native``
    the compiled kernels' ISA tier, "" without them (the compiler passes its process's; keys
    import no kernels): a kernel tuned without them had no native candidate and would keep a
    plan out of its native program.
    """
    ins, outs = signature_of(node)
    return {
        "op": [node.domain, node.op_type],
        "inputs": [list(i) if i is not None else None for i in ins],
        "outputs": [None if o is None else list(o) for o in outs],
        "attrs": [[k, canonical_attr(node.attrs[k])] for k in sorted(node.attrs)],
        "const_inputs": sorted((const_inputs or {}).items()),
        "engine": engine,
        "soc": soc,
        "debug": op_debug_level,
        "debug_config": op_debug_config,
        "tune": tune_mode,
        "impls": list(impls),
        "impl_version": impl_version,
        "code": code_digest() if code is None else code,
        "native": native,
        **versions(),  # aioge, numpy, python
    }


def kernel_key(parts: Mapping[str, Any]) -> str:
    """``<op>_<sha256>`` over the named parts; each part's hash is logged at DEBUG so a miss can be explained."""
    import msgpack

    h = hashlib.sha256(b"aioge-kernel-v1")
    for name in sorted(parts):
        blob = msgpack.packb(plain(parts[name]), use_bin_type=True)
        digest = hashlib.sha256(blob).hexdigest()
        log.debug("kernel key part %s = %s", name, digest[:16])
        h.update(name.encode() + b"=" + digest.encode())
    # GE's kernel names: te_<optype>_<sha256>, lower case, only file-name-safe characters.
    op = re.sub(r"[^a-z0-9]", "_", str(parts["op"][1]).lower()) or "op"
    return f"{op}_{h.hexdigest()}"


def plain(value: Any) -> Any:
    """``value`` with tuples as lists and numpy scalars as Python ones (what msgpack stores)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def compile_options(raw: Mapping[str, str]) -> dict[str, str]:
    """The options in ``raw`` that shape what a compile produces: those the options table says
    the compiler reads (``OptionSpec.stage``), not the runtime's, cache's or server's."""
    from aioge.options import COMPILER, OPTIONS

    return {k: v for k, v in dict(raw).items() if k not in OPTIONS or OPTIONS[k].stage == COMPILER}


def graph_match_key(
    fingerprint: str | None,
    signature: Sequence[tuple[str, Sequence[int]]],
    options: Mapping[str, str],
    code: bool = True,
    *,
    native: str,
) -> dict[str, Any]:
    """What a graph cache entry must equal, by name, to serve a graph: ``versions`` (``plan_versions``), ``code``,
    ``fingerprint`` (of the source graph; None when the key alone is trusted), ``signature``
    (the input shapes) and ``options`` (the compile-shaping ones of ``options``), as plain data
    (``code=False``: None for the code, matching any)."""
    return {
        "versions": plan_versions(native),
        "code": code_digest() if code else None,
        "fingerprint": fingerprint,
        "signature": [[n, list(s)] for n, s in signature],
        "options": compile_options(options),
    }


def remote_namespace(soc: str) -> str:
    """The prefix of every remote cache key of ``soc`` under this process's versions and code
    (``aioge:<soc>:<digest>``): processes of other versions or code never read each other's
    entries (their envelopes would be misses anyway), and one namespace can be dropped whole."""
    import msgpack

    h = hashlib.sha256(b"aioge-remote-v1")
    h.update(msgpack.packb(sorted(versions().items()), use_bin_type=True))
    h.update(code_digest().encode())
    return f"aioge:{soc}:{h.hexdigest()[:16]}"


def remote_graph_key(graph_key: str, match: Mapping[str, Any], var_descs: Sequence[Any]) -> str:
    """A graph cache entry's remote key: ``<graph_key>_<sha256>`` over its match key
    (``graph_match_key``) and the graph's variable descs, what a disk entry must match too."""
    import msgpack

    h = hashlib.sha256(b"aioge-remote-graph-v1")
    for name in sorted(match):
        h.update(name.encode() + b"=" + hashlib.sha256(msgpack.packb(plain(match[name]), use_bin_type=True)).digest())
    h.update(b"vars=" + hashlib.sha256(msgpack.packb(plain(list(var_descs)), use_bin_type=True)).digest())
    return f"{graph_key}_{h.hexdigest()}"
