"""The generic codec of the plan dataclasses: values <-> plain msgpack data, with a type table.

Plans (``NodePlan``, ``KernelDesc``, ``StreamPlan``, ``MemoryPlan``, ...) are encoded from
their ``dataclasses.fields``, so fields the planners add travel without changes here. The
type table holds every dataclass and enum defined in the plan modules, by ``module.Name``:
a file can only name those. Decoding checks the field set against this aioge's, each value
against its field's annotation, and every tag; anything else is a ``ModelFormatError``.
``layout_digest`` hashes the fields (names and types) so a file written under another
layout is stale as a whole.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import hashlib
import types
import typing
from typing import Any, Callable, Mapping

import numpy as np

from aioge.errors import ModelFormatError
from aioge.ir.desc import DTYPES

__all__ = ["ARRAY_DTYPES", "build_dataclass", "decode_value", "encode_value", "layout_digest"]

# Tags of the generic encoding. Every mapping is encoded as a tagged map, so a plain dict in
# the decoded data is always a tag and never ambiguous. ("~w" and "~b" are serialize's.)
_T_TUPLE, _T_MAP, _T_DC, _T_ENUM, _T_NP, _T_STRS, _T_BIGINT, _T_SET = ("~t", "~m", "~dc", "~e", "~np", "~sa", "~bi", "~fs")
_MSGPACK_INT = (-(1 << 63), (1 << 64) - 1)
# The one list of dtypes stored as raw bytes (.om, cache files, the device wire): every ir
# dtype but "str", which travels as a list of strings.
ARRAY_DTYPES = frozenset(DTYPES) - {"str"}


# -- the type table -------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _types() -> tuple[dict[str, type], dict[type, str], dict[str, type[enum.Enum]], str]:
    """Dataclasses and enums an .om may name (by ``module.Name``), and a digest of their layout."""
    from aioge.ir import graph as ir_graph
    from aioge.kernels.contract import Engine
    from aioge.plan import kernel, memory, model, streams

    classes: dict[str, type] = {}
    # Engine lives in kernels/contract.py; an .om names it by its old home, so files and the
    # layout digest stay as they were.
    enums: dict[str, type[enum.Enum]] = {"engines.Engine": Engine}
    for mod in (kernel, streams, memory, model, ir_graph):
        short = mod.__name__.rsplit(".", 1)[-1]
        for name, obj in vars(mod).items():
            if not isinstance(obj, type) or obj.__module__ != mod.__name__:
                continue
            if dataclasses.is_dataclass(obj) and obj is not model.CompiledModel:
                classes[f"{short}.{name}"] = obj
            elif issubclass(obj, enum.Enum):
                enums[f"{short}.{name}"] = obj
    names = {cls: key for key, cls in classes.items()}
    h = hashlib.sha256(b"aioge-om-layout-v1")
    for key in sorted(classes):
        for f in dataclasses.fields(classes[key]):
            h.update(f"{key}.{f.name}:{f.type}|".encode())
    for f in dataclasses.fields(model.CompiledModel):
        h.update(f"CompiledModel.{f.name}:{f.type}|".encode())
    for key in sorted(enums):
        h.update(f"{key}={[m.value for m in enums[key]]}|".encode())
    return classes, names, enums, h.hexdigest()


def layout_digest() -> str:
    """A digest of every field (name and type) of the plan dataclasses an .om stores."""
    return _types()[3]


# -- generic values ---------------------------------------------------------------------


def encode_value(v: Any) -> Any:
    """Plain msgpack data for a value: scalars, arrays, tuples, lists, mappings, dataclasses, enums."""
    if v is None or isinstance(v, (bool, str, bytes, float)):
        return v
    if isinstance(v, int):
        return v if _MSGPACK_INT[0] <= v <= _MSGPACK_INT[1] else {_T_BIGINT: str(v)}
    if isinstance(v, enum.Enum):
        enums = _types()[2]
        for key, cls in enums.items():
            if type(v) is cls:
                return {_T_ENUM: [key, v.value]}
        raise TypeError(f"cannot store enum {type(v).__name__}")
    if isinstance(v, np.ndarray):
        if v.dtype.name in ARRAY_DTYPES:
            return v
        if v.dtype.kind in "UO":
            return {_T_STRS: [list(v.shape), [str(s) for s in v.reshape(-1).tolist()]]}
        raise TypeError(f"cannot store arrays of dtype {v.dtype}")
    if isinstance(v, np.generic):
        if v.dtype.name not in ARRAY_DTYPES:
            raise TypeError(f"cannot store numpy scalars of dtype {v.dtype}")
        return {_T_NP: [v.dtype.name, v.item()]}
    if isinstance(v, tuple):
        return {_T_TUPLE: [encode_value(x) for x in v]}
    if isinstance(v, list):
        return [encode_value(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return {_T_SET: sorted((encode_value(x) for x in v), key=repr)}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        dc_key = _types()[1].get(type(v))
        if dc_key is None:
            raise TypeError(f"cannot store dataclass {type(v).__name__}: not a plan type")
        return {_T_DC: [dc_key, {f.name: encode_value(getattr(v, f.name)) for f in dataclasses.fields(v)}]}
    if isinstance(v, Mapping):
        return {_T_MAP: [[encode_value(k), encode_value(x)] for k, x in v.items()]}
    raise TypeError(f"cannot store {type(v).__name__}")


def decode_value(v: Any) -> Any:
    """The inverse of ``_enc``.

    Raises:
        ModelFormatError: an unknown tag, dataclass or enum, or fields that do not match.
    """
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    if not isinstance(v, dict):
        return v  # scalars, bytes and arrays (already decoded, read-only, by plan.io)
    if len(v) != 1:
        raise ModelFormatError(f"malformed value: a map with keys {sorted(v)[:5]}")
    ((tag, body),) = v.items()
    if tag == _T_TUPLE:
        return tuple(decode_value(x) for x in _as_list(body, tag))
    if tag == _T_MAP:
        out = {}
        for item in _as_list(body, tag):
            pair = _as_list(item, tag)
            if len(pair) != 2:
                raise ModelFormatError("malformed map item")
            key = decode_value(pair[0])
            if isinstance(key, (list, dict, np.ndarray)):
                raise ModelFormatError(f"unhashable map key of type {type(key).__name__}")
            out[key] = decode_value(pair[1])
        return out
    if tag == _T_DC:
        key, fields = _as_list(body, tag)
        cls = _types()[0].get(key) if isinstance(key, str) else None
        if cls is None or not isinstance(fields, dict):
            raise ModelFormatError(f"unknown plan type {key!r}")
        return build_dataclass(cls, key, {k: decode_value(x) for k, x in fields.items()})
    if tag == _T_ENUM:
        key, value = _as_list(body, tag)
        cls_e = _types()[2].get(key) if isinstance(key, str) else None
        if cls_e is None:
            raise ModelFormatError(f"unknown enum {key!r}")
        try:
            return cls_e(value)
        except ValueError:
            raise ModelFormatError(f"{key} has no member {value!r}") from None
    if tag == _T_NP:
        dtype, value = _as_list(body, tag)
        if dtype not in ARRAY_DTYPES or not isinstance(value, (bool, int, float, complex)):
            raise ModelFormatError(f"bad numpy scalar {dtype!r}")
        return np.dtype(dtype).type(value)
    if tag == _T_STRS:
        return _str_array(body)
    if tag == _T_BIGINT:
        if not isinstance(body, str) or len(body) > 4096:
            raise ModelFormatError("bad big integer")
        return int(body)
    if tag == _T_SET:
        return frozenset(decode_value(x) for x in _as_list(body, tag))
    raise ModelFormatError(f"unknown tag {tag!r}")


def _as_list(body: Any, tag: str) -> list[Any]:
    if not isinstance(body, list):
        raise ModelFormatError(f"malformed {tag} value: {type(body).__name__}")
    return body


def build_dataclass(cls: type, key: str, values: dict[str, Any]) -> Any:
    names, checks, init, late = _layout(cls)
    if values.keys() != names:
        missing, extra = sorted(names - set(values)), sorted(set(values) - names)
        raise ModelFormatError(f"{key} fields differ from this aioge's (missing {missing}, unknown {extra})")
    for name, (hint, check) in checks.items():
        if not check(values[name]):
            raise ModelFormatError(f"{key}.{name}: expected {hint}, got {type(values[name]).__name__} {values[name]!r:.60}")
    obj = cls(**{name: values[name] for name in init})
    for name in late:
        object.__setattr__(obj, name, values[name])
    return obj


@functools.cache
def _layout(cls: type) -> tuple[frozenset[str], dict[str, tuple[Any, Callable[[Any], bool]]], list[str], list[str]]:
    """A dataclass's field names, (annotation, ``_check``) by field, and its init and late fields."""
    fields, hints = dataclasses.fields(cls), typing.get_type_hints(cls)
    checks = {f.name: (hints.get(f.name), _check(hints.get(f.name, Any))) for f in fields}
    return frozenset(checks), checks, [f.name for f in fields if f.init], [f.name for f in fields if not f.init]


