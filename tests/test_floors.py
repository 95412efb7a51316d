"""Which floor may import which (issue 21; docs/ARCHITECTURE.md, "Floors").

The packages of aioge (the first level under ``aioge``: ``aioge.ir``, ``aioge.session``, ...)
stand on floors, bottom up. A floor imports only floors below it: top-level imports, lazy
ones inside functions and ``if TYPE_CHECKING`` ones alike (a type-only arrow upward is
still a cycle a reader and mypy must follow). Two packages on the same floor do not import
each other, except for the arrows ``SIDEWAYS`` names with their reason. A new package must be
placed on a floor before it can import anything. Checked on the source with ast (nothing
imported), so it also fails on an import that no test executes.

- ``errors``, ``_util`` (single-flight, the event-loop backend) and ``_version``: leaves, import nothing of aioge;
- ``ir``: tensor descs, values, nodes, graphs;
- ``kernels``: numpy implementations and their contract (``kernels/contract.py``, which also
  holds the ``Engine`` kind that every op schema names);
- ``ops``: the op schemas and the typed builders;
- ``frontends``, ``passes``, ``engines`` (the selection rule), ``examples`` (builder graphs);
- ``options``: the option table; it names engines and passes, and every compile-shaping
  floor above reads it (``keys`` puts the compile-shaping options into keys);
- ``keys``, then ``plan`` (plans as data, their codec and the .om format; plans carry keys);
- ``cache`` (stores and loads by key) and ``compiler`` (plans) side by side;
- ``runtime``: binds plans and runs them, never plans;
- ``serving``: the served model (gears, padding, batch sizes, the dynamic batcher), between the
  runtime it runs on and the session that holds it;
- ``session``; then the package root ``aioge/__init__.py``, the public face that re-exports it;
- ``torch`` (``aioge.torch``, above the root: it is a user of the public face), ``server``
  (``aioge serve``), ``distributed`` (batch compile on Dask) and ``benchmarks`` (measures the
  public face against onnxruntime), with ``ray`` (``aioge.ray``: the server's app on Ray Serve) between;
- ``cli`` (``aioge bench`` runs the benchmarks), then ``__main__``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_arrows import SRC, module_imports

# Bottom up. "aioge" is the package root (aioge/__init__.py).
FLOORS: list[set[str]] = [
    {"errors", "_util", "_version"},
    {"ir"},
    {"kernels"},
    {"ops"},
    {"frontends", "passes", "engines", "examples"},
    {"options"},
    {"keys"},
    {"plan"},
    {"cache", "compiler"},
    {"runtime"},
    {"serving"},
    {"session"},
    {"aioge"},
    {"torch", "server", "distributed"},
    {"ray"},
    {"benchmarks"},
    {"cli"},
    {"__main__"},
]

# (importer, imported) on one floor -> the only modules of the importer allowed to do it, and why.
SIDEWAYS: dict[tuple[str, str], tuple[set[str], str]] = {
    ("compiler", "cache"): ({"aioge.compiler.cached"}, "load-or-compile: the compiler reaches the cache in one module"),
}

# Narrower than the floor: what these packages may import, of everything below them.
NARROWER: dict[str, tuple[set[str], str]] = {
    "cache": ({"plan", "keys", "errors", "_util"}, "the cache stores and loads by key; it never interprets a graph"),
    "runtime": ({"plan", "ir", "ops", "kernels", "errors", "_util"}, "the runtime binds plans; it never plans nor reads options"),
    "plan": (
        {"errors", "_util", "ir", "keys", "ops", "kernels", "engines"},
        "plans are data; an .om checks its kernels against the op schemas",
    ),
    "keys": ({"ir", "options", "_version"}, "keys are built from named parts"),
    "passes": ({"errors", "ir", "ops"}, "passes reach kernels only through the op floor"),
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "aioge"


def floor_violations(root: Path = SRC) -> list[str]:
    """Every import under ``root`` (an ``aioge`` source dir) that breaks FLOORS, SIDEWAYS or NARROWER."""
    level = {pkg: i for i, floor in enumerate(FLOORS) for pkg in floor}
    bad = []
    for path, module, line, target, kind in module_imports(root):
        a, b = _package(module), _package(target)
        where = f"{path.relative_to(root)}:{line} imports {target} ({kind})"
        if a == b:
            continue
        if a not in level or b not in level:
            bad.append(f"{where}: {a if a not in level else b!r} is on no floor (add it to FLOORS)")
        elif level[b] > level[a]:
            bad.append(f"{where}: {b} is above {a}")
        elif level[b] == level[a] and module not in SIDEWAYS.get((a, b), (set(), ""))[0]:
            bad.append(f"{where}: {b} is beside {a} on one floor")
        elif a in NARROWER and level[b] < level[a] and b not in NARROWER[a][0]:
            bad.append(f"{where}: {a} may import only {sorted(NARROWER[a][0])} ({NARROWER[a][1]})")
    return bad


def test_every_floor_imports_only_floors_below_it() -> None:
    assert not floor_violations(), "\n".join(floor_violations())


def test_every_package_is_on_exactly_one_floor() -> None:
    placed = [pkg for floor in FLOORS for pkg in floor]
    assert len(placed) == len(set(placed))
    present = {
        p.stem if p.is_file() else p.name
        for p in SRC.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"
    }
    present = {"aioge" if p == "__init__" else p for p in present}
    assert present == set(placed)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "aioge"
    for pkg in {pkg for floor in FLOORS for pkg in floor} - {
        "aioge",
        "__main__",
        "torch",
        "errors",
        "_version",
        "keys",
        "options",
        "session",
        "cli",
    }:
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    for name, text in {"__init__.py": "", "errors.py": "", "session.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("ir/graph.py", "from aioge.ops import add\n", "ops is above ir"),
        ("ir/graph.py", "def f():\n    from aioge import session\n", "session is above ir"),  # lazy
        (
            "ir/graph.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..compiler import x\n",
            "compiler is above ir",
        ),
        ("kernels/nn.py", "from aioge import Session\n", "aioge is above kernels"),  # the package root
        ("ops/schema.py", "from aioge.engines import Engine\n", "engines is above ops"),  # issue 21's ops <-> engines
        ("compiler/graph.py", "from aioge.cache import graph_cache\n", "cache is beside compiler"),
        ("cache/graph_cache.py", "from aioge.ir import Graph\n", "cache may import only"),
        ("ir/new.py", "from aioge.newfloor import thing\n", "'newfloor' is on no floor"),
    ],
)
def test_an_upward_import_fails_the_check(tmp_path: Path, name: str, text: str, expected: str) -> None:
    assert not floor_violations(_tree(tmp_path, {}))
    bad = floor_violations(_tree(tmp_path, {name: text}))
    assert len(bad) == 1 and expected in bad[0] and bad[0].startswith(name), bad


def test_downward_and_allowed_sideways_imports_pass(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "compiler/cached.py": "from aioge.cache import graph_cache\nfrom aioge import ops, errors\n",
            "session.py": "from aioge.runtime import bind\nfrom .compiler import cached\n",
            "cli.py": "def main():\n    from aioge import Session, benchmarks\n",
        },
    )
    assert floor_violations(root) == []
