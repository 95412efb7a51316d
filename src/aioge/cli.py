"""The ``aioge`` command.

Each subcommand is a function ``cmd_<name>(args) -> int`` registered in ``_COMMANDS``;
logging is configured here and only here.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable

import anyio
import numpy as np

__all__ = ["cache_stats_report", "default_cache_dir", "latency_summary", "main", "output_files"]


def default_cache_dir() -> Path:
    """The one default cache root, the library's (GE's): ``$ASCEND_CACHE_PATH``, else
    ``$HOME/atc_data``. Kernels go to ``kernel_cache/`` under it; ``aioge demo`` keeps its
    graph cache in ``graph_cache/`` beside them, where ``aioge cache`` looks by default."""
    from aioge.cache.kernel_limits import resolve_cache_root

    return Path(resolve_cache_root("", dict(os.environ)))


GRAPH_CACHE = "graph_cache"  # the graph cache's folder under the cache root (demo and ``aioge cache``)


def _os_errors_in_one_line(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command whose file system fails it (a dir this user cannot read or write, a path
    under a regular file, a name too long) prints one line naming the path and the problem
    on stderr and exits 1, never a traceback."""

    @functools.wraps(fn)
    def command(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except OSError as exc:
            print(f"aioge: error: {_os_error_text(exc)}", file=sys.stderr)
            return 1

    return command


def _os_error_text(exc: OSError) -> str:
    return f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)


@_os_errors_in_one_line
def cmd_demo(args: argparse.Namespace) -> int:
    """Build the bundled example graphs, compile and run them, check them against numpy."""
    import aioge
    from aioge.examples import EXAMPLES

    names = [args.model] if args.model else list(EXAMPLES)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    try:
        _private_dirs(cache / GRAPH_CACHE)
    except OSError as exc:
        print(
            f"aioge: error: cannot make the demo's cache dir {cache}: {_os_error_text(exc)} (choose another with --cache-dir)",
            file=sys.stderr,
        )
        return 1
    options = {"ge.graph_compiler_cache_dir": str(cache / GRAPH_CACHE), "ge.op_compiler_cache_dir": _safe_dir(cache)}
    failures = 0

    async def go() -> None:
        nonlocal failures
        async with aioge.Session(_session_options(options)) as s:
            for gid, name in enumerate(names, 1):
                graph, feeds, reference = EXAMPLES[name]()
                t0 = time.perf_counter()
                await s.add_graph(gid, graph, _graph_options({"ge.graph_key": f"demo_{name}"}))
                model = await s.build_graph(gid)
                t1 = time.perf_counter()
                outputs = await s.run_graph(gid, feeds)
                t2 = time.perf_counter()
                for _ in range(args.repeat - 1):
                    outputs = await s.run_graph(gid, feeds)
                t3 = time.perf_counter()
                ref = reference(feeds)
                err = max(float(np.max(np.abs(outputs[k] - ref[k]))) for k in ref)
                ok = all(np.allclose(outputs[k], ref[k], rtol=1e-3, atol=1e-4) for k in ref)
                failures += not ok
                summary = model.summary()
                print(
                    f"{name}: {summary['nodes']} nodes {summary['nodes_per_engine']}, "
                    f"{len(summary['streams'])} streams, {summary['events']} events, arena {summary['arena_bytes']} B"
                )
                print(
                    f"  compile {1e3 * (t1 - t0):.1f} ms (graph cache hit: {summary['stats']['graph_cache_hit']}, "
                    f"kernels compiled {summary['stats']['kernels_compiled']}, cache hits {summary['stats']['kernel_cache_hits']})"
                )
                per_run = (t3 - t2) / max(args.repeat - 1, 1)
                print(
                    f"  first run {1e3 * (t2 - t1):.2f} ms, then {1e3 * per_run:.2f} ms/run; "
                    f"outputs {', '.join(f'{k}{list(v.shape)}' for k, v in outputs.items())}; "
                    f"max |aioge - numpy| = {err:.2e} {'OK' if ok else 'MISMATCH'}"
                )

    anyio.run(go)
    print(f"cache: kernels in {cache / 'kernel_cache'}, graphs in {cache / GRAPH_CACHE} (aioge cache stats shows them)")
    return 1 if failures else 0


def _example_names() -> list[str]:
    from aioge.examples import EXAMPLES

    return list(EXAMPLES)


def _private_dirs(path: Path) -> None:
    """Make ``path`` and its missing parents owner-only (0700): the caches refuse group- or
    other-writable dirs, which ``mkdir(parents=True)`` makes under a umask of 002."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)


def _safe_dir(path: Path) -> str:
    """The kernel cache dir, if its characters are ones GE allows; else empty (the default dir)."""
    from aioge.options import _CACHE_DIR_RE

    return str(path) if _CACHE_DIR_RE.fullmatch(str(path)) else ""


def _session_options(options: dict[str, str]) -> dict[str, str]:
    """Keep the options this build knows (so the demo works while features land one by one)."""
    from aioge.options import OPTIONS

    return {k: v for k, v in options.items() if k in OPTIONS and v}


def _graph_options(options: dict[str, str]) -> dict[str, str]:
    return _session_options(options)


def cmd_passes(args: argparse.Namespace) -> int:
    """List every graph pass with its name, default and description."""
    from aioge.passes import PASSES

    width = max(len(p.name) for p in PASSES)
    for p in PASSES:
        print(f"{p.name:<{width}}  {'on ' if p.default else 'off'}  {p.doc}")
    return 0


def cmd_options(args: argparse.Namespace) -> int:
    """List every option: key, aliases, levels, the stage that reads it, default, env fallback."""
    from aioge.options import OPTIONS

    for spec in OPTIONS.values():
        extra = f" (env {spec.env})" if spec.env else ""
        aliases = ",".join(a for a in (spec.alias, *spec.also) if a) or "-"
        levels = "/".join(sorted(spec.levels))
        print(f"{spec.key:<28} {aliases:<24} {levels:<14} read by {spec.stage:<9} default={spec.default!r}{extra}")
        print(f"    {spec.doc}")
    return 0


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="build, compile and run the bundled example graphs; check them against numpy")
    p.add_argument("--model", choices=sorted(_example_names()), help="only this example")
    p.add_argument("--cache-dir", help="cache root (default $ASCEND_CACHE_PATH, then $HOME/atc_data, as the library's)")
    p.add_argument("--repeat", type=int, default=20, help="runs per model")
    p.set_defaults(func=cmd_demo)


def _add_passes(sub: Any) -> None:
    p = sub.add_parser("passes", help="list the graph optimisation passes")
    p.set_defaults(func=cmd_passes)


def _add_options(sub: Any) -> None:
    p = sub.add_parser("options", help="list every option key, alias, level and default")
    p.set_defaults(func=cmd_options)


# -- compiled models: aioge compile / run / info / cache show-index (GE's ATC) -------------


def _load_source(spec: str, shapes: dict[str, tuple[int, ...]]) -> tuple[Any, dict[str, np.ndarray], Any]:
    from aioge.frontends.source import load_source

    return load_source(spec, shapes)


def _parse_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``name:1,3,224,224`` items (also ATC's ``a:1,3;b:2``) as a dict."""
    from aioge.errors import AiogeError

    out: dict[str, tuple[int, ...]] = {}
    for item in (x for chunk in items or [] for x in chunk.split(";") if x):
        name, sep, dims = item.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.split(",") if d.strip()) if dims.strip() else ()
        except ValueError:
            raise AiogeError(f"--input-shape {item!r}: expected NAME:D1,D2,... (e.g. image:1,3,224,224)") from None
    return out


