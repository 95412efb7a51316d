"""The ``aioge`` command.

Each subcommand is a function ``cmd_<name>(args) -> int`` registered in ``_COMMANDS``;
logging is configured here and only here.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import anyio
import numpy as np

__all__ = ["main"]


def default_cache_dir() -> Path:
    """The demo's cache dir: ``$AIOGE_HOME`` or ``~/.cache/aioge``."""
    return Path(os.environ.get("AIOGE_HOME") or Path.home() / ".cache" / "aioge")


def cmd_demo(args: argparse.Namespace) -> int:
    """Build the bundled MLP and CNN, compile and run them, check them against numpy."""
    import aioge
    from aioge.examples import EXAMPLES

    names = [args.model] if args.model else list(EXAMPLES)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    (cache / "graphs").mkdir(parents=True, exist_ok=True)
    options = {"ge.graph_compiler_cache_dir": str(cache / "graphs"), "ge.op_compiler_cache_dir": _safe_dir(cache / "kernels")}
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
                print(f"{name}: {summary['nodes']} nodes {summary['nodes_per_engine']}, "
                      f"{len(summary['streams'])} streams, {summary['events']} events, arena {summary['arena_bytes']} B")
                print(f"  compile {1e3 * (t1 - t0):.1f} ms (graph cache hit: {summary['stats']['graph_cache_hit']}, "
                      f"kernels compiled {summary['stats']['kernels_compiled']}, cache hits {summary['stats']['kernel_cache_hits']})")
                per_run = (t3 - t2) / max(args.repeat - 1, 1)
                print(f"  first run {1e3 * (t2 - t1):.2f} ms, then {1e3 * per_run:.2f} ms/run; "
                      f"outputs {', '.join(f'{k}{list(v.shape)}' for k, v in outputs.items())}; "
                      f"max |aioge - numpy| = {err:.2e} {'OK' if ok else 'MISMATCH'}")

    anyio.run(go)
    print(f"cache: {cache}")
    return 1 if failures else 0


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
    """List every option: key, alias, levels, default, env fallback."""
    from aioge.options import OPTIONS

    for spec in OPTIONS.values():
        extra = f" (env {spec.env})" if spec.env else ""
        print(f"{spec.key:<28} {spec.alias or '-':<24} {'/'.join(sorted(spec.levels)):<14} default={spec.default!r}{extra}")
        print(f"    {spec.doc}")
    return 0


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="build, compile and run the bundled example graphs; check them against numpy")
    p.add_argument("--model", choices=["mlp", "cnn"], help="only this example")
    p.add_argument("--cache-dir", help="cache directory (default $AIOGE_HOME or ~/.cache/aioge)")
    p.add_argument("--repeat", type=int, default=20, help="runs per model")
    p.set_defaults(func=cmd_demo)


def _add_passes(sub: Any) -> None:
    p = sub.add_parser("passes", help="list the graph optimisation passes")
    p.set_defaults(func=cmd_passes)


def _add_options(sub: Any) -> None:
    p = sub.add_parser("options", help="list every option key, alias, level and default")
    p.set_defaults(func=cmd_options)


_COMMANDS: list[Callable[[Any], None]] = [_add_demo, _add_passes, _add_options]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aioge", description="asyncio-native graph compiler and executor (GE-style)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``aioge`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from aioge.errors import AiogeError

    try:
        return int(args.func(args))
    except AiogeError as exc:
        print(f"aioge: error: {exc}", file=sys.stderr)
        return 1


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
