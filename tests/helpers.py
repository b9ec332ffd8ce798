"""Test helpers shared across the suite (importable as ``helpers``: tests/ is on pythonpath)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import nn

from regionfed.algorithms.base import FederationView
from regionfed.data.queries import QueryDataset
from regionfed.models.query_task import QueryTask
from regionfed.models.tiny import TinyConfig


class _Vector(nn.Module):
    """θ as a module, so strategies' ``extra_loss(model)`` terms apply to quadratics too."""

    def __init__(self, theta: torch.Tensor) -> None:
        super().__init__()
        self.theta = nn.Parameter(theta.clone())


@dataclass
class QuadraticClient:
    """Local training = ``steps`` gradient steps (per epoch) on ½‖θ − target‖² (+ the
    strategy's ``extra_loss``) with step ``lr``; honours ``trainable``, ``mixing`` and
    ``max_steps`` like the simulator's clients."""

    client_id: str
    region: str
    num_examples: int
    target: torch.Tensor
    lr: float = 0.5
    steps: int = 1
    state: dict[str, Any] = field(default_factory=dict)

    val_target: torch.Tensor | None = None  # validation optimum (default: ``target``)

    def train(self, start, *, epochs=None, extra_loss=None, stream="main", trainable=None,
              mixing=None, max_steps=None, repeatable=False):
        scale, offset = mixing if mixing is not None else (1.0, torch.zeros_like(start))
        theta = start.clone()
        total = self.steps * (epochs or 1)
        for _ in range(total if max_steps is None else min(total, max_steps)):
            model = _Vector(scale * theta + offset)
            loss = 0.5 * (model.theta - self.target).pow(2).sum()
            if extra_loss is not None:
                loss = loss + extra_loss(model)
            loss.backward()
            step = self.lr * scale * model.theta.grad
            if trainable is not None:
                step = torch.where(trainable, step, torch.zeros_like(step))
            theta = theta - step
        model_theta = scale * theta + offset
        return theta, float(0.5 * (model_theta - self.target).pow(2).sum())

    def steps_per_epoch(self):
        return self.steps

    @property
    def learning_rate(self):
        return self.lr

    local_epochs = 1

    def gradient(self, params):
        return params - self.target

    labels_: np.ndarray | None = None
    score_: list[float] = field(default_factory=list)  # scripted validation scores

    def labels(self):
        return (np.zeros(self.num_examples, dtype=int) if self.labels_ is None
                else self.labels_), 8

    replicates_: list[np.ndarray] = field(default_factory=list)  # scripted jackknives

    def validation_score(self, params):
        score = self.score_.pop(0) if self.score_ else 1.0
        return score * self.num_examples, self.num_examples

    def validation_leave_one_out(self, params):
        return self.replicates_.pop(0) if self.replicates_ else np.zeros(0)

    def validation_loss(self, params):
        target = self.target if self.val_target is None else self.val_target
        return float(0.5 * (params - target).pow(2).sum()) * self.num_examples, \
            self.num_examples


def run_rounds(strategy, clients, view, rounds, seed=0, init=None):
    """Drive ``strategy`` like the simulator does (every exchange of every round)."""
    init = torch.zeros(2) if init is None else init
    strategy.setup(init, view, np.random.default_rng(seed))
    logs = []
    for rnd in range(1, rounds + 1):
        exchange = strategy.run_round(rnd)
        instructions = next(exchange)
        while True:
            results = [strategy.handle(i, clients[i.client_id]) for i in instructions]
            try:
                instructions = exchange.send(results)
            except StopIteration as done:
                logs.append(done.value)
                break
    return logs


def two_region_quadratics() -> tuple[dict[str, QuadraticClient], FederationView]:
    """Regions a (targets on the x axis) and b (on the y axis), two clients each."""
    targets = {"a/0": [1.0, 0.0], "a/1": [3.0, 0.0], "b/0": [0.0, 2.0], "b/1": [0.0, 4.0]}
    sizes = {"a/0": 10, "a/1": 30, "b/0": 20, "b/1": 20}
    clients = {c: QuadraticClient(c, c[0], sizes[c], torch.tensor(t)) for c, t in targets.items()}
    view = FederationView(("a", "b"), {c: c[0] for c in clients}, sizes)
    return clients, view


