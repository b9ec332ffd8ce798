"""Noise-aware regional shrinkage (empirical Bayes / positive-part James–Stein).

Each region's offset a_r (its accumulated deviation from the global model) is observed with
noise whose per-coordinate variance V_r the server knows: the DP noise of every regional
release is public (σ, C, q·n_r, the step size); without DP it is the client-sampling variance
of the regional means. Model the true offsets of one parameter block b as draws with
per-coordinate variance τ_b² around the global model (Ozkara et al., ICLR 2023; Grimberg et
al., 2021), so that ‖a_{r,b}‖²/d_b has expectation τ_b² + V_r. Then

    τ̂_b² = max(0, mean_r(‖a_{r,b}‖²/d_b − V_r)),      α_{r,b} = τ̂_b² / (τ̂_b² + V_r),

and the region is served θ + Σ_b α_{r,b}·a_{r,b}. When noise dominates (τ̂² ≈ 0) the regional
model falls back to the global one; when regions truly differ (τ̂² ≫ V_r) it keeps the
difference. It reads only released (noisy) offsets and public variances: post-processing,
no privacy cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["between_region_variance", "partition_blocks", "shrinkage_factors", "signal_share"]


def partition_blocks(groups: Mapping[str, torch.Tensor], dim: int) -> list[torch.Tensor]:
    """Disjoint bool masks covering all ``dim`` entries: each declared group's entries not
    already taken (in the given order), then the rest; empty masks are dropped."""
    taken = torch.zeros(dim, dtype=torch.bool)
    blocks = []
    for mask in groups.values():
        block = mask & ~taken
        if block.any():
            blocks.append(block)
            taken |= block
    if not taken.all():
        blocks.append(~taken)
    return blocks


def between_region_variance(offsets: Mapping[str, torch.Tensor], noise_var: Mapping[str, float],
                            block: torch.Tensor) -> float:
    """τ̂_b²: the per-coordinate variance of the true offsets on ``block`` (module doc)."""
    if not offsets:
        return 0.0
    size = int(block.sum())
    excess = [float(torch.linalg.vector_norm(a[block].double()) ** 2) / size - noise_var[r]
              for r, a in offsets.items()]
    return max(0.0, sum(excess) / len(excess))


def shrinkage_factors(offsets: Mapping[str, torch.Tensor],
                      noise_var: Mapping[str, Sequence[float]],
                      blocks: Sequence[torch.Tensor]) -> dict[str, list[float]]:
    """α_{r,b} for every region and block (module doc), from each region's per-block noise
    variance ``noise_var[r][b]``; 1 where an offset carries no noise (nothing to shrink)."""
    factors: dict[str, list[float]] = {r: [] for r in offsets}
    for b, block in enumerate(blocks):
        variance = {r: float(noise_var[r][b]) for r in offsets}
        tau2 = between_region_variance(offsets, variance, block)
        for r in offsets:
            v = variance[r]
            factors[r].append(1.0 if v <= 0.0 else tau2 / (tau2 + v))
    return factors


def signal_share(displacement: torch.Tensor, noise_energy: float, noise_energy_std: float = 0.0,
                 *, z: float = 2.0) -> float:
    """The share of a noisy displacement d = s + n's energy that is signal, in the same
    positive-part James–Stein form: with E‖n‖² = ``noise_energy`` known (public DP noise),
    E‖d‖² = ‖s‖² + E‖n‖², so ‖ŝ‖²/‖d‖² = 1 − E‖n‖²/‖d‖² — and 0 unless the excess
    ‖d‖² − E‖n‖² exceeds ``z`` standard deviations ``noise_energy_std`` of ‖n‖² (no signal
    detected: pure noise clears 2 of them 2.3 % of the time). 1 where nothing is noisy."""
    if noise_energy <= 0.0:
        return 1.0
    energy = float(torch.linalg.vector_norm(displacement.double()) ** 2)
    excess = energy - float(noise_energy)
    if excess <= z * float(noise_energy_std):
        return 0.0
    return excess / energy
