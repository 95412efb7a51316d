"""The front-end section (issue 41): models loaded through ``aioge.load_tf`` beside TensorFlow's own
``tf.function``, and ``torch.compile`` with ``aioge.torch.backend()`` beside eager PyTorch and
``torch.compile``'s inductor, on the same machine, in one process.

Each side's figure is the median over alternating rounds of ``measure.median_of_runs`` medians
(warm-up first, ``SETTLE_S`` between sides), as the other sections measure. ``compile_s`` is the
time from the model in hand to its first output (aioge: ``load_tf`` or Dynamo capture, conversion,
compilation and the first run; TensorFlow: the first ``tf.function`` call, its trace; eager: 0).
A reference that fails to compile is a row with its error, never a failed section.
"""

from __future__ import annotations

import functools
import importlib.util
import statistics
import time
from typing import Any, Callable

import anyio
import numpy as np

from aioge.benchmarks import measure

__all__ = ["FRONTENDS", "TF_MODELS", "TORCH_MODELS", "frontends", "frontends_table"]

FRONTENDS = ("tf", "torch")
# Every Keras application family with random weights at input size 96 (InceptionV3 and Xception
# need at least 75 / 71), a plain Keras CNN (the tiny one the test runs), an LSTM text model and a
# MultiHeadAttention encoder block (sequence length); batch 1.
_APPS = "MobileNet MobileNetV2 MobileNetV3Small MobileNetV3Large ResNet50 ResNet50V2 InceptionV3 Xception DenseNet121 EfficientNetB0 EfficientNetV2B0 NASNetMobile ConvNeXtTiny VGG16"  # fmt: skip
TF_MODELS = {"cnn": 64, **dict.fromkeys(_APPS.split(), 96), "lstm": 32, "mha": 32}
TORCH_MODELS = ("mlp", "resnet18", "bert", "gpt2")  # mlp: the tiny one the test runs
TORCH_REFERENCES = ("eager", "inductor")


def missing(frontend: str) -> str | None:
    """Why a front end's workloads cannot run here, or None."""
    need = {"tf": ("tensorflow", "keras"), "torch": ("torch", "torchvision", "transformers")}[frontend]
    absent = [m for m in need if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed (pip install 'aioge[{frontend}]')" if absent else None


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
        return (
            keras.Sequential(
                [
                    keras.Input((size, size, 3)),
                    L.Conv2D(16, 3, activation="relu"),
                    L.MaxPooling2D(),
                    L.Conv2D(32, 3, activation="relu"),
                    L.GlobalAveragePooling2D(),
                    L.Dense(10),
                ]
            ),
            x,
            f"cnn {size}x{size}",
        )
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
    import transformers as tr

    ids = torch.randint(3, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    if name == "bert":
        cfg = tr.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
        m = tr.BertModel(cfg)
    else:
        m = tr.GPT2Model(
            tr.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0)
        )
    return m.eval(), {"input_ids": ids, "attention_mask": mask}


def _tensor(out: Any) -> np.ndarray:
    return (out if hasattr(out, "numpy") else out.last_hidden_state).detach().numpy()


def _torch_rows(name: str, be: Any, references: tuple[str, ...], rounds: int, runs: int) -> list[dict[str, Any]]:
    import torch

    model, kwargs = _torch_model(name)
    label = {"mlp": "mlp 4x64", "resnet18": "resnet18 1x3x128x128"}.get(name, f"{name} tiny 2x16 + mask")
    sides: dict[str, Callable[[], Any]] = {}
    compile_s: dict[str, float] = {}
    errors: dict[str, str] = {}
    outs: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for side in ("aioge", *references):
            torch._dynamo.reset()
            t = time.perf_counter()
            try:
                fn = model if side == "eager" else torch.compile(model, backend=be if side == "aioge" else side)
                outs[side] = _tensor(fn(**kwargs))
            except Exception as exc:  # noqa: BLE001 - a reference's failure is recorded beside its row
                if side == "aioge":
                    raise
                errors[side] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            compile_s[side] = 0.0 if side == "eager" else time.perf_counter() - t
            sides[side] = functools.partial(fn, **kwargs)
        medians = _alternate(sides, rounds, runs)
    ref_out = outs.get("eager", next(iter(outs.values())))
    rows = []
    for side in references:
        reference = "eager" if side == "eager" else f"torch.compile {side}"
        if side in errors:  # the row without the reference's figures: its error instead
            figures = ("torch", label, reference, medians["aioge"], compile_s["aioge"])
            rows.append({**dict(zip(_KEYS, figures)), "error": errors[side]})
            continue
        rows.append(_row("torch", label, reference, medians["aioge"], compile_s["aioge"], medians[side], compile_s[side], _err(outs["aioge"], ref_out)))  # fmt: skip
    return rows


def frontends(
    names: list[str],
    *,
    tf_models: list[str] | None = None,
    torch_models: list[str] | None = None,
    torch_references: tuple[str, ...] = TORCH_REFERENCES,
    rounds: int = 5,
    runs: int = 5,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """The section's rows (one per model and reference) and what was skipped with why."""
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    why = {n: missing(n) for n in names}
    skipped.update({f"frontend {n}": w for n, w in why.items() if w})
    if "torch" in names and not why["torch"]:
        import aioge.torch  # before TensorFlow: see aioge.torch._check_import_order

        be = aioge.torch.backend()
        try:
            for m in torch_models or [m for m in TORCH_MODELS if m != "mlp"]:
                rows += _torch_rows(m, be, torch_references, rounds, runs)
                progress(_line(rows[-1]))
        finally:
            be.close()
    if "tf" in names and not why["tf"]:
        for m in tf_models or [m for m in TF_MODELS]:
            rows += anyio.run(_tf_model, m, TF_MODELS[m], rounds, runs)
            progress(_line(rows[-1]))
    return {"rows": rows, "skipped": skipped}


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['model']:28s} aioge {r['aioge'] * 1e3:9.3f} ms  {r['reference']}: {r['error'][:80]}"
    return (
        f"{r['model']:28s} aioge {r['aioge'] * 1e3:9.3f} ms  {r['reference']} {r['ref'] * 1e3:9.3f} ms  ratio {r['ratio']:5.2f}"
    )


def frontends_table(section: dict[str, Any]) -> list[str]:
    """The section as markdown lines."""
    head = "front end|model|reference|aioge ms|reference ms|aioge/reference|aioge compile s|reference compile s|max rel err"
    head_cells = head.split("|")
    lines = ["| " + " | ".join(head_cells) + " |", "|" + "---|" * len(head_cells)]
    for r in section["rows"]:
        if "error" in r:
            cells = [r["frontend"], r["model"], r["reference"], f"{r['aioge'] * 1e3:.3f}", "failed", "", f"{r['compile_s']:.2f}", r["error"][:120], ""]  # fmt: skip
        else:
            cells = [
                r["frontend"], r["model"], r["reference"], f"{r['aioge'] * 1e3:.3f}", f"{r['ref'] * 1e3:.3f}", f"{r['ratio']:.2f}",
                f"{r['compile_s']:.2f}", f"{r['ref_compile_s']:.2f}", f"{r['max_rel_err']:.1e}",
            ]  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines += [f"\nSkipped {k}: {v}." for k, v in section.get("skipped", {}).items()]
    return lines