def _batch_shapes(models: list[str], items: list[str] | None) -> dict[str, dict[str, tuple[int, ...]]]:
    """A batch's ``--input-shape`` items by model: ``NAME:D1,...`` applies to every model,
    ``MODEL:NAME:D1,...`` (MODEL as given on the command line) to that model alone, and wins."""
    common: list[str] = []
    own: dict[str, list[str]] = {m: [] for m in models}
    for item in (x for chunk in items or [] for x in chunk.split(";") if x):
        model = max((m for m in models if item.startswith(m + ":")), key=len, default=None)
        (own[model] if model is not None else common).append(item[len(model) + 1 :] if model is not None else item)
    return {m: {**_parse_shapes(common), **_parse_shapes(own[m])} for m in models}


def _model_options(args: argparse.Namespace) -> dict[str, str]:
    """The session-level options the command line sets (``_graph_level`` takes the rest)."""
    return {k: v for k, v in _all_model_options(args).items() if not _graph_only(k)}


def _graph_level(args: argparse.Namespace) -> dict[str, str]:
    """The ``--option`` items only a graph can take (``ge.graph_key``): given to ``add_graph``."""
    return {k: v for k, v in _all_model_options(args).items() if _graph_only(k)}


def _graph_only(key: str) -> bool:
    from aioge.errors import OptionError
    from aioge.options import OPTIONS, canonical_key

    try:
        return "session" not in OPTIONS[canonical_key(key)].levels
    except OptionError:
        return False  # the session names the unknown key


def _all_model_options(args: argparse.Namespace) -> dict[str, str]:
    from aioge.errors import AiogeError

    options = {}
    if getattr(args, "exclude_engines", None):
        options["ge.exec.exclude_engines"] = args.exclude_engines
    if getattr(args, "optimization_switch", None):
        options["ge.optimizationSwitch"] = args.optimization_switch
    for flag, key in (
        ("precision_mode", "ge.exec.precision_mode"),
        ("precision_mode_v2", "ge.exec.precision_mode_v2"),
        ("modify_mixlist", "ge.exec.modify_mixlist"),
        ("keep_dtype", "ge.keep_dtype"),
    ):
        if getattr(args, flag, None):
            options[key] = getattr(args, flag)
    for item in getattr(args, "option", None) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise AiogeError(f"--option {item!r}: expected KEY=VALUE")
        options[key] = value
    return options


def cmd_compile(args: argparse.Namespace) -> int:
    """Compile MODEL.onnx or GRAPH.py offline into an .om (GE's ATC)."""
    import aioge
    from aioge._util.progress import Progress
    from aioge.errors import AiogeError

    if len(args.model) > 1 or args.scheduler:  # a batch: -o is a directory (aioge.distributed)
        from aioge.distributed.batch import run_batch

        if args.dynamic_batch_size or args.dynamic_dims:
            raise AiogeError("--dynamic-batch-size/--dynamic-dims compile one model at a time, not a batch")
        return run_batch(
            args.model,
            _model_options(args),
            args.output,
            args.scheduler,
            quiet=args.quiet,
            shapes=_batch_shapes(args.model, args.input_shape),
            external_weight=args.external_weight,
            verbose=args.verbose > 0,
        )
    args.model = args.model[0]
    shapes = _parse_shapes(args.input_shape)
    graph_options: dict[str, str] = dict(_graph_level(args))
    if args.dynamic_batch_size or args.dynamic_dims:
        # ATC's gears: --input-shape holds -1 where they vary; every gear is compiled into the .om
        if not any(-1 in s for s in shapes.values()):
            raise AiogeError(
                "--dynamic-batch-size/--dynamic-dims need --input-shape with -1 for the dims that vary, e.g. x:-1,16"
            )
        graph_options["ge.inputShape"] = ";".join(f"{n}:{','.join(map(str, s))}" for n, s in shapes.items())
        if args.dynamic_batch_size:
            graph_options["ge.dynamicBatchSize"] = args.dynamic_batch_size
        if args.dynamic_dims:
            graph_options["ge.dynamicDims"] = args.dynamic_dims
        shapes = {}  # the frontend keeps the model's own shapes; the gears set them
    with Progress(quiet=args.quiet).task(f"compile {args.model}", total=3) as step:
        graph, _, _ = _load_source(args.model, shapes)
        step(f"loaded ({len(graph.nodes)} nodes)")

        async def go() -> Any:
            async with aioge.Session(_model_options(args)) as s:
                await s.add_graph(1, graph, graph_options)
                model = await s.build_graph(1, shapes)
                step(f"compiled ({len(model.nodes)} nodes)")
                await model.save(args.output, external=args.external_weight)  # mode from the umask: an artefact
                step(f"saved {args.output}")
                return model

        Path(args.output).resolve().parent.mkdir(parents=True, exist_ok=True)
        try:
            model = anyio.run(go)
        except OSError as exc:
            raise AiogeError(f"{args.output}: cannot write: {exc}") from None
    summary = model.summary()
    weights = f"external under {Path(args.output).resolve().parent / 'weight'}" if args.external_weight else "inline"
    gears = f", {len(model.all_gears())} gears" if model.gears else ""
    print(
        f"compiled {args.model} -> {args.output}: {summary['nodes']} nodes {summary['nodes_per_engine']}, "
        f"{len(summary['streams'])} streams, arena {summary['arena_bytes']} B, weights {weights}{gears}, "
        f"{1e3 * model.stats.compile_seconds:.1f} ms"
    )
    return 0


