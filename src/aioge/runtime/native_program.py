"""Native programs: a one-thread plan whose every step has a C form, run as one C call.

An inline run calls its kernels one at a time from Python, and every C kernel gives the GIL up
and takes it back. Two such runs on two threads spent their time waiting for it instead of
computing: the builder CNN at batch 1 ran 14.1K times a second on one thread and 11.6K on two,
the transformer 2.2K and 1.7K. A native program is the plan's C jobs (each kernel's
``native.with_native`` form) over one context's operands, bound for good: its first jobs copy
the feeds into staging buffers of its own, ``aioge_run_jobs`` runs every job with the GIL
released once, and the outputs are copied out. Two programs run side by side on two cores.

The forms call the very C functions the kernels' Python paths call, with the same ranges, so
a program's outputs are bit-equal to the step-by-step run's; a plan with any step that has
no form (a numpy kernel, an output the kernel allocates, a variable) has no program.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.errors import ExecutionError
from aioge.kernels import native, native_rows
from aioge.runtime import irb_fuse
from aioge.runtime.context import Context

__all__ = ["NativeProgram", "fold_residuals"]

_PENDING = -2000  # a queued program's result until it has run (results are 0 or an error, minus)


class NativeProgram:
    """One context's plan as C jobs; runs one at a time (its context's)."""

    __slots__ = (
        "_ctx",
        "_staging",
        "_outputs",
        "_entries",
        "_n",
        "_fn",
        "_failed",
        "_fptr",
        "_nodes",
        "_keep",
        "_record",
        "record_address",
    )

    def __init__(
        self,
        ctx: Context,
        staging: list[tuple[str, np.ndarray]],
        outputs: list[tuple[str, np.ndarray]],
        calls: list[native.NativeCall],
        nodes: list[int],
    ) -> None:
        self._ctx = ctx
        self._outputs, self._nodes = outputs, nodes
        # Each feed's staging buffer, the program's first jobs' C copy into it (split with the big
        # jobs; None: np.copyto) whose source a run points at the caller's array, and a spare for
        # a feed that is not the buffer's C-contiguous twin (in Python, 45 us of mobilenet_v3_small's corridor).
        self._staging = [(n, b, native.strided_copy(np.empty_like(b), b) if b.dtype.kind in "biuf" else None) for n, b in staging]
        copies = [c for _, _, c in self._staging if c is not None]
        calls, self._nodes = [*copies, *calls], [nodes[0]] * len(copies) + nodes
        table = np.array([[c.job, c.addr, c.total, int(c.worth)] for c in calls], np.int64).reshape(-1)
        self._entries, self._n = native.ptr(table), len(calls)
        self._keep = (table, calls)  # every argument block and what it points at
        self._fn = native.run_jobs()
        self._failed = np.zeros(3, np.int64)  # the failed entry; a queued run's result and nanoseconds
        self._fptr = native.ptr(self._failed)
        # the program as a queue's record (csrc/queue.c): jobs, count, failed entry, result, split, ns
        self._record = np.array([self._entries, self._n, self._fptr, self._fptr + 8, 0, self._fptr + 16], np.int64)
        self.record_address = native.ptr(self._record)

    @classmethod
    def build(
        cls, ctx: Context, inputs: Sequence[tuple[str, int, tuple[int, ...], np.dtype]], outputs: Sequence[tuple[str, int]]
    ) -> NativeProgram | None:
        """``ctx``'s one-thread plan as a program, or None when some step has no C form.

        ``inputs`` are the feeds (name, slot, shape, dtype) the program stages; ``outputs``
        (name, slot) the tensors it copies out."""
        layout = ctx.layout
        order = layout.threads or layout.streams
        if native.run_jobs() is None or len(order) != 1 or not order[0] or layout.check_finite:
            return None
        env = list(ctx.env)
        staging = []
        for name, slot, shape, dtype in inputs:
            buf = np.empty(shape, dtype)
            env[slot] = buf
            staging.append((name, buf))
        _concat_in_place(layout, order[0], env, {slot for _, slot in outputs})
        calls: list[native.NativeCall] = []
        nodes: list[int] = []
        for i in order[0]:
            step = layout.steps[i]
            form = native.native_form(step.run)
            if form is None:
                return None
            for s in step.outputs:
                if not step.planned and env[s] is None:
                    if s not in layout.fresh:
                        return None  # an output whose shape only the kernel knows
                    shape, dtype = layout.fresh[s]
                    env[s] = np.empty(shape, dtype)  # the program's own: copied out per run
            ins = [env[s] if s >= 0 else None for s in step.inputs]
            if any(s >= 0 and x is None for s, x in zip(step.inputs, ins)):
                return None  # a value bound per run that is not a feed (a variable)
            made = form(ins, [env[s] for s in step.outputs])
            if made is None:
                return None
            calls += made
            nodes += [i] * len(made)
        outs = []
        for name, slot in outputs:
            a = env[slot]
            if not isinstance(a, np.ndarray):
                return None
            outs.append((name, a))
        if not calls:
            return None
        calls, nodes = irb_fuse.fuse(calls, nodes, [a for _, a in outs])
        calls, nodes = fold_residuals(calls, nodes)
        return cls(ctx, staging, outs, calls, nodes)

    def run(self, feeds: Mapping[str, Any], split: bool) -> dict[str, np.ndarray]:
        """Stage ``feeds`` (checked: the plan's shapes and dtypes), run every job, and return
        fresh copies of the outputs. ``split`` lets the jobs worth it split over an idle core.

        Raises:
            ExecutionError: a job failed (names its node).
        """
        self.stage(feeds)
        return self.run_staged(split)

    def run_staged(self, split: bool) -> dict[str, np.ndarray]:
        """``run`` on the feeds ``stage`` copied in (a program the queue could not take)."""
        self._failed[1] = self._fn(self._entries, self._n, int(split), self._fptr)
        return self.finish()

    def stage(self, feeds: Mapping[str, Any]) -> None:
        """Point the program's copy jobs at ``feeds`` (copy the others into the program's staging
        buffers) before a run; the caller keeps ``feeds`` alive and unchanged until it has run."""
        for name, buf, copy in self._staging:
            f = feeds[name]
            if copy is None:
                np.copyto(buf, f, casting="no")
            elif type(f) is np.ndarray and f.dtype == buf.dtype and f.shape == buf.shape and f.flags.c_contiguous:
                copy.args[0] = native.ptr(f)
            else:
                np.copyto(copy.keep[0], f, casting="no")
                copy.args[0] = native.ptr(copy.keep[0])

    def pend(self, split: bool = False) -> None:
        """Mark the program not run yet (before it is queued); ``split``: the runner splits its big jobs."""
        self._failed[1] = _PENDING
        self._record[4] = split

    def queued_seconds(self) -> float:  # the last queued run's C jobs, timed by its runner
        return int(self._failed[2]) * 1e-9

    def pending(self) -> bool:
        """Whether a queued program has not run yet."""
        return int(self._failed[1]) == _PENDING

    def finish(self) -> dict[str, np.ndarray]:
        """The outputs of the last run (``run``, or queued: ``runtime.program_queue``), or its error raised."""
        r = int(self._failed[1])
        if r < 0:
            self._raise(r)
        return {name: a.copy() for name, a in self._outputs}

    def _raise(self, code: int) -> None:
        step = self._ctx.layout.steps[self._nodes[int(self._failed[0])]]
        raise ExecutionError(
            f"the compiled kernel failed with {native.ERRORS.get(code, f'error {code}')} ({code})",
            graph=self._ctx.layout.graph,
            node=step.name,
            op_type=step.op_type,
            engine=step.engine,
        )


def _join(st: Any, env: list[Any]) -> tuple[np.ndarray, int] | None:
    """A Concat step's output and axis where each input's slice of it is one block (every axis
    before the axis of size 1), its inputs distinct arrays of its dtype; else None."""
    y = env[st.outputs[0]] if st.op_type == "Concat" and len(st.outputs) == 1 else None
    ins: list[Any] = [env[s] if s >= 0 else None for s in st.inputs]
    if not isinstance(y, np.ndarray) or not y.flags.c_contiguous or not all(isinstance(x, np.ndarray) for x in ins):
        return None
    fits = [a for a in range(y.ndim) if all(x.ndim == y.ndim for x in ins) and sum(x.shape[a] for x in ins) == y.shape[a]]
    if len(fits) != 1 or any(d != 1 for d in y.shape[: fits[0]]) or len(set(st.inputs)) != len(st.inputs):
        return None
    return (y, fits[0]) if all(x.dtype == y.dtype for x in ins) else None


def _concat_in_place(layout: Any, order: Sequence[int], env: list[Any], outs: set[int]) -> None:
    """Bind each input of a Concat (every axis before its own of size 1: a slice is one block)
    made by an earlier step and read by the Concat alone to its slice of the Concat's output,
    so its producer writes there and the Concat copies nothing (SqueezeNet's fire modules: the
    two expand convs); not into another Concat's output, nor where the arena gives the
    output's bytes to another value between the first such producer and the Concat. Before
    that, chains of Concats each of whose inputs begin the next's (``chain``)."""
    steps, at = layout.steps, {i: k for k, i in enumerate(order)}
    made = {s: i for i in order for s in steps[i].outputs}
    readers: dict[int, list[int]] = {}
    for i in order:
        for s in steps[i].inputs:
            readers.setdefault(s, []).append(i)

    def bytes_taken(y: np.ndarray, first: int, last: int, mine: set[int]) -> bool:  # by a value of steps [first, last)
        busy = {s for i in order[first:last] for s in (*steps[i].inputs, *steps[i].outputs)} - mine - {-1}
        return any(isinstance(env[s], np.ndarray) and np.may_share_memory(env[s], y) for s in busy)

    def made_here(s: int) -> bool:  # made by a step that writes it (not a view op, nor a Concat), not an output
        p = made.get(s)
        return p is not None and s not in outs and steps[p].op_type != "Concat" and not _a_view(steps[p], env, env[s])

    def chain(r: int) -> set[int]:
        """The Concats before ``r`` whose inputs begin ``r``'s (DenseNet's layer i joins the
        block's input and the features of layers 1 .. i - 1; the block's last join all of them),
        each made a view of the start of ``r``'s output and every input bound to its slice of it:
        their producers write there once and no join copies anything (DenseNet-121: 721 copies,
        7.9 of 53 ms of thread CPU). Only where every input is ``made_here`` and read by the
        chain alone, and every join is read before ``r`` only and is no output; ``r``'s output
        gets bytes of its own when the arena gives them to another value in between. The
        chain's steps (none: no chain)."""
        join = _join(steps[r], env)
        if join is None:
            return set()
        (y, a), ins = join, tuple(steps[r].inputs)
        cs = [c for c in order[: at[r]] if steps[c].op_type == "Concat" and tuple(steps[c].inputs) == ins[: len(steps[c].inputs)]]
        n, head = {c: sum(env[s].shape[a] for s in steps[c].inputs) for c in cs}, (slice(None),) * a
        start = {c: y[(*head, slice(0, n[c]))] for c in cs}  # a join's output is that start of y (of one input too)
        cs = [
            c
            for c in cs
            if isinstance(z := env[steps[c].outputs[0]], np.ndarray) and (z.dtype, z.shape) == (y.dtype, start[c].shape)
        ]
        joins = {steps[c].outputs[0] for c in cs}
        if not cs or not all(made_here(s) and set(readers[s]) <= {r, *cs} for s in ins):
            return set()
        if any(s in outs or any(at[i] >= at[r] for i in readers.get(s, ())) for s in joins):
            return set()
        if bytes_taken(y, min(at[made[s]] for s in ins), at[r], joins | set(ins)):
            y = env[steps[r].outputs[0]] = np.empty_like(y)
        lo = 0
        for s in ins:
            env[s], lo = y[(*head, slice(lo, lo + env[s].shape[a]))], lo + env[s].shape[a]
        for c in cs:
            env[steps[c].outputs[0]] = y[(*head, slice(0, n[c]))]
        return {r, *cs}

    done: set[int] = set()
    for c in reversed(order):
        done |= set() if c in done else chain(c)
    for c in order:
        st, join = steps[c], None if c in done else _join(steps[c], env)
        if join is None:
            continue
        (y, a), lo, views = join, 0, {}
        for s in st.inputs:
            if made_here(s) and len(readers[s]) == 1:
                views[s] = (slice(None),) * a + (slice(lo, lo + env[s].shape[a]),)
            lo += env[s].shape[a]
        if not views or bytes_taken(y, min(at[made[s]] for s in views), at[c], set(views)):
            continue  # (bytes of its own for the output instead: GoogLeNet 1.03 -> 1.10 of ort's wall)
        for s, part in views.items():
            env[s] = y[part]


