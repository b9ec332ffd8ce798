"""Start-up and per-round cost of the Flower runtimes versus the in-process simulator, on one
workload, measured in one run (issue 8).

Each runtime runs the same method on the same small esci-synth federation for ``--rounds``
rounds (DP off, validation only after the last round), and the moment each round ends is
recorded as it happens (the round callback; on the Deployment Engine, the time in the
ServerApp's streamed "regionfed round" log line). Per-round cost is the median gap between
consecutive round ends; start-up is the time to the end of round 1 minus one round; "finish" is the
final validation + test evaluation and result hand-back. The Deployment Engine is a local
SuperLink with one SuperNode per client on 127.0.0.1
(:class:`~regionfed.runtime.flower.processes.LocalDeployment`, started once per worker kind,
not counted), with warm workers (one process per node) and, with ``--workers warm,fresh``,
Flower's fresh process per message.

    .venv/bin/python benchmarks/flower_cost.py                    # fedavg, 4 rounds
    .venv/bin/python benchmarks/flower_cost.py --workers warm,fresh
    .venv/bin/python benchmarks/flower_cost.py --method regionfed-grad --rho-search --rounds 2
    .venv/bin/python benchmarks/flower_cost.py --secagg           # SecAgg+ per region
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import statistics
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


def measure(runtime: str, method: str, rounds: int, superlink: str | None = None,
            secagg: bool = False) -> dict[str, float]:
    """Seconds to the end of each round, and in total."""
    flower = {"superlink": superlink,
              "secagg": {"enabled": secagg and runtime != "inprocess", "min_clients": 2}}
    config = build_config({**WORKLOAD, "runtime": runtime,
                           "training": {"rounds": rounds, "eval_every": rounds},
                           "flower": flower, "methods": [method]})
    federation = build_federation(config.dataset, config.data)
    task = build_task(config.model, federation)
    ends: list[float] = []
    start = time.perf_counter()
    if runtime == "flower":
        from regionfed.runtime.flower.deployment import run_flower_deployment

        began = time.time()

        def line(text: str) -> None:
            # the stream delivers lines in batches: the ServerApp's own end time counts
            if found := re.search(r"regionfed round .*\(at ([0-9.]+)\)", text):
                ends.append(float(found.group(1)) - began)

        run_flower_deployment(config, method, 0, log=line)
    else:
        run_method(method, federation, task, config, 0, FederationEvaluator(task, federation),
                   on_round=lambda _: ends.append(time.perf_counter() - start))
    total = time.perf_counter() - start
    if len(ends) != rounds:
        raise RuntimeError(f"{runtime}: saw {len(ends)} of {rounds} round ends")
    per_round = statistics.median(b - a for a, b in itertools.pairwise(ends))
    return {"startup_s": ends[0] - per_round, "per_round_s": per_round,
            "finish_s": total - ends[-1], "total_s": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="fedavg")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rho-search", action="store_true",
                        help="regionfed-*: select rho on validation (off by default here)")
    parser.add_argument("--workers", default="warm",
                        help="Deployment Engine node workers to measure, comma-separated: "
                        "warm (one process per node), fresh (a process per message)")
    parser.add_argument("--secagg", action="store_true",
                        help="Flower runtimes: SecAgg+ per region (flower.secagg.enabled)")
    parser.add_argument("--skip-deployment", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    WORKLOAD["regionfed"]["rho_search"] = args.rho_search
    workers = [w.strip() for w in args.workers.split(",") if w.strip()]
    measure("inprocess", args.method, 2)  # warm-up: first imports and allocations
    results = {"inprocess": measure("inprocess", args.method, args.rounds),
               "flower-sim": measure("flower-sim", args.method, args.rounds,
                                     secagg=args.secagg)}
    if not args.skip_deployment:
        from regionfed.runtime.flower.processes import LocalDeployment

        config = build_config(WORKLOAD)
        federation = build_federation(config.dataset, config.data)
        nodes, seen = [], {}
        for client in federation.clients:
            nodes.append((client.region, seen.setdefault(client.region, 0)))
            seen[client.region] += 1
        for worker in workers:
            folder = Path(tempfile.mkdtemp(prefix="rf-bench-", dir="/tmp"))
            try:
                with LocalDeployment(nodes, folder, worker=worker) as deployment:
                    results[f"flower-{worker}"] = measure(
                        "flower", args.method, args.rounds, deployment.address, args.secagg)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    base, sim = results["inprocess"], results["flower-sim"]
    rho = (" (rho selection on)" if args.rho_search else "") + (
        ", SecAgg+ per region on Flower" if args.secagg else "")
    print(f"{args.method}{rho}: 2 regions × 2 clients, tiny model, {args.rounds} rounds")
    print(f"{'runtime':<13} {'start-up s':>11} {'per round s':>12} {'finish s':>9} "
          f"{'total s':>8} {'vs inprocess':>13} {'vs flower-sim':>14}")
    for name, r in results.items():
        print(f"{name:<13} {r['startup_s']:>11.1f} {r['per_round_s']:>12.2f} "
              f"{r['finish_s']:>9.1f} {r['total_s']:>8.1f} "
              f"{r['per_round_s'] / base['per_round_s']:>12.1f}× "
              f"{r['per_round_s'] / sim['per_round_s']:>13.1f}×")
    if args.json:
        Path(args.json).write_text(json.dumps({"method": args.method, **results}, indent=2))


if __name__ == "__main__":
    main()
