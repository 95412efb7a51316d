"""The pass table, ``ge.optimizationSwitch``, the fixed point, ``aioge passes``, the bundled
examples with passes on and off, and fused ops going through tuning and the kernel cache."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
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
    # QDQ fusion before folding (which would make the weights' DequantizeLinear float constants),
    # then clean-ups, the elementwise fusion last (it would swallow the specific fusions' patterns).
    quant = ("QdqFusionPass", "DynamicQuantizeMatMulFusionPass")  # before the elementwise fusion takes their Mul/Add
    assert names[:3] == (*quant, "ConstantFoldingPass") and names[-1] == "ElementwiseFusionPass"
    assert names.index("ConvBatchNormFusionPass") < names.index("BiasAddFusionPass") < names.index("ActivationFusionPass")
    assert names.index("TransposeMatMulFusionPass") < names.index("MatMulAddFusionPass")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "NoSuchPass:on",
            "unknown pass 'NoSuchPass'; passes: QdqFusionPass, DynamicQuantizeMatMulFusionPass, ConstantFoldingPass, ",
        ),
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
    out = subprocess.run(
        [sys.executable, "-m", "aioge", "passes"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
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
    elif example == "transformer":  # the 8 projections take their bias (and GELU), q @ k^T its transpose
        assert on["FusedMatMul"] == 10 and "Gelu" not in on and on["Add"] == 4 < off["Add"], on
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
        assert plan.kernel.params["block_bytes"] in (65536, 131072, 262144)
        assert s.compiled(1).stats.kernels_compiled == 1
    assert any((tmp_path / "kernel_cache").rglob("*fusedelementwise*"))
    async with aioge.Session(options) as s:
        await s.add_graph(1, g)
        again = await s.run_graph(1, feeds)
        assert s.compiled(1).stats.kernel_cache_hits == 1
    np.testing.assert_array_equal(first["y"], again["y"])
    model, _ = await run_switched(g, feeds, ALL_OFF)
    assert len(model.nodes) == 3


def _every_pattern() -> tuple[aioge.Graph, dict[str, np.ndarray]]:
    """One graph holding a pattern for every pass."""
    rng = np.random.default_rng(7)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    g = aioge.Graph("every")
    img = g.input("img", (1, 3, 8, 8), "float32")
    x = g.input("x", (4, 16), "float32")
    wt = g.input("wt", (8, 16), "float32")  # fed at run time: its Transpose cannot fold
    w = ops.constant_of_shape(g.constant(np.array([6, 3, 3, 3], np.int64)), value=np.array([0.05], np.float32))
    c = ops.conv2d(ops.identity(img), w, pads=(1, 1, 1, 1))
    c = ops.batch_normalization(c, f32(6), f32(6), f32(6), np.abs(f32(6)) + 1)
    c = ops.relu(ops.add(c, g.constant(f32(6, 1, 1))))
    c = ops.batch_normalization(c, f32(6), f32(6), f32(6), np.abs(f32(6)) + 1)  # after a Relu: cannot fold
    h = ops.add(ops.apply("MatMul", [x, ops.transpose(wt)])[0], g.constant(f32(8)))  # + bias -> Gemm
    ax = g.constant(np.array([-1], np.int64))
    d = ops.sub(h, ops.reduce_mean(h, ax))
    h = ops.div(d, ops.sqrt(ops.add(ops.reduce_mean(ops.pow(d, g.constant(np.float32(2))), ax), g.constant(np.float32(1e-5)))))
    h = ops.mul(
        ops.mul(h, ops.add(ops.erf(ops.div(h, g.constant(np.float32(np.sqrt(2))))), g.constant(np.float32(1)))),
        g.constant(np.float32(0.5)),
    )
    t = ops.mul(ops.tanh(ops.neg(h)), 3.0)
    t = ops.mul(t, ops.sigmoid(t))  # SiLU
    ops.softmax(t, axis=0)  # dead (and unlike the live ones, so common-subexpression elimination keeps it apart)
    g.output(c, ops.add(ops.softmax(t, axis=-1), ops.softmax(t, axis=-1)), names=["conv", "p"])
    return g, {"img": f32(1, 3, 8, 8), "x": f32(4, 16), "wt": f32(8, 16)}


def _programs(model) -> list[str]:  # type: ignore[no-untyped-def]
    return [op for n in model.graph.nodes if n.op_type == "FusedElementwise" for op in n.attrs["ops"]]


@pytest.mark.parametrize(
    ("name", "back"),
    [
        ("ConstantFoldingPass", lambda ops_, prog: ops_["ConstantOfShape"] == 1),
        ("IdentityRemovalPass", lambda ops_, prog: ops_["Identity"] == 1),
        ("CommonSubexpressionEliminationPass", lambda ops_, prog: ops_["Softmax"] == 2),
        ("DeadCodeEliminationPass", lambda ops_, prog: ops_["Softmax"] == 2),
        ("GeluFusionPass", lambda ops_, prog: "Erf" in prog and "Gelu" not in prog),
        ("SwishFusionPass", lambda ops_, prog: "Sigmoid" in prog and "Swish" not in prog),
        ("LayerNormFusionPass", lambda ops_, prog: ops_["ReduceMean"] == 2),
        ("ConvBatchNormFusionPass", lambda ops_, prog: ops_["Conv"] == 1 and ops_["FusedConv"] == 0),  # BN decomposed instead
        ("BatchNormDecompositionPass", lambda ops_, prog: ops_["BatchNormalization"] == 1 and "Add" not in prog),
        ("TransposeMatMulFusionPass", lambda ops_, prog: ops_["Transpose"] == 1),
        ("MatMulAddFusionPass", lambda ops_, prog: ops_["FusedMatMul"] == 1 and ops_["Gemm"] == 0),
        ("BiasAddFusionPass", lambda ops_, prog: "Add" in prog and ops_["FusedConv"] == 0),
        ("ActivationFusionPass", lambda ops_, prog: "Relu" in prog and ops_["FusedConv"] == 0),  # the Relu joins the BN chain
        ("ElementwiseFusionPass", lambda ops_, prog: ops_["Tanh"] == 1 and ops_["FusedElementwise"] == 0),
    ],
)
async def test_each_pass_switched_off_restores_its_pattern(name: str, back) -> None:  # type: ignore[no-untyped-def]
    graph, feeds = _every_pattern()
    on_model, out_on = await run_switched(graph, feeds, "")
    off_model, out_off = await run_switched(graph, feeds, f"{name}:off")
    on = Counter(n.op_type for n in on_model.nodes)
    off = Counter(n.op_type for n in off_model.nodes)
    assert on == {"FusedConv": 1, "Gemm": 1, "LayerNormalization": 1, "FusedElementwise": 2, "Softmax": 1, "Add": 1}
    assert sorted(_programs(on_model)) == sorted(["Mul", "Add", "Gelu", "Neg", "Tanh", "Mul", "Swish"])
    assert back(off, _programs(off_model)), (name, off, _programs(off_model))
    # Never fewer nodes; the same count only where the pattern hides in a fused program (Gelu)
    # or stands instead of one (a BatchNormalization instead of the FusedElementwise it joins).
    assert sum(off.values()) >= sum(on.values())
    for key in out_on:
        np.testing.assert_allclose(out_on[key], out_off[key], rtol=1e-4, atol=1e-5)
