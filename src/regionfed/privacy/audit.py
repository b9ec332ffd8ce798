"""Empirical privacy auditing with canary clients: the statistics (docs/privacy.md, "Audit").

An accountant's ε is a promise about the mechanism as written; an audit measures what the
code as run leaks. Canary clients send a fixed random direction u_i (scaled past the clip
norm) every time they are sampled; held-out canaries have a direction that is never sent.
After training, each canary's score is the cosine between its direction and what the model
moved, θ_0 − θ_T (updates are Δ = θ_start − θ_end, so a canary pushes the model along −u_i).

* :func:`one_shot_epsilon` — Andrew et al., "One-shot Empirical Privacy Estimation for
  Federated Learning" (ICLR 2024): fit a Gaussian to the inserted canaries' scores and one to
  the held-out ones; under the Gaussian mechanism they differ by μ standard deviations, i.e.
  μ-GDP, whose ε at δ is that of the Gaussian mechanism with noise multiplier 1/μ
  (``dp_accounting.get_epsilon_gaussian``). An *estimate*, not a bound.
* :func:`one_run_lower_bound` — Steinke, Nasr, Jagielski, "Privacy Auditing with One (1)
  Training Run" (NeurIPS 2023): each of m canaries is inserted with probability ½; guessing
  "inserted" for the k highest scores, an (ε, δ)-DP run makes at most v correct guesses
  except with probability p(ε) = P[Binomial(k, e^ε/(1+e^ε)) ≥ v] + α·δ·2m (their
  Theorem 3's δ term); the largest ε with p(ε) ≤ 1 − confidence (Bonferroni over the k
  tried) is a lower bound on ε at that confidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from regionfed.errors import ConfigError

__all__ = ["GUESS_FRACTIONS", "canary_direction", "canary_score_table", "canary_scores",
           "one_run_lower_bound", "one_shot_epsilon"]

#: the shares of canaries guessed "inserted" (top scores) that the lower bound tries
GUESS_FRACTIONS = (0.05, 0.1, 0.25, 0.5)
#: scores further apart than this many standard deviations give ε = ∞ (no noise at all)
_MAX_SEPARATION = 200.0


def canary_direction(seed: int, index: int, dim: int) -> torch.Tensor:
    """Canary ``index``'s direction: a uniformly random unit vector in R^dim (float32), a
    function of (``seed``, ``index``) only, so it is regenerated when scoring instead of
    kept (a few hundred canaries × a full model would not fit in memory).

    The directions are the audit's own randomness, not the mechanism's: seeding them is
    what lets the auditor know which direction belongs to which canary."""
    if index < 0 or dim < 1:
        raise ConfigError(f"canary index must be ≥ 0 and dimension ≥ 1, got {index}, {dim}")
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(index))
    direction = torch.randn(dim, generator=generator, dtype=torch.float64)
    return (direction / torch.linalg.vector_norm(direction)).float()


def canary_scores(seed: int, indices: Sequence[int], before: torch.Tensor,
                  after: torch.Tensor) -> np.ndarray:
    """cos(u_i, θ_before − θ_after) for every canary index i; 0 where nothing moved."""
    return canary_score_table(seed, indices, before, [after])[0]


def canary_score_table(seed: int, indices: Sequence[int], before: torch.Tensor,
                       afters: Sequence[torch.Tensor]) -> np.ndarray:
    """:func:`canary_scores` for several final models at once (rows: models, columns:
    canaries), generating each canary's direction once."""
    moved = torch.stack([(before.double() - a.double()).reshape(-1) for a in afters])
    norms = torch.linalg.vector_norm(moved, dim=1)
    unit = moved / torch.where(norms > 0, norms, torch.ones_like(norms))[:, None]
    table = np.zeros((len(afters), len(indices)))
    for column, i in enumerate(indices):
        table[:, column] = (unit @ canary_direction(seed, i, moved.shape[1]).double()).numpy()
    return table


def one_shot_epsilon(inserted: Sequence[float], held_out: Sequence[float],
                     delta: float) -> float:
    """Andrew et al.'s one-shot ε estimate from the two score samples (module docstring).

    μ = (mean(inserted) − mean(held_out)) / pooled std; ε = ε(δ) of μ-GDP, 0 when μ ≤ 0,
    ``math.inf`` when the samples are separated beyond :data:`_MAX_SEPARATION` std (a
    mechanism without noise).

    Raises:
        ConfigError: fewer than 2 scores in a sample, or δ ∉ (0, 1).
    """
    import dp_accounting

    a, b = np.asarray(inserted, dtype=float), np.asarray(held_out, dtype=float)
    if a.size < 2 or b.size < 2:
        raise ConfigError("the one-shot estimate needs ≥ 2 inserted and ≥ 2 held-out canaries")
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta}")
    gap = float(a.mean() - b.mean())
    spread = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
    if gap <= 0.0:
        return 0.0
    if spread == 0.0 or gap / spread > _MAX_SEPARATION:
        return math.inf
    return float(dp_accounting.get_epsilon_gaussian(spread / gap, delta))


def _p_value(canaries: int, guesses: int, correct: int, epsilon: float,
             delta: float) -> float:
    """Steinke et al. Theorem 3: P[≥ ``correct`` of ``guesses`` right | (ε, δ)-DP]."""
    from scipy.stats import binom

    q = 1.0 / (1.0 + math.exp(-epsilon))
    beta = float(binom.sf(correct - 1, guesses, q))
    if delta == 0.0:
        return beta
    steps = np.arange(1, correct + 1)
    alpha = float(np.max((binom.sf(correct - steps - 1, guesses, q) - beta) / steps,
                         initial=0.0))
    return min(beta + alpha * delta * 2 * canaries, 1.0)


def one_run_lower_bound(inserted: Sequence[float], held_out: Sequence[float], delta: float,
                        confidence: float = 0.95) -> float:
    """Steinke et al.'s one-run lower bound on ε at ``confidence`` (module docstring).

    The guesses are the k highest scores for k = ⌈f·m⌉, f in :data:`GUESS_FRACTIONS`
    (Bonferroni over them); returns 0 when no claim is rejected.

    Raises:
        ConfigError: no canaries, δ ∉ [0, 1), or confidence ∉ (0, 1).
    """
    scores = np.concatenate([np.asarray(inserted, float), np.asarray(held_out, float)])
    truth = np.concatenate([np.ones(len(inserted), bool), np.zeros(len(held_out), bool)])
    if scores.size == 0:
        raise ConfigError("the lower bound needs canaries")
    if not 0.0 <= delta < 1.0 or not 0.0 < confidence < 1.0:
        raise ConfigError(f"need delta in [0, 1) and confidence in (0, 1), got {delta}, "
                          f"{confidence}")
    order = np.argsort(-scores, kind="stable")
    significance = (1.0 - confidence) / len(GUESS_FRACTIONS)
    best = 0.0
    for fraction in GUESS_FRACTIONS:
        guesses = max(1, math.ceil(fraction * scores.size))
        correct = int(truth[order[:guesses]].sum())
        if _p_value(scores.size, guesses, correct, 0.0, delta) > significance:
            continue  # not even ε = 0 is rejected
        lo, hi = 0.0, 1.0
        while _p_value(scores.size, guesses, correct, hi, delta) <= significance:
            lo, hi = hi, 2 * hi
            if hi > 1e3:
                break
        for _ in range(60):  # bisection: the largest ε whose claim is rejected
            mid = (lo + hi) / 2
            if _p_value(scores.size, guesses, correct, mid, delta) <= significance:
                lo = mid
            else:
                hi = mid
        best = max(best, lo)
    return best
