"""A Triton-style model repository (``aioge serve --model-repository DIR``): the set of served
models, versions and per-model options, read and checked before anything is served.

Layout: ``DIR/<model>/<version>/model.onnx`` (or ``model.om``), versions being positive
integers, and an optional ``DIR/<model>/config.toml``::

    max_batch_size = 8                      # dim 0 of every input is the batch, up to 8 rows
    version_policy = { latest = 2 }         # or "all", or { specific = [1, 3] } (default: latest 1)

    [[input]]                               # the inputs' shapes, -1 where the gears set a dim
    name = "x"
    dims = [-1, 4]

    [gears]                                 # compiled at load, never on a request
    batch_sizes = [1, 2, 4, 8]              # ge.dynamicBatchSize (default with max_batch_size: 1, 2, 4, .. max)
    # dims = [[16], [32]]                   # or ge.dynamicDims: one value per -1, per gear

    [dynamic_batching]                      # concurrent requests stacked into one run
    max_rows = 8                            # aioge.batch_max_rows (default: max_batch_size)
    max_delay_us = 500                      # aioge.batch_max_delay_us
    preferred_sizes = [4, 8]                # aioge.batch_preferred_sizes

    [options]                               # graph options for this model only
    "ge.exec.disableReuseMemory" = "1"

An ``.om`` version carries its own shapes, gears and compile options: only the batching ones
apply to it. A model without inputs declared serves the shapes its file gives (dynamic dims
as 1): a request of another shape is refused, never compiled. This module only reads files;
the server (``aioge.server``, REST, and any other front) turns the entries into served models.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from aioge.errors import ConfigError, OptionError
from aioge.options import check_options, resolve_options

__all__ = ["CONFIG", "ModelConfig", "ModelVersion", "config_field", "read_config", "read_repository"]

CONFIG = "config.toml"
_FILES = ("model.onnx", "model.om")
_TOP = ("max_batch_size", "version_policy", "input", "gears", "dynamic_batching", "options")
_BATCHING = {
    "max_rows": "aioge.batch_max_rows",
    "max_delay_us": "aioge.batch_max_delay_us",
    "preferred_sizes": "aioge.batch_preferred_sizes",
}
# keys the config's own fields set: not in [options]
_OWN = {"ge.inputShape": "input", "ge.dynamicBatchSize": "gears.batch_sizes", "ge.dynamicDims": "gears.dims"} | {
    v: f"dynamic_batching.{k}" for k, v in _BATCHING.items()
}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One model's config (the defaults when it has no ``config.toml``)."""

    name: str
    path: str = ""  # the config file ("" when there is none)
    inputs: tuple[tuple[str, tuple[int, ...]], ...] = ()
    max_batch_size: int = 0
    batch_sizes: tuple[int, ...] = ()
    dims: tuple[tuple[int, ...], ...] = ()
    batching: Mapping[str, str] = field(default_factory=dict)  # aioge.batch_* keys
    options: Mapping[str, str] = field(default_factory=dict)  # [options], checked
    policy: tuple[str, tuple[int, ...]] = ("latest", (1,))  # ("all", ()), ("specific", versions)

    def graph_options(self, model_file: str) -> dict[str, str]:
        """The graph options for one version's file (an .om takes only the batching ones)."""
        if model_file.endswith(".om"):
            return dict(self.batching)
        out = {**self.options, **self.batching}
        if self.inputs:
            out["ge.inputShape"] = ";".join(f"{n}:{','.join(map(str, d))}" for n, d in self.inputs)
        if self.batch_sizes:
            out["ge.dynamicBatchSize"] = ",".join(map(str, self.batch_sizes))
        if self.dims:
            out["ge.dynamicDims"] = ";".join(",".join(map(str, g)) for g in self.dims)
        return out

    def static_shapes(self) -> dict[str, tuple[int, ...]]:
        """The declared inputs when they have no -1 (the one shape built at load), else {}."""
        return {} if self.batch_sizes or self.dims else dict(self.inputs)

    def choose(self, versions: list[int]) -> list[int]:
        """The versions the policy serves, of those on disk (ascending)."""
        kind, arg = self.policy
        if kind == "all":
            return versions
        if kind == "latest":
            return versions[-arg[0] :]
        return [v for v in versions if v in arg]

    def triton_policy(self) -> dict[str, Any]:
        kind, arg = self.policy
        return (
            {"all": {}}
            if kind == "all"
            else {"latest": {"num_versions": arg[0]}}
            if kind == "latest"
            else {"specific": {"versions": list(arg)}}
        )


