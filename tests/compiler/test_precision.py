"""GE's precision modes (issue 39): the options and their errors, which node each mode lowers
(mixed lists, GE's gray rule, modify_mixlist, keep_dtype), the keys, and what a lowered
graph computes: float32 accumulation of operands rounded to bf16 / fp16."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.compiler.graph import optimised_graph
from aioge.compiler.ops import kernel_jobs
from aioge.compiler.precision import read_mixlist
from aioge.engines.assign import assign_engines
from aioge.errors import OptionError
from aioge.keys import graph_match_key
from aioge.options import check_options, resolve_options

RNG = np.random.default_rng(39)
W1 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
W2 = RNG.standard_normal((144, 16)).astype(np.float32)
W3 = RNG.standard_normal((24, 16)).astype(np.float32)
BIAS = RNG.standard_normal(16).astype(np.float32)
SIG = [("im", (1, 3, 8, 8)), ("x", (6, 24))]
_NP = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def _graph() -> aioge.Graph:
    """im -> Conv (white) -> Abs (gray) -> Reshape (gray) -> MatMul+bias; x -> Softmax (black) -> MatMul."""
    g = aioge.Graph("prec")
    im, x = g.input("im", SIG[0][1]), g.input("x", SIG[1][1])
    c = ops.abs(ops.conv2d(im, g.constant(W1), name="conv"), name="abs")
    r = ops.reshape(c, g.constant(np.array([1, 144], np.int64)), name="flat")
    y1 = ops.add(ops.matmul(r, g.constant(W2), name="mm_conv"), g.constant(BIAS))
    y2 = ops.matmul(ops.softmax(x, name="sm"), g.constant(W3), name="mm_sm")
    g.output(y1, names=["y1"])
    g.output(y2, names=["y2"])
    return g


def _placed(**options: str) -> dict[str, str]:
    """op type (the fused form the passes leave) of each lowered node by its input's producer op."""
    g = optimised_graph(_graph(), SIG, resolve_options(check_options(options, "session")))
    out = {}
    for n in g.nodes:
        if "precision" in n.attrs:
            src = n.inputs[0].producer if n.inputs[0] is not None else None  # type: ignore[union-attr]
            out[f"{n.op_type}<-{src.op_type if src is not None else 'input'}"] = str(n.attrs["precision"])
    return out


def test_each_mode_lowers_the_matrix_ops_it_names() -> None:
    assert _placed() == {} == _placed(**{"ge.exec.precision_mode": "must_keep_origin_dtype"})
    assert _placed(**{"ge.exec.precision_mode_v2": "origin"}) == {}
    everything = {"Conv<-input", "Gemm<-Reshape", "MatMul<-Softmax"}
    for mode, want in [
        ("allow_fp32_to_bf16", "bf16"),
        ("allow_fp32_to_fp16", "fp16"),
        ("force_fp16", "fp16"),
        ("force_fp32", "fp16"),
    ]:
        got = _placed(**{"ge.exec.precision_mode": mode})
        assert set(got) == everything and set(got.values()) == {want}, mode
    assert _placed(PRECISION_MODE_V2="cube_fp16in_fp32out") == dict.fromkeys(everything, "fp16")
    # mixed: every matrix op is on the white list; Softmax (black) does not change a white op
    assert _placed(**{"ge.exec.precision_mode": "allow_mix_precision_bf16"}) == dict.fromkeys(everything, "bf16")


