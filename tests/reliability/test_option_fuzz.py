"""Every option, fuzzed (hypothesis): a value either works or raises OptionError naming the key.

Session-level keys go through ``Session(...)``, graph-level ones through ``add_graph``, both
also through ``check_options``/``resolve_options``; values are random strings (with the
characters the parsers care about), GE-shaped fragments and values of other types. Unknown
keys, non-string keys and options that are not a mapping are refused the same way.
Examples per option and level: ``100 * AIOGE_RELIABILITY_SCALE``.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.errors import OptionError
from aioge.options import GRAPH, OPTIONS, SESSION, check_options, resolve_options

SCALE = float(os.environ.get("AIOGE_RELIABILITY_SCALE", "1"))
EXAMPLES = max(10, int(100 * SCALE))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_SPECIAL = "0123456789-+.eE:|,;_/ \t\x00\u00a0\u0663\u00b2\u4e00\ud7ff\U0001f600"
_FRAGMENTS = [
    "",
    "0",
    "1",
    "-1",
    "true",
    "false",
    "True",
    "enable",
    "force",
    "disable",
    "AiCore",
    "AiVec",
    "AiVector",
    "AiCpu",
    "AiCore|AiCpu",
    "AiCore:4,AiVec:2",
    "AiCore:0",
    "AiCore:65",
    "AiCore:٣",
    "tune",
    "heuristic",
    "sink",
    "host",
    "fingerprint",
    "key",
    "nan",
    "inf",
    "1e309",
    "600000",
    "600001",
    "0.0001",
    "../x",
    "/abs",
    "a/b",
    "a" * 128,
    "a" * 129,
    "x\x00y",
    "Fold:on",
    "Fold:maybe",
    ":on",
    ";;",
    "AiogeSim",
]
VALUES = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=_SPECIAL + "AaCcIiPpUuVveor", max_size=24),
    st.sampled_from(_FRAGMENTS),
    st.tuples(st.sampled_from(_FRAGMENTS), st.sampled_from(_FRAGMENTS), st.sampled_from(["|", ",", ";", ":", ""])).map(
        lambda t: t[0] + t[2] + t[1]
    ),
)
OTHER_TYPES = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.binary(max_size=8),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)

SESSION_KEYS = sorted(k for k, s in OPTIONS.items() if SESSION in s.levels)
GRAPH_KEYS = sorted(k for k, s in OPTIONS.items() if GRAPH in s.levels)
TRIED: dict[tuple[str, str], int] = {}


def _graph() -> aioge.Graph:
    g = aioge.Graph("fuzz")
    g.output(ops.relu(g.input("x", (2,))), names=["y"])
    return g


def _names_key(exc: OptionError, key: object) -> bool:
    spec = OPTIONS.get(key) if isinstance(key, str) else None
    names = {repr(key), str(key)} | ({spec.key, spec.alias} - {None} if spec else set())
    return exc.key in names and any(n in str(exc) for n in names if n)


def _session_outcome(key: str, value: Any) -> None:
    try:
        checked = check_options({key: value}, SESSION)
        resolve_options(checked)
        aioge.Session({key: value})
    except OptionError as exc:
        assert _names_key(exc, key), (key, value, str(exc))


def _graph_outcome(key: str, value: Any) -> None:
    async def go() -> None:
        async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                await s.add_graph(1, _graph(), {key: value})
        # A graph key with no graph cache dir is off: one warning says so, and only then.
        assert [str(w.message) for w in seen if "has no effect" in str(w.message)] == (
            [
                f"graph 'fuzz': ge.graph_key {value!r} has no effect without the session option ge.graph_compiler_cache_dir: "
                "the graph cache is off"
            ]
            if key == "ge.graph_key" and value
            else []
        ), [str(w.message) for w in seen]

    try:
        resolve_options({}, check_options({key: value}, GRAPH))
        anyio.run(go)
    except OptionError as exc:
        assert _names_key(exc, key), (key, value, str(exc))


@pytest.mark.parametrize("key", SESSION_KEYS)
@FUZZ
@given(value=st.one_of(VALUES, OTHER_TYPES))
def test_session_option_works_or_raises_option_error(key: str, value: Any) -> None:
    TRIED[(key, SESSION)] = TRIED.get((key, SESSION), 0) + 1
    _session_outcome(key, value)
    alias = OPTIONS[key].alias
    if alias:
        _session_outcome(alias, value)


@pytest.mark.parametrize("key", GRAPH_KEYS)
@FUZZ
@given(value=st.one_of(VALUES, OTHER_TYPES))
def test_graph_option_works_or_raises_option_error(key: str, value: Any) -> None:
    TRIED[(key, GRAPH)] = TRIED.get((key, GRAPH), 0) + 1
    _graph_outcome(key, value)


@FUZZ
@given(
    key=st.one_of(st.text(max_size=30), st.sampled_from([k + "x" for k in OPTIONS] + [k.upper() for k in OPTIONS])), value=VALUES
)
def test_unknown_keys_raise_option_error_naming_them(key: str, value: str) -> None:
    from aioge.options import _ALIASES

    if key in OPTIONS or key in _ALIASES:
        return
    for level in (SESSION, GRAPH):
        with pytest.raises(OptionError) as info:
            check_options({key: value}, level)
        assert info.value.key == key and repr(key) in str(info.value) and "unknown option" in str(info.value)
    with pytest.raises(OptionError):
        aioge.Session({key: value})


@pytest.mark.parametrize("key", [1, None, b"ge.graph_key", 2.5, ("ge.graph_key",)])
def test_non_string_keys_raise_option_error(key: Any) -> None:
    with pytest.raises(OptionError, match="option keys are strings") as info:
        aioge.Session({key: "1"})
    assert info.value.key == repr(key)


@pytest.mark.parametrize("options", ["ge.graph_key=x", ["ge.graph_key"], 3, b"x", [("ge.graph_key", "x")]])
def test_options_that_are_not_a_mapping_raise_option_error(options: Any) -> None:
    with pytest.raises(OptionError, match="a mapping of option keys to string values"):
        aioge.Session(options)
    with pytest.raises(OptionError, match="a mapping of option keys to string values"):
        check_options(options, GRAPH)


def test_wrong_level_names_the_key_and_the_levels() -> None:
    with pytest.raises(OptionError, match=r"'ge.graph_key'.*graph level, not session level"):
        aioge.Session({"ge.graph_key": "k"})
    graph_only = [k for k, s in OPTIONS.items() if s.levels == {SESSION}]
    assert graph_only
    for key in graph_only:
        with pytest.raises(OptionError) as info:
            check_options({key: OPTIONS[key].default}, GRAPH)
        assert info.value.key == key and "session level, not graph level" in str(info.value)


def test_valid_defaults_still_work_and_run() -> None:
    """The fuzz must not pass by refusing everything: every default is accepted and a graph runs."""

    async def go() -> np.ndarray:
        opts = {k: s.default for k, s in OPTIONS.items() if SESSION in s.levels and s.default}
        async with aioge.Session({**opts, "aioge.tune_mode": "heuristic"}) as s:
            await s.add_graph(1, _graph(), {k: s.default for k, s in OPTIONS.items() if GRAPH in s.levels and s.default})
            return (await s.run_graph(1, {"x": np.array([-1.0, 2.0], np.float32)}))["y"]

    np.testing.assert_array_equal(anyio.run(go), [0.0, 2.0])


def test_report_examples_per_option() -> None:
    """Runs last in this module: every option and level was tried EXAMPLES times (hypothesis may stop early
    on a small space, never below a tenth)."""
    if not TRIED:
        pytest.skip("run with the fuzz tests")
    low = {k: n for k, n in TRIED.items() if n < EXAMPLES // 10}
    assert not low, low
    print(
        f"\noption fuzz: {len(TRIED)} option/level pairs, {sum(TRIED.values())} examples, "
        f"min {min(TRIED.values())} max {max(TRIED.values())} per pair"
    )
