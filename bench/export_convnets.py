"""Export torchvision convnets (seeded random weights, BN stats randomised as in
aioge.benchmarks.real_models) to ONNX for bench/bench_convnets.py.

    python bench/export_convnets.py OUTDIR [names...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torchvision  # type: ignore[import-untyped]

NAMES = ("mobilenet_v2", "mnasnet0_5", "efficientnet_b0", "googlenet", "resnet18")


def export(name: str, out: Path) -> None:
    torch.manual_seed(0)
    kw = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, **kw).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(0.1 * torch.randn(n, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(n, generator=gen))
                m.weight.copy_(1 + 0.1 * torch.randn(n, generator=gen))
                m.bias.copy_(0.1 * torch.randn(n, generator=gen))
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(x)
    torch.onnx.export(
        model,
        (x,),
        str(out / f"{name}.onnx"),
        input_names=["input"],
        output_names=["output"],
        opset_version=17,
        dynamo=False,
        do_constant_folding=True,
    )
    np.savez(out / f"{name}.npz", input=x.numpy(), expected=want.numpy())


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or NAMES:
        export(name, out)
        print("exported", name)
