"""The kernel contract: what a kernel is, as the op registry above and the runtime see it.

Kernels (``aioge.kernels``) sit below the op schemas (``aioge.ops``): they import only ``ir``
and this floor. The schemas bind kernels through these types, and the compiler and the
runtime call what they describe; so ``KernelImpl`` and ``RunFn`` live here, not beside
``OpSchema``, and the import arrows run ops -> kernels -> ir. ``Engine``, the simulated
engine a kernel runs on, lives here too: every op schema names the engines that can run it,
so the kind sits below ``ops``; ``aioge.engines`` (above ``ops``) keeps the selection rule
and re-exports it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc, numpy_dtype

__all__ = ["Engine", "KernelImpl", "RunFn", "bind_kernel", "engine_names", "is_constant", "no_compute", "parse_engine"]

# A bound kernel: reads ``inputs``; writes into ``outputs`` when given (preallocated arena
# views of the inferred shapes) and returns them; otherwise returns fresh arrays.
RunFn = Callable[[Sequence[np.ndarray], "Sequence[np.ndarray] | None"], Sequence[np.ndarray]]


def is_constant(a: Any) -> bool:
    """``a`` is read-only and so is every array it views: its values cannot change, so a
    kernel may keep what it derives from it (a packed weight) for as long as it holds ``a``.
    Graph constants are such arrays; a feed, an intermediate, or a read-only view of an array
    its owner may still change is not."""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        a = a.base
    return True


@dataclass(frozen=True, slots=True)
class KernelImpl:
    """One implementation of an op.

    ``build(attrs, params, in_descs, out_descs)`` binds it to a node and returns the run
    function; it runs at load time, never per call. ``applies`` says whether it can run a
    given signature; ``candidates`` lists the tuning parameter sets to try (one empty set
    when there is nothing to tune). ``offered`` says whether a compile in this process may
    choose it (a compiled kernel: only with its tier loaded); a choice stored by another
    process stays valid either way, and its ``build`` falls back to numpy code. An ``eager``
    implementation is timed even when the tuning budget is spent (one run of a compiled kernel
    costs little beside the numpy reference's, which alone can spend the budget).
    ``activations`` names the activations ``build`` applies itself when ``attrs`` carry a fused
    op's ``activation`` and ``activation_params`` (``ops.fused``): to each output tile while it
    is in cache, instead of the fused op's second pass over the whole output. A ``native``
    implementation's run carries a native form (``kernels.native.with_native``) for the
    float32 operands it reads in place: a plan of such kernels runs as one C call
    (``runtime.native_program``), so the compiler may prefer one over a slightly faster
    numpy kernel (``compiler.graph``); such kernels are ``eager`` too, so tuning always has
    their times. ``packs`` lists the inputs a native kernel derives an array from once (a
    packed weight): its form needs them constant, and over a fed weight (``aioge.torch``'s
    parameters) declines.
    """

    name: str
    build: Callable[[Mapping[str, Any], Mapping[str, Any], Sequence[TensorDesc | None], Sequence[TensorDesc]], RunFn]
    applies: Callable[[Sequence[TensorDesc | None], Mapping[str, Any]], bool] = lambda descs, attrs: True
    candidates: Callable[[Sequence[TensorDesc | None], Mapping[str, Any]], list[dict[str, Any]]] = lambda d, a: [{}]
    offered: Callable[[], bool] = lambda: True
    eager: bool = False
    activations: frozenset[str] = frozenset()
    native: bool = False
    packs: tuple[int, ...] = ()


def no_compute(out_descs: Sequence[TensorDesc]) -> bool:
    """Every output is a tensor of a known shape with no elements (an empty batch): there is
    nothing to compute, whatever the inputs."""
    return bool(out_descs) and all(d.static and d.size == 0 for d in out_descs)


def bind_kernel(
    impl: KernelImpl,
    attrs: Mapping[str, Any],
    params: Mapping[str, Any],
    in_descs: Sequence[TensorDesc | None],
    out_descs: Sequence[TensorDesc],
) -> RunFn:
    """``impl.build`` (for the runtime, tuning and loading), or for ``no_compute`` outputs no
    kernel at all: no C kernel or in-place activation sees a zero-size geometry."""
    if not no_compute(out_descs):
        return impl.build(attrs, params, in_descs, out_descs)
    shapes = [(tuple(int(x) for x in d.shape or ()), numpy_dtype(d.dtype)) for d in out_descs]

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        return outputs if outputs is not None else [np.empty(shape, dtype) for shape, dtype in shapes]

    return run


class Engine(enum.Enum):
    """A simulated engine; ``value`` is the name GE's options use."""

    AICORE = "AiCore"
    AIVEC = "AiVec"
    AICPU = "AiCpu"

    @property
    def priority(self) -> int:
        """GE's cost: lower is preferred."""
        return _PRIORITY[self]

    def __str__(self) -> str:
        return self.value


_PRIORITY = {Engine.AICORE: 1, Engine.AIVEC: 2, Engine.AICPU: 3}

# GE's docs say AiVec while its code accepts only AiVector: aioge accepts both.
_NAMES = {"AiCore": Engine.AICORE, "AiVec": Engine.AIVEC, "AiVector": Engine.AIVEC, "AiCpu": Engine.AICPU}


def parse_engine(name: str) -> Engine:
    """Return the engine GE calls ``name``.

    Raises:
        KeyError: not an engine name.
    """
    return _NAMES[name]


def engine_names() -> tuple[str, ...]:
    """Every name ``parse_engine`` accepts."""
    return tuple(_NAMES)
