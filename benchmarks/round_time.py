"""Round-time benchmark: batched vs sequential clients, RegionFed's overhead, compute floor,
and scale to 8,000 clients — all measured in ONE run on the same workload (this machine is
shared and noisy: compare ratios, not absolute times).

    .venv/bin/python benchmarks/round_time.py                 # full (~15 minutes)
    .venv/bin/python benchmarks/round_time.py --quick         # about three minutes
    .venv/bin/python benchmarks/round_time.py --baselines     # + every own client step
    .venv/bin/python benchmarks/round_time.py --quick --baselines ditto,regionfed-plus
    .venv/bin/python benchmarks/round_time.py --json out.json # also write the numbers

Workload (default): esci-synth, 8 regions × 10 clients, the ``tiny`` model, E = 1, batch 32,
AdamW, no DP, ρ search on (Brent's method, the default ``regionfed.line_search``; the
row ``regionfed-grad-golden`` times the paper's golden-section search in the same run).
FedAvg is timed with its clients one by one (``client_batching: off``), batched (vmap,
``on``) and over processes (``processes``: this process and one worker per further torch
thread, each at one thread); RegionFed's ratios use ``--mode`` (default ``processes``, what
``auto`` picks on a CPU with two or more threads).
A round's time is the median over ``--repeats`` timed rounds (the first round, which also
calibrates μ and collects the dynamic router's histograms, and the last, which evaluates,
are not timed; the workers of ``processes`` are started before the first).

Prints a table and (``--json``) the keys ``speedup_batched``, ``speedup_processes``,
``ratio_mode``, ``ratio_grad_fedavg``,
``ratio_meta_fedavg``, ``ratio_interp_fedavg``, ``ratio_dynamic_fedavg``,
``ratio_grad_fedavg_e5`` and ``ratio_meta_fedavg_e5`` (the same ratios at E = 5; ``--quick``
measures them too), ``ratio_grad_golden_fedavg`` and ``line_search_speedup`` (the ρ
search's seconds with golden section over those with Brent's method, same run),
``floor_efficiency`` (batched), ``floor_efficiency_processes``,
``clients_per_second_8000``, ``peak_rss_gb_8000``
plus the raw seconds and a per-round time breakdown by exchange kind. ``--baselines`` adds,
for every method with its own client step, batched and sequential seconds per round and the
round log's ``client_batching`` (``baselines``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.regionfed.config import RegionFedConfig
from regionfed.algorithms.registry import build_strategy
from regionfed.config import RunConfig, TrainingConfig
from regionfed.data.esci_synth import generate_esci_synth
from regionfed.models.registry import build_task
from regionfed.models.tiny import TinyConfig
from regionfed.runtime.local_training import train_local
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import FederatedRun, Simulator

PAPER_LOCAL_EPOCHS = 40  # paper §4 training configuration
#: client_batching value → its fedavg row (``fedavg-<label>``)
PARALLEL_LABELS = {"processes": "processes", "on": "batched", "off": "sequential"}
REGIONFED_METHODS = ("regionfed-grad", "regionfed-meta", "regionfed-interp",
                     "regionfed-dynamic")
#: methods whose client step is their own (batched in lockstep where their calls allow)
OWN_STEP_METHODS = ("local", "fedprox", "ditto", "regionfed-plus", "fedbabu", "fedrep",
                    "apfl", "pfedme", "scaffold")


def ratio_key(method: str) -> str:
    """``regionfed-grad`` → ``ratio_grad_fedavg``."""
    return f"ratio_{method.removeprefix('regionfed-')}_fedavg"


def workload(regions: int, clients_per_region: int, num_queries: int):
    federation = generate_esci_synth(num_queries=num_queries, num_regions=regions,
                                     clients_per_region=clients_per_region, seed=0)
    return federation, build_task(TinyConfig(), federation)


def training_config(rounds: int, batching: str, max_batched: int, epochs: int = 1
                    ) -> TrainingConfig:
    return TrainingConfig(rounds=rounds, local_epochs=epochs, batch_size=32, eval_every=10**9,
                          client_batching=batching, max_batched_clients=max_batched)


def timed_run(method: str, federation, task, training: TrainingConfig,
              config: RunConfig | None = None
              ) -> tuple[list[float], list[dict[str, float]], FederatedRun]:
    """One run of ``method`` (settings from ``config``, default the defaults): every
    round's seconds, every round's breakdown by exchange kind, and the run (final
    parameters, logs)."""
    strategy = build_strategy(method, config or RunConfig(methods=[method]))
    sim = Simulator(federation, task, training, seed=0)
    if training.client_batching == "processes":
        sim.client_processes().wait_ready()  # worker start-up is not a round's time
    stamps: list[float] = []
    breakdowns: list[dict[str, float]] = []

    def on_round(log: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())
        breakdowns.append(dict(sim.last_round_seconds))

    start = time.perf_counter()
    run = sim.run(strategy, on_round=on_round)
    ends = [start, *stamps]
    return [ends[i + 1] - ends[i] for i in range(len(stamps))], breakdowns, run


def round_times(method: str, federation, task, training: TrainingConfig,
                timed: slice | None = None, config: RunConfig | None = None
                ) -> tuple[list[float], dict[str, float]]:
    """Seconds of every timed round (default rounds 2 … T−1) and the mean per-round
    breakdown."""
    seconds, breakdowns, _ = timed_run(method, federation, task, training, config)
    timed = timed or slice(1, len(seconds) - 1)
    return seconds[timed], mean_breakdown(breakdowns[timed])


def baseline_times(federation, task, rounds: int, max_batched: int,
                   methods: tuple[str, ...] = OWN_STEP_METHODS) -> dict[str, dict[str, Any]]:
    """Per method with its own client step: median seconds per timed round batched
    (``on``) and sequential (``off``), their ratio and what the round log says."""
    out = {}
    for method in methods:
        row: dict[str, Any] = {}
        for label, batching in (("batched", "on"), ("sequential", "off")):
            seconds, _, run = timed_run(method, federation, task,
                                        training_config(rounds, batching, max_batched))
            row[f"{label}_seconds"] = float(np.median(seconds[1:len(seconds) - 1]))
            if label == "batched":
                row["client_batching"] = run.history[1]["client_batching"]
        row["speedup"] = row["sequential_seconds"] / row["batched_seconds"]
        print(f"  {method:20s} {row['batched_seconds']:.3f} s/round batched, "
              f"{row['sequential_seconds']:.3f} sequential ({row['client_batching']})",
              file=sys.stderr)
        out[method] = row
    return out


def mean_breakdown(breakdowns: list[dict[str, float]]) -> dict[str, float]:
    """Per exchange kind, the mean seconds over the rounds (0 where a round has none)."""
    keys = sorted({k for b in breakdowns for k in b})
    return {k: float(np.mean([b.get(k, 0.0) for b in breakdowns])) for k in keys}


def floor_seconds(federation, task, batch_size: int, repeats: int) -> float:
    """A plain single-model loop over the round's training examples (the same number of
    sample-gradients), with ``batch_size`` examples per step: the compute floor."""
    model = task.build_model(0)
    start = get_flat(model)
    pooled = task.concat_prepared([task.prepare(c.train, training=True)
                                   for c in federation.clients])
    times = []
    for k in range(repeats + 1):
        t = time.perf_counter()
        train_local(task, model, start, pooled, epochs=1, batch_size=batch_size,
                    optimizer=TrainingConfig().optimizer,
                    generator=torch.Generator().manual_seed(k))
        times.append(time.perf_counter() - t)
    return float(np.median(times[1:]))


def scale_probe(clients_per_region: int, queries_per_client: int, max_batched: int
                ) -> dict[str, float]:
    """One batched fedavg round over 8 × ``clients_per_region`` clients (run in a fresh
    process so the peak RSS is this workload's alone)."""
    federation, task = workload(8, clients_per_region, 8 * clients_per_region
                                * queries_per_client)
    training = training_config(2, "on", max_batched)
    seconds, _ = round_times("fedavg", federation, task, training, timed=slice(0, 1))
    clients = len(federation.clients)
    return {"clients": clients, "round_seconds": float(np.median(seconds)),
            "clients_per_second": clients / float(np.median(seconds)),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="one repeat, no E=5 check, 1,000-client probe (under two minutes)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per method")
    p.add_argument("--max-batched", type=int, default=80,
                   help="clients per batched computation")
    p.add_argument("--scale-clients", type=int, default=None,
                   help="clients per region of the scale probe (8 regions; default 1000, "
                        "125 with --quick)")
    p.add_argument("--json", metavar="FILE", help="write the numbers as JSON")
    p.add_argument("--mode", choices=tuple(PARALLEL_LABELS), default="processes",
                   help="client_batching of the RegionFed / fedavg ratios (default: "
                        "processes, what auto picks on a CPU with two or more threads)")
    p.add_argument("--baselines", nargs="?", const=",".join(OWN_STEP_METHODS), default=None,
                   metavar="M1,M2",
                   help="also time the methods with their own client step (all, or those "
                        "named), batched and sequential (all: adds ~5 minutes)")
    p.add_argument("--paper-epochs-check", type=int, default=None, metavar="E",
                   help="also time fedavg, regionfed-grad and -meta at E local epochs "
                        "(default: 5, or off with --quick)")
    p.add_argument("--_scale-probe", dest="scale_probe", action="store_true",
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.scale_probe:
        print(json.dumps(scale_probe(args.scale_clients or 1000, 10, args.max_batched)))
        return 0
    repeats = args.repeats or (1 if args.quick else 5)
    if args.scale_clients is None:
        args.scale_clients = 125 if args.quick else 1000
    if args.paper_epochs_check is None:
        args.paper_epochs_check = 5
    rounds = repeats + 2
    torch.manual_seed(0)
    federation, task = workload(8, 10, 20000)
    out: dict[str, Any] = {"workload": "esci-synth 8x10, tiny, E=1, batch 32, adamw",
                           "repeats": repeats, "paper_epochs_check": args.paper_epochs_check}
    seconds: dict[str, float] = {}
    breakdown: dict[str, dict[str, float]] = {}
    mode = args.mode
    out["ratio_mode"] = mode
    golden = RunConfig(methods=["regionfed-grad"],
                       regionfed=RegionFedConfig(line_search="golden"))
    runs = [("fedavg-sequential", "fedavg", "off", None), ("fedavg-batched", "fedavg", "on", None),
            ("fedavg-processes", "fedavg", "processes", None),
            *((m, m, mode, None) for m in REGIONFED_METHODS),
            ("regionfed-grad-golden", "regionfed-grad", mode, golden)]
    for label, method, batching, config in runs:
        times, parts = round_times(method, federation, task,
                                   training_config(rounds, batching, args.max_batched),
                                   config=config)
        seconds[label] = float(np.median(times))
        breakdown[label] = parts
        print(f"  {label:20s} {seconds[label]:.3f} s/round", file=sys.stderr)
    # RegionFed's extra work per round (ρ search, scoring, meta gradient, interp fine-tune)
    # does not grow with E; FedAvg's round does. Project the ratio to the paper's E = 40 from
    # this run's own breakdown: 1 + extra / (E · FedAvg's training seconds at E = 1).
    seconds["fedavg"] = seconds[f"fedavg-{PARALLEL_LABELS[mode]}"]  # the ratios' baseline
    breakdown["fedavg"] = breakdown[f"fedavg-{PARALLEL_LABELS[mode]}"]
    fedavg_train = breakdown["fedavg"].get("train", seconds["fedavg"])
    projected = {}
    for m in REGIONFED_METHODS:
        extra = seconds[m] - fedavg_train
        projected[ratio_key(m)] = 1 + extra / (PAPER_LOCAL_EPOCHS * fedavg_train)
    if args.paper_epochs_check:
        for m in ("fedavg", "regionfed-grad", "regionfed-meta"):
            times, _ = round_times(m, federation, task, training_config(
                rounds, mode, args.max_batched, epochs=args.paper_epochs_check))
            seconds[f"{m}@E{args.paper_epochs_check}"] = float(np.median(times))
    if args.paper_epochs_check:
        e = args.paper_epochs_check
        for m in ("regionfed-grad", "regionfed-meta"):
            out[f"{ratio_key(m)}_e{e}"] = seconds[f"{m}@E{e}"] / seconds[f"fedavg@E{e}"]
    if args.baselines:
        out["baselines"] = baseline_times(federation, task, rounds, args.max_batched,
                                          tuple(args.baselines.split(",")))
    chunk = min(args.max_batched, len(federation.clients))
    floor = floor_seconds(federation, task, 32 * chunk, repeats)
    floor_small = floor_seconds(federation, task, 32, repeats)
    fedavg = seconds["fedavg"]
    sequential = seconds["fedavg-sequential"]
    out.update({
        "seconds_per_round": seconds,
        "breakdown_seconds": breakdown,
        "floor_seconds": floor,
        "floor_seconds_batch32": floor_small,
        "speedup_batched": sequential / seconds["fedavg-batched"],
        "speedup_processes": sequential / seconds["fedavg-processes"],
        **{ratio_key(m): seconds[m] / fedavg for m in REGIONFED_METHODS},
        "ratio_grad_golden_fedavg": seconds["regionfed-grad-golden"] / fedavg,
        "line_search_speedup": breakdown["regionfed-grad-golden"].get("evaluate", 0.0)
        / max(breakdown["regionfed-grad"].get("evaluate", 0.0), 1e-9),
        "projected_ratios_at_paper_E40": projected,
        "floor_efficiency": floor / seconds["fedavg-batched"],
        "floor_efficiency_processes": floor / seconds["fedavg-processes"],
        "sequential_floor_efficiency": floor / sequential,
    })
    probe = subprocess.run(
        [sys.executable, __file__, "--_scale-probe", "--scale-clients",
         str(args.scale_clients), "--max-batched", str(args.max_batched)],
        capture_output=True, text=True, check=True)
    scale = json.loads(probe.stdout.strip().splitlines()[-1])
    out["scale"] = scale
    out["clients_per_second_8000"] = scale["clients_per_second"]
    out["peak_rss_gb_8000"] = scale["peak_rss_gb"]
    print(format_table(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


def format_table(out: dict[str, Any]) -> str:
    s = out["seconds_per_round"]
    rows = [
        ("fedavg, sequential clients", f"{s['fedavg-sequential']:.3f} s/round"),
        ("fedavg, batched clients (vmap)", f"{s['fedavg-batched']:.3f} s/round"),
        ("fedavg, clients over processes", f"{s['fedavg-processes']:.3f} s/round"),
        ("speed-up batched / sequential", f"{out['speedup_batched']:.2f}×"),
        ("speed-up processes / sequential", f"{out['speedup_processes']:.2f}×"),
        *((f"{m} / fedavg ({out['ratio_mode']})", f"{out[ratio_key(m)]:.2f}×")
          for m in REGIONFED_METHODS),
        *((f"{m} / fedavg projected to E = 40 (paper)",
           f"{out['projected_ratios_at_paper_E40'][ratio_key(m)]:.3f}×")
          for m in REGIONFED_METHODS),
        *((f"{m} / fedavg measured at E = {e}", f"{s[f'{m}@E{e}'] / s[f'fedavg@E{e}']:.2f}×")
          for e in [out.get("paper_epochs_check")] if e
          for m in ("regionfed-grad", "regionfed-meta")),
        ("compute floor (one model, same sample-gradients)", f"{out['floor_seconds']:.3f} s"),
        ("floor efficiency (floor / batched round)", f"{100 * out['floor_efficiency']:.0f} %"),
        ("floor efficiency over processes",
         f"{100 * out['floor_efficiency_processes']:.0f} %"),
        ("floor efficiency of the sequential loop",
         f"{100 * out['sequential_floor_efficiency']:.0f} %"),
        (f"scale: {out['scale']['clients']} clients, one batched fedavg round",
         f"{out['scale']['round_seconds']:.2f} s"),
        ("scale: clients per second", f"{out['clients_per_second_8000']:.0f}"),
        ("scale: peak RSS", f"{out['peak_rss_gb_8000']:.2f} GB"),
    ]
    if "ratio_grad_golden_fedavg" in out:  # after the RegionFed / fedavg ratios
        at = 5 + len(REGIONFED_METHODS)
        rows[at:at] = [
            (f"regionfed-grad, golden-section ρ / fedavg ({out['ratio_mode']})",
             f"{out['ratio_grad_golden_fedavg']:.2f}×"),
            ("ρ search seconds, golden section / Brent", f"{out['line_search_speedup']:.2f}×")]
    rows += [(f"{m}: batched / sequential ({b['client_batching']})",
              f"{b['speedup']:.2f}× ({b['batched_seconds']:.3f} vs "
              f"{b['sequential_seconds']:.3f} s/round)")
             for m, b in out.get("baselines", {}).items()]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'measure':{width}s} | value", f"{'-' * width}-|------"]
    lines += [f"{name:{width}s} | {value}" for name, value in rows]
    lines.append("")
    lines.append("per-round breakdown (s, by exchange kind; 'server' = strategy work):")
    for label, parts in out["breakdown_seconds"].items():
        lines.append(f"  {label:20s} " + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
