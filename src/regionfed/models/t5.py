"""``t5-tiny`` / ``t5-small``: ``transformers``' T5ForConditionalGeneration (paper §4.2–4.3).

Text-to-text multi-task learning as in the paper's Table 3: every query becomes three
source → target pairs with task prefixes (``intent: …`` → an intent name, ``spell: …`` →
the clean query, ``ner: …`` → the BIO tag sequence).

There are no hub downloads: the tokenizer is a BPE (``tokenizers``) trained
on public text only — the benchmark's word list, the intent names, the tags and the task
prefixes — so no client's queries are pooled to build it. ``init_from`` (CLI
``--init-from``) instead loads a saved T5 (``config.json`` + weights, and its tokenizer when
the folder has one) that a user already has on disk.

The output layer is the input embedding (``transformers`` ties them for every T5), so a T5
declares no separate ``head`` group. Presets: ``t5-small`` is the original T5-Small shape
(d = 512, 6 + 6 layers, 8 heads, d_ff = 2048, 32,128 vocabulary rows: 60.5M parameters,
meant for a GPU); ``t5-tiny`` (d = 64, 2 + 2 layers) runs on CPU in tests. Any field can be
overridden in the ``model:`` section.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from regionfed.errors import ConfigError
from regionfed.models.hf import local_model_dir, transformers_module

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"  # T5's special tokens, ids 0, 1, 2
PRESETS: dict[str, dict[str, Any]] = {
    "t5-tiny": {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "d_kv": 16,
                "vocab_size": 4096, "dropout_rate": 0.0},
    "t5-small": {"d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8, "d_kv": 64,
                 "vocab_size": 32128, "dropout_rate": 0.1},
}


class T5ModelConfig(BaseModel):
    """Shape of a T5 model (defaults from the preset ``name`` picks) and decoding limits."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["t5-tiny", "t5-small"] = "t5-tiny"
    d_model: int = Field(64, gt=0)
    d_ff: int = Field(128, gt=0)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    d_kv: int = Field(16, gt=0)
    #: rows of the embedding; the trained tokenizer uses at most this many
    vocab_size: int = Field(4096, ge=64)
    dropout_rate: float = Field(0.0, ge=0.0, lt=1.0)
    #: a saved T5 folder (config.json + weights) to start from instead of a random init
    init_from: str | None = None
    #: source and generated-target length limits, in tokens
    max_source_tokens: int = Field(64, ge=8)
    max_target_tokens: int = Field(48, ge=4)

    @model_validator(mode="before")
    @classmethod
    def _preset_defaults(cls, values: Any) -> Any:
        if isinstance(values, dict):
            preset = PRESETS.get(values.get("name", "t5-tiny"), {})
            values = {**preset, **values}
        return values


def train_tokenizer(corpus: Iterable[str], vocab_size: int):  # -> PreTrainedTokenizerFast
    """A BPE tokenizer learned from ``corpus`` (whitespace-separated public text), with T5's
    special tokens (``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2) and sentencepiece-style
    ``▁`` word boundaries, so decoding restores the spaces exactly. Deterministic."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    alphabet = [chr(c) for c in range(33, 127)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, EOS, UNK],
                                  initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(list(corpus), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", special_tokens=[(EOS, tokenizer.token_to_id(EOS))])
    fast = transformers_module().PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS, unk_token=UNK)
    if (fast.pad_token_id, fast.eos_token_id) != (0, 1):
        raise RuntimeError("the trained tokenizer must put <pad> at 0 and </s> at 1")
    return fast


def load_pretrained_tokenizer(path: str):  # -> PreTrainedTokenizerBase | None
    """The tokenizer saved in ``path``, or ``None`` if the folder has none."""
    folder = local_model_dir(path, "model.init_from")
    names = ("tokenizer.json", "spiece.model", "tokenizer_config.json")
    if not any((folder / n).is_file() for n in names):
        return None
    return transformers_module().AutoTokenizer.from_pretrained(str(folder),
                                                               local_files_only=True)


def build_t5(config: T5ModelConfig, vocab_rows: int, seed: int) -> nn.Module:
    """A T5ForConditionalGeneration: ``init_from`` weights, or a fresh init from ``seed``
    with at least ``vocab_rows`` embedding rows."""
    tf = transformers_module()
    if config.init_from:
        folder = local_model_dir(config.init_from, "model.init_from")
        try:
            model = tf.T5ForConditionalGeneration.from_pretrained(
                str(folder), local_files_only=True, dtype=torch.float32)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model.init_from: cannot load a T5 from {folder} "
                              f"({str(exc).splitlines()[0]})") from None
        if model.config.vocab_size < vocab_rows:
            raise ConfigError(f"model.init_from: {folder} has {model.config.vocab_size} "
                              f"vocabulary rows, its tokenizer needs {vocab_rows}")
        return model
    torch.manual_seed(seed)
    t5_config = tf.T5Config(
        vocab_size=max(config.vocab_size, vocab_rows), d_model=config.d_model,
        d_ff=config.d_ff, d_kv=config.d_kv, num_layers=config.num_layers,
        num_decoder_layers=config.num_layers, num_heads=config.num_heads,
        dropout_rate=config.dropout_rate,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    return tf.T5ForConditionalGeneration(t5_config)
