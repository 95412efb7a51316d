"""The lower floors import only downward: ir <- kernels <- ops <- passes (checked on the source)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aioge

SRC = Path(aioge.__file__).parent

# floor -> the aioge packages and modules it may import (itself included), lazily or not.
ALLOWED = {
    "ir": {"aioge.errors", "aioge.ir"},
    "kernels": {"aioge.errors", "aioge.ir", "aioge.kernels"},
}


def _imports(path: Path) -> set[str]:
    module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.add(target)
            if target == "aioge":  # from aioge import ops
                out.update(f"aioge.{a.name}" for a in node.names)
    return {m for m in out if m == "aioge" or m.startswith("aioge.")}


def _allowed(name: str, allowed: set[str]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("floor", sorted(ALLOWED))
def test_floor_imports_nothing_above_it(floor: str) -> None:
    bad = {}
    for path in sorted((SRC / floor).rglob("*.py")):
        wrong = sorted(m for m in _imports(path) if m != "aioge" and not _allowed(m, ALLOWED[floor]))
        if wrong:
            bad[str(path.relative_to(SRC))] = wrong
    assert not bad, f"{floor} imports above its floor: {bad}"


def test_passes_reach_kernels_only_through_the_op_floor() -> None:
    bad = {str(p.relative_to(SRC)): sorted(m for m in _imports(p) if m.startswith("aioge.kernels")) for p in (SRC / "passes").rglob("*.py")}
    assert not {k: v for k, v in bad.items() if v}
