"""Every ATen op of ``aioge.frontends.torch_fx``'s table, over the dtypes torch accepts for it,
against eager PyTorch.

Each case is traced to ATen with ``make_fx`` and the backend's decomposition table (what
AOTAutograd hands the backend), converted, and run by one aioge Session per module; results
must match eager in dtype, shape and value (floats at rtol 1e-5 / atol 1e-6, the rest exactly).
``test_every_mapped_op_is_swept`` fails when an op joins the table without a case here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import aioge.torch as aioge_torch  # noqa: E402
from aioge.frontends import torch_fx  # noqa: E402

F = torch.nn.functional
DTYPES = (torch.float32, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)
FLOAT = (torch.float32,)
NUMBER = DTYPES[:-1]


def _data(dtype: torch.dtype, shape: tuple[int, ...], seed: int, positive: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=gen)
        return x.abs() + 0.5 if positive else x
    x = torch.randint(-5, 6, shape, generator=gen, dtype=dtype)
    return x.abs() + 1 if positive else x


# (name, function of tensors, number of tensor args, dtypes tried, positive inputs)
Case = tuple[str, Callable[..., Any], int, tuple[torch.dtype, ...], bool]
_INDEX = torch.tensor([[0, 1], [1, 0]])
CASES: list[Case] = [
    # elementwise arithmetic
    ("add", lambda a, b: a + b, 2, DTYPES, False),
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=2), 2, NUMBER, False),
    ("add_scalar", lambda a: a + 2, 1, NUMBER, False),
    ("sub", lambda a, b: a - b, 2, NUMBER, False),
    ("rsub", lambda a: 3 - a, 1, NUMBER, False),
    ("mul", lambda a, b: a * b, 2, DTYPES, False),
    ("mul_float_scalar", lambda a: a * 1.5, 1, NUMBER, False),
    ("div", lambda a, b: a / b, 2, DTYPES, True),
    ("prims_convert_element_type", lambda a: torch.ops.prims.convert_element_type(a, torch.float32), 1, DTYPES, False),
    ("div_floor", lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="floor"), 2, NUMBER, False),
    ("div_trunc", lambda a, b: torch.div(a, -b.abs() - 1, rounding_mode="trunc"), 2, NUMBER, False),
    ("remainder", lambda a, b: torch.remainder(a, b), 2, NUMBER, True),
    ("remainder_neg", lambda a: torch.remainder(a, 3), 1, NUMBER, False),
    ("fmod", lambda a: torch.fmod(a, 3), 1, NUMBER, False),
    ("pow", lambda a: a**2, 1, NUMBER, False),
    ("pow_tensor", lambda a, b: torch.pow(a, b), 2, FLOAT, True),
    ("neg", lambda a: -a, 1, NUMBER, False),
    ("abs", torch.abs, 1, NUMBER, False),
    ("sign", torch.sign, 1, NUMBER, False),
    ("minimum", torch.minimum, 2, DTYPES, False),
    ("maximum", torch.maximum, 2, DTYPES, False),
    ("clamp", lambda a: torch.clamp(a, -2, 3), 1, NUMBER, False),
    ("clamp_min", lambda a: torch.clamp_min(a, 0), 1, NUMBER, False),
    ("clamp_max", lambda a: torch.clamp_max(a, 1), 1, NUMBER, False),
    ("clamp_tensor", lambda a, b: torch.clamp(a, min=b), 2, NUMBER, False),
    # math: ints promote to float32
    ("exp", torch.exp, 1, DTYPES, False),
    ("expm1", torch.expm1, 1, DTYPES, False),
    ("exp2", torch.exp2, 1, DTYPES, False),
    ("log", torch.log, 1, NUMBER, True),
    ("log1p", torch.log1p, 1, NUMBER, True),
    ("log2", torch.log2, 1, NUMBER, True),
    ("log10", torch.log10, 1, NUMBER, True),
    ("sqrt", torch.sqrt, 1, NUMBER, True),
    ("rsqrt", torch.rsqrt, 1, NUMBER, True),
    ("reciprocal", torch.reciprocal, 1, NUMBER, True),
    ("sin", torch.sin, 1, DTYPES, False),
    ("cos", torch.cos, 1, DTYPES, False),
    ("tan", torch.tan, 1, FLOAT, False),
    ("atan", torch.atan, 1, NUMBER, False),
    ("asin", lambda a: torch.asin(a.clamp(-1, 1)), 1, FLOAT, False),
    ("acos", lambda a: torch.acos(a.clamp(-1, 1)), 1, FLOAT, False),
    ("sinh", torch.sinh, 1, FLOAT, False),
    ("cosh", torch.cosh, 1, FLOAT, False),
    ("tanh", torch.tanh, 1, DTYPES, False),
    ("sigmoid", torch.sigmoid, 1, DTYPES, False),
    ("erf", torch.erf, 1, NUMBER, False),
    ("floor", torch.floor, 1, NUMBER, False),
    ("ceil", torch.ceil, 1, NUMBER, False),
    ("round", torch.round, 1, NUMBER, False),
    ("round_decimals", lambda a: torch.round(a * 10, decimals=1), 1, FLOAT, False),
    ("trunc", torch.trunc, 1, NUMBER, False),
    ("isnan", lambda a: torch.isnan(a / a), 1, FLOAT, False),
    ("isinf", lambda a: torch.isinf(1 / (a - a)), 1, FLOAT, False),
    # activations
    ("relu", torch.relu, 1, NUMBER, False),
    ("relu_", lambda a: torch.relu_(a.clone()), 1, NUMBER, False),
    ("gelu", F.gelu, 1, FLOAT, False),
    ("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), 1, FLOAT, False),
    ("silu", F.silu, 1, FLOAT, False),
    ("hardswish", F.hardswish, 1, FLOAT, False),
    ("hardsigmoid", F.hardsigmoid, 1, FLOAT, False),
    ("hardtanh", F.hardtanh, 1, FLOAT, False),
    ("leaky_relu", lambda a: F.leaky_relu(a, 0.2), 1, FLOAT, False),
    ("elu", F.elu, 1, FLOAT, False),
    ("selu", F.selu, 1, FLOAT, False),
    ("softplus", lambda a: F.softplus(a * 10, beta=2, threshold=5), 1, FLOAT, False),
    ("softmax", lambda a: torch.softmax(a, -1), 1, FLOAT, False),
    ("log_softmax", lambda a: torch.log_softmax(a, 0), 1, FLOAT, False),
    ("softmax_dtype", lambda a: torch.softmax(a, -1, dtype=torch.float32), 1, NUMBER, False),
    # comparisons and logic
    ("eq", lambda a, b: a == b, 2, DTYPES, False),
    ("ne", lambda a, b: a != b, 2, DTYPES, False),
    ("lt", lambda a, b: a < b, 2, NUMBER, False),
    ("le", lambda a: a <= 1, 1, NUMBER, False),
    ("gt", lambda a: a > 0.5, 1, NUMBER, False),
    ("ge", lambda a, b: a >= b, 2, NUMBER, False),
    ("logical_not", torch.logical_not, 1, DTYPES, False),
    ("logical_and", torch.logical_and, 2, DTYPES, False),
    ("logical_or", torch.logical_or, 2, DTYPES, False),
    ("logical_xor", torch.logical_xor, 2, DTYPES, False),
    ("bitwise_not", torch.bitwise_not, 1, DTYPES[1:], False),
    ("bitwise_and", lambda a, b: a & b, 2, DTYPES[1:], False),
    ("bitwise_or", lambda a, b: a | b, 2, DTYPES[1:], False),
    ("bitwise_xor", lambda a, b: a ^ b, 2, DTYPES[1:], False),
    ("where", lambda a, b: torch.where(a > b, a, b), 2, DTYPES, False),
    ("where_scalar", lambda a: torch.where(a > 0, a, 0.5), 1, NUMBER, False),
    ("masked_fill", lambda a, b: a.masked_fill(b > 0, 7), 2, DTYPES, False),
    ("masked_fill_float", lambda a: a.masked_fill(a > 0, float("-inf")), 1, FLOAT, False),
    ("tril", lambda a: torch.tril(a, -1), 1, DTYPES, False),
    ("triu", lambda a: torch.triu(a, 1), 1, DTYPES, False),
    # casts and copies
    ("to_float", lambda a: a.to(torch.float32), 1, DTYPES, False),
    ("to_int64", lambda a: a.long(), 1, DTYPES, False),
    ("to_bool", lambda a: a.bool(), 1, DTYPES, False),
    ("type_as", lambda a, b: a.type_as(b.float()), 2, DTYPES, False),
    ("clone", lambda a: a.clone() + a, 1, NUMBER, False),
    ("contiguous", lambda a: a.t().contiguous(), 1, DTYPES, False),
    ("alias", lambda a: torch.ops.aten.alias(a), 1, DTYPES, False),
    ("detach", lambda a: a.detach() * 2, 1, NUMBER, False),
    ("dropout_eval", lambda a: F.dropout(a, 0.5, training=False), 1, FLOAT, False),
    ("native_dropout_eval", lambda a: torch.ops.aten.native_dropout(a, 0.5, False)[0], 1, FLOAT, False),
    ("lift_fresh_copy", lambda a: a + torch.tensor([1.0, 2.0, 3.0]), 1, FLOAT, False),
    # reductions (ints accumulate in int64, dtype= is honoured)
    ("sum", lambda a: a.sum(), 1, DTYPES, False),
    ("sum_dim", lambda a: a.sum(1, keepdim=True), 1, DTYPES, False),
    ("sum_dtype", lambda a: a.sum(0, dtype=torch.float32), 1, DTYPES, False),
    ("mean", lambda a: a.mean(), 1, FLOAT, False),
    ("mean_dtype", lambda a: a.mean(1, dtype=torch.float32), 1, NUMBER, False),
    ("prod", lambda a: a.prod(1), 1, DTYPES, False),
    ("amax", lambda a: a.amax(0), 1, DTYPES, False),
    ("amin", lambda a: a.amin((0, 1)), 1, DTYPES, False),
    ("max", lambda a: a.max(), 1, DTYPES, False),
    ("min", lambda a: a.min(), 1, DTYPES, False),
    ("max_dim", lambda a: a.max(1).values, 1, NUMBER, False),
    ("min_dim", lambda a: a.min(0, keepdim=True)[0], 1, NUMBER, False),
    ("max_other", lambda a, b: torch.max(a, b), 2, DTYPES, False),
    ("min_other", lambda a, b: torch.min(a, b), 2, DTYPES, False),
    ("argmax", lambda a: a.argmax(1), 1, NUMBER, False),
    ("argmax_all", lambda a: a.argmax(), 1, NUMBER, False),
    ("argmin", lambda a: a.argmin(0, keepdim=True), 1, NUMBER, False),
    ("any", lambda a: a.any(1), 1, DTYPES, False),
    ("all", lambda a: a.all(), 1, DTYPES, False),
    ("var", lambda a: a.var(1), 1, FLOAT, False),
    ("var_all", lambda a: a.var(), 1, FLOAT, False),
    ("std", lambda a: a.std(0, correction=0, keepdim=True), 1, FLOAT, False),
    ("var_mean", lambda a: torch.var_mean(a, 1)[1] + torch.var_mean(a, 1)[0], 1, FLOAT, False),
    ("std_mean", lambda a: torch.std_mean(a, 0, keepdim=True)[0], 1, FLOAT, False),
    ("cumsum", lambda a: a.cumsum(1), 1, DTYPES, False),
    ("topk", lambda a: torch.topk(a, 2, dim=1).values, 1, NUMBER, False),
    ("topk_smallest", lambda a: torch.topk(a.float(), 2, dim=0, largest=False).indices, 1, FLOAT, False),
    # linear algebra and nn
    ("linear", lambda a, w: F.linear(a, w), 2, FLOAT, False),
    ("linear_3d", lambda a: F.linear(a.reshape(1, 2, 3), torch.ones(4, 3), torch.ones(4)), 1, FLOAT, False),
    ("addmm", lambda a, b: torch.addmm(a[:, :2], a, b.t(), beta=0.5, alpha=2), 2, FLOAT, False),
    ("mm", lambda a, b: a @ b.t(), 2, FLOAT, False),
    ("bmm", lambda a, b: torch.bmm(a[None], b.t()[None]), 2, FLOAT, False),
    ("matmul", lambda a, b: torch.matmul(a[None], b.t()), 2, FLOAT, False),
    ("baddbmm", lambda a, b: torch.baddbmm(a[None, :, :2], a[None], b.t()[None], beta=0.5, alpha=2), 2, FLOAT, False),
    ("t", lambda a: a.t(), 1, DTYPES, False),
    ("embedding", lambda w: F.embedding(_INDEX, w), 1, FLOAT, False),
    ("index_select", lambda a: a.index_select(1, torch.tensor([2, 0])), 1, DTYPES, False),
    ("gather", lambda a: a.gather(1, torch.tensor([[0, 2], [1, 1]])), 1, DTYPES, False),
    ("index", lambda a: a[_INDEX], 1, DTYPES, False),
    ("_unsafe_index", lambda a: torch.ops.aten._unsafe_index(a, [None, torch.tensor([1, 1, 0])]), 1, DTYPES, False),
    ("index_dim1", lambda a: a[:, torch.tensor([2, -1])], 1, DTYPES, False),
    ("index_2d", lambda a: a[torch.tensor([1, 0]), torch.tensor([[2], [0]])], 1, DTYPES, False),
    ("layer_norm", lambda a: F.layer_norm(a, (3,)), 1, FLOAT, False),
    ("group_norm", lambda a: F.group_norm(a.reshape(1, 2, 3), 2, torch.ones(2), torch.zeros(2)), 1, FLOAT, False),
    ("batch_norm", lambda a: F.batch_norm(a, torch.zeros(3), torch.ones(3) * 2, training=False), 1, FLOAT, False),
    ("conv1d", lambda a: F.conv1d(a[None], torch.ones(1, 2, 2)), 1, FLOAT, False),
    ("conv2d", lambda a: F.conv2d(a[None, None], torch.ones(1, 1, 2, 2), padding=1), 1, FLOAT, False),
    (
        "conv_transpose2d",
        lambda a: F.conv_transpose2d(
            a[None, None], torch.linspace(-1, 1, 18).reshape(1, 2, 3, 3), stride=2, padding=1, output_padding=1
        ),
        1,
        FLOAT,
        False,
    ),
    (
        "conv_transpose1d_groups",
        lambda a: F.conv_transpose1d(a[None], torch.linspace(-1, 1, 8).reshape(2, 2, 2), torch.ones(4), groups=2, dilation=2),
        1,
        FLOAT,
        False,
    ),
    ("max_pool2d", lambda a: F.max_pool2d(a[None], 2, 1), 1, FLOAT, False),
    ("avg_pool2d", lambda a: F.avg_pool2d(a[None], 2, 1), 1, FLOAT, False),
    ("adaptive_avg_pool2d", lambda a: F.adaptive_avg_pool2d(a[None], 1), 1, FLOAT, False),
    ("_adaptive_avg_pool2d", lambda a: torch.ops.aten._adaptive_avg_pool2d(a[None, None], [1, 1]), 1, FLOAT, False),
    (
        "batch_norm_no_training",
        lambda a: torch.ops.aten._native_batch_norm_legit_no_training(
            a[None], None, None, torch.ones(2), torch.ones(2) * 4, 0.1, 1e-5
        )[0],
        1,
        FLOAT,
        False,
    ),
    ("sdpa", lambda q: F.scaled_dot_product_attention(q[None], q[None], q[None], is_causal=True), 1, FLOAT, False),
    ("pad", lambda a: F.pad(a, (1, 2, 0, 1), value=3), 1, DTYPES, False),
    ("reflection_pad2d", lambda a: F.pad(a[None], (1, 1, 1, 0), mode="reflect"), 1, FLOAT, False),
    ("replication_pad2d", lambda a: F.pad(a[None], (1, 2, 0, 1), mode="replicate"), 1, FLOAT, False),
    ("pad_reflect", lambda a: F.pad(a[None], (2, 1), mode="reflect"), 1, FLOAT, False),
    ("pad_replicate", lambda a: F.pad(a[None], (1, 2), mode="replicate"), 1, FLOAT, False),
    ("interpolate_nearest", lambda a: F.interpolate(a[None, None], scale_factor=2), 1, FLOAT, False),
    ("interpolate_bilinear", lambda a: F.interpolate(a[None, None], size=(3, 5), mode="bilinear"), 1, FLOAT, False),
    (
        "interpolate_align",
        lambda a: F.interpolate(a[None, None], size=(4, 4), mode="bilinear", align_corners=True),
        1,
        FLOAT,
        False,
    ),
    # shapes
    ("view", lambda a: a.view(3, 2), 1, DTYPES, False),
    ("reshape", lambda a: a.t().reshape(-1), 1, DTYPES, False),
    ("flatten", lambda a: a[None].flatten(1), 1, DTYPES, False),
    ("permute", lambda a: a[None].permute(2, 0, 1), 1, DTYPES, False),
    ("transpose", lambda a: a.transpose(0, 1), 1, DTYPES, False),
    ("unsqueeze", lambda a: a.unsqueeze(-1), 1, DTYPES, False),
    ("squeeze", lambda a: a[:, None].squeeze(1), 1, DTYPES, False),
    ("expand", lambda a: a[:, :1].expand(2, 4), 1, DTYPES, False),
    ("slice", lambda a: a[:, 1:], 1, DTYPES, False),
    ("select", lambda a: a[1], 1, DTYPES, False),
    ("cat", lambda a, b: torch.cat([a, b], 1), 2, DTYPES, False),
    ("cat_empty", lambda a: torch.cat([torch.empty(0), a], 0), 1, FLOAT, False),
    ("stack", lambda a, b: torch.stack([a, b], -1), 2, DTYPES, False),
    ("split", lambda a: torch.split(a, [1, 2], 1)[1], 1, DTYPES, False),
    ("chunk", lambda a: a.chunk(2, 0)[0], 1, DTYPES, False),
    ("roll", lambda a: torch.roll(a, (1, -1), (0, 1)), 1, DTYPES, False),
    ("roll_flat", lambda a: torch.roll(a, 2), 1, DTYPES, False),
    ("repeat", lambda a: a.repeat(2, 1, 2), 1, DTYPES, False),
    ("slice_scatter", lambda a, b: torch.slice_scatter(a, b[:, :2], 1, 1), 2, DTYPES, False),
    ("slice_scatter_step", lambda a, b: torch.slice_scatter(a, b[:, :2], 1, 0, None, 2), 2, DTYPES, False),
    ("copy", lambda a, b: a.clone()[:, :2].copy_(b[:, 1:]), 2, DTYPES, False),
    ("copy_cast", lambda a: torch.zeros(2, 3).copy_(a[:1]), 1, DTYPES, False),
    ("index_put", lambda a, b: a.index_put((torch.tensor([1, -2]),), b[0, :2, None]), 2, DTYPES, False),
    ("index_put_2d", lambda a, b: a.index_put((torch.tensor([1, 0]), torch.tensor([2, 0])), b[1, :2]), 2, DTYPES, False),
    (
        "index_put_inner",
        lambda a, b: torch.ops.aten.index_put(a, [None, torch.tensor([[2], [0]])], b[:, None, :1]),
        2,
        NUMBER,
        False,
    ),
    ("index_put_accumulate", lambda a, b: a.index_put((torch.tensor([1, 1]),), b, accumulate=True), 2, NUMBER, False),
    ("index_put_mask", lambda a: torch.ops.aten.index_put(a, [a < 1], torch.tensor(2, dtype=a.dtype)), 1, NUMBER, False),
    (
        "index_put_row_mask",
        lambda a, b: a.index_put((b[:, 0] > 0,), torch.tensor(3, dtype=a.dtype), accumulate=True),
        2,
        NUMBER,
        False,
    ),
    ("select_scatter", lambda a, b: torch.select_scatter(a, b[0], 0, -1), 2, DTYPES, False),
    ("as_strided", lambda a: torch.as_strided(a, (2, 2), (1, 2), 1), 1, DTYPES, False),
    ("as_strided_permuted", lambda a: torch.as_strided(a.t().contiguous().t(), (3, 2), (2, 1)), 1, DTYPES, False),
    # constructors
    ("arange", lambda a: a + torch.arange(3), 1, NUMBER, False),
    ("full", lambda a: a + torch.full((2, 3), 2), 1, NUMBER, False),
    ("zeros", lambda a: a + torch.zeros(3, dtype=a.dtype), 1, DTYPES, False),
    ("ones", lambda a: a * torch.ones(2, 1, dtype=a.dtype), 1, DTYPES, False),
    ("full_like", lambda a: torch.full_like(a, 3), 1, DTYPES, False),
    ("zeros_like", torch.zeros_like, 1, DTYPES, False),
    ("ones_like", torch.ones_like, 1, DTYPES, False),
    ("empty_like", lambda a: torch.empty_like(a).fill_(1) + a, 1, NUMBER, False),
    ("new_ones", lambda a: a.new_ones(2, 3) + a, 1, NUMBER, False),
    ("new_zeros", lambda a: a.new_zeros(2, 3) + a, 1, NUMBER, False),
    ("new_full", lambda a: a.new_full((2, 3), 4) * a, 1, NUMBER, False),
    ("new_empty", lambda a: a.new_empty(2, 3).zero_() + a, 1, NUMBER, False),
    ("empty", lambda a: torch.empty(2, 3, dtype=a.dtype).fill_(2) * a, 1, NUMBER, False),
    ("fill", lambda a: a.clone().fill_(5), 1, DTYPES, False),
    ("scalar_tensor", lambda a: torch.where(a > 0, a, torch.scalar_tensor(1.0)), 1, FLOAT, False),
]

# Ops of the table reached otherwise than by a case of their own (exercised in the tests named).
ELSEWHERE = {
    "sym_size": "test_torch_backend's dynamic-shape tests",
    "sym_size.int": "test_torch_backend's dynamic-shape tests",
    "_assert_tensor_metadata": "a no-op torch.export inserts",
    "batch_norm": "refused in training mode: test_torch_export.test_training_mode_batch_norm_is_refused",
    "_native_batch_norm_legit": "refused: training mode",
    "_native_batch_norm_legit_functional": "refused: training mode",
    "conv3d": "same converter as conv1d/conv2d",
    "reflection_pad3d": "same converter as reflection_pad1d",
    "replication_pad3d": "same converter as replication_pad1d",
    "upsample_nearest1d": "same converter as upsample_nearest2d",
    "upsample_nearest3d": "same converter as upsample_nearest2d",
    "upsample_linear1d": "same converter as upsample_bilinear2d",
    "upsample_trilinear3d": "same converter as upsample_bilinear2d",
    "scaled_dot_product_attention": "from_module keeps it whole: test_torch_export's BERT",
    "__and__": "bitwise_and under another name",
    "__or__": "bitwise_or under another name",
    "to": "torch.export's form of _to_copy",
    "linear": "torch.export keeps it whole: test_torch_export",
    "conv2d": "torch.export keeps it whole: test_torch_export",
    "conv1d": "torch.export keeps it whole",
    "softmax": "torch.export's form of _softmax",
    "log_softmax": "torch.export's form of _log_softmax",
    "reshape": "torch.export's form of view",
    "flatten": "torch.export's form of view",
    "matmul": "torch.export keeps it whole",
    "contiguous": "torch.export's form of clone",
    "dropout": "torch.export's form of native_dropout",
    "layer_norm": "torch.export keeps it whole",
    "max_pool2d": "torch.export's form of max_pool2d_with_indices",
    "adaptive_avg_pool2d": "torch.export keeps it whole: test_torch_export's CNNs",
    "relu_": "in-place form: functionalisation turns it into relu",
    "type_as": "CompositeImplicit: arrives as _to_copy",
    "true_divide": "CompositeImplicit, traced as div: GPT-2's dynamic attention scale (test_dynamic_sequence_builds_once)",
    "_unsafe_index_put": "same converter as index_put",
}


_DECOMPOSITIONS = torch_fx.decompositions()


def _trace(fn: Callable[..., Any], args: list[torch.Tensor]) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    # functionalised, as AOTAutograd hands graphs over: no in-place ops
    return make_fx(torch.func.functionalize(lambda *a: fn(*a)), decomposition_table=_DECOMPOSITIONS, tracing_mode="real")(*args)


@pytest.fixture(scope="module")
def runner() -> Iterator[Any]:
    r = aioge_torch._SessionThread({})
    yield r
    r.close()


_SEEN: set[str] = set()
_IDS = iter(range(10**6))


@pytest.mark.parametrize(("name", "fn", "n", "dtypes", "positive"), CASES, ids=[c[0] for c in CASES])
def test_op_matches_eager(
    runner: Any, name: str, fn: Callable[..., Any], n: int, dtypes: tuple[torch.dtype, ...], positive: bool
) -> None:
    # One graph per op holds the op once per dtype: one aioge compile per op.
    args = [_data(dtype, (2, 3), seed=i, positive=positive) for dtype in dtypes for i in range(n)]
    refs = [fn(*args[k * n : (k + 1) * n]) for k in range(len(dtypes))]
    gm = _trace(lambda *a: tuple(fn(*a[k * n : (k + 1) * n]) for k in range(len(dtypes))), args)
    _SEEN.update(_table_key(x.target) for x in gm.graph.nodes if isinstance(x.target, torch._ops.OpOverload))
    converted = torch_fx.convert_fx(gm, name=name)
    feeds = {s.name: args[s.index].numpy() for s in converted.inputs if s.kind == "tensor"}
    graph_id = next(_IDS)
    runner.call(runner.session.add_graph, graph_id, converted.graph, None)
    try:
        out = runner.call(runner.session.run_graph, graph_id, feeds)
    finally:
        runner.call(runner.session.remove_graph, graph_id)
    assert all(o is not None for o in converted.outputs)
    for dtype, ref, o in zip(dtypes, refs, converted.outputs):
        got, want = out[o], ref.numpy()
        where = f"{name} on {str(dtype).removeprefix('torch.')}"
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"{where}: {got.dtype}{got.shape}, torch {want.dtype}{want.shape}"
        )
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)


def _table_key(op: Any) -> str:
    full = op.name().removeprefix("aten::")
    return full if full in torch_fx._ATEN else op.overloadpacket.__name__


def test_every_mapped_op_is_swept() -> None:
    # Traces every case (fast: fake tensors) rather than relying on the sweep having run first.
    for name, fn, n, dtypes, positive in CASES:
        gm = _trace(fn, [_data(dtypes[0], (2, 3), seed=i, positive=positive) for i in range(n)])
        _SEEN.update(_table_key(x.target) for x in gm.graph.nodes if isinstance(x.target, torch._ops.OpOverload))
    missing = sorted(set(torch_fx._ATEN) - _SEEN - set(ELSEWHERE))
    assert not missing, f"ops of the table with no case in CASES: {missing}"
