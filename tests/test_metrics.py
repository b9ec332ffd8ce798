import math

import pytest

from regionfed import metrics


def test_accuracy_and_exact_match():
    assert metrics.accuracy([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert metrics.exact_match([["a", "b"], ["c"]], [["a", "b"], ["d"]]) == 0.5
    with pytest.raises(ValueError):
        metrics.accuracy([1, 2], [1])


def test_token_micro_f1_counts_only_non_o_tags():
    gold = [["B-BRAND", "O", "B-PRODUCT"], ["O", "O"]]
    pred = [["B-BRAND", "B-PRODUCT", "O"], ["O", "O"]]
    # tp = 1, predicted positives = 2, gold positives = 2 → P = R = F1 = 0.5
    assert metrics.token_micro_f1(pred, gold) == pytest.approx(0.5)
    # all-O predictions never score on a dataset that has entities
    assert metrics.token_micro_f1([["O"] * 3, ["O"] * 2], gold) == 0.0


def test_entity_f1_requires_whole_spans():
    gold = [["B-PRODUCT", "I-PRODUCT", "O"]]
    assert metrics.entity_f1([["B-PRODUCT", "I-PRODUCT", "O"]], gold) == 1.0
    # the token-level score gives half credit, the span-level none
    assert metrics.entity_f1([["B-PRODUCT", "O", "O"]], gold) == 0.0
    assert metrics.token_micro_f1([["B-PRODUCT", "O", "O"]], gold) == pytest.approx(2 / 3)


def test_regional_summary_and_mean_std():
    summary = metrics.regional_summary({"a": 0.5, "b": 0.7, "c": 0.9})
    assert summary["rrs"] == pytest.approx(0.7)
    assert summary["worst_region"] == 0.5
    assert summary["region_std"] == pytest.approx(math.sqrt(((0.2**2) * 2) / 3))
    assert metrics.mean_std([0.5]) == (0.5, 0.0)
    mean, std = metrics.mean_std([1.0, 3.0])
    assert (mean, std) == (2.0, pytest.approx(math.sqrt(2)))


def test_additive_counts_reproduce_the_pooled_scores():
    """Counts summed over parts (clients) give exactly the score of the pooled data: what
    lets a federated runtime evaluate without moving labels (SPEC §8 micro averages)."""
    import random

    from regionfed.metrics import (
        entity_counts,
        entity_f1,
        entity_f1_from_counts,
        token_f1_counts,
        token_f1_from_counts,
        token_micro_f1,
    )

    rng = random.Random(0)
    tags = ["O", "B-BRAND", "I-BRAND", "B-PRODUCT", "I-PRODUCT"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 6))] for _ in range(60)]
    pred = [[t if rng.random() < 0.6 else rng.choice(tags) for t in g] for g in gold]
    parts = [(pred[i:i + 7], gold[i:i + 7]) for i in range(0, 60, 7)]
    token = [sum(c) for c in zip(*(token_f1_counts(p, g) for p, g in parts), strict=True)]
    entity = [sum(c) for c in zip(*(entity_counts(p, g) for p, g in parts), strict=True)]
    assert token_f1_from_counts(*token) == pytest.approx(token_micro_f1(pred, gold), abs=1e-12)
    assert entity_f1_from_counts(*entity) == pytest.approx(entity_f1(pred, gold), abs=1e-12)
    assert 0.0 < entity_f1(pred, gold) < 1.0
