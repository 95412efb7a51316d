"""The pass table, ``ge.optimizationSwitch``, the fixed point, ``aioge passes``, the bundled
examples with passes on and off, and fused ops going through tuning and the kernel cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import CompileError, OptionError
from aioge.examples import EXAMPLES
from aioge.ir.graph import Graph
from aioge.options import check_options, resolve_options
from aioge.passes import PASSES, GraphPass, manager, pass_names, run_passes
from tests.passes.switching import ALL_OFF, BASE, compare, run_switched

pytestmark = pytest.mark.anyio


def test_table_names_are_unique_documented_and_on_by_default() -> None:
    names = pass_names()
    assert len(set(names)) == len(names) == len(PASSES) >= 12
    assert all(p.name.endswith("Pass") and p.doc and isinstance(p.default, bool) for p in PASSES)
    # Clean-ups first, the elementwise fusion last (it would swallow the specific fusions' patterns).
    assert names[0] == "ConstantFoldingPass" and names[-1] == "ElementwiseFusionPass"
    assert names.index("ConvBatchNormFusionPass") < names.index("BiasAddFusionPass") < names.index("ActivationFusionPass")
    assert names.index("TransposeMatMulFusionPass") < names.index("MatMulAddFusionPass")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("NoSuchPass:on", "unknown pass 'NoSuchPass'; passes: ConstantFoldingPass, "),
        ("constantFoldingPass:off", "unknown pass 'constantFoldingPass'"),  # case-sensitive, as GE
        ("ConstantFoldingPass:OFF", "bad item 'ConstantFoldingPass:OFF'"),
        ("ConstantFoldingPass", "bad item"),
    ],
)
def test_bad_switch_is_an_option_error_listing_the_passes(value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message) as info:
        check_options({"OPTIMIZATION_SWITCH": value}, "session")
    if "unknown" in message:
        assert all(name in str(info.value) for name in pass_names())


def test_session_and_graph_switches_combine_graph_winning() -> None:
    session = check_options({"ge.optimizationSwitch": "ConstantFoldingPass:off;GeluFusionPass:off"}, "session")
    graph = check_options({"OPTIMIZATION_SWITCH": "ConstantFoldingPass:on;ElementwiseFusionPass:off"}, "graph")
    switch = resolve_options(session, graph).optimization_switch
    assert dict(switch) == {"ConstantFoldingPass": True, "GeluFusionPass": False, "ElementwiseFusionPass": False}


async def test_graph_level_switch_overrides_session_level_in_a_build() -> None:
    g = aioge.Graph("levels")
    x = g.input("x", (4,), "float32")
    g.output(ops.relu(ops.neg(x)), names=["y"])
    async with aioge.Session({**BASE, "ge.optimizationSwitch": "ElementwiseFusionPass:off"}) as s:
        await s.add_graph(1, g)
        await s.add_graph(2, g, {"ge.optimizationSwitch": "ElementwiseFusionPass:on"})
        await s.build_graph(1)
        await s.build_graph(2)
        assert [n.op_type for n in s.compiled(1).nodes] == ["Neg", "Relu"]
        assert [n.op_type for n in s.compiled(2).nodes] == ["FusedElementwise"]
        assert s.compiled(2).stats.passes_applied == ["ElementwiseFusionPass"]
        assert s.compiled(2).stats.nodes_before_passes == 2


def test_run_passes_reaches_a_fixed_point_and_reports_passes() -> None:
    from aioge.compiler.specialize import specialize

    g = aioge.Graph("fix")
    x = g.input("x", (3,), "float32")
    g.output(ops.identity(ops.exp(ops.identity(ops.neg(x)))), names=["y"])
    s = specialize(g, [("x", (3,))])
    applied = run_passes(s, {})
    assert applied == ["IdentityRemovalPass", "ElementwiseFusionPass"]
    assert [n.op_type for n in s.nodes] == ["FusedElementwise"]
    assert run_passes(s, {}) == []  # nothing left to do


def test_a_pass_that_breaks_the_graph_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def rename_output(graph: Graph) -> bool:
        graph.rename(graph.outputs[0], "renamed")
        return True

    monkeypatch.setattr(manager, "PASSES", (GraphPass("BrokenPass", True, "renames outputs", rename_output),))
    g = aioge.Graph("broken")
    x = g.input("x", (2,), "float32")
    g.output(ops.neg(x), names=["y"])
    with pytest.raises(CompileError, match=r"pass BrokenPass changed the graph outputs from \['y'\] to \['renamed'\]"):
        run_passes(g, {})


def test_cli_lists_every_pass() -> None:
    out = subprocess.run([sys.executable, "-m", "aioge", "passes"], capture_output=True, text=True, check=True, timeout=120).stdout
    lines = out.strip().splitlines()
    assert len(lines) == len(PASSES)
    for line, p in zip(lines, PASSES):
        name, default, doc = line.split(None, 2)
        assert (name, default, doc) == (p.name, "on" if p.default else "off", p.doc)


@pytest.mark.parametrize("example", sorted(EXAMPLES))
async def test_examples_have_fewer_nodes_and_the_same_outputs(example: str) -> None:
    graph, feeds, reference = EXAMPLES[example](batch=2)
    on, off, out = await compare(graph, feeds, "", ALL_OFF, rtol=1e-4, atol=1e-5)
    assert sum(on.values()) < sum(off.values())
    want = reference(feeds)
    for name in want:
        np.testing.assert_allclose(out[name], want[name], rtol=1e-4, atol=1e-5)
    if example == "mlp":
        assert on == {"FusedGemm": 2, "Gemm": 1, "Softmax": 1}
    else:
        assert on["FusedConv"] == 2 and "BatchNormalization" not in on and "Relu" not in on


async def test_fused_ops_are_tuned_and_cached_like_any_other(tmp_path: Path) -> None:
    g = aioge.Graph("tuned")
    x = g.input("x", (64, 256), "float32")
    g.output(ops.sigmoid(ops.mul(ops.tanh(x), 2.0)), names=["y"])
    feeds = {"x": np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)}
    options = {"ge.op_compiler_cache_dir": str(tmp_path), "aioge.tune_mode": "tune", "aioge.tune_budget_ms": "50"}
    async with aioge.Session(options) as s:
        await s.add_graph(1, g)
        first = await s.run_graph(1, feeds)
        (plan,) = s.compiled(1).nodes
        assert plan.op_type == "FusedElementwise" and plan.kernel.tuned
        assert plan.kernel.params["block_bytes"] in (32768, 65536, 131072)
        assert s.compiled(1).stats.kernels_compiled == 1
    assert any((tmp_path / "kernel_cache").rglob("*fusedelementwise*"))
    async with aioge.Session(options) as s:
        await s.add_graph(1, g)
        again = await s.run_graph(1, feeds)
        assert s.compiled(1).stats.kernel_cache_hits == 1
    np.testing.assert_array_equal(first["y"], again["y"])
    model, _ = await run_switched(g, feeds, ALL_OFF)
    assert len(model.nodes) == 3
