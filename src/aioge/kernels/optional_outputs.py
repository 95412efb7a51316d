"""Kernels of ops whose trailing outputs are optional (Unique, Attention, SoftmaxCrossEntropyLoss).

The numpy function computes every output; the bound kernel returns as many as the node
declares, which is what the runtime expects.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.kernels.base import into
from aioge.kernels.contract import KernelImpl, RunFn

__all__ = ["returning_some"]


def returning_some(name: str, fn: Callable[..., tuple[np.ndarray, ...]]) -> KernelImpl:
    """An implementation from ``fn(*inputs, **attrs)`` returning all outputs, trimmed to the node's."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Sequence[Any]) -> RunFn:
        kw = dict(attrs)
        count = len(outs)

        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            return into(outputs, tuple(fn(*inputs, **kw))[:count])

        return run

    return KernelImpl(name, build)
