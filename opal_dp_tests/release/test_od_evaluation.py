"""The OD evaluation's count queries and top-k patterns against brute force."""

from __future__ import annotations

import numpy as np

from opal_dp.core.prefix_tree import Taxonomy
from opal_dp.reports.od_evaluation import answer_queries, evaluate, random_queries, top_patterns


def test_count_queries_match_brute_force():
    rng = np.random.default_rng(3)
    seqs = rng.integers(-1, 6, size=(300, 4))
    weights = rng.integers(1, 4, size=300).astype(float)
    queries = random_queries(6, 200, 3, rng)
    got = answer_queries(seqs, weights, queries, 6)
    for query, value in zip(queries, got):
        expected = sum(w for s, w in zip(seqs, weights) if set(query.tolist()) <= set(s.tolist()))
        assert value == expected
    assert all(1 <= len(q) <= 3 and len(set(q.tolist())) == len(q) for q in queries)


def test_top_patterns_count_each_sequence_once():
    seqs = np.array([[1, 2, 1, 2], [1, 2, -1, -1], [3, 4, -1, -1], [5, 3, 4, -1]])
    assert top_patterns(seqs, np.ones(4), 2) == {(1, 2), (3, 4)}
    assert top_patterns(seqs, np.array([1.0, 1.0, 5.0, 1.0]), 1) == {(3, 4)}


def test_evaluation_table_has_both_trees():
    taxonomy = Taxonomy(np.array([0, 3, 6]), np.array([3, 3, 4]))
    rng = np.random.default_rng(4)
    seqs = np.sort(rng.integers(-1, 10, size=(3000, 4)), axis=1)[:, ::-1].copy()
    table = evaluate(seqs, taxonomy, epsilons=(1.0,), heights=(4,), queries=50, k=3)
    assert set(table["tree"]) == {"hybrid", "plain"} and set(table["max_query_length"]) == {1, 2, 3, 4}
    assert (table["true_positives"] + table["false_positives"] == 3).all()