def test_mixed_modes_gray_ops_follow_their_producer_and_the_mixlist_moves_types(tmp_path: Path) -> None:
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"gray-list": {"to-add": ["MatMul", "Gemm"]}}))
    got = _placed(**{"ge.exec.precision_mode_v2": "mixed_float16", "ge.exec.modify_mixlist": str(mix)})
    # the Gemm after Conv -> Abs -> Reshape (gray ops following the white Conv) is fp16; after Softmax (black), float32
    assert got == {"Conv<-input": "fp16", "Gemm<-Reshape": "fp16"}
    mix.write_text(json.dumps({"black-list": {"to-add": ["Conv"]}, "gray-list": {"to-add": ["Gemm"]}}))
    got = _placed(**{"ge.exec.precision_mode": "allow_mix_precision", "ge.exec.modify_mixlist": str(mix)})
    assert got == {"MatMul<-Softmax": "fp16"}, "a black Conv makes the gray chain after it float32; MatMul stays white"
    mix.write_text(json.dumps({"white-list": {"to-remove": ["Gemm"]}}))
    got = _placed(**{"ge.exec.precision_mode": "allow_mix_precision_fp16", "ge.exec.modify_mixlist": str(mix)})
    assert got == {"Conv<-input": "fp16", "Gemm<-Reshape": "fp16", "MatMul<-Softmax": "fp16"}, "Gemm, now gray, follows"


def test_keep_dtype_keeps_named_nodes_and_op_types_float32(tmp_path: Path) -> None:
    keep = tmp_path / "keep.cfg"
    keep.write_text("# kept\nconv\n")
    got = _placed(**{"ge.exec.precision_mode": "allow_fp32_to_bf16", "ge.keep_dtype": str(keep)})
    assert got == {"Gemm<-Reshape": "bf16", "MatMul<-Softmax": "bf16"}
    keep.write_text("OpType::MatMul\n")  # op types are the compiled nodes' (MatMul + Add became a Gemm)
    got = _placed(**{"ge.exec.precision_mode": "allow_fp32_to_bf16", "ge.keep_dtype": str(keep)})
    assert got == {"Conv<-input": "bf16", "Gemm<-Reshape": "bf16"}
    keep.write_text("OpType::Gemm\nOpType::Conv\n")
    got = _placed(**{"ge.exec.precision_mode": "allow_fp32_to_bf16", "ge.keep_dtype": str(keep)})
    assert got == {"MatMul<-Softmax": "bf16"}
    keep.write_text("Op::Conv\n")
    with pytest.raises(OptionError, match=r"keep\.cfg.*line 1 'Op::Conv': expected a node name or OpType::"):
        _placed(**{"ge.exec.precision_mode": "allow_fp32_to_bf16", "ge.keep_dtype": str(keep)})


def test_bad_modes_malformed_mixlists_and_both_options_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"'fp32'.*ge\.exec\.precision_mode.*allow_fp32_to_bf16"):
        check_options({"ge.exec.precision_mode": "fp32"}, "session")
    with pytest.raises(OptionError, match="HiFloat8"):
        check_options({"PRECISION_MODE_V2": "mixed_hif8"}, "graph")
    with pytest.raises(OptionError, match="exclude each other"):
        resolve_options({"ge.exec.precision_mode": "force_fp16"}, {"ge.exec.precision_mode_v2": "fp16"})
    mix = tmp_path / "mix.json"
    for text, what in [
        ("{white-list: []}", "not JSON"),
        ('["MatMul"]', "got a list"),
        ('{"allow-list": {"to-add": ["MatMul"]}}', "'allow-list' is not one of white-list, black-list, gray-list"),
        ('{"white-list": {"add": ["MatMul"]}}', 'must hold only "to-add" and "to-remove"'),
        ('{"white-list": {"to-add": "MatMul"}}', "must be a list of op type strings"),
    ]:
        mix.write_text(text)
        with pytest.raises(OptionError, match="mix.json") as err:
            read_mixlist(str(mix))
        assert what in str(err.value) and "to-add" in str(err.value), text
    with pytest.raises(OptionError, match="a readable file"):
        resolve_options({"ge.exec.modify_mixlist": str(tmp_path / "absent.json")})


