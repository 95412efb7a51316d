"""The kernel contract: what a kernel is, as the op registry above and the runtime see it.

Kernels (``aioge.kernels``) sit below the op schemas (``aioge.ops``): they import only ``ir``
and this floor. The schemas bind kernels through these two types, and the compiler and the
runtime call what they describe; so ``KernelImpl`` and ``RunFn`` live here, not beside
``OpSchema``, and the import arrows run ops -> kernels -> ir.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc

__all__ = ["KernelImpl", "RunFn"]

# A bound kernel: reads ``inputs``; writes into ``outputs`` when given (preallocated arena
# views of the inferred shapes) and returns them; otherwise returns fresh arrays.
RunFn = Callable[[Sequence[np.ndarray], "Sequence[np.ndarray] | None"], Sequence[np.ndarray]]


@dataclass(frozen=True, slots=True)
class KernelImpl:
    """One implementation of an op.

    ``build(attrs, params, in_descs, out_descs)`` binds it to a node and returns the run
    function; it runs at load time, never per call. ``applies`` says whether it can run a
    given signature; ``candidates`` lists the tuning parameter sets to try (one empty set
    when there is nothing to tune).
    """

    name: str
    build: Callable[[Mapping[str, Any], Mapping[str, Any], Sequence[TensorDesc | None], Sequence[TensorDesc]], RunFn]
    applies: Callable[[Sequence[TensorDesc | None], Mapping[str, Any]], bool] = lambda descs, attrs: True
    candidates: Callable[[Sequence[TensorDesc | None], Mapping[str, Any]], list[dict[str, Any]]] = lambda d, a: [{}]
