"""What a client decides on its own device, from its own validation split (no privacy cost:
nothing leaves the device): which of several candidate models it is evaluated with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import ClientContext, FederationView


def choose_on_validation(candidates: dict[str, torch.Tensor], client: ClientContext,
                         margin: float = 0.0, order: tuple[str, ...] | None = None,
                         peers: int = 1, prior_queries: float | None = None,
                         prior_strength: float | None = None,
                         score_variance: float | None = None) -> str:
    """The candidate with the best validation score on the client's own split, where any
    candidate other than the default must beat the default's score s₀ by ``margin``
    standard errors SE (ties: ``order``, which defaults to the candidates' own order).
    SE is √(s₀(1 − s₀)/n) of the default's score, or with ``prior_queries`` the paired one
    of the two scores' difference (:func:`paired_standard_error`); ``score_variance``
    replaces the per-query variance s₀(1 − s₀) in both (e.g. 1/4, its maximum, which does
    not vanish when a few queries put s₀ at 0 or 1). With ``prior_strength``
    κ the bar is κ·SE² instead (:func:`posterior_bar`: the challenger's gap has a positive
    posterior mean). The default is the best-scoring of the first ``peers`` candidates of
    ``order`` present (no margin among them; ties: ``order``) — with ``peers=1`` simply the
    first; the first when the client has no validation data."""
    if peers < 1:
        raise ValueError(f"peers must be >= 1, got {peers}")
    order = tuple(candidates) if order is None else order
    present = [name for name in order if name in candidates]
    score_sum, count = client.validation_score(candidates[present[0]])
    if not count:
        return present[0]
    scores = {present[0]: score_sum / count}
    for name in present[1:]:
        score_sum, _ = client.validation_score(candidates[name])
        scores[name] = score_sum / count
    default = max(present[:peers], key=scores.__getitem__)  # max keeps the first of ties
    s0 = min(max(scores[default], 0.0), 1.0)
    variance = s0 * (1.0 - s0) if score_variance is None else score_variance
    single_error = float(np.sqrt(variance / count))
    default_replicates: np.ndarray | None = None  # the default's jackknife, computed once
    best = default
    for name in present:
        if name == default or scores[name] <= scores[default]:
            continue
        error = single_error
        if prior_queries is not None:
            if default_replicates is None:
                default_replicates = client.validation_leave_one_out(candidates[default])
            difference = client.validation_leave_one_out(candidates[name]) - default_replicates
            error = paired_standard_error(difference, variance, count, prior_queries)
        bar = margin * error if prior_strength is None else posterior_bar(error,
                                                                           prior_strength)
        if scores[name] >= scores[default] + bar and \
                (best == default or scores[name] > scores[best]):
            best = name
    return best


def posterior_bar(standard_error: float, prior_strength: float) -> float:
    """How far a challenger's validation score must lead the default's for its true lead
    Δ to have a positive posterior mean. With a Gaussian prior Δ ~ N(−μ, τ²) (a challenger
    is expected to be μ behind the default, give or take τ) and the observed lead
    d ~ N(Δ, SE²), E[Δ | d] = (τ²·d − SE²·μ)/(τ² + SE²) > 0 ⟺ d > (μ/τ²)·SE², the bar
    κ·SE² with κ = μ/τ² = ``prior_strength``. Unlike a fixed number of standard errors it
    falls with the variance: a few queries need a large lead, many queries a small one."""
    return prior_strength * standard_error ** 2


def paired_standard_error(difference: np.ndarray, prior_variance: float, n: int,
                          prior_queries: float) -> float:
    """The standard error of the difference of two validation scores taken on the same
    ``n`` queries, √(ṽ/n), from ``difference``: d₍ᵢ₎, the difference without query i (the
    two scores' jackknife replicates, :meth:`ClientContext.validation_leave_one_out`).
    v̂ = (n − 1)·Σᵢ(d₍ᵢ₎ − d̄)² is the jackknife's per-query variance of the difference
    (Efron & Stein 1981: any score, an F1 too; for a mean over queries it is the sample
    variance of the per-query differences).
    With few queries v̂ is itself noisy (two queries that agree give 0), so it is moderated
    towards ``prior_variance`` v₀ — the single-score bound s₀(1 − s₀) — as a prior worth
    ν = ``prior_queries`` queries (Smyth 2004): ṽ = (ν·v₀ + (n − 1)·v̂)/(ν + n − 1) — the
    single-score rule for one query or ν → ∞, the paired one as the queries grow."""
    dof = max(len(difference) - 1, 0)
    if dof == 0:
        return float(np.sqrt(prior_variance / n))
    jackknife = dof * float(np.sum((difference - difference.mean()) ** 2))
    moderated = (prior_queries * prior_variance + dof * jackknife) / (prior_queries + dof)
    return float(np.sqrt(moderated / n))


def choice_counts(choices: dict[str, str], view: FederationView, names: Sequence[str]
                  ) -> dict[str, Any]:
    """The evaluation diagnostic of an on-device choice: per region, how many clients were
    last evaluated with each of ``names`` (``{}`` before any evaluation)."""
    if not choices:
        return {}
    counts = {r: dict.fromkeys(names, 0) for r in view.regions}
    for client_id, choice in choices.items():
        counts[view.client_region[client_id]][choice] += 1
    return {"choices": counts}
