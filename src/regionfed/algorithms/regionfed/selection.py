"""Private model selection for RegionFed under DP (docs/privacy.md, "Private selection").

Golden-section search (Alg. 3), the D.6 validation fallback and the Eq. 17 ensemble weights
all read validation statistics of a region's users. Under DP each of those choices reaches
a released model, so it must itself be a DP release. Here one release per region and round
carries everything they need:

* a fresh Poisson sample (rate q) of the region's clients scores a fixed grid of candidates
  — ρ = 0 (the region's current model without this round's step) and ``points`` values
  evenly spaced on the ρ interval, for every adaptation strategy s the region considers —
  on its validation split;
* each user's vector holds, per (s, ρ_k ≠ 0), its validation-loss difference
  L_u(s, ρ_k) − L_u(0) clamped to ±b and, when accuracy is needed (fallback, ensemble), its
  accuracy difference A_u(s, ρ_k) − A_u(0) clamped to ±b plus A_u(0) ∈ [0, 1];
* the region releases the noisy sum of those vectors (one Gaussian with L2 sensitivity
  ‖bounds‖₂, :meth:`~regionfed.privacy.releases.PrivateReleases.bounded_mean`) over the fixed
  denominator q·n_r;
* the server picks ρ_s = argmin of the noisy mean loss differences among the candidates
  that beat ρ = 0 (difference 0) by more than ``selection_margin`` noise standard
  deviations of a mean — the noise std is public (σ, the bounds, q·n_r), so the margin is
  post-processing too, and keeps pure noise from moving a region off its model; the
  member's accuracy is Â(0) + ΔÂ(s, ρ_s), from the same release.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def rho_candidates(interval: tuple[float, float], points: int) -> list[float]:
    """The nonzero grid: ``points`` values evenly spaced on (a, b] (and a itself if a > 0)."""
    a, b = interval
    grid = [float(x) for x in np.linspace(a, b, points + 1)[1:]]
    return ([float(a)] if a > 0 else []) + grid


@dataclass(frozen=True)
class SelectionLayout:
    """Where each (strategy, candidate) sits in a user's selection vector.

    ``grid[s]`` is strategy s's list of nonzero ρ candidates (in the order they are
    evaluated, after the shared ρ = 0 model); ``with_accuracy`` adds the accuracy entries.
    """

    grid: dict[str, list[float]]
    with_accuracy: bool
    clip: float

    @property
    def candidates(self) -> list[tuple[str, float]]:
        """(strategy, ρ) of every nonzero candidate, in vector order."""
        return [(s, rho) for s, rhos in self.grid.items() for rho in rhos]

    @property
    def size(self) -> int:
        k = len(self.candidates)
        return 2 * k + 1 if self.with_accuracy else k

    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Entry-wise (low, high): ±b for differences, [0, 1] for the accuracy at ρ = 0."""
        k = len(self.candidates)
        low = torch.full((self.size,), -self.clip, dtype=torch.float64)
        high = torch.full((self.size,), self.clip, dtype=torch.float64)
        if self.with_accuracy:
            low[2 * k], high[2 * k] = 0.0, 1.0
        return low, high

    def user_vector(self, loss: list[float], accuracy: list[float] | None) -> torch.Tensor:
        """One user's vector from its mean validation loss (and accuracy) at the shared
        ρ = 0 model (index 0) and at every candidate (indices 1…, vector order)."""
        out = [loss[i + 1] - loss[0] for i in range(len(self.candidates))]
        if self.with_accuracy:
            out += [accuracy[i + 1] - accuracy[0] for i in range(len(self.candidates))]
            out.append(accuracy[0])
        return torch.tensor(out, dtype=torch.float64)

    def choose(self, noisy_mean: torch.Tensor, search: bool, fixed: float,
               margin: float = 0.0) -> dict[str, tuple[float, float, float | None]]:
        """Per strategy: (ρ, noisy loss gain over ρ = 0, noisy accuracy or ``None``).

        With ``search`` ρ is the argmin of the noisy loss differences among the candidates
        that beat ρ = 0 by more than ``margin`` (in loss units; e.g. two noise standard
        deviations of one mean, so pure noise rarely moves a region off its model), else 0;
        ties go to the smaller ρ. Without ``search``, the fixed ρ (which must be the
        strategy's only candidate). Only the released means are read: post-processing."""
        k = len(self.candidates)
        out = {}
        for s, rhos in self.grid.items():
            start = next(i for i, c in enumerate(self.candidates) if c[0] == s)
            gains = [0.0] + [float(noisy_mean[start + j]) for j in range(len(rhos))]
            options = [0.0, *rhos]
            eligible = [0] + [j for j in range(1, len(options)) if gains[j] < -margin]
            best = (min(eligible, key=lambda j: (gains[j], options[j]))
                    if search else options.index(fixed))
            accuracy = None
            if self.with_accuracy:
                base = float(noisy_mean[2 * k])
                accuracy = base + (float(noisy_mean[k + start + best - 1]) if best else 0.0)
            out[s] = (options[best], gains[best], accuracy)
        return out
