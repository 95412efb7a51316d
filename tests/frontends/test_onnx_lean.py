"""Reading an ONNX file with its weights straight into arrays (frontends/onnx_lean.py).

Whatever the file holds, the constants read apart equal what onnx's whole parse decodes, bit
for bit, and a damaged file fails (or loads) exactly as the whole parse does."""

from __future__ import annotations

from typing import NoReturn

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from aioge.errors import GraphError
from aioge.frontends import onnx_lean, onnx_model
from aioge.frontends.onnx_model import ModelSource, read_model, tensor_to_array
from aioge.kernels.contract import is_constant

_RNG = np.random.default_rng(7)
_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.5], np.float64)


def _values(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype.kind == "b":
        return (_RNG.integers(0, 2, n) == 1).reshape(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return _RNG.integers(info.min, info.max, n, dtype=dtype, endpoint=True).reshape(shape)
    v = np.concatenate([_SPECIAL, _RNG.standard_normal(max(n - len(_SPECIAL), 0))])[:n]
    if dtype.kind == "c":
        v = v.astype(np.complex128)
        v.imag = v.real[::-1]
    return v.astype(dtype).reshape(shape)


def _initializers() -> list[TensorProto]:
    out = []
    for i, (enum, dtype) in enumerate(onnx_lean.RAW_DTYPES.items()):
        shape = [(3, 5), (), (0, 4), (7,)][i % 4]
        out.append(numpy_helper.from_array(_values(np.dtype(dtype), shape), f"raw_{i}"))
        assert out[-1].data_type == enum and out[-1].HasField("raw_data") == (out[-1].data_type != TensorProto.STRING)
    # element types onnx decodes itself: ML dtypes in raw_data, typed fields, strings
    out.append(numpy_helper.from_array(_values(np.dtype(np.float32), (4, 3)).astype(ml_dtypes.bfloat16), "bf16"))
    out.append(numpy_helper.from_array(_values(np.dtype(np.float32), (9,)).astype(ml_dtypes.float8_e4m3fn), "f8"))
    out.append(numpy_helper.from_array(np.array([-8, 7, 0, 3, -1], ml_dtypes.int4), "i4"))  # packed, two a byte
    out.append(helper.make_tensor("typed", TensorProto.FLOAT, [2, 2], [1.0, -0.0, np.nan, 2.5]))
    out.append(helper.make_tensor("text", TensorProto.STRING, [2], [b"ab", b"c"]))
    return out


def _model(inits: list[TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "O":
        return a.tolist() == b.tolist()
    return a.tobytes() == b.tobytes()


def _whole(data: bytes) -> list[np.ndarray]:
    """What the whole parse decodes: onnx's own numpy_helper."""
    return [numpy_helper.to_array(t) for t in onnx.load_from_string(data).graph.initializer]


def _read(src: ModelSource) -> list[np.ndarray]:
    return [tensor_to_array(t, src, "initializer", src.raw.get(i)) for i, t in enumerate(src.model.graph.initializer)]


def test_weights_of_every_element_type_equal_onnxs_whole_parse_bit_for_bit(tmp_path) -> None:
    data = _model(_initializers()).SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    want = _whole(data)
    with_raw = {i for i, t in enumerate(onnx.load_from_string(data).graph.initializer) if t.HasField("raw_data")}
    assert len(with_raw) == len(onnx_lean.RAW_DTYPES) + 3  # bfloat16, float8 and int4 too
    for src in (read_model(path), read_model(data)):
        assert set(src.raw) == with_raw, "every raw_data was read apart"
        assert not any(t.HasField("raw_data") for t in src.model.graph.initializer)
        got = _read(src)
        assert all(_same(g, w) for g, w in zip(got, want, strict=True))
        for i in range(len(onnx_lean.RAW_DTYPES)):  # the raw bytes are the array: 64-byte aligned, no copy
            # and a constant (read-only down to its memory), or kernels repack it on every run
            assert is_constant(got[i])
            if got[i].size:
                assert got[i].ctypes.data % 64 == 0 and np.shares_memory(got[i], src.raw[i])


def test_a_big_weight_is_read_into_a_populated_mapping_of_its_own(tmp_path) -> None:
    """From 1 MiB a raw_data is read into an anonymous mapping populated at once (MAP_POPULATE:
    no page fault per 4 KiB as the read fills it; BERT-base's 440 MB read in 0.28 s of CPU, not
    0.40), still equal, 64-byte aligned and a constant; small ones stay in bytearrays."""
    import mmap

    from tests.ops.test_native_gemm import resident_bytes

    big, small = _values(np.dtype(np.float32), (600, 501)), _values(np.dtype(np.float32), (3, 7))
    path = tmp_path / "m.onnx"
    path.write_bytes(_model([numpy_helper.from_array(big, "big"), numpy_helper.from_array(small, "small")]).SerializeToString())
    src = read_model(path)
    got = _read(src)
    assert _same(got[0], big) and _same(got[1], small)
    for i, mapped in ((0, True), (1, False)):
        assert is_constant(got[i]) and got[i].ctypes.data % 64 == 0
        base = src.raw[i]
        while isinstance(base, np.ndarray):
            base = base.base
        base = base.obj if isinstance(base, memoryview) else base
        assert isinstance(base, mmap.mmap) == mapped, i
    assert resident_bytes(got[0]) >= big.nbytes


def test_weights_from_2_mib_are_read_by_two_threads_and_equal_whatever_follows(tmp_path, monkeypatch) -> None:
    """A big raw_data's second half is read on a helper thread (``_SPLIT``): two big weights of
    odd sizes in a row and small ones after them all come back bit-equal and aligned, and a file
    cut inside a big weight fails as the whole parse does."""
    sizes = [(700, 1001), (3,), (1031, 517), (5, 3)]  # 2.8 MB, 2.1 MB: neither a page multiple
    want = [_values(np.dtype(np.float32), shape) for shape in sizes]
    data = _model([numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(want)]).SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    halves = []
    real = onnx_lean._helper()
    monkeypatch.setattr(onnx_lean, "_helper", lambda: real)
    monkeypatch.setattr(
        real, "submit", lambda fn, fd, views, at: halves.append(len(views[0])) or type(real).submit(real, fn, fd, views, at)
    )
    got = _read(read_model(path))
    assert len(halves) == 2 and all(_same(g, w) for g, w in zip(got, want, strict=True))
    assert all(is_constant(g) and g.ctypes.data % 64 == 0 for g in got)
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: data.index(want[2].tobytes()[:64]) + want[2].nbytes // 2 + 100])
    with pytest.raises(GraphError):
        read_model(cut)


def _field(number: int, payload: bytes) -> bytes:
    return onnx_lean._varint_bytes(number << 3 | 2) + onnx_lean._varint_bytes(len(payload)) + payload


def test_an_unusual_layout_reads_as_onnx_reads_it() -> None:
    """raw_data before the type and dims, raw_data twice (the last counts) and the graph split
    over two fields (protobuf merges them): legal wire formats no serializer of ours writes."""
    a, b = _values(np.dtype(np.float32), (2, 3)), _values(np.dtype(np.int64), (4,))
    backwards = (
        _field(9, b"\x00" * 24)  # a first raw_data, replaced by the next
        + _field(9, a.tobytes())
        + onnx_lean._varint_bytes(1 << 3)
        + b"\x02"
        + onnx_lean._varint_bytes(1 << 3)
        + b"\x03"
        + onnx_lean._varint_bytes(2 << 3)
        + bytes([TensorProto.FLOAT])
        + _field(8, b"a")
    )
    whole = _model([numpy_helper.from_array(b, "b")])
    graph = whole.graph.SerializeToString()
    model = whole.SerializeToString()
    head = model[: model.index(_field(7, graph))]
    data = head + _field(7, _field(5, backwards)) + _field(7, graph)
    want = _whole(data)
    assert [w.shape for w in want] == [(2, 3), (4,)]
    src = read_model(data)
    assert set(src.raw) == {0, 1}
    assert all(_same(g, w) for g, w in zip(_read(src), want, strict=True))


_SMALL = _model(
    [numpy_helper.from_array(_values(np.dtype(np.float32), (3, 4)), "w"), numpy_helper.from_array(np.arange(5), "i")]
).SerializeToString()


def _outcome(data: bytes) -> list[np.ndarray] | None:
    """The constants read_model gives, or None for a GraphError."""
    try:
        return _read(read_model(data))
    except GraphError:
        return None


def _never_lean(*a: object, **k: object) -> NoReturn:
    raise onnx_lean.NotLean


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    cut=st.integers(0, len(_SMALL)),
    flips=st.lists(st.tuples(st.integers(0, len(_SMALL) - 1), st.integers(1, 255)), max_size=3),
)
def test_a_damaged_file_loads_or_fails_as_the_whole_parse_does(cut: int, flips: list[tuple[int, int]], monkeypatch) -> None:
    data = bytearray(_SMALL[:cut])
    for at, x in flips:
        if at < len(data):
            data[at] ^= x
    got = _outcome(bytes(data))
    with monkeypatch.context() as m:
        m.setattr(onnx_model, "read_lean", _never_lean)
        want = _outcome(bytes(data))
    assert (got is None) == (want is None)
    assert got is None or all(_same(g, w) for g, w in zip(got, want, strict=True))  # type: ignore[arg-type]


def test_protobufs_the_reader_does_not_expect_are_parsed_whole() -> None:
    with pytest.raises(onnx_lean.NotLean):
        onnx_lean.read_lean(b"\x0b\x0c")  # a group (wire type 3)
    with pytest.raises(onnx_lean.NotLean):
        onnx_lean.read_lean(_field(7, _field(5, b"\x4a\x7f")))  # raw_data longer than its tensor
    with pytest.raises(onnx_lean.NotLean):
        onnx_lean.read_lean(b"")


@pytest.mark.parametrize("size", [0, 10, 48 + 4])
def test_raw_data_of_the_wrong_size_is_refused_naming_the_tensor(size: int, monkeypatch) -> None:
    bad = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3, 4], raw_data=b"\x01" * size)
    data = _model([bad]).SerializeToString()
    with pytest.raises(GraphError, match="initializer 'w' cannot be decoded"):
        _read(read_model(data))
    monkeypatch.setattr(onnx_model, "read_lean", _never_lean)
    with pytest.raises(GraphError, match="initializer 'w' cannot be decoded"):  # as the whole parse does
        _read(read_model(data))
