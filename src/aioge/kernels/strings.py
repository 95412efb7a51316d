"""String and text kernels: StringConcat, StringNormalizer, StringSplit, RegexFullMatch and
TfIdfVectorizer.

Strings are object arrays in aioge. Where numpy has C string ufuncs (``numpy.strings``:
add, lower, upper) the kernel converts to fixed-width unicode and uses them; splitting and
regular expressions have no numpy ufunc, so those call Python's ``str.split`` and
``re.fullmatch`` once per element through numpy's C-level element loop (``np.char.split``,
``np.frompyfunc``) and do everything else (counting, padding, placing) vectorised.
"""

from __future__ import annotations

import itertools
import re
from typing import Sequence

import numpy as np

__all__ = ["regex_full_match", "string_concat", "string_normalizer", "string_split", "tfidf_vectorizer"]


def _unicode(x: np.ndarray) -> np.ndarray:
    return x.astype(np.str_) if x.size else np.zeros(x.shape, np.str_)


def _objects(x: np.ndarray) -> np.ndarray:
    return x.astype(object)


def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y elementwise, with numpy broadcasting."""
    return _objects(np.strings.add(_unicode(x), _unicode(y)))


def string_normalizer(
    x: np.ndarray,
    case_change_action: str = "NONE",
    is_case_sensitive: int = 0,
    locale: str | None = None,
    stopwords: Sequence[str] | None = None,
) -> np.ndarray:
    """Drop stopwords (case-insensitively unless is_case_sensitive), then change case.

    x is (C,) or (1, C); the result keeps the rank, and is [""] when every word is dropped.

    Raises:
        ValueError: x is not (C,) or (1, C).
    """
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ValueError(f"StringNormalizer takes a (C,) or (1, C) tensor, got shape {x.shape}")
    words = _unicode(x.reshape(-1))
    if stopwords:
        stops = np.asarray(list(stopwords), dtype=np.str_)
        if is_case_sensitive:
            keep = ~np.isin(words, stops)
        else:
            keep = ~np.isin(np.strings.lower(words), np.strings.lower(stops))
        words = words[keep]
    if case_change_action == "LOWER":
        words = np.strings.lower(words)
    elif case_change_action == "UPPER":
        words = np.strings.upper(words)
    if words.size == 0:
        words = np.array([""], dtype=np.str_)
    out = _objects(words)
    return out.reshape(1, -1) if x.ndim == 2 else out


def string_split(x: np.ndarray, delimiter: str | None = None, maxsplit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Split every string; Y pads the pieces with "" to x.shape + (most pieces,), Z counts them.

    No (or an empty) delimiter splits on runs of whitespace, as Python's str.split() does.
    """
    sep = delimiter or None
    text = _unicode(x)
    parts = np.char.split(text, sep, -1 if maxsplit is None else maxsplit).reshape(-1)
    counts = np.fromiter((len(p) for p in parts), np.int64, parts.size)
    # an empty string has no pieces, whatever the delimiter (as onnxruntime has it)
    empty = text.reshape(-1) == ""
    counts[empty] = 0
    width = int(counts.max(initial=0))
    y = np.full((parts.size, width), "", dtype=object)
    if counts.sum():
        rows = np.repeat(np.arange(parts.size), counts)
        cols = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
        y[rows, cols] = np.fromiter(itertools.chain.from_iterable(parts[~empty]), dtype=object, count=rows.size)
    return y.reshape(*x.shape, width), counts.reshape(x.shape)


def regex_full_match(x: np.ndarray, pattern: str) -> np.ndarray:
    """True where the whole string matches the pattern (Python ``re`` syntax, close to RE2's)."""
    compiled = re.compile(pattern)
    if x.size == 0:
        return np.zeros(x.shape, bool)
    return np.frompyfunc(lambda s: compiled.fullmatch(s) is not None, 1, 1)(x).astype(bool)


