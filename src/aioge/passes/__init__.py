"""Graph optimisation passes, switched by ``ge.optimizationSwitch``.

Each pass has a stable name (matched exactly, case-sensitive, as in GE), a default, a
one-line description and a function ``run(graph) -> bool`` that edits the graph through its
methods and says whether it changed anything. ``PASSES`` is the fixed order they run in.
"""

from __future__ import annotations

from aioge.passes.manager import PASSES, GraphPass, pass_names, run_passes

__all__ = ["PASSES", "GraphPass", "pass_names", "run_passes"]
