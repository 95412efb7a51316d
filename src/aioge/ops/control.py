"""Control flow that runs: Loop over a body program, If over two branch programs.

The ONNX frontend unrolls a Loop whose steps follow from the constants, and resolves an If
whose condition does (or whose branches it can compute both of and select); the rest become
these ops. A body or branch is a program, plain data the .om and the caches can hold:
``(input names, output names, constants, nodes)``, each node
``(op_type, domain, attrs, input names, output names, output types)``, in topological order;
an output type is a dtype name for a tensor, or ``[container, dtype]`` for a sequence or an
optional (``aioge.ir.desc.CONTAINERS``). Loop's body reads (iteration, condition, states...,
outer values...) and gives (condition, states..., scan outputs...); states may be sequences
or optionals. Each step runs the body's nodes with the ops' own kernels (the first
implementation that applies); scan outputs are stacked on a new axis 0. If runs the branch
its condition picks on the outer values and gives that branch's outputs. SequenceMap runs its
body once per element of its sequences and gives each output as a sequence.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.kernels.contract import KernelImpl
from aioge.kernels.sequence import own_copy
from aioge.ops.schema import CPU_ONLY, REQUIRED, Attr, InferContext, InferError, OpSchema

__all__ = ["MAX_STEPS", "SCHEMAS", "run_program", "type_desc", "type_of"]

# A loop that runs longer than this many steps is refused at run time instead of hanging.
MAX_STEPS = 10_000_000


def type_of(d: TensorDesc) -> Any:
    """A program's output type for a desc: its dtype, or ``[container, dtype]``."""
    return d.dtype if d.is_tensor else [d.container, d.dtype]


def type_desc(t: Any) -> TensorDesc:
    """The (shapeless) desc of a program output type.

    Raises:
        ValueError: a malformed type.
    """
    if isinstance(t, str):
        return TensorDesc.of(None, t)
    if isinstance(t, (list, tuple)) and len(t) == 2 and all(isinstance(x, str) for x in t):
        return TensorDesc.of_container(t[0], None, t[1])
    raise ValueError(f"malformed program output type {t!r:.80}")


def _infer_loop(ctx: InferContext) -> list[TensorDesc]:
    n = int(ctx.attrs["num_states"])
    scans = tuple(ctx.attrs["scan_dtypes"])
    if len(ctx.inputs) < 2 + n:
        raise InferError(f"{len(ctx.inputs)} inputs for {n} loop states")
    states = []
    for i in range(n):
        d = ctx.inputs[2 + i]
        if d is None:
            raise InferError(f"loop state {i} is required")
        # A carried sequence's elements may change shape from step to step: unknown.
        states.append(TensorDesc(d.shape if d.is_tensor else None, d.dtype, "ND", d.container))
    return [*states, *(TensorDesc(None, d) for d in scans)]


def _infer_if(ctx: InferContext) -> list[TensorDesc]:
    return [type_desc(t) for t in ctx.attrs["out_types"]]


def _infer_map(ctx: InferContext) -> list[TensorDesc]:
    n = int(ctx.attrs["num_inputs"])
    if not 1 <= n <= len(ctx.inputs):
        raise InferError(f"num_inputs={n} for {len(ctx.inputs)} inputs")
    first = ctx.inputs[0]
    if first is None or first.container != "sequence":
        raise InferError(f"input 0 must be a sequence, got {first}")
    return [TensorDesc(None, t, "ND", "sequence") for t in ctx.attrs["out_dtypes"]]


def _runtime_desc(v: Any) -> TensorDesc | None:
    if v is None:
        return None
    if isinstance(v, list):
        return TensorDesc(None, v[0].dtype.name if v else "float32", "ND", "sequence")
    return TensorDesc.of(np.shape(v), np.asarray(v).dtype)


def run_program(program: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    """The body program's outputs on ``args`` (one array, list or None per program input).

    Raises:
        ValueError: a node whose op is unknown, or a kernel that fails.
    """
    from aioge.ops.registry import get_schema

    inputs, outputs, constants, nodes = program
    env: dict[str, Any] = {name: value for name, value in constants}
    env.update(zip(inputs, args))
    for op_type, domain, attrs, ins, outs, types in nodes:
        schema = get_schema(op_type, domain)
        values = [env[x] if x else None for x in ins]
        in_descs = [_runtime_desc(v) for v in values]
        out_descs = [type_desc(t) for t in types]
        attr_map = dict(attrs)
        impl = next((i for i in schema.impls if i.applies(in_descs, attr_map)), schema.impls[0])
        results = list(impl.build(attr_map, {}, in_descs, out_descs)(values, None))  # type: ignore[arg-type]
        for name, r, d in zip(outs, results, out_descs):
            if name:
                env[name] = np.asarray(r) if d.is_tensor else r
    return [env[name] for name in outputs]


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
        return [*(own_copy(s) for s in states), *stacked]

    return run


def _build_map(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> Any:
    program, n, width = attrs["body"], int(attrs["num_inputs"]), len(attrs["out_dtypes"])

    def run(inputs: Sequence[Any], out: Sequence[np.ndarray] | None) -> list[Any]:
        mapped, outer = list(inputs[:n]), list(inputs[n:])
        lengths = {len(x) for x in mapped if isinstance(x, list)}
        if len(lengths) != 1:
            raise ValueError(f"SequenceMap: the sequences have different lengths {sorted(lengths)}")
        results: list[list[Any]] = [[] for _ in range(width)]
        for i in range(lengths.pop()):
            step = run_program(program, [*(x[i] if isinstance(x, list) else x for x in mapped), *outer])
            for j, r in enumerate(step):
                results[j].append(np.array(r, copy=True))
        return list(results)

    return run


def _build_if(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> Any:
    branches = (attrs["else_branch"], attrs["then_branch"])

    def run(inputs: Sequence[Any], out: Sequence[np.ndarray] | None) -> list[Any]:
        cond = np.asarray(inputs[0])
        if cond.size != 1:
            raise ValueError(f"If: the condition must hold one element, got shape {list(cond.shape)}")
        results = [own_copy(r) for r in run_program(branches[bool(cond.reshape(-1)[0])], list(inputs[1:]))]
        if out is None:
            return results
        for o, r in zip(out, results):
            np.copyto(o, r, casting="unsafe")
        return list(out)

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
        containers=True,
        doc="run a body program while the trip count lasts and its condition holds (states carried, scan outputs stacked)",
    ),
    OpSchema(
        "SequenceMap",
        _infer_map,
        (KernelImpl("numpy", _build_map),),
        CPU_ONLY,
        {"body": Attr("any", REQUIRED), "num_inputs": Attr("int", REQUIRED), "out_dtypes": Attr("any", REQUIRED)},
        (1, -1),
        (1, -1),
        family="control",
        float_only=False,
        containers=True,
        doc="run a body program once per element of the sequence inputs (tensor inputs as they are; "
        "inputs past num_inputs are outer values) and give each body output as a sequence",
    ),
    OpSchema(
        "If",
        _infer_if,
        (KernelImpl("numpy", _build_if),),
        CPU_ONLY,
        {"then_branch": Attr("any", REQUIRED), "else_branch": Attr("any", REQUIRED), "out_types": Attr("any", REQUIRED)},
        (1, -1),
        (1, -1),
        family="control",
        float_only=False,
        containers=True,
        doc="run the branch program the condition picks on the outer values (inputs 1...) and give its outputs",
    ),
)
