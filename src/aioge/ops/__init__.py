"""Graph builders, one per op schema in the registry.

``aioge.ops.matmul(a, b)``, ``aioge.ops.conv2d(x, w, b, strides=(2, 2))`` and so on: each
builder validates the attributes, infers the output descs and adds a node to the graph its
inputs belong to. Inputs that are not graph values (numbers, lists, numpy arrays) become
constants of that graph. ``apply`` is the general form that every builder calls.

The builders are real functions with typed signatures, generated from the registry into
``aioge.ops.builders`` (``python -m aioge.ops.gen``), so IDEs and type checkers see them.
"""

from __future__ import annotations

from aioge.ops import builders
from aioge.ops.build import apply, infer_node, schemas

# After the registry imported the family modules: a family bound on the package
# (aioge.ops.shape, .conv, .attention) gives way to the builder of the same name.
from aioge.ops.builders import *  # noqa: F403

__all__ = ["apply", "infer_node", "schemas"]
__all__ += builders.__all__
