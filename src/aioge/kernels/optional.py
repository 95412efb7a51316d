"""Optional-value kernels over plain tensors: an absent optional input is ``None``."""

from __future__ import annotations

import numpy as np

__all__ = ["optional_get_element", "optional_has_element"]


def optional_has_element(x: np.ndarray | None = None) -> np.ndarray:
    """A bool scalar: whether the optional input holds a value."""
    return np.asarray(x is not None)


def optional_get_element(x: np.ndarray) -> np.ndarray:
    """The value held (a copy: outputs never alias inputs)."""
    return np.array(x, copy=True)
