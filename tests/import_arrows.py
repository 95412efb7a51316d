"""Package -> package import arrows of src/aioge, read with ast (nothing is imported).

``python -m tests.import_arrows [SRC_DIR]`` prints one line per arrow with its count of import
statements, and how many of them are lazy (inside a function) or TYPE_CHECKING-only. A
package is the first level under aioge (``aioge.compiler``, ``aioge.session``, ...). It is the
before/after picture of issue 21, and the base of an import-direction check once the floors
exist.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterator

SRC = Path(__file__).resolve().parent.parent / "src" / "aioge"


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, root: Path) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target == "aioge":  # from aioge import ops (a package) / __version__, Session (names)
        return [
            f"aioge.{a.name}" if (root / a.name).is_dir() or (root / f"{a.name}.py").exists() else "aioge" for a in node.names
        ]
    return [target]


def module_imports(root: Path = SRC) -> Iterator[tuple[Path, str, int, str, str]]:
    """``(path, module, line, target, kind)`` for every aioge import in every .py under ``root``;
    ``kind`` is ``top``, ``lazy`` (inside a function) or ``typing`` (under ``if TYPE_CHECKING``)."""
    for path in sorted(root.rglob("*.py")):
        module = _module(path, root)
        found: list[tuple[Path, str, int, str, str]] = []

        def visit(node: ast.AST, where: str, module: str = module, is_package: bool = path.name == "__init__.py") -> None:
            for child in ast.iter_child_nodes(node):
                inner = where
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inner = "lazy"
                elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    inner = "typing"
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(child, module, is_package, root):
                        if target == "aioge" or target.startswith("aioge."):
                            found.append((path, module, child.lineno, target, inner))
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), "top")
        yield from found


def import_arrows(root: Path = SRC) -> dict[tuple[str, str], Counter[str]]:
    """``{(from_package, to_package): Counter(top=.., lazy=.., typing=..)}`` over every .py under ``root``."""
    arrows: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for _path, module, _line, target, kind in module_imports(root):
        a, b = _package(module), _package(target)
        if a != b:
            arrows[(a, b)][kind] += 1
    return dict(arrows)


def main(argv: list[str]) -> None:
    arrows = import_arrows(Path(argv[0]) if argv else SRC)
    for (a, b), kinds in sorted(arrows.items()):
        extra = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()) if k != "top")
        print(
            f"{a.removeprefix('aioge.'):12s} -> {b.removeprefix('aioge.'):12s} {sum(kinds.values()):3d}"
            + (f"  ({extra})" if extra else "")
        )
    print(f"{len(arrows)} arrows, {sum(sum(k.values()) for k in arrows.values())} import statements")


if __name__ == "__main__":
    main(sys.argv[1:])
