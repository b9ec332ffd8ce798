"""The private-release object: every DP release of a run goes through it (docs/privacy.md).

Like an Opacus optimizer with its accountant hook or a pfl-research postprocessor, one object
both *applies* the mechanism — clip, add Gaussian noise — and *records* what it just did, at
that moment, as a :class:`ReleaseEvent`: the sampling rate of the clients it drew from, the
noise multiplier of the release as a whole, how many vectors it released jointly, and which
regions' users it touched. The privacy ledger composes exactly these events with
``dp-accounting``; no strategy declares a release count.

Joint releases. ``k`` vectors computed from one client sample (SCAFFOLD's Δy and Δc), each
clipped to C and each given N(0, σ²C²·I), are one Gaussian mechanism on their concatenation:
its L2 sensitivity is √k·C and its noise std σC, so its noise multiplier is σ/√k — one event,
not k independent ones.

Split releases. A global mean over every sampled client at noise multiplier σ_g plus, per
region, a mean of (a part of) the same clients' updates at σ_r (Bietti et al., ICML 2022) is,
for a user of region r, one Gaussian mechanism on the pair with noise multiplier
(σ_g⁻² + σ_r⁻²)^(−1/2) on one Poisson sample: one event per region. With σ_g = σ/√(1 − f)
and σ_r = σ/√f (:meth:`PrivateReleases.split_mean`) that is σ: the split costs what one
release at σ costs, whatever the share f of the budget given to the regions.

Randomness. The noise generator (and, through :func:`secret_rng`, the Poisson client samples
and randomized-response coins) is seeded from OS entropy (:mod:`secrets`), independently for
every strategy object — so per run × method × seed — and never from the run seed: knowing
``config.yaml`` does not let anyone regenerate the noise. ``dp.noise_seed`` makes it a function
of that number instead, for tests; the ledger then labels ε "deterministic noise — not
private". The generator's state is part of a round checkpoint, so ``--resume`` continues the
same noise stream.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from regionfed.errors import ConfigError
from regionfed.privacy.mechanism import (
    DPConfig,
    bounded_aggregate,
    clip_update,
    regional_aggregate,
)

__all__ = ["PrivateReleases", "ReleaseEvent", "secret_rng"]


@dataclass(frozen=True)
class ReleaseEvent:
    """One noisy release as the accountant sees it.

    Attributes:
        what: what was released (``"model update"``, ``"ρ grid scores"``, …).
        sample_rate: q of the Poisson sample the contributors came from (1 when every
            member of the protected unit takes part, e.g. ``region`` mode).
        noise_multiplier: noise std / L2 sensitivity of the release as a whole (σ/√k for k
            vectors released jointly); 0 = no noise (ε = ∞).
        vectors: how many vectors were released jointly.
        regions: the regions whose users can be in it (users of different regions are
            disjoint, so releases over disjoint regions compose in parallel).
    """

    what: str
    sample_rate: float
    noise_multiplier: float
    vectors: int
    regions: tuple[str, ...]


def secret_rng(config: DPConfig, fallback: np.random.Generator) -> np.random.Generator:
    """The generator for choices an adversary must not predict (Poisson samples): OS
    entropy under DP, ``fallback`` (seeded from the run) without DP or with ``noise_seed``."""
    if config.secret_randomness:
        return np.random.default_rng(secrets.randbits(128))
    return fallback


def noise_generator(config: DPConfig) -> torch.Generator:
    """A torch generator seeded from OS entropy, or from ``config.noise_seed`` (tests)."""
    seed = secrets.randbits(63) if config.noise_seed is None else int(config.noise_seed)
    return torch.Generator().manual_seed(seed)


class PrivateReleases:
    """Clips, noises and records every release of one strategy (docs/privacy.md).

    ``sample_rate`` is the client sampling rate q of the run; in ``region`` mode the
    protected unit is the region, which takes part in every release, so events carry q = 1.
    """

    def __init__(self, config: DPConfig, sample_rate: float) -> None:
        if not 0.0 < sample_rate <= 1.0:
            raise ConfigError(f"sample_rate must be in (0, 1], got {sample_rate}")
        self.config = config
        self.sample_rate = float(sample_rate)
        self.noise = noise_generator(config)
        #: events recorded since the runtime last collected them (:meth:`drain`)
        self.pending: list[ReleaseEvent] = []

    @property
    def accounting_sample_rate(self) -> float:
        return 1.0 if self.config.mode == "region" else self.sample_rate

    def mean(self, updates: Sequence[torch.Tensor], weights: Sequence[float] | None,
             expected_clients: float, *, regions: Sequence[str], what: str,
             dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
        """One vector per client → its (DP) mean (:func:`regional_aggregate`), recorded."""
        out = self.joint_mean([[u] for u in updates], weights, expected_clients,
                              regions=regions, what=what, dims=[dim], dtype=dtype)
        return None if out is None else out[0]

    def joint_mean(self, updates: Sequence[Sequence[torch.Tensor]],
                   weights: Sequence[float] | None, expected_clients: float, *,
                   regions: Sequence[str], what: str, dims: Sequence[int],
                   dtype: torch.dtype = torch.float32) -> list[torch.Tensor] | None:
        """k vectors per client from one sample → k (DP) means, recorded as ONE event with
        noise multiplier σ/√k (their joint sensitivity is √k·C). ``None`` when nothing can
        be released (non-``user`` modes with no client)."""
        k = len(dims)
        if any(len(u) != k for u in updates):
            raise ConfigError(f"every client must send {k} vectors to a joint release")
        means = [regional_aggregate([u[i] for u in updates], weights, self.config,
                                    expected_clients, self.noise, dim=dims[i], dtype=dtype)
                 for i in range(k)]
        if means[0] is None:
            return None
        self._record(what, self.config.sigma / math.sqrt(k), k, regions)
        return means

    def split_mean(self, updates: Sequence[torch.Tensor], weights: Sequence[float] | None,
                   regions_of: Sequence[str], expected: dict[str, float],
                   regional_share: float,
                   part: torch.Tensor | None, *, what: str, dim: int,
                   dtype: torch.dtype = torch.float32, regional_clip: float | None = None
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """A split budget (module docstring): the mean of every update at σ/√(1 − f) and,
        per region of ``expected`` (region → q·n_r), the mean of its clients' updates
        restricted to ``part`` (a bool mask; ``None`` = the whole vector) at σ/√f. One
        event per region at σ. ``user`` mode, or no DP (plain means); ``region`` mode has
        no per-client sensitivity to split.

        ``regional_clip`` (``None``: the run's C) is the clip norm C_r of the restricted
        updates in the regional means, their noise std σ/√f·C_r: each release's noise
        multiplier is relative to its own sensitivity, so the pair is still one Gaussian at
        σ (Σ_i Δ_i²/(σ_i C_i)² ≤ 1/σ_g² + 1/σ_r² = 1/σ²) whatever C_r — a small part holds a
        small share of an update's norm and need not carry noise sized for the whole. Under
        DP a part is cut from the *clipped* update, clip(clip(Δ_u, C)[part], C_r): where that
        second clip does not bind, a region's mean and the global mean's part average the
        same vectors, so their difference (the offset's step) carries no clipping bias.

        Returns (global mean, region → regional mean of the part; a region with no update
        is left out without DP)."""
        f = float(regional_share)
        if not 0.0 < f < 1.0:
            raise ConfigError(f"the regional share of the budget must be in (0, 1), got {f}")
        if self.config.mode == "region":
            raise ConfigError("a split budget needs user-level DP (dp.mode user) or no DP")
        updates = list(updates)
        if len(regions_of) != len(updates):
            raise ConfigError(f"got {len(updates)} updates but {len(regions_of)} regions")
        sigma = self.config.sigma
        total = sum(expected.values())
        global_mean = regional_aggregate(
            updates, weights, self.config.model_copy(update={"sigma": sigma / math.sqrt(1 - f)}),
            total, self.noise, dim=dim, dtype=dtype)
        clip = self.config.clip if regional_clip is None else float(regional_clip)
        if not (math.isfinite(clip) and clip > 0.0):
            raise ConfigError(f"the regional clip norm must be a finite number > 0, got {clip}")
        regional_config = self.config.model_copy(update={"sigma": sigma / math.sqrt(f),
                                                         "clip": clip})
        sub_dim = dim if part is None else int(part.sum())
        clipped = updates
        if part is not None and self.config.mode == "user":
            clipped = [clip_update(u, self.config.clip) for u in updates]
        regional = {}
        for region, expected_clients in expected.items():
            members = [i for i, r in enumerate(regions_of) if r == region]
            mine = [updates[i] if part is None else clipped[i][part] for i in members]
            mine_weights = None if weights is None else [weights[i] for i in members]
            mean = regional_aggregate(mine, mine_weights, regional_config, expected_clients,
                                      self.noise, dim=sub_dim, dtype=dtype)
            if mean is not None:
                regional[region] = mean
            self._record(what, sigma, 2, [region])
        return global_mean, regional

    def bounded_mean(self, vectors: Sequence[torch.Tensor], weights: Sequence[float] | None,
                     low: torch.Tensor, high: torch.Tensor, expected_clients: float, *,
                     regions: Sequence[str], what: str) -> torch.Tensor | None:
        """Per-client statistic vectors, clamped entry-wise → their (DP) mean at the
        selection noise multiplier (:func:`bounded_aggregate`), recorded."""
        sigma = self.config.noise_multiplier_of_selection
        out = bounded_aggregate(vectors, weights, low, high, self.config, sigma,
                                expected_clients, self.noise)
        if out is not None:
            self._record(what, sigma, 1, regions)
        return out

    def _record(self, what: str, noise_multiplier: float, vectors: int,
                regions: Sequence[str]) -> None:
        if self.config.mode == "off":
            noise_multiplier = 0.0
        self.pending.append(ReleaseEvent(what, self.accounting_sample_rate,
                                         float(noise_multiplier), int(vectors),
                                         tuple(sorted(regions))))

    def drain(self) -> list[ReleaseEvent]:
        """The events recorded since the last call (the runtime hands them to the ledger)."""
        events, self.pending = self.pending, []
        return events
