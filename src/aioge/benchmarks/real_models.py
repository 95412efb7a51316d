"""Models with real (seeded random) weights, exported from torch, for the ``real`` suite.

The ``light/`` models carry weights from ConstantOfShape: every filter is the same, so
DuplicateFilterPass computes one filter for all and the figures flatter aioge. These models
are torchvision's and transformers' architectures with seeded random initialisation (no
download: ``weights=None``, transformers from a config), exported to ONNX once by
``python -m aioge.benchmarks.real_models export NAME PATH`` in a child process (the bench
process never imports torch, whose own thread pools would skew its timings) and cached in
``~/.cache/aioge/bench-models/<torch version>-<recipe hash>/``. The feeds and torch's own
outputs are stored beside the model (``.npz``, read without pickle) and are the check.

The group also holds ``light/`` again with DuplicateFilterPass off (``<name>-nodup``).
Without torch, torchvision and transformers (the ``torch`` extra) the real models are
skipped by the suite, which says so in RESULTS.md.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "LIGHT_NODUP_SUFFIX",
    "NODUP_OPTIONS",
    "REAL",
    "REAL_RECIPES",
    "cache_dir",
    "light_nodup",
    "real_available",
    "real_model_path",
    "real_workload",
]

# name -> (kind, input shape); kind picks the builder in _torch_model.
REAL_RECIPES: dict[str, tuple[str, tuple[int, ...]]] = {
    "resnet18": ("torchvision", (1, 3, 224, 224)),
    "mobilenet_v3_small": ("torchvision", (1, 3, 224, 224)),
    "efficientnet_b0": ("torchvision", (1, 3, 224, 224)),
    "shufflenet_v2_x1_0": ("torchvision", (1, 3, 224, 224)),
    "mobilenet_v2": ("torchvision", (1, 3, 224, 224)),  # inverted residuals: 1x1 expand, depthwise, 1x1 project
    "googlenet": ("torchvision", (1, 3, 224, 224)),  # Inception blocks: four branches with max pools, concat
    "convnext_tiny": ("torchvision", (1, 3, 224, 224)),
    "vit_b_16": ("torchvision", (1, 3, 224, 224)),
    "bert_base": ("bert", (1, 128)),  # BertConfig() defaults: 12 layers x 768, seq 128
    "gpt2_small": ("gpt2", (1, 128)),  # 6 layers x 768, 8192-token vocabulary, no past
    "lstm_text": ("lstm", (1, 256)),  # embedding 128, 2-layer bidirectional LSTM 256, linear on the last step
    "gru_tagger": ("gru", (1, 256)),  # embedding 128, bidirectional GRU 256, a linear per step
}
REAL = tuple(REAL_RECIPES)
_RECIPE_VERSION = 1  # bump when an export changes (opset, seeds, configs): a new cache directory
_OPSET = 17
_SEED = 0
NODUP_OPTIONS = {"ge.optimizationSwitch": "DuplicateFilterPass:off"}
LIGHT_NODUP_SUFFIX = "-nodup"


def real_available() -> str | None:
    """None when the real models can be exported (or are all cached), else why not."""
    missing = [m for m in ("torch", "torchvision", "transformers") if importlib.util.find_spec(m) is None]
    if missing and not all((_cached_dir(None) / f"{n}.onnx").exists() for n in REAL):
        return f"the torch extra is not installed (missing {', '.join(missing)}): pip install 'aioge[torch]'"
    return None


def _torch_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # noqa: BLE001  (PackageNotFoundError or a broken install: no torch to key on)
        return None


def cache_dir() -> Path:
    """Where exported models go: ``$AIOGE_BENCH_MODELS`` or ``~/.cache/aioge/bench-models``."""
    return Path(os.environ.get("AIOGE_BENCH_MODELS") or Path.home() / ".cache" / "aioge" / "bench-models")


def _cached_dir(torch_version: str | None = "") -> Path:
    tv = _torch_version() if torch_version == "" else torch_version
    recipe = json.dumps({"v": _RECIPE_VERSION, "opset": _OPSET, "seed": _SEED, "recipes": REAL_RECIPES}, sort_keys=True)
    key = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    return cache_dir() / f"torch{tv or '-none'}-{key}"


def _export(name: str, out: Path) -> None:
    """Export ``name`` in a child process (torch stays out of this one); atomic on success."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-P", "-m", "aioge.benchmarks.real_models", "export", name, str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"exporting {name} with torch failed ({proc.returncode}): {proc.stderr[-2000:]}")


def real_model_path(name: str) -> Path:
    """The exported ``name``.onnx (its feeds and expected outputs beside it, in ``.npz``),
    exported on first use. RuntimeError if the export fails."""
    path = _cached_dir() / f"{name}.onnx"
    if not path.exists() or not path.with_suffix(".npz").exists():
        _export(name, path)
    return path


