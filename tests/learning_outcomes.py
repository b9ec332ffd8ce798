"""What the learning tests assert, as functions of a training seed, and the script that sets
their thresholds from a measured distribution (importable as ``learning_outcomes``).

A learning outcome is not a last-bit quantity: another CPU (other SIMD kernels, another
summation order) or another thread count trains a slightly different model. So every
threshold a test asserts on a learned model comes from this script's table — the minimum over
several training seeds, each under the default kernels, PyTorch's portable kernels
(``ATEN_CPU_CAPABILITY=default``) and one thread (``OMP_NUM_THREADS=1``) — with a margin::

    .venv/bin/python tests/learning_outcomes.py             # every outcome, seeds 0-4
    .venv/bin/python tests/learning_outcomes.py t5 --seeds 8

Each function builds its problem exactly as its test does and returns named scores; the tests
call them with seed 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # run as a script
    sys.path.insert(0, str(TESTS))

from helpers import shared_data  # noqa: E402

from regionfed.config import TrainingConfig  # noqa: E402
from regionfed.models.t5 import T5ModelConfig  # noqa: E402
from regionfed.models.tiny import TinyConfig  # noqa: E402
from regionfed.runtime.local_training import OptimizerConfig  # noqa: E402
from regionfed.runtime.simulator import Simulator  # noqa: E402

#: the tiny T5 of the T5 tests
T5_TINY = T5ModelConfig(d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=2048)


def tiny_federation() -> Any:
    """The suite's small esci-synth federation (``conftest.tiny_federation``)."""
    from regionfed.data.esci_synth import generate_esci_synth

    return generate_esci_synth(num_queries=600, num_regions=2, clients_per_region=3,
                               vocab_size=1000, seed=0)


