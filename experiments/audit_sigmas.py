"""The canary audit across noise levels (docs/privacy.md, "Audit"): the published table.

For every σ, one ``regionfed audit`` of the methods on the same small federation (each
method trained once with the same canaries), then one table of accounted ε, the one-shot
estimate (lower end, point) and the one-run lower bound per method and model::

    .venv/bin/python experiments/audit_sigmas.py --sigmas 0,0.5,1,2,4 \\
        --methods fedavg,regionfed-grad,regionfed-interp,regionfed-plus --canaries 4000 \\
        --out results/audit

Writes ``sigma-<σ>/audit.{json,md,png}`` (``regionfed audit --out``) and ``table.md`` under
``--out``, and prints the table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from regionfed.audit import AuditSettings, run_audit, write_audit
from regionfed.config import build_config
from regionfed.io import write_atomic

#: the federation and training of the published table (``regionfed audit`` flags:
#: --regions 2 --clients-per-region 5 --rounds 10 --sample-rate 0.5 --set model.dim=32 …)
BASE: dict[str, Any] = {
    "dataset": "esci-synth",
    "data": {"num_queries": 2000, "num_regions": 2, "clients_per_region": 5},
    "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
    "training": {"rounds": 10, "sample_rate": 0.5, "eval_every": 10},
}


def _eps(value: Any) -> str:
    if value is None:
        return "∞"
    return "∞" if value == "inf" else f"{value:.2f}"


def table(records: dict[float, dict[str, Any]]) -> str:
    """One row per σ, method and model: accounted / estimate (lower end) / point / bound."""
    first = next(iter(records.values()))
    some = next(iter(first["methods"].values()))
    lines = [f"{some['canaries']} canaries (about half inserted, the regions in turn); q = "
             f"{first['sample_rate']}, {first['rounds']} rounds, C = {first['clip']}, δ = "
             f"{first['delta']}; confidence {some['confidence']:.0%} family-wise per σ.", "",
             "| σ | method | model | ε accounted | estimate (lower end) | point estimate | "
             "lower bound | seconds |", "|---|---|---|---|---|---|---|---|"]
    for sigma, record in records.items():
        for method, r in record["methods"].items():
            for model, entry in [("global", r), *r["per_region"].items()]:
                lines.append(f"| {sigma:g} | {method} | {model} | "
                             f"{_eps(r['epsilon_accounted'])} | "
                             f"{_eps(entry['epsilon_estimate'])} | "
                             f"{_eps(entry['epsilon_estimate_point'])} | "
                             f"{entry['epsilon_lower_bound']:.2f} | "
                             f"{record['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sigmas", default="0,0.5,1,2,4")
    parser.add_argument("--methods",
                        default="fedavg,regionfed-grad,regionfed-interp,regionfed-plus")
    parser.add_argument("--canaries", type=int, default=4000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    records = {}
    for sigma in (float(s) for s in args.sigmas.split(",")):
        config = build_config({**BASE, "methods": args.methods.split(","),
                               "dp": {"mode": "user", "sigma": sigma, "clip": 1.0}})
        began = time.perf_counter()
        record = run_audit(config, AuditSettings(canaries=args.canaries))
        record["seconds"] = time.perf_counter() - began
        write_audit(args.out / f"sigma-{sigma:g}", record)
        records[sigma] = record
    text = table(records)
    write_atomic(args.out / "table.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
