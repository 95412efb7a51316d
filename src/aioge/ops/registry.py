"""The registry: one constant table of every op schema, built from the family modules."""

from __future__ import annotations

import keyword
import re
from types import MappingProxyType
from typing import Mapping

from aioge.ops import (
    activation,
    algebra,
    attention,
    compare,
    control,
    conv,
    convert,
    detection,
    elementwise,
    fused,
    image,
    index,
    loss,
    math,
    ml,
    nn,
    norm,
    quant_linalg,
    recurrent,
    reduce,
    reduce_extra,
    sequence,
    shape,
    signal,
    strings,
    training,
    window,
)
from aioge.ops.schema import OpSchema

__all__ = ["REGISTRY", "builder_name", "get_schema"]

_FAMILIES = (
    elementwise,
    nn,
    conv,
    shape,
    reduce,
    activation,
    algebra,
    attention,
    compare,
    convert,
    image,
    index,
    loss,
    math,
    norm,
    recurrent,
    reduce_extra,
    signal,
    window,
    quant_linalg,
    training,
    detection,
    strings,
    ml,
    sequence,
    control,
    fused,
)


def _table() -> Mapping[tuple[str, str], OpSchema]:
    table: dict[tuple[str, str], OpSchema] = {}
    for family in _FAMILIES:
        for schema in family.SCHEMAS:
            key = (schema.domain, schema.name)
            if key in table:
                raise RuntimeError(f"op {schema.name!r} is declared twice")
            table[key] = schema
    return MappingProxyType(table)


REGISTRY: Mapping[tuple[str, str], OpSchema] = _table()


def get_schema(op_type: str, domain: str = "") -> OpSchema:
    """Return the schema of an op type.

    Raises:
        KeyError: no such op.
    """
    if domain == "ai.onnx":
        domain = ""
    return REGISTRY[(domain, op_type)]


def builder_name(schema: OpSchema) -> str:
    """The ``aioge.ops`` function name of an op: its declared builder, or snake_case of its name;
    a Python keyword gets a trailing underscore (``and_``, ``or_``, ``not_``), as in ``operator``."""
    if schema.builder:
        return schema.builder
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", schema.name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s