def _random_feed(name: str, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    from aioge.errors import AiogeError

    if dtype.startswith(("float", "complex")):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 10, size=shape).astype(dtype)
    raise AiogeError(f"input {name!r} ({dtype}) cannot be generated; give it with --input {name}=FILE.npy")


def cmd_run(args: argparse.Namespace) -> int:
    """Run OUT.om, MODEL.onnx or GRAPH.py on inputs from .npy files (with ``--random-inputs``,
    missing ones random, seed 0)."""
    import aioge
    from aioge.compiler.specialize import input_signature
    from aioge.errors import AiogeError

    given: dict[str, np.ndarray] = {}
    for item in args.input or []:
        name, sep, file = item.partition("=")
        if not sep:
            raise AiogeError(f"--input {item!r}: expected NAME=FILE.npy")
        try:
            given[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise AiogeError(f"--input {name}: cannot read {file}: {exc}") from None
    shapes = _parse_shapes(args.input_shape)

    if args.iterations < 1 or args.warmup < 0:
        raise AiogeError(
            f"--iterations {args.iterations} --warmup {args.warmup}: expected at least 1 iteration and 0 or more warm-up runs"
        )
    # With --json, stdout is the JSON document alone: the notes on inputs go to stderr.
    note = sys.stderr if args.json else sys.stdout
    latencies: list[float] = []

    async def go() -> tuple[dict[str, np.ndarray], Any, dict[str, np.ndarray]]:
        async with aioge.Session(_model_options(args)) as s:
            ref = None
            defaults: dict[str, np.ndarray]
            if args.model.endswith(".om"):
                gid = await s.load_model(args.model)
                graph, defaults = s.compiled(gid).graph, {}
            else:
                graph, defaults, ref = _load_source(args.model, shapes)
                gid = 1
                await s.add_graph(gid, graph, _graph_level(args))
            _check_input_names(graph, given, defaults, args.random_inputs)
            known = {**shapes, **{k: v.shape for k, v in given.items()}}
            gears = s.compiled(gid).all_gears() if args.model.endswith(".om") else ()
            if len(gears) > 1:  # a geared .om: the run picks the gear; random inputs take the first that fits the rest
                sigs = [dict(m.signature) for m in gears]
                signature = next((g for g in sigs if all(g.get(k, v) == tuple(v) for k, v in known.items())), sigs[0])
            else:
                signature = dict(input_signature(graph, {k: v for k, v in known.items() if graph.has_value(k)}))
            rng = np.random.default_rng(0)
            feeds = {}
            for v in graph.inputs:
                if v.name in given:
                    feeds[v.name] = given[v.name]
                elif v.name in defaults:
                    feeds[v.name] = np.asarray(defaults[v.name])
                    print(f"input {v.name}: from the builder's example feeds {list(feeds[v.name].shape)}", file=note)
                else:
                    feeds[v.name] = _random_feed(v.name, signature[v.name], v.dtype, rng)
                    print(f"input {v.name}: not given, random {v.dtype}{list(signature[v.name])} (seed 0)", file=note)
            outputs = await s.run_graph(gid, feeds, trace=args.trace)  # compiles (not timed) and is checked below
            for _ in range(args.warmup):
                await s.run_graph(gid, feeds)
            for _ in range(args.iterations):
                t0 = time.perf_counter()
                await s.run_graph(gid, feeds)
                latencies.append(time.perf_counter() - t0)
            return outputs, ref, feeds

    outputs, ref, feeds = anyio.run(go)
    files = output_files(outputs) if args.output_dir else {}
    out_dir = Path(args.output_dir) if args.output_dir else None
    report: dict[str, Any] = {"model": args.model, "outputs": {}, "latency_ms": latency_summary(latencies, args.warmup)}
    out = sys.stderr if args.json else sys.stdout
    for name, a in outputs.items():
        stats = ""
        if a.size and a.dtype.kind in "biuf":
            stats = f" min {a.min():.6g} max {a.max():.6g} mean {a.astype(np.float64).mean():.6g}"
        saved = ""
        if out_dir is not None:
            path = out_dir / files[name]
            saved = f" -> {path}{' (replaced the file there)' if path.exists() else ''}"
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
                np.save(path, a, allow_pickle=False)
            except OSError as exc:
                raise AiogeError(f"--output-dir {out_dir}: cannot write {files[name]}: {exc}") from None
        report["outputs"][name] = {
            "dtype": str(a.dtype),
            "shape": list(a.shape),
            "file": str(out_dir / files[name]) if out_dir else None,
        }
        print(f"output {name}: {a.dtype}{list(a.shape)}{stats}{saved}", file=out)
    if ref is not None:
        expected = ref(feeds)
        err = max((float(np.max(np.abs(outputs[k] - expected[k]))) for k in expected if k in outputs), default=0.0)
        report["max_abs_error"] = err
        print(f"max |aioge - reference| = {err:.3e}", file=out)
    lat = report["latency_ms"]
    print(
        f"latency over {lat['iterations']} run(s) after {lat['warmup']} warm-up: min {lat['min']:.3f} ms, mean {lat['mean']:.3f}, "
        f"p50 {lat['p50']:.3f}, p90 {lat['p90']:.3f}, p99 {lat['p99']:.3f}, max {lat['max']:.3f}",
        file=out,
    )
    if args.trace:
        print(f"trace: {args.trace}", file=out)
    if args.json:
        print(_json(report))
    return 0


def latency_summary(seconds: list[float], warmup: int) -> dict[str, float | int]:
    """min/mean/p50/p90/p99/max of run latencies in milliseconds (as trtexec and
    onnxruntime_perf_test report them), with the run and warm-up counts."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    p50, p90, p99 = (float(x) for x in np.percentile(ms, [50, 90, 99]))
    return {
        "iterations": len(ms),
        "warmup": warmup,
        "min": float(ms.min()),
        "mean": float(ms.mean()),
        "p50": p50,
        "p90": p90,
        "p99": p99,
        "max": float(ms.max()),
    }


def _check_input_names(graph: Any, given: dict[str, np.ndarray], defaults: dict[str, Any], random_inputs: bool) -> None:
    """Every ``--input`` must name an input of the model, and every input must be given
    (or come from the builder's feeds) unless ``--random-inputs``; as trtexec and
    onnxruntime_perf_test do, a misspelt name is an error, never a silently random input.

    Raises:
        AiogeError: an unknown name or a missing input (naming the model's inputs).
    """
    from aioge.errors import AiogeError

    names = [v.name for v in graph.inputs]
    listed = ", ".join(names) or "none"
    unknown = [n for n in given if n not in names]
    missing = [n for n in names if n not in given and n not in defaults]
    if unknown:
        also = f" (not given: {', '.join(missing)})" if missing else ""
        raise AiogeError(f"--input {', '.join(unknown)}: the model has no such input; its inputs are: {listed}{also}")
    if missing and not random_inputs:
        raise AiogeError(
            f"input {', '.join(missing)} not given: pass --input NAME=FILE.npy for each "
            f"(the model's inputs are: {listed}), or --random-inputs"
        )


def output_files(outputs: dict[str, Any]) -> dict[str, str]:
    """The ``.npy`` file name of each output: its name percent-encoded (``a/b`` ->
    ``a%2Fb.npy``), so names map one to one onto files and back (``urllib.parse.unquote``).

    Raises:
        AiogeError: two names give one file (cannot happen with the escape; checked so that
            nothing is ever overwritten silently).
    """
    from urllib.parse import quote

    from aioge.errors import AiogeError

    files = {name: quote(name, safe="") + ".npy" for name in outputs}
    if len(set(files.values())) != len(files):
        raise AiogeError(f"--output-dir: outputs {sorted(files)} do not have distinct file names")
    return files


def cmd_info(args: argparse.Namespace) -> int:
    """Print an .om's summary: nodes per engine and stream, arena bytes, versions."""
    from aioge.errors import ModelFormatError
    from aioge.plan import io
    from aioge.plan.serialize import decode_meta, decode_model

    try:
        data = io.read_bytes_sync(args.model)
    except OSError as exc:
        raise ModelFormatError(f"cannot read: {exc.strerror}", path=args.model) from None
    if not data.startswith(io.MAGIC):
        hint = (
            f"; compile it first: aioge compile {args.model} -o MODEL.om" if args.model.endswith((".onnx", ".pb", ".py")) else ""
        )
        raise ModelFormatError(f"not an .om file (a model compiled by aioge compile){hint}", path=args.model)
    meta = decode_meta(data, path=args.model)
    model = decode_model(data, path=args.model)
    summary = model.summary()
    summary.pop("stats")
    info = {
        **summary,
        "file": args.model,
        "fingerprint": meta["fingerprint"],
        "signature": meta["signature"],
        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(meta["created"])),
        "weights": "external" if meta["external"] else "inline",
        "compile": meta["stats"],
        "options": meta["options"],
        "inputs": [_io_info(i) for i in model.get_inputs()],
        "outputs": [_io_info(o) for o in model.get_outputs()],
        # GE's gears: every input signature the .om was compiled for (inputs in the graph's order)
        "gears": [{n: list(shape) for n, shape in m.signature} for m in model.all_gears()] if model.gears else [],
    }
    if model.gears:  # a geared dim shows as -1, as KServe metadata shows it
        from aioge.serving.gears import gear_shapes

        geared = gear_shapes(model)
        for v in (*info["inputs"], *info["outputs"]):
            if v["name"] in geared:
                v["shape"] = list(geared[v["name"]])
    if args.json:
        print(_json(info))
        return 0
    print(f"{args.model}: graph {info['graph']!r}, {info['nodes']} nodes, compiled {info['created']}")
    for what in ("inputs", "outputs"):
        listed = ", ".join(
            f"{v['name']} {v.get('container', '')}{'(' if 'container' in v else ''}{v['dtype']}{list(v['shape'] or [])}"
            f"{')' if 'container' in v else ''}"
            for v in info[what]
        )
        print(f"  {what}: {listed}")
    if info["gears"]:
        listed = "; ".join(", ".join(f"{n}{shape}" for n, shape in gear.items()) for gear in info["gears"])
        print(f"  gears ({len(info['gears'])}): {listed}")
    print(f"  nodes per engine: {info['nodes_per_engine']}")
    lowered = {n.name: p for n, p in zip(model.nodes, model.precisions()) if p in ("bf16", "fp16")}
    print(
        f"  precision ({info['options'].get('ge.exec.precision_mode_v2') or info['options'].get('ge.exec.precision_mode', '')}): "
        f"{info['precision']}" + (f"; lowered: {', '.join(lowered)}" if 0 < len(lowered) <= 8 else "")
    )
    for st in info["streams"]:
        print(f"  stream {st['id']} ({st['engine']}): {st['nodes']} nodes")
    print(
        f"  events: {info['events']}; arena {info['arena_bytes']} B (lower bound {info['lower_bound_bytes']}, "
        f"no reuse {info['no_reuse_bytes']}); weights {info['weights']}"
    )
    print(f"  versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}")
    return 0


def _io_info(io: Any) -> dict[str, Any]:
    """An input's or output's name, shape and dtype, and its container when it is not a tensor."""
    d = dataclasses.asdict(io)
    if d.get("container") == "tensor":
        del d["container"]
    return d


def cmd_show_index(args: argparse.Namespace) -> int:
    """Print a graph cache index (<key>.idx) as JSON."""
    from aioge.cache.graph_cache import read_index

    print(_json(read_index(args.file)))
    return 0


def _cache_commands(sub: Any) -> Any:
    """The ``aioge cache`` subcommand group, made once; every cache command adds itself to it."""
    group = getattr(sub, "_aioge_cache_group", None)
    if group is None:
        p = sub.add_parser("cache", help="inspect the disk caches")
        group = p.add_subparsers(dest="cache_command", metavar="CACHE_COMMAND")
        p.set_defaults(func=lambda args: _print_help(p))  # `aioge cache` alone: its own help, not the top level's
        sub._aioge_cache_group = group
    return group


def _add_model_commands(sub: Any) -> None:
    def common(p: Any) -> None:
        p.add_argument("--input-shape", action="append", metavar="NAME:D1,D2,...", help="fix an input's shape (repeatable)")
        p.add_argument("--exclude-engines", metavar="E1|E2", help="engines not to use (ge.exec.exclude_engines)")
        p.add_argument("--optimization-switch", metavar="PASS:off;...", help="switch passes (ge.optimizationSwitch)")
        p.add_argument(
            "--precision-mode", metavar="MODE", help="GE's precision mode (ge.exec.precision_mode), e.g. allow_fp32_to_bf16"
        )
        p.add_argument("--precision-mode-v2", metavar="MODE", help="the same by GE's newer names (ge.exec.precision_mode_v2)")
        p.add_argument("--modify-mixlist", metavar="FILE.json", help="the mixed modes' list edits (ge.exec.modify_mixlist)")
        p.add_argument("--keep-dtype", metavar="FILE", help="nodes kept float32: names, OpType::X (ge.keep_dtype)")
        p.add_argument("--option", action="append", metavar="KEY=VALUE", help="any other option (repeatable)")

    p = sub.add_parser(
        "compile", help="compile MODEL.onnx, MODEL.pb, MODEL.keras, a SavedModel or GRAPH.py offline into an .om (GE's ATC)"
    )
    p.add_argument(
        "model",
        nargs="+",
        help="MODEL.onnx, MODEL.pb (frozen TensorFlow GraphDef), MODEL.keras, a SavedModel directory, or GRAPH.py[:function] "
        "returning a Graph (default function build); several: a batch into the directory -o (--input-shape "
        "MODEL:NAME:D1,... for one model's input; NAME:D1,... for every model's)",
    )
    p.add_argument("-o", "--output", required=True, help="the .om to write (a directory for a batch)")
    p.add_argument("--scheduler", metavar="ADDRESS|local:N", help="compile the batch on a Dask cluster (aioge[distributed])")
    p.add_argument("--external-weight", action="store_true", help="constants in weight/ beside the .om (ge.externalWeight=1)")
    gears = p.add_mutually_exclusive_group()
    gears.add_argument(
        "--dynamic-batch-size",
        metavar="1,2,4,8",
        help="batch gears (ge.dynamicBatchSize): -1 in --input-shape's dim 0 takes each size; all in one .om",
    )
    gears.add_argument(
        "--dynamic-dims",
        metavar="4;8;16",
        help="dims gears (ge.dynamicDims): each ';' item fills every -1 of --input-shape; all in one .om",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    common(p)
    p.set_defaults(func=cmd_compile)
    p = sub.add_parser("run", help="run an .om (or MODEL.onnx, GRAPH.py) on inputs from .npy files")
    p.add_argument("model", help="OUT.om, MODEL.onnx or GRAPH.py[:function]")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input (repeatable); each must name an input")
    p.add_argument("--random-inputs", action="store_true", help="fill inputs not given with random data (seed 0)")
    p.add_argument("--output-dir", help="save every output as NAME.npy here (NAME percent-encoded: a/b -> a%%2Fb.npy)")
    p.add_argument("--trace", help="write a Chrome trace of the run here")
    p.add_argument(
        "--iterations", type=int, default=1, metavar="N", help="timed runs after the first (default 1): min/mean/p50/p90/p99"
    )
    p.add_argument("--warmup", type=int, default=0, metavar="K", help="untimed runs before the timed ones (default 0)")
    p.add_argument("--json", action="store_true", help="print outputs, error and latency as JSON on stdout (notes go to stderr)")
    common(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("info", help="print an .om's summary: nodes per engine and stream, arena bytes, versions")
    p.add_argument("model", help="the .om")
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=cmd_info)
    p = _cache_commands(sub).add_parser("show-index", help="print a graph cache index (<key>.idx) as JSON")
    p.add_argument("file", help="the .idx file")
    p.set_defaults(func=cmd_show_index)


# -- the kernel cache: aioge cache stats / prune / clear --------------------------------------


def _cache_roots(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """The kernel cache root and the graph cache dir the cache commands work on: ``--dir``
    (else the default root) and ``--graph-dir`` (else ``graph_cache/`` under the root, if it
    is there).

    Raises:
        AiogeError: a ``--dir`` or ``--graph-dir`` given that is not a directory.
    """
    from aioge.errors import AiogeError

    for flag, value in (("--dir", args.dir), ("--graph-dir", args.graph_dir)):
        if not value:
            continue
        try:
            is_dir = stat.S_ISDIR(os.stat(value).st_mode)
        except FileNotFoundError:
            raise AiogeError(f"{flag} {value}: no such directory") from None
        except OSError as exc:  # a path under a regular file, a name too long, no permission
            raise AiogeError(f"{flag} {value}: {exc.strerror or exc}") from None
        if not is_dir:
            raise AiogeError(f"{flag} {value}: not a directory")
    root = Path(args.dir) if args.dir else default_cache_dir()
    graphs = Path(args.graph_dir) if args.graph_dir else root / GRAPH_CACHE
    return root, graphs if graphs.is_dir() else None


def cache_stats_report(args: argparse.Namespace) -> dict[str, Any]:
    """Every cache tier's report by tier name: ``kernel``, ``remote`` (its ``url`` None when none is set) and ``graph`` (None when there is none)."""
    from aioge.cache.graph_tools import graph_cache_report
    from aioge.cache.kernel_cache import cache_report
    from aioge.cache.remote import remote_report

    root, graphs = _cache_roots(args)
    return {
        "kernel": cache_report(root),
        "graph": graph_cache_report(graphs) if graphs else None,
        "remote": remote_report(root),
    }  # the second tier, its own section


@_os_errors_in_one_line
def cmd_cache_stats(args: argparse.Namespace) -> int:
    """Per tier: entries and bytes; for kernels per soc the hits, misses, hit ratio and
    compiles since a time (``--zero`` restarts them), the limits and their sources."""
    from aioge.cache.kernel_cache import cache_for_dir
    from aioge.cache.remote import format_remote_report

    if args.zero:
        from aioge.cache.graph_tools import zero_graph_stats

        root, graphs = _cache_roots(args)
        for cache in cache_for_dir(root):
            cache.zero_stats_sync()
        if graphs is not None:
            zero_graph_stats(graphs)
    tiers = cache_stats_report(args)
    if args.json:
        print(_json(tiers))
        return 0
    report = tiers["kernel"]
    lim = report["limits"]
    print(f"kernel cache: {report['kernel_cache']}")
    print(
        f"  max_op_cache_size: {lim['max_op_cache_size_mb']} MB ({lim['max_source']})"
        f"{'  (aging off)' if not lim['aging'] else ''}"
    )
    print(f"  remain_cache_size_ratio: {lim['remain_cache_size_ratio']}% ({lim['ratio_source']})")
    if not report["socs"]:
        print("  no kernels cached")
    remote = {r["soc"]: r for r in tiers["remote"]["socs"]}
    for s in report["socs"]:
        ratio = "n/a" if s["hit_ratio"] is None else f"{100 * s['hit_ratio']:.1f}%"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["since"])) if s["since"] else "never"
        # A disk miss the remote tier served is a local miss: say how many, or 0% reads as all compiled.
        served = remote.get(s["soc"], {}).get("hits", 0)
        print(
            f"  {s['soc']}: {s['entries']} entries, {s['bytes']} bytes ({s['current_generation_entries']} in generation "
            f"{s['generation']}); hits {s['hits']}, misses {s['misses']}, hit ratio {ratio}, compiles {s['compiles']}, "
            f"invalid {s['invalid']}{f', served by remote: {served}' if served else ''}; since {since}"
        )
    print("\n".join(format_remote_report(tiers["remote"])))
    graph = tiers["graph"]
    if graph is None:
        print("graph cache: none (--graph-dir DIR names one)")
        return 0
    print(f"graph cache: {graph['dir']}")
    for k in graph["keys"]:
        print(
            f"  {k['key']}: {k['entries']} entries, {k['models']} models, {k['bytes']} bytes; hits {k['hits']}, misses {k['misses']}"
        )
    ratio = "n/a" if graph["hit_ratio"] is None else f"{100 * graph['hit_ratio']:.1f}%"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(graph["since"])) if graph["since"] else "never"
    print(
        f"  {graph['entries']} entries, {graph['bytes']} bytes (weights: {graph['weights']} files, {graph['weight_bytes']} bytes); "
        f"hits {graph['hits']}, misses {graph['misses']}, hit ratio {ratio}; since {since}"
    )
    return 0


@_os_errors_in_one_line
def cmd_cache_prune(args: argparse.Namespace) -> int:
    """Age every soc folder now (entries idle 30 minutes, least recently used first); drop the
    graph cache's models no index names."""
    from aioge.cache.graph_tools import prune_graph_cache
    from aioge.cache.kernel_cache import cache_for_dir

    root, graphs = _cache_roots(args)
    caches = cache_for_dir(root, args.soc)
    for cache in caches:
        r = cache.age_sync()
        print(
            f"{cache.soc_dir}: removed {len(r.removed)} entries, {r.bytes_before} -> {r.bytes_after} bytes"
            f"{' (' + r.skipped_reason + ')' if r.skipped_reason else ''}"
        )
    if not caches:
        print("no kernel cache folders")
    if graphs is not None:
        print(f"{graphs}: removed {len(prune_graph_cache(graphs))} unindexed model files")
    return 0


@_os_errors_in_one_line
def cmd_cache_clear(args: argparse.Namespace) -> int:
    """Delete aioge's kernel cache files (every soc, or --soc) and graph cache files; files
    aioge did not write stay, and so do the statistics (``stats --zero`` restarts them)."""
    from aioge.cache.graph_tools import clear_graph_cache
    from aioge.cache.kernel_cache import cache_for_dir

    root, graphs = _cache_roots(args)
    caches = cache_for_dir(root, args.soc)
    for cache in caches:
        print(f"{cache.soc_dir}: removed {cache.clear_sync()} files")
    if not caches:
        print("no kernel cache folders")
    if graphs is not None and not args.soc:
        print(f"{graphs}: removed {clear_graph_cache(graphs)} files")
    return 0


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _add_kernel_cache_commands(sub: Any) -> None:
    group = _cache_commands(sub)

    def dirs(p: Any) -> None:
        p.add_argument("--dir", help="cache root (default $ASCEND_CACHE_PATH, then $HOME/atc_data)")
        p.add_argument(
            "--graph-dir", help=f"graph cache dir (ge.graph_compiler_cache_dir; default ROOT/{GRAPH_CACHE} if present)"
        )

    p = group.add_parser("stats", help="per cache tier: entries, bytes; kernels: hits, misses, hit ratio, since, limits")
    dirs(p)
    p.add_argument("--json", action="store_true", help="as JSON, one object per tier")
    p.add_argument("-z", "--zero", action="store_true", help="zero the counters first (as ccache -z)")
    p.set_defaults(func=cmd_cache_stats)
    p = group.add_parser("prune", help="age the kernel cache now; drop unindexed graph cache models")
    dirs(p)
    p.add_argument("--soc", help="only this soc folder")
    p.set_defaults(func=cmd_cache_prune)
    p = group.add_parser("clear", help="delete aioge's kernel and graph cache files (the counters stay)")
    dirs(p)
    p.add_argument("--soc", help="only this soc folder (and not the graph cache)")
    p.set_defaults(func=cmd_cache_clear)


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark suite; write RESULTS.md and results.json; exit 0 even when a target is missed."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("aioge: error: the benchmarks need onnxruntime as a yardstick: pip install 'aioge[bench]'", file=sys.stderr)
        return 1
    if args.serve:
        from aioge.benchmarks.serve_bench import bench_from_args

        return bench_from_args(args)
    from aioge.benchmarks import config_from_args
    from aioge.benchmarks.suite import run_suite, write_results

    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"aioge: error: {exc}", file=sys.stderr)
        return 2
    from aioge._util.progress import Progress
    from aioge.benchmarks.workloads import ALL

    sectioned = cfg.frontends or cfg.states or cfg.precision  # those sections have rows of their own
    total = None if sectioned else len(cfg.workloads or ALL)
    with Progress(quiet=args.quiet).task("bench", total=total) as step:
        results = run_suite(cfg, on_workload=step)
    if args.json_only:
        Path(args.json_only).write_text(json.dumps(results, default=float))
        return 0
    md, js = write_results(results, args.output_dir)
    for t in results["targets"]:
        figure = "n/a" if t["figure"] is None else f"{t['figure']:.3f}"
        print(f"{t['status']:4s}  {t['target']}: {figure} (bound {t['bound']})")
    print(f"wrote {md} and {js}")
    return 0


