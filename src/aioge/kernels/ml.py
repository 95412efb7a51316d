"""Kernels of the ai.onnx.ml domain: Binarizer, ArrayFeatureExtractor, LabelEncoder and
TreeEnsemble.

LabelEncoder looks keys up with one ``searchsorted`` over the sorted keys. TreeEnsemble
walks every (sample, tree) pair down its tree at once, one vectorised step per tree level,
and aggregates the leaves' weights with unbuffered ufunc ``at`` per target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from aioge.kernels.contract import RunFn

__all__ = ["array_feature_extractor", "binarizer", "build_label_encoder", "build_tree_ensemble", "label_encoder_table"]


def binarizer(x: np.ndarray, threshold: float = 0.0) -> np.ndarray:
    """1 where x > threshold, 0 elsewhere, in x's dtype."""
    return (x > np.asarray(threshold, x.dtype)).astype(x.dtype)


def array_feature_extractor(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The last axis of x at ``indices`` (flattened); a 1-D x gives one row, as onnxruntime does.

    Raises:
        IndexError: an index past the last axis.
    """
    idx = indices.astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[-1]):
        raise IndexError(f"indices {idx.tolist()} are outside the last axis of size {x.shape[-1]}")
    out = np.take(x, idx, axis=-1)
    return out.reshape(1, -1) if x.ndim == 1 else out


_VALUE_KINDS = {"values_floats": "float32", "values_int64s": "int64", "values_strings": "str"}
_DEFAULTS = {"values_floats": "default_float", "values_int64s": "default_int64", "values_strings": "default_string"}


def label_encoder_table(attrs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, Any, str]:
    """(keys, values, default, output dtype name) of a LabelEncoder's attributes.

    Raises:
        ValueError: no keys or values, or key and value counts that differ.
    """
    keys = next(
        (attrs[k] for k in ("keys_floats", "keys_int64s", "keys_strings", "keys_tensor") if attrs.get(k) is not None), None
    )
    vkey = next(
        (k for k in ("values_floats", "values_int64s", "values_strings", "values_tensor") if attrs.get(k) is not None), None
    )
    if keys is None or vkey is None:
        raise ValueError("LabelEncoder needs one keys_* and one values_* attribute")
    k = np.asarray(keys, dtype=object if isinstance(keys, (list, tuple)) and keys and isinstance(keys[0], str) else None)
    v = np.asarray(attrs[vkey])
    if vkey == "values_tensor":
        dtype = "str" if v.dtype.kind in "OU" else v.dtype.name
        default = attrs.get("default_tensor")
        default = np.asarray(default).reshape(-1)[0] if default is not None else ("_Unused" if dtype == "str" else 0)
    else:
        dtype = _VALUE_KINDS[vkey]
        default = attrs.get(_DEFAULTS[vkey], {"float32": -0.0, "int64": -1, "str": "_Unused"}[dtype])
    if k.reshape(-1).size != v.reshape(-1).size:
        raise ValueError(f"LabelEncoder has {k.size} keys but {v.size} values")
    return k.reshape(-1), v.reshape(-1), default, dtype


def build_label_encoder(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Map every element through the key -> value table (unknown keys get the default)."""
    from aioge.ir.desc import numpy_dtype

    keys, values, default, dtype = label_encoder_table(attrs)
    out_dtype = numpy_dtype(dtype)
    strings = keys.dtype.kind in "OU"
    sort_keys = keys.astype(np.str_) if strings else keys
    order = np.argsort(sort_keys, kind="stable")
    sorted_keys, sorted_values = sort_keys[order], values[order].astype(out_dtype)

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        probe = x.astype(np.str_) if strings else x.astype(sorted_keys.dtype, copy=False)
        pos = np.clip(np.searchsorted(sorted_keys, probe), 0, max(sorted_keys.size - 1, 0))
        hit = sorted_keys[pos] == probe if sorted_keys.size else np.zeros(x.shape, bool)
        res = np.where(hit, sorted_values[pos] if sorted_keys.size else default, np.asarray(default, dtype=out_dtype))
        res = res.astype(out_dtype)
        if outputs is None:
            return (res,)
        outputs[0][...] = res
        return outputs

    return run


# TreeEnsemble node modes
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


@dataclass(frozen=True, slots=True)
class _Forest:
    feature: np.ndarray
    split: np.ndarray
    mode: np.ndarray
    true_id: np.ndarray
    false_id: np.ndarray
    true_leaf: np.ndarray
    false_leaf: np.ndarray
    missing_true: np.ndarray
    members: np.ndarray  # (nodes, most members), NaN-padded; rows only for MEMBER nodes
    roots: np.ndarray  # node index, or leaf index when root_is_leaf
    root_is_leaf: np.ndarray
    leaf_target: np.ndarray
    leaf_weight: np.ndarray


def _forest(attrs: Mapping[str, Any]) -> _Forest:
    """The node arrays of a TreeEnsemble; membership sets go to MEMBER nodes in visiting order."""
    a = {k: np.asarray(v) for k, v in attrs.items() if v is not None and not isinstance(v, str)}
    mode = a["nodes_modes"].astype(np.int64).reshape(-1)
    true_id, false_id = a["nodes_truenodeids"].astype(np.int64), a["nodes_falsenodeids"].astype(np.int64)
    true_leaf, false_leaf = a["nodes_trueleafs"].astype(bool), a["nodes_falseleafs"].astype(bool)
    n = mode.size
    roots = a["tree_roots"].astype(np.int64).reshape(-1)
    root_is_leaf = true_leaf[roots] & false_leaf[roots] & (true_id[roots] == false_id[roots])
    members = np.full((n, 1), np.nan)
    if (mode == _MEMBER).any():
        values = a["membership_values"].astype(np.float64).reshape(-1)
        cuts = np.flatnonzero(np.isnan(values))
        sets = np.split(values, cuts + 1)[: cuts.size]
        sets = [s[~np.isnan(s)] for s in sets]
        # the sets are consumed in the order the trees' nodes are first visited (depth first)
        visit: list[int] = []
        seen: set[int] = set()
        for r, leaf in zip(roots.tolist(), root_is_leaf.tolist()):
            stack = [] if leaf else [r]
            while stack:
                node = stack.pop()
                visit.append(node)
                for child, is_leaf in ((false_id[node], false_leaf[node]), (true_id[node], true_leaf[node])):
                    if not is_leaf:
                        stack.append(int(child))
        order = []
        for node in visit:
            if mode[node] == _MEMBER and node not in seen:
                order.append(node)
            seen.add(node)
        width = max((s.size for s in sets), default=1) or 1
        members = np.full((n, width), np.nan)
        for node, s in zip(order, sets):
            members[node, : s.size] = s
    missing = a.get("nodes_missing_value_tracks_true")
    return _Forest(
        a["nodes_featureids"].astype(np.int64),
        a["nodes_splits"].astype(np.float64).reshape(-1),
        mode,
        true_id,
        false_id,
        true_leaf,
        false_leaf,
        np.zeros(n, bool) if missing is None else missing.astype(bool),
        members,
        np.where(root_is_leaf, true_id[roots], roots),
        root_is_leaf,
        a["leaf_targetids"].astype(np.int64),
        a["leaf_weights"].astype(np.float64).reshape(-1),
    )


def _leaves(forest: _Forest, x: np.ndarray) -> np.ndarray:
    """(samples, trees) leaf index reached by each sample in each tree."""
    s, t = x.shape[0], forest.roots.size
    node = np.broadcast_to(forest.roots, (s, t)).copy()
    done = np.broadcast_to(forest.root_is_leaf, (s, t)).copy()
    rows = np.broadcast_to(np.arange(s)[:, None], (s, t))
    for _ in range(forest.mode.size + 1):  # a path visits each node at most once
        if done.all():
            break
        live = ~done
        nd, r = node[live], rows[live]
        v = x[r, forest.feature[nd]].astype(np.float64)
        split = forest.split[nd]
        m = forest.mode[nd]
        cond = np.select(
            [m == _LEQ, m == _LT, m == _GTE, m == _GT, m == _EQ, m == _NEQ],
            [v <= split, v < split, v >= split, v > split, v == split, v != split],
            default=(forest.members[nd] == v[:, None]).any(axis=1),
        )
        cond |= forest.missing_true[nd] & np.isnan(v)
        node[live] = np.where(cond, forest.true_id[nd], forest.false_id[nd])
        done[live] = np.where(cond, forest.true_leaf[nd], forest.false_leaf[nd])
    return node


def build_tree_ensemble(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Evaluate the ensemble on (samples, features): (samples, n_targets) aggregated leaf weights."""
    forest = _forest(attrs)
    n_targets = int(attrs["n_targets"])
    agg = int(attrs.get("aggregate_function", 1))
    post = int(attrs.get("post_transform", 0))

    def run(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        leaves = _leaves(forest, x)
        weights, targets = forest.leaf_weight[leaves], forest.leaf_target[leaves]
        rows = np.broadcast_to(np.arange(x.shape[0])[:, None], leaves.shape)
        if agg in (0, 1):
            res = np.zeros((x.shape[0], n_targets))
            np.add.at(res, (rows, targets), weights / (forest.roots.size if agg == 0 else 1))
        else:
            fill = np.finfo(x.dtype).max if agg == 2 else np.finfo(x.dtype).min
            res = np.full((x.shape[0], n_targets), float(fill))
            (np.minimum if agg == 2 else np.maximum).at(res, (rows, targets), weights)
        if post == 1:
            e = np.exp(res - res.max(axis=1, keepdims=True))
            res = e / e.sum(axis=1, keepdims=True)
        elif post == 2:
            res = 1 / (1 + np.exp(-res))
        elif post == 3:
            e = np.where(res == 0, 0, np.exp(res - res.max(axis=1, keepdims=True)))
            res = e / np.where(e.sum(axis=1, keepdims=True) == 0, 1, e.sum(axis=1, keepdims=True))
        elif post != 0:
            raise ValueError(f"post_transform={post} (PROBIT) is not supported")
        res = res.astype(x.dtype)
        if outputs is None:
            return (res,)
        np.copyto(outputs[0], res)
        return outputs

    return run