def _fit_one_client(task: Any, data: Any, seed: int, epochs: int, lr: float) -> Any:
    """AdamW on one client's examples, batches of 16, one reshuffle per epoch."""
    torch.manual_seed(seed)
    model = task.build_model(seed)
    prepared = task.prepare(data, training=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for epoch in range(epochs):
        shuffle = torch.Generator().manual_seed(1000 * seed + epoch)
        for batch in task.batches(prepared, 16, shuffle):
            optimizer.zero_grad()
            task.loss(model, batch).backward()
            optimizer.step()
    return model


def t5_memorizes(seed: int, task: Any = None, federation: Any = None) -> dict[str, float]:
    """A tiny T5 fits 48 queries of one client (intent, spell, NER from generations)."""
    from regionfed.models.registry import build_task

    federation = federation or tiny_federation()
    task = task or build_task(T5_TINY, federation)
    data = federation.clients[0].train.subset(range(48))
    model = _fit_one_client(task, data, seed, epochs=40, lr=1e-2)
    scores = task.evaluate(model, data)
    return {k: float(scores[k]) for k in ("intent", "spell", "ner_f1")}


def minilm_fine_tunes(seed: int, task: Any = None, federation: Any = None
                      ) -> dict[str, float]:
    """The pretrained MiniLM fine-tuned on 48 queries of one client: Overall gained."""
    from regionfed.models.minilm import MiniLMConfig
    from regionfed.models.registry import build_task

    federation = federation or tiny_federation()
    task = task or build_task(MiniLMConfig(), federation)
    data = federation.clients[0].train.subset(range(48))
    before = task.evaluate(task.build_model(seed), data)["overall"]
    model = _fit_one_client(task, data, seed, epochs=6, lr=2e-4)
    return {"gain": float(task.evaluate(model, data)["overall"] - before)}


def femnist_fedavg(seed: int) -> dict[str, float]:
    """fedavg on 10 real FEMNIST writers, 4 rounds × 2 epochs; Overall and its ratio to the
    majority class."""
    from regionfed.algorithms.fedavg import FedAvg
    from regionfed.data.femnist import load_femnist
    from regionfed.models.image_task import ImageClassificationTask
    from regionfed.runtime.evaluation import FederationEvaluator

    fed = load_femnist(path=str(shared_data("femnist", "femnist_leaf_sf05_subset.npz")),
                       num_regions=4, max_writers=10)
    task = ImageClassificationTask(62)
    training = TrainingConfig(rounds=4, local_epochs=2, batch_size=20, eval_every=4,
                              optimizer=OptimizerConfig(name="adamw", lr=3e-3),
                              client_batching="on")
    run = Simulator(fed, task, training, seed=seed).run(FedAvg())
    evaluator = FederationEvaluator(task, fed)
    train = evaluator.pooled_split("train")
    majority = evaluator.evaluate("test", lambda c: task.reference_predictions(train, c.test))
    return {"overall": float(run.test["overall"]),
            "times_majority": float(run.test["overall"] / majority["overall"]),
            "batched": float(run.history[0]["client_batching"] == "batched")}


#: the text classifier of the reviews tests
TEXT_TINY = TinyConfig(dim=32, heads=2, ffn_dim=64, layers=1, ngram_buckets=512)
KEYWORDS = {"terrible": 0, "poor": 1, "mediocre": 2, "decent": 3, "excellent": 4}
FILLER = ("the this it was is product item very really quite a an and for my with delivery "
          "box color size price arrived works looks").split()


def keyword_federation(folder: Path) -> Any:
    """Reviews-like JSON lines whose rating is fixed by one keyword among filler words;
    3 categories × 60 reviews, 2 clients per category."""
    from regionfed.data.reviews import load_reviews

    rng = np.random.default_rng(0)
    path = folder / "reviews.jsonl"
    with path.open("w") as handle:
        for category in ("Books", "Home", "Toys"):
            for _ in range(60):
                key = str(rng.choice(list(KEYWORDS)))
                words = [str(w) for w in rng.choice(FILLER, size=int(rng.integers(3, 8)))]
                words.insert(int(rng.integers(len(words) + 1)), key)
                handle.write(json.dumps({"text": " ".join(words), "rating": KEYWORDS[key] + 1,
                                         "category": category}) + "\n")
    return load_reviews(path=str(path), clients_per_region=2, alpha_d=1.0)


def text_classifier_fedavg(seed: int, task: Any = None, federation: Any = None
                           ) -> dict[str, float]:
    """fedavg with the tiny text classifier on the keyword reviews: accuracy above the
    majority class."""
    import tempfile

    from regionfed.algorithms.registry import build_strategy
    from regionfed.config import build_config
    from regionfed.data.federation import concat_splits
    from regionfed.models.registry import build_task

    if federation is None:
        federation = keyword_federation(Path(tempfile.mkdtemp(prefix="rf-kw-")))
    task = task or build_task(TEXT_TINY, federation)
    train = concat_splits([c.train for c in federation.clients])
    test = concat_splits([c.test for c in federation.clients])
    majority = task.score(task.reference_predictions(train, test), test)["overall"]
    training = TrainingConfig(rounds=4, local_epochs=2, batch_size=16, eval_every=4,
                              optimizer=OptimizerConfig(lr=1e-2))
    strategy = build_strategy("fedavg", build_config({"methods": ["fedavg"]}))
    run = Simulator(federation, task, training, seed=seed).run(strategy)
    return {"majority": float(majority), "overall": float(run.test["overall"]),
            "gain_over_majority": float(run.test["overall"] - majority)}


def query_toy_fits(seed: int) -> dict[str, float]:
    """The tiny query model fits a 4-pattern toy (200 queries, 30 % typos) in 8 epochs:
    intent, NER F1 and spell before and after."""
    from helpers import small_task, toy_dataset

    from regionfed.runtime.local_training import train_local
    from regionfed.runtime.params import get_flat, set_flat

    task, data = small_task(), toy_dataset(200)
    model = task.build_model(seed)
    before = task.evaluate(model, data)
    params, _ = train_local(task, model, get_flat(model), task.prepare(data, True),
                            epochs=8, batch_size=16, optimizer=OptimizerConfig(lr=3e-3),
                            generator=torch.Generator().manual_seed(seed))
    after = task.evaluate(set_flat(model, params), data)
    return {"before_intent": float(before["intent"]), "before_ner_f1": float(before["ner_f1"]),
            **{k: float(after[k]) for k in ("intent", "ner_f1", "spell", "overall")}}


#: the suite's tiny query model (``conftest.tiny_task``)
TINY_QUERY_MODEL = TinyConfig(dim=32, heads=2, ffn_dim=64, ngram_buckets=512)


def pfedme_run(seed: int, federation: Any, task: Any) -> tuple[Any, Any, Any]:
    """pFedMe, 2 rounds × 1 epoch with the default optimizer: (simulator, strategy, run)."""
    from regionfed.algorithms.pfedme import PFedMe

    # one by one: the path its thresholds were measured on (batched = sequential is tested)
    training = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=2,
                              client_batching="off")
    sim = Simulator(federation, task, training, seed=seed)
    strategy = PFedMe()
    return sim, strategy, sim.run(strategy)


