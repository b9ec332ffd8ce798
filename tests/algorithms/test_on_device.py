"""The on-device choice among candidate models (regionfed-plus, fedavg-ft)."""

import numpy as np
import pytest
import torch
from helpers import QuadraticClient

from regionfed.algorithms.on_device import (
    choose_on_validation,
    paired_standard_error,
    posterior_bar,
)


def test_a_client_picks_the_model_that_validates_best_on_its_own_split():
    client = QuadraticClient("u", "a", 10, torch.zeros(2))
    candidates = {"regional": torch.zeros(2), "global": torch.ones(2),
                  "personal": 2 * torch.ones(2)}
    client.score_ = [0.8, 0.5, 0.6]  # regional, global, personal: the personal is worse
    assert choose_on_validation(candidates, client) == "regional"
    client.score_ = [0.6, 0.5, 0.9]
    assert choose_on_validation(candidates, client) == "personal"
    client.score_ = [0.7, 0.7, 0.7]  # ties go to the regional model
    assert choose_on_validation(candidates, client) == "regional"
    client.score_ = [0.7, 0.7, 0.7]  # … or to the first of another order
    assert choose_on_validation(candidates, client,
                                order=("personal", "regional", "global")) == "personal"


def test_with_a_margin_a_challenger_must_beat_the_regional_model_by_standard_errors():
    """10 validation examples, regional score 0.6: one standard error is √(0.24/10) ≈ 0.155,
    so a personal model at 0.7 (one lucky example) does not displace it; one at 0.8 does,
    and of two challengers past the bar the better one wins."""
    client = QuadraticClient("u", "a", 10, torch.zeros(2))
    candidates = {"regional": torch.zeros(2), "global": torch.ones(2),
                  "personal": 2 * torch.ones(2)}
    client.score_ = [0.6, 0.5, 0.7]
    assert choose_on_validation(candidates, client, margin=1.0) == "regional"
    client.score_ = [0.6, 0.5, 0.7]
    assert choose_on_validation(candidates, client, margin=0.0) == "personal"
    client.score_ = [0.6, 0.5, 0.8]
    assert choose_on_validation(candidates, client, margin=1.0) == "personal"
    client.score_ = [0.6, 0.9, 0.8]
    assert choose_on_validation(candidates, client, margin=1.0) == "global"


def test_peers_share_the_default_without_a_margin_among_them():
    """peers=2: the better of the first two candidates is the default (no margin between
    them), and the others must beat *it* by the margin. 10 examples: at 0.8 one standard
    error is √(0.16/10) ≈ 0.126."""
    client = QuadraticClient("u", "a", 10, torch.zeros(2))
    candidates = {"refreshed": torch.zeros(2), "personal": torch.ones(2),
                  "regional": 2 * torch.ones(2)}
    client.score_ = [0.7, 0.8, 0.6]  # the personal model edges the refreshed one
    assert choose_on_validation(candidates, client, margin=1.0) == "refreshed"
    client.score_ = [0.7, 0.8, 0.6]
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "personal"
    client.score_ = [0.8, 0.8, 0.6]  # ties among peers: the order
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "refreshed"
    client.score_ = [0.7, 0.8, 0.9]  # the regional model is within the margin of the default
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "personal"
    client.score_ = [0.7, 0.8, 0.95]
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "regional"
    with pytest.raises(ValueError, match="peers"):
        choose_on_validation(candidates, client, peers=0)


def _replicates(correct):
    """The jackknife of an accuracy: the mean of the other answers, for each answer."""
    correct = np.asarray(correct, dtype=float)
    return (correct.sum() - correct) / (len(correct) - 1)


def test_the_paired_error_of_an_accuracy_is_the_sample_error_of_the_per_query_differences():
    a = [1, 1, 1, 0, 1, 0, 1, 1, 0, 1]
    b = [1, 0, 1, 0, 1, 0, 1, 0, 0, 1]
    difference = _replicates(a) - _replicates(b)
    per_query = np.subtract(a, b)
    sample = float(np.std(per_query, ddof=1) / np.sqrt(10))
    s0 = float(np.mean(b))
    bound = s0 * (1 - s0)
    # no prior: the paired sample error, smaller than the single score's √(s₀(1 − s₀)/n)
    assert paired_standard_error(difference, bound, 10, 0.0) == pytest.approx(sample)
    assert sample < np.sqrt(s0 * (1 - s0) / 10)
    # a prior worth ν queries pulls the per-query variance towards s₀(1 − s₀)
    moderated = (2 * s0 * (1 - s0) + 9 * sample ** 2 * 10) / 11
    assert paired_standard_error(difference, bound, 10, 2.0) == \
        pytest.approx(np.sqrt(moderated / 10))
    assert paired_standard_error(difference, bound, 10, 1e9) == \
        pytest.approx(np.sqrt(bound / 10))
    # one query (no replicates): the single-score error
    assert paired_standard_error(np.zeros(0), 0.25, 1, 2.0) == pytest.approx(0.5)


