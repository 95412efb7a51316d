"""Shared machinery of the ONNX conformance suites: cases, running through aioge, comparing, skip files.

Used by test_onnx_node_suite.py, test_onnx_models.py and by ``python -m tests.frontends.regen_onnx_skips``
(which rewrites the skip files from a fresh run).
"""

from __future__ import annotations

import builtins
import glob
import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any, Iterator, Sequence

import anyio
import anyio.from_thread
import numpy as np
import onnx
from onnx import numpy_helper

import aioge
from aioge import errors
from aioge.errors import AiogeError, UnsupportedOpError

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_SKIPS = os.path.join(HERE, "onnx_node_skips.txt")
MODEL_SKIPS = os.path.join(HERE, "onnx_model_skips.txt")
DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
# Heuristic kernels (no timing), and no disk kernel cache: the suites stay hermetic and never
# wait on another process's cache locks.
OPTIONS = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}

# ONNX's own tolerances, per output comparison.
RTOL, ATOL = 1e-3, 1e-7


class NotTensor(Exception):
    """A case feeds or expects sequences, optionals or maps, which aioge does not model."""


@cache
def node_cases() -> tuple[Any, ...]:
    """Every ONNX node test case (onnx.backend.test.case.node), generated once per process."""
    import onnx.backend.test.case.node as node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow on purpose while making cast cases
        return tuple(sorted(node.collect_testcases(None), key=lambda c: c.name))


@dataclass(frozen=True, slots=True)
class ModelCase:
    """One model of the model suites: its file and data sets (inputs, expected outputs)."""

    suite: str
    name: str
    path: str
    data_sets: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # .pb files
    rtol: float = RTOL
    atol: float = ATOL
    light_inputs: bool = False  # inputs generated as onnx's runner does for light/ models

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"


# light/ tolerances as onnx's own model test cases state them (DenseNet needs 2e-3).
LIGHT_RTOL = {"densenet121": 2e-3}


def model_cases() -> list[ModelCase]:
    """The light/, simple/, pytorch-converted/ and pytorch-operator/ models shipped with onnx."""
    cases = []
    for path in sorted(glob.glob(os.path.join(DATA, "light", "light_*.onnx"))):
        name = os.path.basename(path)[len("light_") : -len(".onnx")]
        out = os.path.join(DATA, "light", f"light_{name}_output_0.pb")
        cases.append(ModelCase("light", name, path, (((), (out,)),), LIGHT_RTOL.get(name, RTOL), ATOL, True))
    for suite in ("simple", "pytorch-converted", "pytorch-operator"):
        for d in sorted(glob.glob(os.path.join(DATA, suite, "test_*"))):
            sets = []
            for ds in sorted(glob.glob(os.path.join(d, "test_data_set_*"))):
                ins = tuple(sorted(glob.glob(os.path.join(ds, "input_*.pb")), key=_index))
                outs = tuple(sorted(glob.glob(os.path.join(ds, "output_*.pb")), key=_index))
                sets.append((ins, outs))
            cases.append(ModelCase(suite, os.path.basename(d), os.path.join(d, "model.onnx"), tuple(sets)))
    return cases


def _index(path: str) -> int:
    return int(re.findall(r"_(\d+)\.pb$", path)[0])


def light_input(vi: onnx.ValueInfoProto) -> np.ndarray:
    """The input onnx's backend runner feeds light/ models: arange / n, symbolic dims as 1."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def read_tensor(path: str) -> np.ndarray:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


# -- running -----------------------------------------------------------------------------


class Runner:
    """One Session in one event loop (a blocking portal) that runs graphs for sync tests."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal) -> None:
        self.portal = portal
        self.session = aioge.Session(OPTIONS)
        self._next = 0

    def run(self, graph: aioge.Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._next += 1
        gid = self._next

        async def go() -> dict[str, np.ndarray]:
            await self.session.add_graph(gid, graph)
            try:
                return await self.session.run_graph(gid, feeds)
            finally:
                await self.session.remove_graph(gid)

        return self.portal.call(go)


@contextmanager
def runner() -> Iterator[Runner]:
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        r = Runner(portal)
        try:
            yield r
        finally:
            portal.call(r.session.aclose)


def as_array(x: Any) -> np.ndarray:
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    raise NotTensor(f"a {type(x).__name__} value (sequence/optional/map)")


def _as_value(x: Any) -> Any:
    """A test input or output as arrays: a tensor, a list of them (sequence), or None (empty optional)."""
    if isinstance(x, onnx.SequenceProto):
        return [_as_value(t) for t in numpy_helper.to_list(x)]
    if isinstance(x, onnx.OptionalProto):
        return _as_value(numpy_helper.to_optional(x))
    if x is None or isinstance(x, list):
        return x if x is None else [_as_value(t) for t in x]
    return as_array(x)


def _model_proto(model: Any) -> onnx.ModelProto:
    return model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)


