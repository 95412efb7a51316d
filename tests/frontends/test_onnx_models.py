"""The model suites shipped in the onnx wheel (onnx/backend/test/data/), through load_onnx + Session.run.

- ``light/``: AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet,
  VGG-19 and ZFNet-512 at 224x224. Their weights are ConstantOfShape fills and the input is
  what onnx's backend runner feeds them (``arange(n) / n``); each must match its stored
  expected output (``light_<name>_output_0.pb``) within onnx's own tolerances for it
  (rtol 1e-3, DenseNet 2e-3; atol 1e-7). They are never skipped.
- ``simple/``, ``pytorch-converted/``, ``pytorch-operator/``: model.onnx plus
  test_data_set_*/input_*.pb and output_*.pb. Those aioge does not pass yet are listed with
  reasons in onnx_model_skips.txt and run as strict xfail expecting the error of their category.
"""

from __future__ import annotations

from typing import Any, Iterator

import onnx
import pytest

from tests.frontends import onnx_suite as S

# The cases expect IEEE results (NaN from sqrt(-1), -inf from log(0)); numpy reports those as
# RuntimeWarnings, which this project's pytest config turns into errors. Values are what count here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_SKIPS = S.read_skips(S.MODEL_SKIPS)

# light/ models known not to match, with the diagnosis. strict: the day they match, this fails
# so the entry is removed. Not a skip-file entry: light/ models must match, this is a bug.
KNOWN_LIGHT_FAILURES: dict[str, str] = {}
_CASES = S.model_cases()


def run_model_case(run: S.Runner, case: S.ModelCase) -> None:
    """Run every data set of a model case and compare with its expected outputs.

    Raises:
        AssertionError on a wrong result; AiogeError or NotTensor when it cannot run.
    """
    model = onnx.load(case.path)
    for input_files, output_files in case.data_sets:
        if case.light_inputs:
            inits = {t.name for t in model.graph.initializer}
            inputs = [S.light_input(vi) for vi in model.graph.input if vi.name not in inits]
        else:
            inputs = [_read(p, vi) for p, vi in zip(input_files, model.graph.input)]
        expected = [_read(p, vi) for p, vi in zip(output_files, model.graph.output)]
        _, got = S.run_model(run, case.path, inputs)
        S.compare(expected, got, case.rtol, case.atol)


def _read(path: str, vi: onnx.ValueInfoProto) -> Any:
    kind = vi.type.WhichOneof("value")
    if kind in (None, "tensor_type"):
        return S.read_tensor(path)
    protos = {"sequence_type": onnx.SequenceProto, "optional_type": onnx.OptionalProto}
    if kind not in protos:
        raise S.NotTensor(f"{vi.name!r} is a {kind}")
    proto = protos[kind]()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


@pytest.fixture(scope="module")
def run() -> Iterator[S.Runner]:
    with S.runner() as r:
        yield r


def test_all_nine_light_models_are_found() -> None:
    names = sorted(c.name for c in _CASES if c.suite == "light")
    assert names == [
        "bvlc_alexnet",
        "densenet121",
        "inception_v1",
        "inception_v2",
        "resnet50",
        "shufflenet",
        "squeezenet",
        "vgg19",
        "zfnet512",
    ]
    assert not [n for n in _SKIPS if n.startswith("light/")], "light/ models must pass, never be skipped"


def _light() -> list[Any]:
    return [
        pytest.param(
            c,
            id=c.name,
            marks=[pytest.mark.xfail(reason=KNOWN_LIGHT_FAILURES[c.name], strict=True)] if c.name in KNOWN_LIGHT_FAILURES else [],
        )
        for c in _CASES
        if c.suite == "light"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("case", _light())
def test_light_model(run: S.Runner, case: S.ModelCase) -> None:
    run_model_case(run, case)


def _params() -> list[Any]:
    out = []
    for c in _CASES:
        if c.suite == "light":
            continue
        marks = (
            [pytest.mark.xfail(reason=_SKIPS[c.id], raises=S.expected_error(_SKIPS[c.id]), strict=True)] if c.id in _SKIPS else []
        )
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@pytest.mark.parametrize("case", _params())
def test_model(run: S.Runner, case: S.ModelCase) -> None:
    run_model_case(run, case)
