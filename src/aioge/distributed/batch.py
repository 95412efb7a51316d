"""``compile_many``: many models compiled through an executor, each failure its own."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import anyio

from aioge.distributed.executor import DaskExecutor, Executor, LocalExecutor

__all__ = ["BatchResult", "compile_many", "compile_task", "run_batch"]


Shapes = Mapping[str, tuple[int, ...]]


@dataclass(slots=True, repr=False)
class BatchResult:
    """One model's outcome: the ``.om`` bytes (and where they were written) or the error.
    Its repr gives the ``.om``'s size, not its bytes."""

    model: str
    om: bytes | None = None
    error: str | None = None
    path: str | None = None
    kernels_compiled: int = 0
    kernel_cache_hits: int = 0
    compiled_keys: list[str] = field(default_factory=list)
    worker: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        parts = [
            f"{f.name}=<{len(self.om)} bytes>"
            if f.name == "om" and self.om is not None
            else f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
        ]
        return f"BatchResult({', '.join(parts)})"


async def compile_many(
    models: Sequence[str | os.PathLike[str]],
    options: Mapping[str, str] | None = None,
    client: Any = None,
    *,
    executor: Executor | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[BatchResult], None] | None = None,
    shapes: Mapping[str, Shapes] | None = None,
    external_weight: bool = False,
) -> list[BatchResult]:
    """Compile every model (``MODEL.onnx`` or ``GRAPH.py[:function]``, paths the workers can
    read) under session ``options``; results in the order of ``models``.

    Compiles run on ``executor``, else on ``client``'s Dask workers, else on local threads.
    Each worker uses the kernel cache the options name (its disk, and ``aioge.remote_cache``),
    and on a Dask cluster one scheduler-side lock per kernel key, so every kernel is compiled
    once across the cluster. A model that fails is reported in its result (``error``); the
    others go on. With ``out_dir`` each ``.om`` is written there as ``<model stem>.om`` (with
    ``external_weight``, its constants in ``weight/`` beside it, as ``ge.externalWeight=1``);
    ``progress`` is called with each result as it arrives. ``shapes`` fixes input shapes per
    model, by the model as given in ``models``: ``{"a.onnx": {"x": (1, 64)}}``.

    Raises:
        OptionError: bad ``options`` (checked here, before anything is submitted).
    """
    from aioge.options import check_options, resolve_options

    checked = check_options(options, "session")
    resolve_options(checked)
    own = executor is None
    if executor is None:
        executor = DaskExecutor(client) if client is not None else LocalExecutor()
    results: list[BatchResult | None] = [None] * len(models)
    names = [os.fspath(m) for m in models]
    on_dask = isinstance(executor, DaskExecutor)

    async def one(i: int) -> None:
        try:
            res = await executor.submit(compile_task, names[i], checked, on_dask, dict((shapes or {}).get(names[i], {})))
        except Exception as exc:  # the worker or the wire failed (its own errors come back in the result)
            res = BatchResult(names[i], error=f"{type(exc).__name__}: {exc}")
        if out_dir is not None and res.om is not None:
            res.path = await anyio.to_thread.run_sync(_write, Path(out_dir), names[i], res.om, external_weight)
        results[i] = res
        if progress is not None:
            progress(res)

    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(names)):
                tg.start_soon(one, i)
    finally:
        if own:
            await executor.aclose()
    return [r for r in results if r is not None]


def _write(out_dir: Path, name: str, om: bytes, external: bool = False) -> str:
    from aioge.plan.io import write_atomic_sync
    from aioge.plan.serialize import decode_model, save_model_sync

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(name.split(".py:")[0]).stem + (f"_{name.split('.py:')[1]}" if ".py:" in name else "")
    path = out_dir / f"{stem}.om"
    if external:  # the worker sent it whole: its constants go to weight/ beside it here
        save_model_sync(path, decode_model(om), external=True, mode=0o644)
    else:
        write_atomic_sync(path, om, mode=0o644)
    return str(path)


def compile_task(spec: str, options: Mapping[str, str], on_dask: bool = False, shapes: Shapes | None = None) -> BatchResult:
    """One model's compile, where the executor runs it (blocking; its own event loop), its
    inputs of ``shapes`` fixed. Errors of the model (load or compile) come back in the result."""
    client = None
    if on_dask:
        from distributed import get_client

        client = get_client()
    start = time.perf_counter()
    try:
        res = anyio.run(_compile_one, spec, dict(options), client, dict(shapes or {}))
    except Exception as exc:
        res = BatchResult(spec, error=f"{type(exc).__name__}: {exc}")
    res.seconds = time.perf_counter() - start
    res.worker = _worker_name()
    return res


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


