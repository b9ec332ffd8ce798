"""Compare regionfed-plus's on-device choice rules on the same trained models.

The choice only decides which candidate a client is evaluated with — training never reads
it — so one run per seed serves every rule: this script trains regionfed-plus on a run
configuration, records at the last evaluation, for every client and candidate (refreshed,
regional, global, kept personal), the validation score, its jackknife replicates and the
test score, and then replays the library's own ``choose_on_validation`` under each rule on
the recorded values. It prints, per rule, the clients' test Overall (each client's score
weighted by its test queries: the mean over clients, not the pooled Overall of a study
table) and how many clients chose each candidate::

    .venv/bin/python experiments/choice_rules.py results/privacy/sigma-1/config.yaml \\
        --seeds 0 1 2 --out runs/choice_rules/privacy-sigma-1.json

``--from FILE`` replays a saved recording without training. Noise under DP comes from OS
entropy, so a rerun trains other models: compare rules within one recording. Under DP with
``regionfed_plus.noise_aware_anchor`` (the default), the clients of a region whose θ_r shows
no signal over its noise make no choice (their own training is their model) and are not
recorded; pass ``--set regionfed_plus.noise_aware_anchor=false`` to replay the rules there.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.on_device import choose_on_validation
from regionfed.algorithms.regionfed import plus as plus_module
from regionfed.config import apply_set_overrides, build_config, load_config
from regionfed.data.registry import build_federation
from regionfed.experiment import run_method
from regionfed.models.registry import build_task
from regionfed.runtime.evaluation import FederationEvaluator
from regionfed.runtime.params import set_flat

#: (label, choose_on_validation's keywords besides the candidates and client; with
#: ``served_check``, ``choice_default: if-served-holds`` — the refreshed and kept personal
#: models are peers for a client whose kept model beats the served θ_r by the same bar,
#: with ``served_variance`` the check's ``score_variance``)
RULES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("single, margin 0.5", {"margin": 0.5}),
    ("single, margin 0", {"margin": 0.0}),
    ("on-device default (peers)", {"margin": 0.5, "peers": 2}),
    ("paired, ν = 0", {"margin": 0.5, "prior_queries": 0.0}),
    ("paired, ν = 2", {"margin": 0.5, "prior_queries": 2.0}),
    ("paired, ν = 8", {"margin": 0.5, "prior_queries": 8.0}),
    *((f"posterior, κ = {k:g}" + (" (default)" if k == 3.0 else ""), {"prior_strength": k})
      for k in (1.5, 3.0, 5.0)),
    ("posterior, κ = 3, if served holds", {"prior_strength": 3.0, "served_check": True}),
    ("posterior, κ = 3, if served holds, worst-case variance",
     {"prior_strength": 3.0, "served_check": True,
      "served_variance": plus_module.WORST_CASE_SCORE_VARIANCE}),
    *((f"posterior, κ = {k:g}, paired ν = 2", {"prior_strength": k, "prior_queries": 2.0})
      for k in (1.5, 3.0, 5.0)),
)
REFRESHED_ORDER, ON_DEVICE_ORDER = plus_module.REFRESHED_ORDER, plus_module.ON_DEVICE_ORDER


@contextmanager
def recording(into: dict[str, dict[str, Any]]) -> Iterator[None]:
    """While active, every choice regionfed-plus makes also records each candidate's
    validation score, jackknife and test score for the client (the last call wins)."""
    def recorded_choice(candidates: dict[str, torch.Tensor], client: Any, *args: Any,
                        **kwargs: Any) -> str:
        runner, data = client.runner, client.data
        row: dict[str, Any] = {"n": len(data.val)}
        for name, params in candidates.items():
            model = set_flat(runner.model, params)
            val, jackknife = 0.0, []
            if len(data.val):
                predictions = runner.task.predict(model, data.val)
                val = runner.task.score(predictions, data.val)["overall"]
                jackknife = runner.task.leave_one_out_scores(predictions, data.val).tolist()
            row[name] = {"val": val, "jackknife": jackknife,
                         "test": runner.task.evaluate(model, data.test)["overall"],
                         "test_n": len(data.test)}
        row["chosen"] = choose_on_validation(candidates, client, *args, **kwargs)
        into[client.client_id] = row
        return row["chosen"]

    plus_module.choose_on_validation = recorded_choice
    try:
        yield
    finally:
        plus_module.choose_on_validation = choose_on_validation


def record(config_path: str, seeds: list[int], overrides: list[str]) -> dict[str, Any]:
    """Train regionfed-plus once per seed; the recorded candidates of every client."""
    data = load_config(config_path)
    apply_set_overrides(data, overrides)
    config = build_config(data)
    federation = build_federation(config.dataset, config.data)
    task = build_task(config.model, federation)
    evaluator = FederationEvaluator(task, federation)
    out: dict[str, Any] = {"config": config_path, "overrides": overrides, "seeds": {}}
    for seed in seeds:
        clients: dict[str, dict[str, Any]] = {}
        with recording(clients):
            outcome, _ = run_method("regionfed-plus", federation, task, config, seed,
                                    evaluator)
        out["seeds"][str(seed)] = {"overall": outcome.test["overall"], "clients": clients}
    return out


class ReplayClient:
    """A client whose validation answers are a recording's (candidates are named tensors)."""

    def __init__(self, row: dict[str, Any], names: dict[int, str]) -> None:
        self.row, self.names = row, names

    def validation_score(self, params: torch.Tensor) -> tuple[float, int]:
        n = self.row["n"]
        return self.row[self.names[id(params)]]["val"] * n, n

    def validation_leave_one_out(self, params: torch.Tensor) -> np.ndarray:
        return np.asarray(self.row[self.names[id(params)]]["jackknife"])


