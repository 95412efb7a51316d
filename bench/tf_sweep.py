"""Every ``keras.applications`` model and a set of Keras text and layer models, random
weights, through the three formats TF users hold (SavedModel directory, ``.keras`` file,
frozen ``.pb``): does ``aioge.load_tf`` load it, and does it match TensorFlow?

    PYTHONPATH=src .venv/bin/python bench/tf_sweep.py [--only ResNet50,lstm] [--out sweep.jsonl] [--formats sm,keras,pb]

Each model runs in a subprocess of its own (memory, and a crash is one row); a row per model
and format is printed and appended to ``--out`` as JSON. Matching is rtol 1e-4 / atol 1e-5 on
outputs scaled to a largest magnitude of 1, at batch 1 and 2 from one loaded graph (symbolic
batch). The frozen ``.pb`` is frozen as TensorFlow's ``convert_variables_to_constants_v2``
does by default (TF1 control flow for loops: Keras RNNs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Callable

import numpy as np

# The smallest input each application accepts (32 for the rest).
_SIZES = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71, "NASNetLarge": 32, "NASNetMobile": 32}


def _apps() -> list[str]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras  # type: ignore[import-untyped]

    return sorted(n for n in dir(keras.applications) if n[0].isupper())


def _layer_models() -> dict[str, Callable[[], tuple[Any, np.ndarray]]]:
    import keras

    L = keras.layers
    rng = np.random.default_rng(2)

    def tokens(t: int = 12) -> np.ndarray:
        x = rng.integers(1, 50, (2, t)).astype(np.int32)
        x[1, 8:] = 0
        return x

    def text(body: Callable[[Any], Any], mask: bool = False) -> Callable[[], tuple[Any, np.ndarray]]:
        def make() -> tuple[Any, np.ndarray]:
            inp = keras.Input((12,), dtype="int32")
            h = body(L.Embedding(50, 16, mask_zero=mask)(inp))
            return keras.Model(inp, L.Dense(3)(h)), tokens()

        return make

    def image(body: Callable[[Any], Any], size: int = 16, channels: int = 3) -> Callable[[], tuple[Any, np.ndarray]]:
        def make() -> tuple[Any, np.ndarray]:
            inp = keras.Input((size, size, channels))
            out = body(inp)
            return keras.Model(inp, out), rng.standard_normal((2, size, size, channels)).astype(np.float32)

        return make

    def mha_masked() -> tuple[Any, np.ndarray]:
        inp = keras.Input((12,), dtype="int32")
        h = L.Embedding(50, 16)(inp)
        mask = keras.ops.cast(keras.ops.not_equal(inp, 0), "bool")
        att = L.MultiHeadAttention(num_heads=2, key_dim=8)(h, h, attention_mask=mask[:, None, :] & mask[:, :, None])
        h = L.LayerNormalization()(h + att)
        return keras.Model(inp, L.Dense(3)(L.GlobalAveragePooling1D()(h))), tokens()

    def attention() -> tuple[Any, np.ndarray]:
        inp = keras.Input((12,), dtype="int32")
        h = L.Embedding(50, 16, mask_zero=True)(inp)
        a = L.Attention(use_scale=True)([h, h])
        b = L.AdditiveAttention()([h, h])
        return keras.Model(inp, L.Dense(3)(L.GlobalAveragePooling1D()(L.Concatenate()([a, b])))), tokens()

    def normalization() -> tuple[Any, np.ndarray]:
        norm = L.Normalization(mean=[0.5, -0.2, 1.0], variance=[2.0, 0.5, 1.5])
        inp = keras.Input((16, 16, 3))
        h = L.Rescaling(1 / 127.5, offset=-1)(inp)
        h = norm(L.Resizing(12, 20)(h))
        h = L.Resizing(24, 24, interpolation="nearest")(h)
        h = L.Resizing(10, 10, interpolation="bilinear", crop_to_aspect_ratio=True)(h)
        h = L.CenterCrop(8, 8)(h)
        return keras.Model(inp, L.Conv2D(4, 3)(h)), (rng.random((2, 16, 16, 3)) * 255).astype(np.float32)

    def tensor(shape: tuple[int, ...], body: Callable[[Any], Any]) -> Callable[[], tuple[Any, np.ndarray]]:
        def make() -> tuple[Any, np.ndarray]:
            inp = keras.Input(shape)
            return keras.Model(inp, body(inp)), rng.standard_normal((2, *shape)).astype(np.float32)

        return make

    def dot_concat() -> tuple[Any, np.ndarray]:
        inp = keras.Input((12,), dtype="int32")
        h = L.Embedding(50, 16)(inp)
        a, b = L.Dense(8)(h), L.Dense(8)(h)
        s = L.Softmax(axis=1)(L.Dot(axes=(2, 2))([a, b]))
        h = L.Concatenate(axis=-1)([L.Dot(axes=(2, 1))([s, b]), a])
        return keras.Model(inp, L.Dense(3)(L.GlobalMaxPooling1D()(h))), tokens()

    seq = (12, 6)
    vol = (6, 8, 8, 2)
    more: dict[str, Callable[[], tuple[Any, np.ndarray]]] = {
        # layers beyond the ones above that users commonly have
        "conv1d_transpose": tensor(seq, lambda x: L.Conv1DTranspose(4, 3, strides=2, padding="same")(L.Conv1DTranspose(5, 3)(x))),
        "separable_conv1d": tensor(seq, lambda x: L.SeparableConv1D(8, 3, depth_multiplier=2, padding="same")(x)),
        "depthwise_conv1d": tensor(seq, lambda x: L.DepthwiseConv1D(3, depth_multiplier=2, dilation_rate=2)(x)),
        "pool_pad_crop_1d": tensor(
            seq,
            lambda x: L.Concatenate()(
                [L.Cropping1D((2, 1))(L.ZeroPadding1D((1, 2))(L.UpSampling1D(2)(x))), L.UpSampling1D(2)(x)]
            ),
        ),
        "pooling_1d": tensor(
            seq,
            lambda x: L.Concatenate()(
                [L.GlobalMaxPooling1D()(x), L.GlobalAveragePooling1D()(L.AveragePooling1D(2, padding="same")(x))]
            ),
        ),
        "conv3d_pooling": tensor(
            vol,
            lambda x: L.Concatenate()(
                [
                    L.GlobalAveragePooling3D()(L.MaxPooling3D(2)(L.Conv3D(4, 3, padding="same", activation="relu")(x))),
                    L.GlobalMaxPooling3D()(L.AveragePooling3D(2, strides=1)(L.Conv3D(3, (1, 3, 3), strides=(1, 2, 2))(x))),
                ]
            ),
        ),
        "conv3d_transpose": tensor(vol, lambda x: L.Conv3DTranspose(3, 3, strides=2, padding="same")(x)),
        "upsample_pad_crop_3d": tensor(
            vol, lambda x: L.Cropping3D(((1, 0), (2, 1), (0, 3)))(L.ZeroPadding3D((1, 2, 1))(L.UpSampling3D((1, 2, 2))(x)))
        ),
        "dilated_conv2d": image(
            lambda x: L.DepthwiseConv2D(3, dilation_rate=(2, 3), padding="same")(
                L.Conv2D(4, 3, dilation_rate=2, padding="valid")(x)
            )
        ),
        "separable_conv_dilated": image(lambda x: L.SeparableConv2D(4, 3, dilation_rate=2, padding="same")(x)),
        "bidirectional_gru_seq": text(lambda h: L.Flatten()(L.Bidirectional(L.GRU(4, return_sequences=True))(h))),
        "simple_rnn_stacked": text(lambda h: L.SimpleRNN(4)(L.SimpleRNN(6, return_sequences=True, go_backwards=True)(h))),
        "norms": text(
            lambda h: L.Flatten()(
                L.UnitNormalization()(L.GroupNormalization(groups=4)(L.LayerNormalization(axis=-1, center=False)(h)))
            )
        ),
        "embedding_masked_pool": text(lambda h: L.GlobalAveragePooling1D()(h), mask=True),
        "text_cnn_classifier": text(
            lambda h: L.Dropout(0.3)(L.GlobalMaxPooling1D()(L.Conv1D(8, 5, activation="relu", padding="same")(h)))
        ),
        "einsum_dense": text(
            lambda h: L.Flatten()(
                L.EinsumDense("abc,cd->abd", output_shape=(12, 5), bias_axes="d")(
                    L.EinsumDense("abc,cde->abde", output_shape=(12, 2, 4), bias_axes="de")(h)[:, :, 1]
                )
            )
        ),
        "dot_concat": dot_concat,
        "activations": tensor(
            seq,
            lambda x: L.Concatenate()(
                [
                    L.PReLU()(x),
                    L.ELU(0.7)(x),
                    L.LeakyReLU(0.2)(x),
                    L.Softmax(axis=1)(x),
                    L.ReLU(max_value=1.5, threshold=0.1, negative_slope=0.05)(x),
                    L.Activation("selu")(x),
                    L.Activation("softsign")(x),
                    L.Activation("swish")(x),
                ]
            ),
        ),
        "prelu_shared_image": image(lambda x: L.PReLU(shared_axes=[1, 2])(L.Conv2D(4, 3)(x))),
        "time_distributed_conv": tensor(
            (4, 8, 8, 3), lambda x: L.TimeDistributed(L.GlobalAveragePooling2D())(L.TimeDistributed(L.Conv2D(4, 3))(x))
        ),
        "multiply_subtract_average": tensor(
            seq,
            lambda x: L.Average()([L.Multiply()([x, L.Dense(6)(x)]), L.Subtract()([x, L.Dense(6)(x)]), L.Maximum()([x, -x])]),
        ),
        "reshape_permute_repeat": tensor(
            seq, lambda x: L.Flatten()(L.RepeatVector(2)(L.Flatten()(L.Permute((2, 1))(L.Reshape((6, 12))(x)))))
        ),
    }

    def lstm_state() -> tuple[Any, np.ndarray]:
        inp = keras.Input((12,), dtype="int32")
        h = L.Masking(0.0)(L.Embedding(50, 16)(inp))
        seq, state_h, state_c = L.LSTM(6, return_sequences=True, return_state=True, go_backwards=True)(h)
        out = L.GRU(5)(seq, initial_state=None)
        return keras.Model(inp, L.Concatenate()([out, state_h, state_c])), tokens()

    def mha_causal() -> tuple[Any, np.ndarray]:
        inp = keras.Input((12,), dtype="int32")
        h = L.Embedding(50, 16)(inp)
        att = L.MultiHeadAttention(num_heads=2, key_dim=4, value_dim=6)(h, h[:, :6], use_causal_mask=False)
        self_att = L.MultiHeadAttention(num_heads=4, key_dim=4)(h, h, use_causal_mask=True)
        a = L.Attention(score_mode="concat")([h, h], use_causal_mask=True)
        return keras.Model(inp, L.Flatten()(L.Concatenate()([att, self_att, a]))), tokens()

    more |= {
        "lstm_return_state_masking": lstm_state,
        "mha_cross_causal": mha_causal,
        "conv_lstm2d": tensor((3, 8, 8, 2), lambda x: L.ConvLSTM2D(3, 3, padding="same", return_sequences=True)(x)),
        "norms_rms_batch_seq": tensor(
            seq,
            lambda x: L.Concatenate()(
                [
                    L.LayerNormalization(rms_scaling=True)(x),
                    L.BatchNormalization()(x),
                    L.LayerNormalization(axis=[1, 2])(x),
                ]
            ),
        ),
        "inference_noop_layers": image(
            lambda x: L.ActivityRegularization(0.1)(
                L.SpatialDropout2D(0.3)(
                    L.GaussianDropout(0.2)(L.GaussianNoise(0.5)(L.AlphaDropout(0.1)(L.RandomFlip()(L.RandomRotation(0.2)(x)))))
                )
            )
        ),
        "resizing_modes": image(
            lambda x: L.Concatenate()(
                [
                    L.Resizing(9, 11, interpolation="bicubic")(x),
                    L.Resizing(9, 11, interpolation="area")(x),
                    L.Resizing(9, 11, interpolation="lanczos3")(x),
                    L.Resizing(9, 11, pad_to_aspect_ratio=True)(x),
                ]
            )
        ),
        "grouped_strided_convs": tensor(
            (12, 8),
            lambda x: L.GlobalMaxPooling1D()(
                L.Conv1D(4, 3, strides=2, groups=2)(L.Conv1D(8, 3, groups=4, padding="same", activation="gelu")(x))
            ),
        ),
        "pooling_same_strides": image(
            lambda x: L.Concatenate()(
                [L.AveragePooling2D(3, strides=2, padding="same")(x), L.MaxPooling2D((3, 2), strides=2, padding="same")(x)]
            )
        ),
        "category_encoding_discretization": tensor(
            (6,),
            lambda x: L.Concatenate()(
                [
                    L.CategoryEncoding(8, output_mode="multi_hot")(L.Discretization(bin_boundaries=[-1.0, 0.0, 0.5, 1.0])(x)),
                    L.CategoryEncoding(8, output_mode="count")(L.Discretization(bin_boundaries=[-0.5, 0.2])(x)),
                ]
            ),
        ),
    }
    return more | {
        "lstm": text(lambda h: L.LSTM(8)(h)),
        "lstm_masked": text(lambda h: L.LSTM(8)(h), mask=True),
        "gru_reset_after": text(lambda h: L.GlobalAveragePooling1D()(L.GRU(8, return_sequences=True)(h))),
        "gru_reset_before": text(lambda h: L.GRU(8, reset_after=False)(h)),
        "gru_masked": text(lambda h: L.GRU(8, go_backwards=True)(h), mask=True),
        "simple_rnn": text(lambda h: L.SimpleRNN(8, return_sequences=True)(h)[:, -1]),
        "bidirectional": text(lambda h: L.GlobalMaxPooling1D()(L.Bidirectional(L.LSTM(8, return_sequences=True))(h))),
        "bidirectional_masked": text(lambda h: L.Bidirectional(L.GRU(8), merge_mode="sum")(h), mask=True),
        "stacked_lstm_state": text(lambda h: L.LSTM(6)(L.LSTM(8, return_sequences=True, unroll=True)(h))),
        "conv1d": text(
            lambda h: L.GlobalAveragePooling1D()(
                L.MaxPooling1D(2)(L.Conv1D(8, 3, padding="causal", dilation_rate=2)(L.Conv1D(8, 3, activation="relu")(h)))
            )
        ),
        "time_distributed": text(lambda h: L.Flatten()(L.TimeDistributed(L.Dense(4, activation="tanh"))(h))),
        "mha_layernorm": mha_masked,
        "attention": attention,
        "conv2d_transpose": image(
            lambda x: L.Conv2DTranspose(3, 3, strides=2, padding="same")(L.Conv2DTranspose(4, 3, strides=2, padding="valid")(x))
        ),
        "separable_conv": image(lambda x: L.SeparableConv2D(8, 3, depth_multiplier=2, padding="same", activation="relu")(x)),
        "upsampling": image(
            lambda x: L.Concatenate()(
                [L.UpSampling2D(2)(x), L.UpSampling2D(2, interpolation="bilinear")(x), L.Conv2DTranspose(2, 2, strides=2)(x)]
            )
        ),
        "preprocessing": normalization,
        "crop_pad_concat": image(
            lambda x: L.Concatenate()(
                [L.ZeroPadding2D(((1, 2), (0, 3)))(L.Cropping2D(((2, 1), (3, 0)))(x)), L.Dropout(0.5)(x)[:, :, :, :2]]
            )
        ),
        "batchnorm_dense": image(
            lambda x: L.Dense(5)(
                L.Flatten()(L.BatchNormalization()(L.MaxPooling2D(2)(L.BatchNormalization(axis=-1)(L.Conv2D(4, 3)(x)))))
            )
        ),
    }


def _randomise_norms(model: Any) -> Any:
    import keras

    rng = np.random.default_rng(1)
    for layer in model._flatten_layers() if hasattr(model, "_flatten_layers") else model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.set_weights(
                [
                    0.5 + rng.random(w.shape) if "variance" in w.path or "gamma" in w.path else 0.2 * rng.standard_normal(w.shape)
                    for w in layer.weights
                ]
            )
    return model


def _scaled_err(got: np.ndarray, ref: np.ndarray) -> tuple[bool, float]:
    scale = float(np.abs(ref).max()) or 1.0
    ok = got.shape == ref.shape and bool(np.allclose(got / scale, ref / scale, rtol=1e-4, atol=1e-5))
    err = float(np.abs(got - ref).max() / scale) if got.shape == ref.shape else float("inf")
    return ok, err


def one(name: str, formats: list[str]) -> list[dict[str, Any]]:
    import anyio
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    import aioge

    keras.utils.set_random_seed(0)
    t0 = time.perf_counter()
    layers = _layer_models()
    if name in layers:
        model, x = layers[name]()
    else:
        size = _SIZES.get(name, 32)
        model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classifier_activation=None)
        x = np.random.default_rng(7).standard_normal((2, size, size, 3)).astype(np.float32)
    _randomise_norms(model)
    ref = np.asarray(model(x, training=False))
    rows = []
    root = tempfile.mkdtemp(prefix=f"tfsweep_{name}_")
    paths = {"sm": os.path.join(root, "saved"), "keras": os.path.join(root, "m.keras"), "pb": os.path.join(root, "m.pb")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "sm" in formats:
            model.export(paths["sm"], verbose=False)
        if "keras" in formats:
            model.save(paths["keras"])
        if "pb" in formats:
            spec = tf.TensorSpec((None,) + x.shape[1:], tf.as_dtype(x.dtype), name="x")
            fn = tf.function(lambda t: model(t, training=False)).get_concrete_function(spec)
            frozen = convert_variables_to_constants_v2(fn)
            with open(paths["pb"], "wb") as f:
                f.write(frozen.graph.as_graph_def().SerializeToString())
    setup = time.perf_counter() - t0

    async def run(graph: Any) -> list[np.ndarray]:
        async with aioge.Session(options={"aioge.tune_mode": "heuristic"}) as session:
            return [list((await session.run(graph, {graph.inputs[0].name: x[:b]})).values())[0] for b in (1, 2)]

    for fmt in formats:
        row: dict[str, Any] = {"model": name, "format": fmt, "setup_s": round(setup, 1)}
        t1 = time.perf_counter()
        try:
            graph = aioge.load_tf(paths[fmt])
            row["loads"] = True
            outs = anyio.run(run, graph)
            checks = [_scaled_err(got, ref[: len(got)]) for got in outs]
            row["matches"] = all(ok for ok, _ in checks)
            row["max_err"] = max(e for _, e in checks)
        except Exception as exc:  # noqa: BLE001 - a sweep records every failure
            row.setdefault("loads", False)
            row["matches"] = False
            row["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
            if os.environ.get("TF_SWEEP_TRACE"):
                traceback.print_exc()
        row["s"] = round(time.perf_counter() - t1, 1)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="")
    p.add_argument("--out", default="")
    p.add_argument("--formats", default="sm,keras,pb")
    p.add_argument("--one", default="")
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args()
    formats = args.formats.split(",")
    if args.one:
        for row in one(args.one, formats):
            print("ROW " + json.dumps(row), flush=True)
        return
    names = args.only.split(",") if args.only else _apps() + list(_layer_models())
    for name in names:
        try:
            done = subprocess.run(
                [sys.executable, "-P", __file__, "--one", name, "--formats", args.formats],
                capture_output=True,
                text=True,
                timeout=args.timeout,
            )
            rows = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("ROW ")]
            if not rows:
                rows = [{"model": name, "format": "all", "loads": False, "matches": False, "error": done.stderr[-800:]}]
        except subprocess.TimeoutExpired:
            rows = [{"model": name, "format": "all", "loads": False, "matches": False, "error": "timeout"}]
        for row in rows:
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