def test_a_model_ahead_on_the_same_queries_passes_a_paired_margin_a_single_one_refuses():
    """16 queries: the challenger answers two more right and none worse (2/16 = 0.125
    ahead). The single-score error at 0.5 is √(0.25/16) = 0.125, so a margin of 1.4 refuses
    it; the paired error of +1 on two queries and 0 elsewhere is ≈ 0.085 (ν = 0), so it is
    chosen — and with a prior worth many queries it is refused again."""
    default = [1] * 8 + [0] * 8
    challenger = [1] * 10 + [0] * 6
    client = QuadraticClient("u", "a", 16, torch.zeros(2))
    candidates = {"refreshed": torch.zeros(2), "personal": torch.ones(2)}
    client.score_ = [0.5, 0.625]
    assert choose_on_validation(candidates, client, margin=1.4) == "refreshed"
    for prior, chosen in ((0.0, "personal"), (1e6, "refreshed")):
        client.score_ = [0.5, 0.625]
        client.replicates_ = [_replicates(default), _replicates(challenger)]
        assert choose_on_validation(candidates, client, margin=1.4,
                                    prior_queries=prior) == chosen
        assert not client.replicates_  # the default's jackknife, then the challenger's


def test_the_posterior_bar_is_the_lead_whose_posterior_mean_is_zero():
    """Prior Δ ~ N(−μ, τ²), lead d ~ N(Δ, SE²): E[Δ | d] = (τ²d − SE²μ)/(τ² + SE²) is 0
    exactly at d = κ·SE² with κ = μ/τ²."""
    mu, tau2, se = 0.1, 0.02, 0.15
    bar = posterior_bar(se, mu / tau2)
    assert (tau2 * bar - se ** 2 * mu) / (tau2 + se ** 2) == pytest.approx(0.0, abs=1e-12)
    assert bar == pytest.approx(5 * 0.0225)


def test_with_a_posterior_bar_a_small_split_needs_a_large_lead_and_a_large_one_a_small_lead():
    """κ = 3 at s₀ = 0.5: 2 queries need a lead of 3·0.25/2 = 0.375 (a margin of 0.5 SE
    asks 0.177), 16 queries 3·0.25/16 ≈ 0.047 (the margin asks 0.0625)."""
    candidates = {"refreshed": torch.zeros(2), "personal": torch.ones(2)}
    for n, lead, by_margin, by_posterior in ((2, 0.25, "personal", "refreshed"),
                                             (16, 0.05, "refreshed", "personal")):
        client = QuadraticClient("u", "a", n, torch.zeros(2))
        client.score_ = [0.5, 0.5 + lead]
        assert choose_on_validation(candidates, client, margin=0.5) == by_margin
        client.score_ = [0.5, 0.5 + lead]
        assert choose_on_validation(candidates, client, margin=0.5,
                                    prior_strength=3.0) == by_posterior


def test_a_score_variance_keeps_the_bar_where_the_default_scores_zero():
    """4 queries, the default right on none: s₀(1 − s₀) = 0 makes any lead pass the bar;
    with the per-query variance at its maximum 1/4, κ = 3 asks a lead of 3·0.25/4 = 0.1875
    (0.15 fails, one right query, 0.25, passes) and a margin of 1 SE asks √(0.25/4) = 0.25."""
    candidates = {"served": torch.zeros(2), "personal": torch.ones(2)}
    client = QuadraticClient("u", "a", 4, torch.zeros(2))
    for lead, bar, variance, chosen in ((0.15, {"prior_strength": 3.0}, None, "personal"),
                                        (0.15, {"prior_strength": 3.0}, 0.25, "served"),
                                        (0.25, {"prior_strength": 3.0}, 0.25, "personal"),
                                        (0.2, {"margin": 1.0}, None, "personal"),
                                        (0.2, {"margin": 1.0}, 0.25, "served")):
        client.score_ = [0.0, lead]
        assert choose_on_validation(candidates, client, score_variance=variance,
                                    **bar) == chosen
