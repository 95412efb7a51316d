"""tests/import_arrows.py: the package -> package import picture issue 21 reports."""

from __future__ import annotations

from pathlib import Path

from tests.import_arrows import import_arrows


def test_arrows_count_top_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    root = tmp_path / "aioge"
    (root / "a").mkdir(parents=True)
    (root / "__init__.py").write_text("__version__ = '0'\nfrom aioge import a\n")
    (root / "a" / "__init__.py").write_text("from .x import f\n")
    (root / "a" / "x.py").write_text("import numpy\nfrom aioge.b import y\n\ndef f():\n    from aioge import c, __version__\n")
    (root / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..aioge.a import x\ny = 1\n")
    (root / "c.py").write_text("from . import b\nfrom .a.x import f\n")
    arrows = {k: dict(v) for k, v in import_arrows(root).items()}
    assert arrows == {
        ("aioge", "aioge.a"): {"top": 1},
        ("aioge.a", "aioge.b"): {"top": 1},
        ("aioge.a", "aioge.c"): {"lazy": 1},
        ("aioge.a", "aioge"): {"lazy": 1},
        ("aioge.b", "aioge.a"): {"typing": 1},
        ("aioge.c", "aioge.b"): {"top": 1},
        ("aioge.c", "aioge.a"): {"top": 1},
    }


def test_the_real_tree_has_arrows() -> None:
    arrows = import_arrows()
    assert ("aioge.session", "aioge.runtime") in arrows and len(arrows) > 20
