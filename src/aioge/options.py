"""Every option aioge understands, in one table: key, aliases, level, default, env fallback, and
the stage that reads it.

Keys are GE's strings; GE's ``ir_option`` names and its other spellings of a key are accepted
as aliases; keys aioge adds are spelled ``aioge.*``. ``CompileOptions``' defaults are the
table's. Each option names the one stage that reads it (``compiler``, ``runtime``, ``cache``,
``server``): compiled artefacts are keyed by the compiler's (``aioge.keys.compile_options``),
and ``tests/test_options.py`` fails when a compiler module reads one of the others. Values are strings, as in GE, and are checked when given: an unknown
key, a bad value or a key given at the wrong level raises ``OptionError`` naming the key,
the value and what is allowed. Environment variables are read when a session resolves its
options, never at import time.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from aioge.engines import Engine, engine_names, parse_engine
from aioge.errors import OptionError

__all__ = [
    "OPTIONS",
    "CompileOptions",
    "OptionSpec",
    "canonical_key",
    "check_options",
    "resolve_options",
]

SESSION = "session"
GRAPH = "graph"
# The stage that reads an option. COMPILER: it changes what a compile produces (the compiler
# modules and the gears, which decide the signatures compiled, read it); the graph-cache key
# holds these. RUNTIME: how a compiled model runs; CACHE: where and how compiled artefacts are
# cached (``compiler/cached.py`` and the kernel cache's policy read these); SERVER: how runs
# are batched.
COMPILER, RUNTIME, CACHE, SERVER = "compiler", "runtime", "cache", "server"
STAGES = (COMPILER, RUNTIME, CACHE, SERVER)


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One option: its GE key, aliases, the levels it may be given at, its parser and its stage."""

    key: str
    alias: str | None
    levels: frozenset[str]
    default: str
    parse: Callable[[str], Any]  # str -> typed value; raises ValueError("what is allowed")
    field: str  # the CompileOptions field it sets
    env: str | None = None  # environment fallback, read at resolve time
    doc: str = ""
    stage: str = dataclasses.field(kw_only=True)  # COMPILER, RUNTIME, CACHE or SERVER: who reads it
    also: tuple[str, ...] = ()  # more aliases: GE's other spellings of the key, aioge's older keys
    secret: bool = False  # kept out of ``raw`` (which compiled models and cache entries store) as "***"
    content: bool = False  # the value names a file whose content shapes a compile: keys hold its digest


# -- parsers: each raises ValueError whose text says what is allowed -------------------


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(v: str) -> str:
        if v not in allowed:
            raise ValueError(f"allowed values: {', '.join(allowed)}")
        return v

    return parse


def _flag01(v: str) -> bool:
    if v not in ("0", "1"):
        raise ValueError("allowed values: 0, 1")
    return v == "1"


def _bool(v: str) -> bool:
    if v.lower() not in ("true", "false", "1", "0"):
        raise ValueError("allowed values: true, false (or 1, 0)")
    return v.lower() in ("true", "1")


def _int_range(lo: int, hi: int) -> Callable[[str], int]:
    def parse(v: str) -> int:
        if not re.fullmatch(r"-?[0-9]+", v.strip()) or not lo <= int(v) <= hi:
            raise ValueError(f"an integer from {lo} to {hi}")
        return int(v)

    return parse


def _engines(v: str) -> frozenset[Engine]:
    if not v:
        return frozenset()
    out = set()
    for name in v.split("|"):
        try:
            out.add(parse_engine(name))
        except KeyError:
            raise ValueError(f"'|'-separated engine names out of {', '.join(engine_names())}; {name!r} is not one") from None
    return frozenset(out)


