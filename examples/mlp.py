"""Run the bundled MLP through a Session and compare it with plain numpy.

python examples/mlp.py
"""

from __future__ import annotations

import anyio
import numpy as np

import aioge
from aioge.examples import build_mlp


async def main() -> None:
    graph, feeds, reference = build_mlp(batch=32)
    async with aioge.Session() as session:
        await session.add_graph(1, graph)
        outputs = await session.run_graph(1, feeds)
        model = session.compiled(1)
    expected = reference(feeds)["probs"]
    print(f"{len(model.nodes)} nodes, engines {model.summary()['nodes_per_engine']}")
    print(f"max |aioge - numpy| = {np.max(np.abs(outputs['probs'] - expected)):.2e}")


if __name__ == "__main__":
    anyio.run(main)