def test_the_mode_and_the_mixlist_content_are_in_the_graph_and_kernel_keys(tmp_path: Path) -> None:
    def match(**options: str) -> dict:
        return graph_match_key("f" * 64, SIG, resolve_options(check_options(options, "session")).raw, native="avx2")

    modes = [{}, {"ge.exec.precision_mode": "allow_fp32_to_bf16"}, {"ge.exec.precision_mode": "allow_fp32_to_fp16"}]
    keys = [match(**m) for m in modes]
    assert all(a != b for i, a in enumerate(keys) for b in keys[i + 1 :])
    mix = tmp_path / "mix.json"
    mix.write_text('{"gray-list": {"to-add": ["MatMul"]}}')
    before = match(**{"ge.exec.precision_mode": "allow_mix_precision", "ge.exec.modify_mixlist": str(mix)})
    mix.write_text('{"gray-list": {"to-add": ["Gemm"]}}')
    assert match(**{"ge.exec.precision_mode": "allow_mix_precision", "ge.exec.modify_mixlist": str(mix)}) != before

    def kernel_keys(**options: str) -> dict[str, str]:
        opts = resolve_options(check_options(options, "session"))
        g = optimised_graph(_graph(), SIG, opts)
        return {f"{j.node.op_type}:{j.node.name}": j.key for j in kernel_jobs(g, assign_engines(g, opts.exclude_engines), opts)}

    f32, bf16, fp16 = (kernel_keys(**m) for m in modes)
    assert f32.keys() == bf16.keys() == fp16.keys()
    for name in f32:
        lowered = name.startswith(("Conv", "Gemm", "MatMul"))
        assert (f32[name] != bf16[name] != fp16[name] != f32[name]) if lowered else (f32[name] == bf16[name] == fp16[name]), name


def _ref(a: np.ndarray, b: np.ndarray, precision: str) -> np.ndarray:
    """float64 product of the operands rounded to ``precision`` (what float32 accumulation approximates)."""
    r = _NP[precision]
    return a.astype(r).astype(np.float64) @ b.astype(r).astype(np.float64)


def _matmul_graph(x_shape: tuple[int, ...], w: np.ndarray, conv: bool = False) -> aioge.Graph:
    g = aioge.Graph("mm")
    x = g.input("x", x_shape)
    g.output(ops.conv2d(x, g.constant(w), pads=[1, 1, 1, 1]) if conv else ops.matmul(x, g.constant(w)), names=["y"])
    return g


