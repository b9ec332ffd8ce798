"""The paper's studies as configuration grids (issue 10): each study is a list of variants
(dotted config overrides), the methods it compares, and two sizes — ``reduced`` (the default:
about an hour per study on 2 CPU cores) and ``full`` (the paper's setting, ``--full``).

Sizes are overrides of the run configuration too, so one mechanism builds every run:
``base size ← variant ← --set``. Paper numbers for each study live in
``paper_claims.yaml`` beside this file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from regionfed.errors import ConfigError

#: how the esci-synth studies split each client's queries: at random, as when they were
#: published (a repeated query text can be in training and test); rerunning them with
#: ``data.split: leak_free`` (the run default) is due with the next full rerun
STUDY_SPLIT = "random"
#: the reduced size every study starts from (esci-synth, tiny model)
REDUCED: dict[str, Any] = {"data.split": STUDY_SPLIT,
                           "data.num_queries": 8000, "data.num_regions": 8,
                           "data.clients_per_region": 5, "training.rounds": 20,
                           "training.eval_every": 5, "regionfed.rho_tolerance": 0.05}
#: the paper's protocol size (App. B: 8 regions × 10 clients, 50 rounds, 5 seeds)
FULL: dict[str, Any] = {"data.split": STUDY_SPLIT, "data.num_queries": 20000, "data.num_regions": 8,
                        "data.clients_per_region": 10, "training.rounds": 50,
                        "training.eval_every": 5}
#: the large federation of the privacy study (docs/privacy-cohort.md): 8 regions × 1,000
#: clients with 20 queries each (14 for training); a client's few examples make one local
#: step per epoch, so E = 3; evaluation only at the end (8,000 clients' test sets). The
#: on-device user-level stage (Eq. 5/7) is off: it is not what this study measures, and it
#: would hold 8,000 personal models at once (6.5 GB for the tiny model). regionfed-plus's
#: personal models are its method: they stay (up to ~5,000 trained ones after 10 rounds at
#: q = 0.1), so no round checkpoints (each would write them all; a finished method × seed
#: is still kept, and an interrupted one restarts)
LARGE_FEDERATION: dict[str, Any] = {
    "data.split": STUDY_SPLIT, "data.num_queries": 160_000, "data.num_regions": 8,
    "data.clients_per_region": 1000,
    "training.rounds": 10, "training.local_epochs": 3, "training.eval_every": 10,
    "training.checkpoint_every": 0,
    "regionfed.rho_tolerance": 0.05, "regionfed.user_personalization": False}
#: real LEAF FEMNIST writers (../shared/data) with the paper's CNN (App. B.3): the 40 writers
#: with the most training images in 4 regions by Ward clustering of their class histograms;
#: 30 rounds of one local epoch, half the writers a round (Poisson, q = 0.5: the CNN's
#: rounds are what a study pays for); every trained method's learning rate (and its own key
#: hyper-parameter) tuned on validation (:mod:`regionfed.tuning`, tuning seed 1000)
FEMNIST: dict[str, Any] = {
    "dataset": "femnist", "data.num_regions": 4, "data.max_writers": 40, "model.name": "cnn",
    "training.rounds": 30, "training.local_epochs": 1, "training.batch_size": 20,
    "training.sample_rate": 0.5,
    "training.optimizer.name": "adamw", "training.eval_every": 10,
    "tuning.enabled": True, "tuning.lr": [1e-3, 3e-3]}
#: the personalised comparison set most studies report
CORE_METHODS = ("fedavg", "ditto", "region-fedavg", "regionfed-grad", "regionfed-interp",
                "regionfed-meta")


@dataclass(frozen=True)
class Variant:
    """One point of a study: a label and the config overrides that make it."""

    label: str
    overrides: dict[str, Any] = field(default_factory=dict)
    #: the methods of this point (default: the study's)
    methods: tuple[str, ...] | None = None
    #: which result is this point's utility: ``overall``, or ``personalized`` (the Overall
    #: after RegionFed's user-level stage, paper Eq. 5/7)
    metric: str = "overall"


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    paper: str  # which table / section of the paper it reproduces
    question: str  # what the study answers, in one line
    methods: tuple[str, ...]
    variants: tuple[Variant, ...]
    reduced: dict[str, Any] = field(default_factory=lambda: dict(REDUCED))
    full: dict[str, Any] = field(default_factory=lambda: dict(FULL))
    seeds: int = 3
    full_seeds: int = 5

    def size(self, full: bool) -> dict[str, Any]:
        return dict(self.full if full else self.reduced)


def _ablation() -> tuple[Variant, ...]:
    """Paper Table 14: adaptive α × hierarchical (user-level) personalization × golden-section
    ρ, all 8 combinations, on regionfed-grad (off = fixed α 0.75, Overall before the
    user-level stage, fixed ρ = 1)."""
    variants = []
    for alpha in (False, True):
        for hierarchy in (False, True):
            for rho in (False, True):
                parts = [name for name, on in (("α", alpha), ("hierarchy", hierarchy),
                                               ("ρ", rho)) if on]
                label = " + ".join(parts) if parts else "regional only"
                variants.append(Variant(
                    label,
                    {"regionfed.fixed_alpha": None if alpha else 0.75,
                     "regionfed.rho_search": rho, "regionfed.user_personalization": hierarchy},
                    methods=("regionfed-grad",),
                    metric="personalized" if hierarchy else "overall"))
    return tuple(variants)


def _plus_ablation() -> tuple[Variant, ...]:
    """regionfed-plus's switches (issue 26): without DP each of shrinkage, two-level
    personalization, the on-device refresh of the served model, the validated offset scale,
    the bar a client's model choice sets and a head-only regional part taken away or
    changed; under DP (σ = 1, q = 0.5) the share f of the budget given to the regional
    releases, and shrinkage and the refresh taken away."""
    dp = {"dp.mode": "user", "dp.sigma": 1.0, "dp.clip": 1.0, "training.sample_rate": 0.5}
    off = {"shrinkage": False, "two_level": False}
    variants = [Variant("plus", {})]
    variants += [Variant(f"no {name.replace('_', '-')}", {f"regionfed_plus.{name}": False})
                 for name in off]
    variants += [Variant("no refresh", {"regionfed_plus.personal_refresh_epochs": 0})]
    variants += [Variant("no validation scale", {"regionfed_plus.validation_scale": False})]
    variants += [Variant("no shrinkage, no two-level",
                         {f"regionfed_plus.{k}": v for k, v in off.items()}),
                 Variant("no choice margin", {"regionfed_plus.choice_margin": 0.0,
                                               "regionfed_plus.choice_prior_strength": 0.0}),
                 Variant("head-only regions", {"regionfed_plus.regional_part": "head"})]
    variants += [Variant(f"σ=1, f={f}", {**dp, "regionfed_plus.regional_share": f})
                 for f in (0.1, 0.2, 0.5)]
    variants += [Variant("σ=1, f=0.2, no shrinkage",
                         {**dp, "regionfed_plus.shrinkage": False}),
                 Variant("σ=1, f=0.2, no refresh",
                         {**dp, "regionfed_plus.personal_refresh_epochs": 0})]
    return tuple(variants)


def _privacy(sample_rate: float) -> tuple[Variant, ...]:
    """Paper Table 19: σ ∈ {0, 1, 2, 4, 8, 16} with C = 1 and Poisson client sampling at
    ``sample_rate`` in every variant (no DP included, so its gap to each σ is DP's cost
    alone); ε comes from each run's ledger."""
    return tuple(Variant("no DP" if s == 0 else f"σ={s}",
                         {"training.sample_rate": sample_rate,
                          **({"dp.mode": "off"} if s == 0 else
                             {"dp.mode": "user", "dp.sigma": float(s), "dp.clip": 1.0})})
                 for s in (0, 1, 2, 4, 8, 16))


