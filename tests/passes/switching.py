"""Run one graph under different ``ge.optimizationSwitch`` settings and compare.

Used by every pass test: a pass is numerically equivalent when the outputs with it on and
off agree to the stated tolerance, and it does its job when the compiled node list shows
its pattern gone with it on and back with it off.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

import numpy as np

import aioge
from aioge.passes import pass_names
from aioge.plan.model import CompiledModel

# Timing is not the point of these tests, and they must not write kernel caches in $HOME.
BASE = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}
ALL_OFF = ";".join(f"{n}:off" for n in pass_names())


def only(*names: str) -> str:
    """A switch with every pass off except ``names``."""
    return ";".join(f"{n}:{'on' if n in names else 'off'}" for n in pass_names())


def without(*names: str) -> str:
    """A switch with the defaults except ``names``, which are off."""
    return ";".join(f"{n}:off" for n in names)


async def run_switched(
    graph: aioge.Graph, feeds: Mapping[str, np.ndarray], switch: str = ""
) -> tuple[CompiledModel, dict[str, np.ndarray]]:
    """Build and run ``graph`` under ``switch``; returns the compiled model and the outputs."""
    options = dict(BASE)
    if switch:
        options["ge.optimizationSwitch"] = switch
    async with aioge.Session(options) as s:
        await s.add_graph(1, graph)
        out = await s.run_graph(1, feeds)
        return s.compiled(1), out


def op_counts(model: CompiledModel) -> Counter[str]:
    return Counter(n.op_type for n in model.nodes)


async def compare(
    graph: aioge.Graph, feeds: Mapping[str, np.ndarray], on: str, off: str, *, rtol: float, atol: float
) -> tuple[Counter[str], Counter[str], dict[str, np.ndarray]]:
    """Run under ``on`` and ``off``, assert the outputs agree; return both op counts and the
    ``on`` outputs."""
    m_on, out_on = await run_switched(graph, feeds, on)
    m_off, out_off = await run_switched(graph, feeds, off)
    assert out_on.keys() == out_off.keys()
    for name in out_on:
        assert out_on[name].shape == out_off[name].shape and out_on[name].dtype == out_off[name].dtype, name
        np.testing.assert_allclose(out_on[name], out_off[name], rtol=rtol, atol=atol, err_msg=name)
    return op_counts(m_on), op_counts(m_off), out_on
