"""k-ary randomized response for intent histograms (paper Alg. 1, ε_LDP = 2).

The ``dynamic`` strategy needs each region's intent distribution P_r to compute the
heterogeneity h_r = KL(P_r ‖ P_global). Clients report it through generalized (k-ary)
randomized response (Wang et al., 2017), which is ε_LDP-locally differentially private for
each reported item:

    report the true category j       with probability  p  = e^ε / (e^ε + k − 1),
    else one of the other k − 1      uniformly, each   q' = (1 − p)/(k − 1) = 1/(e^ε + k − 1).

p / q' = e^ε, hence ε-LDP per item. (A client reporting m items spends m·ε by basic
composition; the ledger records the releases, see :meth:`PrivacyLedger.record_ldp`.)

Server side, with n reports and observed counts c_j, E[c_j] = n_j·p + (n − n_j)·q', so

    n̂_j = (c_j − n·q') / (p − q')

is unbiased. :func:`debiased_distribution` clips n̂ at 0 and renormalises, which makes the
estimate a valid probability vector at the price of a small bias.
"""

from __future__ import annotations

import math

import numpy as np

from regionfed.errors import ConfigError

__all__ = [
    "debiased_distribution",
    "keep_probability",
    "kl_divergence",
    "privatized_histogram",
    "randomize",
]


def _check(k: int, epsilon: float) -> None:
    if isinstance(k, bool) or int(k) != k or k < 2:
        raise ConfigError(f"number of categories k must be an integer ≥ 2, got {k}")
    if not (epsilon > 0.0 and math.isfinite(epsilon)):
        raise ConfigError(f"epsilon_ldp must be finite and > 0, got {epsilon}")


def keep_probability(k: int, epsilon: float) -> float:
    """p = e^ε / (e^ε + k − 1): the probability of reporting the true category."""
    _check(k, epsilon)
    # written as 1 / (1 + (k − 1)·e^{−ε}) so that a large ε does not overflow
    return 1.0 / (1.0 + (k - 1) * math.exp(-epsilon))


def randomize(labels: np.ndarray, k: int, epsilon: float,
              rng: np.random.Generator) -> np.ndarray:
    """Privatize each label independently by k-ary randomized response.

    Each label is kept with probability p = e^ε/(e^ε + k − 1), otherwise replaced by a
    uniformly random *other* category. Returns an int64 array of the input's shape.

    Raises:
        ConfigError: ε ≤ 0, k < 2, non-integer labels or labels outside 0..k−1.
    """
    _check(k, epsilon)
    labels = np.asarray(labels)
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(f"labels must be integers, got dtype {labels.dtype}")
    labels = labels.astype(np.int64, copy=False)
    if labels.size and (labels.min() < 0 or labels.max() >= k):
        raise ConfigError(
            f"labels must lie in 0..{k - 1}, got range {labels.min()}..{labels.max()}")
    p = keep_probability(k, epsilon)
    keep = rng.random(labels.shape) < p
    other = rng.integers(0, k - 1, size=labels.shape)  # 0..k−2, then skip the true label
    other = other + (other >= labels)
    return np.where(keep, labels, other)


def privatized_histogram(labels: np.ndarray, k: int, epsilon: float,
                         rng: np.random.Generator) -> np.ndarray:
    """Client side: randomize every label (:func:`randomize`), then count (length-k int64)."""
    noisy = randomize(labels, k, epsilon, rng)
    return np.bincount(noisy.reshape(-1), minlength=k).astype(np.int64)


def debiased_distribution(noisy_counts: np.ndarray, k: int, epsilon: float) -> np.ndarray:
    """Server side: estimate the true distribution from randomized-response counts.

    n̂_j = (c_j − n·q') / (p − q'), q' = (1 − p)/(k − 1), n = Σ_j c_j (unbiased), then
    clipped to n̂_j ≥ 0 and renormalised to sum to 1. The clipping makes the estimate slightly
    biased but always a valid probability vector. Counts may be summed over any number of
    clients (the estimator is linear). No reports (n = 0), or nothing left after clipping,
    gives the uniform distribution.

    Raises:
        ConfigError: ε ≤ 0, k < 2, counts not of length k, negative or non-finite counts.
    """
    _check(k, epsilon)
    counts = np.asarray(noisy_counts, dtype=np.float64)
    if counts.shape != (k,):
        raise ConfigError(f"noisy_counts must have shape ({k},), got {counts.shape}")
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ConfigError("noisy_counts must be finite and ≥ 0")
    n = counts.sum()
    uniform = np.full(k, 1.0 / k)
    if n == 0:
        return uniform
    p = keep_probability(k, epsilon)
    q = (1.0 - p) / (k - 1)
    estimate = np.clip((counts - n * q) / (p - q), 0.0, None)
    total = estimate.sum()
    if total <= 0.0:
        return uniform
    return estimate / total


def kl_divergence(p: np.ndarray, q: np.ndarray, eps: float = 1e-6) -> float:
    """KL(p ‖ q) = Σ_j p̃_j log(p̃_j / q̃_j) with additive smoothing.

    Each input is first normalised to a probability vector, then smoothed,
    p̃ = (p/Σp + eps) / (1 + k·eps) (likewise q̃), so that empty categories give a finite
    value. Used for the paper's heterogeneity h_r = KL(P_r ‖ P_global) (Alg. 1). Inputs may
    be counts or probabilities (the result is the same); KL(p ‖ p) is exactly 0.

    Raises:
        ConfigError: shapes differ, negative / non-finite entries, an all-zero vector, or
            eps < 0.
    """
    p_arr = np.asarray(p, dtype=np.float64).reshape(-1)
    q_arr = np.asarray(q, dtype=np.float64).reshape(-1)
    if p_arr.shape != q_arr.shape:
        raise ConfigError(f"distributions differ in length: {p_arr.size} vs {q_arr.size}")
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise ConfigError(f"smoothing eps must be finite and ≥ 0, got {eps}")
    for name, arr in (("p", p_arr), ("q", q_arr)):
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ConfigError(f"{name} must be finite and ≥ 0")
        if arr.sum() <= 0.0:
            raise ConfigError(f"{name} must not be all zero")
    k = p_arr.size
    p_s = (p_arr / p_arr.sum() + eps) / (1.0 + k * eps)
    q_s = (q_arr / q_arr.sum() + eps) / (1.0 + k * eps)
    mask = p_s > 0
    if np.any(q_s[mask] == 0):
        return math.inf
    return float(np.sum(p_s[mask] * np.log(p_s[mask] / q_s[mask])))
