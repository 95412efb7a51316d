"""Recurrent held-out sweep: one bidirectional LSTM, GRU or RNN layer (input 128, batch_first)
and a Linear on every step, torch seeded weights, exported by the TorchScript exporter at opset 17.

    python bench/rnn_sweep_export.py [--out /tmp/aioge-rnn]
    chrt -f 1 python bench/heldout.py run --out /tmp/aioge-rnn --models lstm_b1_s512_h512,... -n 20 --block 5

Writes NAME.onnx and NAME.npz (``feed:input``, ``expected``) for NAME = {lstm,gru,rnn}_b{1,8}_s{64,512}_h{128,512},
the layout ``bench/heldout.py run`` reads (clear /tmp/aioge-heldout-cache first).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

INPUT = 128


def export(out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    cells = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}
    for kind, batch, seq, hidden in itertools.product(cells, (1, 8), (64, 512), (128, 512)):
        name = f"{kind}_b{batch}_s{seq}_h{hidden}"
        if (out / f"{name}.onnx").exists():
            continue
        torch.manual_seed(0)

        class Net(torch.nn.Module):
            def __init__(self, cell: type) -> None:
                super().__init__()
                self.rnn = cell(INPUT, hidden, num_layers=1, bidirectional=True, batch_first=True)
                self.fc = torch.nn.Linear(2 * hidden, 10)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                y, _ = self.rnn(x)
                return self.fc(y)

        model = Net(cells[kind]).eval()
        x = torch.randn(batch, seq, INPUT, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            want = model(x)
        path = str(out / f"{name}.onnx")
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"], opset_version=17, dynamo=False)
        np.savez(out / f"{name}.npz", **{"feed:input": x.numpy(), "expected": want.numpy()})
        print(name, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/aioge-rnn"))
    export(ap.parse_args().out)


if __name__ == "__main__":
    main()
