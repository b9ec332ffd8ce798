"""GPU check: what one accelerator does with regionfed, one step at a time.

    bash benchmarks/gpu_check.sh                                  # on the GPU machine
    .venv/bin/python benchmarks/gpu_check.py --device cpu --quick # the same steps here

Steps (``--step``; the shell wrapper runs each in its own process under its own
``timeout``, so one slow step cannot eat the others' time):

* ``tiny``: the main job's workload (esci-synth, 8 regions × 10 clients, the ``tiny`` model,
  E = 1, batch 32, AdamW), fedavg, 4 rounds on the device, once with the default client
  batching (``auto``: clients one by one on an accelerator) and once with
  ``client_batching: on`` (vmap over clients on the device): seconds per round (median of the
  rounds between the first and the last), its breakdown, how clients were trained, the
  test Overall, and the largest parameter difference between the two (SGD: batched on the
  device must give the model training them one by one gives, to float tolerance).
  Compare with the 2-core CPU's batched round (docs/performance.md).
* ``t5-small`` and ``cnn-femnist``: the paper-protocol configs (``configs/paper``): seconds
  of one optimizer step on the device × the expected steps of a round (q · Σ_u ⌈n_u/B⌉ · E)
  → seconds per round, hours of one FedAvg method × seed (T rounds) and of the whole
  ``compare --privacy both`` table (methods × seeds × 2 + tuning runs, FedAvg-equivalent:
  RegionFed-interp/-meta do about twice the client compute). ``cnn-femnist`` is skipped,
  saying so, where the FEMNIST file is not present (the GPU machine has no ../shared).

``--quick`` shrinks the workloads (a few hundred queries, 2 × 2 clients) to test the
plumbing; its numbers mean nothing. Prints one JSON object per step (and writes it with
``--json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import paper_cost  # noqa: E402
import round_time  # noqa: E402

from regionfed.config import build_config, load_config  # noqa: E402
from regionfed.data.registry import build_federation  # noqa: E402
from regionfed.errors import RegionFedError  # noqa: E402
from regionfed.runtime.local_training import OptimizerConfig  # noqa: E402

STEPS = ("tiny", "t5-small", "cnn-femnist")
#: data overrides of --quick (plumbing only)
QUICK_DATA = {"esci-synth": {"num_queries": 400, "num_regions": 2, "clients_per_region": 2},
              "femnist": {"num_regions": 2, "max_writers": 4}}


def tiny_step(device: str, quick: bool) -> dict[str, Any]:
    """fedavg rounds of the main job's workload on ``device``, with the default client
    batching (``auto``: one by one on an accelerator) and with ``on`` (vmap on any device)."""
    regions, clients, queries = (2, 2, 400) if quick else (8, 10, 20_000)
    federation, task = round_time.workload(regions, clients, queries)
    out: dict[str, Any] = {"clients": len(federation.clients)}
    final = {}
    for batching in ("auto", "on"):
        training = round_time.training_config(4, batching, 80).model_copy(
            update={"device": device, "optimizer": OptimizerConfig(name="sgd", lr=0.1)})
        seconds, breakdowns, run = round_time.timed_run("fedavg", federation, task, training)
        timed = slice(1, len(seconds) - 1)
        final[batching] = run.final_params
        out[batching] = {
            "seconds_per_round": statistics.median(seconds[timed]),
            "timed_rounds": len(seconds[timed]),
            "breakdown": round_time.mean_breakdown(breakdowns[timed]),
            "client_batching": run.history[0]["client_batching"],
            "test_overall": run.test["overall"]}
    # the same clients trained one by one and batched on the device: the same model (SGD)
    out["max_param_difference_on_vs_auto"] = float((final["on"] - final["auto"]).abs().max())
    return out


def paper_step(name: str, device: str, quick: bool, steps: int) -> dict[str, Any]:
    """Seconds per optimizer step of ``configs/paper/<name>.yaml`` on ``device`` and what it
    projects to."""
    raw = load_config(ROOT / "configs" / "paper" / f"{name}.yaml")
    raw["training"] = {**raw.get("training", {}), "device": device}
    if quick:
        raw["data"] = {**raw.get("data", {}), **QUICK_DATA.get(raw.get("dataset"), {})}
    config = build_config(raw)
    data_path = config.data.model_dump().get("path")
    if data_path and not (ROOT / data_path).exists() and not Path(data_path).exists():
        return {"skipped": f"data file {data_path} not present on this machine"}
    federation = build_federation(config.dataset, config.data)
    sizes = [len(c.train) for c in federation.clients]
    per_run = paper_cost.expected_steps(config, sizes)
    per_step, params = paper_cost.seconds_per_step(config, steps, device, federation)
    runs = paper_cost.runs_in_table(config)
    hours_per_run = per_run * per_step / 3600
    return {"parameters": params, "clients": len(sizes), "rounds": config.training.rounds,
            "seconds_per_step": per_step,
            "steps_per_round": per_run / config.training.rounds,
            "seconds_per_round": per_step * per_run / config.training.rounds,
            "hours_per_fedavg_run": hours_per_run, "runs_in_table": runs,
            "hours_full_protocol": hours_per_run * runs}


def run_step(step: str, device: str, quick: bool, steps: int) -> dict[str, Any]:
    import torch

    start = time.perf_counter()
    try:
        out = tiny_step(device, quick) if step == "tiny" else \
            paper_step(step, device, quick, steps)
    except (RegionFedError, ImportError, RuntimeError) as exc:  # e.g. CUDA OOM, no extra
        out = {"error": f"{type(exc).__name__}: {exc}"}
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"step": step, "device": device, "gpu": gpu, "quick": quick,
            "torch": torch.__version__, "seconds": round(time.perf_counter() - start, 1),
            **out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--step", choices=(*STEPS, "all"), default="all")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed optimizer steps of the paper configs (after a warm-up)")
    parser.add_argument("--quick", action="store_true", help="tiny workloads (plumbing only)")
    parser.add_argument("--json", type=Path, help="append each step's JSON line to FILE")
    args = parser.parse_args(argv)
    failed = False
    for step in STEPS if args.step == "all" else (args.step,):
        record = run_step(step, args.device, args.quick, args.steps)
        failed |= "error" in record
        line = json.dumps(record)
        print(line, flush=True)
        if args.json:
            with open(args.json, "a") as handle:
                handle.write(line + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
