"""Single-label text classification (e.g. review sentiment) for the ``tiny`` architecture.

:class:`TinyTextClassifier` reuses the pieces of :mod:`regionfed.models.tiny`: every word is
the mean of its hashed character n-gram vectors (:func:`word_ngram_ids`), plus a learned
position vector; pre-LayerNorm :class:`~regionfed.models.tiny.EncoderLayer` s; masked mean
pooling; a linear head over the classes. Sizes come from :class:`TinyConfig`
(``spell_candidates`` is unused). The metric is accuracy, reported as ``overall`` (and
``accuracy``). Texts longer than ``max_len`` tokens are cut to their first ``max_len``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from regionfed.data.text import TextDataset
from regionfed.errors import DataError
from regionfed.models.tasks import (
    Batch,
    ClassificationTask,
    PreparedCache,
    device_of,
    evaluating,
    minibatch_indices,
    to_device,
)
from regionfed.models.text_features import FormTable, word_ngram_ids
from regionfed.models.tiny import EncoderLayer, TinyConfig, mean_ngram_embedding


class TinyTextClassifier(nn.Module):
    """``forward(batch)`` → class logits (B, C). ``batch["form_features"]`` (U, G) are the
    batch's distinct words, ``tok_form`` (B, L) indexes into them, ``mask`` (B, L) marks real
    tokens."""

    def __init__(self, config: TinyConfig, num_classes: int, max_len: int) -> None:
        super().__init__()
        d = config.dim
        self.ngram_embedding = nn.Embedding(config.ngram_buckets, d, padding_idx=0)
        self.position = nn.Parameter(torch.randn(max_len, d) * 0.02)
        self.layers = nn.ModuleList(
            EncoderLayer(d, config.heads, config.ffn_dim) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, num_classes)
        with torch.no_grad():
            nn.init.normal_(self.ngram_embedding.weight, std=0.1)
            self.ngram_embedding.weight[0].zero_()  # the padding bucket stays zero

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["mask"]
        words = mean_ngram_embedding(self.ngram_embedding, batch["form_features"])  # (U, d)
        x = words[batch["tok_form"]] + self.position[:mask.shape[1]]
        for layer in self.layers:
            x = layer(x, mask)
        x = self.final_norm(x)
        weights = mask.to(x.dtype)
        pooled = (x * weights[..., None]).sum(1) / weights.sum(1, keepdim=True).clamp(min=1.0)
        return self.head(pooled)

    def parameter_groups(self) -> dict[str, list[str]]:
        """Declared groups: ``head`` (the classifier) and ``attention`` (Q/K/V projections)."""
        names = [name for name, _ in self.named_parameters()]
        attention = [n for n in names if any(f".attn.{p}_proj." in n for p in "qkv")]
        return {"head": ["head.weight", "head.bias"], "attention": attention}


@dataclass(frozen=True)
class PreparedTexts:
    length: torch.Tensor  # (N,)
    tok_forms: torch.Tensor  # (N, L) form ids, 0 = padding
    label: torch.Tensor  # (N,) long
    weight: torch.Tensor  # (N,) float

    def __len__(self) -> int:
        return int(self.length.shape[0])


class TextClassificationTask(ClassificationTask):
    """Class labels of :class:`TextDataset` splits, solved by :class:`TinyTextClassifier`."""

    # stacking (ClassificationTask.batch_fill_values) also pads token columns with mask False (out
    # of attention and pooling) and forms with all-zero n-grams (referenced by no real token)

    def __init__(self, num_classes: int, config: TinyConfig | None = None,
                 max_len: int = 64) -> None:
        if num_classes < 2:
            raise DataError(f"text classification needs at least 2 classes, got {num_classes}")
        self.num_classes = num_classes
        self.config = config or TinyConfig()
        self.max_len = max_len
        self.forms = FormTable(
            lambda word: word_ngram_ids(word, self.config.ngram_buckets, self.config.max_ngrams),
            self.config.max_ngrams)
        self._prepared = PreparedCache()

    # -- featurisation -------------------------------------------------------------------
    def prepare(self, dataset: TextDataset, training: bool) -> PreparedTexts:
        """:meth:`token_ids`, labels and unit weights (cached per dataset object)."""
        hit = self._prepared.lookup(dataset, training)
        if hit is not None:
            return hit
        n = len(dataset)
        if n and int(dataset.label.max()) >= self.num_classes:
            raise DataError(f"text label {int(dataset.label.max())} is out of range for "
                            f"{self.num_classes} classes")
        ids, lens = self.token_ids(dataset)
        prepared = PreparedTexts(torch.from_numpy(lens), torch.from_numpy(ids),
                                 torch.as_tensor(dataset.label, dtype=torch.long),
                                 torch.ones(n))
        return self._prepared.store(dataset, training, prepared)

    def token_ids(self, dataset: TextDataset) -> tuple[np.ndarray, np.ndarray]:
        """``(N, max_len)`` input ids (0 = padding) and each text's length: the form ids of
        its first ``max_len`` tokens."""
        tok = np.zeros((len(dataset), self.max_len), np.int64)
        lens = np.zeros(len(dataset), np.int64)
        for i, words in enumerate(dataset.tokens):
            words = words[:self.max_len]
            lens[i] = len(words)
            tok[i, :len(words)] = [self.forms.id(w) for w in words]
        return tok, lens

    def num_examples(self, prepared: PreparedTexts) -> int:
        return len(prepared)

    def weighted(self, prepared: PreparedTexts, weight: torch.Tensor) -> PreparedTexts:
        if weight.shape != (len(prepared),):
            raise ValueError(f"need one weight per example ({len(prepared)})")
        return PreparedTexts(prepared.length, prepared.tok_forms, prepared.label,
                             weight.to(torch.float32))

    def concat_prepared(self, parts: list[PreparedTexts]) -> PreparedTexts:
        return PreparedTexts(*(torch.cat([getattr(p, f) for p in parts])
                               for f in ("length", "tok_forms", "label", "weight")))

    def make_batch(self, prepared: PreparedTexts, index: torch.Tensor) -> Batch:
        """The examples at ``index``, cut to their longest text; each distinct word's
        n-grams once (``form_features``), ``tok_form`` indexing into them."""
        width = max(1, int(prepared.length[index].max())) if len(index) else 1
        tok = prepared.tok_forms[index, :width]
        forms, inverse = torch.unique(tok.reshape(-1), return_inverse=True)
        return {"mask": tok != 0, "form_features": self.forms.table[forms],
                "tok_form": inverse.view_as(tok), "label": prepared.label[index],
                "weight": prepared.weight[index]}

    def batches(self, prepared: PreparedTexts, batch_size: int,
                generator: torch.Generator | None) -> Iterator[Batch]:
        for index in minibatch_indices(len(prepared), batch_size, generator):
            yield self.make_batch(prepared, index)

    # -- model, loss, prediction ---------------------------------------------------------
    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return TinyTextClassifier(self.config, self.num_classes, self.max_len)

    def predict(self, model: nn.Module, dataset: TextDataset) -> np.ndarray:
        return self.predict_ensemble([model], [1.0], dataset)

    @torch.no_grad()
    def predict_ensemble(self, models: list[nn.Module], weights: list[float],
                         dataset: TextDataset) -> np.ndarray:
        """Paper Eq. 17: argmax_c Σ_s w_s P_s(y = c | x) (one member: its argmax)."""
        prepared = self.prepare(dataset, training=False)
        with evaluating(models, weights):
            return self._vote(models, weights, dataset, prepared)

    def _vote(self, models: list[nn.Module], weights: list[float], dataset: TextDataset,
              prepared: PreparedTexts) -> np.ndarray:
        """The body of :meth:`predict_ensemble`, with the members in eval mode."""
        out = []
        device = device_of(models[0])
        for batch in self.batches(prepared, 512, None):
            batch = to_device(batch, device)
            if len(models) == 1:
                scores = models[0](batch)
            else:
                scores = sum(w * torch.softmax(m(batch), -1)
                             for w, m in zip(weights, models, strict=True))
            out.append(scores.argmax(-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def labels(self, dataset: TextDataset) -> np.ndarray:
        return np.asarray(dataset.label)
