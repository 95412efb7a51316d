"""Typed graph builders, one per op schema in the registry. Generated: do not edit.

Made by ``python -m aioge.ops.gen`` from ``aioge.ops.registry``; a test fails when this file is
stale. Each builder adds one node through ``aioge.ops.build.apply`` (attributes validated, output
descs inferred) and returns its output value, or a tuple of values for several outputs.
Inputs are positional; numbers, lists and numpy arrays become constants of the inputs' graph.
"""

from __future__ import annotations

from typing import Any, Never, Sequence

import numpy as np
from numpy.typing import DTypeLike

from aioge.ir.graph import Graph, Value
from aioge.ops.build import Operand, call_builder

__all__ = [
    "abs",
    "acos",
    "acosh",
    "adagrad",
    "adam",
    "add",
    "affine_grid",
    "and_",
    "arg_max",
    "arg_min",
    "array_feature_extractor",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "attention",
    "average_pool",
    "batch_normalization",
    "binarizer",
    "bit_cast",
    "bit_shift",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "blackman_window",
    "cast",
    "cast_like",
    "causal_conv_with_state",
    "ceil",
    "celu",
    "center_crop_pad",
    "channel_shuffle",
    "clip",
    "col2_im",
    "compress",
    "concat",
    "concat_from_sequence",
    "constant_of_shape",
    "conv",
    "conv2d",
    "conv_integer",
    "conv_transpose",
    "cos",
    "cosh",
    "cum_prod",
    "cum_sum",
    "deform_conv",
    "depth_to_space",
    "dequantize_linear",
    "det",
    "dft",
    "div",
    "dropout",
    "dynamic_quantize_linear",
    "dynamic_quantize_mat_mul",
    "einsum",
    "elu",
    "equal",
    "erf",
    "exp",
    "expand",
    "eye_like",
    "flatten",
    "flex_attention",
    "floor",
    "fused_conv",
    "fused_elementwise",
    "fused_gemm",
    "fused_mat_mul",
    "gather",
    "gather_elements",
    "gather_nd",
    "gelu",
    "gemm",
    "global_average_pool",
    "global_max_pool",
    "greater",
    "greater_or_equal",
    "grid_sample",
    "group_normalization",
    "gru",
    "hamming_window",
    "hann_window",
    "hard_sigmoid",
    "hard_swish",
    "hardmax",
    "identity",
    "if_",
    "image_decoder",
    "instance_normalization",
    "is_inf",
    "is_na_n",
    "label_encoder",
    "layer_normalization",
    "leaky_relu",
    "less",
    "less_or_equal",
    "linear_attention",
    "log",
    "log_softmax",
    "loop",
    "lp_normalization",
    "lp_pool",
    "lrn",
    "lstm",
    "mat_mul_integer",
    "matmul",
    "max",
    "max_pool",
    "max_unpool",
    "mean",
    "mean_variance_normalization",
    "mel_weight_matrix",
    "min",
    "mish",
    "mod",
    "momentum",
    "mul",
    "neg",
    "negative_log_likelihood_loss",
    "non_max_suppression",
    "non_zero",
    "not_",
    "one_hot",
    "optional",
    "optional_get_element",
    "optional_has_element",
    "or_",
    "p_relu",
    "pad",
    "pow",
    "q_gemm",
    "q_linear_add",
    "q_linear_conv",
    "q_linear_global_average_pool",
    "q_linear_mat_mul",
    "qdq_add",
    "quantize_linear",
    "range",
    "reciprocal",
    "reduce_l1",
    "reduce_l2",
    "reduce_log_sum",
    "reduce_log_sum_exp",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
    "reduce_sum_square",
    "regex_full_match",
    "relu",
    "reshape",
    "resize",
    "reverse_sequence",
    "rms_normalization",
    "rnn",
    "roi_align",
    "rotary_embedding",
    "round",
    "scatter",
    "scatter_elements",
    "scatter_nd",
    "selu",
    "sequence_at",
    "sequence_construct",
    "sequence_empty",
    "sequence_erase",
    "sequence_insert",
    "sequence_length",
    "sequence_map",
    "shape",
    "shrink",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "size",
    "slice",
    "softmax",
    "softmax_cross_entropy_loss",
    "softplus",
    "softsign",
    "space_to_depth",
    "split",
    "split_to_sequence",
    "sqrt",
    "squeeze",
    "squeeze_excite",
    "stft",
    "string_concat",
    "string_normalizer",
    "string_split",
    "sub",
    "sum",
    "swi_glu",
    "swish",
    "tan",
    "tanh",
    "tensor_scatter",
    "tf_idf_vectorizer",
    "thresholded_relu",
    "tile",
    "top_k",
    "transpose",
    "tree_ensemble",
    "trilu",
    "unique",
    "unsqueeze",
    "upsample",
    "where",
    "xor",
]


