"""aioge's benchmark suite: aioge beside onnxruntime, ``onnx.reference`` and numpy by hand.

    aioge bench [--output-dir bench] [--quick] [--workloads real,resnet50,mlp,...]

``workloads`` builds the cases (``real_models`` the real-weights ones, exported with torch), ``measure`` times them, ``suite`` runs everything, checks the
targets and writes ``RESULTS.md`` and ``results.json``. onnxruntime is a yardstick only: it is
imported here and nowhere else in the package.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aioge.benchmarks.suite import SuiteConfig

__all__ = ["add_arguments", "config_from_args"]  # run_suite, write_results: aioge.benchmarks.suite


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``aioge bench`` arguments (``aioge.cli`` adds them to its ``bench`` command)."""
    p.add_argument("--output-dir", default="bench", help="where RESULTS.md and results.json go (default: ./bench)")
    p.add_argument(
        "--workloads",
        default="",
        help="comma-separated workloads or groups: real, light, light-nodup, builder, micro (default: all)",
    )
    p.add_argument("--quick", action="store_true", help="fewer rounds and runs, concurrency 1/4/64 on mlp and squeezenet only")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--concurrency", default="1,4,64")
    p.add_argument("--concurrency-workloads", default=None)
    p.add_argument(
        "--devices",
        type=int,
        default=None,
        help="device processes for the top concurrency level's second measurement (default: the cores; 0: skip)",
    )
    p.add_argument("--chain", type=int, default=1000)
    p.add_argument(
        "--startup-models",
        default="resnet50,resnet18,bert_base",
        help="comma-separated models for the fresh-process start-up section: light/ or real-weights names, or .onnx paths",
    )
    p.add_argument("--no-reference", action="store_true", help="skip onnx.reference")
    p.add_argument("--no-concurrency", action="store_true")
    p.add_argument("--no-startup", action="store_true")
    p.add_argument("--no-blas-variant", action="store_true", help="do not rerun light/ with OPENBLAS_* unset")
    p.add_argument(
        "--serving-workloads", default=None, help="builder models for the serving section (default: mlp,cnn,transformer)"
    )
    p.add_argument("--no-serving", action="store_true", help="skip the serving section (concurrent single-row clients)")
    p.add_argument(
        "--frontends",
        default="",
        help="front-end section (issue 41): tf,torch (aioge.load_tf vs tf.function; torch.compile aioge vs eager and inductor)",
    )
    p.add_argument("--frontends-only", action="store_true", help="run the front-end section alone")
    p.add_argument(
        "--torch-models", default=None, help="torch models of --frontends (default: all but mlp; see frontends.TORCH_MODELS)"
    )
    p.add_argument("--tf-models", default=None, help="tf models of --frontends (default: all; see frontends.TF_MODELS)")
    p.add_argument(
        "--states",
        default="",
        help="machine-states section (issue 42): quiet,busy1,busy4 (each side alone in its own process, beside N busy ones)",
    )
    p.add_argument(
        "--states-models",
        default=None,
        help="real-weights models for --states (default: every one in quiet, five of them in the busy states)",
    )
    p.add_argument("--states-only", action="store_true", help="run the machine-states section alone")
    p.add_argument("--states-pause-ms", type=float, default=0.0, help="pause before each timed run of --states (sporadic calls)")
    p.add_argument(
        "--precision",
        default="",
        help="precision section (issue 39): 'all' or comma-separated GE precision modes, over --precision-models",
    )
    p.add_argument(
        "--precision-models", default="resnet18,vit_b_16,bert_base", help="real-weights models of the precision section"
    )
    p.add_argument("--precision-only", action="store_true", help="run the precision section alone")
    p.add_argument("--json-only", metavar="PATH", default=None, help="write the raw figures to PATH, no RESULTS.md")
    p.add_argument(
        "--serve",
        action="store_true",
        help="instead: `aioge serve` over HTTP with --serve-clients concurrent clients beside onnxruntime behind the same server (and MLServer: --mlserver-python)",
    )
    p.add_argument("--serve-clients", type=int, default=200)
    p.add_argument(
        "--serve-client-procs",
        default="4",
        help="load generator processes the clients are spread over; a list (1,2,4): a run of each on every server",
    )
    p.add_argument("--serve-total", type=int, default=4000, help="requests per server (bounded also by --serve-seconds)")
    p.add_argument("--serve-seconds", type=float, default=30.0)
    p.add_argument("--serve-workloads", default="mlp,cnn")
    p.add_argument("--serve-workers", default="1,2", help="an `aioge serve --workers N` arm for each N")
    p.add_argument(
        "--mlserver-python",
        default=None,
        help="a python with mlserver and onnxruntime (a venv of its own): adds MLServer arms, adaptive batching off and on",
    )
    p.add_argument("--serve-args", default="", help="extra `aioge serve` flags, space-separated (e.g. '--batch-max-rows 64')")


def config_from_args(args: argparse.Namespace) -> SuiteConfig:
    """A SuiteConfig from parsed ``aioge bench`` arguments (ValueError on bad values)."""
    from aioge.benchmarks.suite import SuiteConfig

    cfg = SuiteConfig(
        workloads=[w for w in args.workloads.split(",") if w],
        concurrency=tuple(int(c) for c in args.concurrency.split(",") if c),
        reference=not args.no_reference,
        startup_models=[] if args.no_startup else [m for m in args.startup_models.split(",") if m],
        blas_variant=not args.no_blas_variant,
        chain=args.chain,
        frontends=[f for f in args.frontends.split(",") if f],
        frontends_only=args.frontends_only,
        states=[s for s in args.states.split(",") if s],
        states_only=args.states_only,
        states_pause_ms=args.states_pause_ms,
        precision=_modes(args.precision),
        precision_models=[m for m in args.precision_models.split(",") if m],
        precision_only=args.precision_only,
    )
    if args.torch_models is not None:
        cfg.torch_models = [m for m in args.torch_models.split(",") if m]
    if args.tf_models is not None:
        cfg.tf_models = [m for m in args.tf_models.split(",") if m]
    if args.states_models is not None:
        cfg.states_models = [m for m in args.states_models.split(",") if m]
    if args.quick:
        cfg.rounds, cfg.runs, cfg.concurrency_rounds = 3, 3, 2
        cfg.concurrency_workloads = ["mlp", "squeezenet"]
        cfg.serving_workloads, cfg.serving_rounds = ["mlp"], 2
    if args.devices is not None:
        cfg.devices = args.devices
    if args.rounds is not None:
        cfg.rounds = args.rounds
    if args.runs is not None:
        cfg.runs = args.runs
    if args.concurrency_workloads is not None:
        cfg.concurrency_workloads = [w for w in args.concurrency_workloads.split(",") if w]
    if args.no_concurrency:
        cfg.concurrency_workloads = []
    if args.serving_workloads is not None:
        cfg.serving_workloads = [w for w in args.serving_workloads.split(",") if w]
    if args.no_serving:
        cfg.serving_workloads = []
    cfg.__post_init__()
    return cfg


def _modes(text: str) -> list[str]:
    from aioge.benchmarks.precision import MODES

    return list(MODES) if text == "all" else [m for m in text.split(",") if m]
