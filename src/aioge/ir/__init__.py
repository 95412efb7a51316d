"""The graph IR: tensor descs, values, nodes, graphs and their fingerprint."""

from aioge.ir.desc import DTYPES, Dim, TensorDesc, canonical_dtype, is_static, numpy_dtype
from aioge.ir.fingerprint import array_digest, graph_fingerprint
from aioge.ir.graph import Graph, IOInfo, Node, Value, ValueKind

__all__ = [
    "DTYPES",
    "Dim",
    "Graph",
    "IOInfo",
    "Node",
    "TensorDesc",
    "Value",
    "ValueKind",
    "array_digest",
    "canonical_dtype",
    "graph_fingerprint",
    "is_static",
    "numpy_dtype",
]