async def _compile_one(spec: str, options: dict[str, str], client: Any, shapes: dict[str, tuple[int, ...]]) -> BatchResult:
    from aioge.cache.kernel_cache import KernelCache
    from aioge.cache.remote import TieredKernelStore, remote_tier_for
    from aioge.compiler.graph import compile_graph
    from aioge.distributed.cluster import ClusterKernelStore
    from aioge.options import resolve_options
    from aioge.plan.serialize import encode_model

    resolved = resolve_options(options)
    graph = await anyio.to_thread.run_sync(_load, spec, shapes)
    disk = KernelCache.from_options(resolved)
    remote = remote_tier_for(resolved)
    store: Any = disk if remote is None else TieredKernelStore(disk, remote)
    recorder = _Recorder(store) if client is None else ClusterKernelStore(store, disk, client, resolved.soc_version)
    try:
        model = await compile_graph(
            graph, _signature(graph, shapes), resolved, kernel_cache=recorder, limiter=anyio.CapacityLimiter(os.cpu_count() or 2)
        )
        om, _ = await anyio.to_thread.run_sync(encode_model, model)
    finally:
        if remote is not None:
            await remote.aclose()
    return BatchResult(
        spec,
        om=om,
        kernels_compiled=model.stats.kernels_compiled,
        kernel_cache_hits=model.stats.kernel_cache_hits,
        compiled_keys=list(recorder.compiled),
    )


def _load(spec: str, shapes: Shapes) -> Any:
    from aioge.frontends.source import load_source

    return load_source(spec, dict(shapes))[0]


def _signature(graph: Any, shapes: Shapes) -> Any:
    from aioge.compiler.specialize import input_signature
    from aioge.errors import AiogeError

    unknown = sorted(set(shapes) - {v.name for v in graph.inputs})
    if unknown:
        raise AiogeError(f"--input-shape {unknown[0]}: the model has no such input; its inputs: {[v.name for v in graph.inputs]}")
    return input_signature(graph, shapes)


class _Recorder:
    """A ``KernelStore`` that remembers which keys it published (compiled)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.flights = inner.flights
        self.compiled: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def store(self, desc: Any, view: Any) -> int:
        self.compiled.append(desc.key)
        return int(await self.inner.store(desc, view))


def run_batch(
    models: Sequence[str],
    options: Mapping[str, str],
    out_dir: str,
    scheduler: str | None,
    *,
    quiet: bool = False,
    shapes: Mapping[str, Shapes] | None = None,
    external_weight: bool = False,
    verbose: bool = False,
) -> int:
    """``aioge compile MODEL... -o DIR [--scheduler ADDRESS|local:N] [--quiet]``: compile every
    model into ``DIR/<stem>.om``, with progress on stderr (``_util.progress``: a bar on a
    terminal, a line per model as it finishes otherwise, nothing with ``quiet``) and a summary
    on stdout. A failed model's error is on stderr in any case. Dask's own loggers say only
    warnings unless ``verbose``. Returns the exit code: 1 when a model failed.

    Raises:
        AiogeError: the scheduler cannot be reached or started, or the distributed extra is missing.
    """
    import sys

    from aioge._util.progress import Progress
    from aioge.errors import AiogeError

    bar = Progress(quiet=quiet)
    executor: Executor
    if scheduler is None:
        executor = LocalExecutor()
    else:
        try:
            if not verbose:
                _quiet_dask()
            executor = DaskExecutor.start(scheduler)
        except ImportError as exc:
            raise AiogeError(f"--scheduler needs the distributed extra: pip install 'aioge[distributed]' ({exc})") from None
        except (OSError, ValueError, TimeoutError) as exc:
            raise AiogeError(f"--scheduler {scheduler}: {exc}") from None
        if executor.dashboard and not quiet:
            print(f"dask dashboard: {executor.dashboard}", file=sys.stderr)
    # A bar shows only the latest note and --quiet none: their failures are told after the batch.
    told = not (bar.quiet or bar.rich)
    try:
        with bar.task(f"compile {len(models)} models", total=len(models)) as step:

            def progress(res: BatchResult) -> None:
                what = (
                    f"-> {res.path} ({res.kernels_compiled} kernels compiled, {res.kernel_cache_hits} cached)"
                    if res.ok
                    else (f"FAILED: {res.error}" if told else "FAILED")
                )
                step(f"{res.model} {what}")

            results = anyio.run(
                lambda: compile_many(
                    models,
                    options,
                    executor=executor,
                    out_dir=out_dir,
                    progress=progress,
                    shapes=shapes,
                    external_weight=external_weight,
                )
            )
    finally:
        anyio.run(executor.aclose)
    failed = [r for r in results if not r.ok]
    if not told:
        for r in failed:
            print(f"{r.model} FAILED: {r.error}", file=sys.stderr)
    print(
        f"compiled {len(results) - len(failed)} of {len(results)} models into {out_dir}: "
        f"{sum(r.kernels_compiled for r in results)} kernels compiled, {sum(r.kernel_cache_hits for r in results)} from caches"
        + (f"; failed: {', '.join(r.model for r in failed)}" if failed else "")
    )
    return 1 if failed else 0


def _quiet_dask() -> None:
    """Dask's loggers at WARNING: its INFO lines (about 20 a batch) would bury the progress.
    Set after importing it: importing ``distributed`` sets their levels from its config."""
    import logging

    import distributed  # noqa: F401

    for name in ("distributed", "dask"):
        logging.getLogger(name).setLevel(logging.WARNING)