#: tests/fixtures: small data files of every supported format
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_script(relative: str) -> ModuleType:
    """A repository script (``experiments/…``, ``benchmarks/…``) imported as a module."""
    path = Path(__file__).resolve().parents[1] / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_data(*parts: str) -> Path:
    """A path under the prepared real-data folder (``../shared/data`` beside the checkout,
    as the data README says; ``$REGIONFED_SHARED_DATA`` overrides; a fresh clone elsewhere on
    this machine finds ``/work/shared/data``). Tests skip when it is absent."""
    import os

    candidates = [os.environ.get("REGIONFED_SHARED_DATA"),
                  Path(__file__).resolve().parents[1].parent / "shared" / "data",
                  Path("/work/shared/data")]
    for base in candidates:
        if base and Path(base).exists():
            return Path(base).joinpath(*parts)
    return Path("../shared/data").joinpath(*parts)


#: `regionfed sweep` flags that make any study tiny (seconds per variant), in this process
#: (``--jobs 1``: monkeypatches reach the runs)
TINY_SWEEP = ["--seeds", "1", "--quiet", "--jobs", "1",
              "--set", "data.num_queries=480", "--set", "data.num_regions=2",
              "--set", "data.clients_per_region=2", "--set", "data.vocab_size=1000",
              "--set", "training.rounds=1", "--set", "training.eval_every=1",
              "--set", "model.dim=32", "--set", "model.heads=2",
              "--set", "model.ngram_buckets=512", "--set", "regionfed.rho_search=false"]


def assert_trained_alike(got: torch.Tensor, want: torch.Tensor, *, optimizer: Any,
                         steps: int, noise_only: list[slice] = ()) -> None:
    """Two code paths (e.g. batched and sequential) trained the same parameters alike.

    Under SGD they agree to float tolerance (rtol = atol = 1e-5: the paths only sum in
    another order). AdamW divides each gradient by √v, so where a gradient is pure rounding
    noise it turns the paths' (CPU- and thread-dependent) last-bit differences into ±lr
    steps: in ``noise_only`` (e.g. attention key biases, whose gradient is zero in exact
    arithmetic) and, now and then, in a handful of other elements (a rare n-gram's row at
    one step). Those may differ by at most 2·lr per step; a wrong computation moves nearly
    every element, so at most 0.1 % of them may.
    """
    got, want = got.clone(), want.clone()
    if optimizer.name == "adamw":
        bound = 2 * optimizer.lr * steps
        for s in noise_only:
            assert float((got[s] - want[s]).abs().max()) <= bound
            got[s] = want[s] = 0.0
        off = ~torch.isclose(got, want, rtol=1e-5, atol=1e-5)
        assert int(off.sum()) <= 1e-3 * got.numel()
        assert float((got - want).abs().max()) <= bound
        got[off] = want[off] = 0.0
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


#: a 4-pattern query toy (tests/models/test_query_task.py, tests/learning_outcomes.py)
VOCAB = ["find", "red", "shoes", "price", "of", "laptop", "nike", "apple", "phone", "deals"]
PATTERNS = [
    (["find", "red", "shoes"], ["O", "B-MODIFIER", "B-PRODUCT"], 0),
    (["price", "of", "laptop"], ["O", "O", "B-PRODUCT"], 1),
    (["nike", "shoes"], ["B-BRAND", "B-PRODUCT"], 2),
    (["apple", "phone", "deals"], ["B-BRAND", "B-PRODUCT", "O"], 5),
]


def toy_dataset(n: int, seed: int = 0, typo_rate: float = 0.3) -> QueryDataset:
    rng = np.random.default_rng(seed)
    tokens, targets, ner, intent = [], [], [], []
    for i in range(n):
        words, tags, label = PATTERNS[i % len(PATTERNS)]
        noisy = list(words)
        if rng.random() < typo_rate:  # drop the first letter of one word
            j = int(rng.integers(len(words)))
            noisy[j] = noisy[j][1:]
        tokens.append(noisy)
        targets.append(list(words))
        ner.append(list(tags))
        intent.append(label)
    return QueryDataset(tokens, targets, ner, np.array(intent))


def small_task() -> QueryTask:
    return QueryTask(VOCAB, TinyConfig(dim=32, heads=2, ffn_dim=64, ngram_buckets=256))
