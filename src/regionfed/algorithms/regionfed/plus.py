"""``regionfed-plus``: regional models that never lose to the global one (docs/baselines.md).

The server keeps a global model θ and, per region, an offset a_r (the region's accumulated
deviation from θ). One round:

1. every sampled client u of region r trains from its region's served model
   θ_r = θ + Σ_b α_{r,b}·a_{r,b} and sends Δ_u;
2. one release with a split budget (Bietti et al., ICML 2022;
   :meth:`~regionfed.privacy.releases.PrivateReleases.split_mean`): the global mean g̃ of all
   Δ_u at σ/√(1 − f) and each region's mean g̃_r of its clients' Δ_u (restricted to the
   regional part: the whole model or its declared head, clipped at ``regional_clip`` C_r,
   C by default) at σ/√f — one accounted event at σ per region, so ε is fedavg's at the
   same σ;
3. θ ← θ − η_g·g̃ and a_r ← a_r − η_g·(g̃_r − g̃) on the regional part: the offsets
   accumulate (signal grows like T, the noise like √T);
4. the shrinkage factors α_{r,b} (:mod:`.shrinkage`) from the offsets and their noise
   variance, which the server knows: under DP η_g²·Σ_t (σ_r²C_r²/(q n_r)² + σ_g²C²/(q N)²)
   (public); without DP the client-sampling variance of the regional means, measured;
5. without DP (``validation_scale``), a scale ρ_r ∈ [0, 1] of each region's shrunk offset by
   golden-section search on the region's validation loss (paper Alg. 3; RegionFed's ρ
   defaults to Brent's method since, plus keeps golden section as its results were run):
   the region is served θ + ρ_r·Σ_b α_{r,b}·a_{r,b}. Shrinkage weighs an offset against its
   noise; the search checks that it generalises (offsets keep accumulating the regional
   clients' drift, and one that fits the region's training data but not its validation
   data is scaled back towards θ; ρ_r = 0 is evaluated, so the served model never validates
   worse than the global one).

Two-level personalization (``two_level``): a sampled client also trains a personal model v_u
on F_u(v) + (λ/2)‖v − θ_r‖² (Ditto's objective anchored on the *regional* model), kept on
the device (starting from the public initial model, which round 1 hands every client) —
with λ = 0 while θ_r validates worse than v_u on the client's own split, so a
noisy regional model does not drag the personal one down; the client is evaluated with
whichever of global, regional and personal scores best on its own validation split
(nothing leaves the device, no privacy cost). With ``personal_refresh_epochs`` a fourth
candidate is fine-tuned from the served θ_r just before the evaluation (a sampled client's
personal model is otherwise ~1/q rounds old) and is the choice's default; the kept personal
model stays a candidate (where the served model is poor — small regions under DP — the one
trained over many rounds is far better than a few epochs from θ_r). With
``noise_aware_anchor`` (an option), a region whose θ_r shows no signal over its public DP
noise (:meth:`RegionFedPlus.anchor_share` 0) anchors no personal model on it (λ = 0) and
evaluates each client with its own kept personal model, trained further from where it is
until it has had ``personal_refresh_epochs`` epochs on the client's data (the server's
models, indistinguishable from θ_0 plus noise, are no candidates). Every switch is a
setting of :class:`~regionfed.algorithms.regionfed.config.RegionFedPlusConfig`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import (
    ClientContext,
    ClientResult,
    FederationView,
    Strategy,
    TrainInstruction,
)
from regionfed.algorithms.fedprox import proximal_term
from regionfed.algorithms.on_device import choice_counts, choose_on_validation
from regionfed.algorithms.regionfed.config import RegionFedPlusConfig
from regionfed.algorithms.regionfed.line_search import search_regions_on_validation
from regionfed.algorithms.regionfed.shrinkage import (
    partition_blocks,
    shrinkage_factors,
    signal_share,
)
from regionfed.errors import ConfigError

#: the shuffling stream of the update a client sends; the personal model trains on the main
#: stream (as Ditto's does)
SHARED_STREAM = "plus-shared"
#: the shuffling stream of the personal candidate fine-tuned before an evaluation
REFRESH_STREAM = "plus-personal-refresh"
#: the round-1 instruction that hands every client the initial model for its personal one
PERSONAL_INIT = "personal_init"
#: a training instruction's λ for the personal model (``noise_aware_anchor``)
PERSONAL_LAMBDA = "personal_lambda"
#: client state: the epochs the kept personal model has been trained on the client's data
PERSONAL_EPOCHS = "personal_epochs"
#: the order in which a client's candidates win ties on validation
CANDIDATES = ("regional", "global", "personal")
#: the choice's order with a refreshed candidate: it is the default
REFRESHED_ORDER = ("refreshed", "regional", "global", "personal")
#: ``choice_default: on-device``: the better of the first two is the default
ON_DEVICE_ORDER = ("refreshed", "personal", "regional", "global")
#: the largest per-query variance of a score in [0, 1] (a right/wrong answer at rate 1/2)
WORST_CASE_SCORE_VARIANCE = 0.25
#: bracket width at which the search for a region's offset scale ρ_r stops (paper Alg. 3's)
SCALE_TOLERANCE = 0.01


def kept_beats_served(served: torch.Tensor, personal: torch.Tensor, client: ClientContext,
                      **bar: Any) -> bool:
    """Whether the kept personal model beats the served θ_r on the client's validation split
    by ``bar`` (:func:`choose_on_validation`'s bar keywords; θ_r the default)."""
    pair = {"served": served, "personal": personal}
    return choose_on_validation(pair, client, **bar) == "personal"


class RegionFedPlus(Strategy):
    """Global model + noise-aware shrunk regional offsets + personal models (module doc)."""

    name = "regionfed-plus"

    def __init__(self, config: RegionFedPlusConfig | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config or RegionFedPlusConfig()
        if self.dp.mode == "region":
            raise ConfigError("regionfed-plus splits a user-level budget: use dp.mode user "
                              "(or no DP)")
        self.evaluates_on_client = self.config.two_level
        #: on a client's node (distributed runtimes): the served model of its region, as the
        #: server sent it for an evaluation (:meth:`client_evaluation_arrays`)
        self.received_regional: dict[str, torch.Tensor] = {}
        #: on a client's node: the anchor share of its region's served model, as sent
        self.received_share: dict[str, float] = {}
        #: region → (what it was computed from, the anchor share of θ_r)
        self.shares: dict[str, tuple[tuple[Any, ...], float]] = {}
        #: client → the candidate (:data:`CANDIDATES`) it was last evaluated with
        self.choices: dict[str, str] = {}
        self.offsets: dict[str, torch.Tensor] = {}
        #: accumulated per-coordinate noise variance of each region's offset, per block
        self.noise_var: dict[str, list[float]] = {}
        #: under DP, the accumulated per-coordinate noise variance of θ (the global means)
        #: and of each region's regional means, η_g²·Σ_t (public)
        self.global_noise_var = 0.0
        self.regional_noise_var: dict[str, float] = {}
        self.initial: torch.Tensor | None = None
        self.factors: dict[str, list[float]] = {}
        #: region → (what it was computed from, θ_r): a served model is read once per client
        #: in evaluation, thousands of times a round (:meth:`regional_params`)
        self.served: dict[str, tuple[tuple[Any, ...], torch.Tensor]] = {}
        self.part: torch.Tensor | None = None
        #: region → ρ_r, the validated scale of its shrunk offset (``validation_scale``)
        self.scales: dict[str, float] = {}
        self.blocks: list[torch.Tensor] = []

    def setup(self, init_params: torch.Tensor, view: FederationView,
              rng: np.random.Generator) -> None:
        super().setup(init_params, view, rng)
        dim = init_params.numel()
        if self.config.regional_part == "head":
            self.part = view.group_mask("head", dim)  # raises if the model declares none
        groups = {g: view.group_mask(g, dim) for g in view.parameter_groups}
        if self.config.shrinkage_blocks == "tensors":
            groups = {f"{g}:{t.name}": t.mask(dim)
                      for g, tensors in view.parameter_groups.items() for t in tensors}
        self.blocks = partition_blocks(groups, dim)
        if self.part is not None:  # the offsets live on the head only
            self.blocks = [b for b in self.blocks if (b & self.part).any()]
        self.offsets = {r: torch.zeros_like(init_params) for r in view.regions}
        self.noise_var = {r: [0.0] * len(self.blocks) for r in view.regions}
        self.global_noise_var = 0.0
        self.regional_noise_var = dict.fromkeys(view.regions, 0.0)
        self.initial = init_params.detach().clone()
        self.factors = {r: [1.0] * len(self.blocks) for r in view.regions}

    # -- server side ---------------------------------------------------------------------
    def regional_params(self, region: str) -> torch.Tensor:
        """θ_r = θ + Σ_b α_{r,b}·a_{r,b} (θ where the region has no offset yet), computed
        once per state: reused while θ is the same tensor and neither it nor a_r changed in
        place (torch's version counters) and α_r is the same."""
        offset = self.offsets.get(region)
        if offset is None:
            return self.params
        scale = self.scales.get(region, 1.0)
        source = (self.params, self.params._version, offset._version,
                  tuple(self.factors[region]), scale)
        cached = self.served.get(region)
        if cached is not None and cached[0][0] is source[0] and cached[0][1:] == source[1:]:
            return cached[1]
        served = self.params.clone()
        for alpha, block in zip(self.factors[region], self.blocks, strict=True):
            served[block] += scale * alpha * offset[block]
        self.served[region] = (source, served)
        return served

    def run_round(self, rnd: int):
        if rnd == 1 and self.config.two_level:
            # every client keeps the (public) initial model as its personal model's start,
            # so one first sampled late does not start from an already-noised model
            yield [TrainInstruction(c, self.view.client_region[c], self.params,
                                    {PERSONAL_INIT: True}) for c in self.view.clients]
        served = {r: self.regional_params(r) for r in self.view.regions}  # once per region
        anchor = {}
        if self.config.two_level and self.config.noise_aware_anchor and self.dp.adds_noise:
            shares = {r: self.anchor_share(r) for r in self.view.regions}
            anchor = {r: {PERSONAL_LAMBDA: self.config.personal_lambda if shares[r] > 0.0
                          else 0.0} for r in self.view.regions}
        results = yield [TrainInstruction(c, self.view.client_region[c],
                                          served[self.view.client_region[c]],
                                          dict(anchor.get(self.view.client_region[c], {})))
                         for c in self.sample_clients()]
        expected = {r: self.sample_rate * len(self.view.clients_in(r)) * self.report_rate
                    for r in self.view.regions}
        updates = [res.update for res in results]
        if self.global_only():
            global_mean = self.private_mean(
                results, self.sample_rate * len(self.view.clients),
                what="model update, global only (no regional signal left to release)")
            regional = {}
        else:
            global_mean, regional = self.releases.split_mean(
                updates, [res.num_examples for res in results],
                [res.region for res in results], expected, self.config.regional_share,
                self.part, what="model update, global + regional part (split budget)",
                dim=self.params.numel(), dtype=self.params.dtype,
                regional_clip=self.config.regional_clip)
        if global_mean is None:  # no DP and nobody reported
            return {"clients": 0}
        eta = self.server_lr
        self.params = self.params - eta * global_mean
        part = self.part if self.part is not None else slice(None)
        # per region and block, the per-coordinate variance this round adds to a_r / η_g²
        # (module doc): public DP noise under DP, the measured client-sampling variance without
        if self.dp.adds_noise:
            regional_var, global_var = self._release_variances(expected, split=bool(regional))
            self.global_noise_var += eta**2 * global_var
            for region in regional:
                self.regional_noise_var[region] += eta**2 * regional_var[region]
            added = {r: [v + global_var] * len(self.blocks) for r, v in regional_var.items()}
        else:
            added = self._sampling_variance(results)
        for region, mean in regional.items():
            self.offsets[region][part] -= eta * (mean - global_mean[part])
            per_block = added.get(region, [0.0] * len(self.blocks))
            self.noise_var[region] = [v + eta**2 * a for v, a in
                                      zip(self.noise_var[region], per_block, strict=True)]
        if self.config.shrinkage:
            self.factors = shrinkage_factors(self.offsets, self.noise_var, self.blocks)
        if self.config.validation_scale and not self.dp.adds_noise:
            yield from self._scale_on_validation()
        return {"clients": len(results), "update_norm": float(global_mean.norm()),
                **({"regional_release": False} if not regional and self.dp.adds_noise
                   else {}),
                "alpha": {r: float(np.mean(f)) for r, f in self.factors.items()},
                "offset_norm": {r: float(a.norm()) for r, a in self.offsets.items()},
                **({"scale": dict(self.scales)} if self.scales else {}),
                **({"anchor_share": shares} if anchor else {})}

    def _scale_on_validation(self):
        """Step 5 of the module doc: ρ_r per region by golden-section search on [0, 1] of
        the region's validation loss L_r(θ + ρ·Σ_b α_{r,b}·a_{r,b}), all regions in
        lock-step."""
        self.scales = {}  # the unscaled shifts first
        shifts = {r: self.regional_params(r) - self.params for r in self.view.regions
                  if self.view.clients_in(r)}
        searches = yield from search_regions_on_validation(
            self.view, dict.fromkeys(shifts, (0.0, 1.0)), SCALE_TOLERANCE,
            lambda r, x: self.params + x * shifts[r], "golden")
        self.scales = {r: s.best[0] for r, s in searches.items()}

    def global_only(self) -> bool:
        """Whether this round releases only the global mean (under DP, after a round whose
        shrinkage left every α below ``reallocate_below``). It reads the factors, computed
        from released values only: post-processing."""
        below = self.config.reallocate_below
        return (below > 0.0 and self.dp.adds_noise and self.config.shrinkage
                and bool(self.factors)
                and all(a < below for f in self.factors.values() for a in f))

    def _release_variances(self, expected: dict[str, float], *, split: bool = True
                           ) -> tuple[dict[str, float], float]:
        """Under DP, the per-coordinate noise variance of one round's released means
        (public: σ, f, C, C_r, q·n): (region → its regional mean's, the global mean's);
        a global-only round (``split`` false) releases the global mean at σ."""
        f, sigma, clip = self.config.regional_share, self.dp.sigma, self.dp.clip
        regional_clip = self.config.regional_clip or clip
        regional = {r: (sigma / np.sqrt(f) * regional_clip / n) ** 2 for r, n in expected.items()}
        total = sum(expected.values())
        global_sigma = sigma / np.sqrt(1 - f) if split else sigma
        return regional, (global_sigma * clip / total) ** 2

    def served_noise_energy(self, region: str) -> tuple[float, float]:
        """(E, std) of ‖noise of θ_r‖² under DP (public). θ_r = θ + Σ_b w_b·a_{r,b}
        (w_b = ρ_r·α_{r,b}) and each round adds −η_g·((1 − w_b)·n_g + w_b·n_r) on block b
        (the offset's step is the regional mean minus the global one), so per coordinate
        the variance v = (1 − w_b)²·G + w_b²·R_r, with G, R_r the accumulated variances of
        the global and the region's means (G alone off the offsets' blocks); Gaussian
        noise gives E = Σ v and Var = 2·Σ v²."""
        g, r = self.global_noise_var, self.regional_noise_var.get(region, 0.0)
        scale, covered, energy, spread = self.scales.get(region, 1.0), 0, 0.0, 0.0
        for alpha, block in zip(self.factors[region], self.blocks, strict=True):
            size, w = int(block.sum()), scale * alpha
            v = (1.0 - w) ** 2 * g + w**2 * r
            energy, spread, covered = energy + size * v, spread + size * v * v, covered + size
        rest = self.params.numel() - covered
        return energy + rest * g, float(np.sqrt(2.0 * (spread + rest * g * g)))

    def anchor_share(self, region: str) -> float:
        """The share of θ_r's displacement from the public initial model that is signal
        (:func:`.shrinkage.signal_share` with :meth:`served_noise_energy`; 0 where no signal
        is detected at 2 standard deviations of the noise's energy — under
        ``noise_aware_anchor`` the personal models are then not anchored on θ_r and build on
        θ_0, :meth:`evaluation_anchor`); 1 without DP noise.
        Computed once per state of θ_r and the accumulated noise (evaluation reads it per
        client)."""
        if not self.dp.adds_noise:
            return 1.0
        served = self.regional_params(region)
        source = (served, served._version, self.global_noise_var,
                  self.regional_noise_var.get(region, 0.0))
        cached = self.shares.get(region)
        if cached is not None and cached[0][0] is served and cached[0][1:] == source[1:]:
            return cached[1]
        share = signal_share(served - self.initial, *self.served_noise_energy(region))
        self.shares[region] = (source, share)
        return share

    def _sampling_variance(self, results: list[ClientResult]) -> dict[str, list[float]]:
        """Without DP: per region and block, the mean per-coordinate variance of the
        region's client updates divided by their number (the variance of their mean)."""
        out = {}
        for region in self.view.regions:
            mine = [res.update for res in results if res.region == region]
            if len(mine) < 2:
                out[region] = [0.0] * len(self.blocks)
                continue
            stacked = torch.stack(mine).double()
            variance = stacked.var(dim=0, unbiased=True) / len(mine)
            out[region] = [float(variance[b].mean()) for b in self.blocks]
        return out

    # -- client side ---------------------------------------------------------------------
    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        if instruction.config.get(PERSONAL_INIT):
            # a reference, not a copy: until a client trains it, every personal model is
            # this one tensor (8,000 clients of a large federation would hold 8,000 copies)
            client.state["personal"] = instruction.params.detach()
            return ClientResult(client.client_id, client.region, None, client.num_examples)
        result = self.train_and_report(instruction, client, stream=SHARED_STREAM)
        if self.config.two_level:
            anchor = instruction.params.detach()
            personal = client.state.get("personal", anchor)
            lam = personal_anchor_weight(
                instruction.config.get(PERSONAL_LAMBDA, self.config.personal_lambda),
                personal, anchor, client)
            epochs = instruction.config.get("epochs") or client.local_epochs
            client.state["personal"], _ = client.train(
                personal, epochs=epochs,
                extra_loss=proximal_term(anchor, lam) if lam > 0 else None)
            client.state[PERSONAL_EPOCHS] = client.state.get(PERSONAL_EPOCHS, 0) + epochs
        return result

    # -- evaluation ----------------------------------------------------------------------
    def eval_params(self, client_id: str, region: str, client: ClientContext | None
                    ) -> torch.Tensor:
        received = self.received_regional.get(region)
        if client is None or not self.config.two_level:
            return received if received is not None else self.regional_params(region)
        # on a client's node the server sent evaluation_anchor(region)
        regional = received if received is not None else self.evaluation_anchor(region)
        share = self.served_share(region) if self.config.noise_aware_anchor else 1.0
        if share == 0.0:
            return self.own_training_only(client_id, client, regional)
        candidates = {"personal": client.state.get("personal", regional),
                      "regional": regional, "global": self.params}
        if self.config.personal_refresh_epochs:
            # a model just fine-tuned from θ_r on the client's own data is the default
            # (expected at least as good as θ_r there); the others must prove themselves
            candidates["refreshed"] = self.refreshed_candidate(regional, client)
        order, peers = self.choice_order, self.choice_peers
        if "refreshed" in candidates and self.config.choice_default == "if-served-holds" \
                and self.served_loses(regional, candidates["personal"], client):
            order, peers = ON_DEVICE_ORDER, 2
        choice = choose_on_validation(candidates, client, order=order, peers=peers,
                                      **self.choice_bar)
        self.choices[client_id] = choice
        return candidates[choice]

    def own_training_only(self, client_id: str, client: ClientContext, initial: torch.Tensor
                          ) -> torch.Tensor:
        """Where θ_r shows no signal over its DP noise (``noise_aware_anchor``, anchor share
        0), the server's models are θ_0 plus noise for this client: it is evaluated with its
        kept personal model (``initial`` = θ_0 if it has none), trained on from there
        (λ = 0, not kept) until it has had ``personal_refresh_epochs`` epochs of the client's
        data in all — no choice among candidates, so no selection noise either."""
        kept = client.state.get("personal", initial)
        top_up = self.config.personal_refresh_epochs - client.state.get(PERSONAL_EPOCHS, 0)
        self.choices[client_id] = "refreshed" if top_up > 0 else "personal"
        if top_up <= 0:
            return kept
        refreshed, _ = client.train(kept, epochs=top_up, stream=REFRESH_STREAM,
                                    repeatable=True)
        return refreshed

    @property
    def choice_bar(self) -> dict[str, Any]:
        """:func:`choose_on_validation`'s bar settings (``choice_rule``, ``choice_error``)."""
        config = self.config
        return {"margin": config.choice_margin,
                "prior_queries": config.choice_prior_queries
                if config.choice_error == "paired" else None,
                "prior_strength": config.choice_prior_strength
                if config.choice_rule == "posterior" else None}

    def served_loses(self, served: torch.Tensor, personal: torch.Tensor,
                     client: ClientContext) -> bool:
        """Whether the client's kept personal model beats the served θ_r on its validation
        split by the choice's bar — the evidence, on the device, that fine-tuning from θ_r
        (the refreshed model) is not the safe default here (``choice_default:
        if-served-holds``; with ``served_check_variance: worst-case`` the bar's per-query
        variance is 1/4 whatever θ_r scores)."""
        bar = self.choice_bar
        if self.config.served_check_variance == "worst-case":
            bar["score_variance"] = WORST_CASE_SCORE_VARIANCE
        return kept_beats_served(served, personal, client, **bar)

    def refreshed_candidate(self, regional: torch.Tensor, client: ClientContext
                            ) -> torch.Tensor:
        """A model fine-tuned from the served θ_r on the personal objective
        F_u(v) + (λ/2)‖v − θ_r‖² for ``personal_refresh_epochs`` epochs (not kept)."""
        lam = self.config.personal_lambda
        refreshed, _ = client.train(regional, epochs=self.config.personal_refresh_epochs,
                                    stream=REFRESH_STREAM, repeatable=True,
                                    extra_loss=proximal_term(regional, lam) if lam > 0 else None)
        return refreshed

    @property
    def choice_order(self) -> tuple[str, ...]:
        """A client's candidates, the choice's default (or its peers) first."""
        if not self.config.personal_refresh_epochs:
            return CANDIDATES
        return ON_DEVICE_ORDER if self.choice_peers == 2 else REFRESHED_ORDER

    @property
    def choice_peers(self) -> int:
        """How many of :attr:`choice_order`'s first candidates share the default: 2 (the
        refreshed and the kept personal model) with ``choice_default: on-device``."""
        on_device = self.config.personal_refresh_epochs and \
            self.config.choice_default == "on-device"
        return 2 if on_device else 1

    def evaluation_diagnostics(self) -> dict[str, Any]:
        """Per region, how many clients were last evaluated with each candidate."""
        return choice_counts(self.choices, self.view, self.choice_order)

    def served_regional_params(self, region: str) -> torch.Tensor:
        """θ_r: sent as every sampled client's training start, whichever model a client
        is then evaluated with."""
        return self.regional_params(region)

    def evaluation_anchor(self, region: str) -> torch.Tensor:
        """The model a client's evaluation builds on: θ_r, or — under ``noise_aware_anchor``
        where θ_r shows no signal over its DP noise (anchor share 0: the positive-part
        James–Stein estimate of its displacement from θ_0 is 0) — the public initial model
        θ_0. What the server sends a client's node for its evaluation."""
        if self.config.noise_aware_anchor and self.anchor_share(region) == 0.0:
            return self.initial
        return self.regional_params(region)

    def served_share(self, region: str) -> float:
        """:meth:`anchor_share` of the region's served model — as the server sent it, on a
        client's node."""
        received = self.received_share.get(region)
        return self.anchor_share(region) if received is None else received

    def client_evaluation_arrays(self, region: str) -> dict[str, torch.Tensor]:
        if not self.config.two_level:
            return {}
        arrays = {"regional": self.evaluation_anchor(region)}
        if self.config.noise_aware_anchor and self.dp.adds_noise:  # (else the share is 1)
            arrays["anchor_share"] = torch.tensor([self.anchor_share(region)],
                                                  dtype=torch.float64)
        return arrays

    def receive_client_evaluation_arrays(self, region: str,
                                         arrays: dict[str, torch.Tensor]) -> None:
        self.received_regional = {region: arrays["regional"]} if "regional" in arrays else {}
        self.received_share = ({region: float(arrays["anchor_share"][0])}
                               if "anchor_share" in arrays else {})


def personal_anchor_weight(lam: float, personal: torch.Tensor, anchor: torch.Tensor,
                           client: ClientContext) -> float:
    """λ while the anchor θ_r validates at least as well as the personal model on the
    client's own split, else 0: a personal model is not pulled towards a worse regional
    model (under strong DP noise it then trains as ``local`` would). On-device, no cost."""
    if lam <= 0.0 or personal is anchor:
        return lam
    scores = {}
    for name, params in (("personal", personal), ("anchor", anchor)):
        score_sum, count = client.validation_score(params)
        scores[name] = score_sum / count if count else 0.0
    return lam if scores["anchor"] >= scores["personal"] else 0.0
