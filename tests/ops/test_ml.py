"""ai.onnx.ml ops (aioge.ops.ml) against onnxruntime (TreeEnsemble, newer than onnxruntime's
ml opsets, against onnx.reference)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import rand
from tests.ops.onnx_reference import check_against

ML = "ai.onnx.ml"


def test_binarizer(rng):
    check_against("Binarizer", [rand(rng, 3, 4, low=-2, high=2)], {"threshold": 0.5}, opset=1, domain=ML)


@pytest.mark.parametrize(("shape", "idx"), [((3, 4), [0, 3]), ((2, 3, 5), [4, 4, 1]), ((5,), [2])])
def test_array_feature_extractor(rng, shape, idx):
    check_against("ArrayFeatureExtractor", [rand(rng, *shape), np.array(idx, np.int64)], opset=1, domain=ML)


@pytest.mark.parametrize(
    ("x", "attrs"),
    [
        (np.array(["a", "b", "z", "c"], dtype=object), {"keys_strings": ["a", "b", "c"], "values_int64s": [7, 8, 9]}),
        (np.array(["a", "q"], dtype=object), {"keys_strings": ["a"], "values_int64s": [3], "default_int64": 42}),
        (np.array([1, 5, 2], np.int64), {"keys_int64s": [2, 1], "values_floats": [0.5, 1.5], "default_float": 9.0}),
        (np.array([1, 5, 2], np.int64), {"keys_int64s": [2, 1], "values_strings": ["two", "one"], "default_string": "?"}),
        (
            np.array(["x", "y"], dtype=object),
            {
                "keys_tensor": np.array(["y"], dtype=object),
                "values_tensor": np.array([5], np.int16),
                "default_tensor": np.array([-1], np.int16),
            },
        ),
    ],
)
def test_label_encoder(x, attrs):
    check_against("LabelEncoder", [x], attrs, opset=4, domain=ML)


_TREE = {
    "n_targets": 2,
    "tree_roots": [0],
    "nodes_featureids": [0, 1, 0],
    "nodes_modes": np.array([0, 3, 6], np.uint8),
    "nodes_splits": np.array([3.0, 1.5, np.nan]),
    "nodes_truenodeids": [1, 0, 2],
    "nodes_trueleafs": [0, 1, 1],
    "nodes_falsenodeids": [2, 1, 3],
    "nodes_falseleafs": [0, 1, 1],
    "leaf_targetids": [0, 1, 1, 0],
    "leaf_weights": np.array([1.0, 10.0, 100.0, 1000.0]),
    "membership_values": np.array([4.0, 6.0, np.nan]),
}


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble(rng, aggregate):
    x = np.array([[1.0, 2.0], [2.0, 1.0], [4.0, 0.0], [5.0, 9.0], [6.0, 1.0], [np.nan, 0.0]])
    attrs = dict(_TREE, aggregate_function=aggregate)
    check_against("TreeEnsemble", [x], attrs, opset=5, domain=ML, runtime="reference")