def run_model(
    run: Runner, model: Any, inputs: Sequence[Any], *, first_class: bool = False, **load: Any
) -> tuple[aioge.Graph, list[Any]]:
    """Load with load_onnx and run with the Session; returns the graph and outputs in model order.

    Sequence inputs (lists) and optional inputs (None, a tensor or a list) are passed as
    ``lengths=`` and their tensors fed as ``name[i]`` (the frontend's unrolling), or with
    ``first_class`` fed as they are (first-class sequence and optional inputs); sequence
    outputs come back as lists, empty optionals as None.
    """
    proto = _model_proto(model)
    inits = {t.name for t in proto.graph.initializer}
    vis = [vi for vi in proto.graph.input if vi.name not in inits]
    values = [_as_value(x) for x in inputs]
    if len(values) > len(vis):
        raise NotTensor(f"{len(values)} inputs given for {len(vis)} inputs")
    lengths: dict[str, int | None] = {}
    feeds: dict[str, np.ndarray] = {}
    for vi, x in zip(vis, values):
        kind = vi.type.WhichOneof("value")
        if kind == "tensor_type":
            feeds[vi.name] = as_array(x)
        elif kind in ("sequence_type", "optional_type") and first_class:
            feeds[vi.name] = x
        elif kind in ("sequence_type", "optional_type"):
            lengths[vi.name] = None if x is None else (len(x) if isinstance(x, list) else 1)
            if isinstance(x, list):
                feeds.update({f"{vi.name}[{i}]": t for i, t in enumerate(x)})
            elif x is not None:
                feeds[vi.name] = x
        else:
            raise NotTensor(f"input {vi.name!r} is a {kind}")
    graph = aioge.load_onnx(model, lengths=lengths or None, **load)
    out = run.run(graph, feeds)
    return graph, [out[vi.name] for vi in proto.graph.output]


def compare(expected: Sequence[Any], got: Sequence[np.ndarray], rtol: float, atol: float) -> None:
    """ONNX's backend comparison: same count, shapes and dtypes; strings equal; numbers allclose.

    Raises:
        AssertionError: naming the output and what differs.
    """
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for i, (want, have) in enumerate(zip(expected, got)):
        want = _as_value(want)
        if want is None or isinstance(want, list) or have is None or isinstance(have, list):
            assert type(have) is type(want), f"output {i}: {type(have).__name__}, expected {type(want).__name__}"
            if isinstance(want, list):
                assert len(have) == len(want), f"output {i}: a sequence of {len(have)}, expected {len(want)}"
                compare(want, have, rtol, atol)
            continue
        assert have.shape == want.shape, f"output {i}: shape {have.shape}, expected {want.shape}"
        if want.dtype == object:
            assert have.dtype.kind in "OU", f"output {i}: dtype {have.dtype}, expected strings"
            np.testing.assert_array_equal(have, want, err_msg=f"output {i}")
            continue
        assert have.dtype == want.dtype, f"output {i}: dtype {have.dtype}, expected {want.dtype}"
        if want.dtype.name == "bfloat16":
            # onnx's backend runner (assert_similar_outputs): bfloat16 outputs compare in float32 at
            # rtol >= two bfloat16 ulps (2**-6); rtol 1e-3 is finer than the type resolves.
            np.testing.assert_allclose(
                have.astype(np.float32), want.astype(np.float32), rtol=max(rtol, 2**-6), atol=atol, err_msg=f"output {i}"
            )
            continue
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(have, want, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=f"output {i}")


def run_node_case(run: Runner, case: Any, rtol: float = RTOL, atol: float = ATOL, *, first_class: bool = False) -> None:
    """Run one node test case through aioge and compare with its expected outputs.

    Raises:
        AssertionError on a wrong result; AiogeError or NotTensor when it cannot run.
    """
    for inputs, expected in case.data_sets:
        _, got = run_model(run, case.model, inputs, first_class=first_class)
        compare(expected, got, rtol, atol)


# -- skip files ----------------------------------------------------------------------------


def read_skips(path: str) -> dict[str, str]:
    """``name  # reason`` lines; blank lines and ``#`` comment lines are ignored."""
    skips: dict[str, str] = {}
    if not os.path.exists(path):
        return skips
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition("#")
            skips[name.strip()] = reason.strip() or "no reason given"
    return skips


def write_skips(path: str, skips: dict[str, str], header: str) -> None:
    width = max((len(n) for n in skips), default=0) + 2
    with open(path, "w", encoding="utf-8") as f:
        for line in header.strip().splitlines():
            f.write(f"# {line}\n")
        for name in sorted(skips):
            f.write(f"{name.ljust(width)}# {skips[name]}\n")


def classify(exc: BaseException) -> str:
    """A one-line skip reason for a failure, starting with its category."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # a task group's wrapper: the reason is the error inside
    if isinstance(exc, UnsupportedOpError):
        return "unsupported op: " + ", ".join(f"{d}::{t}" if d else t for d, t in exc.ops)
    if isinstance(exc, NotTensor):
        return f"non-tensor values: {exc}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"\s+", " ", text)[:160]
    if "is not supported by aioge" in text and "data type" in text:
        return "unsupported dtype: " + re.sub(r"^.*ONNX data type (\w+).*$", r"\1", text)
    if isinstance(exc, AssertionError):
        full = " ".join(str(exc).split())
        m = re.search(r"(Max absolute difference[^M]*Max relative difference[^\s]*\s*\S+)", full)
        return "wrong result: " + (text if m is None else f"{text} ({m.group(1)[:120]})")
    if isinstance(exc, AiogeError) and "not supported" in text:
        return f"unsupported feature: {re.sub(r'^(graph|node) .*?: (?=[A-Z])', '', text)}"
    return f"error: {type(exc).__name__}: {text}"


def expected_error(reason: str) -> type[BaseException]:
    """The exception a listed case must fail with, from its reason (as ``classify`` wrote it).

    Raises:
        ValueError: a reason of no known category, or naming an exception type not found.
    """
    cat, _, rest = reason.partition(":")
    fixed: dict[str, type[BaseException]] = {
        "unsupported op": UnsupportedOpError,
        "non-tensor values": NotTensor,
        "unsupported dtype": AiogeError,
        "unsupported feature": AiogeError,
        "wrong result": AssertionError,
    }
    if cat in fixed:
        return fixed[cat]
    if cat == "error":
        name = rest.strip().split(":", 1)[0]
        found = getattr(errors, name, None) or getattr(builtins, name, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
    raise ValueError(f"skip reason {reason!r}: no known category or exception type")


def category(reason: str) -> str:
    return reason.split(":", 1)[0]
