"""The compiled-kernel tier's build (everything else is in pyproject.toml).

Every .c file of src/aioge/kernels/csrc is compiled once per ISA tier, each tier its own
extension (aioge.kernels._native, _native_avx2, _native_avx512 on x86-64), and
aioge.kernels.native loads the best tier this CPU runs at run time (AIOGE_ISA can force a lower
one): a wheel built anywhere runs on any x86-64. Other machines (aarch64) build the one generic
tier. AIOGE_NATIVE_ARCH=1 at build time builds one tier with -march=native instead (for this
machine only). optional: a machine without a C compiler still installs, and the numpy kernels
run (aioge warns once at first use). ONNX float32 numerics need IEEE rounding, so no
-ffast-math (omp simd pragmas vectorise the reductions).
"""

import glob
import os
import platform

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CSRC = "src/aioge/kernels/csrc"
FLAGS = ["-O3", "-pthread", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-Wno-psabi"]
# (module suffix, -march): the baseline tier must run on every CPU of the architecture.
X86_TIERS = (("", "x86-64"), ("_avx2", "x86-64-v3"), ("_avx512", "x86-64-v4"))


def tiers() -> list[tuple[str, list[str]]]:
    if os.environ.get("AIOGE_NATIVE_ARCH", "0").strip() not in ("", "0"):
        return [("", ["-march=native"])]
    if platform.machine().lower() in ("x86_64", "amd64"):
        # -mtune=native: tuned for the build machine (it adds no instruction; generic tuning made
        # the AVX2 tier's conv and GEMM 15-18% slower than -march=native on a Zen 3)
        return [(suffix, [f"-march={arch}", "-mtune=native"]) for suffix, arch in X86_TIERS]
    return [("", [])]  # aarch64 and the rest: the compiler's default target (NEON on aarch64)


def extension(suffix: str, arch: list[str]) -> Extension:
    return Extension(
        f"aioge.kernels._native{suffix}",
        sources=sorted(glob.glob(f"{CSRC}/*.c")),
        depends=sorted(glob.glob(f"{CSRC}/*.h")),
        extra_compile_args=[*FLAGS, *arch, f"-DAIOGE_MODULE=_native{suffix}"],
        extra_link_args=["-pthread"],
        optional=True,
    )


class BuildTiers(build_ext):
    """Each tier's objects in their own folder: the tiers compile the same sources. One tier at
    a time: ``build_temp`` is this command's, so ``-j`` (extensions built on threads) mixed the
    tiers' objects into each other's modules."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.parallel = None

    def build_extension(self, ext: Extension) -> None:
        temp, self.build_temp = self.build_temp, os.path.join(self.build_temp, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = temp


setup(ext_modules=[extension(suffix, arch) for suffix, arch in tiers()], cmdclass={"build_ext": BuildTiers})
