"""aioge: an asyncio-native graph compiler and executor modelled on the Ascend Graph Engine.

The few names a user touches: ``Session``, ``Graph``, ``ops``, ``load_onnx``, ``load_tf``,
``load_model`` (an ``.om``; ``CompiledModel.save`` writes one), ``errors``.
The PyTorch front end is ``aioge.torch`` (extra ``torch``); neither it nor ``load_tf``
(extra ``tensorflow``) is imported until used.

``Session`` and the compiler, caches and runtime behind it are imported on first use
(``aioge.Session``, ``from aioge import Session``): building graphs with ``aioge.ops`` does not
pay for them (issue 17: ``import aioge`` <= 0.25 s).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from aioge import errors, ops
from aioge._version import __version__
from aioge.ir import Graph, TensorDesc

if TYPE_CHECKING:
    import os

    from aioge.plan.model import CompiledModel
    from aioge.session import Session

__all__ = ["Graph", "Session", "TensorDesc", "__version__", "errors", "load_model", "load_onnx", "load_tf", "ops"]

logging.getLogger(__name__).addHandler(logging.NullHandler())

# The subpackages ``import aioge`` loaded eagerly before Session became lazy: still reachable as
# attributes (``aioge.session.compile_graph``), imported on first access.
_ON_ACCESS = frozenset(
    {"_util", "cache", "compiler", "engines", "keys", "options", "passes", "plan", "runtime", "serving", "session"}
)


def __getattr__(name: str) -> Any:
    """``Session`` and the subpackages behind it, imported on first use (PEP 562)."""
    if name == "Session":
        from aioge.session import Session

        return Session
    if name in _ON_ACCESS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _ON_ACCESS)


def load_onnx(source: Any, **kwargs: Any) -> Graph:
    """Load an ONNX model (path, bytes or ModelProto) as an aioge Graph; see ``aioge.frontends.onnx``."""
    from aioge.frontends.onnx import load_onnx as _load

    return _load(source, **kwargs)


def load_tf(source: Any, **kwargs: Any) -> Graph:
    """Load a TensorFlow model (frozen GraphDef, SavedModel dir, .keras file, Keras model) as an aioge Graph.

    See ``aioge.frontends.tf``.

    Raises:
        ImportError: TensorFlow is not installed (``pip install 'aioge[tensorflow]'``).
    """
    from aioge.frontends.tf import load_tf as _load

    return _load(source, **kwargs)


async def load_model(path: str | os.PathLike[str]) -> CompiledModel:
    """Read a compiled model (an ``.om`` from ``aioge compile`` or ``CompiledModel.save``) in a
    worker thread; inspect it (``get_inputs()``, ``summary()``) or run it with ``Session.load_model``.

    Raises:
        ModelFormatError: the file is missing, not an ``.om``, corrupt, foreign or stale.
    """
    from aioge.plan.serialize import load_model as _load

    return await _load(path)