@pytest.mark.anyio
async def test_a_lowered_graph_computes_rounded_operands_with_float32_accumulation(tmp_path: Path) -> None:
    im = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    x = RNG.standard_normal((6, 24)).astype(np.float32)
    x3 = RNG.standard_normal((2, 5, 24)).astype(np.float32)
    feeds = {"im": im, "x": x}
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph())
        await s.add_graph(2, _graph(), {"ge.exec.precision_mode": "must_keep_origin_dtype"})
        await s.add_graph(3, _graph(), {"ge.exec.precision_mode": "allow_fp32_to_bf16"})
        base, same = await s.run_graph(1, feeds), await s.run_graph(2, feeds)
        trace = tmp_path / "t.json"
        low = await s.run_graph(3, feeds, trace=trace)
        model = s.compiled(3)
        for i, p in enumerate(("bf16", "fp16")):
            mode = {"ge.exec.precision_mode": "allow_fp32_to_bf16"} if p == "bf16" else {"ge.exec.precision_mode_v2": "fp16"}
            await s.add_graph(10 + i, _matmul_graph(x3.shape, W3), mode)
            await s.add_graph(20 + i, _matmul_graph(im.shape, W1, conv=True), mode)
            y = (await s.run_graph(10 + i, {"x": x3}))["y"]
            want = _ref(x3, W3, p)
            assert np.all(np.abs(y - want) <= 24 * 2.0**-23 * (np.abs(x3) @ np.abs(W3))), p
            assert np.abs(y - x3 @ W3).max() > 1e-4, f"{p} really rounds"
            yc = (await s.run_graph(20 + i, {"x": im}))["y"]
            r = _NP[p]
            await s.add_graph(30 + i, _matmul_graph(im.shape, W1.astype(r).astype(np.float32), conv=True))
            ref = await s.run_graph(30 + i, {"x": im.astype(r).astype(np.float32)})  # float32 conv of rounded operands
            np.testing.assert_allclose(yc, ref["y"], rtol=1e-5, atol=1e-5)
    for name in base:
        assert np.array_equal(base[name], same[name]), "the default mode is today's float32, bit for bit"
        assert np.allclose(low[name], base[name], rtol=0.05, atol=0.2) and not np.array_equal(low[name], base[name])
    assert model.summary()["precision"]["bf16"] == 3
    spans = {e["name"]: e["args"]["precision"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"}
    assert sorted(spans.values()).count("bf16") == 3 and "float32" in spans.values()


def test_aioge_info_names_the_precision_of_the_nodes(tmp_path: Path) -> None:
    src = tmp_path / "g.py"
    src.write_text(
        "import numpy as np, aioge\nfrom aioge import ops\n"
        "def build():\n    g = aioge.Graph('t')\n    x = g.input('x', (4, 8))\n"
        "    g.output(ops.tanh(ops.matmul(x, g.constant(np.ones((8, 8), np.float32)))), names=['y'])\n    return g\n"
    )
    om = tmp_path / "g.om"
    cli = [sys.executable, "-m", "aioge"]
    done = subprocess.run(
        [*cli, "compile", str(src), "--precision-mode", "allow_fp32_to_fp16", "-o", str(om)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    info = subprocess.run([*cli, "info", str(om)], capture_output=True, text=True)
    assert "precision (allow_fp32_to_fp16): {'fp16': 1}" in info.stdout, info.stdout
    bad = subprocess.run([*cli, "compile", str(src), "--precision-mode", "fp8", "-o", str(om)], capture_output=True, text=True)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "allow_fp32_to_bf16" in bad.stderr


@pytest.mark.anyio
async def test_the_graph_cache_serves_a_lowered_graph_only_to_its_mode_and_mixlist(tmp_path: Path) -> None:
    mix = tmp_path / "mix.json"
    mix.write_text('{"gray-list": {"to-add": ["Conv"]}}')
    x = RNG.standard_normal((2, 5, 24)).astype(np.float32)

    async def build(**graph: str) -> tuple[bool, np.ndarray]:
        opts = {"ge.graph_compiler_cache_dir": str(tmp_path), "aioge.tune_mode": "heuristic"}
        async with aioge.Session(opts) as s:
            await s.add_graph(1, _matmul_graph(x.shape, W3), {"ge.graph_key": "prec", **graph})
            hit = (await s.build_graph(1)).stats.graph_cache_hit
            return hit, (await s.run_graph(1, {"x": x}))["y"]

    bf16 = {"ge.exec.precision_mode": "allow_mix_precision_bf16", "ge.exec.modify_mixlist": str(mix)}
    first, y_bf16 = await build(**bf16)
    again, y_again = await build(**bf16)
    assert not first and again and np.array_equal(y_bf16, y_again), "a lowered .om loads and runs as compiled"
    hit, y32 = await build()
    assert not hit and not np.array_equal(y32, y_bf16), "served to float32"
    mix.write_text('{"gray-list": {"to-add": ["MatMul"]}}')  # the MatMul after an input is gray: float32
    hit, y_mixed = await build(**bf16)
    assert not hit and np.array_equal(y_mixed, y32), "a changed mixlist file was served the old placement"


@pytest.mark.anyio
async def test_without_the_compiled_tier_a_lowered_graph_computes_the_same_numbers(numpy_kernels: None) -> None:
    x = RNG.standard_normal((3, 24)).astype(np.float32)
    async with aioge.Session({"aioge.tune_mode": "heuristic", "ge.exec.precision_mode": "allow_mix_precision_fp16"}) as s:
        await s.add_graph(1, _matmul_graph(x.shape, W3))
        y = (await s.run_graph(1, {"x": x}))["y"]
    assert np.all(np.abs(y - _ref(x, W3, "fp16")) <= 24 * 2.0**-23 * (np.abs(x) @ np.abs(W3)))