def _stream_max(v: str) -> Mapping[Engine, int]:
    out: dict[Engine, int] = {}
    for item in filter(None, v.split(",")):
        name, sep, num = item.partition(":")
        if not sep or not re.fullmatch(r"[0-9]+", num) or not 1 <= int(num) <= 64:
            raise ValueError(f"'Engine:N,...' with N from 1 to 64, e.g. AiCore:4,AiVec:2,AiCpu:1; bad item {item!r}")
        try:
            out[parse_engine(name)] = int(num)
        except KeyError:
            raise ValueError(f"engine names out of {', '.join(engine_names())}; {name!r} is not one") from None
    return MappingProxyType(out)


# Characters GE allows in op_compiler_cache_dir: a-z A-Z 0-9 _ - . and CJK, plus the path separator.
_CACHE_DIR_RE = re.compile(r"[A-Za-z0-9_\-./\u4e00-\u9fff\u3400-\u4dbf]*")


def _cache_dir(v: str) -> str:
    if not _CACHE_DIR_RE.fullmatch(v):
        bad = sorted({c for c in v if not _CACHE_DIR_RE.fullmatch(c)})
        raise ValueError(f"a path of the characters a-z A-Z 0-9 _ - . / and CJK characters; {bad} are not allowed")
    return v


def _path(v: str) -> str:
    if "\x00" in v:
        raise ValueError("a path without NUL characters")
    return v


_GRAPH_KEY_RE = re.compile(r"[A-Za-z0-9_\-]{1,128}")


def _graph_key(v: str) -> str:
    if v and not _GRAPH_KEY_RE.fullmatch(v):
        raise ValueError("1 to 128 characters out of A-Z a-z 0-9 _ - (it becomes part of file names)")
    return v


def _switch(v: str) -> Mapping[str, bool]:
    from aioge.passes import pass_names

    names = pass_names()
    out: dict[str, bool] = {}
    for item in filter(None, (s.strip() for s in v.split(";"))):
        name, sep, state = item.partition(":")
        if not sep or state not in ("on", "off"):
            raise ValueError(f"'Pass:on;Pass:off'; bad item {item!r}")
        if name not in names:
            raise ValueError(f"unknown pass {name!r}; passes: {', '.join(names) or '(none)'}")
        out[name] = state == "on"
    return MappingProxyType(out)


