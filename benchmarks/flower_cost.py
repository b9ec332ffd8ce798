"""Start-up and per-round cost of the Flower runtimes versus the in-process simulator, on one
workload, measured in one run (issue 8).

Each runtime runs the same method on the same small esci-synth federation twice, with 1 and
with ``--rounds`` rounds (DP off, validation only at the end); per-round cost is the
difference divided by the extra rounds, start-up is the 1-round time minus one round. The
Deployment Engine is a local SuperLink with one SuperNode per client on 127.0.0.1
(:class:`~regionfed.runtime.flower.processes.LocalDeployment`, started once, not counted).

    .venv/bin/python benchmarks/flower_cost.py                    # fedavg, 1 vs 3 rounds
    .venv/bin/python benchmarks/flower_cost.py --method regionfed-grad --skip-deployment
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from regionfed.config import build_config
from regionfed.data.registry import build_federation
from regionfed.experiment import run_method
from regionfed.models.registry import build_task
from regionfed.runtime.evaluation import FederationEvaluator

WORKLOAD = {"data": {"num_queries": 480, "num_regions": 2, "clients_per_region": 2,
                     "vocab_size": 1000},
            "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
            "regionfed": {"rho_search": False}}


def timed_run(runtime: str, method: str, rounds: int, superlink: str | None = None) -> float:
    config = build_config({**WORKLOAD, "runtime": runtime,
                           "training": {"rounds": rounds, "eval_every": rounds},
                           "flower": {"superlink": superlink}, "methods": [method]})
    federation = build_federation(config.dataset, config.data)
    task = build_task(config.model, federation)
    start = time.perf_counter()
    run_method(method, federation, task, config, 0, FederationEvaluator(task, federation))
    return time.perf_counter() - start


def measure(runtime: str, method: str, rounds: int, superlink: str | None = None
            ) -> dict[str, float]:
    one = timed_run(runtime, method, 1, superlink)
    many = timed_run(runtime, method, rounds, superlink)
    per_round = (many - one) / (rounds - 1)
    return {"one_round_s": one, f"{rounds}_rounds_s": many, "per_round_s": per_round,
            "startup_s": max(0.0, one - per_round)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="fedavg")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-deployment", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    results = {"inprocess": measure("inprocess", args.method, args.rounds),
               "flower-sim": measure("flower-sim", args.method, args.rounds)}
    if not args.skip_deployment:
        from regionfed.runtime.flower.processes import LocalDeployment

        config = build_config(WORKLOAD)
        federation = build_federation(config.dataset, config.data)
        nodes, seen = [], {}
        for client in federation.clients:
            nodes.append((client.region, seen.setdefault(client.region, 0)))
            seen[client.region] += 1
        folder = Path(tempfile.mkdtemp(prefix="rf-bench-", dir="/tmp"))
        try:
            with LocalDeployment(nodes, folder) as deployment:
                results["flower"] = measure("flower", args.method, args.rounds,
                                            deployment.address)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    base = results["inprocess"]
    print(f"{args.method}: 2 regions × 2 clients, tiny model, {args.rounds} vs 1 round")
    print(f"{'runtime':<12} {'start-up s':>11} {'per round s':>12} {'round ratio':>12}")
    for name, r in results.items():
        print(f"{name:<12} {r['startup_s']:>11.1f} {r['per_round_s']:>12.2f} "
              f"{r['per_round_s'] / max(base['per_round_s'], 1e-9):>11.0f}×")
    if args.json:
        Path(args.json).write_text(json.dumps({"method": args.method, **results}, indent=2))


if __name__ == "__main__":
    main()
