"""``regionfed audit``: measure the privacy a run actually delivers (docs/privacy.md, "Audit").

Each configured method is trained once (in-process or on Flower's simulation runtime) with
canary clients added to the federation (:mod:`regionfed.runtime.canaries`): of M canaries,
each is inserted with probability ½ (the audit's own seeded coin), in every region
round-robin or in one chosen region. After training, every canary — inserted or not — is
scored by the cosine between its direction and what the model moved
(:func:`regionfed.privacy.audit.canary_scores`), for the global model and for each regional
model the method has (that region's canaries). Reported per model: the ledger's ε, Andrew
et al.'s one-shot ε estimate and Steinke et al.'s lower bound (:mod:`regionfed.privacy.audit`).

The stated confidence is family-wise: an audit makes two claims per model (estimate's lower
end, lower bound), so each is made at 1 − (1 − P)/(number of claims) (Bonferroni), and a
correct mechanism is flagged by any of them with probability at most 1 − P. Neither
statistic is a proof: one above the accounted ε means the code leaks more than the ledger
says; at or below it is evidence, not a guarantee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from regionfed.algorithms.base import Strategy
from regionfed.algorithms.registry import build_strategy, get_method
from regionfed.config import RunConfig
from regionfed.data.registry import build_federation
from regionfed.errors import ConfigError
from regionfed.io import write_atomic, write_json
from regionfed.models.registry import build_task
from regionfed.privacy.audit import (
    canary_score_table,
    null_std,
    one_run_lower_bound,
    one_shot_estimate,
)
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.canaries import CanaryLayout, add_canaries
from regionfed.runtime.evaluation import FederationEvaluator
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import FederatedRun, Simulator, regional_models

#: a canary's raw update is this many clip norms long, so clipping is exercised
CANARY_SCALE = 2.0
#: a regional model is audited when its region has at least this many canaries
MIN_REGION_CANARIES = 4


@dataclass(frozen=True)
class AuditSettings:
    """``--canaries M``, ``--canary-region``, ``--confidence``, and the audit's own seed
    (which canaries are inserted, their directions)."""

    canaries: int = 1000
    region: str | None = None
    confidence: float = 0.95
    audit_seed: int = 0

    def check(self, config: RunConfig, regions: list[str]) -> None:
        if self.canaries < 4:
            raise ConfigError(f"--canaries must be ≥ 4, got {self.canaries}")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"--confidence must be in (0, 1), got {self.confidence}")
        if self.region is not None and self.region not in regions:
            raise ConfigError(f"unknown region {self.region!r}; known: {', '.join(regions)}")
        if config.dp.mode == "off":
            raise ConfigError("the audit needs DP settings (dp.mode user or region; "
                              "--dp-sigma 0 is the no-noise calibration case)")
        if config.runtime not in ("inprocess", "flower-sim"):
            raise ConfigError("the audit runs in-process or on Flower's simulation runtime "
                              f"(--runtime inprocess or flower-sim), not {config.runtime}")


def run_audit(config: RunConfig, settings: AuditSettings, seed: int = 0) -> dict[str, Any]:
    """Train every configured method once with canaries; the audit record (module doc)."""
    federation = build_federation(config.dataset, config.data)
    settings.check(config, list(federation.regions))
    for method in config.methods:
        if get_method(method).kind != "federated":
            raise ConfigError(f"{method} is not a federated method: nothing to audit")
    task = build_task(config.model, federation)
    start = get_flat(task.build_model(seed)).clone()
    dim = start.numel()
    rng = np.random.default_rng(settings.audit_seed)
    inserted = rng.random(settings.canaries) < 0.5
    regions = np.array([settings.region or federation.regions[i % len(federation.regions)]
                        for i in range(settings.canaries)])
    chosen = np.flatnonzero(inserted).tolist()
    layout = CanaryLayout(settings.audit_seed, tuple(chosen),
                          tuple(str(regions[i]) for i in chosen), CANARY_SCALE * config.dp.clip)
    trained = []
    for method in config.methods:
        run, strategy, privacy = _train(config, method, seed, federation, task, layout)
        # what is scored: the global model, and the model each region is served where the
        # method has regional models (also a region it kept on the global model)
        served = regional_models(strategy, unchanged=True)
        models: dict[str | None, Any] = {None: run.final_params,  # None: the global model
                  **{r: served[r] for r in federation.regions
                     if r in served and (regions == r).sum() >= MIN_REGION_CANARIES}}
        table = canary_score_table(settings.audit_seed, range(settings.canaries), start,
                                   list(models.values()))
        trained.append((method, run, privacy, dict(zip(models, table, strict=True))))
    claims = 2 * sum(len(scores) for *_, scores in trained)
    level = 1.0 - (1.0 - settings.confidence) / claims
    out: dict[str, Any] = {}
    for method, run, privacy, scores in trained:
        audits = {}
        for model, row in scores.items():
            mine = np.ones(settings.canaries, bool) if model is None else regions == model
            audits[model] = _model_audit(row[mine], inserted[mine], dim, config.dp.delta,
                                         level)
        out[method] = {
            "epsilon_accounted": privacy["epsilon_pld"], **audits.pop(None),
            "confidence": settings.confidence, "confidence_per_claim": level,
            "canaries": settings.canaries, "inserted": int(inserted.sum()),
            "per_region": audits, "test_overall": run.test["overall"],
            "noise": privacy["noise"]}
    return {"methods": out, "runtime": config.runtime, "delta": config.dp.delta,
            "sigma": config.dp.sigma, "clip": config.dp.clip,
            "sample_rate": config.training.sample_rate, "rounds": config.training.rounds,
            "dim": int(dim)}


def _train(config: RunConfig, method: str, seed: int, federation: Any, task: Any,
           layout: CanaryLayout) -> tuple[FederatedRun, Strategy, dict[str, Any]]:
    """One training run of ``method`` with the layout's canaries on the configured runtime;
    (the run, the trained strategy, its privacy record)."""
    if config.runtime == "flower-sim":
        from regionfed.runtime.flower.simulation import run_flower_simulation

        run, strategy, ledger = run_flower_simulation(
            config, method, seed, len(federation.clients), canaries=layout)
        return run, strategy, ledger.to_dict()
    strategy = build_strategy(method, config)
    ledger = PrivacyLedger(config.dp, config.training.sample_rate)
    simulator = Simulator(federation, task, config.training, seed,
                          FederationEvaluator(task, federation))
    add_canaries(simulator, layout)
    return simulator.run(strategy, ledger=ledger), strategy, ledger.to_dict()


def _model_audit(scores: np.ndarray, inserted: np.ndarray, dim: int, delta: float,
                 confidence: float) -> dict[str, Any]:
    inside, outside = scores[inserted], scores[~inserted]
    entry: dict[str, Any] = {"epsilon_estimate": None, "epsilon_estimate_point": None,
                             "epsilon_estimate_upper": None, "mu": None, "mu_std_error": None}
    if inside.size >= 2:
        estimate = one_shot_estimate(inside, null_std(dim), delta, confidence)
        entry = {"epsilon_estimate": _finite(estimate.epsilon),
                 "epsilon_estimate_point": _finite(estimate.epsilon_point),
                 "epsilon_estimate_upper": _finite(estimate.epsilon_upper),
                 "mu": estimate.mu, "mu_std_error": estimate.mu_std_error}
    return {**entry,
            "epsilon_lower_bound": one_run_lower_bound(inside, outside, delta, confidence),
            # the held-out canaries' spread in null units: ≈ 1 when the null is right
            "held_out_std_in_null_units": (float(outside.std(ddof=1)) / null_std(dim)
                                           if outside.size >= 2 else None),
            "scores_inserted": [float(x) for x in inside],
            "scores_held_out": [float(x) for x in outside]}


def _finite(value: float) -> float | str:
    """JSON has no ∞: an infinite ε is written as the string "inf"."""
    return "inf" if math.isinf(value) else value


def audit_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The record without the raw canary scores (``regionfed audit --json``)."""
    def strip(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entry.items() if not k.startswith("scores")}

    return {**{k: v for k, v in record.items() if k != "methods"},
            "methods": {m: {**strip(r), "per_region": {g: strip(x) for g, x in
                                                       r["per_region"].items()}}
                        for m, r in record["methods"].items()}}


