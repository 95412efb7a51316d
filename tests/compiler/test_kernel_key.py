"""The kernel key: built from named parts, each of which changes it; names and ids do not."""

from __future__ import annotations

import copy
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.keys import kernel_key, kernel_key_parts
from aioge.plan.codec import encode_value
from aioge.plan.kernel import KernelDesc, desc_from_plain, desc_to_plain

PARTS = (
    "op",
    "inputs",
    "outputs",
    "attrs",
    "const_inputs",
    "engine",
    "soc",
    "debug",
    "debug_config",
    "tune",
    "impls",
    "impl_version",
    "code",
    "native",
    "aioge",
    "numpy",
    "python",
)


def _node(shape=(2, 3), dtype="float32", name="n", alpha=0.1):
    g = aioge.Graph("g")
    x = g.input("x", shape, dtype)
    y = ops.leaky_relu(x, alpha=alpha, name=name)
    return y.producer


def _parts(node, **kw):
    base = dict(soc="AiogeSim", op_debug_level=0, impl_version=1)
    base.update(kw)
    return kernel_key_parts(node, "AiCore", **base)


def test_parts_are_named_and_complete() -> None:
    assert set(_parts(_node())) == set(PARTS)


@pytest.mark.parametrize("part", PARTS)
def test_changing_any_part_changes_the_key(part: str) -> None:
    parts = _parts(_node())
    changed = copy.deepcopy(parts)
    value = changed[part]
    if isinstance(value, str):
        changed[part] = value + "x"
    elif isinstance(value, int):
        changed[part] = value + 1
    elif isinstance(value, list):
        changed[part] = [*value, "extra"]
    else:  # pragma: no cover - every part is one of the above
        raise AssertionError(type(value))
    assert kernel_key(changed) != kernel_key(parts)


def test_real_changes_change_the_key_and_names_do_not() -> None:
    key = kernel_key(_parts(_node()))
    assert kernel_key(_parts(_node(name="other"))) == key  # node names are not part of a kernel
    assert kernel_key(_parts(_node(shape=(2, 4)))) != key
    assert kernel_key(_parts(_node(dtype="float64"))) != key
    assert kernel_key(_parts(_node(alpha=0.2))) != key
    assert kernel_key(_parts(_node(), soc="Other")) != key
    assert kernel_key(_parts(_node(), op_debug_level=1)) != key
    assert kernel_key(_parts(_node(), op_debug_config="abc")) != key
    assert kernel_key(_parts(_node(), tune_mode="tune")) != key
    assert kernel_key(_parts(_node(), impls=["numpy", "new"])) != key
    assert kernel_key(_parts(_node(), impl_version=2)) != key
    assert kernel_key(_parts(_node(), code="0" * 64)) != key
    assert kernel_key(_parts(_node(), const_inputs={1: "d"})) != key
    assert kernel_key_parts(_node(), "AiVec", soc="AiogeSim", op_debug_level=0, impl_version=1) != _parts(_node())


def test_compiled_kernels_tier_is_keyed() -> None:
    # A kernel tuned where the C tier was not loaded had only numpy candidates: a process that
    # loads it must not take that pick (it kept tiny BERT, GPT-2, T5 out of their native programs).
    from aioge.kernels import native

    assert kernel_key(_parts(_node(), native="")) != kernel_key(_parts(_node(), native="avx2"))
    if not native.available():
        pytest.skip("the compiled kernels are not built here: this process's key is the no-C one")
    code = (
        "import aioge; from aioge import ops; from aioge.compiler.ops import kernel_jobs\n"
        "from aioge.engines.assign import assign_engines; from aioge.options import resolve_options\n"
        "g = aioge.Graph('g'); x = g.input('x', (2, 3), 'float32'); ops.leaky_relu(x, alpha=0.1, name='n')\n"
        "print(kernel_jobs(g, assign_engines(g, ()), resolve_options({}, {}))[0].key)\n"
    )
    keys = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.strip()
        for env in (dict(os.environ), {**os.environ, "AIOGE_NATIVE": "0"})
    ]
    assert keys[0].startswith("leakyrelu_") and keys[0] != keys[1] and native.tier() in ("baseline", "avx2", "avx512")


def test_key_shape_and_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="aioge.keys"):
        key = kernel_key(_parts(_node()))
    assert key.startswith("leakyrelu_") and len(key) == len("leakyrelu_") + 64
    logged = {r.args[0] for r in caplog.records if r.msg.startswith("kernel key part")}
    assert logged == set(PARTS)  # a miss can be explained part by part


def test_key_is_stable_across_processes() -> None:
    code = (
        "import aioge; from aioge import ops; from aioge.keys import kernel_key, kernel_key_parts\n"
        "g = aioge.Graph('g'); x = g.input('x', (2, 3), 'float32'); y = ops.leaky_relu(x, alpha=0.1, name='n')\n"
        "print(kernel_key(kernel_key_parts(y.producer, 'AiCore', soc='AiogeSim', op_debug_level=0, impl_version=1)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == kernel_key(_parts(_node()))


def test_integer_constant_inputs_are_keyed() -> None:
    from aioge.compiler.ops import _const_inputs

    g = aioge.Graph("g")
    x = g.input("x", (2, 3, 4), "float32")
    a = ops.reduce_sum(x, np.array([1], np.int64)).producer
    b = ops.reduce_sum(x, np.array([2], np.int64)).producer
    assert _const_inputs(a) != _const_inputs(b) and 1 in _const_inputs(a)
    w1 = ops.mul(x, np.float32(2)).producer
    assert _const_inputs(w1) == {}  # float constants are data, not structure


def test_desc_round_trips_as_plain_data() -> None:
    desc = KernelDesc(
        "k_" + "0" * 64,
        "Conv",
        "",
        "AiCore",
        (((1, 2), "float32", "ND"), None),
        (((1, 2), "float32", "ND"),),
        "conv_im2col_nhwc",
        {"block": 1, "tile": (2, 3)},
        128,
        True,
    )
    import msgpack

    again = desc_from_plain(msgpack.unpackb(msgpack.packb(desc_to_plain(desc)), strict_map_key=True))
    assert again == desc
    assert desc_to_plain(desc) == encode_value(desc)  # one codec: a kernel cache entry's desc is an .om's

    def bad_with(**fields: object) -> object:
        plain = desc_to_plain(desc)
        values = plain["~dc"][1]
        for k, v in fields.items():
            if v is None:
                del values[k]
            else:
                values[k] = v
        return plain

    for fields, what in (
        ({"tuned": "yes"}, "tuned"),
        ({"impl": None}, "impl"),
        ({"inputs": [[1, 2]]}, "inputs"),
        ({"inputs": {"~t": [{"~t": [1, 2]}]}}, "inputs"),
        ({"extra": 1}, "extra"),
    ):
        with pytest.raises(ValueError, match=what):
            desc_from_plain(bad_with(**fields))
    with pytest.raises(ValueError, match="kernel desc"):
        desc_from_plain(encode_value((1, 2)))
