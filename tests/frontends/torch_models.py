"""Seeded PyTorch models for the front-end tests (imported only once torch is known to be installed)."""

from __future__ import annotations

import torch


def randomise_norm_stats(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Give every batch norm random statistics and affine terms, so that eval mode is not an identity."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(0.1 * torch.randn(n, generator=gen))
            m.running_var.copy_(0.5 + torch.rand(n, generator=gen))
            m.weight.data.copy_(1 + 0.1 * torch.randn(n, generator=gen))
            m.bias.data.copy_(0.1 * torch.randn(n, generator=gen))
    return model.eval()


def resnet18() -> torch.nn.Module:
    import torchvision

    torch.manual_seed(0)
    return randomise_norm_stats(torchvision.models.resnet18(num_classes=10), 1)


def mobilenet_v3_small() -> torch.nn.Module:
    import torchvision

    torch.manual_seed(0)
    model = randomise_norm_stats(torchvision.models.mobilenet_v3_small(num_classes=10), 2)
    with torch.no_grad():  # torchvision initialises the classifier at std 0.01: outputs near zero prove little
        for m in model.classifier.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, 1 / m.in_features**0.5)
    return model


class BertEncoder(torch.nn.Module):
    """A small BERT (transformers' BertModel from a config, seeded init): token ids -> last hidden state."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        cfg = BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
        )
        self.bert = BertModel(cfg).eval()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=ids).last_hidden_state


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))).softmax(-1)


class WithGraphBreak(torch.nn.Module):
    """Two halves with a print-like graph break between them: TorchDynamo captures two graphs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h) * 2.0 - 1.0


class WithErfinv(torch.nn.Module):
    """Uses aten.erfinv, which aioge's table does not map, between two linear layers: the
    backend splits the graph around it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(5, 8)
        self.b = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.erfinv(torch.tanh(self.a(x)) * 0.5)).relu() + 1.0
