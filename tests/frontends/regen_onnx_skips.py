"""Rewrite the ONNX skip files from a fresh run of the suites.

    .venv/bin/python -m tests.frontends.regen_onnx_skips            # node suite -> onnx_node_skips.txt
    .venv/bin/python -m tests.frontends.regen_onnx_skips --models   # model suites -> onnx_model_skips.txt
    .venv/bin/python -m tests.frontends.regen_onnx_skips --dry-run  # only print the counts

Every case that fails is written with the reason it failed (category first); cases that
pass are left out. Prints the pass count, the counts per category and the slowest cases.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings

from tests.frontends import onnx_suite as S
from tests.frontends.test_onnx_node_suite import TOLERANCES

NODE_HEADER = """
ONNX node test cases (onnx.backend.test.case.node) that aioge does not pass yet, one per line:
`case_name  # category: reason`. Cases listed here run as strict xfail expecting their category's error;
one that passes while listed fails the suite: remove its line. Regenerate: python -m tests.frontends.regen_onnx_skips
"""

MODEL_HEADER = """
Models of onnx/backend/test/data/{simple,pytorch-converted,pytorch-operator} that aioge does not pass yet:
`suite/model  # category: reason`. Regenerate: python -m tests.frontends.regen_onnx_skips --models
"""


def _node(run: S.Runner) -> tuple[dict[str, str], int, list[tuple[float, str]]]:
    skips: dict[str, str] = {}
    times = []
    passed = 0
    for case in S.node_cases():
        t0 = time.perf_counter()
        try:
            rtol, atol = TOLERANCES.get(case.name, (S.RTOL, S.ATOL))
            S.run_node_case(run, case, rtol, atol)
            passed += 1
        except Exception as exc:  # noqa: BLE001 - every failure is recorded with its reason
            skips[case.name] = S.classify(exc)
        times.append((time.perf_counter() - t0, case.name))
    return skips, passed, times


def _models(run: S.Runner) -> tuple[dict[str, str], int, list[tuple[float, str]]]:
    from tests.frontends.test_onnx_models import run_model_case

    skips: dict[str, str] = {}
    times = []
    passed = 0
    for case in S.model_cases():
        if case.suite == "light":
            continue  # light/ models must all pass: they are never skipped
        t0 = time.perf_counter()
        try:
            run_model_case(run, case)
            passed += 1
        except Exception as exc:  # noqa: BLE001
            skips[case.id] = S.classify(exc)
        times.append((time.perf_counter() - t0, case.id))
    return skips, passed, times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--models", action="store_true", help="the model suites instead of the node suite")
    p.add_argument("--dry-run", action="store_true", help="print counts, write nothing")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    with S.runner() as run:
        skips, passed, times = (_models if args.models else _node)(run)
    total = passed + len(skips)
    print(f"passed {passed} of {total}; failing {len(skips)}")
    for cat, n in collections.Counter(S.category(r) for r in skips.values()).most_common():
        print(f"  {n:5d}  {cat}")
    print("slowest:", ", ".join(f"{n} {t * 1000:.0f}ms" for t, n in sorted(times, reverse=True)[:8]))
    print(f"total time {sum(t for t, _ in times):.1f}s")
    if not args.dry_run:
        path, header = (S.MODEL_SKIPS, MODEL_HEADER) if args.models else (S.NODE_SKIPS, NODE_HEADER)
        S.write_skips(path, skips, header)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
