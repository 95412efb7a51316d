"""Work the C-tier error tests run in a child process (a crash fails the test, not pytest):
``python -m tests.engines._native_child alloc|empty``, one JSON line per case on stdout."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import numpy as np

from aioge.errors import ExecutionError
from aioge.ir.desc import TensorDesc
from aioge.kernels import native
from aioge.ops import infer_node
from aioge.ops.registry import get_schema
from aioge.plan.kernel import candidates_of

F = np.float32


def kernel(op: str, impl: str, params: dict[str, Any], arrays: list[np.ndarray], attrs: dict[str, Any], domain: str = "") -> Any:
    """``impl`` of ``op`` built for ``arrays`` (its run, taking the arrays and no outputs)."""
    schema = get_schema(op, domain)
    norm = schema.normalise_attrs(attrs)
    descs = [TensorDesc(a.shape, "float32") for a in arrays]
    outs = infer_node(schema, descs, arrays, norm, None, "g", "n")
    run = schema.impl(impl).build(norm, params, descs, outs)
    return lambda: run(arrays, None)


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(F)


# (site, op, impl, params, inputs, attrs, domain): every allocation site of the C tier
DW = dict(group=8, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
DW5 = dict(group=8, kernel_shape=[5, 5], pads=[2, 2, 2, 2])
SITES: list[tuple[str, str, str, dict[str, Any], list[np.ndarray], dict[str, Any], str]] = [
    ("depthwise interleaved", "Conv", "conv_depthwise_native", {}, [_rand(1, 8, 9, 9), _rand(8, 1, 3, 3)], DW, ""),
    # 5x5 stride 1: the line form's phases (AVX-512 takes 3x3 ones by the direct form, no buffer)
    ("depthwise rows", "Conv", "conv_depthwise_native", {"rows": 1}, [_rand(1, 8, 30, 30), _rand(8, 1, 5, 5)], DW5, ""),
    ("direct conv", "Conv", "conv_direct_native", {}, [_rand(1, 4, 9, 9), _rand(8, 4, 3, 3)], {"pads": [1, 1, 1, 1]}, ""),
    (
        "direct conv by images",
        "Conv",
        "conv_direct_native",
        {},
        [_rand(3, 4, 9, 9), _rand(8, 4, 3, 3)],
        {"pads": [1, 1, 1, 1]},
        "",
    ),
    ("direct conv, channels in lanes", "Conv", "conv_direct_t_native", {}, [_rand(1, 8, 4, 4), _rand(16, 8, 3, 3)], {}, ""),
    ("grouped conv", "Conv", "conv_grouped_native", {}, [_rand(1, 8, 9, 9), _rand(8, 4, 3, 3)], {"group": 2}, ""),
    (
        "pool rows",
        "MaxPool",
        "pool_native",
        {},
        [_rand(1, 4, 9, 9)],
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        "",
    ),
    ("gemv tail", "Gemm", "gemv_native", {}, [_rand(1, 20), _rand(20, 19)], {}, ""),
    (
        "squeeze",
        "SqueezeExcite",
        "squeeze_excite_native",
        {},
        [_rand(1, 8, 5, 5), _rand(2, 8, 1, 1), _rand(2), _rand(8, 2, 1, 1), _rand(8)],
        {"activation1": "Relu", "activation2": "Sigmoid"},
        "aioge",
    ),
]


def _in_a_new_thread(fn: Any) -> Any:
    """``fn()`` in a fresh thread (whose C scratch is not allocated yet): its result or exception."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            box.append(("raised", exc))

    t = threading.Thread(target=target)
    t.start()
    t.join()
    return box[0]


def alloc() -> None:
    """Each site with its 1st, 2nd and 3rd C allocation failing in turn: an ExecutionError, or
    (when the kernel made fewer) the right output; never another outcome."""
    for site, op, impl, params, arrays, attrs, domain in SITES:
        run = kernel(op, impl, params, arrays, attrs, domain)
        (want,) = _in_a_new_thread(run)[1]
        failed, other = [], []
        for nth in (1, 2, 3):
            native.fail_alloc(nth)
            kind, value = _in_a_new_thread(run)
            native.fail_alloc(0)
            if kind == "raised" and isinstance(value, ExecutionError) and "no memory" in str(value):
                failed.append(nth)
            elif kind == "raised" or not np.array_equal(value[0], want, equal_nan=True):
                other.append(f"{nth}: {kind} {value!r:.200}")
        print(json.dumps({"site": site, "failed": failed, "other": other}), flush=True)
    from aioge.runtime.program_queue import ProgramQueue

    native.fail_alloc(1)
    queue = ProgramQueue.create(1)
    native.fail_alloc(0)
    print(json.dumps({"site": "program queue", "failed": [1] if queue is None else [], "other": []}), flush=True)


