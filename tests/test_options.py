"""The option table: keys, aliases, levels, values, env fallbacks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.engines import Engine
from aioge.errors import OptionError
from aioge.options import OPTIONS, check_options, resolve_options


def test_aliases_map_to_ge_keys() -> None:
    got = check_options({"EXCLUDE_ENGINES": "AiCpu", "OP_COMPILER_CACHE_MODE": "force"}, "session")
    assert got == {"ge.exec.exclude_engines": "AiCpu", "ge.op_compiler_cache_mode": "force"}


def test_unknown_key_names_key() -> None:
    with pytest.raises(OptionError, match=r"'ge.nonsense'.*unknown option"):
        check_options({"ge.nonsense": "1"}, "session")


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("ge.exec.exclude_engines", "AiCore|GPU", "'GPU' is not one"),
        ("ge.op_compiler_cache_mode", "on", "allowed values: enable, force, disable"),
        ("ge.op_compiler_cache_dir", "/tmp/a b", "not allowed"),
        ("ge.externalWeight", "2", "allowed values: 0, 1"),
        ("op_debug_level", "9", "integer from 0 to 4"),
        ("ge.streamMaxParallelNum", "AiCore:0", "N from 1 to 64"),
        ("ge.enableSingleStream", "yes", "true, false"),
        ("aioge.tune_mode", "fast", "tune, heuristic"),
    ],
)
def test_bad_values_say_what_is_allowed(key: str, value: str, reason: str) -> None:
    with pytest.raises(OptionError) as info:
        check_options({key: value}, "session")
    assert info.value.key == key and info.value.value == value
    assert reason in str(info.value)
    assert str(info.value).startswith("E10001")


def test_wrong_level() -> None:
    with pytest.raises(OptionError, match="graph level, not session"):
        check_options({"ge.graph_key": "k"}, "session")
    with pytest.raises(OptionError, match="session level, not graph"):
        check_options({"ge.graph_compiler_cache_dir": "/tmp"}, "graph")


def test_values_must_be_strings() -> None:
    with pytest.raises(OptionError, match="strings"):
        check_options({"ge.externalWeight": 1}, "session")


def test_key_and_alias_together_is_an_error() -> None:
    with pytest.raises(OptionError, match="given twice"):
        check_options({"EXCLUDE_ENGINES": "AiCpu", "ge.exec.exclude_engines": "AiCore"}, "session")


def test_graph_key_must_be_file_safe() -> None:
    for bad in ("../x", "a/b", "a" * 129, "a.b"):
        with pytest.raises(OptionError):
            check_options({"ge.graph_key": bad}, "graph")
    assert check_options({"ge.graph_key": "resnet50_v1-2"}, "graph")


def test_resolve_merges_levels_and_env() -> None:
    s = check_options({"ge.exec.exclude_engines": "AiCore", "ge.enableSingleStream": "true"}, "session")
    g = check_options({"ge.exec.exclude_engines": "AiVec|AiVector"}, "graph")
    r = resolve_options(s, g, env={"ASCEND_CACHE_PATH": "/tmp/cachedir"})
    assert r.exclude_engines == frozenset({Engine.AIVEC})
    assert r.single_stream is True
    assert r.op_cache_dir == "/tmp/cachedir"
    assert resolve_options({"ge.op_compiler_cache_dir": "/x"}, env={"ASCEND_CACHE_PATH": "/y"}).op_cache_dir == "/x"
    with pytest.raises(OptionError, match="ASCEND_CACHE_PATH"):
        resolve_options({}, env={"ASCEND_CACHE_PATH": "/bad path"})


def test_stream_max_parsing() -> None:
    r = resolve_options(check_options({"ge.streamMaxParallelNum": "AiCore:3,AiVector:2"}, "session"), env={})
    assert r.streams_for(Engine.AICORE) == 3 and r.streams_for(Engine.AIVEC) == 2 and r.streams_for(Engine.AICPU) == 1


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(OPTIONS)), value=st.text(max_size=40))
def test_fuzz_every_option(key: str, value: str) -> None:
    """Any string either parses or raises OptionError; never another exception. Checks that
    span options (a ge.inputShape without gears: hypothesis found '0:') raise when resolved."""
    level = "graph" if "graph" in OPTIONS[key].levels else "session"
    try:
        checked = check_options({key: value}, level)
        resolve_options(checked if level == "session" else {}, checked if level == "graph" else None, env={})
    except OptionError as exc:
        assert exc.args and key in str(exc)
