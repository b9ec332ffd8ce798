"""``dynamic``: per-region strategy routing (paper Alg. 1) and the D.6 safeguards.

Algorithm 1: ``meta`` if d_r > τ_conflict and h_r > τ_het; else ``interp`` if
|D_r| > β·mean_r' |D_r'|; else ``grad``. h_r = KL(P_r ‖ P_global) over intent (label)
histograms that clients report through k-ary randomized response (ε_LDP, debiased on the
server; :mod:`regionfed.privacy.randomized_response`).

Safeguards (paper App. D.6), each switchable: the conflict fed to the router can be an EMA
(Eq. 16, via ``RegionFedConfig.conflict_ema``); a region falls back to ``grad`` for the next
round when its regional validation accuracy dropped by more than ``fallback_drop`` round on
round (Eq. 15) or has not improved for ``fallback_patience`` rounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from regionfed.privacy.randomized_response import debiased_distribution, kl_divergence


def route(conflict: float, heterogeneity: float, region_size: float, mean_size: float, *,
          tau_conflict: float = 0.5, tau_het: float = 1.0, beta: float = 1.5) -> str:
    """Paper Algorithm 1 for one region."""
    if conflict > tau_conflict and heterogeneity > tau_het:
        return "meta"
    if region_size > beta * mean_size:
        return "interp"
    return "grad"


def heterogeneity(noisy_counts: Mapping[str, np.ndarray], num_classes: int,
                  epsilon_ldp: float) -> dict[str, float]:
    """h_r = KL(P_r ‖ P_global) from the regions' summed randomized-response counts."""
    total = sum(noisy_counts.values())
    p_global = debiased_distribution(total, num_classes, epsilon_ldp)
    return {r: kl_divergence(debiased_distribution(c, num_classes, epsilon_ldp), p_global)
            for r, c in noisy_counts.items()}


class ValidationFallback:
    """Eq. 15 plus a patience rule: which regions must use ``grad`` next round."""

    def __init__(self, drop: float = 0.05, patience: int = 2) -> None:
        self.drop = drop
        self.patience = patience
        self.history: dict[str, list[float]] = {}

    def record(self, accuracy: Mapping[str, float]) -> None:
        for region, acc in accuracy.items():
            self.history.setdefault(region, []).append(float(acc))

    def forced_to_grad(self, region: str) -> bool:
        accs = self.history.get(region, [])
        if len(accs) >= 2 and accs[-1] - accs[-2] < -self.drop:
            return True
        if self.patience and len(accs) > self.patience:
            best_before = max(accs[:-self.patience])
            if max(accs[-self.patience:]) <= best_before:
                return True
        return False
