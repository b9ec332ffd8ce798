"""RegionFed's switches (paper Table 14, App. H): everything the paper's ablation toggles."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RegionFedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    alpha_min: float = Field(0.5, ge=0.0, le=1.0)
    tau: float | Literal["auto"] = 1.0
    mu_perturbation: float = Field(0.0, gt=-1.0)
    #: fixed α for every region (adaptive α off); ``None`` = Eq. 6
    fixed_alpha: float | None = Field(None, ge=0.0, le=1.0)
    #: search ρ on validation data (off: ``fixed_rho``)
    rho_search: bool = True
    #: the un-noised search's method: ``brent`` (Brent's bounded minimisation: the same
    #: objective and tolerance as the paper's Alg. 3 in ~8 evaluations instead of 14) or
    #: ``golden`` (Alg. 3's golden-section search itself)
    line_search: Literal["brent", "golden"] = "brent"
    fixed_rho: float = Field(1.0, ge=0.0)
    rho_interval: tuple[float, float] = (0.0, 2.0)  # grad / meta
    rho_interval_interp: tuple[float, float] = (0.0, 1.0)
    rho_tolerance: float = Field(0.01, gt=0.0)
    #: how ρ (and the dynamic fallback's / ensemble's accuracies) are chosen: ``golden``
    #: (the ``line_search`` on un-noised validation losses, Alg. 3), ``grid`` (the private
    #: release of :mod:`.selection`: a noisy score of ρ = 0 and ``rho_grid_points``
    #: values), or ``auto`` = grid under DP, golden without
    rho_selection: Literal["auto", "golden", "grid"] = "auto"
    rho_grid_points: int = Field(4, ge=1, le=64)
    #: grid selection: a candidate must beat ρ = 0 by more than this many noise standard
    #: deviations of its released mean (0 = plain argmin)
    selection_margin: float = Field(2.0, ge=0.0, allow_inf_nan=False)
    #: local epochs of interp's regional fine-tune (one intra-region FedAvg pass)
    interp_epochs: int = Field(1, ge=1)
    #: EMA of the conflict (paper D.6 safeguard; β = 0.9 there); ``None`` = raw d_r
    conflict_ema: float | None = Field(None, ge=0.0, lt=1.0)
    #: keep θ_r across rounds and add each round's ρ·v_r to it (``regionfed-persist``, an extra;
    #: the paper's θ_r is recomputed from one round's signal only)
    persist_adaptation: bool = False
    #: score every regional model on its region's validation data each round (logged as
    #: ``val_accuracy``; the dynamic fallback needs it regardless)
    track_val_accuracy: bool = True
    #: region weights p_r of the global aggregate
    region_weights: Literal["uniform", "clients"] = "uniform"
    # -- dynamic routing (paper Alg. 1) and its D.6 safeguards --------------------------
    tau_conflict: float = Field(0.5, ge=0.0)
    tau_het: float = Field(1.0, ge=0.0)
    size_beta: float = Field(1.5, gt=0.0)
    #: ε_LDP of the randomized-response intent histograms
    ldp_epsilon: float = Field(2.0, gt=0.0)
    #: fall back to grad after a validation drop / stall (paper Eq. 15)
    fallback: bool = True
    fallback_drop: float = Field(0.05, ge=0.0)
    fallback_patience: int = Field(2, ge=0)
    # -- user-level personalization (paper Eq. 5, 7), an evaluation stage ---------------
    user_personalization: bool = True
    user_epochs: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> RegionFedConfig:
        if isinstance(self.tau, float) and self.tau <= 0:
            raise ValueError("tau must be > 0 or 'auto'")
        for name in ("rho_interval", "rho_interval_interp"):
            a, b = getattr(self, name)
            if not a < b:
                raise ValueError(f"{name} must satisfy a < b")
        return self


class RegionFedPlusConfig(BaseModel):
    """``regionfed-plus``'s switches (:mod:`.plus`); each is one row of the ablation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: noise-aware James–Stein shrinkage of each region's offset (:mod:`.shrinkage`); off:
    #: every region is served its full offset (α = 1)
    shrinkage: bool = True
    #: the blocks that share one between-region variance τ̂_b²: ``groups`` (each declared
    #: parameter group, then the rest) or ``tensors`` (every tensor of a declared group on
    #: its own, then the rest): a small tensor with a strong regional signal (an intent
    #: bias) keeps its offset where a large noisy matrix falls back to the global model
    shrinkage_blocks: Literal["groups", "tensors"] = "groups"
    #: under DP, the share f of each round's budget given to the regional releases: the
    #: global mean is released at σ/√(1 − f), each regional one at σ/√f (one event at σ)
    regional_share: float = Field(0.2, gt=0.0, lt=1.0)
    #: under DP, once every shrinkage factor α_{r,b} is below this after a round (the
    #: released offsets show no regional signal worth serving), later rounds release only
    #: the global mean, with the whole budget (σ instead of σ/√(1 − f)): a decision on
    #: released values only (no privacy cost; a round stays one event at σ per client).
    #: 0: the split every round
    reallocate_below: float = Field(0.0, ge=0.0, lt=1.0)
    #: what the regional releases (and offsets) cover: the whole model or its declared head
    regional_part: Literal["all", "head"] = "all"
    #: under DP, the clip norm C_r of a client's update restricted to the regional part in
    #: the regional releases (their noise std σ/√f·C_r; ``None``: the run's ``dp.clip``).
    #: Same ε whatever C_r (each release's noise is relative to its own sensitivity); a
    #: small part (the head) carries a small share of an update's norm, so a C_r near that
    #: share keeps its signal and cuts its noise by C/C_r
    regional_clip: float | None = Field(None, gt=0.0, allow_inf_nan=False)
    #: two-level personalization: each client keeps a personal model anchored on its
    #: regional model and is evaluated with the best of global / regional / personal on its
    #: own validation split
    two_level: bool = True
    #: λ of the personal objective F_u(v) + (λ/2)‖v − θ_r‖² (Ditto's, anchored on θ_r)
    personal_lambda: float = Field(0.1, ge=0.0)
    #: under DP, test whether the served θ_r shows any signal over its DP noise: the
    #: anchor share 1 − E‖noise‖²/‖θ_r − θ_0‖² (θ_0 the public initial model; the noise
    #: energy is public: σ, f, C, q·n, η_g, the factors α), 0 unless the excess energy
    #: clears 2 standard deviations of the noise's. Where it is 0, the personal model is
    #: not anchored (λ = 0) and a client is evaluated with its own kept personal model,
    #: trained on (not kept) until it has had ``personal_refresh_epochs`` epochs of its
    #: data (the server's models, θ_0 plus noise, are not candidates; no choice is
    #: made). Post-processing; without DP nothing changes (docs/baselines.md, "The
    #: noise-aware anchor")
    noise_aware_anchor: bool = True
    #: before a client is evaluated, fine-tune a fourth candidate from the model it is
    #: served (θ_r) for this many local epochs on its own training split (the personal
    #: objective, proximal term towards θ_r included) — the personal model last trained
    #: when the client was sampled is stale after ~1/q rounds — and make it the choice's
    #: default (the regional, global or kept personal model must beat it by the choice's
    #: bar, ``choice_rule``; the kept one wins where the served model is poor).
    #: On-device: no privacy cost, no change to training (the refreshed model is not
    #: kept). 0: off. Chosen on validation among {0, 3, 8} in the 8 × 1,000 federation at
    #: σ = 1 (docs/baselines.md); inactive without ``two_level``
    personal_refresh_epochs: int = Field(8, ge=0)
    #: with the refresh, the choice's default: ``refreshed`` (the refreshed model; the kept
    #: personal model must clear the choice's bar like the server's models) or
    #: ``on-device`` (the better of the refreshed and the kept personal model on validation,
    #: no bar between the two — neither is expected to be the better one — and the
    #: regional and global models must clear the bar against that one) or
    #: ``if-served-holds`` (``refreshed`` where the served θ_r holds up against the kept
    #: personal model on the client's validation split, ``on-device`` where the kept one
    #: beats θ_r by the choice's bar: the model the refresh starts from is poor there).
    #: ``if-served-holds`` closes the gap to local training in 5-client regions at σ = 1;
    #: its trained σ = 16 seeds in the 8 × 1,000 federation came out 10 points low, which
    #: recordings of the same draws under both rules later put on the DP noise draws, not
    #: the rule (−0.5 to +0.2; docs/baselines.md, "The choice's default"): an option
    choice_default: Literal["refreshed", "on-device", "if-served-holds"] = "refreshed"
    #: with ``if-served-holds``, the per-query variance of θ_r's validation score in the
    #: served check's bar: ``score`` — s₀(1 − s₀), the choice's own, which vanishes when a
    #: 2-query split puts θ_r's score at 0 — or ``worst-case`` — 1/4, its maximum
    served_check_variance: Literal["score", "worst-case"] = "score"
    #: with ``choice_rule: margin``, how many standard errors of the default's validation
    #: score another candidate must beat it by to be chosen on-device (0: the plain best
    #: score); a client's few validation examples otherwise pick a lucky model as often as a
    #: better one
    choice_margin: float = Field(0.5, ge=0.0)
    #: the standard error the bar counts: ``single`` — √(s₀(1 − s₀)/n), the default's
    #: score read as n independent right/wrong answers — or ``paired`` — the jackknife
    #: standard error of the two scores' difference on the same queries, moderated towards
    #: the single one by a prior worth ``choice_prior_queries`` queries (exact for a score
    #: that is not a mean of right/wrong answers, like Overall's NER F1, and smaller where
    #: the two models agree on most queries)
    choice_error: Literal["single", "paired"] = "single"
    choice_prior_queries: float = Field(2.0, ge=0.0)
    #: ``posterior``: a challenger must lead by ``choice_prior_strength``·SE² — the lead at
    #: which its true lead has a positive posterior mean under a Gaussian prior that it is
    #: behind (a small split needs a large lead, a large one a small lead); ``margin``: by
    #: ``choice_margin`` standard errors SE. κ = 3 was picked on replays of two DP study
    #: points (docs/baselines.md, "The choice's bar")
    choice_rule: Literal["margin", "posterior"] = "posterior"
    choice_prior_strength: float = Field(3.0, ge=0.0)
    #: without DP, scale each region's shrunk offset by ρ_r ∈ [0, 1] chosen every round by
    #: golden-section search (paper Alg. 3, tolerance 0.01) on the region's validation loss:
    #: shrinkage knows the noise of an offset, not whether it generalises, so a region whose
    #: offset validates worse than the global model is served (nearer) the global model.
    #: Under DP it is not applied (the search would read un-noised validation data): the
    #: served model is θ + Σ_b α_{r,b}·a_{r,b}
    validation_scale: bool = True

    @model_validator(mode="after")
    def _check(self) -> RegionFedPlusConfig:
        # a saved run's config.yaml carries every field, the default refresh included: only
        # a refresh asked for explicitly (not the default) contradicts two_level: false
        default_refresh = type(self).model_fields["personal_refresh_epochs"].default
        if (self.personal_refresh_epochs not in (0, default_refresh) and not self.two_level
                and "personal_refresh_epochs" in self.model_fields_set):
            raise ValueError("personal_refresh_epochs needs two_level: true (it refreshes the "
                             "personal candidate of the on-device choice)")
        if self.regional_clip is not None and self.regional_part != "head":
            # the whole update is clipped at C for the global mean: clipped again at another
            # C_r, every region's mean would differ from it by the clip alone, a bias the
            # offsets would accumulate
            raise ValueError("regional_clip needs regional_part: head (a clip of its own "
                             "for the whole model would bias every regional offset)")
        return self
