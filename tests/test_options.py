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


# -- GE's own key names (issue 43) -------------------------------------------------------------

# GE's strings for the options aioge has (ge_api_types.h: the session/graph keys and the
# ir_option strings), each with the aioge option it must reach.
GE_NAMES = {
    "ge.exec.exclude_engines": "ge.exec.exclude_engines",
    "ge.op_compiler_cache_mode": "ge.op_compiler_cache_mode",
    "ge.op_compiler_cache_dir": "ge.op_compiler_cache_dir",
    "ge.optimizationSwitch": "ge.optimizationSwitch",
    "ge.graph_compiler_cache_dir": "ge.graph_compiler_cache_dir",
    "ge.graph_key": "ge.graph_key",
    "ge.externalWeight": "ge.externalWeight",
    "ge.opDebugLevel": "ge.opDebugLevel",
    "op_debug_config": "op_debug_config",
    "ge.exec.opDebugConfig": "op_debug_config",
    "ge.streamMaxParallelNum": "ge.streamMaxParallelNum",
    "ge.enableSingleStream": "ge.enableSingleStream",
    "ge.exec.disableReuseMemory": "ge.exec.disableReuseMemory",
    "ge.socVersion": "ge.socVersion",
    "ge.inputShape": "ge.inputShape",
    "input_shape": "ge.inputShape",
    "ge.dynamicBatchSize": "ge.dynamicBatchSize",
    "ge.dynamicDims": "ge.dynamicDims",
}


@pytest.mark.parametrize("name", sorted(GE_NAMES))
def test_ge_key_names_are_accepted(name: str) -> None:
    from aioge.options import canonical_key

    assert canonical_key(name) == GE_NAMES[name]


def test_ge_op_debug_level_and_its_older_spellings() -> None:
    for key in ("ge.opDebugLevel", "op_debug_level", "OP_DEBUG_LEVEL"):
        checked = check_options({key: "2"}, "session")
        assert checked == {"ge.opDebugLevel": "2"}
        assert resolve_options(checked).op_debug_level == 2
    with pytest.raises(OptionError, match="given twice .*op_debug_level.*ge.opDebugLevel"):
        check_options({"op_debug_level": "1", "ge.opDebugLevel": "2"}, "session")


# -- one table: defaults and stages (issue 40, item 4) -----------------------------------------


def test_compile_options_defaults_are_the_tables() -> None:
    from dataclasses import fields

    from aioge.options import CompileOptions

    made, resolved = CompileOptions(), resolve_options({}, env={})
    spec_fields = {spec.field for spec in OPTIONS.values()}
    assert {f.name for f in fields(CompileOptions)} == spec_fields | {"raw"}
    for spec in OPTIONS.values():
        assert getattr(made, spec.field) == getattr(resolved, spec.field) == spec.parse(spec.default), spec.key
    assert dict(made.stream_max_parallel) == {Engine.AICORE: 4, Engine.AIVEC: 2, Engine.AICPU: 1}


def _option_reads() -> dict[str, set[tuple[str, str]]]:
    """CompileOptions field -> {(module, function)} of every read of it in compiler/ and in
    serving/gears.py (the gears decide which signatures are compiled): attributes of a
    parameter annotated ``CompileOptions``; a method call counts as the fields it reads."""
    import ast
    from pathlib import Path

    import aioge
    from aioge.options import CompileOptions

    root = Path(aioge.__file__).parent
    methods: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse((root / "options.py").read_text())):
        if isinstance(node, ast.ClassDef) and node.name == CompileOptions.__name__:
            for fn in (n for n in node.body if isinstance(n, ast.FunctionDef)):
                methods[fn.name] = {
                    a.attr
                    for a in ast.walk(fn)
                    if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self"
                }
    reads: dict[str, set[tuple[str, str]]] = {}
    for path in [*sorted((root / "compiler").glob("*.py")), root / "serving" / "gears.py"]:
        module = path.relative_to(root).as_posix()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = {
                a.arg
                for a in [*fn.args.args, *fn.args.kwonlyargs]
                if a.annotation is not None and "CompileOptions" in ast.unparse(a.annotation)
            }
            for a in ast.walk(fn):
                if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id in params:
                    for name in methods.get(a.attr, {a.attr}):
                        reads.setdefault(name, set()).add((module, fn.name))
    return reads


# The kernel cache's policy and the graph-cache path read the cache's options; nowhere else in
# the compiler may.
CACHE_READERS = {("compiler/ops.py", "cache_policy"), ("compiler/ops.py", "compile_kernels"), ("compiler/cached.py", "*")}


def test_compiler_modules_read_only_options_in_the_graph_cache_key() -> None:
    from aioge.keys import compile_options
    from aioge.options import CACHE, COMPILER, STAGES

    by_field = {spec.field: spec for spec in OPTIONS.values()}
    reads = _option_reads()
    assert {"exec_mode", "exec_threads", "op_debug_level", "single_stream", "stream_max_parallel"} <= set(reads)
    in_key = set(compile_options({k: s.default for k, s in OPTIONS.items()}))
    assert in_key == {k for k, s in OPTIONS.items() if s.stage == COMPILER}
    for spec in OPTIONS.values():
        assert spec.stage in STAGES, spec.key
    for name, where in reads.items():
        if name == "raw":
            continue
        spec = by_field[name]
        for module, function in where:
            if spec.stage == CACHE and ((module, function) in CACHE_READERS or (module, "*") in CACHE_READERS):
                continue
            assert spec.key in in_key, (
                f"{module}:{function} reads {spec.key} (stage {spec.stage}), which the graph-cache key leaves out"
            )
    # ...and the key holds nothing the compile path never reads (a change would recompile for nothing).
    unread = {k for k in in_key if OPTIONS[k].field not in reads}
    assert unread == set(), f"in the key but never read by the compiler: {sorted(unread)}"
