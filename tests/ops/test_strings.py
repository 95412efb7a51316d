"""String and text ops (aioge.ops.strings) against onnxruntime: StringConcat, StringNormalizer,
StringSplit, RegexFullMatch and TfIdfVectorizer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error


def _s(*values):
    return np.array(values, dtype=object)


def test_string_concat():
    check_op("StringConcat", [_s("a", "bc", ""), _s("x", "", "é")], static=True)
    check_op("StringConcat", [_s("a", "bc"), np.array("!", dtype=object)], static=True)


@pytest.mark.parametrize("case", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
def test_string_normalizer(case, sensitive):
    x = _s("Monday", "tuesday", "MONDAY", "wednesday")
    attrs = {"case_change_action": case, "is_case_sensitive": sensitive, "stopwords": ["monday"], "locale": "C"}
    check_op("StringNormalizer", [x], attrs)
    check_op("StringNormalizer", [x.reshape(1, -1)], attrs)


def test_string_normalizer_everything_dropped():
    check_op("StringNormalizer", [_s("a", "A")], {"stopwords": ["a"], "locale": "C"})


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "."}, {"delimiter": "-", "maxsplit": 1}, {"delimiter": ""}])
def test_string_split(attrs):
    x = np.array([["a.b-c", "  two  words ", ""], ["x--y", "...", "one"]], dtype=object)
    check_op("StringSplit", [x], attrs, num_outputs=2)


def test_regex_full_match():
    x = _s("www.google.com", "www.facebook.com", "www.bbc.co.uk", "")
    check_op("RegexFullMatch", [x], {"pattern": r"www\.[\w.-]+\.\bcom\b"}, static=True)
    expect_graph_error("RegexFullMatch", [x], {"pattern": "(unclosed"}, match="not a valid regular expression")


_POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize(("lengths", "skip"), [((1, 1), 0), ((2, 2), 0), ((1, 2), 3), ((2, 2), 5)])
@pytest.mark.parametrize("batched", [False, True])
def test_tfidf_vectorizer(mode, lengths, skip, batched):
    x = np.array([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], np.int32)
    x = x.reshape(2, 6) if batched else x
    attrs = {
        "mode": mode,
        "min_gram_length": lengths[0],
        "max_gram_length": lengths[1],
        "max_skip_count": skip,
        **_POOL,
        "weights": [0.5, 1.0, 2.0, 1.0, 1.0, 3.0, 1.0],
    }
    check_op("TfIdfVectorizer", [x], attrs, static=True)


def test_tfidf_strings():
    x = np.array(["a", "b", "c", "a", "b"], dtype=object)
    attrs = {
        "mode": "TF",
        "min_gram_length": 1,
        "max_gram_length": 2,
        "max_skip_count": 0,
        "ngram_counts": [0, 2],
        "ngram_indexes": [0, 1, 2],
        "pool_strings": ["a", "c", "a", "b"],
    }
    g, feeds = aioge_graph("TfIdfVectorizer", [x], attrs)
    (got,) = evaluate(g, feeds)
    np.testing.assert_array_equal(got, np.array([2, 1, 2], np.float32))  # a, c, then the bigram "a b" twice


def test_string_errors():
    expect_graph_error("StringConcat", [_s("a"), np.zeros(1, np.float32)], match="string tensor")
    expect_graph_error("StringNormalizer", [np.array([["a"], ["b"]], dtype=object)], match="\\(1, C\\)")
