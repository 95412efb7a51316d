"""The portable build's ISA tiers (setup.py, aioge.kernels.native.TIERS): AIOGE_ISA forces the
dispatch down, never up past the CPU, and the baseline tier computes what the default one does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aioge.errors import OptionError
from aioge.kernels import native

ROOT = Path(__file__).resolve().parents[2]


def _child(tmp_path: Path, **env: str) -> dict[str, np.ndarray]:
    out = tmp_path / f"{env.get('AIOGE_ISA', 'default')}.npz"
    cmd = [sys.executable, "-m", "tests.engines._isa_child", str(out)]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    inherited = {k: v for k, v in os.environ.items() if k != "AIOGE_ISA"}  # the default: the best tier
    subprocess.run(cmd, env={**inherited, "PYTHONPATH": path, **env}, cwd=ROOT, check=True, timeout=120)
    with np.load(out, allow_pickle=False) as saved:
        return {k: saved[k] for k in saved.files}


# the child's pool cases, every pass of pool.c: compared in the baseline and the AVX2 tier alike
POOLS = (
    "pool",
    "pool_max",
    "pool_flat",
    "pool_flat_max",
    "pool_s2",
    "pool_s2_avg",
    "pool_s2_3x3",
    "pool_s2_3x3_wide",
    "pool_s2_3x3_ceil",
    "pool_pair_wide",
    "pool_pair_wide_avg",
)


# the child's convs with their residual folded into the conv job (tests/ops/test_conv_residual.py)
RESIDUALS = ("residual_direct", "residual_direct_acc", "residual_t", "residual_winograd")


def test_the_baseline_tier_computes_what_the_default_tier_does(tmp_path):
    if not native.available():
        pytest.skip("needs the compiled tier")  # test_native.py's install test fails then
    default, baseline = _child(tmp_path), _child(tmp_path, AIOGE_ISA="baseline")
    assert "(AIOGE_ISA" not in str(default["describe"]) and "running" in str(default.pop("describe"))
    assert "running baseline (AIOGE_ISA=baseline)" in str(baseline.pop("describe"))
    assert (
        set(default)
        == set(baseline)
        == {
            "conv",
            "conv_s2",
            "pointwise",
            "pointwise_deep",
            "pointwise_t",
            "winograd",
            "depthwise",
            "depthwise_lines",
            "depthwise_planes",
            "depthwise_planes7",
            "depthwise_direct_s2",
            "gemm",
            "lowp_bf16",
            *POOLS,
            "lstm",
            "gru_bi",
            "lstm_b13",
            "softmax",
            *RESIDUALS,
        }
    )
    for name, got in baseline.items():
        # FMA (the AVX2 tier) rounds once where the baseline's multiply-add rounds twice
        np.testing.assert_allclose(got, default[name], rtol=2e-5, atol=2e-5, err_msg=name)
        assert np.abs(got).max() > 0.1, name  # not a pair of zero outputs
    if "avx512" in str(native.describe()):  # the AVX2 tier's 16-position panels and 8-lane Swish too
        avx2 = _child(tmp_path, AIOGE_ISA="avx2")
        names = (
            "conv",
            "conv_s2",
            "pointwise",
            "pointwise_deep",
            "pointwise_t",
            "winograd",
            "depthwise_lines",
            "depthwise_planes",
            "depthwise_planes7",
            "depthwise_direct_s2",
            "lowp_bf16",
            *POOLS,
            "lstm",
            "gru_bi",
            "lstm_b13",
            *RESIDUALS,
        )
        for name in names:
            np.testing.assert_allclose(avx2[name], default[name], rtol=2e-5, atol=2e-5, err_msg=name)


def _fresh(monkeypatch: pytest.MonkeyPatch, isa: str) -> object:
    monkeypatch.setenv("AIOGE_ISA", isa)
    native.lib.cache_clear()
    native.function.cache_clear()
    return native.lib()


def test_aioge_isa_never_goes_past_the_cpu_and_an_unknown_name_is_an_error(monkeypatch):
    if not native.available() or "avx2" not in native._open().tiers:
        pytest.skip("needs the x86-64 tiers")
    monkeypatch.setattr(native, "cpu_flags", lambda *a: frozenset({"avx", "avx2", "fma"}))  # an AVX2-only CPU
    try:
        with pytest.warns(RuntimeWarning, match=r"AIOGE_ISA=avx512 asks for avx512bw, avx512f, avx512vl, .*runs avx2"):
            dll = _fresh(monkeypatch, "avx512")
        assert dll is not None and dll.aioge_native_isa() & 0b111 == 0b111 and not dll.aioge_native_isa() >> 3 & 1
        dll = _fresh(monkeypatch, "Baseline")  # names are read case-blind
        assert dll is not None and dll.aioge_native_isa() == 0
        with pytest.raises(OptionError, match=r"'sse9'.*AIOGE_ISA.*baseline, avx2, avx512"):
            _fresh(monkeypatch, "sse9")
        assert "not loaded" in native.describe() and "AIOGE_ISA" in native.describe()
    finally:
        monkeypatch.undo()
        native.lib.cache_clear()
        native.function.cache_clear()
    assert native.available()


def test_the_cpu_flags_come_from_cpuid():
    if not native.available() or "avx2" not in native._open().tiers:
        pytest.skip("needs the x86-64 tiers")
    proc = native.cpu_flags()  # /proc/cpuinfo
    cpuid = native.cpu_flags(native.lib())
    assert proc is not None and cpuid is not None
    assert {f for f in ("avx", "fma", "avx512bw", "avx512vl") if f in proc} == cpuid & {"avx", "fma", "avx512bw", "avx512vl"}