def real_workload(name: str) -> Any:
    """The ``real`` Workload for ``name`` (exported on first use). RuntimeError if the export fails."""
    import onnx

    import aioge
    from aioge.benchmarks.workloads import Workload

    path = real_model_path(name)
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    feeds = {k[5:]: v for k, v in data.items() if k.startswith("feed:")}
    model = onnx.load(str(path))
    graph = aioge.load_onnx(str(path))
    first = graph.outputs[0].name
    expected = {first: data["expected"].astype(np.float64)}
    # Deep float32 nets summed in another order: ONNX's rule with a looser rtol, and an atol at
    # the output's scale (logits of a few units; a relative 1e-4 of the largest).
    atol = 1e-4 * float(np.abs(data["expected"]).max() or 1.0) + 1e-5
    return Workload(name, "real", graph, model, feeds, expected, rtol=2e-3, atol=atol)


def light_nodup(name: str) -> Any:
    """light/ ``name`` with DuplicateFilterPass off (every filter computed, as with real weights)."""
    from aioge.benchmarks.workloads import load_workloads

    base = name[: -len(LIGHT_NODUP_SUFFIX)]
    (w,) = load_workloads([base])
    w.name, w.group = name, "light-nodup"
    w.options = {**w.options, **NODUP_OPTIONS}
    return w


# -- the export (child process, torch imported) ------------------------------------------------


def _torch_model(name: str) -> tuple[Any, Any]:
    import torch

    kind, shape = REAL_RECIPES[name]
    torch.manual_seed(_SEED)
    if kind == "torchvision":
        import torchvision  # type: ignore[import-untyped]

        model = getattr(torchvision.models, name)(weights=None).eval()
        gen = torch.Generator().manual_seed(_SEED + 1)
        with torch.no_grad():
            for m in model.modules():  # eval-mode batch norms that are not identities
                if isinstance(m, torch.nn.BatchNorm2d):
                    n = m.num_features
                    stats = (0.1 * torch.randn(n, generator=gen), 0.5 + torch.rand(n, generator=gen))
                    for buf, value in zip((m.running_mean, m.running_var), stats):
                        if buf is not None:
                            buf.copy_(value)
                    m.weight.copy_(1 + 0.1 * torch.randn(n, generator=gen))
                    m.bias.copy_(0.1 * torch.randn(n, generator=gen))
                elif isinstance(m, torch.nn.Linear) and float(m.weight.std()) < 0.02:
                    m.weight.normal_(0, m.in_features**-0.5)  # classifier inits near zero prove little
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(_SEED + 2))
        return model, x
    ids = torch.randint(0, 1000, shape, generator=torch.Generator().manual_seed(_SEED + 2))
    if kind in ("lstm", "gru"):
        return _recurrent(kind), ids
    if kind == "bert":
        from transformers import BertConfig, BertModel

        bert = BertModel(BertConfig(), add_pooling_layer=False).eval()

        class Bert(torch.nn.Module):
            def forward(self, ids: Any) -> Any:
                return bert(input_ids=ids).last_hidden_state

        wrapper: Any = Bert()
        wrapper.bert = bert
        return wrapper.eval(), ids
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=128, vocab_size=8192, use_cache=False)).eval()

    class Gpt(torch.nn.Module):
        def forward(self, ids: Any) -> Any:
            # An explicit all-ones mask: without one, transformers looks for packed sequences
            # with aten::diff, which the TorchScript exporter cannot export.
            return gpt(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits

    wrapper = Gpt()
    wrapper.gpt = gpt
    return wrapper.eval(), ids


def _recurrent(kind: str) -> Any:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 128)
            lstm = kind == "lstm"
            self.rnn = (torch.nn.LSTM if lstm else torch.nn.GRU)(
                128, 256, num_layers=2 if lstm else 1, bidirectional=True, batch_first=True
            )
            self.fc = torch.nn.Linear(512, 10 if lstm else 20)

        def forward(self, ids: Any) -> Any:
            y, _ = self.rnn(self.emb(ids))
            return self.fc(y[:, -1] if kind == "lstm" else y)

    return Net().eval()


def export(name: str, out: str) -> None:
    """Export ``name`` to ``out`` (.onnx) and its feeds and torch outputs beside it (.npz)."""
    import torch

    model, x = _torch_model(name)
    with torch.no_grad():
        want = model(x)
    path = Path(out)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    # The TorchScript exporter: it needs no onnxscript and no network.
    torch.onnx.export(
        model,
        (x,),
        str(tmp),
        input_names=["input"],
        output_names=["output"],
        opset_version=_OPSET,
        dynamo=False,
        do_constant_folding=True,
    )
    npz = path.with_name(path.stem + f".{os.getpid()}.tmp.npz")
    np.savez(npz, **{"feed:input": x.numpy(), "expected": want.numpy()})
    os.replace(npz, path.with_suffix(".npz"))
    os.replace(tmp, path)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "export" or sys.argv[2] not in REAL_RECIPES:
        sys.exit(f"usage: python -m aioge.benchmarks.real_models export {{{','.join(REAL)}}} OUT.onnx")
    export(sys.argv[2], sys.argv[3])