def _a_view(step: Any, env: list[Any], x: np.ndarray) -> bool:
    """Whether ``step``'s output ``x`` is its input's bytes, the step copying nothing (a view
    op: Scan's unrolled Unsqueezes); nothing would write it into a Concat's slice."""
    return any(np.may_share_memory(env[i], x) for i in step.inputs if i >= 0 and isinstance(env[i], np.ndarray))


# The conv jobs whose geometry (csrc/conv_direct.c's, G_Z its slot 23) carries a residual's address
_FOLDS = (native.JOB_CONV_DIRECT, native.JOB_CONV_T, native.JOB_WINOGRAD)


def fold_residuals(calls: list[native.NativeCall], nodes: list[int]) -> tuple[list[native.NativeCall], list[int]]:
    """Each JOB_RESIDUAL ``y = act(y + z)`` right after the conv job that wrote that y (FusedConv's
    Z: ResNet's blocks, 16 jobs and 1.6 of ResNet-50's 63 ms) folded into it: the conv's
    geometry copied with z's address and the residual's activation, so the conv adds z as it
    stores each output and applies the activation then (the same sums and roundings). Not
    where z shares y's bytes (read before y is written), nor after a conv with an activation
    of its own, nor a Winograd stage with one other than ReLU."""
    out: list[native.NativeCall] = []
    kept: list[int] = []
    relu = native_rows.epilogue("Relu")[0]
    for call, node in zip(calls, nodes):
        c, r = out[-1] if out else None, call.args
        if call.job == native.JOB_RESIDUAL and c is not None and c.job in _FOLDS:
            wino = c.job == native.JOB_WINOGRAD
            size = int(c.args[13] if wino else c.args[10])
            g = next((a for a in _arrays(c.keep) if native.ptr(a) == c.args[5] and a.size == 24), None)
            if (
                g is not None
                and not g[18]
                and not g[23]
                and r[0] == r[2] == c.args[4]
                and r[6] == size
                and abs(int(r[1]) - int(r[2])) >= 4 * size
                and (not wino or (c.args[8] == 2 and r[3] in (0, relu)))
            ):
                g = g.copy()
                g[18:21], g[23] = r[3:6], r[1]
                args = c.args.copy()
                args[5] = native.ptr(g)
                out[-1] = native.NativeCall(c.job, args, c.total, c.worth, (*c.keep, g, call.keep))
                continue
        out.append(call)
        kept.append(node)
    return out, kept


def _arrays(keep: Any) -> list[np.ndarray]:  # the arrays a call keeps, one tuple deep
    return [b for a in keep for b in (a if isinstance(a, tuple) else (a,)) if isinstance(b, np.ndarray)]
