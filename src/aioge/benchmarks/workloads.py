"""The benchmark workloads: each an aioge graph, the same model as ONNX bytes, feeds and a check.

- ``light``: the nine ``onnx/backend/test/data/light/`` models at 1x3x224x224, fed the input
  onnx's backend runner uses (arange / n) and checked against the stored expected output;
- ``builder``: the bundled MLP, CNN and transformer encoder, each beside the plain numpy a user
  would write by hand (``aioge.examples``);
- ``micro``: the 1,000-Add chain (per-node overhead) and 4 independent conv branches (stream
  overlap).

Builder graphs use ONNX op names and attributes, so ``to_onnx`` exports them for onnxruntime
and ``onnx.reference`` without translation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from aioge import ops
from aioge.benchmarks.real_models import LIGHT_NODUP_SUFFIX, REAL
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Graph

__all__ = [
    "ALL",
    "BUILDER",
    "GROUPS",
    "LIGHT",
    "LIGHT_NODUP",
    "MICRO",
    "REAL",
    "expand_names",
    "Workload",
    "light_dir",
    "load_workloads",
    "to_onnx",
]

LIGHT = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)
BUILDER = ("mlp", "cnn", "transformer")
MICRO = ("add_chain", "conv_branches")
LIGHT_NODUP = tuple(f"{n}{LIGHT_NODUP_SUFFIX}" for n in LIGHT)  # light/ with DuplicateFilterPass off
ALL = (*REAL, *LIGHT, *LIGHT_NODUP, *BUILDER, *MICRO)
# ``--workloads`` also takes these group names.
GROUPS = {"real": REAL, "light": LIGHT, "light-nodup": LIGHT_NODUP, "builder": BUILDER, "micro": MICRO}
# Fusion off for the chain: it measures dispatch per node, not how well 1,000 Adds fold into one.
CHAIN_OPTIONS = {"ge.optimizationSwitch": "ElementwiseFusionPass:off;ConstantFoldingPass:off"}


@dataclass
class Workload:
    """One benchmark case. ``check(outputs)`` returns the max abs error against the truth."""

    name: str
    group: str  # "light", "builder" or "micro"
    graph: Graph
    onnx_model: Any  # onnx.ModelProto for the yardsticks
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]  # the stored output (light) or the numpy reference's
    numpy_fn: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
    options: dict[str, str] = field(default_factory=dict)
    rtol: float = 1e-3  # |got - want| <= atol + rtol * |want|, elementwise (ONNX's test rule)
    atol: float = 1e-7

    def check(self, outputs: dict[str, np.ndarray]) -> float:
        """Max abs error over the outputs; raises AssertionError if an element is beyond tolerance."""
        worst = 0.0
        for name, want in self.expected.items():
            got = np.asarray(outputs[name]).astype(np.float64)
            if got.shape != want.shape:
                raise AssertionError(f"{self.name}: output {name!r} has shape {got.shape}, expected {want.shape}")
            if not want.size:
                continue
            diff = np.abs(got - want)
            if not np.all(diff <= self.atol + self.rtol * np.abs(want)):
                raise AssertionError(
                    f"{self.name}: output {name!r} is off by up to {float(diff.max()):.3g} (rtol {self.rtol}, atol {self.atol})"
                )
            worst = max(worst, float(diff.max()))
        return worst


def light_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _onnx_attr(a: Any) -> Any:
    return list(a) if isinstance(a, tuple) else a


def to_onnx(g: Graph, opset: int = 20) -> Any:
    """A builder graph as an ONNX model (the builders use ONNX op names and attributes)."""
    from onnx import helper, numpy_helper

    def info(v: Any) -> Any:
        return helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(numpy_dtype(v.dtype)), list(v.shape))

    nodes = [
        helper.make_node(
            n.op_type,
            [v.name if v is not None else "" for v in n.inputs],
            [o.name for o in n.outputs],
            **{k: _onnx_attr(a) for k, a in n.attrs.items()},
        )
        for n in g.nodes
    ]
    inits = [numpy_helper.from_array(np.asarray(v.data), name) for name, v in g.constants.items()]
    graph = helper.make_graph(nodes, g.name, [info(v) for v in g.inputs], [info(v) for v in g.outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _light(name: str) -> Workload:
    import onnx
    from onnx import numpy_helper

    import aioge

    path = os.path.join(light_dir(), f"light_{name}.onnx")
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    want = onnx.TensorProto()
    with open(os.path.join(light_dir(), f"light_{name}_output_0.pb"), "rb") as f:
        want.ParseFromString(f.read())
    graph = aioge.load_onnx(path)
    expected = {graph.outputs[0].name: numpy_helper.to_array(want).astype(np.float64)}
    return Workload(name, "light", graph, model, feeds, expected)


def _builder(name: str) -> Workload:
    from aioge.examples import EXAMPLES

    graph, feeds, reference = EXAMPLES[name]()
    expected = {k: np.asarray(v, np.float64) for k, v in reference(feeds).items()}
    return Workload(name, "builder", graph, to_onnx(graph), feeds, expected, reference, rtol=1e-4, atol=1e-5)


def add_chain(n: int = 1000) -> Workload:
    g = Graph(f"adds{n}")
    h = g.input("x", (1, 16), "float32")
    c = np.full((1, 16), 0.5, np.float32)
    for _ in range(n):
        h = ops.add(h, g.constant(c))
    g.output(h, names=["y"])
    x = np.zeros((1, 16), np.float32)

    def by_hand(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        y = feeds["x"]
        for _ in range(n):
            y = y + c
        return {"y": y}

    return Workload(
        "add_chain",
        "micro",
        g,
        to_onnx(g),
        {"x": x},
        {"y": np.full((1, 16), 0.5 * n)},
        by_hand,
        options=dict(CHAIN_OPTIONS),
        rtol=1e-6,
        atol=1e-6,
    )


def conv_branches(branches: int = 4, c: int = 64, hw: int = 56, depth: int = 2, seed: int = 0) -> Workload:
    """``branches`` independent conv-relu stacks on one input, concatenated: streams can overlap them."""
    rng = np.random.default_rng(seed)
    g = Graph("conv_branches")
    x = g.input("x", (1, c, hw, hw), "float32")
    weights = [
        [(rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32) for _ in range(depth)] for _ in range(branches)
    ]
    outs = []
    for b, ws in enumerate(weights):
        h = x
        for d, w in enumerate(ws):
            h = ops.relu(ops.conv2d(h, g.constant(w, f"w{b}_{d}"), pads=(1, 1, 1, 1)))
        outs.append(h)
    g.output(ops.concat(*outs, axis=1), names=["y"])
    feeds = {"x": rng.standard_normal((1, c, hw, hw)).astype(np.float32)}

    def by_hand(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = []
        for ws in weights:
            h = feeds["x"]
            for w in ws:
                win = np.lib.stride_tricks.sliding_window_view(np.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
                h = np.maximum(np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2), 0)
            results.append(h)
        return {"y": np.concatenate(results, axis=1)}

    expected = {k: v.astype(np.float64) for k, v in by_hand(feeds).items()}
    return Workload("conv_branches", "micro", g, to_onnx(g), feeds, expected, by_hand, rtol=1e-4, atol=1e-4)


def expand_names(names: list[str]) -> list[str]:
    """Workload and group names (``real``, ``light``, ...) as workload names, in order, once each."""
    out: list[str] = []
    for n in names:
        for m in GROUPS.get(n, (n,)):
            if m not in out:
                out.append(m)
    return out


def load_workloads(names: list[str] | None = None, *, chain: int = 1000) -> list[Workload]:
    """The named workloads or groups (default: all), in suite order."""
    from aioge.benchmarks import real_models

    names = expand_names(list(names)) if names else list(ALL)
    unknown = [n for n in names if n not in ALL]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; expected some of {list(ALL)}")
    out = []
    for n in names:
        if n in REAL:
            out.append(real_models.real_workload(n))
        elif n in LIGHT_NODUP:
            out.append(real_models.light_nodup(n))
        elif n in LIGHT:
            out.append(_light(n))
        elif n in BUILDER:
            out.append(_builder(n))
        elif n == "add_chain":
            out.append(add_chain(chain))
        else:
            out.append(conv_branches())
    return out
