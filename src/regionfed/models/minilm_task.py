"""The query-understanding task (intent, spell, NER) solved by the pretrained ``minilm``.

Everything but the word features is :class:`~regionfed.models.query_task.QueryTask`: the
same spell candidates, losses, decoding and metrics as ``tiny``. A word's features are its
WordPiece ids from the packaged tokenizer; :meth:`MiniLMQueryTask.make_batch` packs a
batch's words into ``[CLS] pieces… [SEP]`` sequences and records where each word starts.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from regionfed.data.queries import INTENTS, MAX_TOKENS, NER_TAGS
from regionfed.errors import ConfigError
from regionfed.models.minilm import MiniLMConfig, MiniLMQueryModel, load_encoder, load_tokenizer
from regionfed.models.query_task import PreparedQueries, QueryTask
from regionfed.models.tasks import Batch


class MiniLMQueryTask(QueryTask):
    """:class:`QueryTask` with WordPiece word features and the pretrained encoder."""

    # the pretrained encoder is trained client by client (no vmap batching rule is claimed
    # for transformers' attention implementations)
    batch_fill_values = None

    def __init__(self, vocabulary: Sequence[str], config: MiniLMConfig | None = None,
                 max_len: int = MAX_TOKENS) -> None:
        config = config or MiniLMConfig()
        self.tokenizer = load_tokenizer(config)
        if self.tokenizer.pad_token_id != 0:
            raise ConfigError("minilm: the tokenizer's [PAD] id must be 0 (BERT vocabulary)")
        self._encoder: nn.Module | None = None
        super().__init__(vocabulary, config, max_len)  # type: ignore[arg-type]

    @property
    def feature_width(self) -> int:
        return self.config.max_pieces

    def word_features(self, word: str) -> list[int]:
        """The word's WordPiece ids ([UNK] if it has none), cut/padded to ``max_pieces``."""
        ids = self.tokenizer.convert_tokens_to_ids(self.tokenizer.tokenize(word))
        ids = ids[:self.feature_width] or [self.tokenizer.unk_token_id]
        return ids + [0] * (self.feature_width - len(ids))

    def make_batch(self, prepared: PreparedQueries, index: torch.Tensor) -> Batch:
        batch = super().make_batch(prepared, index)
        pieces = batch["form_features"][batch["tok_form"]]  # (B, L, P), 0 = no piece
        b, words, width = pieces.shape
        counts = (pieces != 0).sum(-1)  # (B, L) pieces per word (0 on padding words)
        flat = pieces.reshape(b, words * width)
        # a stable sort on "is padding" moves every row's pieces to the front, in order
        order = torch.sort((flat == 0).to(torch.int8), dim=1, stable=True).indices
        packed = torch.gather(flat, 1, order)
        lengths = counts.sum(1)  # (B,)
        total = int(lengths.max()) + 2 if b else 2
        input_ids = torch.zeros(b, total, dtype=torch.long)
        input_ids[:, 1:] = packed[:, :total - 1]
        input_ids[:, 0] = self.tokenizer.cls_token_id
        input_ids[torch.arange(b), lengths + 1] = self.tokenizer.sep_token_id
        batch["input_ids"] = input_ids
        batch["attention_mask"] = torch.arange(total)[None, :] < (lengths + 2)[:, None]
        batch["word_start"] = 1 + counts.cumsum(1) - counts
        return batch

    def build_model(self, seed: int) -> nn.Module:
        """The pretrained encoder (loaded once, copied per model) + heads drawn from ``seed``."""
        if self._encoder is None:
            self._encoder = load_encoder(self.config)
        torch.manual_seed(seed)
        return MiniLMQueryModel(copy.deepcopy(self._encoder), len(INTENTS), len(NER_TAGS))