def abs(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Abs: |x|.

    Attributes: none. Returns the output value.
    """
    return call_builder("Abs", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def acos(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Acos: inverse cosine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Acos", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def acosh(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Acosh: inverse hyperbolic cosine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Acosh", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def adagrad(
    *inputs: Operand | Sequence[Operand],
    decay_factor: float = 0.0,
    epsilon: float = 1e-06,
    norm_coefficient: float = 0.0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Adagrad: Adagrad updates of tensors X with gradients G and accumulated squares H.

    Attributes: decay_factor=0.0, epsilon=1e-06, norm_coefficient=0.0. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Adagrad",
        "ai.onnx.preview.training",
        inputs,
        {"decay_factor": decay_factor, "epsilon": epsilon, "norm_coefficient": norm_coefficient, **unknown},
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def adam(
    *inputs: Operand | Sequence[Operand],
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-06,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Adam: Adam updates of tensors X with gradients G, first moments V and second moments H.

    Attributes: alpha=0.9, beta=0.999, epsilon=1e-06, norm_coefficient=0.0, norm_coefficient_post=0.0. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Adam",
        "ai.onnx.preview.training",
        inputs,
        {
            "alpha": alpha,
            "beta": beta,
            "epsilon": epsilon,
            "norm_coefficient": norm_coefficient,
            "norm_coefficient_post": norm_coefficient_post,
            **unknown,
        },
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def add(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Add: a + b with numpy broadcasting.

    Attributes: none. Returns the output value.
    """
    return call_builder("Add", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def affine_grid(
    theta: Operand,
    size: Operand,
    /,
    *,
    align_corners: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """AffineGrid: the sampling grid of a batch of affine transforms.

    Attributes: align_corners=0. Returns the output value.
    """
    return call_builder(
        "AffineGrid",
        "",
        (theta, size),
        {"align_corners": align_corners, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def and_(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """And: a and b, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("And", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def arg_max(
    data: Operand,
    /,
    *,
    axis: int = 0,
    keepdims: int = 1,
    select_last_index: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ArgMax: int64 index of the maximum along axis.

    Attributes: axis=0, keepdims=1, select_last_index=0. Returns the output value.
    """
    return call_builder(
        "ArgMax",
        "",
        (data,),
        {"axis": axis, "keepdims": keepdims, "select_last_index": select_last_index, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def arg_min(
    data: Operand,
    /,
    *,
    axis: int = 0,
    keepdims: int = 1,
    select_last_index: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ArgMin: int64 index of the minimum along axis.

    Attributes: axis=0, keepdims=1, select_last_index=0. Returns the output value.
    """
    return call_builder(
        "ArgMin",
        "",
        (data,),
        {"axis": axis, "keepdims": keepdims, "select_last_index": select_last_index, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def array_feature_extractor(
    x: Operand, y: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """ArrayFeatureExtractor: the last axis at the given indices.

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "ArrayFeatureExtractor", "ai.onnx.ml", (x, y), {**unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def asin(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Asin: inverse sine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Asin", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def asinh(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Asinh: inverse hyperbolic sine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Asinh", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def atan(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Atan: inverse tangent.

    Attributes: none. Returns the output value.
    """
    return call_builder("Atan", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def atanh(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Atanh: inverse hyperbolic tangent.

    Attributes: none. Returns the output value.
    """
    return call_builder("Atanh", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def attention(
    q: Operand,
    k: Operand,
    v: Operand,
    attn_mask: Operand | None = None,
    past_key: Operand | None = None,
    past_value: Operand | None = None,
    nonpad_kv_seqlen: Operand | None = None,
    /,
    *,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
    left_window_size: int = -1,
    right_window_size: int = -1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Attention: softmax(Q K^T * scale + bias) V with masks, causal frontier, windows, GQA and a KV cache.

    Attributes: is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None, left_window_size=-1, right_window_size=-1. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Attention",
        "",
        (q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen),
        {
            "is_causal": is_causal,
            "kv_num_heads": kv_num_heads,
            "q_num_heads": q_num_heads,
            "qk_matmul_output_mode": qk_matmul_output_mode,
            "scale": scale,
            "softcap": softcap,
            "softmax_precision": softmax_precision,
            "left_window_size": left_window_size,
            "right_window_size": right_window_size,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def average_pool(
    x: Operand,
    /,
    *,
    auto_pad: str = "NOTSET",
    kernel_shape: Sequence[int],
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """AveragePool: mean over sliding windows, padding counted only with count_include_pad.

    Attributes: auto_pad='NOTSET', kernel_shape=REQUIRED, pads=None, strides=None, dilations=None, ceil_mode=0, count_include_pad=0. Returns the output value.
    """
    return call_builder(
        "AveragePool",
        "",
        (x,),
        {
            "auto_pad": auto_pad,
            "kernel_shape": kernel_shape,
            "pads": pads,
            "strides": strides,
            "dilations": dilations,
            "ceil_mode": ceil_mode,
            "count_include_pad": count_include_pad,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def batch_normalization(
    x: Operand,
    scale: Operand,
    b: Operand,
    input_mean: Operand,
    input_var: Operand,
    /,
    *,
    epsilon: float = 1e-05,
    momentum: float = 0.9,
    training_mode: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """BatchNormalization: inference batch normalisation with running mean and variance.

    Attributes: epsilon=1e-05, momentum=0.9, training_mode=0. Returns the output value.
    """
    return call_builder(
        "BatchNormalization",
        "",
        (x, scale, b, input_mean, input_var),
        {"epsilon": epsilon, "momentum": momentum, "training_mode": training_mode, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def binarizer(
    x: Operand, /, *, threshold: float = 0.0, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Binarizer: 1 where x > threshold, else 0.

    Attributes: threshold=0.0. Returns the output value.
    """
    return call_builder(
        "Binarizer", "ai.onnx.ml", (x,), {"threshold": threshold, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def bit_cast(input: Operand, /, *, to: Any, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """BitCast: reinterpret the bytes as another type of the same width (to: a dtype or an ONNX type code).

    Attributes: to=REQUIRED. Returns the output value.
    """
    return call_builder("BitCast", "", (input,), {"to": to, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def bit_shift(
    x: Operand, y: Operand, /, *, direction: str, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """BitShift: x << y or x >> y on integers (arithmetic right shift when signed).

    Attributes: direction=REQUIRED. Returns the output value.
    """
    return call_builder(
        "BitShift", "", (x, y), {"direction": direction, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def bitwise_and(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """BitwiseAnd: a & b.

    Attributes: none. Returns the output value.
    """
    return call_builder("BitwiseAnd", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def bitwise_not(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """BitwiseNot: ~x.

    Attributes: none. Returns the output value.
    """
    return call_builder("BitwiseNot", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def bitwise_or(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """BitwiseOr: a | b.

    Attributes: none. Returns the output value.
    """
    return call_builder("BitwiseOr", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def bitwise_xor(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """BitwiseXor: a ^ b.

    Attributes: none. Returns the output value.
    """
    return call_builder("BitwiseXor", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def blackman_window(
    size: Operand,
    /,
    *,
    output_datatype: int = 1,
    periodic: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """BlackmanWindow: the Blackman window of a length.

    Attributes: output_datatype=1, periodic=1. Returns the output value.
    """
    return call_builder(
        "BlackmanWindow",
        "",
        (size,),
        {"output_datatype": output_datatype, "periodic": periodic, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def cast(
    input: Operand,
    /,
    *,
    to: DTypeLike,
    saturate: int = 1,
    round_mode: str = "up",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Cast: convert to another dtype (saturate, round_mode: for float8 and float4 targets).

    Attributes: to=REQUIRED, saturate=1, round_mode='up'. Returns the output value.
    """
    return call_builder(
        "Cast",
        "",
        (input,),
        {"to": to, "saturate": saturate, "round_mode": round_mode, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def cast_like(
    input: Operand,
    target_type: Operand,
    /,
    *,
    saturate: int = 1,
    round_mode: str = "up",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """CastLike: convert to the dtype of a second tensor.

    Attributes: saturate=1, round_mode='up'. Returns the output value.
    """
    return call_builder(
        "CastLike",
        "",
        (input, target_type),
        {"saturate": saturate, "round_mode": round_mode, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def causal_conv_with_state(
    input: Operand,
    weight: Operand,
    bias: Operand | None = None,
    past_state: Operand | None = None,
    /,
    *,
    activation: str = "none",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """CausalConvWithState: a causal depthwise 1-D convolution carrying its last k - 1 inputs.

    Attributes: activation='none'. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "CausalConvWithState",
        "",
        (input, weight, bias, past_state),
        {"activation": activation, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def ceil(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Ceil: round toward +inf.

    Attributes: none. Returns the output value.
    """
    return call_builder("Ceil", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def celu(
    x: Operand, /, *, alpha: float = 1.0, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Celu: max(0, x) + min(0, alpha * (e^(x / alpha) - 1)).

    Attributes: alpha=1.0. Returns the output value.
    """
    return call_builder("Celu", "", (x,), {"alpha": alpha, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def center_crop_pad(
    input_data: Operand,
    shape: Operand,
    /,
    *,
    axes: Sequence[int] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """CenterCropPad: crop or zero-pad about the centre to a shape.

    Attributes: axes=None. Returns the output value.
    """
    return call_builder(
        "CenterCropPad", "", (input_data, shape), {"axes": axes, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def channel_shuffle(
    *inputs: Operand | Sequence[Operand],
    group: int,
    splits: Sequence[int] = (),
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """ChannelShuffle: join the inputs along axis 1, then channel i * group + j takes channel j * (C / group) + i; split along axis 1 by splits.

    Attributes: group=REQUIRED, splits=(). Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "ChannelShuffle",
        "aioge",
        inputs,
        {"group": group, "splits": splits, **unknown},
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def clip(
    input: Operand,
    min: Operand | None = None,
    max: Operand | None = None,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Clip: min(max(x, lo), hi); lo and hi are optional inputs.

    Attributes: none. Returns the output value.
    """
    return call_builder("Clip", "", (input, min, max), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def col2_im(
    input: Operand,
    image_shape: Operand,
    block_shape: Operand,
    /,
    *,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Col2Im: sum columns of sliding blocks back into images.

    Attributes: dilations=None, pads=None, strides=None. Returns the output value.
    """
    return call_builder(
        "Col2Im",
        "",
        (input, image_shape, block_shape),
        {"dilations": dilations, "pads": pads, "strides": strides, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def compress(
    input: Operand,
    condition: Operand,
    /,
    *,
    axis: int | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Compress: slices along axis where condition holds.

    Attributes: axis=None. Returns the output value.
    """
    return call_builder(
        "Compress", "", (input, condition), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def concat(
    *inputs: Operand | Sequence[Operand], axis: int, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Concat: join tensors along an axis.

    Attributes: axis=REQUIRED. Returns the output value.
    """
    return call_builder("Concat", "", inputs, {"axis": axis, **unknown}, variadic=True, name=name, num_outputs=num_outputs)


def concat_from_sequence(
    input_sequence: Operand,
    /,
    *,
    axis: int,
    new_axis: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ConcatFromSequence: a sequence's tensors joined along an axis (or stacked on a new one).

    Attributes: axis=REQUIRED, new_axis=0. Returns the output value.
    """
    return call_builder(
        "ConcatFromSequence",
        "",
        (input_sequence,),
        {"axis": axis, "new_axis": new_axis, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def constant_of_shape(
    input: Operand,
    /,
    *,
    value: np.ndarray | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ConstantOfShape: a tensor of the given shape filled with value (default float32 0).

    Attributes: value=None. Returns the output value.
    """
    return call_builder(
        "ConstantOfShape", "", (input,), {"value": value, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def conv2d(
    x: Operand,
    w: Operand,
    b: Operand | None = None,
    /,
    *,
    auto_pad: str = "NOTSET",
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    group: int = 1,
    precision: str | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Conv: N-D convolution (NCHW), grouped and depthwise, with optional bias.

    Attributes: auto_pad='NOTSET', kernel_shape=None, pads=None, strides=None, dilations=None, group=1, precision=None. Returns the output value.
    """
    return call_builder(
        "Conv",
        "",
        (x, w, b),
        {
            "auto_pad": auto_pad,
            "kernel_shape": kernel_shape,
            "pads": pads,
            "strides": strides,
            "dilations": dilations,
            "group": group,
            "precision": precision,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def conv_integer(
    x: Operand,
    w: Operand,
    x_zero_point: Operand | None = None,
    w_zero_point: Operand | None = None,
    /,
    *,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ConvInteger: int32 convolution of zero-point-shifted inputs.

    Attributes: auto_pad='NOTSET', dilations=None, group=1, kernel_shape=None, pads=None, strides=None. Returns the output value.
    """
    return call_builder(
        "ConvInteger",
        "",
        (x, w, x_zero_point, w_zero_point),
        {
            "auto_pad": auto_pad,
            "dilations": dilations,
            "group": group,
            "kernel_shape": kernel_shape,
            "pads": pads,
            "strides": strides,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def conv_transpose(
    x: Operand,
    w: Operand,
    b: Operand | None = None,
    /,
    *,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    output_padding: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
    precision: str | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ConvTranspose: transposed convolution (any spatial rank; groups, strides, dilations, pads).

    Attributes: dilations=None, pads=None, strides=None, auto_pad='NOTSET', group=1, kernel_shape=None, output_padding=None, output_shape=None, precision=None. Returns the output value.
    """
    return call_builder(
        "ConvTranspose",
        "",
        (x, w, b),
        {
            "dilations": dilations,
            "pads": pads,
            "strides": strides,
            "auto_pad": auto_pad,
            "group": group,
            "kernel_shape": kernel_shape,
            "output_padding": output_padding,
            "output_shape": output_shape,
            "precision": precision,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def cos(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Cos: cosine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Cos", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def cosh(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Cosh: hyperbolic cosine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Cosh", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def cum_prod(
    x: Operand,
    axis: Operand,
    /,
    *,
    exclusive: int = 0,
    reverse: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """CumProd: running product along an axis (exclusive, reverse).

    Attributes: exclusive=0, reverse=0. Returns the output value.
    """
    return call_builder(
        "CumProd",
        "",
        (x, axis),
        {"exclusive": exclusive, "reverse": reverse, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def cum_sum(
    x: Operand,
    axis: Operand,
    /,
    *,
    exclusive: int = 0,
    reverse: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """CumSum: running sum along an axis (exclusive, reverse).

    Attributes: exclusive=0, reverse=0. Returns the output value.
    """
    return call_builder(
        "CumSum",
        "",
        (x, axis),
        {"exclusive": exclusive, "reverse": reverse, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def deform_conv(
    x: Operand,
    w: Operand,
    offset: Operand,
    b: Operand | None = None,
    mask: Operand | None = None,
    /,
    *,
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    offset_group: int = 1,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """DeformConv: deformable 2-D convolution: kernel taps at learned offsets, optionally masked.

    Attributes: dilations=None, group=1, kernel_shape=None, offset_group=1, pads=None, strides=None. Returns the output value.
    """
    return call_builder(
        "DeformConv",
        "",
        (x, w, offset, b, mask),
        {
            "dilations": dilations,
            "group": group,
            "kernel_shape": kernel_shape,
            "offset_group": offset_group,
            "pads": pads,
            "strides": strides,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def depth_to_space(
    input: Operand,
    /,
    *,
    blocksize: int,
    mode: str = "DCR",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """DepthToSpace: move channel blocks into space (DCR or CRD).

    Attributes: blocksize=REQUIRED, mode='DCR'. Returns the output value.
    """
    return call_builder(
        "DepthToSpace",
        "",
        (input,),
        {"blocksize": blocksize, "mode": mode, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def dequantize_linear(
    x: Operand,
    x_scale: Operand,
    x_zero_point: Operand | None = None,
    /,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """DequantizeLinear: (x - zero_point) * scale, per tensor, axis or block.

    Attributes: axis=1, block_size=0, output_dtype=0. Returns the output value.
    """
    return call_builder(
        "DequantizeLinear",
        "",
        (x, x_scale, x_zero_point),
        {"axis": axis, "block_size": block_size, "output_dtype": output_dtype, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def det(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Det: determinants of the square matrices in the last two dimensions.

    Attributes: none. Returns the output value.
    """
    return call_builder("Det", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def dft(
    input: Operand,
    dft_length: Operand | None = None,
    in_axis: Operand | None = None,
    /,
    *,
    inverse: int = 0,
    onesided: int = 0,
    axis: int | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """DFT: discrete Fourier transform along one axis (axis from the input, or the opset-17 attribute).

    Attributes: inverse=0, onesided=0, axis=None. Returns the output value.
    """
    return call_builder(
        "DFT",
        "",
        (input, dft_length, in_axis),
        {"inverse": inverse, "onesided": onesided, "axis": axis, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def div(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Div: a / b; integer division truncates toward zero.

    Attributes: none. Returns the output value.
    """
    return call_builder("Div", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def dropout(
    data: Operand,
    ratio: Operand | None = None,
    training_mode: Operand | None = None,
    /,
    *,
    seed: int | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Dropout: Dropout: a copy in inference; in training (training_mode input) a seeded random mask, scaled by 1/(1-ratio).

    Attributes: seed=None. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Dropout", "", (data, ratio, training_mode), {"seed": seed, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def dynamic_quantize_linear(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Any:
    """DynamicQuantizeLinear: uint8 quantisation with scale and zero point from x's range.

    Attributes: none. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder("DynamicQuantizeLinear", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def dynamic_quantize_mat_mul(
    x0: Operand,
    x1: Operand,
    x2: Operand,
    x3: Operand | None = None,
    x4: Operand | None = None,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """DynamicQuantizeMatMul: onnxruntime's float matmul through int8: A quantised as DynamicQuantizeLinear, times B - zb, scaled, plus bias.

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "DynamicQuantizeMatMul",
        "com.microsoft",
        (x0, x1, x2, x3, x4),
        {**unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def einsum(
    *inputs: Operand | Sequence[Operand], equation: str, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Einsum: Einstein summation over the inputs, contracted in an optimised order.

    Attributes: equation=REQUIRED. Returns the output value.
    """
    return call_builder(
        "Einsum", "", inputs, {"equation": equation, **unknown}, variadic=True, name=name, num_outputs=num_outputs
    )


def elu(x: Operand, /, *, alpha: float = 1.0, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Elu: x for x >= 0, alpha * (e^x - 1) below.

    Attributes: alpha=1.0. Returns the output value.
    """
    return call_builder("Elu", "", (x,), {"alpha": alpha, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def equal(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Equal: a == b, broadcast (numbers, bools or strings).

    Attributes: none. Returns the output value.
    """
    return call_builder("Equal", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def erf(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Erf: the error function.

    Attributes: none. Returns the output value.
    """
    return call_builder("Erf", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def exp(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Exp: e ** x.

    Attributes: none. Returns the output value.
    """
    return call_builder("Exp", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def expand(
    input: Operand, shape: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Expand: broadcast to a shape (bidirectionally, as numpy does).

    Attributes: none. Returns the output value.
    """
    return call_builder("Expand", "", (input, shape), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def eye_like(
    input: Operand,
    /,
    *,
    dtype: DTypeLike | None = None,
    k: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """EyeLike: a 2-D tensor shaped like the input with ones on the k-th diagonal.

    Attributes: dtype=None, k=0. Returns the output value.
    """
    return call_builder(
        "EyeLike", "", (input,), {"dtype": dtype, "k": k, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def flatten(
    input: Operand, /, *, axis: int = 1, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Flatten: 2-D: the dims before axis times the dims from it.

    Attributes: axis=1. Returns the output value.
    """
    return call_builder("Flatten", "", (input,), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def flex_attention(
    q: Operand,
    k: Operand,
    v: Operand,
    /,
    *,
    scale: float | None = None,
    softmax_precision: int | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """FlexAttention: softmax(Q K^T * scale) V with grouped-query heads (no modifier subgraphs).

    Attributes: scale=None, softmax_precision=None. Returns the output value.
    """
    return call_builder(
        "FlexAttention",
        "ai.onnx.preview",
        (q, k, v),
        {"scale": scale, "softmax_precision": softmax_precision, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def floor(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Floor: round toward -inf.

    Attributes: none. Returns the output value.
    """
    return call_builder("Floor", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def fused_conv(
    x0: Operand,
    x1: Operand,
    x2: Operand | None = None,
    x3: Operand | None = None,
    /,
    *,
    auto_pad: str = "NOTSET",
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    group: int = 1,
    precision: str | None = None,
    activation: str = "",
    activation_params: Sequence[float] = (),
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """FusedConv: Conv, plus Z (a residual) when given, then an activation, in place.

    Attributes: auto_pad='NOTSET', kernel_shape=None, pads=None, strides=None, dilations=None, group=1, precision=None, activation='', activation_params=(). Returns the output value.
    """
    return call_builder(
        "FusedConv",
        "aioge",
        (x0, x1, x2, x3),
        {
            "auto_pad": auto_pad,
            "kernel_shape": kernel_shape,
            "pads": pads,
            "strides": strides,
            "dilations": dilations,
            "group": group,
            "precision": precision,
            "activation": activation,
            "activation_params": activation_params,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def fused_elementwise(
    *inputs: Operand | Sequence[Operand],
    ops: Sequence[str],
    operands: Sequence[int],
    params: Sequence[float] = (),
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """FusedElementwise: a chain of elementwise ops run as one program over cache-sized chunks of the output.

    Attributes: ops=REQUIRED, operands=REQUIRED, params=(). Returns the output value.
    """
    return call_builder(
        "FusedElementwise",
        "aioge",
        inputs,
        {"ops": ops, "operands": operands, "params": params, **unknown},
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def fused_gemm(
    x0: Operand,
    x1: Operand,
    x2: Operand | None = None,
    /,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    precision: str | None = None,
    activation: str = "",
    activation_params: Sequence[float] = (),
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """FusedGemm: Gemm then an activation, in place.

    Attributes: alpha=1.0, beta=1.0, transA=0, transB=0, precision=None, activation='', activation_params=(). Returns the output value.
    """
    return call_builder(
        "FusedGemm",
        "aioge",
        (x0, x1, x2),
        {
            "alpha": alpha,
            "beta": beta,
            "transA": transA,
            "transB": transB,
            "precision": precision,
            "activation": activation,
            "activation_params": activation_params,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def fused_mat_mul(
    x0: Operand,
    x1: Operand,
    x2: Operand | None = None,
    /,
    *,
    transA: int = 0,
    transB: int = 0,
    alpha: float = 1.0,
    activation: str = "",
    activation_params: Sequence[float] = (),
    precision: str | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """FusedMatMul: alpha * A' @ B' + C (A', B': last two axes swapped when transA / transB; C optional) then an optional activation.

    Attributes: transA=0, transB=0, alpha=1.0, activation='', activation_params=(), precision=None. Returns the output value.
    """
    return call_builder(
        "FusedMatMul",
        "aioge",
        (x0, x1, x2),
        {
            "transA": transA,
            "transB": transB,
            "alpha": alpha,
            "activation": activation,
            "activation_params": activation_params,
            "precision": precision,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def gather(
    data: Operand,
    indices: Operand,
    /,
    *,
    axis: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Gather: take entries along an axis; negative indices count from the end.

    Attributes: axis=0. Returns the output value.
    """
    return call_builder(
        "Gather", "", (data, indices), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def gather_elements(
    data: Operand,
    indices: Operand,
    /,
    *,
    axis: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """GatherElements: data picked element by element along axis.

    Attributes: axis=0. Returns the output value.
    """
    return call_builder(
        "GatherElements", "", (data, indices), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def gather_nd(
    data: Operand,
    indices: Operand,
    /,
    *,
    batch_dims: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """GatherND: slices of data picked by index tuples.

    Attributes: batch_dims=0. Returns the output value.
    """
    return call_builder(
        "GatherND", "", (data, indices), {"batch_dims": batch_dims, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def gelu(
    x: Operand, /, *, approximate: str = "none", name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Gelu: x * Phi(x), exact (erf) or tanh-approximated.

    Attributes: approximate='none'. Returns the output value.
    """
    return call_builder(
        "Gelu", "", (x,), {"approximate": approximate, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def gemm(
    a: Operand,
    b: Operand,
    c: Operand | None = None,
    /,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    precision: str | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Gemm: alpha * A' @ B' + beta * C, C optional and broadcast.

    Attributes: alpha=1.0, beta=1.0, transA=0, transB=0, precision=None. Returns the output value.
    """
    return call_builder(
        "Gemm",
        "",
        (a, b, c),
        {"alpha": alpha, "beta": beta, "transA": transA, "transB": transB, "precision": precision, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def global_average_pool(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """GlobalAveragePool: mean over all spatial axes, kept as size 1.

    Attributes: none. Returns the output value.
    """
    return call_builder("GlobalAveragePool", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def global_max_pool(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """GlobalMaxPool: the maximum over all spatial axes, kept as size 1.

    Attributes: none. Returns the output value.
    """
    return call_builder("GlobalMaxPool", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def greater(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Greater: a > b, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("Greater", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def greater_or_equal(
    a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """GreaterOrEqual: a >= b, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("GreaterOrEqual", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def grid_sample(
    x: Operand,
    grid: Operand,
    /,
    *,
    align_corners: int = 0,
    mode: str = "linear",
    padding_mode: str = "zeros",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """GridSample: sample the input at a grid of normalised coordinates.

    Attributes: align_corners=0, mode='linear', padding_mode='zeros'. Returns the output value.
    """
    return call_builder(
        "GridSample",
        "",
        (x, grid),
        {"align_corners": align_corners, "mode": mode, "padding_mode": padding_mode, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def group_normalization(
    x: Operand,
    scale: Operand,
    bias: Operand,
    /,
    *,
    num_groups: int,
    epsilon: float = 1e-05,
    stash_type: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """GroupNormalization: per-sample normalisation over channel groups with a per-channel affine.

    Attributes: num_groups=REQUIRED, epsilon=1e-05, stash_type=1. Returns the output value.
    """
    return call_builder(
        "GroupNormalization",
        "",
        (x, scale, bias),
        {"num_groups": num_groups, "epsilon": epsilon, "stash_type": stash_type, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def gru(
    x: Operand,
    w: Operand,
    r: Operand,
    b: Operand | None = None,
    sequence_lens: Operand | None = None,
    initial_h: Operand | None = None,
    /,
    *,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    activations: Sequence[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    linear_before_reset: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """GRU: a GRU over a sequence: Y and the last hidden state.

    Attributes: activation_alpha=None, activation_beta=None, activations=None, clip=None, direction='forward', hidden_size=None, layout=0, linear_before_reset=0. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "GRU",
        "",
        (x, w, r, b, sequence_lens, initial_h),
        {
            "activation_alpha": activation_alpha,
            "activation_beta": activation_beta,
            "activations": activations,
            "clip": clip,
            "direction": direction,
            "hidden_size": hidden_size,
            "layout": layout,
            "linear_before_reset": linear_before_reset,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def hamming_window(
    size: Operand,
    /,
    *,
    output_datatype: int = 1,
    periodic: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """HammingWindow: the Hamming window of a length.

    Attributes: output_datatype=1, periodic=1. Returns the output value.
    """
    return call_builder(
        "HammingWindow",
        "",
        (size,),
        {"output_datatype": output_datatype, "periodic": periodic, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def hann_window(
    size: Operand,
    /,
    *,
    output_datatype: int = 1,
    periodic: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """HannWindow: the Hann window of a length.

    Attributes: output_datatype=1, periodic=1. Returns the output value.
    """
    return call_builder(
        "HannWindow",
        "",
        (size,),
        {"output_datatype": output_datatype, "periodic": periodic, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def hard_sigmoid(
    x: Operand,
    /,
    *,
    alpha: float = 0.2,
    beta: float = 0.5,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """HardSigmoid: max(0, min(1, alpha * x + beta)).

    Attributes: alpha=0.2, beta=0.5. Returns the output value.
    """
    return call_builder(
        "HardSigmoid", "", (x,), {"alpha": alpha, "beta": beta, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def hard_swish(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """HardSwish: x * max(0, min(1, x / 6 + 1 / 2)).

    Attributes: none. Returns the output value.
    """
    return call_builder("HardSwish", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def hardmax(
    input: Operand, /, *, axis: int = -1, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Hardmax: 1 at the first maximum along axis, else 0.

    Attributes: axis=-1. Returns the output value.
    """
    return call_builder("Hardmax", "", (input,), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def identity(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Identity: a copy of x.

    Attributes: none. Returns the output value.
    """
    return call_builder("Identity", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def if_(
    *inputs: Operand | Sequence[Operand],
    then_branch: Any,
    else_branch: Any,
    out_types: Any,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """If: run the branch program the condition picks on the outer values (inputs 1...) and give its outputs.

    Attributes: then_branch=REQUIRED, else_branch=REQUIRED, out_types=REQUIRED. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "If",
        "",
        inputs,
        {"then_branch": then_branch, "else_branch": else_branch, "out_types": out_types, **unknown},
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def image_decoder(
    encoded_stream: Operand,
    /,
    *,
    pixel_format: str = "RGB",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ImageDecoder: decode a BMP/JPEG/PNG/PNM/TIFF/WebP byte stream to HWC uint8 pixels.

    Attributes: pixel_format='RGB'. Returns the output value.
    """
    return call_builder(
        "ImageDecoder",
        "",
        (encoded_stream,),
        {"pixel_format": pixel_format, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def instance_normalization(
    input: Operand,
    scale: Operand,
    b: Operand,
    /,
    *,
    epsilon: float = 1e-05,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """InstanceNormalization: per-sample, per-channel normalisation with a per-channel affine.

    Attributes: epsilon=1e-05. Returns the output value.
    """
    return call_builder(
        "InstanceNormalization",
        "",
        (input, scale, b),
        {"epsilon": epsilon, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def is_inf(
    x: Operand,
    /,
    *,
    detect_negative: int = 1,
    detect_positive: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """IsInf: True where x is an infinity of a detected sign.

    Attributes: detect_negative=1, detect_positive=1. Returns the output value.
    """
    return call_builder(
        "IsInf",
        "",
        (x,),
        {"detect_negative": detect_negative, "detect_positive": detect_positive, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def is_na_n(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """IsNaN: True where x is NaN.

    Attributes: none. Returns the output value.
    """
    return call_builder("IsNaN", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def label_encoder(
    x: Operand,
    /,
    *,
    default_float: float | None = None,
    default_int64: int | None = None,
    default_string: str | None = None,
    default_tensor: np.ndarray | None = None,
    keys_floats: Sequence[float] | None = None,
    keys_int64s: Sequence[int] | None = None,
    keys_strings: Sequence[str] | None = None,
    keys_tensor: np.ndarray | None = None,
    values_floats: Sequence[float] | None = None,
    values_int64s: Sequence[int] | None = None,
    values_strings: Sequence[str] | None = None,
    values_tensor: np.ndarray | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """LabelEncoder: map every element through a key -> value table.

    Attributes: default_float=None, default_int64=None, default_string=None, default_tensor=None, keys_floats=None, keys_int64s=None, keys_strings=None, keys_tensor=None, values_floats=None, values_int64s=None, values_strings=None, values_tensor=None. Returns the output value.
    """
    return call_builder(
        "LabelEncoder",
        "ai.onnx.ml",
        (x,),
        {
            "default_float": default_float,
            "default_int64": default_int64,
            "default_string": default_string,
            "default_tensor": default_tensor,
            "keys_floats": keys_floats,
            "keys_int64s": keys_int64s,
            "keys_strings": keys_strings,
            "keys_tensor": keys_tensor,
            "values_floats": values_floats,
            "values_int64s": values_int64s,
            "values_strings": values_strings,
            "values_tensor": values_tensor,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def layer_normalization(
    x: Operand,
    scale: Operand,
    b: Operand | None = None,
    /,
    *,
    axis: int = -1,
    epsilon: float = 1e-05,
    stash_type: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """LayerNormalization: normalise over axes [axis, rank), then scale and shift; optional Mean and InvStdDev outputs.

    Attributes: axis=-1, epsilon=1e-05, stash_type=1. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "LayerNormalization",
        "",
        (x, scale, b),
        {"axis": axis, "epsilon": epsilon, "stash_type": stash_type, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def leaky_relu(
    x: Operand, /, *, alpha: float = 0.01, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """LeakyRelu: x if x >= 0 else alpha * x.

    Attributes: alpha=0.01. Returns the output value.
    """
    return call_builder("LeakyRelu", "", (x,), {"alpha": alpha, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def less(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Less: a < b, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("Less", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def less_or_equal(
    a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """LessOrEqual: a <= b, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("LessOrEqual", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def linear_attention(
    query: Operand,
    key: Operand,
    value: Operand,
    past_state: Operand | None = None,
    decay: Operand | None = None,
    beta: Operand | None = None,
    /,
    *,
    chunk_size: int = 64,
    kv_num_heads: int,
    q_num_heads: int,
    scale: float = 0.0,
    update_rule: str = "gated_delta",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """LinearAttention: linear attention with a recurrent (optionally gated / delta-rule) state.

    Attributes: chunk_size=64, kv_num_heads=REQUIRED, q_num_heads=REQUIRED, scale=0.0, update_rule='gated_delta'. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "LinearAttention",
        "",
        (query, key, value, past_state, decay, beta),
        {
            "chunk_size": chunk_size,
            "kv_num_heads": kv_num_heads,
            "q_num_heads": q_num_heads,
            "scale": scale,
            "update_rule": update_rule,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def log(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Log: natural logarithm.

    Attributes: none. Returns the output value.
    """
    return call_builder("Log", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def log_softmax(
    input: Operand, /, *, axis: int = -1, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """LogSoftmax: log of Softmax along one axis, computed stably (opset 13).

    Attributes: axis=-1. Returns the output value.
    """
    return call_builder("LogSoftmax", "", (input,), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def loop(
    *inputs: Operand | Sequence[Operand],
    body: Any,
    num_states: int,
    scan_dtypes: Any = (),
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Loop: run a body program while the trip count lasts and its condition holds (states carried, scan outputs stacked).

    Attributes: body=REQUIRED, num_states=REQUIRED, scan_dtypes=(). Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Loop",
        "",
        inputs,
        {"body": body, "num_states": num_states, "scan_dtypes": scan_dtypes, **unknown},
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def lp_normalization(
    input: Operand, /, *, axis: int = -1, p: int = 2, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """LpNormalization: x over its L1 or L2 norm along axis.

    Attributes: axis=-1, p=2. Returns the output value.
    """
    return call_builder(
        "LpNormalization", "", (input,), {"axis": axis, "p": p, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def lp_pool(
    x: Operand,
    /,
    *,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    kernel_shape: Sequence[int],
    p: int = 2,
    ceil_mode: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """LpPool: the Lp norm of every window.

    Attributes: dilations=None, pads=None, strides=None, auto_pad='NOTSET', kernel_shape=REQUIRED, p=2, ceil_mode=0. Returns the output value.
    """
    return call_builder(
        "LpPool",
        "",
        (x,),
        {
            "dilations": dilations,
            "pads": pads,
            "strides": strides,
            "auto_pad": auto_pad,
            "kernel_shape": kernel_shape,
            "p": p,
            "ceil_mode": ceil_mode,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def lrn(
    x: Operand,
    /,
    *,
    alpha: float = 0.0001,
    beta: float = 0.75,
    bias: float = 1.0,
    size: int,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """LRN: local response normalisation across channels.

    Attributes: alpha=0.0001, beta=0.75, bias=1.0, size=REQUIRED. Returns the output value.
    """
    return call_builder(
        "LRN",
        "",
        (x,),
        {"alpha": alpha, "beta": beta, "bias": bias, "size": size, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def lstm(
    x: Operand,
    w: Operand,
    r: Operand,
    b: Operand | None = None,
    sequence_lens: Operand | None = None,
    initial_h: Operand | None = None,
    initial_c: Operand | None = None,
    p: Operand | None = None,
    /,
    *,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    activations: Sequence[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    input_forget: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """LSTM: an LSTM over a sequence: Y and the last hidden and cell states.

    Attributes: activation_alpha=None, activation_beta=None, activations=None, clip=None, direction='forward', hidden_size=None, layout=0, input_forget=0. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "LSTM",
        "",
        (x, w, r, b, sequence_lens, initial_h, initial_c, p),
        {
            "activation_alpha": activation_alpha,
            "activation_beta": activation_beta,
            "activations": activations,
            "clip": clip,
            "direction": direction,
            "hidden_size": hidden_size,
            "layout": layout,
            "input_forget": input_forget,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def mat_mul_integer(
    a: Operand,
    b: Operand,
    a_zero_point: Operand | None = None,
    b_zero_point: Operand | None = None,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """MatMulInteger: int32 (A - za) @ (B - zb).

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "MatMulInteger", "", (a, b, a_zero_point, b_zero_point), {**unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def matmul(
    a: Operand,
    b: Operand,
    /,
    *,
    precision: str | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """MatMul: numpy matmul: batched, broadcasting, 1-D operands promoted and squeezed.

    Attributes: precision=None. Returns the output value.
    """
    return call_builder(
        "MatMul", "", (a, b), {"precision": precision, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def max(*inputs: Operand | Sequence[Operand], name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Max: elementwise maximum of all inputs, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("Max", "", inputs, {**unknown}, variadic=True, name=name, num_outputs=num_outputs)


def max_pool(
    x: Operand,
    /,
    *,
    auto_pad: str = "NOTSET",
    kernel_shape: Sequence[int],
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: int = 0,
    storage_order: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """MaxPool: max over sliding windows (padding never wins); optional Indices output (flat, int64).

    Attributes: auto_pad='NOTSET', kernel_shape=REQUIRED, pads=None, strides=None, dilations=None, ceil_mode=0, storage_order=0. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "MaxPool",
        "",
        (x,),
        {
            "auto_pad": auto_pad,
            "kernel_shape": kernel_shape,
            "pads": pads,
            "strides": strides,
            "dilations": dilations,
            "ceil_mode": ceil_mode,
            "storage_order": storage_order,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def max_unpool(
    x: Operand,
    i: Operand,
    output_shape: Operand | None = None,
    /,
    *,
    kernel_shape: Sequence[int],
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """MaxUnpool: scatter pooled maxima back to their positions in a zero tensor.

    Attributes: kernel_shape=REQUIRED, pads=None, strides=None. Returns the output value.
    """
    return call_builder(
        "MaxUnpool",
        "",
        (x, i, output_shape),
        {"kernel_shape": kernel_shape, "pads": pads, "strides": strides, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def mean(
    *inputs: Operand | Sequence[Operand], name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Mean: elementwise mean of all inputs, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("Mean", "", inputs, {**unknown}, variadic=True, name=name, num_outputs=num_outputs)


def mean_variance_normalization(
    x: Operand, /, *, axes: Sequence[int] = (0, 2, 3), name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """MeanVarianceNormalization: (x - mean) / std over the axes.

    Attributes: axes=(0, 2, 3). Returns the output value.
    """
    return call_builder(
        "MeanVarianceNormalization", "", (x,), {"axes": axes, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def mel_weight_matrix(
    num_mel_bins: Operand,
    dft_length: Operand,
    sample_rate: Operand,
    lower_edge_hertz: Operand,
    upper_edge_hertz: Operand,
    /,
    *,
    output_datatype: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """MelWeightMatrix: triangular mel filter weights of the linear DFT bins.

    Attributes: output_datatype=1. Returns the output value.
    """
    return call_builder(
        "MelWeightMatrix",
        "",
        (num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz),
        {"output_datatype": output_datatype, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def min(*inputs: Operand | Sequence[Operand], name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Min: elementwise minimum of all inputs, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("Min", "", inputs, {**unknown}, variadic=True, name=name, num_outputs=num_outputs)


def mish(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Mish: x * tanh(softplus(x)).

    Attributes: none. Returns the output value.
    """
    return call_builder("Mish", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def mod(
    a: Operand, b: Operand, /, *, fmod: int = 0, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Mod: remainder: the divisor's sign (fmod=0) or the dividend's (fmod=1).

    Attributes: fmod=0. Returns the output value.
    """
    return call_builder("Mod", "", (a, b), {"fmod": fmod, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def momentum(
    *inputs: Operand | Sequence[Operand],
    alpha: float,
    beta: float,
    mode: str,
    norm_coefficient: float,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Momentum: momentum (or Nesterov) updates of tensors X with gradients G and velocities V.

    Attributes: alpha=REQUIRED, beta=REQUIRED, mode=REQUIRED, norm_coefficient=REQUIRED. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Momentum",
        "ai.onnx.preview.training",
        inputs,
        {"alpha": alpha, "beta": beta, "mode": mode, "norm_coefficient": norm_coefficient, **unknown},
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def mul(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Mul: a * b with numpy broadcasting.

    Attributes: none. Returns the output value.
    """
    return call_builder("Mul", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def neg(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Neg: -x.

    Attributes: none. Returns the output value.
    """
    return call_builder("Neg", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def negative_log_likelihood_loss(
    input: Operand,
    target: Operand,
    weight: Operand | None = None,
    /,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """NegativeLogLikelihoodLoss: -input[n, target[n]] * weight[target[n]], reduced by none, sum or a weighted mean.

    Attributes: ignore_index=None, reduction='mean'. Returns the output value.
    """
    return call_builder(
        "NegativeLogLikelihoodLoss",
        "",
        (input, target, weight),
        {"ignore_index": ignore_index, "reduction": reduction, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def non_max_suppression(
    boxes: Operand,
    scores: Operand,
    max_output_boxes_per_class: Operand | None = None,
    iou_threshold: Operand | None = None,
    score_threshold: Operand | None = None,
    /,
    *,
    center_point_box: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """NonMaxSuppression: greedy per-class box selection by score with IoU suppression: [batch, class, box] rows.

    Attributes: center_point_box=0. Returns the output value.
    """
    return call_builder(
        "NonMaxSuppression",
        "",
        (boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold),
        {"center_point_box": center_point_box, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def non_zero(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """NonZero: indices of the non-zero elements, one row per dimension.

    Attributes: none. Returns the output value.
    """
    return call_builder("NonZero", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def not_(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Not: not x.

    Attributes: none. Returns the output value.
    """
    return call_builder("Not", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def one_hot(
    indices: Operand,
    depth: Operand,
    values: Operand,
    /,
    *,
    axis: int = -1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """OneHot: values[1] at each index along a new axis, values[0] elsewhere.

    Attributes: axis=-1. Returns the output value.
    """
    return call_builder(
        "OneHot", "", (indices, depth, values), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def optional(
    input: Operand | None = None,
    /,
    *,
    elem_dtype: DTypeLike | None = None,
    sequence: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Optional: an optional holding the input, or an empty one of elem_dtype (a sequence when sequence=1).

    Attributes: elem_dtype=None, sequence=0. Returns the output value.
    """
    return call_builder(
        "Optional",
        "",
        (input,),
        {"elem_dtype": elem_dtype, "sequence": sequence, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def optional_get_element(
    input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """OptionalGetElement: the value an optional holds.

    Attributes: none. Returns the output value.
    """
    return call_builder("OptionalGetElement", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def optional_has_element(
    input: Operand | None = None, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """OptionalHasElement: whether the optional input holds a value.

    Attributes: none. Returns the output value.
    """
    return call_builder("OptionalHasElement", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def or_(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Or: a or b, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("Or", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def p_relu(x: Operand, slope: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """PRelu: x where x >= 0, slope * x below (slope broadcasts to x).

    Attributes: none. Returns the output value.
    """
    return call_builder("PRelu", "", (x, slope), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def pad(
    data: Operand,
    pads: Operand,
    constant_value: Operand | None = None,
    axes: Operand | None = None,
    /,
    *,
    mode: str = "constant",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Pad: pad (or crop, for negative pads) with a constant, reflection, edge or wrap.

    Attributes: mode='constant'. Returns the output value.
    """
    return call_builder(
        "Pad",
        "",
        (data, pads, constant_value, axes),
        {"mode": mode, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def pow(x: Operand, y: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Pow: a ** b; the result has a's dtype.

    Attributes: none. Returns the output value.
    """
    return call_builder("Pow", "", (x, y), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def q_gemm(
    x0: Operand,
    x1: Operand,
    x2: Operand,
    x3: Operand,
    x4: Operand,
    x5: Operand,
    x6: Operand | None = None,
    x7: Operand | None = None,
    x8: Operand | None = None,
    /,
    *,
    alpha: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """QGemm: onnxruntime's quantised Gemm: alpha (A - za)(B - zb) + C (int32), requantised, or float without y_scale.

    Attributes: alpha=1.0, transA=0, transB=0. Returns the output value.
    """
    return call_builder(
        "QGemm",
        "com.microsoft",
        (x0, x1, x2, x3, x4, x5, x6, x7, x8),
        {"alpha": alpha, "transA": transA, "transB": transB, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def q_linear_add(
    x0: Operand,
    x1: Operand,
    x2: Operand,
    x3: Operand,
    x4: Operand,
    x5: Operand,
    x6: Operand,
    x7: Operand | None = None,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """QLinearAdd: onnxruntime's quantised Add.

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "QLinearAdd",
        "com.microsoft",
        (x0, x1, x2, x3, x4, x5, x6, x7),
        {**unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def q_linear_conv(
    x: Operand,
    x_scale: Operand,
    x_zero_point: Operand,
    w: Operand,
    w_scale: Operand,
    w_zero_point: Operand,
    y_scale: Operand,
    y_zero_point: Operand,
    b: Operand | None = None,
    /,
    *,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """QLinearConv: quantised convolution with requantisation.

    Attributes: auto_pad='NOTSET', dilations=None, group=1, kernel_shape=None, pads=None, strides=None. Returns the output value.
    """
    return call_builder(
        "QLinearConv",
        "",
        (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b),
        {
            "auto_pad": auto_pad,
            "dilations": dilations,
            "group": group,
            "kernel_shape": kernel_shape,
            "pads": pads,
            "strides": strides,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def q_linear_global_average_pool(
    x0: Operand,
    x1: Operand,
    x2: Operand,
    x3: Operand,
    x4: Operand | None = None,
    /,
    *,
    channels_last: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """QLinearGlobalAveragePool: onnxruntime's quantised GlobalAveragePool.

    Attributes: channels_last=0. Returns the output value.
    """
    return call_builder(
        "QLinearGlobalAveragePool",
        "com.microsoft",
        (x0, x1, x2, x3, x4),
        {"channels_last": channels_last, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def q_linear_mat_mul(
    a: Operand,
    a_scale: Operand,
    a_zero_point: Operand,
    b: Operand,
    b_scale: Operand,
    b_zero_point: Operand,
    y_scale: Operand,
    y_zero_point: Operand,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """QLinearMatMul: quantised matmul with requantisation.

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "QLinearMatMul",
        "",
        (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point),
        {**unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def qdq_add(
    x0: Operand,
    x1: Operand,
    x2: Operand,
    x3: Operand,
    x4: Operand,
    x5: Operand,
    x6: Operand,
    x7: Operand,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """QdqAdd: DQ(a) + DQ(b) -> Q as the three round, one pass.

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "QdqAdd", "aioge", (x0, x1, x2, x3, x4, x5, x6, x7), {**unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def quantize_linear(
    x: Operand,
    y_scale: Operand,
    y_zero_point: Operand | None = None,
    /,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    saturate: int = 1,
    precision: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """QuantizeLinear: saturate(round(x / scale) + zero_point), per tensor, axis or block.

    Attributes: axis=1, block_size=0, output_dtype=0, saturate=1, precision=0. Returns the output value.
    """
    return call_builder(
        "QuantizeLinear",
        "",
        (x, y_scale, y_zero_point),
        {
            "axis": axis,
            "block_size": block_size,
            "output_dtype": output_dtype,
            "saturate": saturate,
            "precision": precision,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def range(
    start: Operand,
    limit: Operand,
    delta: Operand,
    /,
    *,
    stash_type: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Range: start, start + delta, ... up to limit (exclusive).

    Attributes: stash_type=1. Returns the output value.
    """
    return call_builder(
        "Range",
        "",
        (start, limit, delta),
        {"stash_type": stash_type, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reciprocal(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Reciprocal: 1 / x.

    Attributes: none. Returns the output value.
    """
    return call_builder("Reciprocal", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def reduce_l1(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceL1: sum of |x| over the axes.

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceL1",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_l2(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceL2: sqrt of the sum of x * x over the axes.

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceL2",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_log_sum(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceLogSum: log of the sum over the axes.

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceLogSum",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_log_sum_exp(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceLogSumExp: log of the sum of e^x over the axes, overflow-free.

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceLogSumExp",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_max(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceMax: maximum over axes (all when none are given).

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceMax",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_mean(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceMean: mean over axes (all when none are given).

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceMean",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_min(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceMin: minimum over the axes.

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceMin",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_prod(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceProd: product over the axes.

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceProd",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_sum(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceSum: sum over axes (all when none are given).

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceSum",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reduce_sum_square(
    data: Operand,
    axes: Operand | None = None,
    /,
    *,
    keepdims: int = 1,
    noop_with_empty_axes: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReduceSumSquare: sum of x * x over the axes.

    Attributes: keepdims=1, noop_with_empty_axes=0. Returns the output value.
    """
    return call_builder(
        "ReduceSumSquare",
        "",
        (data, axes),
        {"keepdims": keepdims, "noop_with_empty_axes": noop_with_empty_axes, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def regex_full_match(
    x: Operand, /, *, pattern: str, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """RegexFullMatch: whether each string fully matches.

    Attributes: pattern=REQUIRED. Returns the output value.
    """
    return call_builder(
        "RegexFullMatch", "", (x,), {"pattern": pattern, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def relu(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Relu: max(x, 0).

    Attributes: none. Returns the output value.
    """
    return call_builder("Relu", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def reshape(
    data: Operand,
    shape: Operand,
    /,
    *,
    allowzero: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Reshape: new shape from the shape input; 0 copies a dim (unless allowzero), -1 is inferred.

    Attributes: allowzero=0. Returns the output value.
    """
    return call_builder(
        "Reshape", "", (data, shape), {"allowzero": allowzero, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def resize(
    x: Operand,
    roi: Operand | None = None,
    scales: Operand | None = None,
    sizes: Operand | None = None,
    /,
    *,
    antialias: int = 0,
    axes: Sequence[int] | None = None,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    keep_aspect_ratio_policy: str = "stretch",
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Resize: resize by scales or to sizes: nearest, linear or cubic, per-axis.

    Attributes: antialias=0, axes=None, coordinate_transformation_mode='half_pixel', cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy='stretch', mode='nearest', nearest_mode='round_prefer_floor'. Returns the output value.
    """
    return call_builder(
        "Resize",
        "",
        (x, roi, scales, sizes),
        {
            "antialias": antialias,
            "axes": axes,
            "coordinate_transformation_mode": coordinate_transformation_mode,
            "cubic_coeff_a": cubic_coeff_a,
            "exclude_outside": exclude_outside,
            "extrapolation_value": extrapolation_value,
            "keep_aspect_ratio_policy": keep_aspect_ratio_policy,
            "mode": mode,
            "nearest_mode": nearest_mode,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def reverse_sequence(
    input: Operand,
    sequence_lens: Operand,
    /,
    *,
    batch_axis: int = 1,
    time_axis: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ReverseSequence: each batch entry's leading time steps reversed.

    Attributes: batch_axis=1, time_axis=0. Returns the output value.
    """
    return call_builder(
        "ReverseSequence",
        "",
        (input, sequence_lens),
        {"batch_axis": batch_axis, "time_axis": time_axis, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def rms_normalization(
    x: Operand,
    scale: Operand,
    /,
    *,
    axis: int = -1,
    epsilon: float = 1e-05,
    stash_type: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """RMSNormalization: x / sqrt(mean(x * x) + epsilon) * scale over the axes from axis on.

    Attributes: axis=-1, epsilon=1e-05, stash_type=1. Returns the output value.
    """
    return call_builder(
        "RMSNormalization",
        "",
        (x, scale),
        {"axis": axis, "epsilon": epsilon, "stash_type": stash_type, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def rnn(
    x: Operand,
    w: Operand,
    r: Operand,
    b: Operand | None = None,
    sequence_lens: Operand | None = None,
    initial_h: Operand | None = None,
    /,
    *,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    activations: Sequence[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """RNN: an Elman RNN over a sequence: Y and the last hidden state.

    Attributes: activation_alpha=None, activation_beta=None, activations=None, clip=None, direction='forward', hidden_size=None, layout=0. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "RNN",
        "",
        (x, w, r, b, sequence_lens, initial_h),
        {
            "activation_alpha": activation_alpha,
            "activation_beta": activation_beta,
            "activations": activations,
            "clip": clip,
            "direction": direction,
            "hidden_size": hidden_size,
            "layout": layout,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def roi_align(
    x: Operand,
    rois: Operand,
    batch_indices: Operand,
    /,
    *,
    coordinate_transformation_mode: str = "half_pixel",
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """RoiAlign: bilinearly sampled, pooled features of regions of interest.

    Attributes: coordinate_transformation_mode='half_pixel', mode='avg', output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0. Returns the output value.
    """
    return call_builder(
        "RoiAlign",
        "",
        (x, rois, batch_indices),
        {
            "coordinate_transformation_mode": coordinate_transformation_mode,
            "mode": mode,
            "output_height": output_height,
            "output_width": output_width,
            "sampling_ratio": sampling_ratio,
            "spatial_scale": spatial_scale,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def rotary_embedding(
    x: Operand,
    cos_cache: Operand,
    sin_cache: Operand,
    position_ids: Operand | None = None,
    /,
    *,
    interleaved: int = 0,
    num_heads: int | None = None,
    rotary_embedding_dim: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """RotaryEmbedding: rotate the leading features of every head by position-dependent angles.

    Attributes: interleaved=0, num_heads=None, rotary_embedding_dim=0. Returns the output value.
    """
    return call_builder(
        "RotaryEmbedding",
        "",
        (x, cos_cache, sin_cache, position_ids),
        {"interleaved": interleaved, "num_heads": num_heads, "rotary_embedding_dim": rotary_embedding_dim, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def round(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Round: round to nearest, halves to even.

    Attributes: none. Returns the output value.
    """
    return call_builder("Round", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def scatter(
    data: Operand,
    indices: Operand,
    updates: Operand,
    /,
    *,
    axis: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Scatter: ScatterElements without reduction (deprecated form).

    Attributes: axis=0. Returns the output value.
    """
    return call_builder(
        "Scatter", "", (data, indices, updates), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def scatter_elements(
    data: Operand,
    indices: Operand,
    updates: Operand,
    /,
    *,
    axis: int = 0,
    reduction: str = "none",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ScatterElements: data with elements along axis replaced or reduced.

    Attributes: axis=0, reduction='none'. Returns the output value.
    """
    return call_builder(
        "ScatterElements",
        "",
        (data, indices, updates),
        {"axis": axis, "reduction": reduction, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def scatter_nd(
    data: Operand,
    indices: Operand,
    updates: Operand,
    /,
    *,
    reduction: str = "none",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """ScatterND: data with slices at index tuples replaced or reduced.

    Attributes: reduction='none'. Returns the output value.
    """
    return call_builder(
        "ScatterND",
        "",
        (data, indices, updates),
        {"reduction": reduction, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def selu(
    x: Operand,
    /,
    *,
    alpha: float = 1.6732631921768188,
    gamma: float = 1.0507010221481323,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Selu: gamma * (x for x > 0, alpha * (e^x - 1) otherwise).

    Attributes: alpha=1.6732631921768188, gamma=1.0507010221481323. Returns the output value.
    """
    return call_builder(
        "Selu", "", (x,), {"alpha": alpha, "gamma": gamma, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def sequence_at(
    input_sequence: Operand, position: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """SequenceAt: the tensor at a position of a sequence.

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "SequenceAt", "", (input_sequence, position), {**unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def sequence_construct(
    *inputs: Operand | Sequence[Operand], name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """SequenceConstruct: a sequence of the input tensors.

    Attributes: none. Returns the output value.
    """
    return call_builder("SequenceConstruct", "", inputs, {**unknown}, variadic=True, name=name, num_outputs=num_outputs)


def sequence_empty(
    graph: Graph, /, *, dtype: DTypeLike = "float32", name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """SequenceEmpty: an empty sequence.

    Attributes: dtype='float32'. Returns the output value.
    """
    return call_builder(
        "SequenceEmpty", "", (), {"dtype": dtype, **unknown}, variadic=False, name=name, num_outputs=num_outputs, graph=graph
    )


def sequence_erase(
    input_sequence: Operand,
    position: Operand | None = None,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """SequenceErase: a sequence without one tensor (default: the last).

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "SequenceErase", "", (input_sequence, position), {**unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def sequence_insert(
    input_sequence: Operand,
    tensor: Operand,
    position: Operand | None = None,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """SequenceInsert: a sequence with a tensor inserted (default: appended).

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "SequenceInsert", "", (input_sequence, tensor, position), {**unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def sequence_length(
    input_sequence: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """SequenceLength: the number of tensors in a sequence.

    Attributes: none. Returns the output value.
    """
    return call_builder("SequenceLength", "", (input_sequence,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def sequence_map(
    *inputs: Operand | Sequence[Operand],
    body: Any,
    num_inputs: int,
    out_dtypes: Any,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """SequenceMap: run a body program once per element of the sequence inputs (tensor inputs as they are; inputs past num_inputs are outer values) and give each body output as a sequence.

    Attributes: body=REQUIRED, num_inputs=REQUIRED, out_dtypes=REQUIRED. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "SequenceMap",
        "",
        inputs,
        {"body": body, "num_inputs": num_inputs, "out_dtypes": out_dtypes, **unknown},
        variadic=True,
        name=name,
        num_outputs=num_outputs,
    )


def shape(
    data: Operand,
    /,
    *,
    start: int = 0,
    end: int | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Shape: the input's shape as int64, optionally the dims [start, end).

    Attributes: start=0, end=None. Returns the output value.
    """
    return call_builder(
        "Shape", "", (data,), {"start": start, "end": end, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def shrink(
    input: Operand,
    /,
    *,
    bias: float = 0.0,
    lambd: float = 0.5,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Shrink: x + bias below -lambd, x - bias above lambd, else 0.

    Attributes: bias=0.0, lambd=0.5. Returns the output value.
    """
    return call_builder(
        "Shrink", "", (input,), {"bias": bias, "lambd": lambd, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def sigmoid(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Sigmoid: 1 / (1 + e ** -x), overflow-free.

    Attributes: none. Returns the output value.
    """
    return call_builder("Sigmoid", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def sign(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Sign: -1, 0 or 1 by the sign of x (any numeric type).

    Attributes: none. Returns the output value.
    """
    return call_builder("Sign", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def sin(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Sin: sine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Sin", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def sinh(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Sinh: hyperbolic sine.

    Attributes: none. Returns the output value.
    """
    return call_builder("Sinh", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def size(data: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Size: the number of elements of the input, as an int64 scalar.

    Attributes: none. Returns the output value.
    """
    return call_builder("Size", "", (data,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def slice(
    data: Operand,
    starts: Operand,
    ends: Operand,
    axes: Operand | None = None,
    steps: Operand | None = None,
    /,
    *,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Slice: strided slice by starts, ends, axes and steps inputs, clamped per the ONNX spec.

    Attributes: none. Returns the output value.
    """
    return call_builder(
        "Slice", "", (data, starts, ends, axes, steps), {**unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def softmax(
    input: Operand, /, *, axis: int = -1, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Softmax: exp(x) / sum(exp(x)) along one axis (opset 13).

    Attributes: axis=-1. Returns the output value.
    """
    return call_builder("Softmax", "", (input,), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def softmax_cross_entropy_loss(
    scores: Operand,
    labels: Operand,
    weights: Operand | None = None,
    /,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """SoftmaxCrossEntropyLoss: the NLL loss of log_softmax(scores) over the classes, and optionally the log-probabilities.

    Attributes: ignore_index=None, reduction='mean'. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "SoftmaxCrossEntropyLoss",
        "",
        (scores, labels, weights),
        {"ignore_index": ignore_index, "reduction": reduction, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def softplus(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Softplus: log(1 + e^x).

    Attributes: none. Returns the output value.
    """
    return call_builder("Softplus", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def softsign(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Softsign: x / (1 + |x|).

    Attributes: none. Returns the output value.
    """
    return call_builder("Softsign", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def space_to_depth(
    input: Operand,
    /,
    *,
    blocksize: int,
    mode: str = "DCR",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """SpaceToDepth: move spatial blocks into channels.

    Attributes: blocksize=REQUIRED, mode='DCR'. Returns the output value.
    """
    return call_builder(
        "SpaceToDepth",
        "",
        (input,),
        {"blocksize": blocksize, "mode": mode, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def split(
    input: Operand,
    split: Operand | None = None,
    /,
    *,
    axis: int = 0,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Split: split along an axis by the split input, num_outputs, or evenly.

    Attributes: axis=0, num_outputs=None. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Split", "", (input, split), {"axis": axis, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def split_to_sequence(
    input: Operand,
    split: Operand | None = None,
    /,
    *,
    axis: int = 0,
    keepdims: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """SplitToSequence: a tensor split along an axis into a sequence.

    Attributes: axis=0, keepdims=1. Returns the output value.
    """
    return call_builder(
        "SplitToSequence",
        "",
        (input, split),
        {"axis": axis, "keepdims": keepdims, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def sqrt(x: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Sqrt: square root.

    Attributes: none. Returns the output value.
    """
    return call_builder("Sqrt", "", (x,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def squeeze(
    data: Operand, axes: Operand | None = None, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Squeeze: drop size-1 axes (all of them without the axes input).

    Attributes: none. Returns the output value.
    """
    return call_builder("Squeeze", "", (data, axes), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def squeeze_excite(
    x0: Operand,
    x1: Operand,
    x2: Operand,
    x3: Operand,
    x4: Operand,
    /,
    *,
    activation1: str = "",
    activation1_params: Sequence[float] = (),
    activation2: str = "",
    activation2_params: Sequence[float] = (),
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """SqueezeExcite: a squeeze-and-excitation block: x * act2(Conv1x1(act1(Conv1x1(GlobalAveragePool(x), W1, B1)), W2, B2)).

    Attributes: activation1='', activation1_params=(), activation2='', activation2_params=(). Returns the output value.
    """
    return call_builder(
        "SqueezeExcite",
        "aioge",
        (x0, x1, x2, x3, x4),
        {
            "activation1": activation1,
            "activation1_params": activation1_params,
            "activation2": activation2,
            "activation2_params": activation2_params,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def stft(
    signal: Operand,
    frame_step: Operand,
    window: Operand | None = None,
    frame_length: Operand | None = None,
    /,
    *,
    onesided: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """STFT: windowed DFTs of a signal's frames.

    Attributes: onesided=1. Returns the output value.
    """
    return call_builder(
        "STFT",
        "",
        (signal, frame_step, window, frame_length),
        {"onesided": onesided, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def string_concat(
    x: Operand, y: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """StringConcat: x + y for strings, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("StringConcat", "", (x, y), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def string_normalizer(
    x: Operand,
    /,
    *,
    case_change_action: str = "NONE",
    is_case_sensitive: int = 0,
    locale: str | None = None,
    stopwords: Sequence[str] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """StringNormalizer: drop stopwords and change case.

    Attributes: case_change_action='NONE', is_case_sensitive=0, locale=None, stopwords=None. Returns the output value.
    """
    return call_builder(
        "StringNormalizer",
        "",
        (x,),
        {
            "case_change_action": case_change_action,
            "is_case_sensitive": is_case_sensitive,
            "locale": locale,
            "stopwords": stopwords,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def string_split(
    x: Operand,
    /,
    *,
    delimiter: str | None = None,
    maxsplit: int | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """StringSplit: split strings into padded pieces and their counts.

    Attributes: delimiter=None, maxsplit=None. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "StringSplit",
        "",
        (x,),
        {"delimiter": delimiter, "maxsplit": maxsplit, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def sub(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Sub: a - b with numpy broadcasting.

    Attributes: none. Returns the output value.
    """
    return call_builder("Sub", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def sum(*inputs: Operand | Sequence[Operand], name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Sum: elementwise sum of all inputs.

    Attributes: none. Returns the output value.
    """
    return call_builder("Sum", "", inputs, {**unknown}, variadic=True, name=name, num_outputs=num_outputs)


def swi_glu(
    a: Operand, b: Operand, /, *, alpha: float = 1.0, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """SwiGLU: swish(A, alpha) * B for A and B of one shape.

    Attributes: alpha=1.0. Returns the output value.
    """
    return call_builder("SwiGLU", "", (a, b), {"alpha": alpha, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def swish(
    x: Operand, /, *, alpha: float = 1.0, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Swish: x * sigmoid(alpha * x).

    Attributes: alpha=1.0. Returns the output value.
    """
    return call_builder("Swish", "", (x,), {"alpha": alpha, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def tan(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Tan: tangent.

    Attributes: none. Returns the output value.
    """
    return call_builder("Tan", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def tanh(input: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Tanh: hyperbolic tangent.

    Attributes: none. Returns the output value.
    """
    return call_builder("Tanh", "", (input,), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def tensor_scatter(
    past_cache: Operand,
    update: Operand,
    write_indices: Operand | None = None,
    /,
    *,
    mode: str = "linear",
    axis: int = -2,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """TensorScatter: a cache with updates written from per-batch indices.

    Attributes: mode='linear', axis=-2. Returns the output value.
    """
    return call_builder(
        "TensorScatter",
        "",
        (past_cache, update, write_indices),
        {"mode": mode, "axis": axis, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def tf_idf_vectorizer(
    x: Operand,
    /,
    *,
    max_gram_length: int,
    max_skip_count: int,
    min_gram_length: int,
    mode: str,
    ngram_counts: Sequence[int],
    ngram_indexes: Sequence[int],
    pool_int64s: Sequence[int] | None = None,
    pool_strings: Sequence[str] | None = None,
    weights: Sequence[float] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """TfIdfVectorizer: n-gram (with skips) counts against a pool, weighted TF, IDF or TF-IDF.

    Attributes: max_gram_length=REQUIRED, max_skip_count=REQUIRED, min_gram_length=REQUIRED, mode=REQUIRED, ngram_counts=REQUIRED, ngram_indexes=REQUIRED, pool_int64s=None, pool_strings=None, weights=None. Returns the output value.
    """
    return call_builder(
        "TfIdfVectorizer",
        "",
        (x,),
        {
            "max_gram_length": max_gram_length,
            "max_skip_count": max_skip_count,
            "min_gram_length": min_gram_length,
            "mode": mode,
            "ngram_counts": ngram_counts,
            "ngram_indexes": ngram_indexes,
            "pool_int64s": pool_int64s,
            "pool_strings": pool_strings,
            "weights": weights,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def thresholded_relu(
    x: Operand, /, *, alpha: float = 1.0, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """ThresholdedRelu: x where x > alpha, else 0.

    Attributes: alpha=1.0. Returns the output value.
    """
    return call_builder(
        "ThresholdedRelu", "", (x,), {"alpha": alpha, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def tile(
    input: Operand, repeats: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Tile: the input repeated along each axis.

    Attributes: none. Returns the output value.
    """
    return call_builder("Tile", "", (input, repeats), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def top_k(
    x: Operand,
    k: Operand,
    /,
    *,
    axis: int = -1,
    largest: int = 1,
    sorted: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """TopK: the K largest (or smallest) values along axis and their indices.

    Attributes: axis=-1, largest=1, sorted=1. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "TopK",
        "",
        (x, k),
        {"axis": axis, "largest": largest, "sorted": sorted, **unknown},
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def transpose(
    data: Operand,
    /,
    *,
    perm: Sequence[int] | None = None,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Transpose: permute the axes (default: reverse them).

    Attributes: perm=None. Returns the output value.
    """
    return call_builder("Transpose", "", (data,), {"perm": perm, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def tree_ensemble(
    x: Operand,
    /,
    *,
    aggregate_function: int = 1,
    leaf_targetids: Sequence[int],
    leaf_weights: np.ndarray,
    membership_values: np.ndarray | None = None,
    n_targets: int,
    nodes_falseleafs: Sequence[int],
    nodes_falsenodeids: Sequence[int],
    nodes_featureids: Sequence[int],
    nodes_hitrates: np.ndarray | None = None,
    nodes_missing_value_tracks_true: Sequence[int] | None = None,
    nodes_modes: np.ndarray,
    nodes_splits: np.ndarray,
    nodes_trueleafs: Sequence[int],
    nodes_truenodeids: Sequence[int],
    post_transform: int = 0,
    tree_roots: Sequence[int],
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """TreeEnsemble: evaluate a tree ensemble (branch modes incl. set membership) and aggregate the leaves.

    Attributes: aggregate_function=1, leaf_targetids=REQUIRED, leaf_weights=REQUIRED, membership_values=None, n_targets=REQUIRED, nodes_falseleafs=REQUIRED, nodes_falsenodeids=REQUIRED, nodes_featureids=REQUIRED, nodes_hitrates=None, nodes_missing_value_tracks_true=None, nodes_modes=REQUIRED, nodes_splits=REQUIRED, nodes_trueleafs=REQUIRED, nodes_truenodeids=REQUIRED, post_transform=0, tree_roots=REQUIRED. Returns the output value.
    """
    return call_builder(
        "TreeEnsemble",
        "ai.onnx.ml",
        (x,),
        {
            "aggregate_function": aggregate_function,
            "leaf_targetids": leaf_targetids,
            "leaf_weights": leaf_weights,
            "membership_values": membership_values,
            "n_targets": n_targets,
            "nodes_falseleafs": nodes_falseleafs,
            "nodes_falsenodeids": nodes_falsenodeids,
            "nodes_featureids": nodes_featureids,
            "nodes_hitrates": nodes_hitrates,
            "nodes_missing_value_tracks_true": nodes_missing_value_tracks_true,
            "nodes_modes": nodes_modes,
            "nodes_splits": nodes_splits,
            "nodes_trueleafs": nodes_trueleafs,
            "nodes_truenodeids": nodes_truenodeids,
            "post_transform": post_transform,
            "tree_roots": tree_roots,
            **unknown,
        },
        variadic=False,
        name=name,
        num_outputs=num_outputs,
    )


def trilu(
    input: Operand,
    k: Operand | None = None,
    /,
    *,
    upper: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Trilu: upper or lower triangle of the last two dimensions from diagonal k.

    Attributes: upper=1. Returns the output value.
    """
    return call_builder("Trilu", "", (input, k), {"upper": upper, **unknown}, variadic=False, name=name, num_outputs=num_outputs)


def unique(
    x: Operand,
    /,
    *,
    axis: int | None = None,
    sorted: int = 1,
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Any:
    """Unique: unique values or slices, first indices, inverse indices, counts.

    Attributes: axis=None, sorted=1. Returns the output value, or a tuple of them when there are several.
    """
    return call_builder(
        "Unique", "", (x,), {"axis": axis, "sorted": sorted, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def unsqueeze(
    data: Operand, axes: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Unsqueeze: insert size-1 axes at the given output positions.

    Attributes: none. Returns the output value.
    """
    return call_builder("Unsqueeze", "", (data, axes), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def upsample(
    x: Operand,
    scales: Operand,
    /,
    *,
    mode: str = "nearest",
    name: str | None = None,
    num_outputs: int | None = None,
    **unknown: Never,
) -> Value:
    """Upsample: upsample by scales (nearest or linear, asymmetric coordinates).

    Attributes: mode='nearest'. Returns the output value.
    """
    return call_builder(
        "Upsample", "", (x, scales), {"mode": mode, **unknown}, variadic=False, name=name, num_outputs=num_outputs
    )


def where(
    condition: Operand, x: Operand, y: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never
) -> Value:
    """Where: condition ? x : y with broadcasting.

    Attributes: none. Returns the output value.
    """
    return call_builder("Where", "", (condition, x, y), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


def xor(a: Operand, b: Operand, /, *, name: str | None = None, num_outputs: int | None = None, **unknown: Never) -> Value:
    """Xor: a xor b, broadcast.

    Attributes: none. Returns the output value.
    """
    return call_builder("Xor", "", (a, b), {**unknown}, variadic=False, name=name, num_outputs=num_outputs)


conv = conv2d
