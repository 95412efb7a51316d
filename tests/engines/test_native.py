"""The compiled-kernel tier loads where it was built, and AIOGE_NATIVE=0 turns it off."""

from __future__ import annotations

import os
import subprocess
import sys

from aioge.kernels import native


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
