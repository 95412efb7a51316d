"""The front-end section (issue 41): models loaded through ``aioge.load_tf`` beside TensorFlow's own
``tf.function``, and ``torch.compile`` with ``aioge.torch.backend()`` beside eager PyTorch and
``torch.compile``'s inductor, on the same machine.

Each side's figure a call is the median over alternating rounds of ``measure.median_of_runs``
medians (warm-up first, ``SETTLE_S`` between sides), in one process. TF's ``compile_s`` runs from
the model in hand to its first output (``load_tf``; the first ``tf.function`` call). Torch
compiles are timed as a user sees them, each in a fresh process (``fresh_compiles``), from torch
and the model loaded to the first output of ``torch.compile(model, backend=...)`` under
``no_grad`` (aioge: ``import aioge.torch`` and ``backend()`` included; inductor: its lazy
imports), "cold" on empty caches (aioge's ``ge.graph_compiler_cache_dir`` and kernel cache,
inductor's ``TORCHINDUCTOR_CACHE_DIR``) and "warm" in a second process on those the cold one
filled: wall and CPU seconds (threads and reaped child processes), medians over rounds.
A reference that fails to compile is a row with its error, never a failed section.
"""

from __future__ import annotations

import compileall
import functools
import importlib.util
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Mapping

import anyio
import numpy as np

from aioge.benchmarks import measure

__all__ = [
    "FRONTENDS",
    "TF_MODELS",
    "TORCH_MODELS",
    "fresh_compiles",
    "frontends",
    "frontends_table",
    "torch_cache_dir",
    "torch_table",
]

FRONTENDS = ("tf", "torch")
# Every Keras application family with random weights at input size 96 (InceptionV3 and Xception
# need at least 75 / 71), a plain Keras CNN (the tiny one the test runs), an LSTM text model and a
# MultiHeadAttention encoder block (sequence length); batch 1.
_APPS = "MobileNet MobileNetV2 MobileNetV3Small MobileNetV3Large ResNet50 ResNet50V2 InceptionV3 Xception DenseNet121 EfficientNetB0 EfficientNetV2B0 NASNetMobile ConvNeXtTiny VGG16"  # fmt: skip
TF_MODELS = {"cnn": 64, **dict.fromkeys(_APPS.split(), 96), "lstm": 32, "mha": 32}
# name -> row label; mlp: the tiny one the test runs; the transformers ones are issue 41's named models
TORCH_MODELS = {
    "mlp": "mlp 4x64", "resnet18": "resnet18 1x3x128x128", "bert": "BertModel 2x16 + mask", "roberta": "RobertaModel 2x16 + mask",
    "distilbert": "DistilBertModel 2x16 + mask", "gpt2": "GPT2Model 2x16 + mask", "t5_encoder": "T5EncoderModel 2x16 + mask",
    "vit": "ViTModel 2x3x32x32", "whisper_encoder": "WhisperEncoder 2x16x32", "clip_text": "CLIPTextModel 2x16 + mask",
    "clip_vision": "CLIPVisionModel 2x3x32x32", "llama": "LlamaModel 2x16 + mask",
}  # fmt: skip
TORCH_REFERENCES = ("eager", "inductor")


