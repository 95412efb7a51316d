"""Hugging Face transformers models compiled with aioge.torch.backend, called as users call them
(token ids with a padded attention mask, the default attention implementation): every graph
runs on aioge (no EagerFallbackWarning, no partition left to eager) and the last hidden state
matches eager PyTorch at rtol 1e-4 / atol 1e-5 (tiny random models, float32)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import aioge.torch as aioge_torch  # noqa: E402
from tests.frontends import torch_models  # noqa: E402

MODELS = ["bert", "roberta", "distilbert", "gpt2", "t5_encoder", "vit", "clip_text", "clip_vision", "whisper_encoder", "llama"]
# Held out when the front end was written (issue 41's sweep of unseen models): one per op family
# they brought (BART's shifted decoder ids, T5's two-sided position buckets, DeBERTa's relative
# attention, Swin's window mask built by slice assignment).
HELD_OUT = ["bart", "t5", "deberta_v2", "swin"]


@pytest.fixture(scope="module")
def backend() -> aioge_torch.AiogeBackend:
    be = aioge_torch.backend()
    yield be
    be.close()


@pytest.mark.parametrize(("name", "grad"), [(m, False) for m in MODELS + HELD_OUT] + [("swin", True), ("bart", True)])
def test_model_compiles_fully_and_matches_eager(backend: aioge_torch.AiogeBackend, name: str, grad: bool) -> None:
    # grad: called as users forget to, without torch.no_grad() (eval mode, norm layers)
    torch._dynamo.reset()
    model, kwargs = torch_models.transformers_model(name)
    compiled = torch.compile(model, backend=backend)
    before = len(backend.graphs)
    with torch.set_grad_enabled(grad), warnings.catch_warnings():
        warnings.simplefilter("error", aioge_torch.EagerFallbackWarning)
        got = compiled(**kwargs).last_hidden_state.detach()
        ref = model(**kwargs).last_hidden_state.detach()
    assert len(backend.graphs) > before and not backend.fallbacks and not backend.partitioned
    assert float(ref.abs().max()) > 0.1
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


# Their plans' every kernel has a C form: each call is one native program (no Python between
# kernels). RMSNorm (T5, Llama), rotary and SwiGLU (Llama), quick GELU (CLIP), 1-D convs
# (Whisper's Conv1d + GELU: the C 2-D convs over height 1) and the axis jobs (RoBERTa's CumSum and
# GatherElements, CLIP's ArgMax) brought forms.
NATIVE = ["distilbert", "gpt2", "t5_encoder", "llama", "clip_vision", "whisper_encoder", "roberta", "clip_text"]


@pytest.mark.parametrize("name", NATIVE)
def test_model_runs_as_one_native_program(backend: aioge_torch.AiogeBackend, name: str) -> None:
    from aioge.kernels import native

    if not native.available():
        pytest.skip("the compiled tier is not built")
    torch._dynamo.reset()
    model, kwargs = torch_models.transformers_model(name)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            got = compiled(**kwargs).last_hidden_state
        ref = model(**kwargs).last_hidden_state
    exe = backend._runner.session.executable(int(backend.graphs[-1].name.rsplit("_", 1)[1]))
    assert exe.native_ok is True and exe.native_runs >= 2, (exe.native_ok, exe.native_runs)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
