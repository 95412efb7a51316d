"""Run the bundled CNN with passes on and off, on asyncio or trio, and compare with numpy.

python examples/cnn.py [asyncio|trio]
"""

from __future__ import annotations

import sys

import anyio
import numpy as np

import aioge
from aioge.examples import build_cnn


async def main() -> None:
    graph, feeds, reference = build_cnn(batch=8)
    expected = reference(feeds)["logits"]
    async with aioge.Session() as session:
        await session.add_graph(1, graph)
        await session.add_graph(2, graph, {"ge.optimizationSwitch": "ConvBatchNormFusionPass:off;ActivationFusionPass:off"})
        for gid in (1, 2):
            out = (await session.run_graph(gid, feeds))["logits"]
            model = session.compiled(gid)
            print(
                f"graph {gid}: {len(model.nodes)} nodes ({', '.join(n.op_type for n in model.nodes)}); "
                f"max |aioge - numpy| = {np.max(np.abs(out - expected)):.2e}"
            )


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
