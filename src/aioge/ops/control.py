"""Control flow that runs: Loop over a body program whose trip count or condition is known only at run time.

The ONNX frontend unrolls a Loop whose steps follow from the constants; the rest become this
op. Its ``body`` attribute is a program, plain data the .om and the caches can hold:
``(input names, output names, constants, nodes)``, each node
``(op_type, domain, attrs, input names, output names, output dtypes)``, in topological order.
The body reads (iteration, condition, states..., outer values...) and gives
(condition, states..., scan outputs...). Each step runs the body's nodes with the ops' own
kernels (the first implementation that applies); scan outputs are stacked on a new axis 0.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.kernels.contract import KernelImpl
from aioge.ops.schema import CPU_ONLY, REQUIRED, Attr, InferContext, InferError, OpSchema

__all__ = ["MAX_STEPS", "SCHEMAS", "run_program"]

# A loop that runs longer than this many steps is refused at run time instead of hanging.
MAX_STEPS = 10_000_000


def _infer_loop(ctx: InferContext) -> list[TensorDesc]:
    n = int(ctx.attrs["num_states"])
    scans = tuple(ctx.attrs["scan_dtypes"])
    if len(ctx.inputs) < 2 + n:
        raise InferError(f"{len(ctx.inputs)} inputs for {n} loop states")
    states = [TensorDesc(ctx.shape(2 + i), ctx.dtype(2 + i)) for i in range(n)]
    return [*states, *(TensorDesc(None, d) for d in scans)]


def run_program(program: Sequence[Any], args: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """The body program's outputs on ``args`` (one array per program input).

    Raises:
        ValueError: a node whose op is unknown, or a kernel that fails.
    """
    from aioge.ops.registry import get_schema

    inputs, outputs, constants, nodes = program
    env: dict[str, np.ndarray | None] = {name: value for name, value in constants}
    env.update(zip(inputs, args))
    for op_type, domain, attrs, ins, outs, dtypes in nodes:
        schema = get_schema(op_type, domain)
        values = [env[x] if x else None for x in ins]
        in_descs = [None if v is None else TensorDesc.of(v.shape, v.dtype) for v in values]
        out_descs = [TensorDesc(None, d) for d in dtypes]
        attr_map = dict(attrs)
        impl = next((i for i in schema.impls if i.applies(in_descs, attr_map)), schema.impls[0])
        results = list(impl.build(attr_map, {}, in_descs, out_descs)(values, None))  # type: ignore[arg-type]
        for name, r in zip(outs, results):
            if name:
                env[name] = np.asarray(r)
    return [env[name] for name in outputs]  # type: ignore[misc]


def _build_loop(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> Any:
    program, n = attrs["body"], int(attrs["num_states"])
    scan_dtypes = [numpy_dtype(d) for d in attrs["scan_dtypes"]]

    def run(inputs: Sequence[np.ndarray | None], out: Sequence[np.ndarray] | None) -> list[np.ndarray]:
        trip = None if inputs[0] is None else int(np.asarray(inputs[0]).reshape(-1)[0])
        going = True if len(inputs) < 2 or inputs[1] is None else bool(np.asarray(inputs[1]).reshape(-1)[0])
        states: list[Any] = list(inputs[2 : 2 + n])
        outer = list(inputs[2 + n :])
        scans: list[list[np.ndarray]] = [[] for _ in scan_dtypes]
        step = 0
        while going and (trip is None or step < trip):
            if step >= MAX_STEPS:
                raise ValueError(f"Loop ran {MAX_STEPS} steps without its condition turning false")
            res = run_program(program, [np.asarray(step, np.int64), np.asarray(going), *states, *outer])
            going = bool(np.asarray(res[0]).reshape(-1)[0])
            states = res[1 : 1 + n]
            for j, r in enumerate(res[1 + n :]):
                scans[j].append(r)
            step += 1
        stacked = [np.stack(s) if s else np.zeros((0,), d) for s, d in zip(scans, scan_dtypes)]
        return [*(np.array(s, copy=True) for s in states), *stacked]

    return run


SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "Loop",
        _infer_loop,
        (KernelImpl("numpy", _build_loop),),
        CPU_ONLY,
        {"body": Attr("any", REQUIRED), "num_states": Attr("int", REQUIRED), "scan_dtypes": Attr("any", ())},
        (2, -1),
        (1, -1),
        family="control",
        float_only=False,
        doc="run a body program while the trip count lasts and its condition holds (states carried, scan outputs stacked)",
    ),
)
