"""Single-label text classification (e.g. review sentiment) solved by the pretrained
``minilm`` encoder (:class:`~regionfed.models.minilm.MiniLMTextClassifier`).

Everything but the featurisation and the model is
:class:`~regionfed.models.text_classification_task.TextClassificationTask` (labels, losses,
accuracy, ensemble votes): a text is its tokens joined by spaces, WordPiece-tokenised by the
packaged tokenizer into ``[CLS] pieces… [SEP]``, cut to ``max_text_pieces``.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from regionfed.data.text import TextDataset
from regionfed.errors import ConfigError, DataError
from regionfed.models.minilm import (
    MiniLMConfig,
    MiniLMTextClassifier,
    load_encoder,
    load_tokenizer,
)
from regionfed.models.tasks import Batch, PreparedCache
from regionfed.models.text_classification_task import PreparedTexts, TextClassificationTask


class MiniLMTextClassificationTask(TextClassificationTask):
    """:class:`TextClassificationTask` with WordPiece inputs and the pretrained encoder."""

    # the pretrained encoder is trained client by client (no vmap batching rule is claimed
    # for transformers' attention implementations)
    batch_fill_values = None

    def __init__(self, num_classes: int, config: MiniLMConfig | None = None) -> None:
        # TextClassificationTask.__init__ is not called: it builds the tiny model's n-gram
        # table, which WordPiece inputs do not use
        if num_classes < 2:
            raise DataError(f"text classification needs at least 2 classes, got {num_classes}")
        self.num_classes = num_classes
        self.config = config or MiniLMConfig()
        self.max_len = self.config.max_text_pieces
        self.tokenizer = load_tokenizer(self.config)
        if self.tokenizer.pad_token_id != 0:
            raise ConfigError("minilm: the tokenizer's [PAD] id must be 0 (BERT vocabulary)")
        self._prepared = PreparedCache()
        self._encoder: nn.Module | None = None

    def token_ids(self, dataset: TextDataset) -> tuple[np.ndarray, np.ndarray]:
        """``[CLS] pieces… [SEP]`` of each text (its tokens joined by spaces), cut to
        ``max_text_pieces`` and 0-padded, and their lengths."""
        ids = np.zeros((len(dataset), self.max_len), np.int64)
        lens = np.zeros(len(dataset), np.int64)
        if len(dataset):
            encoded = self.tokenizer([" ".join(words) for words in dataset.tokens],
                                     truncation=True, max_length=self.max_len)["input_ids"]
            for i, row in enumerate(encoded):
                lens[i] = len(row)
                ids[i, :len(row)] = row
        return ids, lens

    def make_batch(self, prepared: PreparedTexts, index: torch.Tensor) -> Batch:
        """The examples at ``index``, cut to their longest text."""
        width = max(1, int(prepared.length[index].max())) if len(index) else 1
        input_ids = prepared.tok_forms[index, :width]
        return {"input_ids": input_ids, "attention_mask": input_ids != 0,
                "label": prepared.label[index], "weight": prepared.weight[index]}

    def build_model(self, seed: int) -> nn.Module:
        """The pretrained encoder (loaded once, copied per model) + a head drawn from ``seed``."""
        if self._encoder is None:
            self._encoder = load_encoder(self.config)
        torch.manual_seed(seed)
        return MiniLMTextClassifier(copy.deepcopy(self._encoder), self.num_classes)