_KINDS: dict[Any, Any] = {tuple: tuple, list: (list, tuple), collections.abc.Sequence: (list, tuple)}
_KINDS.update(dict.fromkeys((frozenset, set, collections.abc.Set), (frozenset, set)))


@functools.cache
def _check(hint: Any) -> Callable[[Any], bool]:
    """Whether a decoded value fits a field's annotation (the forms plan dataclasses use), built
    once per annotation: asking typing per value took 0.1 s of BERT-base's 0.27 s cache load."""
    if hint is Any:
        return lambda v: True
    if hint is None or hint is type(None):
        return lambda v: v is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        alts = [_check(a) for a in args]
        return lambda v: any(c(v) for c in alts)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis) and args:
        items = [_check(a) for a in args]
        return lambda v: isinstance(v, tuple) and len(v) == len(items) and all(c(x) for c, x in zip(items, v))
    if origin in _KINDS:  # tuple[X, ...], a list, a sequence or a set of X
        item, kind = _check(args[0] if args else Any), _KINDS[origin]
        return lambda v: isinstance(v, kind) and all(item(x) for x in v)
    if origin in (dict, collections.abc.Mapping):
        ck, cv = _check(args[0] if args else Any), _check(args[1] if args else Any)
        return lambda v: isinstance(v, Mapping) and all(ck(k) and cv(x) for k, x in v.items())
    if origin is typing.Literal:
        return lambda v: v in args
    if origin is not None:
        return (lambda v: isinstance(v, origin)) if isinstance(origin, type) else _check(Any)
    if hint is float:
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if hint is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if isinstance(hint, type):
        return lambda v: isinstance(v, hint)
    return _check(Any)  # a form not listed above: the structural checks after decoding still apply


def _str_array(body: Any) -> np.ndarray:
    shape, items = _as_list(body, _T_STRS)
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ModelFormatError("bad string array shape")
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items) or len(items) != int(np.prod(shape)):
        raise ModelFormatError("bad string array data")
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)