@dataclass(frozen=True, slots=True)
class ModelVersion:
    """One served version: the model's name, the version, its file and its model's config."""

    name: str
    version: int
    path: str
    config: ModelConfig


def _ints(value: Any, where: str, path: str, minimum: int, *, nested: bool = False) -> tuple[Any, ...]:
    if nested:
        if not isinstance(value, list) or not value:
            raise ConfigError(path, where, f"expected a non-empty list of lists of ints, got {value!r}")
        return tuple(_ints(v, f"{where}[{i}]", path, minimum) for i, v in enumerate(value))
    if not isinstance(value, list) or not value or not all(type(v) is int and v >= minimum for v in value):
        raise ConfigError(path, where, f"expected a non-empty list of ints >= {minimum}, got {value!r}")
    return tuple(value)


def _table(data: Mapping[str, Any], key: str, path: str, known: tuple[str, ...]) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(path, key, f"expected a table ([{key}]), got {value!r}")
    for k in value:
        if k not in known:
            raise ConfigError(path, f"{key}.{k}", f"unknown field; expected one of {list(known)}")
    return value


def _policy(value: Any, path: str) -> tuple[str, tuple[int, ...]]:
    if value == "all":
        return "all", ()
    if isinstance(value, dict) and len(value) == 1:
        ((kind, arg),) = value.items()
        if kind == "latest" and type(arg) is int and arg >= 1:
            return "latest", (arg,)
        if kind == "specific":
            return "specific", tuple(sorted(_ints(arg, "version_policy.specific", path, 1)))
    raise ConfigError(path, "version_policy", f'expected "all", {{ latest = N }} or {{ specific = [1, 2] }}, got {value!r}')


