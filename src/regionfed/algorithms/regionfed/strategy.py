"""The RegionFed strategy (paper Alg. 1–3 with SPEC §3's corrections) and ``region-fedavg``.

One round, as exchanges with the clients (all transport-free, see :mod:`..base`):

1. *train*: sampled clients (Poisson, rate q) send Δ_u from θ^t. Each region's coordinator
   releases g̃_r = :meth:`private_mean` of its clients (user-level DP: clip to C, one
   Gaussian, divide by q·n_r). The server sets g̃ = Σ_r p_r g̃_r and
   θ^{t+1} = θ^t − η_g g̃.
2. conflict d_r = ‖g̃_r − g̃‖ and α_r (Eq. 6), from DP outputs only.
3. the regional direction v_r, with the sign that *descends* (the paper's ρ(g̃_r − g̃)
   ascends; θ_r is added to θ):
   - ``grad``:   v_r = −(g̃_r − g̃) — no extra exchange;
   - ``meta``:   v_r = −∇L_r(θ^{t+1}) — a *gradient* exchange with the region's sampled
     clients at the look-ahead point, released through the same DP aggregate
     (first-order MAML step);
   - ``interp``: v_r = θ_r^local − θ^{t+1} — a *train* exchange: the region's sampled
     clients fine-tune θ^{t+1} for ``interp_epochs`` and the region averages (DP) their Δ.
   θ_r(ρ) = ρ·v_r.
4. ρ_r by golden-section search (Alg. 3) on the region's validation loss
   L_r(θ^{t+1} + α_r·ρ·v_r), every region searched in lock-step (*evaluate* exchanges), or a
   fixed ρ.
5. regional model θ^{t+1} + α_r θ_r, used to evaluate the region's clients.

Privacy: ``meta`` and ``interp`` release a second noisy regional aggregate per round, so their
ledger composes two releases per round. The ρ search reads validation losses that are not
noised; the ledger says so.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch

from regionfed.algorithms.base import (
    EVALUATE,
    GRADIENT,
    TRAIN,
    ClientContext,
    ClientResult,
    Strategy,
    TrainInstruction,
)
from regionfed.algorithms.regionfed.config import RegionFedConfig
from regionfed.algorithms.regionfed.conflict import ConflictCalibration, conflicts
from regionfed.algorithms.regionfed.golden_section import GoldenSection
from regionfed.errors import ConfigError
from regionfed.privacy.mechanism import DPConfig

VARIANTS = ("grad", "interp", "meta")
Exchange = Generator[list[TrainInstruction], list[ClientResult], Any]


class RegionFed(Strategy):
    """RegionFed with one adaptation strategy for every region (``grad``/``interp``/``meta``)."""

    def __init__(self, variant: str = "grad", config: RegionFedConfig | None = None, *,
                 sample_rate: float = 1.0, server_lr: float = 1.0,
                 dp: DPConfig | None = None) -> None:
        super().__init__(sample_rate=sample_rate, server_lr=server_lr, dp=dp)
        if variant not in VARIANTS:
            raise ConfigError(f"unknown RegionFed strategy {variant!r}; known: {VARIANTS}")
        self.variant = variant
        self.name = f"regionfed-{variant}"
        self.config = config or RegionFedConfig()
        self.releases_per_round = 1 if variant == "grad" else 2
        self.calibration = ConflictCalibration(self.config.tau, self.config.mu_perturbation)
        self.smoothed_conflict: dict[str, float] = {}
        self.alpha: dict[str, float] = {}
        self.adaptation: dict[str, torch.Tensor] = {}  # θ_r (already multiplied by ρ_r)

    # -- server side ---------------------------------------------------------------------
    def region_weights(self, regions: list[str]) -> dict[str, float]:
        if self.config.region_weights == "clients":
            sizes = {r: len(self.view.clients_in(r)) for r in regions}
        else:
            sizes = dict.fromkeys(regions, 1.0)
        total = sum(sizes.values())
        return {r: s / total for r, s in sizes.items()}

    def regional_means(self, results: list[ClientResult]) -> dict[str, torch.Tensor]:
        """g̃_r for every region that releases one (user mode: every region, always)."""
        out = {}
        for region in self.view.regions:
            mine = [r for r in results if r.region == region]
            expected = self.sample_rate * len(self.view.clients_in(region))
            mean = self.private_mean(mine, expected)
            if mean is not None:
                out[region] = mean
        return out

    def run_round(self, rnd: int) -> Exchange:
        sampled = self.sample_clients()
        results = yield [TrainInstruction(c, self.view.client_region[c], self.params)
                         for c in sampled]
        regional = self.regional_means(results)
        if not regional:
            return {"clients": len(results), "released_regions": 0}
        weights = self.region_weights(list(regional))
        global_update = sum(weights[r] * g for r, g in regional.items())
        theta_next = self.params - self.server_lr * global_update
        raw_conflict = conflicts(regional, global_update)
        conflict = self._smooth(raw_conflict)
        alpha = self._alphas(conflict)
        directions = yield from self._directions(regional, global_update, theta_next)
        rho, search_log = yield from self._choose_rho(theta_next, alpha, directions)
        self.params = theta_next
        self.alpha = alpha
        self.adaptation = {r: rho[r] * v for r, v in directions.items()}
        return {
            "clients": len(results),
            "update_norm": float(global_update.norm()),
            "conflict": raw_conflict,
            **({"conflict_ema": conflict} if self.config.conflict_ema is not None else {}),
            "alpha": alpha,
            "rho": rho,
            "strategy": dict.fromkeys(directions, self.variant),
            **search_log,
        }

    def _smooth(self, conflict: dict[str, float]) -> dict[str, float]:
        beta = self.config.conflict_ema
        if beta is None:
            return conflict
        for r, d in conflict.items():
            prev = self.smoothed_conflict.get(r)
            self.smoothed_conflict[r] = d if prev is None else beta * prev + (1 - beta) * d
        return {r: self.smoothed_conflict[r] for r in conflict}

    def _alphas(self, conflict: dict[str, float]) -> dict[str, float]:
        if self.config.fixed_alpha is not None:
            return dict.fromkeys(conflict, self.config.fixed_alpha)
        return self.calibration.alphas(conflict, self.config.alpha_min)

    def _directions(self, regional: dict[str, torch.Tensor], global_update: torch.Tensor,
                    theta_next: torch.Tensor) -> Exchange:
        """v_r per region (see the module docstring for the sign convention)."""
        if self.variant == "grad":
            return {r: -(g - global_update) for r, g in regional.items()}
        kind = GRADIENT if self.variant == "meta" else TRAIN
        config = {"epochs": self.config.interp_epochs} if self.variant == "interp" else {}
        # a fresh Poisson sample: the ledger composes the two releases of the round as two
        # independently subsampled Gaussian mechanisms, which needs independent samples
        results = yield [TrainInstruction(c, self.view.client_region[c], theta_next, config,
                                          kind) for c in self.sample_clients()
                         if self.view.client_region[c] in regional]
        second = self.regional_means(results)
        # meta: v = −∇L_r; interp: θ^local − θ^{t+1} = −(mean Δ) — both are −(aggregate)
        return {r: -second[r] for r in regional if r in second}

    def _choose_rho(self, theta_next: torch.Tensor, alpha: dict[str, float],
                    directions: dict[str, torch.Tensor]) -> Exchange:
        """Golden-section ρ per region on its validation loss, all regions in lock-step."""
        if not self.config.rho_search:
            return dict.fromkeys(directions, self.config.fixed_rho), {}
        a, b = (self.config.rho_interval_interp if self.variant == "interp"
                else self.config.rho_interval)
        searches = {r: GoldenSection(a, b, self.config.rho_tolerance) for r in directions}
        while True:
            asks = {r: s.ask() for r, s in searches.items()}
            asks = {r: x for r, x in asks.items() if x is not None}
            if not asks:
                break
            instructions = [
                TrainInstruction(c, r, theta_next + alpha[r] * x * directions[r], kind=EVALUATE)
                for r, x in asks.items() for c in self.view.clients_in(r)]
            results = yield instructions
            for r in asks:
                mine = [res for res in results if res.region == r]
                total = sum(res.num_examples for res in mine)
                loss = sum(res.metrics["loss_sum"] for res in mine) / max(total, 1)
                searches[r].tell(loss)
        rho = {r: s.best[0] for r, s in searches.items()}
        log = {"val_loss_rho0": {r: s.history[0][1] for r, s in searches.items()},
               "val_loss_rho": {r: s.best[1] for r, s in searches.items()},
               "rho_evaluations": {r: s.evaluations for r, s in searches.items()}}
        return rho, log

    # -- evaluation ----------------------------------------------------------------------
    def regional_params(self, region: str) -> torch.Tensor:
        """θ_region^r = θ + α_r θ_r (the global model where no adaptation exists yet)."""
        if region not in self.adaptation:
            return self.params
        return self.params + self.alpha[region] * self.adaptation[region]

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        return self.regional_params(region)


class RegionFedAvg(RegionFed):
    """``region-fedavg`` (SPEC §5): the hierarchy alone — client → region → global averaging,
    regional model θ + α·θ_r with θ_r = −ρ(g̃_r − g̃), fixed α and fixed ρ (no conflict
    signal, no search)."""

    def __init__(self, config: RegionFedConfig | None = None, *, alpha: float = 0.75,
                 rho: float = 1.0, **kwargs: Any) -> None:
        base = (config or RegionFedConfig()).model_copy(
            update={"fixed_alpha": alpha, "rho_search": False, "fixed_rho": rho})
        super().__init__("grad", base, **kwargs)
        self.name = "region-fedavg"
