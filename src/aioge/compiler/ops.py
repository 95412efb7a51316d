"""The op compiler: one KernelDesc per node.

Picks, for every node, the implementation that applies to its signature. This is the
heuristic choice (the first implementation that applies, in the schema's order of
preference); timing candidates and the kernel disk cache build on it.
"""

from __future__ import annotations

import logging
from typing import Mapping

from aioge.compiler.kernel import KernelDesc, kernel_key, kernel_key_parts, signature_of
from aioge.engines import Engine
from aioge.errors import CompileError
from aioge.ir.graph import Graph, Node
from aioge.ops.registry import get_schema
from aioge.options import CompileOptions

__all__ = ["choose_impl", "heuristic_kernel"]

log = logging.getLogger(__name__)


def choose_impl(node: Node) -> str:
    """The name of the first implementation of the node's op that applies to its signature.

    Raises:
        CompileError: no implementation applies.
    """
    schema = get_schema(node.op_type, node.domain)
    descs = [v.desc if v is not None else None for v in node.inputs]
    for impl in schema.impls:
        if impl.applies(descs, node.attrs):
            return impl.name
    raise CompileError(f"no kernel of {node.op_type} applies to {descs}", graph=node.graph.name, nodes=[node.name])


def heuristic_kernel(node: Node, engine: Engine, options: CompileOptions) -> KernelDesc:
    """Compile one node without timing: the preferred applicable implementation."""
    schema = get_schema(node.op_type, node.domain)
    parts = kernel_key_parts(
        node, engine.value, soc=options.soc_version, op_debug_level=options.op_debug_level, impl_version=schema.version
    )
    ins, outs = signature_of(node)
    return KernelDesc(kernel_key(parts), node.op_type, node.domain, engine.value, ins, outs, choose_impl(node))


def compile_kernels_heuristic(graph: Graph, engines: Mapping[str, Engine], options: CompileOptions) -> dict[str, KernelDesc]:
    """A KernelDesc for every node, chosen by rule."""
    return {n.name: heuristic_kernel(n, engines[n.name], options) for n in graph.nodes}