def test_percent(picked: list[dict[str, Any]]) -> float:
    """The test Overall (%) of one picked candidate per client, weighted by test queries."""
    weight = sum(candidate["test_n"] for candidate in picked)
    total = sum(candidate["test"] * candidate["test_n"] for candidate in picked)
    return 100.0 * total / weight if weight else 0.0


def replay(clients: dict[str, dict[str, Any]], rule: dict[str, Any]
           ) -> tuple[float, Counter[str]]:
    """(the clients' test Overall under ``rule`` in %, how many chose each candidate)."""
    bar = {key: value for key, value in rule.items()
           if key not in ("peers", "served_check", "served_variance")}
    choices: list[str] = []
    for row in clients.values():
        candidates = {name: torch.zeros(1) for name in REFRESHED_ORDER if name in row}
        client = ReplayClient(row, {id(tensor): name for name, tensor in candidates.items()})
        on_device = "refreshed" in row and (
            rule.get("peers", 1) == 2
            or (rule.get("served_check", False) and plus_module.kept_beats_served(
                candidates["regional"], candidates["personal"], client,  # type: ignore[arg-type]
                score_variance=rule.get("served_variance"), **bar)))
        choices.append(choose_on_validation(
            candidates, client,  # type: ignore[arg-type]
            order=ON_DEVICE_ORDER if on_device else None, peers=2 if on_device else 1,
            **bar))
    picked = [row[choice] for row, choice in zip(clients.values(), choices, strict=True)]
    return test_percent(picked), Counter(choices)


def table(recorded: dict[str, Any]) -> list[str]:
    seeds = sorted(recorded["seeds"], key=int)
    lines = [f"{recorded['config']} {' '.join(recorded['overrides'])} — seeds {seeds}",
             "| rule | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | choices |",
             "|---|" + "---|" * (len(seeds) + 2)]
    for label, rule in RULES:
        results = [replay(recorded["seeds"][s]["clients"], rule) for s in seeds]
        counts = sum((c for _, c in results), Counter())
        scores = [score for score, _ in results]
        lines.append(f"| {label} | " + " | ".join(f"{s:.2f}" for s in scores)
                     + f" | {np.mean(scores):.2f} | "
                     + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + " |")
    oracle = [best_on_test(recorded["seeds"][s]["clients"]) for s in seeds]
    lines.append("| (each client's best candidate on test: no rule can reach it) | "
                 + " | ".join(f"{s:.2f}" for s in oracle) + f" | {np.mean(oracle):.2f} | |")
    return lines


def best_on_test(clients: dict[str, dict[str, Any]]) -> float:
    """The clients' test Overall (%) if each took its best candidate on the test split."""
    return test_percent([max((row[name] for name in REFRESHED_ORDER if name in row),
                             key=lambda candidate: candidate["test"])
                         for row in clients.values()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", help="a run configuration (config.yaml)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, help="save the recording here (JSON)")
    parser.add_argument("--from", dest="source", type=Path, help="replay a saved recording")
    args = parser.parse_args(argv)
    if (args.config is None) == (args.source is None):
        parser.error("give a config to train on, or --from a saved recording")
    if args.source is not None:
        recorded = json.loads(args.source.read_text())
    else:
        recorded = record(args.config, args.seeds, args.overrides)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(recorded))
    print("\n".join(table(recorded)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
