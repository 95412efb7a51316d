"""aioge.torch.from_module: torch.export -> aioge.Graph, run by a Session, against eager PyTorch.

Tolerances: float32 throughout; CNNs and the encoder compare at rtol 1e-4 / atol 1e-4 (the
sums are reordered: im2col and blocked matmuls against oneDNN), the MLP at 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("transformers")

import aioge  # noqa: E402
import aioge.torch as aioge_torch  # noqa: E402
from aioge.errors import GraphError, UnsupportedOpError  # noqa: E402
from tests.frontends import torch_models  # noqa: E402

pytestmark = pytest.mark.anyio


def _eager(model: torch.nn.Module, *args: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(*args).numpy()


@pytest.fixture(scope="module")
def resnet() -> tuple[torch.nn.Module, aioge.Graph]:
    model = torch_models.resnet18()
    return model, aioge_torch.from_module(model, (torch.randn(2, 3, 64, 64),))


@pytest.fixture(scope="module")
def mobilenet() -> tuple[torch.nn.Module, aioge.Graph]:
    model = torch_models.mobilenet_v3_small()
    return model, aioge_torch.from_module(model, (torch.randn(2, 3, 64, 64),))


@pytest.fixture(scope="module")
def bert() -> tuple[torch.nn.Module, aioge.Graph]:
    model = torch_models.BertEncoder().eval()
    return model, aioge_torch.from_module(model, (torch.randint(0, 100, (2, 16)),))


@pytest.mark.parametrize("which", ["resnet", "mobilenet"])
async def test_cnn_matches_eager(which: str, request: pytest.FixtureRequest) -> None:
    model, graph = request.getfixturevalue(which)
    assert [v.name for v in graph.inputs] == ["x"]
    assert all(v.is_const for v in graph.values() if v.name.startswith("p_"))  # weights are constants
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    async with aioge.Session() as session:
        out = await session.run(graph, {"x": x.numpy()})
    ref = _eager(model, x)
    assert isinstance(out["output_0"], np.ndarray)
    assert np.abs(ref).max() > 0.1  # a real signal, not a near-zero output
    np.testing.assert_allclose(out["output_0"], ref, rtol=1e-4, atol=1e-4)


async def test_bert_encoder_matches_eager(bert: tuple[torch.nn.Module, aioge.Graph]) -> None:
    model, graph = bert
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(4))
    async with aioge.Session() as session:
        out = await session.run(graph, {"ids": ids.numpy()})
    np.testing.assert_allclose(out["output_0"], _eager(model, ids), rtol=1e-4, atol=1e-4)


async def test_dynamic_batch_is_a_symbolic_dim() -> None:
    model = torch_models.Mlp().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    graph = aioge_torch.from_module(model, (torch.randn(4, 16),), dynamic_shapes=({0: batch},))
    dim = graph.inputs[0].shape[0]
    assert isinstance(dim, str) and graph.inputs[0].shape[1:] == (16,)
    async with aioge.Session() as session:
        for n in (1, 7):
            x = torch.randn(n, 16)
            out = await session.run(graph, {"x": x.numpy()})
            np.testing.assert_allclose(out["output_0"], _eager(model, x), rtol=1e-5, atol=1e-6)


async def test_bert_dynamic_sequence_length() -> None:
    # Issue 41: the position ids' arange over a symbolic length failed (GraphError in arange).
    model = torch_models.BertEncoder().eval()
    seq = torch.export.Dim("seq", min=2, max=32)
    graph = aioge_torch.from_module(model, (torch.randint(0, 100, (2, 16)),), dynamic_shapes=({1: seq},))
    assert isinstance(graph.inputs[0].shape[1], str)
    async with aioge.Session() as session:
        for length in (5, 9):
            ids = torch.randint(0, 100, (2, length), generator=torch.Generator().manual_seed(length))
            out = await session.run(graph, {"ids": ids.numpy()})
            np.testing.assert_allclose(out["output_0"], _eager(model, ids), rtol=1e-4, atol=1e-5)


def test_unsupported_op_names_op_and_node() -> None:
    with pytest.raises(UnsupportedOpError, match=r"aten::erfinv.*at nodes erfinv") as info:
        aioge_torch.from_module(torch_models.WithErfinv(), (torch.randn(2, 5),))
    assert info.value.nodes == ["erfinv"]


async def test_user_converter_maps_an_op() -> None:
    model = torch_models.WithErfinv().eval()
    graph = aioge_torch.from_module(model, (torch.randn(2, 5),), converters={torch.ops.aten.erfinv: aioge.ops.atanh})
    x = torch.randn(2, 5)
    with torch.no_grad():
        ref = model.b(torch.atanh(torch.tanh(model.a(x)) * 0.5)).relu() + 1.0
    async with aioge.Session() as session:
        out = await session.run(graph, {"x": x.numpy()})
    np.testing.assert_allclose(out["output_0"], ref.numpy(), rtol=1e-5, atol=1e-6)


def test_training_mode_batch_norm_is_refused() -> None:
    model = torch_models.resnet18().train()
    with pytest.raises(GraphError, match="eval"):
        aioge_torch.from_module(model, (torch.randn(2, 3, 32, 32),))


def test_untraceable_module_is_a_graph_error() -> None:
    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x > 0]  # a data-dependent shape torch.export cannot trace without hints

    with pytest.raises(GraphError, match="DataDependent"):
        aioge_torch.from_module(DataDependent(), (torch.randn(4),))