def _eps(value: float | str | None, missing: str = "–") -> str:
    """An ε for a table: "inf" (or an accounted ε of None: no noise) is ∞."""
    if value is None:
        return missing
    return "∞" if value == "inf" else f"{value:.2f}"


def _above(value: float | str | None, accounted: float | None) -> bool:
    if value is None or accounted is None:  # nothing measured, or nothing promised (σ = 0)
        return False
    return value == "inf" or float(value) > accounted


def audit_findings(record: dict[str, Any]) -> list[str]:
    """One line per model whose estimate (lower end) or lower bound exceeds the accounted
    ε: the code leaks more than the ledger says. Empty when nothing was found."""
    findings = []
    for method, r in record["methods"].items():
        accounted = r["epsilon_accounted"]
        for model, entry in [("global", r), *r["per_region"].items()]:
            for key, label in (("epsilon_estimate", "one-shot estimate"),
                               ("epsilon_lower_bound", "lower bound")):
                if _above(entry[key], accounted):
                    findings.append(f"{method} ({model} model): {label} "
                                    f"{_eps(entry[key])} > accounted ε {accounted:.2f}")
    return findings


def audit_table(record: dict[str, Any]) -> str:
    """A markdown table: per method and model, accounted ε, estimate, lower bound."""
    first = next(iter(record["methods"].values()))
    level = f"{first['confidence']:.0%}"
    lines = [f"Audit: σ = {record['sigma']}, C = {record['clip']}, q = "
             f"{record['sample_rate']}, {record['rounds']} rounds, δ = {record['delta']}", "",
             f"| method | model | ε accounted | ε estimate ({level} lower end) | "
             f"point estimate | upper end | ε lower bound ({level}) |",
             "|---|---|---|---|---|---|---|"]
    for method, r in record["methods"].items():
        accounted = _eps(r["epsilon_accounted"], missing="∞")
        for model, entry in [("global", r), *r["per_region"].items()]:
            lines.append(f"| {method} | {model} | {accounted} | "
                         f"{_eps(entry['epsilon_estimate'])} | "
                         f"{_eps(entry['epsilon_estimate_point'])} | "
                         f"{_eps(entry['epsilon_estimate_upper'])} | "
                         f"{entry['epsilon_lower_bound']:.2f} |")
    findings = audit_findings(record)
    lines += ["", f"{first['canaries']} canaries ({first['inserted']} inserted); {level} is "
              "family-wise: each of the table's claims is made at "
              f"{first['confidence_per_claim']:.2%}. An estimate (lower end) or bound above "
              "the accounted ε means the code leaks more than the ledger says; below it is "
              "evidence, not a proof.", "",
              ("**Leak found:** " + "; ".join(findings)) if findings else
              "Nothing above the accounted ε."]
    return "\n".join(lines)