def empty() -> None:
    """Depthwise convs whose output has a zero-size dim (issue 37, item 4), both layouts: the
    output's shape, and that nothing was left to compute."""
    for shape, pads in (([1, 4, 0, 3], [1, 0, 0, 0]), ([1, 4, 1, 3], [1, 0, 0, 0]), ([1, 4, 5, 0], [0, 0, 0, 0])):
        for params in ({}, {"rows": 1}):
            x, w = _rand(*shape), _rand(4, 1, 3, 3)
            attrs = {"group": 4, "kernel_shape": [3, 3], "strides": [4, 4], "pads": pads}
            (y,) = kernel("Conv", "conv_depthwise_native", params, [x, w], attrs)()
            (ref,) = kernel("Conv", "im2col", {}, [x, w], attrs)()
            print(json.dumps({"shape": shape, "params": params, "y": list(y.shape), "ref": list(ref.shape)}), flush=True)
    import anyio

    import aioge
    from aioge import ops

    async def served() -> list[int]:
        """The issue's request: a model with dynamic H and a top pad of 1 fed H = 0, every
        candidate (the C ones too) tuned on that shape."""
        g = aioge.Graph("dynamic_h")
        x = g.input("x", (1, 4, "H", 3))
        w = g.constant(_rand(4, 1, 3, 3), "w")
        g.output(ops.conv(x, w, group=4, kernel_shape=[3, 3], strides=[4, 4], pads=[1, 0, 0, 0]), names=["y"])
        async with aioge.Session({"aioge.tune_mode": "tune", "ge.op_compiler_cache_mode": "disable"}) as s:
            await s.add_graph(1, g)
            y = (await s.run_graph(1, {"x": np.zeros((1, 4, 0, 3), F)}))["y"]
        return list(y.shape)

    print(json.dumps({"shape": [1, 4, 0, 3], "params": "session", "y": anyio.run(served), "ref": [1, 4, 0, 1]}), flush=True)


def _zero_cases() -> list[tuple[str, list[list[int]], dict[str, Any]]]:
    cases: list[tuple[str, list[list[int]], dict[str, Any]]] = []
    for shape in ([1, 4, 0, 3], [1, 4, 3, 0], [0, 4, 5, 5], [1, 4, 1, 3]):
        for k, s, pads in ((3, 4, [1, 0, 0, 0]), (3, 1, [1, 1, 1, 1]), (1, 1, [0, 0, 0, 0])):
            window = {"kernel_shape": [k, k], "strides": [s, s], "pads": pads}
            cases.append(("Conv", [shape, [4, 1, k, k], [4]], {**window, "group": 4}))
            cases.append(("Conv", [shape, [8, 4, k, k], [8]], window))
            cases.append(("Conv", [shape, [8, 2, k, k]], {**window, "group": 2}))
            cases += [("MaxPool", [shape], window), ("AveragePool", [shape], window)]
        cases.append(("GlobalAveragePool", [shape], {}))
    cases.append(("Conv", [[1, 0, 5, 5], [8, 0, 3, 3]], {"kernel_shape": [3, 3]}))
    for m, k, n in ((0, 4, 5), (3, 0, 5), (3, 4, 0), (1, 4, 0), (1, 0, 5)):
        cases += [
            ("MatMul", [[m, k], [k, n]], {}),
            ("Gemm", [[m, k], [k, n], [n]], {}),
            ("Gemm", [[m, k], [n, k]], {"transB": 1}),
        ]
    for sh in ([0, 5], [3, 0]):
        cases += [("Softmax", [sh], {}), ("LayerNormalization", [sh, sh[-1:], sh[-1:]], {}), ("Gelu", [sh], {})]
    return cases


def zero() -> None:
    """Every C candidate of the ops with a compiled kernel, on inputs with a zero-size dim:
    the output's shape, or the error it raised."""
    for op, shapes, attrs in _zero_cases():
        schema = get_schema(op)
        norm = schema.normalise_attrs(attrs)
        arrays = [_rand(*s) for s in shapes]
        descs = [TensorDesc(a.shape, "float32") for a in arrays]
        try:
            outs = infer_node(schema, descs, arrays, norm, None, "g", "n")
        except Exception:  # noqa: BLE001 - a shape the op refuses: nothing to run
            continue
        for impl, params in candidates_of(schema, descs, norm):
            if "native" in impl.name:
                ys = impl.build(norm, params, descs, outs)(arrays, None)
                got, want = [list(y.shape) for y in ys], [list(o.shape) for o in outs]  # type: ignore[arg-type]
                print(json.dumps({"op": op, "shapes": shapes, "impl": impl.name, "got": got, "want": want}), flush=True)


if __name__ == "__main__":
    {"alloc": alloc, "empty": empty, "zero": zero}[sys.argv[1]]()