def _add_bench(sub: Any) -> None:
    from aioge.benchmarks import add_arguments

    p = sub.add_parser("bench", help="run the benchmark suite against onnxruntime, onnx.reference and numpy")
    add_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_bench)


def _serve_options(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """``aioge serve``'s (session options, graph options) from --option and the batching flags."""
    from aioge.errors import OptionError
    from aioge.options import OPTIONS, canonical_key

    options = {k: v for k, v in _all_model_options(args).items() if ":" not in k}  # NAME:KEY: _serve_model_options
    if args.batch_max_rows is not None:  # only when given: the keys are the batcher's
        options["aioge.batch_max_rows"] = str(args.batch_max_rows)
    if args.batch_max_delay_us is not None:
        options["aioge.batch_max_delay_us"] = str(args.batch_max_delay_us)

    # Keys a Session takes go to the one Session (so they reach .om models too); graph-only
    # keys go to every add_graph of an .onnx model.
    def levels(key: str) -> frozenset[str]:
        try:
            return OPTIONS[canonical_key(key)].levels
        except OptionError:  # unknown: left to the graph options' check, which names it
            return frozenset({"graph"})

    session = {k: v for k, v in options.items() if "session" in levels(k)}
    graph = {k: v for k, v in options.items() if k not in session}
    return session, graph


def _serve_model_options(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """``aioge serve``'s per-model graph options: ``--option NAME:KEY=VALUE`` for model NAME alone."""
    out: dict[str, dict[str, str]] = {}
    for key, value in _all_model_options(args).items():
        name, sep, key = key.partition(":")
        if sep:
            out.setdefault(name, {})[key] = value
    return out


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve .onnx and .om files over the Open Inference Protocol (KServe v2 REST) until SIGTERM."""
    import socket

    from aioge.errors import AiogeError

    try:
        from aioge.server import SessionBackend, create_app, serve, serve_workers
    except ImportError as exc:
        raise AiogeError(f"aioge serve needs the serve extra: pip install 'aioge[serve]' ({exc})") from None
    for flag in ("keep_alive_timeout", "read_timeout", "graceful_seconds"):
        if not getattr(args, flag) > 0:
            raise AiogeError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected a number of seconds above 0")
    if args.workers < 1:
        raise AiogeError(f"--workers {args.workers}: expected 1 or more")
    if args.workers > 1 and args.grpc_port is not None:
        raise AiogeError("--grpc-port serves from one process: give it without --workers, or run a second aioge serve")
    if args.grpc_port is not None and not 0 < args.grpc_port < 65536:
        raise AiogeError(f"--grpc-port {args.grpc_port}: expected a port from 1 to 65535")
    for flag in ("max_decoding", "max_inflight", "max_body_bytes"):
        if getattr(args, flag) < 1:
            raise AiogeError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected 1 or more")
    session, graph = _serve_options(args)
    per_model = _serve_model_options(args)
    if args.model_repository is not None and (graph or per_model):
        given = sorted(graph) + [f"{n}:{k}" for n, keys in per_model.items() for k in keys]
        raise AiogeError(
            f"--model-repository: graph options ({', '.join(given)}) go in each model's config.toml "
            "([options], [dynamic_batching]), so each applies to its own model"
        )
    if args.model_repository is None and not args.model:
        raise AiogeError("aioge serve: give MODEL.onnx / MODEL.om files or --model-repository DIR")
    app = create_app(
        args.model,
        SessionBackend(session, graph, per_model),
        repository=args.model_repository,
        max_body_bytes=args.max_body_bytes,
        max_inflight=args.max_inflight,
        max_decoding=args.max_decoding,
        access_log=args.access_log,
        load=(args.load_model or []) if args.model_control_mode == "explicit" else None,
        grpc=None if args.grpc_port is None else (args.host, args.grpc_port),
        grpc_grace=args.graceful_seconds,
    )
    unknown = sorted(set(per_model) - set(app.state.models))
    if unknown:
        raise AiogeError(f"--option {unknown[0]}:KEY=VALUE: no model {unknown[0]!r}; served: {sorted(app.state.models)}")
    if args.load_model and args.model_control_mode != "explicit":
        raise AiogeError("--load-model goes with --model-control-mode explicit (otherwise every model loads)")
    if args.grpc_port is not None:
        from aioge.serving.kserve_grpc import check_port

        check_port(args.host, args.grpc_port)
    if args.access_log:  # INFO lines of its own logger reach stderr whatever -v says
        logging.getLogger("aioge.access").setLevel(logging.INFO)
    if args.worker_fd is not None:  # one of --workers N: log lines name it; the parent printed the banner
        for handler in logging.getLogger().handlers:
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s [worker %(process)d]: %(message)s"))
    else:
        print(
            f"aioge serve: {', '.join(sorted(app.state.models))} on http://{args.host}:{args.port} (metrics at /metrics)"
            + ("" if args.grpc_port is None else f", gRPC on {args.host}:{args.grpc_port}")
            + (f", {args.workers} workers" if args.workers > 1 else ""),
            flush=True,
        )
    if args.workers > 1 and args.worker_fd is None:
        serve_workers(args.argv, args.host, args.port, args.workers, graceful_seconds=args.graceful_seconds)
        return 0
    failures = app.state.load_failures
    # a worker whose parent died (SIGKILL) drains and exits, not serves on orphaned
    parent = os.getppid() if args.worker_parent is None else args.worker_parent
    serve(
        app,
        args.host,
        args.port,
        graceful_seconds=args.graceful_seconds,
        keep_alive=args.keep_alive_timeout,
        read_timeout=args.read_timeout,
        stop_when=lambda: (args.strict and bool(failures)) or (args.worker_fd is not None and os.getppid() != parent),
        sock=None if args.worker_fd is None else socket.socket(fileno=args.worker_fd),
    )
    if args.strict and failures:
        raise AiogeError(
            "--strict: stopped, a model failed to load: "
            + "; ".join(f"{m.name} version {m.version} ({m.path}): {m.error}" for m in failures)
        )
    return 0


def _add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="serve .onnx/.om models over the Open Inference Protocol (KServe v2 REST) with Prometheus metrics"
    )
    p.add_argument("model", nargs="*", help="MODEL.onnx or MODEL.om files; each is served under its file stem")
    p.add_argument(
        "--model-repository",
        metavar="DIR",
        help="serve a Triton-style model repository: DIR/<model>/<version>/model.onnx (or model.om) and an optional "
        "DIR/<model>/config.toml with its inputs, gears, batching, options and version policy (see the README)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit non-zero when a model fails to load (Triton's --exit-on-error); by default the others serve",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="also serve the KServe v2 gRPC service (tritonclient.grpc; Triton uses 8001) on this port; default: off",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes accepting on the one port, each with its own Session (the caches on disk are shared: "
        "one compiles, the others load). SIGTERM/Ctrl-C drains them all; a worker that dies stops the rest and "
        "the command exits 1 (no restart). Not with --grpc-port. Default 1",
    )
    p.add_argument("--worker-fd", type=int, default=None, help=argparse.SUPPRESS)  # set by --workers for its workers
    p.add_argument("--worker-parent", type=int, default=None, help=argparse.SUPPRESS)  # and the pid they serve for
    p.add_argument(
        "--batch-max-rows", type=int, default=None, help="dynamic batching: most rows stacked into one run (aioge.batch_max_rows)"
    )
    p.add_argument(
        "--batch-max-delay-us",
        type=int,
        default=None,
        help="dynamic batching: longest a request waits for others, in us (aioge.batch_max_delay_us)",
    )
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="an option (GE key or ir_option alias); graph-level ones go to every model's add_graph, or with "
        "NAME:KEY=VALUE to model NAME alone; repeatable",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=64 << 20,
        help="larger request bodies get 413, from their Content-Length before they are read (default 64 MiB; less "
        "for a model with static inputs: 64 KiB + 40 B a value); a JSON part with far more items than its shapes "
        "declare gets 413 before it is decoded",
    )
    p.add_argument("--max-inflight", type=int, default=1024, help="inferences running at once; the rest queue (default 1024)")
    p.add_argument(
        "--max-decoding", type=int, default=2, help="request bodies over 64 KiB decoded at once; the rest queue (default 2)"
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="close a connection idle this long, before its first request or between requests (default 5)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="close a connection whose request line and headers have not all arrived this long after their first "
        "byte, or whose body stops arriving for this long (default 30)",
    )
    p.add_argument(
        "--graceful-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM or Ctrl-C, how long in-flight requests may take (a second Ctrl-C stops at once); exit 0",
    )
    p.add_argument(
        "--model-control-mode",
        choices=["none", "explicit"],
        default="none",
        help="none: every model loads at start; explicit (Triton's): only --load-model ones, the others on "
        "POST /v2/repository/models/NAME/load (load and unload work in both modes)",
    )
    p.add_argument("--load-model", action="append", metavar="NAME", help="with --model-control-mode explicit: load at start")
    p.add_argument(
        "--no-access-log",
        dest="access_log",
        action="store_false",
        help="no access log (by default one line per request on stderr: client, request, status, bytes, ms)",
    )
    p.set_defaults(func=cmd_serve)


_COMMANDS: list[Callable[[Any], None]] = [
    _add_demo,
    _add_passes,
    _add_options,
    _add_model_commands,
    _add_kernel_cache_commands,
    _add_bench,
    _add_serve,
]


class _Version(argparse.Action):
    """``--version``: the package's and, looked up only when asked, the compiled tier's."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from aioge import __version__
        from aioge.kernels import native

        print(f"aioge {__version__} ({native.describe()})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aioge", description="asyncio-native graph compiler and executor (GE-style)")
    parser.add_argument("--version", action=_Version, help="print the version and whether the compiled kernels run")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``aioge`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # aioge serve --workers runs its workers with it
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.captureWarnings(True)  # a library warning is one "WARNING py.warnings: ..." line, not a source dump
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from aioge.errors import AiogeError

    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, not at exit: a reader that left (| head) is handled below
    except AiogeError as exc:
        if getattr(args, "json", False):  # --json: stdout is still one JSON document, the error's
            model = getattr(args, "model", None)
            print(_json({"model": model, "error": {"type": type(exc).__name__, "message": str(exc)}}))
        print(f"aioge: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader of stdout closed early (aioge info --json X.om | head). As the Python docs
        # advise (signal module, "Note on SIGPIPE"): point stdout at devnull so the flush at
        # exit cannot raise again, and exit 1, with no traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return code


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
