"""Clipping and the regional Gaussian mechanism (paper Algorithm 2; docs/privacy.md).

Every function works on flat 1-D float tensors (the only form in which strategies see a
model, see :mod:`regionfed.runtime.params`).

Three modes, chosen by :class:`DPConfig.mode`:

``user`` (default; docs/privacy.md) — user-level DP.
    Each client update is clipped, ``Δ̄_u = Δ_u · min(1, C/‖Δ_u‖₂)``; the region releases

        g̃_r = (Σ_{u sampled} Δ̄_u + N(0, σ²C²·I)) / (q·n_r)

    with ONE noise draw per region and round and the *fixed* denominator ``q·n_r`` (the
    expected number of clients sampled under Poisson sampling at rate q). Adding or removing
    one user changes the noisy sum by at most C in L2, so each round is the Poisson-subsampled
    Gaussian mechanism with noise multiplier σ; dividing by a constant is post-processing.
    Dividing by the *realised* count instead would make the denominator depend on whether the
    user is present and break that sensitivity bound. Every user belongs to exactly one
    region, so the regions compose in parallel (see :mod:`regionfed.privacy.ledger`).

``region`` (the paper's Algorithm 2) — region-level DP.
    ``g_r = Σ_u w_u Δ_u / Σ_u w_u`` (data-size weights), then ``ḡ_r = g_r · min(1, C/‖g_r‖₂)``,
    then ``g̃_r = ḡ_r + N(0, σ²C²·I)``. Clipping the *aggregate* bounds the influence of the
    region's data as a whole, so this protects one whole region's data — not one user
    specifically (a user's share of ḡ_r is not separately bounded or noised).

``off`` — no DP: the data-size-weighted mean, no clipping, no noise (ε = ∞).

σ = 0 in ``user`` or ``region`` mode keeps the clipping but adds no noise: ε = ∞ as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from regionfed.errors import ConfigError, NumericalError

__all__ = [
    "DPConfig",
    "bound_sensitivity",
    "bounded_aggregate",
    "clip_update",
    "noise_std_of_bounded_mean",
    "noise_std_of_mean",
    "regional_aggregate",
]

DPMode = Literal["user", "region", "off"]


class DPConfig(BaseModel):
    """Differential-privacy settings of a run (docs/privacy.md).

    Attributes:
        mode: ``"user"`` (user-level DP, fixed-denominator sum; default), ``"region"`` (paper
            Algorithm 2: clip and noise the data-size-weighted regional aggregate; protects a
            whole region) or ``"off"`` (no DP).
        sigma: noise multiplier σ ≥ 0; the noise std on the noisy sum is σ·C. σ = 0 (or
            ``mode="off"``) means no noise, i.e. ε = ∞.
        clip: L2 clipping norm C > 0.
        delta: δ of the (ε, δ) guarantee, in (0, 1).
        clip_on_client: ``user`` mode only: every client clips what it sends before it
            leaves (:meth:`Strategy.clip_released`), so no unclipped update ever reaches
            the server or its transport — what secure aggregation needs, where the server
            only sees a sum. The server's clip then changes nothing (same results).
        noise_seed: ``None`` (default): the noise, the Poisson client samples and the
            randomized-response coins come from OS entropy, so nobody can regenerate them
            (not even from the run seed). An integer makes them a function of this seed —
            for tests only: such a run is **not private**, and says so wherever its ε
            appears.
        selection_sigma: noise multiplier of the private model-selection releases
            (RegionFed's ρ grid scores, ensemble weights, dynamic fallback); ``None`` = σ.
        selection_clip: bound b on each user's validation-loss difference
            L_u(ρ) − L_u(0) (and accuracy difference) entering a selection release; the
            release's L2 sensitivity is b·√(number of entries) (docs/privacy.md).
        allow_unaccounted: permit a data-dependent choice that is *not* a DP release
            (e.g. RegionFed's un-noised ρ line search) under DP. The run then lists it in
            ``privacy.json``'s ``unaccounted``: ε does not cover it.
    """

    model_config = ConfigDict(extra="forbid")

    mode: DPMode = "user"
    sigma: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    clip: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    delta: float = Field(default=1e-5, gt=0.0, lt=1.0)
    clip_on_client: bool = False
    noise_seed: int | None = Field(default=None, ge=0)
    selection_sigma: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    selection_clip: float = Field(default=0.1, gt=0.0, allow_inf_nan=False)
    allow_unaccounted: bool = False

    @property
    def adds_noise(self) -> bool:
        """True when the mechanism adds Gaussian noise (mode ≠ off and σ > 0), i.e. ε < ∞."""
        return self.mode != "off" and self.sigma > 0.0

    @property
    def secret_randomness(self) -> bool:
        """True when noise, client samples and randomized-response coins must come from OS
        entropy: DP is on and no test ``noise_seed`` was set."""
        return self.adds_noise and self.noise_seed is None

    @property
    def noise_multiplier_of_selection(self) -> float:
        """σ of the private model-selection releases (``selection_sigma``, default σ)."""
        return self.sigma if self.selection_sigma is None else self.selection_sigma


def clip_update(update: torch.Tensor, clip: float) -> torch.Tensor:
    """L2 clipping ``Δ · min(1, C/‖Δ‖₂)`` (paper Alg. 2 "Clip gradient").

    Returns a new tensor (never a view of ``update``). A zero vector stays zero; an update
    with ‖Δ‖₂ ≤ C is returned unchanged (as a copy).

    Raises:
        ConfigError: if ``clip`` is not a finite number > 0.
    """
    if not (clip > 0.0 and clip < float("inf")):
        raise ConfigError(f"clipping norm C must be finite and > 0, got {clip}")
    norm = float(torch.linalg.vector_norm(update.detach().to(torch.float64)))
    if norm <= clip:
        return update.clone()
    return update * (clip / norm)


def noise_std_of_mean(config: DPConfig, expected_clients: float) -> float:
    """Per-coordinate std of the noise on the released regional update g̃_r.

    ``user`` mode: σC/(q·n_r) (``expected_clients`` = q·n_r); ``region`` mode: σC;
    ``off``: 0. (docs/privacy-cohort.md: why this is large for small regions.)
    """
    if config.mode == "off":
        return 0.0
    if config.mode == "region":
        return config.sigma * config.clip
    _check_expected_clients(expected_clients)
    return config.sigma * config.clip / expected_clients


def regional_aggregate(
    updates: Sequence[torch.Tensor],
    weights: Sequence[float] | None,
    config: DPConfig,
    expected_clients: float,
    generator: torch.Generator,
    *,
    dim: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor | None:
    """The regional coordinator's (noisy) aggregate g̃_r of one round (docs/privacy.md).

    Args:
        updates: the sampled clients' flat updates Δ_u (pseudo-gradients), all of one shape.
        weights: data-size weights |D_u| (used by ``region`` and ``off``; ignored in ``user``
            mode, where every user counts the same: weighting by data size would let one user
            move the sum by more than C and change the sensitivity). ``None`` = uniform.
        config: the DP settings.
        expected_clients: q·n_r, the expected number of sampled clients under Poisson
            sampling at rate q; the FIXED denominator of ``user`` mode (not the realised
            count). Ignored by the other modes.
        generator: the torch generator for the noise (same seed → same noise).
        dim, dtype: shape and dtype of the result when ``updates`` is empty in ``user`` mode
            (otherwise taken from the updates; ``dim`` must then match if given).

    Returns:
        ``user``: ``(Σ_u clip(Δ_u, C) + N(0, σ²C²·I)) / expected_clients``. With no update
        (nobody sampled) this is still released as ``N(0, σ²C²·I) / expected_clients`` —
        the accountant assumes a noisy sum is published every round, whoever was sampled.
        ``region``: ``clip(Σ w_u Δ_u / Σ w_u, C) + N(0, σ²C²·I)``; ``None`` if no update.
        ``off``: ``Σ w_u Δ_u / Σ w_u``; ``None`` if no update (the caller skips the region).

    Raises:
        NumericalError: if an update contains NaN or ±inf (the message names its index).
        ConfigError: on mismatched shapes/lengths, invalid weights, ``expected_clients`` ≤ 0
            in ``user`` mode, or an empty ``user``-mode round without ``dim``.
    """
    updates = list(updates)
    if weights is not None:
        weights = [float(w) for w in weights]
        if len(weights) != len(updates):
            raise ConfigError(f"got {len(updates)} updates but {len(weights)} weights")
    _check_updates(updates, dim)

    if config.mode == "user":
        _check_expected_clients(expected_clients)
        if updates:
            total = torch.zeros_like(updates[0])
            for update in updates:
                total += clip_update(update, config.clip)
        else:
            if dim is None:
                raise ConfigError("user-mode aggregate of an empty round needs `dim`")
            total = torch.zeros(dim, dtype=dtype)
        if config.sigma > 0.0:
            total = total + _gaussian(total, config.sigma * config.clip, generator)
        return total / expected_clients

    if not updates:
        return None
    mean = _weighted_mean(updates, weights)
    if config.mode == "off":
        return mean
    clipped = clip_update(mean, config.clip)
    if config.sigma > 0.0:
        clipped = clipped + _gaussian(clipped, config.sigma * config.clip, generator)
    return clipped


def bounded_aggregate(
    vectors: Sequence[torch.Tensor],
    weights: Sequence[float] | None,
    low: torch.Tensor,
    high: torch.Tensor,
    config: DPConfig,
    sigma: float,
    expected_clients: float,
    generator: torch.Generator,
) -> torch.Tensor | None:
    """The (noisy) mean of small per-user statistic vectors bounded entry by entry.

    Each entry i of a user's vector is clamped to ``[low_i, high_i]``; adding or removing
    one user then moves the sum by at most ``S = ‖max(|low|, |high|)‖₂`` in L2, so

        ``user``:   (Σ_u clamp(x_u) + N(0, σ²S²·I)) / expected_clients
        ``region``: clamp(Σ w_u x_u / Σ w_u) + N(0, σ²S²·I)
        ``off``:    Σ w_u x_u / Σ w_u

    is the (subsampled) Gaussian mechanism with noise multiplier σ — the same shape as
    :func:`regional_aggregate`, with entry-wise bounds in place of the L2 clip (the private
    model selection's loss and accuracy scores, docs/privacy.md). Empty ``user``-mode rounds
    still release the noise; other modes return ``None`` when there is nothing.

    Raises:
        NumericalError: a vector with NaN/inf. ConfigError: shapes or bounds that disagree.
    """
    vectors = list(vectors)
    if low.shape != high.shape or low.dim() != 1 or not bool((low <= high).all()):
        raise ConfigError("bounds must be 1-D tensors of one shape with low ≤ high")
    _check_updates(vectors, low.numel())
    if config.mode == "user":
        _check_expected_clients(expected_clients)
        total = torch.zeros(low.numel(), dtype=torch.float64)
        for vector in vectors:
            total += torch.minimum(torch.maximum(vector.to(torch.float64), low), high)
        if sigma > 0.0:
            total = total + _gaussian(total, sigma * bound_sensitivity(low, high), generator)
        return total / expected_clients
    if not vectors:
        return None
    mean = _weighted_mean([v.to(torch.float64) for v in vectors],
                          None if weights is None else [float(w) for w in weights])
    if config.mode == "off":
        return mean
    clamped = torch.minimum(torch.maximum(mean, low), high)
    if sigma > 0.0:
        clamped = clamped + _gaussian(clamped, sigma * bound_sensitivity(low, high), generator)
    return clamped


def noise_std_of_bounded_mean(config: DPConfig, low: torch.Tensor, high: torch.Tensor,
                              expected_clients: float) -> float:
    """Per-entry noise std of a :func:`bounded_aggregate` release at the selection σ:
    σ_sel·S/(q·n_r) in ``user`` mode, σ_sel·S in ``region`` mode, 0 without DP noise."""
    if not config.adds_noise:
        return 0.0
    std = config.noise_multiplier_of_selection * bound_sensitivity(low, high)
    return std if config.mode == "region" else std / expected_clients


def bound_sensitivity(low: torch.Tensor, high: torch.Tensor) -> float:
    """L2 sensitivity of a sum of vectors clamped to [low, high] under add/remove-one."""
    return float(torch.linalg.vector_norm(torch.maximum(low.abs(), high.abs()).double()))


def _check_expected_clients(expected_clients: float) -> None:
    if not (expected_clients > 0.0 and expected_clients < float("inf")):
        raise ConfigError(
            f"expected_clients (q·n_r) must be finite and > 0, got {expected_clients}"
        )


def _check_updates(updates: list[torch.Tensor], dim: int | None) -> None:
    if not updates:
        return
    shape = updates[0].shape
    for i, update in enumerate(updates):
        if not torch.is_floating_point(update):
            raise ConfigError(f"update {i} has non-float dtype {update.dtype}")
        if update.shape != shape:
            raise ConfigError(
                f"update {i} has shape {tuple(update.shape)}, expected {tuple(shape)}"
            )
        if not bool(torch.isfinite(update).all()):
            raise NumericalError(f"update {i} contains NaN or infinite values")
    if dim is not None and updates[0].numel() != dim:
        raise ConfigError(f"updates have {updates[0].numel()} entries, dim={dim}")


def _weighted_mean(updates: list[torch.Tensor], weights: list[float] | None) -> torch.Tensor:
    """``Σ w_u Δ_u / Σ w_u`` (paper Alg. 2, regional gradient with data-size weights)."""
    if weights is None:
        weights = [1.0] * len(updates)
    if any(not (w >= 0.0 and w < float("inf")) for w in weights):
        raise ConfigError(f"weights must be finite and ≥ 0, got {weights}")
    total_weight = sum(weights)
    if total_weight <= 0.0:
        raise ConfigError("weights sum to zero")
    mean = torch.zeros_like(updates[0])
    for w, update in zip(weights, updates, strict=True):
        mean += (w / total_weight) * update
    return mean


def _gaussian(like: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """One draw of N(0, std²·I) shaped like ``like``."""
    noise = torch.randn(like.shape, generator=generator, dtype=like.dtype,
                        device=generator.device)
    return noise.to(like.device) * std