def _pool_grams(pool: np.ndarray, counts: Sequence[int], max_n: int) -> dict[int, np.ndarray]:
    """Pool n-grams by length: n -> (grams, n) array of the pool's n-grams, in pool order."""
    starts = list(counts) + [pool.size]
    grams = {}
    for n in range(1, len(counts) + 1):
        if n > max_n:
            break
        chunk = pool[starts[n - 1] : starts[n]]
        grams[n] = chunk.reshape(-1, n)
    return grams


def tfidf_vectorizer(
    x: np.ndarray,
    max_gram_length: int,
    max_skip_count: int,
    min_gram_length: int,
    mode: str,
    ngram_counts: Sequence[int],
    ngram_indexes: Sequence[int],
    pool_int64s: Sequence[int] | None = None,
    pool_strings: Sequence[str] | None = None,
    weights: Sequence[float] | None = None,
) -> np.ndarray:
    """Counts of the pool's n-grams (with skips) per row, weighted by TF, IDF or TF-IDF.

    Every (skip, length) pair is one vectorised window match against the pool; unigrams are
    counted once, not once per skip, as ONNX (and onnxruntime) do.

    Raises:
        ValueError: x is not (C,) or (B, C), or no pool is given.
    """
    if x.ndim not in (1, 2):
        raise ValueError(f"TfIdfVectorizer takes (C,) or (B, C), got shape {x.shape}")
    if pool_strings is not None:
        pool = np.asarray(list(pool_strings), dtype=np.str_)
        items = _unicode(x)
    elif pool_int64s is not None:
        pool = np.asarray(pool_int64s, dtype=np.int64)
        items = x.astype(np.int64)
    else:
        raise ValueError("TfIdfVectorizer needs pool_int64s or pool_strings")
    vocab = np.unique(pool)
    pos = np.clip(np.searchsorted(vocab, items), 0, max(vocab.size - 1, 0))
    ids = np.where(vocab[pos] == items, pos, -1).astype(np.int64)  # -1: not in any pool gram
    pool_ids = np.searchsorted(vocab, pool).astype(np.int64)
    rows = ids.reshape(1, -1) if x.ndim == 1 else ids
    size = int(max(ngram_indexes)) + 1 if len(ngram_indexes) else 0
    freq = np.zeros((rows.shape[0], size), np.int64)
    grams = _pool_grams(pool_ids, ngram_counts, max_gram_length)
    base = max(vocab.size, 1) + 1
    if base**max_gram_length >= 2**62:
        raise ValueError(f"a pool of {vocab.size} distinct items is too large for {max_gram_length}-grams")
    first_gram = 0
    offsets = {}
    for n in sorted(grams):
        offsets[n] = first_gram
        first_gram += grams[n].shape[0]
    out_index = np.asarray(ngram_indexes, dtype=np.int64)
    width = rows.shape[1]
    for skip in range(1, max_skip_count + 2):
        lo = min_gram_length if skip == 1 else max(min_gram_length, 2)
        for n in range(lo, max_gram_length + 1):
            if n not in grams or (n - 1) * skip >= width:
                continue
            starts = np.arange(width - (n - 1) * skip)
            window = rows[:, starts[:, None] + np.arange(n)[None, :] * skip]  # (B, positions, n)
            # encode each gram as one integer (ids are < base) and look it up among the pool's
            keys = np.where((window < 0).any(axis=2), -1, (window * base ** np.arange(n - 1, -1, -1)).sum(axis=2))
            pool_keys = (grams[n] * base ** np.arange(n - 1, -1, -1)).sum(axis=1)
            order = np.argsort(pool_keys)
            at = np.clip(np.searchsorted(pool_keys[order], keys), 0, max(pool_keys.size - 1, 0))
            hit = (keys >= 0) & (pool_keys[order][at] == keys)
            gram = order[at] + offsets[n]
            b, _ = np.nonzero(hit)
            np.add.at(freq, (b, out_index[gram[hit]]), 1)
    w = np.ones(size) if not weights else np.asarray(weights, np.float64)
    if mode == "TF":
        res = freq.astype(np.float64)
    elif mode == "IDF":
        res = np.where(freq > 0, w, 0.0)
    else:
        res = freq * w
    res = res.astype(np.float32)
    return res.reshape(-1) if x.ndim == 1 else res
