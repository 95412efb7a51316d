"""The compiled-kernel tier loads where it was built, and AIOGE_NATIVE=0 turns it off."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import warnings

import pytest

from aioge.kernels import native

tier_off = pytest.mark.skipif(
    os.environ.get("AIOGE_NATIVE", "1").strip() == "0", reason="AIOGE_NATIVE=0 turns the tier off in this run"
)


@tier_off
def test_the_install_built_the_compiled_kernels():
    # `pip install` builds them with the machine's C compiler (optional in the build, so a
    # machine without one still installs); CI has gcc, and a silent build failure here would
    # leave every model on the slower numpy kernels.
    assert native.available(), "aioge.kernels._native is not built: pip install -e . (needs a C compiler)"
    assert native.lib().aioge_native_abi() == native.ABI


def test_aioge_native_0_selects_the_numpy_kernels():
    code = "from aioge.kernels import native; print(native.available(), native.function('aioge_native_abi'))"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "AIOGE_NATIVE": "0"}, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "None"]


def test_the_numpy_kernels_fixture_hides_the_tier_and_brings_it_back(numpy_kernels):
    assert not native.available()
    assert native.function("aioge_native_abi") is None


def test_a_function_the_build_lacks_is_none(monkeypatch):
    # a function aioge.h declares that a build from older sources lacks
    monkeypatch.setitem(native.SIGNATURES, "aioge_no_such_kernel", (None, ()))
    native.function.cache_clear()
    assert native.function("aioge_no_such_kernel") is None
    native.function.cache_clear()


def _fresh_lib() -> object:
    native.lib.cache_clear()
    native.function.cache_clear()
    return native.lib()


@tier_off
def test_a_missing_tier_warns_once_with_its_cost_and_fix(monkeypatch):
    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "aioge.kernels._native" else real_find(name, *a)
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert _fresh_lib() is None
            assert native.lib() is None and not native.available()  # cached: said once
        assert len(caught) == 1 and caught[0].category is RuntimeWarning
        text = str(caught[0].message)
        assert "not built" in text and "2-10x slower" in text and "build-essential" in text and "reinstall" in text
        assert "not built" in native.describe()
    finally:
        monkeypatch.undo()
        native.lib.cache_clear()
        native.function.cache_clear()


def test_aioge_native_0_is_not_warned_about(numpy_kernels):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _fresh_lib() is None
    assert native.describe() == "compiled kernels: no — numpy kernels; disabled by AIOGE_NATIVE=0"


def _only_native_as(monkeypatch, module: str) -> None:
    """Make ``module`` the one tier installed, found as aioge.kernels._native (as an
    AIOGE_NATIVE_ARCH=1 build is: one extension, built with -march=native)."""
    real_find = importlib.util.find_spec
    tier = real_find(module)
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: tier if name == "aioge.kernels._native" else None if "._native" in name else real_find(name, *a),
    )


@tier_off
def test_a_build_for_instructions_the_cpu_lacks_is_refused_with_a_warning(monkeypatch):
    flags = native.cpu_flags(native.lib())
    if flags is None or not {"avx", "avx2", "fma"} <= flags:
        pytest.skip("needs an x86-64-v3 CPU (the AVX2 tier stands in for a -march=native build)")
    _only_native_as(monkeypatch, "aioge.kernels._native_avx2")
    monkeypatch.setattr(native, "cpu_flags", lambda *a: flags - {"fma"})
    try:
        with pytest.warns(RuntimeWarning, match=r"built for fma, which this CPU lacks.*--no-binary aioge"):
            assert _fresh_lib() is None
        assert native.function("aioge_native_abi") is None
    finally:
        monkeypatch.undo()
        native.lib.cache_clear()
        native.function.cache_clear()
    assert native.available()


@tier_off
def test_a_native_arch_build_says_so_and_refuses_a_lower_aioge_isa(monkeypatch):
    flags = native.cpu_flags(native.lib())
    if flags is None or not {"avx", "avx2", "fma"} <= flags:
        pytest.skip("needs an x86-64-v3 CPU (the AVX2 tier stands in for a -march=native build)")
    _only_native_as(monkeypatch, "aioge.kernels._native_avx2")
    monkeypatch.delenv("AIOGE_ISA", raising=False)
    try:
        assert "built with -march=native for x86_64, running avx2 (avx, avx2, fma)" in native.describe()
        monkeypatch.setenv("AIOGE_ISA", "baseline")
        with pytest.warns(RuntimeWarning, match=r"AIOGE_ISA=baseline, but this build \(AIOGE_NATIVE_ARCH=1\) has only its avx2"):
            assert _fresh_lib() is None
    finally:
        monkeypatch.undo()
        native.lib.cache_clear()
        native.function.cache_clear()
    assert native.available()


@tier_off
def test_a_cpu_without_a_tiers_flags_runs_the_tier_below(monkeypatch):
    flags = native.cpu_flags(native.lib())
    if flags is None or "avx2" not in flags:
        pytest.skip("needs an x86-64-v3 CPU")
    monkeypatch.setattr(native, "cpu_flags", lambda *a: flags - {"avx2", "avx512f"})
    monkeypatch.delenv("AIOGE_ISA", raising=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing asked for more: no warning
            dll = _fresh_lib()
        assert dll is not None and dll.aioge_native_isa() == 0  # the baseline tier: no ISA bits
        assert "running baseline, ABI" in native.describe()
    finally:
        monkeypatch.undo()
        native.lib.cache_clear()
        native.function.cache_clear()


@tier_off
def test_version_says_whether_the_compiled_tier_runs_with_its_isa_and_abi(monkeypatch):
    def version(**env: str) -> str:
        cmd = [sys.executable, "-m", "aioge", "--version"]
        inherited = {k: v for k, v in os.environ.items() if k != "AIOGE_ISA"}
        out = subprocess.run(cmd, env={**inherited, **env}, capture_output=True, text=True, check=True)
        assert out.stderr == ""
        return out.stdout.strip()

    from aioge import __version__

    monkeypatch.delenv("AIOGE_ISA", raising=False)
    opened = native._open()  # what the child runs without AIOGE_ISA
    shown = f" ({', '.join(opened.built)})" if opened.built else ""
    assert version() == (
        f"aioge {__version__} (compiled kernels: yes, {platform.machine()} tiers {', '.join(opened.tiers)}, "
        f"running {opened.tier}{shown}, ABI {native.ABI})"
    )
    assert version(AIOGE_ISA="baseline") == (
        f"aioge {__version__} (compiled kernels: yes, {platform.machine()} tiers {', '.join(opened.tiers)}, "
        f"running baseline (AIOGE_ISA=baseline), ABI {native.ABI})"
    )
    assert version(AIOGE_NATIVE="0") == f"aioge {__version__} (compiled kernels: no — numpy kernels; disabled by AIOGE_NATIVE=0)"


@tier_off
def test_version_without_the_tier_says_why(monkeypatch, capsys):
    from aioge import cli

    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "aioge.kernels._native" else real_find(name, *a)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # --version describes the tier; it does not warn
        with pytest.raises(SystemExit) as exit_:
            cli.main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "(compiled kernels: no — numpy kernels; not built (no C compiler at install" in out and "build-essential" in out
