"""Nothing decoded from disk is ever executed: no module of aioge may use pickle, marshal,
shelve, dill, exec, eval, compile, __import__ or numpy's allow_pickle=True (an AST scan)."""

from __future__ import annotations

import ast
from pathlib import Path

import aioge

SRC = Path(aioge.__file__).resolve().parent
BANNED_MODULES = frozenset({"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"})
BANNED_CALLS = frozenset({"exec", "eval", "compile", "__import__"})


def _findings(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    _scan(tree, frozenset(_module_bindings(tree)), out)
    return sorted(out)


def _module_bindings(tree: ast.AST) -> set[str]:
    """Names a module binds at its top level (a module-level ``compile = ...`` shadows the builtin)."""
    names: set[str] = set()
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _scan(node: ast.AST, shadowed: frozenset[str], out: list[tuple[int, str]]) -> None:
    """Walk ``node``; a banned builtin name counts unless an enclosing function binds it (an argument)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        shadowed = shadowed | {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}
    if isinstance(node, ast.Import):
        out += [(node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
    elif isinstance(node, ast.ImportFrom):
        if (node.module or "").split(".")[0] in BANNED_MODULES:
            out.append((node.lineno, f"from {node.module} import ..."))
    elif isinstance(node, ast.Name) and node.id in BANNED_CALLS and node.id not in shadowed and isinstance(node.ctx, ast.Load):
        out.append((node.lineno, f"use of {node.id}"))  # called or passed around: both count
    elif (
        isinstance(node, ast.Attribute)
        and node.attr in BANNED_CALLS
        and isinstance(node.value, ast.Name)
        and node.value.id == "builtins"
    ):
        out.append((node.lineno, f"builtins.{node.attr}"))
    elif isinstance(node, ast.Call):
        for kw in node.keywords:
            if kw.arg == "allow_pickle" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                out.append((node.lineno, "allow_pickle not False"))
    for child in ast.iter_child_nodes(node):
        _scan(child, shadowed, out)


def test_the_scanner_finds_each_banned_use() -> None:
    sample = "\n".join(
        [
            "import pickle",
            "from marshal import loads",
            "import shelve as s",
            "import dill.source",
            "exec('1')",
            "eval('1')",
            "compile('1', 'f', 'exec')",
            "__import__('os')",
            "f = eval",
            "import numpy as np",
            "np.load('x', allow_pickle=True)",
            "np.load('x', allow_pickle=flag)",
            "builtins.exec('1')",
            "np.load('x', allow_pickle=False)",
            "re.compile('x')",
            "def f(compile):\n    return compile()",
        ]
    )
    lines = sorted({line for line, _ in _findings(ast.parse(sample))})
    assert lines == [*range(1, 10), 11, 12, 13], lines  # the rest is fine: re.compile and a parameter are not the builtin


def test_no_module_of_aioge_can_execute_what_it_reads() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50  # the whole package, not an empty dir
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{path.relative_to(SRC.parent)}:{line}: {what}" for line, what in _findings(tree)]
    assert not found, "code that could execute decoded data:\n" + "\n".join(found)
