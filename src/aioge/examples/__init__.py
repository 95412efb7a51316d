"""Bundled example graphs built with the builder (used by ``aioge demo``, the tests and the benchmarks).

Each ``build_*`` function returns ``(graph, feeds, reference)`` where ``reference(feeds)``
computes the same outputs with plain numpy, written the way a user would by hand.
"""

from aioge.examples.cnn import build_cnn
from aioge.examples.mlp import build_mlp

__all__ = ["EXAMPLES", "build_cnn", "build_mlp"]

EXAMPLES = {"mlp": build_mlp, "cnn": build_cnn}
