"""The RegionFed strategy (paper Alg. 1–3, with the corrections below) and ``region-fedavg``.

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
   - ``dynamic``: each region routed to one of the three by Algorithm 1
     (:mod:`.routing`), with the D.6 validation fallback to ``grad``.
   - ``ensemble`` (paper D.6, Eq. 17): every region computes all three; its model is the
     confidence-weighted vote of the three regional models, w_s ∝ regional validation
     accuracy of strategy s (three releases per round).
   θ_r(ρ) = ρ·v_r.
4. ρ_r by a line search on the region's validation loss
   L_r(θ^{t+1} + α_r·(θ_r^prev + ρ·v_r)), every region searched in lock-step (*evaluate*
   exchanges; ``line_search``: Brent's bounded minimisation by default, or Alg. 3's golden
   section — the same objective and tolerance), or a fixed ρ. θ_r^prev = 0 in the paper's
   method; with ``persist_adaptation`` (``regionfed-persist``) the adaptation accumulates
   across rounds, θ_r^{t+1} = θ_r^t + ρ_t v_r^t.
5. regional model θ^{t+1} + α_r θ_r, used to evaluate the region's clients.

Privacy: every release goes through the strategy's mechanism (``self.releases``), which
records what the ledger composes: g̃_r each round, the second regional aggregate of
``meta``/``interp`` (a fresh Poisson sample), and under DP the private model selection
(:mod:`.selection`): ρ, the dynamic fallback's accuracy and the ensemble weights come from one
noisy release of grid scores per region and round instead of un-noised validation losses.
Golden-section search stays the default without DP; under DP it is refused unless
``dp.allow_unaccounted`` is set, and then listed as not covered by ε.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import (
    EVALUATE,
    GRADIENT,
    HISTOGRAM,
    TRAIN,
    ClientContext,
    ClientResult,
    Ensemble,
    Strategy,
    TrainInstruction,
)
from regionfed.algorithms.regionfed.config import RegionFedConfig
from regionfed.algorithms.regionfed.conflict import ConflictCalibration, conflicts
from regionfed.algorithms.regionfed.line_search import search_regions_on_validation
from regionfed.algorithms.regionfed.personalization import personalize_region
from regionfed.algorithms.regionfed.routing import ValidationFallback, heterogeneity, route
from regionfed.algorithms.regionfed.selection import SelectionLayout, rho_candidates
from regionfed.errors import ConfigError
from regionfed.privacy.mechanism import DPConfig, noise_std_of_bounded_mean

BASE_VARIANTS = ("grad", "interp", "meta")
VARIANTS = (*BASE_VARIANTS, "dynamic", "ensemble")
Exchange = Generator[list[TrainInstruction], list[ClientResult], Any]


class RegionFed(Strategy):
    """RegionFed with one adaptation strategy for every region (``grad``/``interp``/``meta``)."""

    # updates are used only through the regional means g̃_r (DP off: data-weighted)
    secure_aggregation = True

    def __init__(self, variant: str = "grad", config: RegionFedConfig | None = None, *,
                 sample_rate: float = 1.0, server_lr: float = 1.0,
                 dp: DPConfig | None = None) -> None:
        super().__init__(sample_rate=sample_rate, server_lr=server_lr, dp=dp)
        if variant not in VARIANTS:
            raise ConfigError(f"unknown RegionFed strategy {variant!r}; known: {VARIANTS}")
        self.variant = variant
        self.name = f"regionfed-{variant}"
        self.config = config or RegionFedConfig()
        self.private_selection = self._selection_policy()
        self.calibration = ConflictCalibration(self.config.tau, self.config.mu_perturbation)
        self.smoothed_conflict: dict[str, float] = {}
        self.alpha: dict[str, float] = {}
        self.adaptation: dict[str, torch.Tensor] = {}  # θ_r (already multiplied by ρ_r)
        self.last_regional: dict[str, torch.Tensor] = {}  # g̃_r of the latest round
        #: ``ensemble``: region → strategy → θ_r, and the vote weights w_s (Eq. 17)
        self.members: dict[str, dict[str, torch.Tensor]] = {}
        self.member_weights: dict[str, dict[str, float]] = {}
        self.heterogeneity: dict[str, float] | None = None
        self.fallback = ValidationFallback(self.config.fallback_drop,
                                           self.config.fallback_patience)

    def _selection_policy(self) -> bool:
        """True when ρ / fallback / ensemble weights come from the private grid release
        (``rho_selection`` grid, or auto under DP). Under DP, the un-noised golden-section
        path is refused unless ``dp.allow_unaccounted``, and then recorded as not covered."""
        mode = self.config.rho_selection
        private = mode == "grid" or (mode == "auto" and self.dp.adds_noise)
        if private or not self.dp.adds_noise:
            return private
        choices = self.data_dependent_choices()
        if choices and not self.dp.allow_unaccounted:
            raise ConfigError(
                f"{self.name} with regionfed.rho_selection=golden reads un-noised validation "
                f"data under DP ({'; '.join(choices)}); use rho_selection grid (private) or "
                "set dp.allow_unaccounted=true to run it uncovered by ε")
        self.unaccounted.extend(f"{c} (un-noised validation data)" for c in choices)
        return False

    def data_dependent_choices(self) -> list[str]:
        """The choices of this configuration that read clients' validation data."""
        choices = []
        if self.config.rho_search:
            choices.append("ρ search")
        if self._uses_fallback:
            choices.append("dynamic fallback")
        if self.variant == "ensemble":
            choices.append("ensemble weights")
        return choices

    @property
    def _uses_fallback(self) -> bool:
        return self.variant == "dynamic" and self.config.fallback

    # -- server side ---------------------------------------------------------------------
    def region_weights(self, regions: list[str]) -> dict[str, float]:
        if self.config.region_weights == "clients":
            sizes = {r: len(self.view.clients_in(r)) for r in regions}
        else:
            sizes = dict.fromkeys(regions, 1.0)
        total = sum(sizes.values())
        return {r: s / total for r, s in sizes.items()}

    def regional_means(self, results: list[ClientResult], what: str = "regional update"
                       ) -> dict[str, torch.Tensor]:
        """g̃_r for every region that releases one (user mode: every region, always)."""
        out = {}
        for region in self.view.regions:
            mine = [r for r in results if r.region == region]
            expected = self.sample_rate * len(self.view.clients_in(region))
            mean = self.private_mean(mine, expected, [region], what)
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
        log: dict[str, Any] = {
            "clients": len(results),
            "update_norm": float(global_update.norm()),
            "conflict": raw_conflict,
            **({"conflict_ema": conflict} if self.config.conflict_ema is not None else {}),
            "alpha": alpha,
        }
        self.last_regional = regional
        if self.variant == "ensemble":
            log.update((yield from self._ensemble_round(regional, global_update, theta_next,
                                                        alpha)))
            return log
        extra: dict[str, Any] = {}
        if self.variant == "dynamic":
            chosen = yield from self._route(conflict, list(regional), extra)
        else:
            chosen = dict.fromkeys(regional, self.variant)
        directions = yield from self._directions(regional, global_update, theta_next, chosen)
        previous = {r: self.adaptation[r] if self.config.persist_adaptation
                    and r in self.adaptation else torch.zeros_like(v)
                    for r, v in directions.items()}
        accuracy: dict[str, float] | None = None
        if self.private_selection and (self.config.rho_search or self._uses_fallback):
            picked = yield from self._private_select(
                theta_next, alpha, {r: {chosen[r]: v} for r, v in directions.items()},
                previous, with_accuracy=self._uses_fallback)
            rho = {r: picked[r][chosen[r]][0] for r in directions}
            search_log = {"val_loss_gain_noisy": {r: picked[r][chosen[r]][1]
                                                  for r in directions}}
            if self._uses_fallback:
                accuracy = {r: picked[r][chosen[r]][2] for r in directions}
        else:
            rho, search_log = yield from self._choose_rho(theta_next, alpha, directions,
                                                          chosen, previous)
        self.params = theta_next
        self.alpha = alpha
        self.adaptation = {r: previous[r] + rho[r] * v for r, v in directions.items()}
        # un-noised regional accuracy is measured only where it cannot leak: without DP,
        # or for an un-noised fallback the user explicitly allowed (dp.allow_unaccounted)
        measure = (self._uses_fallback or (self.config.track_val_accuracy
                                           and not self.dp.adds_noise))
        released = accuracy is not None  # from the private release: noisy
        if not released and measure:
            accuracy = yield from self._regional_accuracy()
        if accuracy is not None:
            if self._uses_fallback:
                self.fallback.record(accuracy)
            extra["val_accuracy_noisy" if released else "val_accuracy"] = accuracy
        return {**log, "rho": rho, "strategy": chosen, **search_log, **extra}

    def _route(self, conflict: dict[str, float], regions: list[str], log: dict[str, Any]
               ) -> Exchange:
        """Algorithm 1 per region (plus the D.6 fallback); round 1 also collects the
        randomized-response label histograms that give h_r."""
        if self.heterogeneity is None:
            eps = self.config.ldp_epsilon
            # the RR coins are the client's: a seed is sent only when the run is not private
            seeded = not self.dp.secret_randomness
            results = yield [
                TrainInstruction(c, self.view.client_region[c], self.params,
                                 {"epsilon": eps,
                                  **({"seed": int(self.rng.integers(2**62))} if seeded else {})},
                                 HISTOGRAM) for c in self.view.clients]
            counts: dict[str, np.ndarray] = {}
            for res in results:
                counts[res.region] = counts.get(res.region, 0) + res.metrics["counts"]
            num_classes = len(results[0].metrics["counts"])
            self.heterogeneity = heterogeneity(counts, num_classes, eps)
            # every label is randomized on its own: a user reporting m labels spends m·ε_LDP
            self.ldp_reports.append((eps, "label histogram (randomized response per label)",
                                     max(max(res.num_examples for res in results), 1)))
        # under DP a region's size is its number of clients (public membership), not its
        # number of examples (which depends on the users' data and would be unaccounted)
        sizes = {r: float(len(self.view.clients_in(r))) if self.dp.adds_noise else
                 sum(self.view.num_examples[c] for c in self.view.clients_in(r))
                 for r in self.view.regions}
        mean_size = float(np.mean(list(sizes.values())))
        chosen = {}
        for r in regions:
            if self.config.fallback and self.fallback.forced_to_grad(r):
                chosen[r] = "grad"
                continue
            chosen[r] = route(conflict[r], self.heterogeneity.get(r, 0.0), sizes[r], mean_size,
                              tau_conflict=self.config.tau_conflict,
                              tau_het=self.config.tau_het, beta=self.config.size_beta)
        log["heterogeneity"] = dict(self.heterogeneity)
        return chosen

    def _ensemble_round(self, regional: dict[str, torch.Tensor], global_update: torch.Tensor,
                        theta_next: torch.Tensor, alpha: dict[str, float]) -> Exchange:
        """All three adaptations per region, each with its own ρ search, then the Eq. 17
        vote weights w_s ∝ regional validation accuracy of θ^{t+1} + α_r θ_r^s."""
        members: dict[str, dict[str, torch.Tensor]] = {r: {} for r in regional}
        log: dict[str, Any] = {"rho": {}}
        accuracy: dict[str, dict[str, float]] = {r: {} for r in members}
        if self.private_selection:
            per_region: dict[str, dict[str, torch.Tensor]] = {r: {} for r in regional}
            for s in BASE_VARIANTS:
                directions = yield from self._directions(
                    regional, global_update, theta_next, dict.fromkeys(regional, s))
                for r, v in directions.items():
                    per_region[r][s] = v
            zeros = {r: torch.zeros_like(theta_next) for r in per_region}
            picked = yield from self._private_select(theta_next, alpha, per_region, zeros,
                                                     with_accuracy=True)
            for s in BASE_VARIANTS:
                log["rho"][s] = {r: picked[r][s][0] for r in per_region if s in picked[r]}
            for r, per in per_region.items():
                for s, v in per.items():
                    members[r][s] = picked[r][s][0] * v
                    accuracy[r][s] = max(picked[r][s][2], 0.0)  # a noisy share can go < 0
        else:
            for s in BASE_VARIANTS:
                chosen = dict.fromkeys(regional, s)
                directions = yield from self._directions(regional, global_update, theta_next,
                                                         chosen)
                zeros = {r: torch.zeros_like(v) for r, v in directions.items()}
                rho, _ = yield from self._choose_rho(theta_next, alpha, directions, chosen,
                                                     zeros)
                for r, v in directions.items():
                    members[r][s] = rho[r] * v
                log["rho"][s] = rho
            for s in BASE_VARIANTS:
                params = {r: theta_next + alpha[r] * m[s] for r, m in members.items()
                          if s in m}
                for r, acc in (yield from self._regional_accuracy(params)).items():
                    accuracy[r][s] = acc
        self.params = theta_next
        self.alpha = alpha
        self.members = members
        self.member_weights = {}
        for r, accs in accuracy.items():
            total = sum(accs.values())
            self.member_weights[r] = ({s: a / total for s, a in accs.items()} if total > 0
                                      else {s: 1 / len(accs) for s in accs})
        # the single best member stands for the region where one model is needed
        # (the user-level stage, the conflict signal of the next round)
        self.adaptation = {r: members[r][max(w, key=w.get)]
                           for r, w in self.member_weights.items()}
        log["member_val_accuracy_noisy" if self.private_selection
            else "member_val_accuracy"] = accuracy
        log["ensemble_weights"] = self.member_weights
        return log

    def _regional_accuracy(self, params: dict[str, torch.Tensor] | None = None) -> Exchange:
        """Regional validation score of each region's model (default: the new regional
        models; the fallback and the ensemble weights read it)."""
        if params is None:
            params = {r: self.regional_params(r) for r in self.adaptation}
        results = yield [TrainInstruction(c, r, p, {"score": True}, EVALUATE)
                         for r, p in params.items() for c in self.view.clients_in(r)]
        accuracy = {}
        for r in params:
            mine = [res for res in results if res.region == r]
            total = sum(res.num_examples for res in mine)
            accuracy[r] = sum(res.metrics["score_sum"] for res in mine) / max(total, 1)
        return accuracy

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
                    theta_next: torch.Tensor, chosen: dict[str, str]) -> Exchange:
        """v_r per region (see the module docstring for the sign convention)."""
        directions = {r: -(g - global_update) for r, g in regional.items()
                      if chosen[r] == "grad"}
        if len(directions) == len(regional):
            return directions
        interp = {"epochs": self.config.interp_epochs}
        # a fresh Poisson sample: the ledger composes the two releases of the round as two
        # independently subsampled Gaussian mechanisms, which needs independent samples
        instructions = []
        for c in self.sample_clients():
            r = self.view.client_region[c]
            if chosen.get(r) == "meta":
                instructions.append(TrainInstruction(c, r, theta_next, kind=GRADIENT))
            elif chosen.get(r) == "interp":
                instructions.append(TrainInstruction(c, r, theta_next, dict(interp), TRAIN))
        results = yield instructions
        second = self.regional_means(results, "regional meta gradient / fine-tune update")
        # meta: v = −∇L_r; interp: θ^local − θ^{t+1} = −(mean Δ) — both are −(aggregate)
        directions.update({r: -second[r] for r in regional
                           if chosen[r] != "grad" and r in second})
        return directions

    def _private_select(self, theta_next: torch.Tensor, alpha: dict[str, float],
                        directions: dict[str, dict[str, torch.Tensor]],
                        previous: dict[str, torch.Tensor], *, with_accuracy: bool
                        ) -> Exchange:
        """Private model selection (:mod:`.selection`): a fresh Poisson sample of each
        region's clients scores the ρ grid of every strategy in ``directions[r]`` on its
        validation split; each region releases the noisy mean of the clamped score vectors
        (one accounted Gaussian release). Returns region → strategy → (ρ, noisy loss gain,
        noisy accuracy or ``None``)."""
        layouts = {}
        for r, per in directions.items():
            grid = {s: (rho_candidates(self.config.rho_interval_interp if s == "interp"
                                       else self.config.rho_interval,
                                       self.config.rho_grid_points)
                        if self.config.rho_search else [self.config.fixed_rho])
                    for s in per}
            layouts[r] = SelectionLayout(grid, with_accuracy, self.dp.selection_clip)
        sampled = set(self.sample_clients())
        instructions = []
        for r, layout in layouts.items():
            base = theta_next + alpha[r] * previous[r]
            models = [base] + [base + alpha[r] * rho * directions[r][s]
                               for s, rho in layout.candidates]
            members = [c for c in self.view.clients_in(r) if c in sampled]
            for tag, params in enumerate(models):
                instructions += [TrainInstruction(c, r, params,
                                                  {"score": with_accuracy, "tag": tag},
                                                  EVALUATE) for c in members]
        results = yield instructions
        replies: dict[str, dict[int, ClientResult]] = {}
        for res in results:
            replies.setdefault(res.client_id, {})[int(res.metrics["tag"])] = res
        picked = {}
        for r, layout in layouts.items():
            models = len(layout.candidates) + 1
            vectors, weights = [], []
            for c in self.view.clients_in(r):
                got = replies.get(c, {})
                n = got[0].num_examples if 0 in got else 0
                if len(got) != models or n == 0:  # not sampled, failed, or nothing to score
                    continue
                loss = [got[t].metrics["loss_sum"] / n for t in range(models)]
                acc = ([got[t].metrics["score_sum"] / n for t in range(models)]
                       if with_accuracy else None)
                vectors.append(layout.user_vector(loss, acc))
                weights.append(n)
            low, high = layout.bounds()
            expected = self.sample_rate * len(self.view.clients_in(r)) * self.report_rate
            mean = self.releases.bounded_mean(
                vectors, weights, low, high, expected, regions=[r],
                what="model selection scores"
                + (" (ρ grid + accuracy)" if with_accuracy else " (ρ grid)"))
            if mean is None:  # nothing released (no DP noise and nobody sampled): keep ρ = 0
                picked[r] = {s: (0.0, 0.0, None if not with_accuracy else 0.0)
                             for s in layout.grid}
                continue
            # the noise std of one released mean is public (σ, bounds, q·n_r)
            noise_std = noise_std_of_bounded_mean(self.dp, low, high, expected)
            picked[r] = layout.choose(mean, self.config.rho_search, self.config.fixed_rho,
                                      self.config.selection_margin * noise_std)
        return picked

    def _choose_rho(self, theta_next: torch.Tensor, alpha: dict[str, float],
                    directions: dict[str, torch.Tensor], chosen: dict[str, str],
                    previous: dict[str, torch.Tensor]) -> Exchange:
        """ρ per region by a line search (``line_search``: Brent's method, or Alg. 3's
        golden section) on its validation loss, all regions in lock-step."""
        if not self.config.rho_search:
            return dict.fromkeys(directions, self.config.fixed_rho), {}
        intervals = {r: (self.config.rho_interval_interp if chosen[r] == "interp"
                         else self.config.rho_interval) for r in directions}
        searches = yield from search_regions_on_validation(
            self.view, intervals, self.config.rho_tolerance,
            lambda r, x: theta_next + alpha[r] * (previous[r] + x * directions[r]),
            self.config.line_search)
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

    def personalize_users(self, region: str, users: Mapping[str, ClientContext]
                          ) -> dict[str, torch.Tensor] | None:
        """Paper Eq. 5/7 after training (``user_personalization``): every user adapts its
        regional model on its device (:func:`.personalization.personalize_region`)."""
        if not self.config.user_personalization:
            return None
        thetas, _ = personalize_region(users, self.regional_params(region),
                                       self.last_regional.get(region),
                                       alpha_min=self.config.alpha_min, tau=self.config.tau,
                                       epochs=self.config.user_epochs,
                                       private=self.dp.adds_noise)
        return thetas

    def eval_params(self, client_id: str, region: str, client: ClientContext
                    ) -> torch.Tensor | Ensemble:
        weights = self.member_weights.get(region)
        if weights is None:
            return self.regional_params(region)
        members = self.members[region]
        return Ensemble(tuple(self.params + self.alpha[region] * members[s] for s in weights),
                        tuple(weights.values()))


