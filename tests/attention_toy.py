"""A toy task whose clients need different attention (importable as ``attention_toy``).

Every example is a sequence of ``SEQ`` random tokens; a client's label is the token at *its*
position (client c reads position c mod SEQ). A one-head attention classifier reads the
output of a ``[CLS]`` query over the sequence: the value projection and the head decode a
token, the query/key projections choose where to look. One shared model cannot look at every
client's position at once; a per-client change of the attention projections can.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from regionfed.data.federation import ClientData, Federation
from regionfed.models.tasks import Batch, Task, minibatch_indices

VOCAB = 6  # tokens and classes
SEQ = 4  # positions


@dataclass
class ToyDataset:
    tokens: np.ndarray  # (N, SEQ) token ids
    labels: np.ndarray  # (N,)

    def __len__(self) -> int:
        return len(self.labels)

    @classmethod
    def concat(cls, parts: list[ToyDataset]) -> ToyDataset:
        return cls(np.concatenate([p.tokens for p in parts]),
                   np.concatenate([p.labels for p in parts]))


@dataclass
class PreparedToy:
    tokens: torch.Tensor
    labels: torch.Tensor
    weight: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])


class Projections(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)


class ToyAttentionModel(nn.Module):
    def __init__(self, dim: int, declare_attention: bool = True) -> None:
        super().__init__()
        self.declare_attention = declare_attention
        self.embedding = nn.Embedding(VOCAB + 1, dim)  # the last id is [CLS]
        self.position = nn.Parameter(torch.randn(SEQ + 1, dim))
        self.attn = Projections(dim)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cls = torch.full((tokens.shape[0], 1), VOCAB, dtype=tokens.dtype)
        x = self.embedding(torch.cat([cls, tokens], 1)) + self.position
        q = self.attn.q_proj(x[:, :1])  # (B, 1, d)
        k, v = self.attn.k_proj(x), self.attn.v_proj(x)
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(x.shape[-1]), -1)
        return self.head((weights @ v)[:, 0])

    def parameter_groups(self) -> dict[str, list[str]]:
        groups = {"head": ["head.weight", "head.bias"]}
        if self.declare_attention:
            groups["attention"] = [f"attn.{p}_proj.{t}" for p in "qkv"
                                   for t in ("weight", "bias")]
        return groups


class ToyAttentionTask(Task):
    """Classify a token sequence with :class:`ToyAttentionModel`; the score is accuracy."""

    num_classes = VOCAB

    def __init__(self, dim: int = 16, declare_attention: bool = True) -> None:
        self.dim = dim
        self.declare_attention = declare_attention

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return ToyAttentionModel(self.dim, self.declare_attention)

    def prepare(self, dataset: ToyDataset, training: bool) -> PreparedToy:
        n = len(dataset)
        return PreparedToy(torch.as_tensor(dataset.tokens, dtype=torch.long),
                           torch.as_tensor(dataset.labels, dtype=torch.long), torch.ones(n))

    def num_examples(self, prepared: PreparedToy) -> int:
        return len(prepared)

    def weighted(self, prepared: PreparedToy, weight: torch.Tensor) -> PreparedToy:
        return PreparedToy(prepared.tokens, prepared.labels, weight.to(torch.float32))

    def concat_prepared(self, parts: list[PreparedToy]) -> PreparedToy:
        return PreparedToy(*(torch.cat([getattr(p, f) for p in parts])
                             for f in ("tokens", "labels", "weight")))

    def batches(self, prepared: PreparedToy, batch_size: int,
                generator: torch.Generator | None) -> Iterator[Batch]:
        for index in minibatch_indices(len(prepared), batch_size, generator):
            yield {"tokens": prepared.tokens[index], "labels": prepared.labels[index],
                   "weight": prepared.weight[index]}

    def batch_size_of(self, batch: Batch) -> int:
        return int(batch["labels"].shape[0])

    def example_losses(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(model(batch["tokens"]), batch["labels"], reduction="none")

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        w = batch["weight"]
        return (self.example_losses(model, batch) * w).sum() / w.sum().clamp(min=1e-12)

    @torch.no_grad()
    def predict(self, model: nn.Module, dataset: ToyDataset) -> np.ndarray:
        if len(dataset) == 0:
            return np.zeros(0, np.int64)
        return model(torch.as_tensor(dataset.tokens, dtype=torch.long)).argmax(-1).numpy()

    def score(self, predictions: np.ndarray, dataset: ToyDataset) -> dict[str, float]:
        if len(predictions) != len(dataset):
            raise ValueError(f"{len(predictions)} predictions for {len(dataset)} examples")
        return {"overall": float(np.mean(predictions == dataset.labels)) if len(dataset)
                else 0.0}

    def concat_predictions(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def split_predictions(self, predictions: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
        return np.split(predictions, np.cumsum(sizes)[:-1])

    def reference_predictions(self, train: ToyDataset, dataset: ToyDataset) -> np.ndarray:
        top = int(np.bincount(train.labels, minlength=VOCAB).argmax())
        return np.full(len(dataset), top, dtype=np.int64)

    def labels(self, dataset: ToyDataset) -> np.ndarray:
        return np.asarray(dataset.labels)


def position_federation(clients_per_region: int = 2, regions: int = 2, train: int = 96,
                        held_out: int = 48, seed: int = 0) -> Federation:
    """Clients c = 0, 1, … (spread over ``regions``) label a sequence by its token at position
    c mod SEQ; ``train`` training and ``held_out`` validation and test examples each."""
    rng = np.random.default_rng(seed)
    names = [f"r{r}" for r in range(regions)]
    clients = []
    for c in range(regions * clients_per_region):
        splits = []
        for n in (train, held_out, held_out):
            tokens = rng.integers(0, VOCAB, size=(n, SEQ))
            splits.append(ToyDataset(tokens, tokens[:, c % SEQ].copy()))
        clients.append(ClientData(f"c{c}", names[c % regions], *splits))
    return Federation("attention-toy", names, clients)
