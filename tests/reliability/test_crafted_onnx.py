"""ONNX models crafted to cost a loader time and memory, or to run under rules it does not know.

External data: before, a tensor of a few bytes whose external file was a 2 GiB sparse file
read all of it first (28 s and 4 GB RSS before a GraphError; 8 GiB gave a bare MemoryError).
Now the declared length, or the rest of the file after the offset, must be dims x itemsize
before anything is read, and exactly that is read. Opsets: before, a model importing ai.onnx
opset 999 loaded and ran, read as the newest opset; now an opset newer than the installed
``onnx`` defines is a GraphError naming it and the newest supported.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aioge
from aioge.errors import GraphError

RNG = np.random.default_rng(16)
W = RNG.standard_normal((8, 4)).astype(np.float32)
B = RNG.standard_normal((4,)).astype(np.float32)
TWO_GIB = 2 << 30


def _model(opset: int = 17, extra: list[onnx.OperatorSetIdProto] | None = None) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Add", ["a", "b"], ["y"])]
    g = helper.make_graph(
        nodes,
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *(extra or [])])


def _external(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def _set_external(path: Path, tensor: str, **fields: str | None) -> None:
    """Rewrite ``tensor``'s external-data fields (None removes one) in the model file."""
    model = onnx.load(str(path), load_external_data=False)
    t = next(t for t in model.graph.initializer if t.name == tensor)
    info = {e.key: e.value for e in t.external_data}
    info.update(fields)
    del t.external_data[:]
    for k, v in info.items():
        if v is not None:
            t.external_data.add(key=k, value=v)
    path.write_bytes(model.SerializeToString())


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)  # a hole: no disk blocks, reads as zeros


def test_a_correct_external_data_model_loads_and_matches_onnxruntime(tmp_path: Path) -> None:
    path = _external(tmp_path)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    g = aioge.load_onnx(path)
    np.testing.assert_array_equal(g.constants["w"].data, W)
    np.testing.assert_array_equal(g.constants["b"].data, B)

    import anyio

    async def run() -> np.ndarray:
        async with aioge.Session() as s:
            return (await s.run(g, {"x": x}))["y"]

    np.testing.assert_allclose(anyio.run(run), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["length 2 GiB", "no length, file 2 GiB", "offset near the end, length 2 GiB", "length short"])
def test_external_data_of_the_wrong_size_fails_fast_without_reading(case: str, tmp_path: Path) -> None:
    path = _external(tmp_path)
    huge = tmp_path / "huge.bin"
    _sparse(huge, TWO_GIB)
    fields = {
        "length 2 GiB": {"location": "huge.bin", "offset": "0", "length": str(TWO_GIB)},
        "no length, file 2 GiB": {"location": "huge.bin", "offset": "0", "length": None},
        "offset near the end, length 2 GiB": {"location": "huge.bin", "offset": str(TWO_GIB - 4096), "length": str(TWO_GIB)},
        "length short": {"location": "huge.bin", "offset": "0", "length": str(W.nbytes - 4)},
    }[case]
    _set_external(path, "w", **fields)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(GraphError) as info:
        aioge.load_onnx(path)
    elapsed = time.perf_counter() - start
    message = str(info.value)
    assert "'w'" in message and "huge.bin" in message and "[8, 4] x 4 bytes = 128 bytes" in message, message
    assert elapsed < 2, f"refusing took {elapsed:.1f} s: the file was read"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 256 << 10  # KiB: far below the 2 GiB a read costs


def test_external_data_reads_exactly_the_tensor_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an offset and a length that fit, only those bytes are read, even from a big file."""
    path = _external(tmp_path)
    huge = tmp_path / "huge.bin"
    _sparse(huge, TWO_GIB)
    with open(huge, "r+b") as f:
        f.seek(TWO_GIB - 4096)
        f.write(W.tobytes())
    _set_external(path, "w", location="huge.bin", offset=str(TWO_GIB - 4096), length=str(W.nbytes))
    reads: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, f: object) -> None:
            self.f = f

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self.f, name)

        def read(self, n: int = -1) -> bytes:
            reads.append(n)
            return self.f.read(n)  # type: ignore[attr-defined]

    def counting_open(file: object, mode: str = "r", *args: object, **kw: object) -> object:
        f = real_open(file, mode, *args, **kw)  # type: ignore[call-overload]
        return Counting(f) if str(file).endswith("huge.bin") else f

    import aioge.frontends.onnx_model as onnx_model

    monkeypatch.setattr(onnx_model, "open", counting_open, raising=False)
    start = time.perf_counter()
    g = aioge.load_onnx(path)
    assert time.perf_counter() - start < 2
    np.testing.assert_array_equal(g.constants["w"].data, W)
    assert reads == [W.nbytes]


def test_an_opset_newer_than_onnx_knows_is_refused() -> None:
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(GraphError, match=rf"ai.onnx opset 999, newer than the newest this aioge supports \({newest}\b"):
        aioge.load_onnx(_model(opset=999))
    with pytest.raises(GraphError, match=rf"opset {newest + 1}, newer .*\({newest}\b"):
        aioge.load_onnx(_model(opset=newest + 1).SerializeToString())
    ml = onnx.defs.onnx_ml_opset_version()
    with pytest.raises(GraphError, match=rf"ai.onnx.ml opset {ml + 1}, newer .*\({ml}\b"):
        aioge.load_onnx(_model(extra=[helper.make_opsetid("ai.onnx.ml", ml + 1)]))
    with pytest.raises(GraphError, match="ai.onnx opset 0; opset versions start at 1"):
        aioge.load_onnx(_model(opset=0))
    # The newest opset itself, and a custom domain's own versions, still load.
    assert aioge.load_onnx(_model(opset=newest)).nodes
    assert aioge.load_onnx(_model(extra=[helper.make_opsetid("com.example", 42)])).nodes
