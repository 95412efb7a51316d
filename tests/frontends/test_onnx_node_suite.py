"""The ONNX node test cases (onnx.backend.test.case.node): every case through load_onnx + Session.run.

Each case is compared with ONNX's own tolerances (rtol 1e-3, atol 1e-7) unless TOLERANCES
says otherwise. Cases aioge does not pass yet are listed with their reasons in
onnx_node_skips.txt: they run as strict xfail expecting the error of their category (an
unsupported op must raise UnsupportedOpError, not crash), so one that starts passing fails
until its line is removed (or regenerate the file: ``python -m tests.frontends.regen_onnx_skips``).
A case not in the file must pass.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from tests.frontends import onnx_suite as S

# The cases expect IEEE results (NaN from sqrt(-1), -inf from log(0)); numpy reports those as
# RuntimeWarnings, which this project's pytest config turns into errors. Values are what count here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Cases that need looser tolerances than ONNX's defaults, and why.
TOLERANCES: dict[str, tuple[float, float]] = {
    # Inverse DFT in float32: outputs that should be 0 come out at ~1e-7 (one float32 ulp of the
    # inputs' magnitude), just over atol=1e-7; onnx.reference computes in float64.
    "test_dft_inverse": (1e-3, 1e-6),
    "test_dft_inverse_opset19": (1e-3, 1e-6),
}

_SKIPS = S.read_skips(S.NODE_SKIPS)


def _params() -> list[Any]:
    params = []
    for case in S.node_cases():
        marks = []
        if case.name in _SKIPS:
            marks.append(pytest.mark.xfail(reason=_SKIPS[case.name], raises=S.expected_error(_SKIPS[case.name]), strict=True))
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


@pytest.fixture(scope="module")
def run() -> Iterator[S.Runner]:
    with S.runner() as r:
        yield r


def test_skip_file_names_real_cases() -> None:
    """Every name in the skip file is a case of the installed onnx (no stale typos)."""
    names = {c.name for c in S.node_cases()}
    assert sorted(set(_SKIPS) - names) == []


@pytest.mark.parametrize("case", _params())
def test_node_case(run: S.Runner, case: Any) -> None:
    rtol, atol = TOLERANCES.get(case.name, (S.RTOL, S.ATOL))
    S.run_node_case(run, case, rtol, atol)


def _container_cases() -> list[Any]:
    return [
        pytest.param(c, id=c.name)
        for c in S.node_cases()
        if any(vi.type.WhichOneof("value") != "tensor_type" for vi in c.model.graph.input)
    ]


@pytest.mark.parametrize("case", _container_cases())
def test_node_case_with_first_class_inputs(run: S.Runner, case: Any) -> None:
    """The cases with sequence and optional inputs once more, fed as lists and None or values
    without ``lengths=``: the first-class path alone (no unrolling of the inputs) passes them too."""
    S.run_node_case(run, case, first_class=True)
