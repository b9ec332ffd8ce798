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
    one_run_lower_bound,
    one_shot_epsilon,
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


def test_one_shot_estimate_is_the_gaussian_mechanism_of_the_score_gap():
    held_out = np.linspace(-1, 1, 101)
    for mu in (0.25, 1.0, 3.0):
        inserted = held_out + mu * held_out.std(ddof=1)  # same spread, shifted by μ std
        expected = dp_accounting.get_epsilon_gaussian(1 / mu, 1e-5)
        assert one_shot_epsilon(inserted, held_out, 1e-5) == pytest.approx(expected, rel=1e-6)
    assert one_shot_epsilon(held_out - 0.1, held_out, 1e-5) == 0.0  # no signal
    assert one_shot_epsilon([1.0, 1.0], [0.0, 0.0], 1e-5) == math.inf  # no noise at all
    with pytest.raises(ConfigError):
        one_shot_epsilon([1.0], held_out, 1e-5)


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
    assert one_shot_epsilon(inserted, held_out, 1e-5) == pytest.approx(truth, rel=0.15)
    with pytest.raises(ConfigError):
        one_run_lower_bound([], [], 1e-5)