def _sensitivity() -> tuple[Variant, ...]:
    """Paper Tables 15–18 on regionfed-meta: τ, μ perturbation, α_min, and C at σ = 4."""
    meta = ("regionfed-meta",)
    variants = [Variant(f"τ={tau}", {"regionfed.tau": tau}, meta)
                for tau in (0.5, 0.75, 1.0, 1.5, 2.0)]
    variants += [Variant(f"μ perturbation={mu:+.0%}", {"regionfed.mu_perturbation": mu}, meta)
                 for mu in (-0.2, -0.1, 0.0, 0.1, 0.2)]
    variants += [Variant(f"α_min={a}", {"regionfed.alpha_min": a}, meta)
                 for a in (0.0, 0.25, 0.5, 0.75)]
    variants += [Variant(f"C={c}", {"dp.mode": "user", "dp.sigma": 4.0, "dp.clip": c,
                                    "training.sample_rate": 0.5}, meta)
                 for c in (0.1, 0.5, 1.0, 2.0, 5.0)]
    return tuple(variants)


STUDIES: dict[str, Study] = {s.name: s for s in (
    Study("heterogeneity", "Robustness to heterogeneity", "Table 2 and Table 11",
          "how each method holds up as clients' data get more skewed (Dirichlet α_D)",
          (*CORE_METHODS, "local", "fedavg-ft", "regionfed-plus"),
          tuple(Variant(f"α_D={a}", {"data.alpha_d": a}) for a in (1.0, 0.3, 0.1))),
    Study("regions", "Scale in the number of regions", "Table 12",
          "whether RegionFed's gain survives 4, 8 and 16 regions",
          ("fedavg", "region-fedavg", "regionfed-grad", "regionfed-meta"),
          tuple(Variant(f"{m} regions", {"data.num_regions": m}) for m in (4, 8, 16))),
    Study("assignment", "Region misspecification", "Table 13",
          "what happens when the regions do not match the data's real structure",
          ("fedavg", "regionfed-meta"),
          tuple(Variant(mode, {"data.region_assignment": mode})
                for mode in ("semantic", "geographic", "random", "adversarial"))),
    Study("ablation", "Component ablation", "Table 14",
          "what adaptive α, user-level personalization and golden-section ρ each add",
          ("regionfed-grad",), _ablation()),
    Study("ablation-plus", "regionfed-plus component ablation", "(no paper table; issue 26)",
          "what noise-aware shrinkage, two-level personalization, the on-device refresh, "
          "the validated offset scale, a head-only regional part and the DP budget split "
          "each add to regionfed-plus",
          ("regionfed-plus",), _plus_ablation()),
    Study("sensitivity", "Hyper-parameter sensitivity", "Tables 15–18",
          "how much τ, a misestimated μ_r, α_min and the clipping norm C matter",
          ("regionfed-meta",), _sensitivity(), seeds=2),  # 19 variants
    Study("privacy", "Privacy–utility", "Table 19",
          "what user-level DP costs at each σ, with ε from the ledger",
          ("fedavg", "fedavg-ft", "local", "ditto", "region-fedavg", "regionfed-grad",
           "regionfed-meta", "regionfed-plus"),
          _privacy(sample_rate=0.5)),
    Study("privacy-large", "Privacy–utility in a large federation", "Table 19; docs/privacy.md",
          "whether DP becomes cheap when each round averages many clients (8 regions × "
          "1,000 clients, q = 0.1: ~100 clients per region per round instead of 5)",
          ("fedavg", "fedavg-ft", "regionfed-grad", "regionfed-plus"),
          _privacy(sample_rate=0.1),
          reduced=LARGE_FEDERATION, seeds=2,
          full={**LARGE_FEDERATION, "training.rounds": 50}, full_seeds=3),
    Study("local-epochs", "Local epochs", "Appendix F.1",
          "how many local epochs E each method tolerates before client drift hurts",
          ("fedavg", "scaffold", "pfedme", "regionfed-meta"),  # the paper's row
          tuple(Variant(f"E={e}", {"training.local_epochs": e}) for e in (1, 5, 10, 40)),
          # E = 40 costs 40× a round of E = 1 (measured: ~50 s a FedAvg round on one core
          # at 4,000 queries): half the data, 10 rounds, half the clients a round, 2 seeds
          reduced={**REDUCED, "data.num_queries": 4000, "training.rounds": 10,
                   "training.sample_rate": 0.5}, seeds=2),
    Study("femnist", "Real handwriting (FEMNIST)", "Table 1 Panel C (App. B.3)",
          "whether sharing beats training alone on real writers, with every method's "
          "learning rate tuned on validation",
          ("local", "fedavg", "ditto", "region-fedavg", "regionfed-grad", "regionfed-plus"),
          (Variant("4 clustered regions"),), reduced=FEMNIST,
          full={**FEMNIST, "data.max_writers": None, "data.num_regions": 8,
                "training.rounds": 50}),
    Study("concept-shift", "Concept shift", "(no paper table)",
          "where personalization helps (regions disagree on labels) and where it cannot",
          ("fedavg", "local", "ditto", "regionfed-grad", "regionfed-meta"),
          tuple(Variant(f"shift={x}", {"data.concept_shift": x}) for x in (0.0, 0.5, 1.0))),
)}


def get_study(name: str) -> Study:
    if name not in STUDIES:
        raise ConfigError(f"unknown study {name!r}; known: {', '.join(STUDIES)}")
    return STUDIES[name]
