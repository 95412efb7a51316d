"""Tensor descriptions: shape, dtype and format of a value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import ml_dtypes
import numpy as np

__all__ = ["CONTAINERS", "DTYPES", "ML_DTYPES", "Dim", "TensorDesc", "canonical_dtype", "is_static", "numpy_dtype"]

# A dimension is a non-negative int, or a symbol (str) that a feed or shapes= fixes later.
Dim = int | str

# Every dtype a tensor may have, by its numpy name. Kept explicit: the cache decoders use
# the same allow-list, so a file can never name a dtype that would surprise numpy.
DTYPES: tuple[str, ...] = (
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
    "str",
    # ml_dtypes' numpy extension types (ONNX's BFLOAT16, FLOAT8*, FLOAT4E2M1, INT4/UINT4,
    # INT2/UINT2): one element per byte in memory, whatever their packed size in a file.
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "int4",
    "uint4",
    "int2",
    "uint2",
)

# The ml_dtypes members of DTYPES and their numpy dtypes. Their numpy ``kind`` is "V" (or
# "f" for float8_e5m2), so code that asks "is this a float?" uses ``is_float`` below.
ML_DTYPES: dict[str, np.dtype] = {name: np.dtype(getattr(ml_dtypes, name)) for name in DTYPES[DTYPES.index("bfloat16") :]}


# What a value holds: a tensor, a sequence of tensors (a run-time Python list of arrays), an
# optional tensor (None or an array) or an optional sequence (None or a list). For the three
# non-tensor kinds, ``dtype`` and ``shape`` describe the tensors inside (the element dtype,
# and the element shape as far as every element shares it).
CONTAINERS: tuple[str, ...] = ("tensor", "sequence", "optional", "optional_sequence")


def canonical_dtype(dtype: object) -> str:
    """Return the canonical dtype name for anything numpy understands as a dtype.

    Raises:
        ValueError: the dtype is not one aioge supports.
    """
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise ValueError(f"not a dtype: {dtype!r}") from exc
    name = "str" if dt.kind in "UO" else dt.name
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {dt.name!r}; supported: {', '.join(DTYPES)}")
    return name


def numpy_dtype(name: str) -> np.dtype:
    """Return the numpy dtype for a canonical dtype name."""
    if name == "str":
        return np.dtype(object)
    ml = ML_DTYPES.get(name)
    return np.dtype(name) if ml is None else ml


def is_static(shape: tuple[Dim, ...] | None) -> bool:
    """True when the shape is known and every dimension is an int."""
    return shape is not None and all(isinstance(d, int) for d in shape)


@dataclass(frozen=True, slots=True)
class TensorDesc:
    """Shape, dtype and format of a tensor.

    ``shape`` is None when even the rank is unknown (a data-dependent output before it is
    computed); a dimension may be a symbol (``"N"``) until feeds fix it. ``container`` says
    whether the value is the tensor itself or a sequence or optional of such tensors (see
    ``CONTAINERS``); those are never static, so the memory planner leaves them to the runtime.
    """

    shape: tuple[Dim, ...] | None
    dtype: str
    format: str = "ND"
    container: str = "tensor"

    @staticmethod
    def of(shape: Iterable[Dim] | None, dtype: object, format: str = "ND") -> TensorDesc:
        """Build a desc, normalising the shape to a tuple and the dtype to its canonical name."""
        if shape is not None:
            dims: list[Dim] = []
            for d in shape:
                if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
                    if d < 0:
                        raise ValueError(f"negative dimension {d} in shape {tuple(shape)}")
                    dims.append(int(d))
                elif isinstance(d, str) or d is None:
                    dims.append(d if isinstance(d, str) else "?")
                else:
                    raise ValueError(f"bad dimension {d!r}")
            shape = tuple(dims)
        return TensorDesc(shape, canonical_dtype(dtype), format)

    @staticmethod
    def of_container(container: str, shape: Iterable[Dim] | None, dtype: object) -> TensorDesc:
        """A sequence or optional desc over tensors of ``shape`` and ``dtype``.

        Raises:
            ValueError: an unknown container, or a bad shape or dtype.
        """
        if container not in CONTAINERS:
            raise ValueError(f"unknown value container {container!r}; known: {', '.join(CONTAINERS)}")
        d = TensorDesc.of(shape, dtype)
        return d if container == "tensor" else TensorDesc(d.shape, d.dtype, "ND", container)

    @property
    def is_tensor(self) -> bool:
        """True for a plain tensor, False for a sequence or an optional."""
        return self.container == "tensor"

    @property
    def element(self) -> TensorDesc:
        """The desc of one tensor inside (itself for a tensor)."""
        return self if self.container == "tensor" else TensorDesc(self.shape, self.dtype, self.format)

    @property
    def static(self) -> bool:
        """True when the value is a tensor and its shape is fully known."""
        return self.container == "tensor" and is_static(self.shape)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements; only for static shapes."""
        assert self.shape is not None
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of a dense tensor of this desc; only for static shapes of fixed-size dtypes."""
        return self.size * numpy_dtype(self.dtype).itemsize

    def with_shape(self, shape: Iterable[Dim] | None) -> TensorDesc:
        d = TensorDesc.of(shape, self.dtype, self.format)
        return d if self.container == "tensor" else TensorDesc(d.shape, d.dtype, d.format, self.container)

    def __str__(self) -> str:
        dims = "?" if self.shape is None else ", ".join(str(d) for d in self.shape) or "scalar"
        return f"{self.dtype}[{dims}]" if self.container == "tensor" else f"{self.container}({self.dtype}[{dims}])"
