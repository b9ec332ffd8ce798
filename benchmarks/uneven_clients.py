"""Uneven clients: does automatic client batching ever make training slower than the
sequential loop? Measured in ONE run (this machine is shared and noisy: compare ratios).

    .venv/bin/python benchmarks/uneven_clients.py            # ~3 minutes on 2 cores
    .venv/bin/python benchmarks/uneven_clients.py --quick    # under a minute

Workload: a reviews-like federation (5-class text classification, the ``tiny`` text model,
texts of 5–64 tokens) of 24 clients in 3 regions whose training sets range from 8 to 2,891
reviews (log-spaced, as reviewers of the UCSD 5-core files do); fedavg, every client every
round, E = 1, batch 32, AdamW. ``client_batching`` ``auto`` and ``off`` alternate over
``--repeats`` runs of ``--rounds`` rounds; printed: the median seconds of each and the
ratio auto / off (< 1: batching is faster).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from regionfed.algorithms.registry import build_strategy
from regionfed.config import TrainingConfig, build_config
from regionfed.data.federation import ClientData, Federation
from regionfed.data.text import TextDataset
from regionfed.models.text_classification_task import TextClassificationTask
from regionfed.models.tiny import TinyConfig
from regionfed.runtime.simulator import Simulator


def texts(rng: np.random.Generator, n: int, region: str) -> TextDataset:
    words = [f"w{i}" for i in range(2000)]
    tokens = [list(rng.choice(words, size=int(rng.integers(5, 65)))) for _ in range(n)]
    return TextDataset(tokens, rng.integers(0, 5, size=n), [region] * n)


def uneven_federation(clients: int = 24, smallest: int = 8, largest: int = 2891) -> Federation:
    rng = np.random.default_rng(0)
    sizes = np.geomspace(smallest, largest, clients).round().astype(int)
    rng.shuffle(sizes)
    regions = ["r0", "r1", "r2"]
    out = []
    for k, n in enumerate(sizes):
        region = regions[k % 3]
        out.append(ClientData(f"{region}/c{k:02d}", region, texts(rng, int(n), region),
                              texts(rng, 4, region), texts(rng, 4, region)))
    return Federation("uneven", regions, out, {"num_classes": 5, "max_tokens": 64})


def timed_run(federation: Federation, task: TextClassificationTask, batching: str,
              rounds: int) -> float:
    training = TrainingConfig(rounds=rounds, local_epochs=1, batch_size=32,
                              eval_every=rounds, client_batching=batching)
    strategy = build_strategy("fedavg", build_config({"methods": ["fedavg"]}))
    start = time.perf_counter()
    Simulator(federation, task, training, seed=0).run(strategy)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer clients and repeats")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    federation = uneven_federation(12, 8, 800) if args.quick else uneven_federation()
    task = TextClassificationTask(5, TinyConfig(), max_len=64)
    repeats = 1 if args.quick else args.repeats
    seconds: dict[str, list[float]] = {"auto": [], "off": []}
    timed_run(federation, task, "off", 1)  # warm-up: featurisation caches, allocator
    for _ in range(repeats):
        for batching in ("auto", "off"):
            seconds[batching].append(timed_run(federation, task, batching, args.rounds))
    sizes = [len(c.train) for c in federation.clients]
    auto, off = (float(np.median(seconds[b])) for b in ("auto", "off"))
    print(f"{len(sizes)} clients, {min(sizes)}–{max(sizes)} training reviews, "
          f"{args.rounds} fedavg rounds, median of {repeats}")
    print(f"client_batching auto: {auto:.1f} s   off: {off:.1f} s   "
          f"ratio auto / off: {auto / off:.2f}")


if __name__ == "__main__":
    main()
