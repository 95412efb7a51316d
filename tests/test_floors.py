"""The floors of plan/, keys and cache/ import only what is below them (issue 21): the cache
stores and loads by key and never interprets graphs, the runtime never plans, plans are data."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aioge

ROOT = Path(aioge.__file__).parent

# package (or module) -> the aioge packages its files may import (itself always allowed)
ALLOWED = {
    "plan": {"errors", "ir", "keys", "ops", "engines"},  # ops: an .om binds and checks its kernels against the op schemas when decoded
    "keys": {"ir", "options", ""},  # "": aioge.__version__
    "cache": {"plan", "keys", "errors", "_util"},
    "_util": set(),
    "runtime": {"plan", "ir", "ops", "kernels", "errors"},
    # gears and the batcher: above the runtime and the compiler, below the session
    "serving": {"plan", "ir", "errors", "options", "compiler", "runtime"},
}


def _imports(path: Path) -> set[str]:
    """The aioge modules a file imports (relative imports resolved), without the ``aioge.`` prefix."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "aioge"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "aioge" and not node.level:
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {m.removeprefix("aioge").removeprefix(".") for m in out}


def _files(floor: str) -> list[Path]:
    return sorted((ROOT / floor).rglob("*.py")) if (ROOT / floor).is_dir() else [ROOT / f"{floor}.py"]


def _allowed(floor: str, module: str) -> bool:
    if module == floor or module.startswith(floor + "."):
        return True
    for ok in ALLOWED[floor]:
        if ok == "" and module == "__version__":
            return True
        if ok and (module == ok or module.startswith(ok + ".")):
            return True
    return False


@pytest.mark.parametrize("floor", sorted(ALLOWED))
def test_a_floor_imports_only_what_lies_below_it(floor: str) -> None:
    bad = {
        f"{path.relative_to(ROOT)} imports aioge.{module}"
        for path in _files(floor)
        for module in _imports(path)
        if not _allowed(floor, module)
    }
    assert not bad, sorted(bad)


def test_the_compiler_reaches_the_cache_only_through_compiler_cached() -> None:
    users = {path.name for path in _files("compiler") if any(m == "cache" or m.startswith("cache.") for m in _imports(path))}
    assert users == {"cached.py"}
