"""The compiled GEMM with a packed B (``kernels/csrc/gemm.c``: ``matmul_native``, ``gemm_native``)
and the C helper thread that splits native kernels (``kernels/csrc/par.c``): MatMul against
float64 numpy and Gemm against onnxruntime over shapes past one 6-row block and one 64-column
panel, split and whole, equal weight columns giving equal outputs, concurrent and forked
callers, and the numpy fallback without the tier."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, parallel
from aioge.kernels.matmul_algos import build_gemm_native, build_matmul_native, pack_columns
from tests.ops.conftest import ort_run, rand

needs_tier = pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")


def _descs(*arrays: np.ndarray) -> list[TensorDesc]:
    return [TensorDesc(a.shape, "float32") for a in arrays]


def _count_jobs(monkeypatch) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """(job, pieces) of every ``split_native`` call the matmul kernels make, as they happen."""
    jobs: list[tuple[int, int]] = []
    real = parallel.split_native

    def counted(par, job, args, total, *, worth=True):  # type: ignore[no-untyped-def]
        got = real(par, job, args, total, worth=worth)
        jobs.append((job, got))
        return got

    monkeypatch.setattr("aioge.kernels.matmul_algos.split_native", counted)
    return jobs


@given(
    seed=st.integers(0, 2**16),
    batch=st.lists(st.integers(1, 3), max_size=2),
    m=st.integers(1, 20),  # past three 6-row blocks, with a short last one
    k=st.integers(1, 300),
    n=st.integers(1, 200),  # past three 64-column panels, with a narrow last one
)
@settings(max_examples=120, deadline=None)
def test_matmul_native_matches_numpy(seed, batch, m, k, n) -> None:
    rng = np.random.default_rng(seed)
    a, b = rand(rng, *batch, m, k), rand(rng, k, n)
    b.setflags(write=False)  # a constant: packed once
    want = a.astype(np.float64) @ b.astype(np.float64)
    run = build_matmul_native({}, {}, _descs(a, b), None)
    (got,) = run([a, b], None)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * k)
    out = np.full(want.shape, np.nan, np.float32)
    run([a, b], [out])  # into a preallocated (garbage-filled) output, twice: the packed weight reused
    (again,) = run([a, b], [out])
    np.testing.assert_array_equal(again, got)


def test_matmul_native_reads_a_strided_input_and_writes_a_strided_output() -> None:
    rng = np.random.default_rng(1)
    a, b = rand(rng, 2, 9, 40)[:, :, ::2], rand(rng, 20, 70)
    out = np.zeros((2, 9, 140), np.float32)[:, :, ::2]
    (got,) = build_matmul_native({}, {}, _descs(a, b), None)([a, b], [out])
    assert got is out
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize(
    ("c_shape", "alpha", "beta"),
    [(None, 1.0, 1.0), ((70,), 1.0, 1.0), ((1, 70), 1.0, 0.5), ((13, 70), 1.0, 1.0), ((70,), 2.0, 1.0), ((13, 1), 1.0, 1.0)],
)
def test_gemm_native_matches_onnxruntime(trans_a, trans_b, c_shape, alpha, beta) -> None:
    rng = np.random.default_rng(7)
    a = rand(rng, *((37, 13) if trans_a else (13, 37)))
    b = rand(rng, *((70, 37) if trans_b else (37, 70)))
    b.setflags(write=False)
    inputs = [a, b] + ([rand(rng, *c_shape)] if c_shape else [])
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta}
    (want,) = ort_run("Gemm", inputs, attrs)
    (got,) = build_gemm_native(attrs, {}, _descs(*inputs), None)(inputs, None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_equal_weight_columns_give_equal_outputs_in_full_and_narrow_panels() -> None:
    """Every column goes through the same operations: a weight of identical columns (light/
    AlexNet's fc8) gives bit-equal outputs, the 40 columns of the narrow last panel included."""
    rng = np.random.default_rng(5)
    a, col, bias = rand(rng, 3, 4096), rand(rng, 4096, 1), np.full(1000, 0.25, np.float32)
    b = np.ascontiguousarray(np.repeat(col, 1000, axis=1).T)  # Gemm's transB layout
    b.setflags(write=False)
    (y,) = build_gemm_native({"transB": 1}, {}, _descs(a, b, bias), None)([a, b, bias], None)
    assert (y == y[:, :1]).all()


@given(
    seed=st.integers(0, 2**16),
    m=st.integers(1, 40),
    k=st.integers(1025, 2600),  # past gemm.c's 1024-value k-blocks: 2 or 3 of them
    n=st.integers(1, 300),
    bias=st.booleans(),
)
@settings(max_examples=25, deadline=None)
def test_gemm_native_over_k_blocks_matches_numpy_whole_and_split(seed, m, k, n, bias) -> None:
    """The k-blocks outside the panels (each block's tiles prefetching the next block), whole
    and with the panels (or 6-row blocks) shared with the helper: the same values."""
    rng = np.random.default_rng(seed)
    a, b, c = rand(rng, m, k), rand(rng, k, n), rand(rng, n)
    b.setflags(write=False)
    want = a.astype(np.float64) @ b.astype(np.float64) + (c if bias else 0)
    ins = [a, b, c] if bias else [a, b]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("aioge.kernels.matmul_algos.DIRECT_SPLIT_MACS", 0)
        run = build_gemm_native({}, {}, _descs(*ins), None)
        (whole,) = run(ins, None)  # no token outside a run: whole
        with parallel.cpu_tokens(threading.Semaphore(1)):
            (split,) = run(ins, None)
    np.testing.assert_allclose(whole, want, rtol=1e-5, atol=2e-6 * k)
    np.testing.assert_array_equal(split, whole)


@needs_tier
@pytest.mark.parametrize(("m", "k", "n"), [(50, 64, 300), (200, 33, 64), (7, 10, 130)])
def test_matmul_native_shared_with_the_c_helper_matches_whole(m, k, n, monkeypatch) -> None:
    """By panels, or by 6-row blocks when there is one panel, with the helper thread."""
    rng = np.random.default_rng(m)
    a, b = rand(rng, m, k), rand(rng, k, n)
    monkeypatch.setattr("aioge.kernels.matmul_algos.DIRECT_SPLIT_MACS", 0)
    run = build_matmul_native({}, {}, _descs(a, b), None)
    pieces: list[int] = []
    real = parallel.split_native

    def counted(par, job, args, total, *, worth=True):
        got = real(par, job, args, total, worth=worth)
        if job == native.JOB_GEMM:  # not the packing of b
            pieces.append(got)
        return got

    monkeypatch.setattr("aioge.kernels.matmul_algos.split_native", counted)
    (whole,) = run([a, b], None)
    with parallel.cpu_tokens(threading.Semaphore(1)):
        (split,) = run([a, b], None)
    assert pieces == [1, 2]  # no token outside a run: whole
    np.testing.assert_array_equal(split, whole)  # the same operations per element either way


def test_callers_outnumbering_the_helpers_all_get_their_products(monkeypatch) -> None:
    """Eight threads split at once: those that find every helper claimed run whole."""
    monkeypatch.setattr("aioge.kernels.matmul_algos.DIRECT_SPLIT_MACS", 0)
    rng = np.random.default_rng(9)
    a, b = rand(rng, 64, 96), rand(rng, 96, 256)
    b.setflags(write=False)
    run = build_matmul_native({}, {}, _descs(a, b), None)
    want = a.astype(np.float64) @ b
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            with parallel.cpu_tokens(threading.Semaphore(8)):
                for _ in range(50):
                    (y,) = run([a, b], None)
                    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and not errors


_CHILD = """
import os, sys, threading, numpy as np
from aioge.kernels import parallel
import aioge.kernels.matmul_algos as ma
from aioge.ir.desc import TensorDesc
ma.DIRECT_SPLIT_MACS = 0
rng = np.random.default_rng(0)
a, b = rng.random((40, 50), np.float32), rng.random((50, 300), np.float32)
run = ma.build_matmul_native({}, {}, [TensorDesc(a.shape, "float32"), TensorDesc(b.shape, "float32")], None)
def product():
    with parallel.cpu_tokens(threading.Semaphore(1)):
        return run([a, b], None)[0]
want = product()  # the parent's helper thread exists now
pid = os.fork()
if pid == 0:  # the child has no helper thread: its splits must start their own
    os._exit(0 if np.array_equal(product(), want) else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
@pytest.mark.parametrize("spin_us", ["300", "0"])
def test_a_forked_child_splits_without_the_parents_helper(spin_us) -> None:
    """After fork the helper thread stays in the parent; with no spin (AIOGE_SPIN_US=0) the
    helper sleeps between jobs. Either way the split finishes with the right product."""
    env = {**os.environ, "AIOGE_SPIN_US": spin_us}
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, timeout=120, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_pack_columns_pads_the_last_panel_and_aligns() -> None:
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = pack_columns(b, 3)
    assert p.shape == (2, 3, 3) and native.ptr(p) % 64 == 0
    np.testing.assert_array_equal(p[0], b[:, :3])
    np.testing.assert_array_equal(p[1], [[3, 0, 0], [7, 0, 0], [11, 0, 0]])


def test_without_the_tier_matmul_and_gemm_native_run_numpy(monkeypatch) -> None:
    monkeypatch.setattr(native, "function", lambda *a, **k: None)
    monkeypatch.setattr(native, "par_run", lambda: None)
    rng = np.random.default_rng(3)
    a, b, c = rand(rng, 2, 5, 7), rand(rng, 7, 9), rand(rng, 9)
    (got,) = build_matmul_native({}, {}, _descs(a, b), None)([a, b], None)
    np.testing.assert_allclose(got, a @ b, rtol=1e-6)
    (got,) = build_gemm_native({}, {}, _descs(a[0], b, c), None)([a[0], b, c], None)
    np.testing.assert_allclose(got, a[0] @ b + c, rtol=1e-6)


_ONE_CPU = """
import os, sys, threading, numpy as np
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # as under taskset -c N
from aioge.kernels import parallel
import aioge.kernels.matmul_algos as ma
from aioge.ir.desc import TensorDesc
ma.DIRECT_SPLIT_MACS = 0
rng = np.random.default_rng(0)
a, b = rng.random((40, 50), np.float32), rng.random((50, 300), np.float32)
run = ma.build_matmul_native({}, {}, [TensorDesc(a.shape, "float32"), TensorDesc(b.shape, "float32")], None)
pieces = []
real = parallel.split_native
ma.split_native = lambda *args, **kw: pieces.append(real(*args, **kw)) or pieces[-1]
with parallel.cpu_tokens(threading.Semaphore(1)):
    y = run([a, b], None)[0]
ok = np.allclose(y, a.astype(np.float64) @ b, rtol=1e-5) and pieces and set(pieces) == {1}  # packing and product whole
sys.exit(0 if ok else 3)
"""


@needs_tier
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
def test_a_process_limited_to_one_cpu_runs_native_kernels_whole() -> None:
    """The C helpers count the CPUs the process may use (taskset, cpusets), not the machine's."""
    proc = subprocess.run([sys.executable, "-c", _ONE_CPU], timeout=120, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_ptr_is_the_first_elements_address_for_every_kind_of_array() -> None:
    """``native.ptr`` takes a writeable array's address through the buffer protocol (faster
    than ``a.ctypes``) and falls back for the rest: read-only, empty, strided."""
    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    read_only = base.copy()
    read_only.setflags(write=False)
    for a in (base, base[2:], read_only, np.empty(0, np.float32), base[:, ::2], base.T):
        assert native.ptr(a) == a.ctypes.data


@needs_tier
@pytest.mark.parametrize(("k", "n"), [(1, 1), (5, 64), (300, 130), (700, 200)])
def test_pack_columns_in_c_matches_numpy_for_row_major_and_strided_weights(k, n, monkeypatch) -> None:
    """Row-major float32 weights, and transposes of row-major ones (a conv's W^T, Gemm's
    transB, rows padded or not), pack in C (over the helper when big); others in numpy."""
    from aioge.kernels import matmul_algos

    in_c = []
    monkeypatch.setattr(matmul_algos, "split_native", lambda *a, **k: in_c.append(a) or parallel.split_native(*a, **k))
    rng = np.random.default_rng(k)
    wide, tall = rand(rng, k, n + 7), rand(rng, n, k + 5)
    every = (wide[:, :n], np.ascontiguousarray(wide[:, :n]), np.asfortranarray(wide[:, :n]), tall[:, :k].T)
    nr = native.gemm_tile()[1]  # the compiled tier's panel width: C packs only that one
    for b in (*every, wide[:, : 2 * (n // 2) : 2] if n > 1 else wide[:, :0]):
        with parallel.cpu_tokens(threading.Semaphore(1)):
            p = pack_columns(b, nr)
        panels = -(-b.shape[1] // nr)
        want = np.zeros((k, panels * nr), np.float32)
        want[:, : b.shape[1]] = b
        np.testing.assert_array_equal(p, want.reshape(k, panels, nr).transpose(1, 0, 2))
    assert len(in_c) == len(every)  # the last one (every other column) went through numpy


@needs_tier
@pytest.mark.parametrize(
    ("k", "c_shape", "alpha", "beta"),
    [
        (37, None, 1.0, 1.0),
        (1024, (1001,), 1.0, 1.0),
        (576, (1, 1001), 1.0, 0.5),
        (16, (1, 1), 1.0, 1.0),
        (33, (1001,), 2.0, 1.0),
    ],
)
def test_one_row_times_a_transposed_weight_runs_the_gemv_and_matches_onnxruntime(k, c_shape, alpha, beta, monkeypatch) -> None:
    """A classifier at batch 1 (Gemm, transB, one row): the weight read in place 8 rows at a
    time (the tail of K past whole vectors and a last group of 1 row included), shared with the
    C helper, bit-equal split or whole, equal rows giving equal outputs."""
    rng = np.random.default_rng(k)
    a, b = rand(rng, 1, k), rand(rng, 1001, k)
    b[5:10] = b[10]  # equal rows, in a group of 8 and the next
    b.setflags(write=False)
    inputs = [a, b] + ([rand(rng, *c_shape)] if c_shape else [])
    attrs = {"transB": 1, "alpha": alpha, "beta": beta}
    jobs = _count_jobs(monkeypatch)
    monkeypatch.setattr("aioge.kernels.matmul_algos.GEMV_SPLIT_VALUES", 0)
    run = build_gemm_native(attrs, {}, _descs(*inputs), None)
    (want,) = ort_run("Gemm", inputs, attrs)
    (whole,) = run(inputs, None)
    np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5)
    out = np.full((2, 1001), np.nan, np.float32)[:1]
    with parallel.cpu_tokens(threading.Semaphore(1)):
        (split,) = run(inputs, [out])
    assert jobs == [(native.JOB_GEMV_T, 1), (native.JOB_GEMV_T, 2)]
    np.testing.assert_array_equal(split, whole)
    if c_shape in (None, (1, 1)):  # the same bias everywhere
        assert (whole[0, 5:11] == whole[0, 10]).all()


@pytest.mark.parametrize("n", [64, 70, 300])
def test_one_row_against_packed_panels_matches_numpy(n) -> None:
    """MatMul with one row (a GEMV on packed panels, two sets of accumulators): odd K included."""
    rng = np.random.default_rng(n)
    for k in (1, 2, 7, 256):
        a, b = rand(rng, 1, k), rand(rng, k, n)
        b.setflags(write=False)
        (got,) = build_matmul_native({}, {}, _descs(a, b), None)([a, b], None)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def resident_bytes(a: np.ndarray) -> int:
    """How many of ``a``'s bytes sit in pages present in memory (/proc/self/pagemap's bit 63)."""
    page = mmap.PAGESIZE
    first, last = a.ctypes.data // page, (a.ctypes.data + a.nbytes - 1) // page
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = np.frombuffer(f.read((last - first + 1) * 8), np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(63))) * page


def test_a_big_aligned_buffer_is_a_mapping_of_its_own_and_a_small_one_a_numpy_array() -> None:
    """From 4 MiB, numpy would ask for huge pages, and the first such allocation of a process
    may stall on compaction: big packed weights get an anonymous mapping instead."""
    for shape, mapped in (((1024, 1025), True), ((64, 64), False)):
        a = native.aligned_empty(shape)
        assert a.shape == shape and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
        assert a.ctypes.data % 64 == 0
        base = a
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        if isinstance(base, memoryview):  # np.frombuffer keeps the buffer's memoryview
            base = base.obj
        assert isinstance(base, mmap.mmap) == mapped
        if mapped:  # and populated: every page is there before the packing writes it (no page faults)
            assert resident_bytes(a) >= a.nbytes
        a[...] = 1.5
        assert float(a.sum()) == 1.5 * a.size


@pytest.mark.parametrize("activation", [("", ()), ("Gelu", (1.0,)), ("Relu", ())])
@pytest.mark.parametrize("bias_shape", [None, (13,), (1, 1, 13), ()])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_every_fused_matmul_kernel_adds_the_bias_and_applies_the_activation(activation, bias_shape, trans_b) -> None:
    """FusedMatMul alpha * A @ B' + C, activated: the numpy kernel and every FusedGemm kernel run
    over A's rows (``rows_*``), into a planned output and into a fresh one, against float64."""
    from aioge.ops.registry import get_schema
    from aioge.ops.schema import InferContext
    from aioge.plan.kernel import candidates_of

    rng = np.random.default_rng(7)
    a = rand(rng, 2, 7, 70)
    b = rand(rng, *((13, 70) if trans_b else (70, 13)))
    b.setflags(write=False)
    inputs = [a, b] + ([] if bias_shape is None else [rand(rng, *bias_shape)])
    name, params = activation
    attrs = {"transA": 0, "transB": trans_b, "alpha": 0.5, "activation": name, "activation_params": params}
    schema = get_schema("FusedMatMul", "aioge")
    descs = _descs(*inputs)
    (out,) = schema.infer(InferContext(descs, [None] * len(descs), attrs, 1))
    want = 0.5 * (a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64))
    if bias_shape is not None:
        want = want + inputs[2]
    if name == "Gelu":
        want = 0.5 * want * (1 + np.tanh(np.sqrt(2 / np.pi) * (want + 0.044715 * want**3)))
    elif name == "Relu":
        want = np.maximum(want, 0)
    names = set()
    for impl, p in candidates_of(schema, descs, attrs):
        names.add(impl.name)
        run = impl.build(attrs, p, descs, [out])
        planned = np.full(out.shape, np.nan, np.float32)
        (got,) = run(inputs, [planned])
        assert got is planned, impl.name
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=impl.name)
        (fresh,) = run(inputs, None)
        assert fresh.shape == (2, 7, 13)
        np.testing.assert_allclose(fresh, want, rtol=2e-5, atol=2e-5, err_msg=impl.name)
    assert {"numpy", "rows_numpy", "rows_gemm_dot"} <= names
    assert ("rows_gemm_native" in names) == native.available()


@needs_tier
def test_fused_matmul_rows_kernels_need_an_untransposed_a_a_matrix_b_and_a_row_bias() -> None:
    from aioge.ops.registry import get_schema
    from aioge.plan.kernel import candidates_of

    schema = get_schema("FusedMatMul", "aioge")
    base = {"transA": 0, "transB": 0, "alpha": 1.0, "activation": "", "activation_params": ()}

    def names(shapes: list[tuple[int, ...]], **attrs: int) -> set[str]:
        descs = [TensorDesc(s, "float32") for s in shapes]
        return {impl.name for impl, _ in candidates_of(schema, descs, {**base, **attrs})}

    assert "rows_gemm_dot" in names([(2, 3, 4), (4, 5), (5,)])
    # the BLAS kernel takes a value, a row or the output's shape as C, and any operand layout
    assert names([(2, 3, 4), (4, 5), (3, 5)]) == {"numpy"}  # a bias that varies along the rows
    assert names([(2, 4, 3), (4, 5), (5,)], transA=1) == {"numpy", "matmul_blas"}
    assert names([(2, 3, 4), (2, 4, 5)]) == {"numpy", "matmul_blas"}  # a batch of matrices on the right
    from aioge.ops.schema import InferContext, InferError

    for bad in [TensorDesc((3, 1, 5), "float32"), TensorDesc((5,), "float64"), TensorDesc((4,), "float32")]:
        descs = [TensorDesc((2, 3, 4), "float32"), TensorDesc((4, 5), "float32"), bad]
        with pytest.raises(InferError, match="broadcast|must be float32"):
            schema.infer(InferContext(descs, [None] * 3, base, 1))


@needs_tier
@pytest.mark.parametrize(
    ("k", "n", "c_shape", "activation"),
    [
        (784, 256, (256,), ("Relu", ())),  # the builder MLP's first layer: two 128-column halves
        (256, 128, (1, 128), ("", ())),
        (128, 10, (10,), ("", ())),  # only a partial column group
        (37, 300, None, ("HardSigmoid", (0.3, 0.4))),  # odd K; 18 whole groups and a partial one
        (1, 17, (17,), ("LeakyRelu", (0.1,))),
    ],
)
def test_one_row_times_a_row_major_weight_runs_gemv_native_and_matches_onnxruntime(
    k, n, c_shape, activation, monkeypatch
) -> None:
    """An MLP layer at batch 1 (Gemm, one row, B as stored): the row bias and the fused
    activation applied in the C call, bit-equal split or whole, equal columns giving equal
    outputs (in whole groups and in the zero-padded last one), a new feed row and a new bias
    read, planned and fresh outputs."""
    from aioge.kernels.fused import activation_runner
    from aioge.kernels.matmul_algos import build_gemv_native

    rng = np.random.default_rng(k + n)
    a, b = rand(rng, 1, k), rand(rng, k, n)
    b[:, 1] = b[:, 0]
    b[:, n - 1] = b[:, 0]  # equal columns: in the first group and in the last
    b.setflags(write=False)
    inputs = [a, b] + ([np.full(c_shape, 0.25, np.float32)] if c_shape else [])
    name, params = activation

    def expected(inputs: list[np.ndarray]) -> np.ndarray:
        (want,) = ort_run("Gemm", inputs, {})
        act = activation_runner(name, params, np.float32)
        if act is not None:
            act(want)
        return want

    jobs = _count_jobs(monkeypatch)
    monkeypatch.setattr("aioge.kernels.matmul_algos.GEMV_N_SPLIT_VALUES", 0)
    attrs = {"activation": name, "activation_params": params} if name else {}
    run = build_gemv_native(attrs, {}, _descs(*inputs), None)
    want = expected(inputs)
    (whole,) = run(inputs, None)
    np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5)
    if c_shape is not None:
        assert whole[0, 1] == whole[0, 0] == whole[0, n - 1]
    planned = np.full((1, n), np.nan, np.float32)
    with parallel.cpu_tokens(threading.Semaphore(1)):
        (split,) = run(inputs, [planned])
        assert split is planned
        np.testing.assert_array_equal(split, whole)
        other = [rand(rng, 1, k), b, *(np.full(c_shape, -0.5, np.float32) for _ in inputs[2:])]
        (again,) = run(other, [planned])  # a new row and a new bias: read, not the last call's
        np.testing.assert_allclose(again, expected(other), rtol=1e-5, atol=1e-5)
    assert [j for j, _ in jobs] == [native.JOB_GEMV_N] * 3
    assert jobs[0][1] == 1 and jobs[1][1] == (2 if n > 16 else 1)


@needs_tier
def test_gemv_native_takes_one_untransposed_row_a_row_bias_and_alpha_one() -> None:
    from aioge.ops.registry import get_schema
    from aioge.plan.kernel import candidates_of

    def names(shapes: list[tuple[int, ...]], op: str = "Gemm", **attrs: float) -> set[str]:
        descs = [TensorDesc(s, "float32") for s in shapes]
        return {impl.name for impl, _ in candidates_of(get_schema(op, "aioge" if op.startswith("Fused") else ""), descs, attrs)}

    assert "gemv_native" in names([(1, 8), (8, 5), (5,)]) and "gemv_native" in names([(1, 8), (8, 5)])
    assert "gemv_native" in names([(1, 8), (8, 5), (1, 5)], "FusedGemm", activation="Relu", activation_params=())
    assert "gemv_native" not in names([(2, 8), (8, 5), (5,)])  # two rows
    assert "gemv_native" not in names([(1, 8), (5, 8), (5,)], transB=1)
    assert "gemv_native" not in names([(8, 1), (8, 5)], transA=1)
    assert "gemv_native" not in names([(1, 8), (8, 5), (5,)], alpha=2.0)
    assert "gemv_native" not in names([(1, 8), (8, 5), (5,)], beta=0.5)
    assert "gemv_native" not in names([(1, 8), (8, 5), (1, 1)])  # a scalar-like C broadcast


def test_gemv_native_reads_strided_operands_through_numpy_and_runs_without_the_tier(monkeypatch) -> None:
    from aioge.kernels.matmul_algos import build_gemv_native

    rng = np.random.default_rng(5)
    a, b, c = rand(rng, 1, 40), rand(rng, 40, 60), rand(rng, 30)
    attrs = {"activation": "Relu", "activation_params": ()}
    want = np.maximum(a @ b[:, ::2] + c, 0)
    descs = _descs(a, b[:, ::2], c)
    (got,) = build_gemv_native(attrs, {}, descs, None)([a, b[:, ::2], c], None)  # a column-strided B
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(native, "par_run", lambda: None)
    (got,) = build_gemv_native(attrs, {}, descs, None)([a, b[:, ::2], c], None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_tier
@pytest.mark.parametrize("activation", [("", ()), ("Gelu", (1.0,)), ("Relu", ())])
def test_fused_matmul_at_one_row_runs_rows_gemv_native_with_its_bias_and_activation(activation) -> None:
    """A transformer's FusedMatMul at one token, (1, 1, K) @ (K, N) + bias, through the
    ``rows_`` wrapper of gemv_native: into a planned output and a fresh one, against float64."""
    from aioge.ops.registry import get_schema
    from aioge.ops.schema import InferContext
    from aioge.plan.kernel import candidates_of

    rng = np.random.default_rng(8)
    a, b, c = rand(rng, 1, 1, 70), rand(rng, 70, 40), rand(rng, 40)
    b.setflags(write=False)
    name, params = activation
    attrs = {"transA": 0, "transB": 0, "alpha": 1.0, "activation": name, "activation_params": params}
    schema = get_schema("FusedMatMul", "aioge")
    descs = _descs(a, b, c)
    (out,) = schema.infer(InferContext(descs, [None] * 3, attrs, 1))
    impl = next(i for i, _ in candidates_of(schema, descs, attrs) if i.name == "rows_gemv_native")
    want = a.astype(np.float64) @ b + c
    if name == "Gelu":
        want = 0.5 * want * (1 + np.tanh(np.sqrt(2 / np.pi) * (want + 0.044715 * want**3)))
    elif name == "Relu":
        want = np.maximum(want, 0)
    run = impl.build(attrs, {}, descs, [out])
    planned = np.full(out.shape, np.nan, np.float32)
    (got,) = run([a, b, c], [planned])
    assert got is planned
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    (fresh,) = run([a, b, c], None)
    np.testing.assert_allclose(fresh, want, rtol=2e-5, atol=2e-5)
