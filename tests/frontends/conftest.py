"""Reports skip-list entries of the ONNX suites that now pass, so the skip files can be pruned."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    passed = [r.nodeid for r in terminalreporter.stats.get("xpassed", []) if "/frontends/test_onnx_" in r.nodeid]
    if not passed:
        return
    terminalreporter.section("ONNX skip-list entries that now pass (remove them, or run regen_onnx_skips)")
    for nodeid in passed:
        terminalreporter.line(nodeid.split("[", 1)[-1].rstrip("]"))