def read_config(name: str, path: Path) -> ModelConfig:
    """Read and check ``path`` (one model's ``config.toml``).

    Raises:
        ConfigError: unreadable TOML, an unknown or mistyped field, or fields that disagree.
    """
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(where, "(file)", f"not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(where, "(file)", f"cannot be read: {exc.strerror}") from None
    for k in data:
        if k not in _TOP:
            raise ConfigError(where, k, f"unknown field; expected one of {list(_TOP)}")
    mbs = data.get("max_batch_size", 0)
    if type(mbs) is not int or mbs < 0:
        raise ConfigError(where, "max_batch_size", f"expected an int >= 0, got {mbs!r}")
    raw_inputs = data.get("input", [])
    if not isinstance(raw_inputs, list):
        raise ConfigError(where, "input", "expected a list of tables ([[input]] with name and dims)")
    inputs: list[tuple[str, tuple[int, ...]]] = []
    for i, item in enumerate(raw_inputs):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or set(item) - {"name", "dims"}:
            raise ConfigError(where, f"input[{i}]", f'expected a table with "name" (a string) and "dims", got {item!r}')
        dims = item.get("dims")
        if not isinstance(dims, list) or not all(type(d) is int and (d > 0 or d == -1) for d in dims):
            raise ConfigError(where, f"input[{i}].dims", f"expected a list of dims > 0 or -1, got {dims!r}")
        if mbs and (not dims or dims[0] != -1):
            raise ConfigError(where, f"input[{i}].dims", f"max_batch_size {mbs}: dim 0 is the batch and must be -1, got {dims}")
        inputs.append((item["name"], tuple(dims)))
    gears = _table(data, "gears", where, ("batch_sizes", "dims"))
    batch_sizes = _ints(gears["batch_sizes"], "gears.batch_sizes", where, 1) if "batch_sizes" in gears else ()
    dims_gears = _ints(gears["dims"], "gears.dims", where, 1, nested=True) if "dims" in gears else ()
    if mbs == 1 and not batch_sizes and not dims_gears:  # one batch size: static shapes, no gears
        inputs = [(n, (1, *d[1:])) for n, d in inputs]
    elif mbs and not batch_sizes and not dims_gears:  # Triton's max_batch_size: every batch up to it
        batch_sizes = tuple(sorted({min(1 << i, mbs) for i in range(mbs.bit_length() + 1)}))
    if mbs and batch_sizes and max(batch_sizes) > mbs:
        raise ConfigError(where, "gears.batch_sizes", f"{list(batch_sizes)} go past max_batch_size {mbs}")
    unknown = sum(d == -1 for _, shape in inputs for d in shape)
    if (batch_sizes or dims_gears) and not unknown:
        field_ = "gears.batch_sizes" if batch_sizes else "gears.dims"
        raise ConfigError(where, field_, "gears set the -1 dims of the inputs: declare them ([[input]] dims with -1)")
    if unknown and not (batch_sizes or dims_gears):
        raise ConfigError(
            where, "input", "a -1 dim needs gears ([gears] batch_sizes or dims, or max_batch_size) to compile at load"
        )
    batching_table = _table(data, "dynamic_batching", where, tuple(_BATCHING))
    batching = {_BATCHING[k]: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in batching_table.items()}
    if "dynamic_batching" in data:
        if not batch_sizes:
            raise ConfigError(
                where, "dynamic_batching", "batching stacks rows along dim 0: it needs max_batch_size or gears.batch_sizes"
            )
        batching.setdefault("aioge.batch_max_rows", max(batch_sizes))
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise ConfigError(where, "options", f"expected a table of option keys to values ([options]), got {options!r}")
    for k, v in options.items():
        if k in _OWN:
            raise ConfigError(where, f"options.{k}", f"set by the config's {_OWN[k]} field, not in [options]")
        if not isinstance(v, (str, int, float, bool)):
            raise ConfigError(where, f"options.{k}", f"expected a string value, got {v!r}")
    strs = {k: str(int(v)) if isinstance(v, bool) else str(v) for k, v in {**options, **batching}.items()}
    config = ModelConfig(
        name,
        where,
        tuple(inputs),
        mbs,
        batch_sizes,
        dims_gears,
        {k: strs[k] for k in batching},
        {k: strs[k] for k in options},
        _policy(data.get("version_policy", {"latest": 1}), where),
    )
    try:
        resolve_options({}, check_options(config.graph_options("model.onnx"), "graph"), env={})
    except OptionError as exc:
        raise ConfigError(where, config_field(exc.key), str(exc)) from None
    return config


def config_field(key: str) -> str:
    """The config field that sets graph option ``key`` (to name it in an error)."""
    return _OWN.get(key) or f"options.{key}"


def read_repository(root: str | Path) -> list[ModelVersion]:
    """Every served version under ``root``, by model name then version.

    Raises:
        ConfigError: no such folder, no model in it, a bad config, a version folder that is not
            a positive integer or holds neither or both of model.onnx and model.om, or a model
            whose policy serves no version.
    """
    base = Path(root)
    if not base.is_dir():
        raise ConfigError(str(base), "(folder)", "no such model repository folder")
    out: list[ModelVersion] = []
    for folder in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        cfg_path = folder / CONFIG
        config = read_config(folder.name, cfg_path) if cfg_path.exists() else ModelConfig(folder.name)
        found: dict[int, Path] = {}
        for sub in folder.iterdir():
            if not sub.is_dir() or sub.name.startswith("."):
                continue
            if not sub.name.isdigit() or int(sub.name) < 1:
                raise ConfigError(str(sub), "(version folder)", "version folders are positive integers (1, 2, ...)")
            files = [sub / f for f in _FILES if (sub / f).is_file()]
            if len(files) != 1:
                raise ConfigError(str(sub), "(version folder)", f"expected one of {' or '.join(_FILES)}, found {len(files)}")
            found[int(sub.name)] = files[0]
        chosen = config.choose(sorted(found))
        if not chosen:
            raise ConfigError(
                config.path or str(folder), "version_policy", f"serves none of the versions on disk {sorted(found)}"
            )
        out += [ModelVersion(folder.name, v, str(found[v]), config) for v in chosen]
    if not out:
        raise ConfigError(str(base), "(folder)", "holds no model folder (DIR/<model>/<version>/model.onnx)")
    return out
