"""A model named on the command line (or in a batch compile) as a Graph: MODEL.onnx, MODEL.pb,
MODEL.keras, a SavedModel directory, or GRAPH.py[:function], a script whose function builds the graph. Shared by ``aioge`` commands
and ``aioge.distributed``, which sit above it."""

from __future__ import annotations

import importlib.util
import inspect
import os
from typing import Any

import numpy as np

from aioge.errors import AiogeError

__all__ = ["load_source"]


def load_source(spec: str, shapes: dict[str, tuple[int, ...]]) -> tuple[Any, dict[str, np.ndarray], Any]:
    """``(graph, feeds, reference)`` from MODEL.onnx, or GRAPH.py[:function] whose function
    (default ``build``; without one, the script's only ``build*`` function, as the bundled
    examples' ``build_mlp``) returns a Graph or ``(graph, feeds, reference)``."""
    from aioge.ir.graph import Graph

    if spec.endswith(".onnx"):
        try:
            from aioge.frontends.onnx import load_onnx

            graph = load_onnx(spec, shapes=shapes or None)
        except ImportError as exc:
            raise AiogeError(f"{spec}: this aioge has no ONNX frontend ({exc})") from None
        return graph, {}, None
    if spec.endswith((".pb", ".keras")) or os.path.isfile(os.path.join(spec, "saved_model.pb")):
        try:
            from aioge.frontends.tf import load_tf

            graph = load_tf(spec, shapes=shapes or None)
        except ImportError as exc:
            raise AiogeError(
                f"{spec}: a TensorFlow model needs the tensorflow extra: pip install 'aioge[tensorflow]' ({exc})"
            ) from None
        return graph, {}, None
    if ".py:" in spec:
        stem, func = spec.split(".py:", 1)
        path = stem + ".py"
    else:
        path, func = spec, "build"
    if not path.endswith(".py") or not os.path.isfile(path):
        raise AiogeError(
            f"{spec}: expected MODEL.onnx, GRAPH.py[:function] or OUT.om (an existing file), MODEL.pb, MODEL.keras or a SavedModel directory"
        )
    # The user names this script on the command line to build their graph, as with `python GRAPH.py`.
    module_spec = importlib.util.spec_from_file_location("_aioge_user_graph", path)
    if module_spec is None or module_spec.loader is None:
        raise AiogeError(f"{path}: cannot import")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    build = getattr(module, func, None)
    if build is None and ".py:" not in spec:  # no build(): the script's one build* function, if it has one
        found = sorted(n for n, f in vars(module).items() if n.startswith("build") and inspect.isfunction(f))
        if len(found) == 1:
            func, build = found[0], getattr(module, found[0])
    if not callable(build):
        funcs = sorted(n for n, f in vars(module).items() if inspect.isfunction(f) and not n.startswith("_"))
        raise AiogeError(
            f"{path}: has no function {func}() returning a Graph; its functions: {', '.join(funcs) or 'none'}. "
            f"aioge takes GRAPH.py[:function], a function (default build) returning a Graph or (graph, feeds, "
            f"reference): name one as {path}:FUNCTION"
        )
    try:
        inspect.signature(build).bind()
    except TypeError as exc:  # it needs arguments: not a builder this convention can call
        raise AiogeError(f"{path}: {func}() cannot be called without arguments ({exc})") from None
    except ValueError:
        pass  # no signature to check (a builtin): call it and see
    made = build()
    graph, feeds, ref = (made, {}, None) if isinstance(made, Graph) else (tuple(made) + (None, None))[:3]
    if not isinstance(graph, Graph):
        raise AiogeError(f"{path}: {func}() returned {type(graph).__name__}, not a Graph")
    return graph, dict(feeds or {}), ref
