"""Bundled example graphs built with the builder (used by ``aioge demo``, the tests and the benchmarks).

Each ``build_*`` function returns ``(graph, feeds, reference)`` where ``reference(feeds)``
computes the same outputs with plain numpy, written the way a user would by hand.
"""

from typing import Callable

import numpy as np

from aioge.examples.cnn import build_cnn
from aioge.examples.mlp import build_mlp
from aioge.examples.transformer import build_transformer
from aioge.ir.graph import Graph

__all__ = ["EXAMPLES", "build_cnn", "build_mlp", "build_transformer"]

Feeds = dict[str, np.ndarray]

EXAMPLES: dict[str, Callable[[], tuple[Graph, Feeds, Callable[[Feeds], Feeds]]]] = {
    "mlp": build_mlp,
    "cnn": build_cnn,
    "transformer": build_transformer,
}
