"""The audit statistics on problems with known answers."""

import math

import dp_accounting
import numpy as np
import pytest
import torch
from scipy.stats import binom

from regionfed.errors import ConfigError
from regionfed.privacy.audit import (
    GUESS_FRACTIONS,
    canary_direction,
    canary_scores,
    gaussian_mechanism_epsilon,
    null_std,
    one_run_lower_bound,
    one_shot_estimate,
)


def test_directions_are_unit_and_scores_are_cosines_with_what_the_model_moved():
    u = torch.stack([canary_direction(7, i, 200) for i in range(5)])
    assert torch.allclose(torch.linalg.vector_norm(u, dim=1), torch.ones(5))
    assert torch.equal(u[3], canary_direction(7, 3, 200))  # regenerated, not stored
    assert not torch.equal(u[3], canary_direction(8, 3, 200))
    before = torch.zeros(200)
    after = before - 3.0 * u[2]  # a canary pushes the model along −u
    scores = canary_scores(7, range(5), before, after)
    assert scores[2] == pytest.approx(1.0) and np.abs(np.delete(scores, 2)).max() < 0.4
    assert np.all(canary_scores(7, range(5), before, before) == 0)


def test_held_out_scores_follow_the_exact_null_whatever_the_model_moved():
    """A direction independent of θ_0 − θ_T has cosine mean 0 and std 1/√d with it, for a
    structured move as much as for an isotropic one: the null needs no fitting."""
    dim = 5000
    for moved in (torch.randn(dim, generator=torch.Generator().manual_seed(0)),
                  torch.cat([torch.ones(10), torch.zeros(dim - 10)])):
        scores = canary_scores(11, range(2000), torch.zeros(dim), -moved)
        assert abs(scores.mean()) < 4 * null_std(dim) / math.sqrt(2000)
        assert scores.std(ddof=1) / null_std(dim) == pytest.approx(1.0, abs=0.05)


def test_one_shot_estimate_is_the_gaussian_mechanism_of_the_score_shift():
    """Scores shifted by exactly μ null std with the null's spread: the point estimate is
    μ-GDP's ε, the interval is μ ∓ z·SE around it, and nothing but the gap counts."""
    base = np.linspace(-1, 1, 201)
    base = base / base.std(ddof=1)  # mean 0, std exactly 1 = the null's
    for mu in (0.25, 1.0, 3.0):
        estimate = one_shot_estimate(base + mu, 1.0, 1e-5, confidence=0.95)
        assert estimate.mu == pytest.approx(mu)
        point = dp_accounting.get_epsilon_gaussian(1 / mu, 1e-5)
        assert estimate.epsilon_point == pytest.approx(point, rel=1e-6)
        se = math.sqrt(1 / 201 + mu**2 / (8 * 200))
        assert estimate.mu_std_error == pytest.approx(se)
        low = gaussian_mechanism_epsilon(mu - 1.6448536 * se, 1e-5)
        assert estimate.epsilon == pytest.approx(low, rel=1e-5)
        assert estimate.epsilon < estimate.epsilon_point < estimate.epsilon_upper
    assert one_shot_estimate(base - 0.1, 1.0, 1e-5).epsilon_point == 0.0  # no signal
    assert one_shot_estimate([5.0, 5.0], 0.01, 1e-5).epsilon == math.inf  # no noise
    for bad in (([1.0], 1.0, 1e-5), (base, 0.0, 1e-5), (base, 1.0, 0.0)):
        with pytest.raises(ConfigError):
            one_shot_estimate(*bad)


def test_the_reported_estimate_rarely_exceeds_a_tight_mechanisms_epsilon():
    """A mechanism whose scores are exactly μ-GDP (the tight case): over 400 simulated
    audits of 500 inserted canaries, the point estimate exceeds the true ε about half the
    time, the estimate at the 95 % lower end about 5 % of the time (binomial margin)."""
    rng = np.random.default_rng(5)
    mu = 0.4
    truth = gaussian_mechanism_epsilon(mu, 1e-5)
    audits = [one_shot_estimate(rng.normal(mu, 1.0, 500), 1.0, 1e-5) for _ in range(400)]
    above_point = sum(a.epsilon_point > truth for a in audits)
    above_low = sum(a.epsilon > truth for a in audits)
    assert 160 < above_point < 240
    assert above_low < 36  # 5 % of 400 = 20, +3.5 binomial std
    assert all(a.epsilon <= a.epsilon_upper for a in audits)


def test_one_run_lower_bound_rejects_exactly_what_the_binomial_test_rejects():
    inserted, held_out = np.arange(500.0) + 1000, np.arange(500.0)  # perfectly separated
    bound = one_run_lower_bound(inserted, held_out, delta=0.0, confidence=0.95)
    # the best guess set is some top-k, all correct: at the bound the p-value is α/4
    significance = 0.05 / len(GUESS_FRACTIONS)
    ks = [math.ceil(f * 1000) for f in GUESS_FRACTIONS]
    p_values = [binom.sf(k - 1, k, 1 / (1 + math.exp(-bound))) for k in ks]
    assert min(abs(p - significance) for p in p_values) < 1e-6
    assert bound > 3.0
    # indistinguishable scores reject nothing
    rng = np.random.default_rng(0)
    assert one_run_lower_bound(rng.normal(size=500), rng.normal(size=500), 1e-5) == 0.0


def test_one_run_lower_bound_stays_below_a_true_gaussian_mechanisms_epsilon():
    """Scores of a Gaussian mechanism with known ε: the lower bound (95 %) stays below it,
    the δ term only lowers it, and the one-shot estimate lands near it."""
    rng = np.random.default_rng(3)
    sigma = 0.5  # μ = 2 GDP: ε(1e-5) ≈ 9.4
    truth = dp_accounting.get_epsilon_gaussian(sigma, 1e-5)
    inserted = rng.normal(1.0, sigma, 2000)
    held_out = rng.normal(0.0, sigma, 2000)
    bound = one_run_lower_bound(inserted, held_out, 1e-5)
    assert 0.5 < bound < truth
    assert bound <= one_run_lower_bound(inserted, held_out, 0.0)
    estimate = one_shot_estimate(inserted / sigma, 1.0, 1e-5)  # in null units
    assert estimate.epsilon_point == pytest.approx(truth, rel=0.15)
    assert estimate.epsilon < truth < estimate.epsilon_upper
    with pytest.raises(ConfigError):
        one_run_lower_bound([], [], 1e-5)