def missing(frontend: str) -> str | None:
    """Why a front end's workloads cannot run here, or None."""
    need = {"tf": ("tensorflow", "keras"), "torch": ("torch", "torchvision", "transformers")}[frontend]
    absent = [m for m in need if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed (pip install 'aioge[{frontend}]')" if absent else None


def torch_cache_dir() -> str:
    """aioge's counterpart of inductor's ``/tmp/torchinductor_<user>``: a per-user dir under the system temp dir (made)."""
    import getpass

    path = os.path.join(tempfile.gettempdir(), f"aioge_bench_{getpass.getuser()}")
    os.makedirs(path, exist_ok=True)
    return path


def _alternate(sides: dict[str, Callable[[], Any]], rounds: int, runs: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(rounds):
        for k, fn in sides.items():
            time.sleep(measure.SETTLE_S)
            samples[k].append(measure.median_of_runs(fn, runs))
    return {k: statistics.median(v) for k, v in samples.items()}


def _err(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest difference relative to the reference's largest magnitude (random weights scale outputs)."""
    return float(np.abs(got - ref).max() / (np.abs(ref).max() or 1.0))


_KEYS = ("frontend", "model", "reference", "aioge", "compile_s", "ref", "ref_compile_s", "max_rel_err")


def _row(*values: Any) -> dict[str, Any]:
    """A row from ``_KEYS``' values (seconds), with ``ratio`` = aioge / reference."""
    row = dict(zip(_KEYS, values))
    return {**row, "ratio": row["aioge"] / row["ref"]}


def _keras_model(name: str, size: int) -> tuple[Any, np.ndarray, str]:
    """The model, a batch-1 input for it and the row's label."""
    import keras  # type: ignore[import-untyped]

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    L = keras.layers
    if name == "lstm":  # tokens -> Embedding -> LSTM -> Dense
        inp = keras.Input((size,), dtype="int32")
        out = L.Dense(4)(L.LSTM(64)(L.Embedding(1000, 32)(inp)))
        return keras.Model(inp, out), rng.integers(1, 1000, (1, size)).astype(np.int32), f"lstm text 1x{size}"
    if name == "mha":  # a post-norm Transformer encoder block, width 64, 4 heads
        inp = keras.Input((size, 64))
        h = L.LayerNormalization()(inp + L.MultiHeadAttention(num_heads=4, key_dim=16)(inp, inp))
        out = L.LayerNormalization()(h + L.Dense(64)(L.Dense(256, activation="gelu")(h)))
        return keras.Model(inp, out), rng.standard_normal((1, size, 64)).astype(np.float32), f"mha encoder 1x{size}x64"
    x = rng.standard_normal((1, size, size, 3)).astype(np.float32)
    if name == "cnn":
        layers = [keras.Input((size, size, 3)), L.Conv2D(16, 3, activation="relu"), L.MaxPooling2D(), L.Conv2D(32, 3, activation="relu"), L.GlobalAveragePooling2D(), L.Dense(10)]  # fmt: skip
        return keras.Sequential(layers), x, f"cnn {size}x{size}"
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    return model, x, f"{name} {size}x{size}"


async def _tf_model(name: str, size: int, rounds: int, runs: int) -> list[dict[str, Any]]:
    import tensorflow as tf

    import aioge

    model, x, label = _keras_model(name, size)
    xt = tf.constant(x)
    fn = tf.function(lambda t: model(t, training=False), autograph=False)
    t = time.perf_counter()
    ref = fn(xt).numpy()
    ref_compile = time.perf_counter() - t
    async with aioge.Session() as session:
        t = time.perf_counter()
        graph = await anyio.to_thread.run_sync(aioge.load_tf, model)
        await session.add_graph(1, graph)
        feeds = {graph.inputs[0].name: x}
        got = next(iter((await session.run_graph(1, feeds)).values()))
        compile_s = time.perf_counter() - t
        samples: dict[str, list[float]] = {"aioge": [], "tf": []}
        for _ in range(rounds):  # as measure.latency: aioge on the loop, TensorFlow in a worker thread
            await anyio.sleep(measure.SETTLE_S)
            samples["aioge"].append(await measure.median_of_runs_async(lambda: session.run_graph(1, feeds), runs))
            await anyio.sleep(measure.SETTLE_S)
            samples["tf"].append(await anyio.to_thread.run_sync(measure.median_of_runs, lambda: fn(xt).numpy(), runs))
    a, r = statistics.median(samples["aioge"]), statistics.median(samples["tf"])
    return [_row("tf", label, "tf.function", a, compile_s, r, ref_compile, _err(np.asarray(got), ref))]


def _hf_model(name: str) -> tuple[Any, dict[str, Any]]:
    """A small Hugging Face model from its config (random weights: hidden 64, 2 layers, 2 heads)
    called as users call it: 2x16 token ids with the second row padded in ``attention_mask``,
    2x3x32x32 pixels, or 2x16x32 log-mel features."""
    import torch
    import transformers as tr

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (2, 16), generator=gen)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    text = {"input_ids": ids, "attention_mask": mask}
    pixels = {"pixel_values": torch.randn(2, 3, 32, 32, generator=gen)}
    sizes: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
    vision: dict[str, Any] = {"image_size": 32, "patch_size": 8, **sizes}
    vocab: dict[str, Any] = {"vocab_size": 100, "max_position_embeddings": 64}
    cfg: Any
    if name in ("bert", "roberta", "clip_text"):
        cls = {"bert": "Bert", "roberta": "Roberta", "clip_text": "CLIPText"}[name]
        return getattr(tr, f"{cls}Model")(getattr(tr, f"{cls}Config")(**vocab, **sizes)), text
    if name == "distilbert":
        return tr.DistilBertModel(tr.DistilBertConfig(**vocab, dim=64, n_layers=2, n_heads=2, hidden_dim=128)), text
    if name == "gpt2":
        cfg = tr.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0)
        return tr.GPT2Model(cfg), text
    if name == "t5_encoder":
        return tr.T5EncoderModel(tr.T5Config(vocab_size=100, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2)), text
    if name in ("vit", "clip_vision"):
        return (
            tr.ViTModel(tr.ViTConfig(**vision)) if name == "vit" else tr.CLIPVisionModel(tr.CLIPVisionConfig(**vision))
        ), pixels
    if name == "whisper_encoder":
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        cfg = tr.WhisperConfig(
            vocab_size=100, d_model=64, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128,
            num_mel_bins=16, max_source_positions=16,
        )  # fmt: skip
        return WhisperEncoder(cfg), {"input_features": torch.randn(2, 16, 32, generator=gen)}
    assert name == "llama"
    return tr.LlamaModel(tr.LlamaConfig(**vocab, num_key_value_heads=1, **sizes)), text


def _torch_model(name: str) -> tuple[Any, dict[str, Any]]:
    import torch

    torch.manual_seed(0)
    m: torch.nn.Module
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        return m.eval(), {"input": torch.randn(4, 64)}
    if name == "resnet18":
        import torchvision  # type: ignore[import-untyped]

        return torchvision.models.resnet18().eval(), {"x": torch.randn(1, 3, 128, 128)}
    m, kwargs = _hf_model(name)
    return m.eval(), kwargs


def _tensor(out: Any) -> np.ndarray:
    return (out if hasattr(out, "numpy") else out.last_hidden_state).detach().numpy()


_SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this aioge's src dir
_COMPILE_CHILD = """import json, os, resource, sys, time
import torch
{models}
side, name = sys.argv[1:3]
model, kw = _torch_model(name)
with torch.no_grad():
    t, c, k = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if side == "aioge":
        import aioge.torch
        side = aioge.torch.backend({{"ge.graph_compiler_cache_dir": os.environ["ASCEND_CACHE_PATH"]}}, name=name)
    torch.compile(model, backend=side)(**kw)
    e = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps([time.perf_counter() - t, time.process_time() - c + e.ru_utime + e.ru_stime - k.ru_utime - k.ru_stime]))"""


def _fresh(name: str, backend: str, src: str, caches: str) -> tuple[float, float]:
    """One compile in a fresh process (``_COMPILE_CHILD``, bytecode written as installed): its wall and CPU seconds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": src}
    env |= {"ASCEND_CACHE_PATH": caches, "TORCHINDUCTOR_CACHE_DIR": os.path.join(caches, "inductor")}
    models = "from typing import Any\n" + "".join(map(inspect.getsource, (_hf_model, _torch_model)))
    child = [sys.executable, "-P", "-c", _COMPILE_CHILD.format(models=models), backend, name]
    done = subprocess.run(child, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"the {backend} compile of {name} failed: {done.stderr[-1500:]}")
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


def fresh_compiles(name: str, rounds: int, sides: Mapping[str, tuple[str, str]] | None = None) -> dict[str, float]:
    """Model ``name``'s compile in fresh processes (the module doc) per side (label: backend ``aioge``
    or a torch backend, and the ``PYTHONPATH`` of its aioge; default this aioge and inductor), cold
    then warm, the sides' order reversed every other round. The medians over rounds,
    ``<label>_compile_<cold|warm>_s`` and ``..._cpu_s``, or ``<label>_compile_error`` (stderr's end)."""
    sides = sides or {"aioge": ("aioge", _SRC), "inductor": ("inductor", _SRC)}
    for backend, src in sides.values():  # an installed aioge has its bytecode: a checkout's is written first
        if backend == "aioge":
            compileall.compile_dir(os.path.join(src, "aioge"), quiet=2)
    got: dict[str, list[tuple[float, float]]] = {}
    failed: dict[str, Any] = {}  # a side that failed is not run again
    for r in range(rounds):
        for label in [k for k in sides if f"{k}_compile_error" not in failed][:: 1 if r % 2 == 0 else -1]:
            with tempfile.TemporaryDirectory() as caches:
                try:  # warm: a second process on the caches the cold one filled
                    cold, warm = _fresh(name, *sides[label], caches), _fresh(name, *sides[label], caches)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    failed[f"{label}_compile_error"] = str(exc)[-300:]
                    continue
                for state, v in (("cold", cold), ("warm", warm)):
                    got.setdefault(f"{label}_compile_{state}", []).append(v)
    medians = {f"{k}{u}": statistics.median(x[i] for x in v) for k, v in got.items() for i, u in enumerate(("_s", "_cpu_s"))}
    return medians | failed


def _torch_rows(name: str, be: Any, references: tuple[str, ...], rounds: int, runs: int) -> list[dict[str, Any]]:
    """One row for the model: each side's median seconds a call (``aioge``, ``eager``, ``inductor``...),
    ``max_rel_err`` against eager, the aioge ``graphs`` Dynamo captured, ``fallbacks`` (EagerFallbackWarnings),
    ``cache_hits`` and ``trace_hits`` (graphs and traces loaded); ``<side>_error``: a reference that failed."""
    import torch

    import aioge.torch

    model, kwargs = _torch_model(name)
    row: dict[str, Any] = {"frontend": "torch", "model": TORCH_MODELS[name]}
    sides: dict[str, Callable[[], Any]] = {}
    outs: dict[str, np.ndarray] = {}
    graphs, trace_hits = len(be.graphs), be.trace_hits
    torch._dynamo.reset()  # once: a reset between sides would drop the compiled ones
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", aioge.torch.EagerFallbackWarning)
        for side in ("aioge", *references):
            try:
                fn = model if side == "eager" else torch.compile(model, backend=be if side == "aioge" else side)
                outs[side] = _tensor(fn(**kwargs))
            except Exception as exc:  # noqa: BLE001 - a reference's failure is recorded in its row
                if side == "aioge":
                    raise
                row[f"{side}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            sides[side] = functools.partial(fn, **kwargs)
            row.setdefault("graphs", len(be.graphs) - graphs)
        row |= _alternate(sides, rounds, runs)
    session = be._runner.session  # the graphs built for this model (a backend per model)
    row["cache_hits"] = sum(session.compiled(i).stats.graph_cache_hit for i in session._graphs if i >= graphs)
    row["trace_hits"] = be.trace_hits - trace_hits
    row["fallbacks"] = sum(isinstance(w.message, aioge.torch.EagerFallbackWarning) for w in caught)
    row["max_rel_err"] = _err(outs["aioge"], outs.get("eager", outs["aioge"]))
    return [row]


def frontends(
    names: list[str],
    *,
    tf_models: list[str] | None = None,
    torch_models: list[str] | None = None,
    torch_references: tuple[str, ...] = TORCH_REFERENCES,
    torch_cache: str | None = None,
    rounds: int = 5,
    runs: int = 5,
    compile_rounds: int | None = None,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """The section's rows (TF: one per model and reference; torch: one per model, ``_torch_rows`` and ``fresh_compiles``
    over ``compile_rounds``, default ``min(rounds, 3)``), what was skipped with why. ``torch_cache``: default ``torch_cache_dir()``."""
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    why = {n: missing(n) for n in names}
    skipped.update({f"frontend {n}": w for n, w in why.items() if w})
    if "torch" in names and not why["torch"]:
        import aioge.torch  # before TensorFlow: see aioge.torch._check_import_order

        options = {"ge.graph_compiler_cache_dir": torch_cache or torch_cache_dir()}
        compilers: dict[str, tuple[str, str]] = {
            k: (k, _SRC) for k in ("aioge", "inductor") if k == "aioge" or k in torch_references
        }
        for m in torch_models or [m for m in TORCH_MODELS if m != "mlp"]:
            be = aioge.torch.backend(options, name=m)  # its graphs cached as <model>_<n>: the same keys in every run
            try:
                rows += _torch_rows(m, be, torch_references, rounds, runs)
            finally:
                be.close()
            rows[-1] |= fresh_compiles(m, min(rounds, 3) if compile_rounds is None else compile_rounds, compilers)
            progress(_line(rows[-1]))
    if "tf" in names and not why["tf"]:
        for m in tf_models or [m for m in TF_MODELS]:
            rows += anyio.run(_tf_model, m, TF_MODELS[m], rounds, runs)
            progress(_line(rows[-1]))
    return {"rows": rows, "skipped": skipped}


def _line(r: dict[str, Any]) -> str:
    if r["frontend"] == "torch":
        sides = [k for k in ("eager", "inductor") if k in r] + [k[:-6] + " failed" for k in r if k.endswith("_error")]  # fmt: skip
        figures = "  ".join(f"{k} {r[k] * 1e3:8.3f} ms" if k in r else k for k in sides)
        compiles = " ".join(f"{k[:-6]} {v:.2f}" for k, v in r.items() if k.endswith("_cpu_s"))  # fresh processes' CPU s
        return (
            f"{r['model']:28s} aioge {r['aioge'] * 1e3:8.3f} ms  {figures}  fallbacks {r['fallbacks']}  compile cpu s: {compiles}"
        )
    if "error" in r:
        return f"{r['model']:28s} aioge {r['aioge'] * 1e3:9.3f} ms  {r['reference']}: {r['error'][:80]}"
    return f"{r['model']:28s} aioge {r['aioge'] * 1e3:9.3f} ms  {r['reference']} {r['ref'] * 1e3:9.3f} ms  ratio {r['ratio']:5.2f}"  # fmt: skip


def torch_table(rows: list[dict[str, Any]]) -> list[str]:
    """The torch rows as markdown lines: one per model, every side's ms a call and compile seconds
    (fresh processes, cold and warm caches: wall, CPU in brackets)."""
    compiles = [f"{k}_compile_{s}" for s in ("cold", "warm") for k in ("aioge", "inductor")]
    head = "model|aioge ms|eager ms|inductor ms|aioge/eager|aioge/inductor|" + "|".join(f"{k.replace('_', ' ')} s (cpu)" for k in compiles) + "|max rel err|aioge graphs|eager fallbacks"  # fmt: skip
    lines = ["| " + head.replace("|", " | ") + " |", "|" + "---|" * (head.count("|") + 1)]
    for r in rows:
        ms = {k: f"{r[k] * 1e3:.3f}" if k in r else ("failed" if f"{k}_error" in r else "") for k in ("eager", "inductor")}
        ratio = {k: f"{r['aioge'] / r[k]:.2f}" if k in r else "" for k in ("eager", "inductor")}
        fail = {k: (r.get(f"{k.split('_')[0]}_compile_error") or r.get(f"{k.split('_')[0]}_error", ""))[:120] for k in compiles}
        secs = [f"{r[k + '_s']:.2f} ({r[k + '_cpu_s']:.2f})" if k + "_s" in r else fail[k] for k in compiles]
        cells = [r["model"], f"{r['aioge'] * 1e3:.3f}", ms["eager"], ms["inductor"], ratio["eager"], ratio["inductor"],
                 *secs, f"{r['max_rel_err']:.1e}", str(r["graphs"]), str(r["fallbacks"])]  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |")
    return lines


def frontends_table(section: dict[str, Any]) -> list[str]:
    """The section as markdown lines."""
    head = "front end|model|reference|aioge ms|reference ms|aioge/reference|aioge compile s|reference compile s|max rel err"
    lines = ["| " + head.replace("|", " | ") + " |", "|" + "---|" * (head.count("|") + 1)]
    torch_rows = [r for r in section["rows"] if r["frontend"] == "torch"]
    for r in section["rows"]:
        if r["frontend"] == "torch":
            continue
        if "error" in r:
            cells = [r["frontend"], r["model"], r["reference"], f"{r['aioge'] * 1e3:.3f}", "failed", "", f"{r['compile_s']:.2f}", r["error"][:120], ""]  # fmt: skip
        else:
            cells = [r["frontend"], r["model"], r["reference"], f"{r['aioge'] * 1e3:.3f}", f"{r['ref'] * 1e3:.3f}", f"{r['ratio']:.2f}",
                     f"{r['compile_s']:.2f}", f"{r['ref_compile_s']:.2f}", f"{r['max_rel_err']:.1e}"]  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    caches = "torch compile figures: each in a fresh process, cold and warm caches, wall s (CPU s): see `fresh_compiles`"
    lines = (lines if len(lines) > 2 else []) + (["", caches, "", *torch_table(torch_rows)] if torch_rows else [])
    lines += [f"\nSkipped {k}: {v}." for k, v in section.get("skipped", {}).items()]
    return lines
