"""``regionfed audit``: measure the privacy a run actually delivers (docs/privacy.md, "Audit").

Each configured method is trained once, in-process, with canary clients added to the
federation (:mod:`regionfed.runtime.canaries`): of M canaries, each is inserted with
probability ½ (the audit's own seeded coin), in every region round-robin or in one chosen
region. After training, every canary — inserted or not — is scored by the cosine between
its direction and what the model moved (:func:`regionfed.privacy.audit.canary_scores`), for
the global model and for each region's model (that region's canaries). Reported per model:
the ledger's ε, Andrew et al.'s one-shot ε estimate and Steinke et al.'s lower bound at the
stated confidence (:mod:`regionfed.privacy.audit`). Neither is a proof: an estimate above
the accounted ε, or a lower bound above it, means the code leaks more than the ledger says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from regionfed.algorithms.registry import get_method
from regionfed.config import RunConfig
from regionfed.data.registry import build_federation
from regionfed.errors import ConfigError
from regionfed.experiment import build_strategy
from regionfed.io import write_atomic, write_json
from regionfed.models.registry import build_task
from regionfed.privacy.audit import canary_score_table, one_run_lower_bound, one_shot_epsilon
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.canaries import add_canaries
from regionfed.runtime.evaluation import FederationEvaluator
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import Simulator

#: a canary's raw update is this many clip norms long, so clipping is exercised
CANARY_SCALE = 2.0


@dataclass(frozen=True)
class AuditSettings:
    """``--canaries M``, ``--canary-region``, ``--confidence``, and the audit's own seed
    (which canaries are inserted, their directions)."""

    canaries: int = 100
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
        if config.runtime != "inprocess":
            raise ConfigError("the audit runs in-process (runtime: inprocess)")


def run_audit(config: RunConfig, settings: AuditSettings, seed: int = 0) -> dict[str, Any]:
    """Train every configured method once with canaries; the audit record (module doc)."""
    federation = build_federation(config.dataset, config.data)
    settings.check(config, list(federation.regions))
    for method in config.methods:
        if get_method(method).kind != "federated":
            raise ConfigError(f"{method} is not a federated method: nothing to audit")
    task = build_task(config.model, federation)
    evaluator = FederationEvaluator(task, federation)
    rng = np.random.default_rng(settings.audit_seed)
    inserted = rng.random(settings.canaries) < 0.5
    regions = [settings.region or federation.regions[i % len(federation.regions)]
               for i in range(settings.canaries)]
    out: dict[str, Any] = {}
    for method in config.methods:
        strategy = build_strategy(method, config)
        ledger = PrivacyLedger(config.dp, config.training.sample_rate)
        simulator = Simulator(federation, task, config.training, seed, evaluator)
        start = get_flat(simulator.model).clone()
        chosen = [i for i in range(settings.canaries) if inserted[i]]
        add_canaries(simulator, settings.audit_seed, chosen, [regions[i] for i in chosen],
                     CANARY_SCALE * config.dp.clip)
        run = simulator.run(strategy, ledger=ledger)
        # every canary against the global model (row 0) and each region's model (row 1 + k)
        table = canary_score_table(
            settings.audit_seed, range(settings.canaries), start,
            [run.final_params, *(run.regional_params.get(r, run.final_params)
                                 for r in federation.regions)])
        record = _model_audit(table[0], inserted, config.dp.delta, settings.confidence)
        per_region = {}
        for k, region in enumerate(federation.regions):
            mine = np.array([r == region for r in regions])
            if mine.sum() < 4:
                continue
            per_region[region] = _model_audit(table[1 + k][mine], inserted[mine],
                                              config.dp.delta, settings.confidence)
        privacy = ledger.to_dict()
        out[method] = {
            "epsilon_accounted": privacy["epsilon_pld"],
            **record, "confidence": settings.confidence, "canaries": settings.canaries,
            "inserted": int(inserted.sum()), "per_region": per_region,
            "test_overall": run.test["overall"], "noise": privacy["noise"]}
    return {"methods": out, "delta": config.dp.delta, "sigma": config.dp.sigma,
            "clip": config.dp.clip, "sample_rate": config.training.sample_rate,
            "rounds": config.training.rounds}


def _model_audit(scores: np.ndarray, inserted: np.ndarray, delta: float,
                 confidence: float) -> dict[str, Any]:
    inside, outside = scores[inserted], scores[~inserted]
    estimate = (one_shot_epsilon(inside, outside, delta)
                if inside.size >= 2 and outside.size >= 2 else None)
    return {"epsilon_estimate": None if estimate is None or math.isinf(estimate)
            else estimate,
            "epsilon_estimate_infinite": estimate is not None and math.isinf(estimate),
            "epsilon_lower_bound": one_run_lower_bound(inside, outside, delta, confidence),
            "scores_inserted": [float(x) for x in inside],
            "scores_held_out": [float(x) for x in outside]}


def audit_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The record without the raw canary scores (``regionfed audit --json``)."""
    def strip(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entry.items() if not k.startswith("scores")}

    return {**{k: v for k, v in record.items() if k != "methods"},
            "methods": {m: {**strip(r), "per_region": {g: strip(x) for g, x in
                                                       r["per_region"].items()}}
                        for m, r in record["methods"].items()}}


def _eps(value: float | None, infinite: bool = False) -> str:
    return "∞" if infinite or value is None else f"{value:.2f}"


def audit_table(record: dict[str, Any]) -> str:
    """A markdown table: per method and model, accounted ε, estimate, lower bound."""
    lines = [f"Audit: σ = {record['sigma']}, C = {record['clip']}, q = "
             f"{record['sample_rate']}, {record['rounds']} rounds, δ = {record['delta']}", "",
             "| method | model | ε accounted | ε estimate (one-shot) | ε lower bound |",
             "|---|---|---|---|---|"]
    for method, r in record["methods"].items():
        accounted = _eps(r["epsilon_accounted"])
        rows = [("global", r), *r["per_region"].items()]
        for model, entry in rows:
            lines.append(f"| {method} | {model} | {accounted} | "
                         f"{_eps(entry['epsilon_estimate'], entry['epsilon_estimate_infinite'])}"
                         f" | {entry['epsilon_lower_bound']:.2f} |")
    first = next(iter(record["methods"].values()))
    lines += ["", f"{first['canaries']} canaries ({first['inserted']} inserted); lower bound "
              f"at {first['confidence']:.0%} confidence. An estimate or bound above the "
              "accounted ε means the code leaks more than the ledger says; below it is "
              "evidence, not a proof."]
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
        ax.hist(r["scores_held_out"], bins=20, alpha=0.6, label="held out")
        ax.hist(r["scores_inserted"], bins=20, alpha=0.6, label="inserted")
        estimate = _eps(r["epsilon_estimate"], r["epsilon_estimate_infinite"])
        ax.set_title(f"{method}: ε est {estimate} / accounted "
                     f"{_eps(r['epsilon_accounted'])}", fontsize=9)
        ax.set_xlabel("cos(canary direction, θ₀ − θ_T)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "audit.png", dpi=120)
    plt.close(fig)
    write_atomic(out / "audit.md", "# Privacy audit\n\n" + audit_table(record)
                 + "\n\n![canary score distributions](audit.png)\n")
