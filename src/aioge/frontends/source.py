"""A model named on the command line (or in a batch compile) as a Graph: MODEL.onnx, MODEL.pb,
MODEL.keras, a SavedModel directory, or GRAPH.py[:function], a script whose function builds the graph. Shared by ``aioge`` commands
and ``aioge.distributed``, which sit above it."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

from aioge.errors import AiogeError

__all__ = ["load_source"]


def load_source(spec: str, shapes: dict[str, tuple[int, ...]]) -> tuple[Any, dict[str, np.ndarray], Any]:
    """``(graph, feeds, reference)`` from MODEL.onnx, or GRAPH.py[:function] whose function
    (default ``build``) returns a Graph or ``(graph, feeds, reference)``."""
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
    if not callable(build):
        raise AiogeError(f"{path}: has no function {func}() returning a Graph")
    made = build()
    graph, feeds, ref = (made, {}, None) if isinstance(made, Graph) else (tuple(made) + (None, None))[:3]
    if not isinstance(graph, Graph):
        raise AiogeError(f"{path}: {func}() returned {type(graph).__name__}, not a Graph")
    return graph, dict(feeds or {}), ref
