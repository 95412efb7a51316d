"""aioge: an asyncio-native graph compiler and executor modelled on the Ascend Graph Engine.

The few names a user touches: ``Session``, ``Graph``, ``ops``, ``load_onnx``, ``errors``.
"""

from __future__ import annotations

import logging
from typing import Any

__version__ = "0.1.0"

from aioge import errors, ops  # noqa: E402
from aioge.ir import Graph, TensorDesc  # noqa: E402
from aioge.session import Session  # noqa: E402

__all__ = ["Graph", "Session", "TensorDesc", "__version__", "errors", "load_onnx", "ops"]

logging.getLogger(__name__).addHandler(logging.NullHandler())


def load_onnx(source: Any, **kwargs: Any) -> Graph:
    """Load an ONNX model (path, bytes or ModelProto) as an aioge Graph; see ``aioge.frontends.onnx``."""
    from aioge.frontends.onnx import load_onnx as _load

    return _load(source, **kwargs)
