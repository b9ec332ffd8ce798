"""The ``Task`` interface: the only thing algorithms and runtimes know about a model.

A task turns a dataset split into tensors, builds its model, gives the training loss of a
batch and evaluates a model on a split. Strategies only ever see flat parameter vectors;
runtimes call the task. Layer knowledge that some baselines need by definition (FedBABU's
head, FedTP's attention projections) is declared by the model through
:meth:`Task.parameter_groups`, never inferred inside an algorithm.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

Batch = dict[str, torch.Tensor]
#: the target of padding positions / rows (skipped by the cross-entropies)
IGNORE = -100


def device_of(model: nn.Module) -> torch.device:
    """Where ``model``'s parameters live (batches are moved there before a forward pass)."""
    return next(model.parameters()).device


def to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` with every tensor on ``device`` (the batch itself when it is the CPU)."""
    if device.type == "cpu":
        return batch
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


class PreparedCache:
    """Tensorised splits keyed by dataset identity and ``training`` (every task prepares a
    split once); the dataset is kept with its entry, so a recycled ``id`` never aliases."""

    def __init__(self) -> None:
        self._items: dict[tuple[int, bool], tuple[Any, Any]] = {}

    def lookup(self, dataset: Any, training: bool) -> Any | None:
        hit = self._items.get((id(dataset), training))
        return hit[1] if hit is not None and hit[0] is dataset else None

    def store(self, dataset: Any, training: bool, prepared: Any) -> Any:
        self._items[(id(dataset), training)] = (dataset, prepared)
        return prepared


@contextmanager
def evaluating(models: Sequence[nn.Module], weights: Sequence[float]) -> Iterator[None]:
    """Ensemble members (one weight each, at least one) in eval mode for the block; each
    gets its own training mode back afterwards."""
    if not models or len(models) != len(weights):
        raise ValueError("need one weight per model and at least one model")
    modes = [m.training for m in models]
    for m in models:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(models, modes, strict=True):
            m.train(mode)


def minibatch_indices(n: int, batch_size: int, generator: torch.Generator | None
                      ) -> Iterator[torch.Tensor]:
    """Index tensors of consecutive mini-batches over ``n`` examples, in a random order drawn
    from ``generator`` (in order when it is ``None``); every task's :meth:`Task.batches`."""
    order = torch.randperm(n, generator=generator) if generator is not None else \
        torch.arange(n)
    for start in range(0, n, batch_size):
        yield order[start:start + batch_size]


class Task(ABC):
    """A learning problem plus the model family that solves it."""

    #: metric keys :meth:`score` returns; ``overall`` is always among them.
    metric_names: tuple[str, ...] = ("overall",)

    #: the value each batch key is padded with when the batches of different clients are
    #: stacked for batched training (:mod:`regionfed.runtime.batched_training`); padded
    #: entries must leave :meth:`loss` unchanged. ``None``: this task's batches can't be
    #: stacked (callers fall back to the sequential loop). Keys not listed pad with 0/False.
    batch_fill_values: dict[str, float | int | bool] | None = None

    @abstractmethod
    def build_model(self, seed: int) -> nn.Module:
        """A freshly initialised model (deterministic in ``seed``)."""

    @abstractmethod
    def prepare(self, dataset: Any, training: bool) -> Any:
        """Tensorise a split once; ``training`` splits may carry extra supervision aids."""

    @abstractmethod
    def num_examples(self, prepared: Any) -> int: ...

    @abstractmethod
    def weighted(self, prepared: Any, weight: torch.Tensor) -> Any:
        """``prepared`` with per-example loss weights (mean-normalised per batch)."""

    @abstractmethod
    def concat_prepared(self, parts: list[Any]) -> Any:
        """Several prepared splits as one (example order kept)."""

    @abstractmethod
    def batches(self, prepared: Any, batch_size: int, generator: torch.Generator | None
                ) -> Iterator[Batch]:
        """Mini-batches; shuffled with ``generator`` when one is given."""

    @abstractmethod
    def batch_size_of(self, batch: Batch) -> int:
        """Number of examples in ``batch``."""

    @abstractmethod
    def example_losses(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The unweighted loss of every example of ``batch``, shape (B,)."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Mean training loss of ``batch`` (honouring per-example ``weight`` if present)."""

    @abstractmethod
    def predict(self, model: nn.Module, dataset: Any) -> Any:
        """Predictions for every example of ``dataset``."""

    def predict_ensemble(self, models: list[nn.Module], weights: list[float], dataset: Any
                         ) -> Any:
        """Confidence-weighted vote of several models (paper Eq. 17):
        argmax_c Σ_s w_s P_s(y = c | x) for every predicted label."""
        raise TypeError(f"{type(self).__name__} cannot combine the predictions of several "
                        "models (no predict_ensemble)")

    @abstractmethod
    def score(self, predictions: Any, dataset: Any) -> dict[str, float]:
        """Metrics of ``predictions`` against ``dataset``'s labels (fractions in [0, 1])."""

    def score_counts(self, predictions: Any, dataset: Any) -> dict[str, float]:
        """Additive statistics of :meth:`score`: summed over disjoint parts (clients) they
        give, through :meth:`score_from_counts`, the score of the pooled parts — so a
        distributed runtime can evaluate without moving any label."""
        raise TypeError(f"{type(self).__name__} has no additive score statistics")

    def score_from_counts(self, counts: dict[str, float]) -> dict[str, float]:
        """The metrics of summed :meth:`score_counts`."""
        raise TypeError(f"{type(self).__name__} has no additive score statistics")

    def example_score_counts(self, predictions: Any, dataset: Any) -> dict[str, np.ndarray]:
        """:meth:`score_counts` of every example alone: each statistic as an array with one
        entry per example (summed, they are :meth:`score_counts`)."""
        raise TypeError(f"{type(self).__name__} has no per-example score statistics")

    def leave_one_out_scores(self, predictions: Any, dataset: Any) -> np.ndarray:
        """The ``overall`` score of ``dataset`` without each example in turn — the
        jackknife's replicates (Efron & Stein 1981), defined for any score of additive
        statistics, an F1 as well as a mean over examples. Empty for fewer than 2 examples."""
        per_example = self.example_score_counts(predictions, dataset)
        n = len(per_example["examples"])
        if n < 2:
            return np.zeros(0)
        totals = {key: values.sum() for key, values in per_example.items()}
        return np.array([
            self.score_from_counts({key: totals[key] - values[i]
                                    for key, values in per_example.items()})["overall"]
            for i in range(n)])

    @abstractmethod
    def concat_predictions(self, parts: list[Any]) -> Any: ...

    def split_predictions(self, predictions: Any, sizes: list[int]) -> list[Any] | None:
        """The inverse of :meth:`concat_predictions` (consecutive parts of ``sizes``
        examples), or ``None`` if the task can't split (runtimes then predict per part)."""
        return None

    @abstractmethod
    def reference_predictions(self, train: Any, dataset: Any) -> Any:
        """The trivial ``majority`` reference, fitted on ``train`` only."""

    #: number of classes of :meth:`labels` (the task's primary label)
    num_classes: int = 0

    def labels(self, dataset: Any) -> np.ndarray:
        """The primary class label of every example (for label histograms)."""
        raise TypeError(f"{type(self).__name__} has no class labels")

    def evaluate(self, model: nn.Module, dataset: Any) -> dict[str, float]:
        return self.score(self.predict(model, dataset), dataset)

    def parameter_groups(self, model: nn.Module) -> dict[str, list[str]]:
        """Named parameter groups the model declares (e.g. ``head``, ``attention``)."""
        declare = getattr(model, "parameter_groups", None)
        return declare() if callable(declare) else {}


class ClassificationTask(Task):
    """One class label per example (:meth:`labels`), scored by accuracy, reported as
    ``overall`` too; predictions are label arrays."""

    metric_names = ("overall", "accuracy")
    #: stacked (batched) training pads rows with label IGNORE and weight 0
    batch_fill_values = {"label": IGNORE}

    def batch_size_of(self, batch: Batch) -> int:
        return int(batch["label"].shape[0])

    def example_losses(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Cross-entropy per example (0 for padding rows)."""
        return F.cross_entropy(model(batch), batch["label"], ignore_index=IGNORE,
                               reduction="none")

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Weighted mean cross-entropy over the real (non-padding) examples."""
        losses = self.example_losses(model, batch)
        weight = batch["weight"] * (batch["label"] != IGNORE)
        return (losses * weight).sum() / weight.sum().clamp(min=1e-12)

    def score(self, predictions: np.ndarray, dataset: Any) -> dict[str, float]:
        return self.score_from_counts(self.score_counts(predictions, dataset))

    def score_counts(self, predictions: np.ndarray, dataset: Any) -> dict[str, float]:
        gold = self.labels(dataset)
        if len(gold) != len(predictions):
            raise ValueError(f"{len(predictions)} predictions for {len(gold)} examples")
        return {"examples": len(gold), "correct": int(np.sum(predictions == gold))}

    def example_score_counts(self, predictions: np.ndarray, dataset: Any
                             ) -> dict[str, np.ndarray]:
        gold = self.labels(dataset)
        if len(gold) != len(predictions):
            raise ValueError(f"{len(predictions)} predictions for {len(gold)} examples")
        return {"examples": np.ones(len(gold)),
                "correct": (np.asarray(predictions) == gold).astype(float)}

    def score_from_counts(self, counts: dict[str, float]) -> dict[str, float]:
        n = counts["examples"]
        accuracy = counts["correct"] / n if n else 0.0
        return {"overall": accuracy, "accuracy": accuracy}

    def concat_predictions(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def split_predictions(self, predictions: np.ndarray, sizes: list[int]
                          ) -> list[np.ndarray]:
        if sum(sizes) != len(predictions):
            raise ValueError(f"sizes sum to {sum(sizes)}, predictions hold {len(predictions)}")
        return np.split(predictions, np.cumsum(sizes)[:-1])

    def reference_predictions(self, train: Any, dataset: Any) -> np.ndarray:
        """``majority``: the most frequent training label (lowest on ties) for every example."""
        counts = np.bincount(self.labels(train), minlength=self.num_classes)
        return np.full(len(self.labels(dataset)), int(counts.argmax()), dtype=np.int64)