def pfedme_personal_fit(sim: Any, strategy: Any, run: Any) -> float:
    """Σ clients' validation loss of their personal models / of the global model."""
    personal = [c.validation_loss(strategy.eval_params(cid, c.region, c))[0]
                for cid, c in sim.clients.items()]
    shared = [c.validation_loss(run.final_params)[0] for c in sim.clients.values()]
    return float(sum(personal) / sum(shared))


def pfedme_personalizes(seed: int) -> dict[str, float]:
    from regionfed.models.registry import build_task

    federation = tiny_federation()
    task = build_task(TINY_QUERY_MODEL, federation)
    return {"personal_over_global_loss": pfedme_personal_fit(*pfedme_run(seed, federation,
                                                                        task))}


#: the FedTP tests' budget on the attention toy (tests/attention_toy.py)
FEDTP_TOY = TrainingConfig(rounds=10, local_epochs=1, batch_size=16, eval_every=10,
                           client_batching="off", optimizer=OptimizerConfig(lr=0.01))


def fedtp_personalizes(seed: int) -> dict[str, float]:
    """fedavg and fedtp on the position toy (clients read different positions): Overall of
    each and fedtp's lead."""
    from attention_toy import ToyAttentionTask, position_federation

    from regionfed.algorithms.fedavg import FedAvg
    from regionfed.algorithms.fedtp import FedTP

    federation, task = position_federation(), ToyAttentionTask()
    fedavg = Simulator(federation, task, FEDTP_TOY, seed=seed).run(FedAvg())
    fedtp = Simulator(federation, task, FEDTP_TOY, seed=seed).run(FedTP())
    leads = [fedtp.test["per_client"][c] - fedavg.test["per_client"][c]
             for c in fedavg.test["per_client"]]
    return {"fedavg": float(fedavg.test["overall"]), "fedtp": float(fedtp.test["overall"]),
            "fedtp_lead": float(fedtp.test["overall"] - fedavg.test["overall"]),
            "smallest_client_lead": float(min(leads))}


OUTCOMES: dict[str, Callable[[int], dict[str, float]]] = {
    "t5": t5_memorizes, "minilm": minilm_fine_tunes, "femnist": femnist_fedavg,
    "text": text_classifier_fedavg, "fedtp": fedtp_personalizes, "query": query_toy_fits,
    "pfedme": pfedme_personalizes}

#: (name, extra environment): the kernel and thread settings every threshold must survive
SETTINGS = (("default kernels", {}), ("ATEN_CPU_CAPABILITY=default",
                                       {"ATEN_CPU_CAPABILITY": "default"}),
            ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1"}))


def _measure(names: list[str], seeds: list[int]) -> None:
    """Worker: one JSON line per outcome and seed."""
    for name in names:
        for seed in seeds:
            scores = OUTCOMES[name](seed)
            print(json.dumps({"outcome": name, "seed": seed, **scores}), flush=True)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outcomes", nargs="*", metavar="OUTCOME",
                        help=f"any of {', '.join(OUTCOMES)} (default: all)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.outcomes or list(OUTCOMES)
    unknown = sorted(set(names) - set(OUTCOMES))
    if unknown:
        parser.error(f"unknown outcome {unknown[0]!r}; known: {', '.join(OUTCOMES)}")
    if args.worker:
        _measure(names, list(range(args.seeds)))
        return 0
    rows: dict[tuple[str, str], list[float]] = {}
    for label, extra in SETTINGS:
        out = subprocess.run([sys.executable, __file__, *names, "--seeds", str(args.seeds),
                              "--worker"], env={**os.environ, **extra}, check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            record = json.loads(line)
            for key, value in record.items():
                if key not in ("outcome", "seed"):
                    rows.setdefault((record["outcome"], key), []).append(value)
                    print(f"{label:28s} {record['outcome']:7s} seed {record['seed']} "
                          f"{key:20s} {value:.4f}", flush=True)
    print(f"\n{'outcome':8s} {'score':20s} {'min':>7s} {'mean':>7s} {'max':>7s}  "
          f"(n = {args.seeds} seeds × {len(SETTINGS)} settings)")
    for (outcome, key), values in rows.items():
        print(f"{outcome:8s} {key:20s} {min(values):7.4f} {np.mean(values):7.4f} "
              f"{max(values):7.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
