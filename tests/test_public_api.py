"""The public surface: every module says what it exports, and aioge.ops is the op registry.

As anyio does: ``__all__`` is the documentation of a module's names, so it must exist and
name only what is there; ``aioge.ops`` must offer one builder per registered op schema.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

import aioge
from aioge import ops
from aioge.ops.registry import REGISTRY, builder_name

# Run as scripts (``python -m``), not imported: they have no names to export.
_SCRIPTS = {"aioge.benchmarks.child"}
# Compiled: empty modules whose C functions aioge.kernels.native calls through ctypes (one per ISA
# tier; a tier above this CPU's must not even be imported).
_COMPILED = {"aioge.kernels._native", "aioge.kernels._native_avx2", "aioge.kernels._native_avx512"}
# protoc's output (the gRPC front's messages, regenerated from kserve.proto): names from a descriptor.
_GENERATED = {"aioge.serving.kserve_pb2"}
_MODULES = ["aioge"] + sorted(
    m.name
    for m in pkgutil.walk_packages(aioge.__path__, "aioge.")
    if not m.name.endswith("__main__") and m.name not in _SCRIPTS | _COMPILED | _GENERATED
)
# Builder names that stand for another op's builder (kept for the GE/PyTorch spelling).
_ALIASES = {"conv": "conv2d"}


def test_the_walk_finds_the_packages() -> None:
    """The module list is not silently empty or partial (a broken walk would pass every test below)."""
    for name in (
        "aioge.errors",
        "aioge.options",
        "aioge.session",
        "aioge.ops",
        "aioge.ir.graph",
        "aioge.kernels.conv",
        "aioge.plan.io",
    ):
        assert name in _MODULES
    assert len(_MODULES) > 100


@pytest.mark.parametrize("name", _MODULES)
def test_module_defines_all_of_existing_names(name: str) -> None:
    module = importlib.import_module(name)
    names = getattr(module, "__all__", None)
    assert isinstance(names, list), f"{name} has no __all__ list"
    assert all(isinstance(n, str) for n in names), names
    assert len(names) == len(set(names)), f"{name}.__all__ repeats a name"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names {missing}, which the module does not have"


def test_top_level_exports_the_few_names_a_user_touches() -> None:
    assert set(aioge.__all__) == {
        "Graph",
        "Session",
        "TensorDesc",
        "__version__",
        "errors",
        "load_model",
        "load_onnx",
        "load_tf",
        "ops",
    }


def test_every_error_class_is_exported_from_errors() -> None:
    from aioge import errors

    classes = {
        n for n, o in vars(errors).items() if inspect.isclass(o) and issubclass(o, Exception) and o.__module__ == errors.__name__
    }
    assert classes and classes <= set(errors.__all__), sorted(classes - set(errors.__all__))


def _builders() -> set[str]:
    """The builders aioge.ops exports: its __all__ less the general functions."""
    return set(ops.__all__) - {"apply", "infer_node", "schemas"}


def test_ops_offers_one_builder_per_registered_schema() -> None:
    expected = {builder_name(s): s for s in REGISTRY.values()}
    assert len(expected) == len(REGISTRY), "two schemas share a builder name"
    assert _builders() == set(expected) | set(_ALIASES)
    for name, schema in expected.items():
        fn = getattr(ops, name)
        # A family submodule (aioge.ops.shape, .conv) must never shadow the builder of that name.
        assert isinstance(fn, types.FunctionType), f"aioge.ops.{name} is {type(fn).__name__}, not a builder"
        assert fn.__name__ == name and fn.__doc__ is not None and fn.__doc__.startswith(f"{schema.name}:"), (name, fn.__doc__)
    for alias, target in _ALIASES.items():
        assert getattr(ops, alias) is getattr(ops, target)


def test_ops_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_op"):
        ops.no_such_op  # noqa: B018
