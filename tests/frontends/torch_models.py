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


def transformers_model(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A tiny Hugging Face model from its config class (random weights: hidden 32, 2 layers,
    2 heads, vocabulary 100) and the keyword arguments users call it with: token ids with an
    attention mask whose second row is padded, or pixel values / audio features."""
    import transformers as tr

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (2, 7), generator=gen)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0
    text = {"input_ids": ids, "attention_mask": mask}
    pixels = {"pixel_values": torch.randn(2, 3, 16, 16, generator=gen)}
    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    vision = {"image_size": 16, "patch_size": 8, **sizes}
    model: torch.nn.Module
    if name == "bert":
        model, kwargs = tr.BertModel(tr.BertConfig(vocab_size=100, max_position_embeddings=32, **sizes)), text
    elif name == "roberta":
        model, kwargs = tr.RobertaModel(tr.RobertaConfig(vocab_size=100, max_position_embeddings=32, **sizes)), text
    elif name == "distilbert":
        cfg = tr.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=32)
        model, kwargs = tr.DistilBertModel(cfg), text
    elif name == "gpt2":
        cfg = tr.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=32, bos_token_id=0, eos_token_id=0)
        model, kwargs = tr.GPT2Model(cfg), text
    elif name == "t5_encoder":
        cfg = tr.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)
        model, kwargs = tr.T5EncoderModel(cfg), text
    elif name == "vit":
        model, kwargs = tr.ViTModel(tr.ViTConfig(num_channels=3, **vision)), pixels
    elif name == "clip_text":
        model, kwargs = tr.CLIPTextModel(tr.CLIPTextConfig(vocab_size=100, max_position_embeddings=32, **sizes)), text
    elif name == "clip_vision":
        model, kwargs = tr.CLIPVisionModel(tr.CLIPVisionConfig(**vision)), pixels
    elif name == "whisper_encoder":
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        cfg = tr.WhisperConfig(
            vocab_size=100,
            d_model=32,
            encoder_layers=2,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            num_mel_bins=8,
            max_source_positions=8,
        )
        model, kwargs = WhisperEncoder(cfg), {"input_features": torch.randn(2, 8, 16, generator=gen)}
    elif name == "llama":
        cfg = tr.LlamaConfig(vocab_size=100, max_position_embeddings=32, num_key_value_heads=1, **sizes)
        model, kwargs = tr.LlamaModel(cfg), text
    elif name == "bart":  # held out (issue 41's sweep): encoder-decoder, decoder ids shifted from input_ids (aten.copy)
        cfg = tr.BartConfig(
            vocab_size=100,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=32,
        )
        model, kwargs = tr.BartModel(cfg), text
    elif name == "t5":  # encoder-decoder with relative position buckets on both sides
        cfg = tr.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2)
        model, kwargs = tr.T5Model(cfg), {**text, "decoder_input_ids": torch.randint(3, 100, (2, 5), generator=gen)}
    elif name == "deberta_v2":  # disentangled relative attention
        model, kwargs = tr.DebertaV2Model(tr.DebertaV2Config(vocab_size=100, max_position_embeddings=32, **sizes)), text
    elif name == "swin":  # shifted windows: roll, a window mask built by slice assignment (slice_scatter)
        cfg = tr.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)
        model, kwargs = tr.SwinModel(cfg), {"pixel_values": torch.randn(2, 3, 32, 32, generator=gen)}
    else:
        raise ValueError(f"no transformers model {name!r}")
    return model.eval(), kwargs


def swin_t_small() -> torch.nn.Module:
    """torchvision's Swin transformer (swin_t's code) at 2 stages of width 16: its shifted-window
    mask is built by slice assignment and its layer scale reads through as_strided."""
    from torchvision.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4], num_classes=10)
    with torch.no_grad():  # torchvision zero-initialises the head: outputs near zero prove little
        model.head.weight.normal_(0, 0.3)
    return model.eval()