def _positive_float(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise ValueError("a positive number of milliseconds") from None
    if not 0 < x <= 600_000:
        raise ValueError("a positive number of milliseconds, at most 600000")
    return x


def _input_shape(v: str) -> Mapping[str, tuple[int, ...]]:
    """GE's ``ge.inputShape``: ``name:1,3,224,224;name2:-1,16``; -1 marks a dim the gears set."""
    out: dict[str, tuple[int, ...]] = {}
    for item in filter(None, (s.strip() for s in v.split(";"))):
        name, sep, dims = item.rpartition(":")
        parts = [d.strip() for d in dims.split(",")] if dims.strip() else []
        if not sep or not name or not all(re.fullmatch(r"-1|[0-9]+", d) for d in parts):
            raise ValueError(
                f"'name:D1,D2,...;name2:...' with -1 for a dim the gears set, e.g. data:-1,3,224,224; bad item {item!r}"
            )
        if name in out:
            raise ValueError(f"input {name!r} given twice")
        out[name] = tuple(int(d) for d in parts)
    return MappingProxyType(out)


def _gear_count(n: int) -> None:
    if not 2 <= n <= 100:  # GE's limits for dynamic batch and dynamic dims
        raise ValueError(f"from 2 to 100 gears, got {n}")


def _batch_sizes(v: str) -> tuple[int, ...]:
    """GE's ``ge.dynamicBatchSize``: ``1,2,4,8`` (a trailing comma is allowed, as in GE)."""
    if not v:
        return ()
    parts = [p.strip() for p in v.rstrip(",").split(",")]
    if not all(re.fullmatch(r"[0-9]+", p) and int(p) >= 1 for p in parts):
        raise ValueError("comma-separated batch sizes of at least 1, e.g. 1,2,4,8")
    sizes = tuple(int(p) for p in parts)
    if len(set(sizes)) != len(sizes):
        raise ValueError("each batch size once")
    _gear_count(len(sizes))
    return tuple(sorted(sizes))


def _dims(v: str) -> tuple[tuple[int, ...], ...]:
    """GE's ``ge.dynamicDims``: one gear per ';', the values of every -1 of ge.inputShape in order."""
    if not v:
        return ()
    gears = []
    for item in filter(None, (s.strip() for s in v.split(";"))):
        parts = [p.strip() for p in item.split(",")]
        if not all(re.fullmatch(r"[0-9]+", p) and int(p) >= 1 for p in parts):
            raise ValueError(
                f"';'-separated gears of comma-separated dims of at least 1, e.g. 4;8;16 or 1,64;2,32; bad gear {item!r}"
            )
        gears.append(tuple(int(p) for p in parts))
    if len({len(g) for g in gears}) > 1:
        raise ValueError("every gear gives the same number of dims")
    if len(set(gears)) != len(gears):
        raise ValueError("each gear once")
    _gear_count(len(gears))
    return tuple(gears)


def _sizes(v: str) -> tuple[int, ...]:
    if not v:
        return ()
    parts = [p.strip() for p in v.split(",")]
    if not all(re.fullmatch(r"[0-9]+", p) and 1 <= int(p) <= 1 << 20 for p in parts):
        raise ValueError("comma-separated batch sizes from 1 to 1048576, e.g. 1,4,16,64")
    return tuple(sorted(set(int(p) for p in parts)))


def _remote_url(v: str) -> str:
    if v and urllib.parse.urlsplit(v).scheme not in ("redis", "rediss", "unix"):
        raise ValueError("empty (no remote cache) or a Redis URL: redis://host:port/db, rediss://..., unix:///path")
    return v


# GE's precision modes (ge.exec.precision_mode, and _v2's names); aioge.compiler.precision places them.
PRECISION_MODES = (
    "must_keep_origin_dtype",
    "force_fp32",
    "cube_fp16in_fp32out",
    "force_fp16",
    "allow_fp32_to_fp16",
    "allow_fp32_to_bf16",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
)
PRECISION_MODES_V2 = ("origin", "fp16", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16")


def _precision_v2(v: str) -> str:
    if v in ("cube_hif8", "mixed_hif8"):
        raise ValueError(
            f"{v}: HiFloat8 is an Ascend data type aioge has no kernels for; allowed values: {', '.join(PRECISION_MODES_V2)}"
        )
    if v and v not in PRECISION_MODES_V2:
        raise ValueError(f"allowed values: {', '.join(PRECISION_MODES_V2)} (or empty: ge.exec.precision_mode decides)")
    return v


_S = frozenset({SESSION})
_G = frozenset({GRAPH})
_SG = frozenset({SESSION, GRAPH})

_TABLE: tuple[OptionSpec, ...] = (
    OptionSpec(
        "ge.exec.exclude_engines",
        "EXCLUDE_ENGINES",
        _SG,
        "",
        _engines,
        "exclude_engines",
        doc="engines not to use, '|'-separated out of AiCore, AiVec (AiVector), AiCpu",
        stage=COMPILER,
    ),
    OptionSpec(
        "ge.op_compiler_cache_mode",
        "OP_COMPILER_CACHE_MODE",
        _SG,
        "enable",
        _choice("enable", "force", "disable"),
        "op_cache_mode",
        doc="kernel cache: enable reuses, force recompiles and replaces, disable neither reads nor writes",
        stage=CACHE,
    ),
    OptionSpec(
        "ge.op_compiler_cache_dir",
        "OP_COMPILER_CACHE_DIR",
        _S,
        "",
        _cache_dir,
        "op_cache_dir",
        env="ASCEND_CACHE_PATH",
        doc="kernel cache root (default $ASCEND_CACHE_PATH, then $HOME/atc_data)",
        stage=CACHE,
    ),
    OptionSpec(
        "ge.optimizationSwitch",
        "OPTIMIZATION_SWITCH",
        _SG,
        "",
        _switch,
        "optimization_switch",
        doc="'Pass:on;Pass:off' to switch graph passes (see `aioge passes`)",
        stage=COMPILER,
    ),
    OptionSpec(
        "ge.graph_compiler_cache_dir",
        None,
        _S,
        "",
        _path,
        "graph_cache_dir",
        doc="directory of the compiled-graph cache; must exist; needs ge.graph_key too",
        stage=CACHE,
    ),
    OptionSpec(
        "ge.graph_key",
        None,
        _G,
        "",
        _graph_key,
        "graph_key",
        doc="the graph's name in the graph cache: 1-128 of A-Z a-z 0-9 _ -",
        stage=CACHE,
    ),
    OptionSpec(
        "ge.externalWeight",
        "EXTERNAL_WEIGHT",
        _SG,
        "0",
        _flag01,
        "external_weight",
        doc="1: keep constants in files under weight/ beside the compiled model",
        stage=CACHE,
    ),
    OptionSpec(
        "ge.opDebugLevel",
        "OP_DEBUG_LEVEL",
        _S,
        "0",
        _int_range(0, 4),
        "op_debug_level",
        doc="not 0: kernels check their outputs for NaN/Inf and the kernel cache is bypassed",
        stage=COMPILER,
        also=("op_debug_level",),  # ATC's --op_debug_level; aioge's key before GE's
    ),
    OptionSpec(
        "op_debug_config",
        "OP_DEBUG_CONFIG",
        _S,
        "",
        _path,
        "op_debug_config",
        doc="path of an op debug config file (op_debug_list=OpA,OpB limits it to those ops)",
        stage=COMPILER,
        also=("ge.exec.opDebugConfig",),  # GE's OPTION_EXEC_OP_DEBUG_CONFIG
    ),
    OptionSpec(
        "ge.streamMaxParallelNum",
        "STREAM_MAX_PARALLEL_NUM",
        _SG,
        "AiCore:4,AiVec:2,AiCpu:1",
        _stream_max,
        "stream_max_parallel",
        doc="streams per engine, 'AiCore:4,AiVec:2,AiCpu:1'",
        stage=COMPILER,
    ),
    OptionSpec(
        "ge.enableSingleStream",
        "ENABLE_SINGLE_STREAM",
        _SG,
        "false",
        _bool,
        "single_stream",
        doc="true: every node on one stream",
        stage=COMPILER,
    ),
    OptionSpec(
        "ge.exec.disableReuseMemory",
        "DISABLE_REUSE_MEMORY",
        _SG,
        "0",
        _flag01,
        "disable_reuse_memory",
        doc="1: every tensor gets its own arena region",
        stage=COMPILER,
    ),
    OptionSpec(
        "ge.socVersion",
        "SOC_VERSION",
        _S,
        "AiogeSim",
        _graph_key,
        "soc_version",
        doc="the simulated chip; kernels are cached per soc",
        stage=COMPILER,
    ),
    OptionSpec(
        "aioge.tune_mode",
        None,
        _SG,
        "tune",
        _choice("tune", "heuristic"),
        "tune_mode",
        doc="tune: time candidate kernels on the real shapes; heuristic: pick by rule, no timing",
        stage=COMPILER,
    ),
    OptionSpec(
        "aioge.tune_budget_ms",
        None,
        _SG,
        "200",
        _positive_float,
        "tune_budget_ms",
        doc="time budget for tuning one op",
        stage=COMPILER,
    ),
    OptionSpec(
        "aioge.exec_mode",
        None,
        _SG,
        "sink",
        _choice("sink", "host"),
        "exec_mode",
        doc="sink: each stream runs in its worker; host: ops dispatched one by one from the loop",
        stage=COMPILER,
    ),
    OptionSpec(
        "aioge.exec_devices",
        None,
        _S,
        "0",
        _int_range(0, 64),
        "exec_devices",
        doc="N > 0: run graphs on N device processes (runs in parallel past the GIL); 0: in this process",
        stage=RUNTIME,
    ),
    OptionSpec(
        "aioge.exec_threads",
        None,
        _SG,
        "auto",
        _choice("auto", "streams"),
        "exec_threads",
        doc="sink mode: auto runs streams whose overlap does not pay for thread wake-ups in one thread; streams: a thread each",
        stage=COMPILER,
    ),
    OptionSpec(
        "aioge.graph_cache_check",
        None,
        _SG,
        "fingerprint",
        _choice("fingerprint", "key"),
        "graph_cache_check",
        doc="fingerprint: reload only an identical graph; key: trust graph_key alone (GE)",
        stage=CACHE,
    ),
    OptionSpec(
        "ge.inputShape",
        "INPUT_SHAPE",
        _G,
        "",
        _input_shape,
        "input_shape",
        doc="input shapes, 'data:1,3,224,224;other:...': static (ATC's --input_shape), or with -1 for the dims "
        "ge.dynamicBatchSize or ge.dynamicDims set",
        stage=COMPILER,
        also=("input_shape",),  # GE's ir_option::INPUT_SHAPE string
    ),
    OptionSpec(
        "ge.dynamicBatchSize",
        "DYNAMIC_BATCH_SIZE",
        _G,
        "",
        _batch_sizes,
        "dynamic_batch_size",
        doc="batch gears '1,2,4,8' (2-100), all compiled ahead; a run pads to the smallest that fits",
        stage=COMPILER,
    ),
    OptionSpec(
        "ge.dynamicDims",
        "DYNAMIC_DIMS",
        _G,
        "",
        _dims,
        "dynamic_dims",
        doc="dims gears '4;8;16' or '1,64;2,32' (2-100), one value per -1 of ge.inputShape",
        stage=COMPILER,
    ),
    OptionSpec(
        "aioge.batch_max_rows",
        None,
        _G,
        "0",
        _int_range(0, 1 << 20),
        "batch_max_rows",
        doc="N > 0: stack concurrent runs of the graph into batches of up to N rows (dim 0); 0: off",
        stage=SERVER,
    ),
    OptionSpec(
        "aioge.batch_max_delay_us",
        None,
        _G,
        "1000",
        _int_range(0, 10_000_000),
        "batch_max_delay_us",
        doc="how long a batch waits for more rows after its first, in microseconds",
        stage=SERVER,
    ),
    OptionSpec(
        "aioge.batch_preferred_sizes",
        None,
        _G,
        "",
        _sizes,
        "batch_preferred_sizes",
        doc="batch sizes compiled up front and padded to, '1,4,16' (default: powers of 2 up to batch_max_rows)",
        stage=SERVER,
    ),
    OptionSpec(
        "aioge.cache_shared",
        None,
        _S,
        "0",
        _flag01,
        "cache_shared",
        doc="1: cache files are group-writable and files of other owners are trusted",
        stage=CACHE,
    ),
    OptionSpec(
        "aioge.remote_cache",
        None,
        _S,
        "",
        _remote_url,
        "remote_cache",
        env="AIOGE_REMOTE_CACHE",
        doc="a remote cache tier behind the disk caches (needs the redis extra): redis://host:port/db",
        stage=CACHE,
    ),
    OptionSpec(
        "aioge.remote_cache_timeout_ms",
        None,
        _S,
        "500",
        _positive_float,
        "remote_cache_timeout_ms",
        doc="deadline of one remote cache request; a remote that misses it is left alone for 30 s",
        stage=CACHE,
    ),
    OptionSpec(
        "aioge.remote_cache_ttl",
        None,
        _S,
        "604800",
        _int_range(1, 10 * 365 * 86400),
        "remote_cache_ttl",
        doc="seconds a remote cache entry lives after it is written",
        stage=CACHE,
    ),
    OptionSpec(
        "aioge.remote_cache_max_entry_mb",
        None,
        _S,
        "64",
        _int_range(1, 4096),
        "remote_cache_max_entry_mb",
        doc="entries larger than this are not sent to the remote cache",
        stage=CACHE,
    ),
    OptionSpec(
        "aioge.remote_cache_key",
        None,
        _S,
        "",
        str,
        "remote_cache_key",
        env="AIOGE_REMOTE_CACHE_KEY",
        doc="a shared secret: remote entries are HMAC-signed with it, unsigned or badly signed ones are a miss",
        stage=CACHE,
        secret=True,
    ),
    OptionSpec(
        "aioge.max_builds_per_graph",
        None,
        _SG,
        "8",
        _int_range(1, 4096),
        "max_builds_per_graph",
        doc="input shapes whose build a graph keeps, least recently run dropped first (gears are kept besides)",
        stage=RUNTIME,
    ),
    OptionSpec(
        "ge.exec.precision_mode",
        "PRECISION_MODE",
        _SG,
        "must_keep_origin_dtype",
        _choice(*PRECISION_MODES),
        "precision_mode",
        doc="GE's precision mode: matrix ops (MatMul, Gemm, Conv...) in bf16/fp16 with float32 accumulation, or not "
        "(must_keep_origin_dtype, the default: float32 as given)",
        stage=COMPILER,
        also=("precision_mode",),  # ATC's --precision_mode
    ),
    OptionSpec(
        "ge.exec.precision_mode_v2",
        "PRECISION_MODE_V2",
        _SG,
        "",
        _precision_v2,
        "precision_mode_v2",
        doc="GE's newer names for the precision modes (origin, fp16, cube_fp16in_fp32out, mixed_float16, "
        "mixed_bfloat16); excludes ge.exec.precision_mode",
        stage=COMPILER,
        also=("precision_mode_v2",),
    ),
    OptionSpec(
        "ge.exec.modify_mixlist",
        "MODIFY_MIXLIST",
        _SG,
        "",
        _path,
        "modify_mixlist",
        doc='a JSON file moving op types between the mixed modes\' lists: {"white-list": {"to-add": [...], '
        '"to-remove": [...]}, "black-list": ..., "gray-list": ...}',
        stage=COMPILER,
        also=("modify_mixlist",),
        content=True,
    ),
    OptionSpec(
        "ge.keep_dtype",
        "KEEP_DTYPE",
        _SG,
        "",
        _path,
        "keep_dtype",
        doc="a file of node names and OpType::X lines, one a line: those nodes keep their float32 whatever the mode",
        stage=COMPILER,
        also=("keep_dtype",),
        content=True,
    ),
)

OPTIONS: Mapping[str, OptionSpec] = MappingProxyType({s.key: s for s in _TABLE})
_ALIASES: Mapping[str, str] = MappingProxyType({a: s.key for s in _TABLE for a in (s.alias, *s.also) if a})
_BY_FIELD: Mapping[str, OptionSpec] = MappingProxyType({s.field: s for s in _TABLE})


def _default(name: str) -> Any:
    """The ``CompileOptions`` default of field ``name``: its option's default string, parsed
    (when an instance is made without it, never at import: some parsers import passes)."""
    spec = _BY_FIELD[name]
    return field(default_factory=lambda: spec.parse(spec.default))


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """Options resolved for one graph: session and graph levels merged, env fallbacks read, typed."""

    exclude_engines: frozenset[Engine] = _default("exclude_engines")
    op_cache_mode: str = _default("op_cache_mode")
    op_cache_dir: str = _default("op_cache_dir")
    optimization_switch: Mapping[str, bool] = _default("optimization_switch")
    graph_cache_dir: str = _default("graph_cache_dir")
    graph_key: str = _default("graph_key")
    external_weight: bool = _default("external_weight")
    op_debug_level: int = _default("op_debug_level")
    op_debug_config: str = _default("op_debug_config")
    stream_max_parallel: Mapping[Engine, int] = _default("stream_max_parallel")
    single_stream: bool = _default("single_stream")
    disable_reuse_memory: bool = _default("disable_reuse_memory")
    soc_version: str = _default("soc_version")
    tune_mode: str = _default("tune_mode")
    tune_budget_ms: float = _default("tune_budget_ms")
    exec_mode: str = _default("exec_mode")
    exec_threads: str = _default("exec_threads")
    exec_devices: int = _default("exec_devices")
    graph_cache_check: str = _default("graph_cache_check")
    cache_shared: bool = _default("cache_shared")
    input_shape: Mapping[str, tuple[int, ...]] = _default("input_shape")
    dynamic_batch_size: tuple[int, ...] = _default("dynamic_batch_size")
    dynamic_dims: tuple[tuple[int, ...], ...] = _default("dynamic_dims")
    batch_max_rows: int = _default("batch_max_rows")
    batch_max_delay_us: int = _default("batch_max_delay_us")
    batch_preferred_sizes: tuple[int, ...] = _default("batch_preferred_sizes")
    remote_cache: str = _default("remote_cache")
    remote_cache_timeout_ms: float = _default("remote_cache_timeout_ms")
    remote_cache_ttl: int = _default("remote_cache_ttl")
    remote_cache_max_entry_mb: int = _default("remote_cache_max_entry_mb")
    remote_cache_key: str = _default("remote_cache_key")
    max_builds_per_graph: int = _default("max_builds_per_graph")
    precision_mode: str = _default("precision_mode")
    precision_mode_v2: str = _default("precision_mode_v2")
    modify_mixlist: str = _default("modify_mixlist")
    keep_dtype: str = _default("keep_dtype")
    raw: Mapping[str, str] = field(default_factory=dict)  # the effective string values, by GE key

    def streams_for(self, engine: Engine) -> int:
        """How many streams ``engine`` may use."""
        if self.single_stream:
            return 1
        return self.stream_max_parallel.get(engine, 1)


def canonical_key(key: str) -> str:
    """The GE key for a key or ir_option alias.

    Raises:
        OptionError: not a known option.
    """
    if key in OPTIONS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    known = ", ".join(sorted(OPTIONS))
    close = difflib.get_close_matches(key, [*OPTIONS, *_ALIASES], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise OptionError(key, "", f"unknown option; {hint}known options: {known} (and their aliases)")


def check_options(options: Mapping[str, object] | None, level: str) -> dict[str, str]:
    """Validate options given at ``level`` ("session" or "graph") and return them by GE key.

    Raises:
        OptionError: not a mapping, an unknown key, a non-string or invalid value, a wrong
            level, or a key given twice (under its key and its alias).
    """
    out: dict[str, str] = {}
    spelled: dict[str, str] = {}
    if options is not None and not isinstance(options, Mapping):
        raise OptionError("options", options, "a mapping of option keys to string values, as in GE")
    for key, value in (options or {}).items():
        if not isinstance(key, str):
            raise OptionError(repr(key), value, "option keys are strings")
        canon = canonical_key(key)
        spec = OPTIONS[canon]
        if not isinstance(value, str):
            raise OptionError(key, value, f"option values are strings, as in GE (got {type(value).__name__})")
        if level not in spec.levels:
            where = " or ".join(sorted(spec.levels))
            raise OptionError(key, value, f"this option is set at {where} level, not {level} level")
        if canon in out:
            raise OptionError(key, value, f"given twice (as {spelled[canon]} and {key}, both {canon})")
        try:
            spec.parse(value)
        except ValueError as exc:
            raise OptionError(key, value, str(exc)) from None
        if spec.content and value:
            _file_digest(key, value)  # a file that cannot be read is named as the caller spelled it
        out[canon] = value
        spelled[canon] = key
    return out


def resolve_options(
    session: Mapping[str, str],
    graph: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> CompileOptions:
    """Merge checked session and graph options (the graph's win; optimizationSwitch merges
    per pass), fill env fallbacks and defaults, and return them typed.

    Raises:
        OptionError: an environment fallback holds an invalid value.
    """
    env = os.environ if env is None else env
    merged: dict[str, str] = dict(session)
    for key, value in (graph or {}).items():
        if key == "ge.optimizationSwitch" and key in merged:
            combined = dict(_switch(merged[key]))
            combined.update(_switch(value))
            value = ";".join(f"{k}:{'on' if v else 'off'}" for k, v in combined.items())
        merged[key] = value
    values: dict[str, Any] = {}
    raw: dict[str, str] = {}
    for spec in _TABLE:
        text = merged.get(spec.key)
        if text is None and spec.env and env.get(spec.env):
            text = env[spec.env]
            try:
                spec.parse(text)
            except ValueError as exc:
                raise OptionError(spec.env, text, f"environment fallback for {spec.key}: {exc}") from None
        if text is None:
            text = spec.default
        values[spec.field] = spec.parse(text)
        raw[spec.key] = "***" if spec.secret and text else text
        if spec.content and text:  # the file's content shapes the compile: the keys hold its digest
            raw[spec.key + "#sha256"] = _file_digest(spec.key, text)
    _check_gears(values, raw)
    if "ge.exec.precision_mode" in merged and values["precision_mode_v2"]:
        raise OptionError(
            "ge.exec.precision_mode_v2",
            raw["ge.exec.precision_mode_v2"],
            f"ge.exec.precision_mode ({raw['ge.exec.precision_mode']}) is given too: they exclude each other, as in ATC",
        )
    return CompileOptions(**values, raw=MappingProxyType(raw))


def _file_digest(key: str, path: str) -> str:
    """sha256 of the file an option names (a small config file).

    Raises:
        OptionError: the file cannot be read.
    """
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(1 << 20)).hexdigest()
    except OSError as exc:
        raise OptionError(key, path, f"a readable file ({exc.strerror})") from None


def _check_gears(values: Mapping[str, Any], raw: Mapping[str, str]) -> None:
    """GE's rules across the gear options: batch and dims gears exclude each other, need
    ge.inputShape, and a -1 count that fits them.

    Raises:
        OptionError: the options disagree.
    """
    batch, dims, shapes = values["dynamic_batch_size"], values["dynamic_dims"], values["input_shape"]
    if batch and dims:
        raise OptionError("ge.dynamicDims", raw["ge.dynamicDims"], "ge.dynamicBatchSize and ge.dynamicDims exclude each other")
    key = "ge.dynamicBatchSize" if batch else "ge.dynamicDims"
    unknown = sum(d == -1 for s in shapes.values() for d in s)
    if (batch or dims) and not unknown:
        raise OptionError(key, raw[key], "needs ge.inputShape with -1 for the dims the gears set, e.g. data:-1,3,224,224")
    if batch and any(s and (-1 in s[1:]) for s in shapes.values()):
        raise OptionError(key, raw[key], f"ge.inputShape {raw['ge.inputShape']!r} may hold -1 only as the first (batch) dim")
    if dims and len(dims[0]) != unknown:
        raise OptionError(
            key, raw[key], f"each gear gives {len(dims[0])} dims; ge.inputShape {raw['ge.inputShape']!r} has {unknown} -1"
        )
    if unknown and not (batch or dims):  # alone, it gives static shapes (ATC's --input_shape)
        raise OptionError(
            "ge.inputShape",
            raw["ge.inputShape"],
            "-1 marks a dim the gears set: use it with ge.dynamicBatchSize or ge.dynamicDims, or give every dim",
        )