class RegionFedAvg(RegionFed):
    """``region-fedavg`` (paper §4.3, "Region-Aware FedAvg"): the hierarchy alone — client →
    region → global averaging, regional model θ + α·θ_r with θ_r = −ρ(g̃_r − g̃), fixed α and
    fixed ρ (no conflict signal, no search)."""

    def __init__(self, config: RegionFedConfig | None = None, *, alpha: float = 0.75,
                 rho: float = 1.0, **kwargs: Any) -> None:
        base = (config or RegionFedConfig()).model_copy(
            update={"fixed_alpha": alpha, "rho_search": False, "fixed_rho": rho})
        super().__init__("grad", base, **kwargs)
        self.name = "region-fedavg"


class RegionFedPersist(RegionFed):
    """``regionfed-persist``: RegionFed-grad whose regional adaptation persists and
    accumulates across rounds (θ_r^{t+1} = θ_r^t + ρ_t v_r^t, ρ_t searched every round).

    The paper's one-step adaptations are small; whether they beat plain regional fine-tuning
    is measured (docs/results.md), and this is the stronger, clearly named variant."""

    def __init__(self, config: RegionFedConfig | None = None, **kwargs: Any) -> None:
        base = (config or RegionFedConfig()).model_copy(update={"persist_adaptation": True})
        super().__init__("grad", base, **kwargs)
        self.name = "regionfed-persist"
