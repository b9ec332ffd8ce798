"""Gradient conflict and the adaptive personalization weight (paper §3.2, Eq. 6).

d_r = ‖g̃_r − g̃‖₂ is computed from DP outputs only (post-processing, no privacy cost).
α_r = α_min + (1 − α_min) · sigmoid((d_r − μ) / τ), with μ the median of the first round's
conflicts (calibrated once) and τ = 1 (paper) or ``auto`` = the median absolute deviation of
the first round's conflicts (d_r's scale depends on C, σ and the model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

#: floor for τ = auto, relative to μ, so a round-1 MAD of 0 never divides by zero
_MIN_RELATIVE_TAU = 1e-3


def conflicts(regional: Mapping[str, torch.Tensor], global_update: torch.Tensor
              ) -> dict[str, float]:
    """d_r = ‖g̃_r − g̃‖₂ for every region."""
    return {r: float(torch.linalg.vector_norm(g - global_update)) for r, g in regional.items()}


def adaptive_alpha(conflict: float, mu: float, tau: float, alpha_min: float) -> float:
    """Paper Eq. 6: α = α_min + (1 − α_min)·sigmoid((d − μ)/τ) ∈ [α_min, 1]."""
    z = (conflict - mu) / tau
    sig = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
    return alpha_min + (1.0 - alpha_min) * sig


class ConflictCalibration:
    """μ and τ of Eq. 6, fixed from the first round that has conflicts (then never changed).

    ``mu_perturbation`` multiplies μ by (1 + x) (the paper's robustness ablation).
    """

    def __init__(self, tau: float | str = 1.0, mu_perturbation: float = 0.0) -> None:
        self.tau_setting = tau
        self.mu_perturbation = mu_perturbation
        self.mu: float | None = None
        self.tau: float | None = None

    @property
    def calibrated(self) -> bool:
        return self.mu is not None

    def calibrate(self, first_round: Mapping[str, float]) -> None:
        values = np.array(list(first_round.values()), dtype=float)
        median = float(np.median(values))
        self.mu = median * (1.0 + self.mu_perturbation)
        if self.tau_setting == "auto":
            mad = float(np.median(np.abs(values - median)))
            self.tau = max(mad, _MIN_RELATIVE_TAU * max(median, 1e-12))
        else:
            self.tau = float(self.tau_setting)

    def alphas(self, conflict: Mapping[str, float], alpha_min: float) -> dict[str, float]:
        if not self.calibrated:
            self.calibrate(conflict)
        return {r: adaptive_alpha(d, self.mu, self.tau, alpha_min) for r, d in conflict.items()}
