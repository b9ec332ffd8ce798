"""What the paper-protocol configs (``configs/paper/``) cost: exact optimizer-step counts and
seconds per step measured on THIS machine, in one run.

    .venv/bin/python benchmarks/paper_cost.py                   # every configs/paper/*.yaml
    .venv/bin/python benchmarks/paper_cost.py configs/paper/t5-small.yaml --steps 3

For each config: the federation and model it builds, the expected local optimizer steps of
one federated method × seed (Σ over rounds of q · Σ_u ⌈n_u / B⌉ · E, q = the client sampling
rate), the mean seconds of one training step at batch size B measured here (after one
warm-up step), and their product — the compute of one FedAvg run on this machine. RegionFed's
extra work per round (``benchmarks/round_time.py``: grad ≈ 1×, interp/meta ≈ 2× FedAvg's
client compute) and the table's multipliers (methods × seeds × tuning candidates × privacy
settings) are printed beside it, not folded in: they depend on the comparison being run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

from regionfed.config import RunConfig, build_config, load_config
from regionfed.data.federation import Federation
from regionfed.data.registry import build_federation
from regionfed.models.registry import build_task
from regionfed.models.tasks import to_device
from regionfed.runtime.device import resolve_device
from regionfed.runtime.local_training import make_optimizer

ROOT = Path(__file__).resolve().parents[1]


def expected_steps(config: RunConfig, client_sizes: list[int]) -> float:
    """E[local optimizer steps of one federated method × seed] = T · q · Σ_u ⌈n_u/B⌉ · E."""
    t = config.training
    per_round = sum(math.ceil(n / t.batch_size) for n in client_sizes) * t.local_epochs
    return t.rounds * t.sample_rate * per_round


def seconds_per_step(config: RunConfig, steps: int, device: str = "cpu",
                     federation: Federation | None = None) -> tuple[float, int]:
    """Mean wall seconds of one optimizer step at the config's batch size on ``device``
    (here), and the model's parameter count."""
    federation = federation or build_federation(config.dataset, config.data)
    task = build_task(config.model, federation)
    where = resolve_device(device)
    model = task.build_model(0).to(where)
    pooled = task.prepare(federation.clients[0].train, training=True)
    batch = to_device(next(task.batches(pooled, config.training.batch_size, None)), where)
    optimizer = make_optimizer(model.parameters(), config.training.optimizer)
    model.train()
    timings = []
    for _ in range(steps + 1):  # the first step warms up allocators and kernels
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        task.loss(model, batch).backward()
        optimizer.step()
        if where.type == "cuda":
            torch.cuda.synchronize(where)  # kernels run asynchronously
        timings.append(time.perf_counter() - start)
    return sum(timings[1:]) / steps, sum(p.numel() for p in model.parameters())


def runs_in_table(config: RunConfig) -> int:
    """Method × seed runs of ``compare --privacy both`` on ``config``: methods × seeds × 2
    privacy settings, plus one tuning run per method and lr candidate."""
    candidates = len(config.tuning.lr) if config.tuning.enabled else 1
    return len(config.methods) * config.seeds * 2 + len(config.methods) * candidates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", type=Path,
                        default=sorted((ROOT / "configs" / "paper").glob("*.yaml")))
    parser.add_argument("--steps", type=int, default=5, help="timed steps per model")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    print(f"{'config':<18} {'params':>8} {'clients':>7} {'steps/run':>10} {'s/step':>7} "
          f"{'h/run (here)':>12} {'runs in table':>13}")
    for path in args.configs:
        config = build_config({**load_config(path), "training": {
            **load_config(path).get("training", {}), "device": "cpu"}})
        federation = build_federation(config.dataset, config.data)
        sizes = [len(c.train) for c in federation.clients]
        steps = expected_steps(config, sizes)
        per_step, params = seconds_per_step(config, args.steps)
        runs = runs_in_table(config)
        print(f"{path.stem:<18} {params / 1e6:>7.1f}M {len(sizes):>7} {steps:>10,.0f} "
              f"{per_step:>7.3f} {steps * per_step / 3600:>12.1f} {runs:>13}")
    print("\nh/run: one FedAvg method × seed on this machine's CPU (RegionFed interp/meta do "
          "about twice the client compute); runs in table: methods × seeds × 2 privacy "
          "settings + tuning runs (methods × lr candidates), with `compare --privacy both`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
