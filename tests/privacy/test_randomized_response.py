"""k-ary randomized response and the debiased intent histogram (SPEC §3 step 7)."""

import math

import numpy as np
import pytest

from regionfed.errors import ConfigError
from regionfed.privacy import (
    debiased_distribution,
    keep_probability,
    kl_divergence,
    privatized_histogram,
    randomize,
)

K, EPS = 8, 2.0
TRUE = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])


def _sample(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(K, size=n, p=TRUE)


def test_keep_probability_matches_formula_and_empirics():
    p = math.exp(EPS) / (math.exp(EPS) + K - 1)
    assert keep_probability(K, EPS) == pytest.approx(p, rel=1e-12)
    rng = np.random.default_rng(0)
    labels = _sample(200_000, rng)
    noisy = randomize(labels, K, EPS, rng)
    kept = np.mean(noisy == labels)
    assert kept == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / labels.size))
    # flipped labels are spread uniformly over the other categories
    flipped = noisy[(labels == 0) & (noisy != 0)]
    assert flipped.min() >= 1
    freq = np.bincount(flipped, minlength=K)[1:] / flipped.size
    assert np.allclose(freq, 1 / (K - 1), atol=0.01)


def test_debiased_estimate_converges():
    rng = np.random.default_rng(1)
    errors = {}
    for n in (1_000, 100_000):
        counts = privatized_histogram(_sample(n, rng), K, EPS, rng)
        assert counts.sum() == n
        est = debiased_distribution(counts, K, EPS)
        assert est.sum() == pytest.approx(1.0) and np.all(est >= 0)
        errors[n] = np.abs(est - TRUE).sum()
    assert errors[100_000] < 0.02
    assert errors[100_000] < errors[1_000] / 3


def test_debiasing_is_needed():
    # the raw noisy histogram is far from the truth; the debiased one is close
    rng = np.random.default_rng(2)
    counts = privatized_histogram(_sample(100_000, rng), K, EPS, rng)
    raw_err = np.abs(counts / counts.sum() - TRUE).sum()
    assert np.abs(debiased_distribution(counts, K, EPS) - TRUE).sum() < raw_err / 5


def test_debiased_edge_cases():
    assert np.allclose(debiased_distribution(np.zeros(K), K, EPS), 1 / K)
    with pytest.raises(ConfigError):
        debiased_distribution(np.ones(K - 1), K, EPS)
    with pytest.raises(ConfigError):
        debiased_distribution(-np.ones(K), K, EPS)


def test_kl_divergence():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.25, 0.25, 0.25, 0.25])
    assert kl_divergence(p, p) == 0.0
    assert kl_divergence(p, q) > 0.0
    assert math.isfinite(kl_divergence(q, p))  # smoothing handles the empty category
    # counts and probabilities give the same value
    assert kl_divergence(p * 100, q * 7) == pytest.approx(kl_divergence(p, q))
    with pytest.raises(ConfigError):
        kl_divergence(p, q[:3])
    with pytest.raises(ConfigError):
        kl_divergence(np.zeros(4), q)


def test_validation():
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError):
        randomize(np.array([0, 1]), K, 0.0, rng)
    with pytest.raises(ConfigError):
        randomize(np.array([0, K]), K, EPS, rng)
    with pytest.raises(ConfigError):
        randomize(np.array([-1]), K, EPS, rng)
    with pytest.raises(ConfigError):
        privatized_histogram(np.array([0]), K, -1.0, rng)
    assert randomize(np.array([], dtype=int), K, EPS, rng).shape == (0,)
