"""The few ways a numpy function becomes a bound kernel (``RunFn``)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import native
from aioge.kernels.contract import KernelImpl, RunFn

__all__ = ["into", "returning", "ufunc_impl"]

# The ufuncs whose float32 forms a native program runs in C (kernels.native.binary): IEEE
# single-precision results, the same as numpy's.
_BINARY_UFUNCS: dict[Any, str] = {np.add: "Add", np.subtract: "Sub", np.multiply: "Mul", np.divide: "Div"}
_CMP = native.EW_COMPARE
_LOGICAL = {
    np.logical_and: native.EW_AND,
    np.logical_or: native.EW_OR,
    np.logical_xor: native.EW_XOR,
    np.logical_not: native.EW_NOT,
    np.isnan: native.EW_ISNAN,
}
_LOGICAL |= {np.equal: _CMP["Equal"], np.less: _CMP["Less"], np.less_equal: _CMP["LessOrEqual"]}
_LOGICAL |= {np.greater: _CMP["Greater"], np.greater_equal: _CMP["GreaterOrEqual"]}


def into(outs: Sequence[np.ndarray] | None, results: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
    """Put results into preallocated outputs when there are some; return what the node produced."""
    if outs is None:
        return results
    for out, res in zip(outs, results):
        if res is not out:
            np.copyto(out, res, casting="unsafe")
    return outs


def returning(
    name: str,
    fn: Callable[..., Any],
    *,
    applies: Callable[[Sequence[TensorDesc | None], Mapping[str, Any]], bool] | None = None,
    form: Callable[[Mapping[str, Any]], native.NativeForm] | None = None,
) -> KernelImpl:
    """An implementation from ``fn(*inputs, **attrs)`` that returns its result(s).

    The result is copied into a preallocated output when there is one. Use it for ops numpy
    cannot compute in place. ``form(attrs)``: the native form of the same result, if any.
    """

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        kw = dict(attrs)

        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            res = fn(*inputs, **kw)
            results = res if isinstance(res, tuple) else (res,)
            if outputs is None:
                # numpy turns 0-d results into scalars; a kernel's results are always arrays.
                return tuple(r if isinstance(r, np.ndarray) else np.asarray(r) for r in results)
            return into(outputs, results)

        return run if form is None else native.with_native(run, form(kw))

    if applies is None:
        return KernelImpl(name, build, native=form is not None)
    return KernelImpl(name, build, applies, native=form is not None)


def one_call(make: Callable[[Sequence[Any], Sequence[np.ndarray]], native.NativeCall | None]) -> native.NativeForm:
    """The native form of a kernel that is one C job (``make``'s, None when it has none)."""

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        call = make(inputs, outputs) if native.available() else None
        return None if call is None else [call]

    return form


def ufunc_impl(name: str, ufunc: Callable[..., Any]) -> KernelImpl:
    """An implementation that calls a numpy ufunc with ``out=`` straight into the arena."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            if outputs is None:
                return (np.asarray(ufunc(*inputs)),)
            ufunc(*inputs, out=outputs[0])
            return outputs

        run.ufunc = ufunc  # type: ignore[attr-defined]  # the executor may call it directly (runtime.context)
        op = _BINARY_UFUNCS.get(ufunc)
        if op is not None and native.available():

            def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
                if len(inputs) != 2:
                    return None  # broadcasts JOB_BINARY's rows cannot take: JOB_ELEMWISE's (GPT-2's positions)
                call = native.binary(op, inputs[0], inputs[1], outputs[0]) or native.elemwise(
                    native.EW_ARITH[op], outputs[0], *inputs
                )
                return None if call is None else [call]

            native.with_native(run, form)
        elif ufunc in _LOGICAL:  # bools, broadcast (a transformer's attention mask); comparisons (an embedding's index check)
            native.with_native(run, one_call(lambda ins, outs: native.elemwise(_LOGICAL[ufunc], outs[0], *ins)))
        return run

    return KernelImpl(name, build, native=ufunc in _BINARY_UFUNCS or ufunc in _LOGICAL)