def write_audit(out: Path, record: dict[str, Any]) -> None:
    """``audit.json`` (with the scores), ``audit.md`` and ``audit.png`` (the inserted and
    held-out canaries' cosine distributions of each method's global model) in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "audit.json", record)
    methods = record["methods"]
    fig, axes = plt.subplots(1, len(methods), figsize=(4.5 * len(methods), 3.2),
                             squeeze=False)
    for ax, (method, r) in zip(axes[0], methods.items(), strict=True):
        ax.hist(r["scores_held_out"], bins=20, alpha=0.6, density=True, label="held out")
        ax.hist(r["scores_inserted"], bins=20, alpha=0.6, density=True, label="inserted")
        std = null_std(record["dim"])
        grid = np.linspace(-4 * std, 4 * std, 200)
        ax.plot(grid, np.exp(-0.5 * (grid / std) ** 2) / (std * math.sqrt(2 * math.pi)),
                "k--", linewidth=1, label="null N(0, 1/d)")
        ax.set_title(f"{method}: ε est {_eps(r['epsilon_estimate'])} / accounted "
                     f"{_eps(r['epsilon_accounted'], missing='∞')}", fontsize=9)
        ax.set_xlabel("cos(canary direction, θ₀ − θ_T)")
        ax.locator_params(axis="x", nbins=5)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "audit.png", dpi=120)
    plt.close(fig)
    write_atomic(out / "audit.md", "# Privacy audit\n\n" + audit_table(record)
                 + "\n\n![canary score distributions](audit.png)\n")
