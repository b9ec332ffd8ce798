"""The query-understanding task as text-to-text generation with T5 (paper §4.1, Table 3).

Each query yields three (source, target) pairs, trained together as one example:

* ``intent: <query>`` → the intent name (``brand_lookup``);
* ``spell: <query>`` → the clean query (``butter available``);
* ``ner: <query>`` → one BIO tag per query word (``B-PRODUCT O``).

The loss of an example is the sum over its three pairs of the mean token cross-entropy of
the target (teacher forcing). Predictions are greedy decodes, parsed back into the labels the
``tiny`` model predicts, so the metrics are the same (:class:`QueryUnderstanding`):

* an intent that is not exactly one of the intent names is wrong (label −1);
* the spell output is compared word for word with the clean query (any other length is wrong);
* a tag sequence of the wrong length is unparseable as a whole and every word gets the tag
  ``B-UNPARSEABLE`` (a non-``O`` prediction that matches no gold tag, so it costs precision
  and recall); inside a sequence of the right length, each token that is not a tag gets it.

Nothing is dropped. An ensemble (paper Eq. 17) decodes greedily with the weighted mean of its
members' next-token distributions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from regionfed.data.queries import INTENTS, NER_TAGS, QueryDataset
from regionfed.errors import ConfigError
from regionfed.models.query_task import IGNORE, QueryPredictions, QueryUnderstanding
from regionfed.models.t5 import (
    T5ModelConfig,
    build_t5,
    load_pretrained_tokenizer,
    train_tokenizer,
)
from regionfed.models.tasks import (
    Batch,
    PreparedCache,
    device_of,
    evaluating,
    minibatch_indices,
)

PREFIXES = ("intent", "spell", "ner")
UNPARSEABLE_TAG = "B-UNPARSEABLE"
INTENT_INDEX = {name: i for i, name in enumerate(INTENTS)}
TAG_SET = frozenset(NER_TAGS)
# the tokenizer must see the label words often enough to keep each one whole
LABEL_REPEATS = 50


def source_texts(dataset: QueryDataset) -> list[str]:
    """The three prefixed sources of every query, query-major (``3·N`` strings)."""
    return [f"{prefix}: {' '.join(tokens)}" for tokens in dataset.tokens
            for prefix in PREFIXES]


def target_texts(dataset: QueryDataset) -> list[str]:
    """The three targets of every query, in the order of :func:`source_texts`."""
    out = []
    for i in range(len(dataset)):
        out += [INTENTS[int(dataset.intent[i])], " ".join(dataset.targets[i]),
                " ".join(dataset.ner[i])]
    return out


def parse_intent(text: str) -> int:
    return INTENT_INDEX.get(text.strip(), -1)


def parse_tags(text: str, num_words: int) -> list[str]:
    tags = text.split()
    if len(tags) != num_words:
        return [UNPARSEABLE_TAG] * num_words
    return [t if t in TAG_SET else UNPARSEABLE_TAG for t in tags]


def tokenizer_corpus(vocabulary: Sequence[str]) -> list[str]:
    """Public text the tokenizer is trained on: the word list, the task prefixes, the intent
    names and the tags (the label words repeated so that each becomes one token)."""
    labels = " ".join([f"{p}:" for p in PREFIXES] + list(INTENTS) + list(NER_TAGS))
    return list(vocabulary) + [labels] * LABEL_REPEATS


@dataclass
class PreparedPairs:
    source: torch.Tensor  # (N, 3, S) token ids, 0 = padding
    target: torch.Tensor  # (N, 3, T) token ids, IGNORE = padding
    weight: torch.Tensor  # (N,)

    def __len__(self) -> int:
        return int(self.source.shape[0])


class T5QueryTask(QueryUnderstanding):
    """Intent + spell + NER on :class:`QueryDataset` splits as T5 text-to-text."""

    # transformers' T5 is trained client by client (no vmap batching)
    batch_fill_values = None

    def __init__(self, vocabulary: Sequence[str], config: T5ModelConfig | None = None) -> None:
        self.config = config or T5ModelConfig()
        tokenizer = load_pretrained_tokenizer(self.config.init_from) \
            if self.config.init_from else None
        if tokenizer is None:
            if not vocabulary:
                raise ConfigError("the t5 tokenizer needs a non-empty word list to train on")
            tokenizer = train_tokenizer(tokenizer_corpus(vocabulary), self.config.vocab_size)
        self.tokenizer = tokenizer
        self._prepared = PreparedCache()

    # -- data ------------------------------------------------------------------------------
    def _encode(self, texts: list[str], limit: int) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=limit,
                             return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"].bool()

    def prepare(self, dataset: QueryDataset, training: bool) -> PreparedPairs:
        hit = self._prepared.lookup(dataset, training)
        if hit is not None:
            return hit
        n = len(dataset)
        source, _ = self._encode(source_texts(dataset), self.config.max_source_tokens)
        target, target_mask = self._encode(target_texts(dataset),
                                           self.config.max_target_tokens)
        target = target.masked_fill(~target_mask, IGNORE)
        prepared = PreparedPairs(source.view(n, len(PREFIXES), -1),
                                 target.view(n, len(PREFIXES), -1), torch.ones(n))
        return self._prepared.store(dataset, training, prepared)

    def num_examples(self, prepared: PreparedPairs) -> int:
        return len(prepared)

    def weighted(self, prepared: PreparedPairs, weight: torch.Tensor) -> PreparedPairs:
        if weight.shape != (len(prepared),):
            raise ValueError(f"need one weight per example ({len(prepared)})")
        return PreparedPairs(prepared.source, prepared.target, weight.to(torch.float32))

    def concat_prepared(self, parts: list[PreparedPairs]) -> PreparedPairs:
        def padded(tensors: list[torch.Tensor], fill: int) -> torch.Tensor:
            width = max(t.shape[-1] for t in tensors)
            return torch.cat([F.pad(t, (0, width - t.shape[-1]), value=fill)
                              for t in tensors])
        return PreparedPairs(padded([p.source for p in parts], 0),
                             padded([p.target for p in parts], IGNORE),
                             torch.cat([p.weight for p in parts]))

    def batches(self, prepared: PreparedPairs, batch_size: int,
                generator: torch.Generator | None) -> Iterator[Batch]:
        for index in minibatch_indices(len(prepared), batch_size, generator):
            source = prepared.source[index].flatten(0, 1)  # (3B, S)
            target = prepared.target[index].flatten(0, 1)
            s_width = int((source != 0).sum(1).max()) if len(index) else 1
            t_width = int((target != IGNORE).sum(1).max()) if len(index) else 1
            yield {"source": source[:, :s_width], "target": target[:, :t_width],
                   "weight": prepared.weight[index]}

    def batch_size_of(self, batch: Batch) -> int:
        return int(batch["weight"].shape[0])

    # -- model, loss -----------------------------------------------------------------------
    def build_model(self, seed: int) -> nn.Module:
        return build_t5(self.config, len(self.tokenizer), seed)

    def example_losses(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Σ over the three pairs of the mean target-token cross-entropy, per example."""
        source, target = batch["source"], batch["target"]
        decoder_input = _shift_right(target, model.config.decoder_start_token_id)
        logits = model(input_ids=source, attention_mask=source != 0,
                       decoder_input_ids=decoder_input).logits
        ce = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=IGNORE,
                             reduction="none")  # (3B, T)
        valid = (target != IGNORE).to(ce.dtype)
        per_pair = (ce * valid).sum(1) / valid.sum(1).clamp(min=1.0)
        return per_pair.view(-1, len(PREFIXES)).sum(1)

    def parameter_groups(self, model: nn.Module) -> dict[str, list[str]]:
        """``attention``: the self-attention query/key/value maps of encoder and decoder;
        ``head``: an output projection of its own — none, as ``transformers`` ties every T5's
        to the input embedding (so head/body methods report n/a, not a wrong split)."""
        names = [name for name, _ in model.named_parameters()]
        head = [n for n in names if n.startswith("lm_head.")]
        attention = [n for n in names if any(f".SelfAttention.{p}." in n for p in "qkv")]
        return {"head": head, "attention": attention}

    # -- prediction ------------------------------------------------------------------------
    def predict(self, model: nn.Module, dataset: QueryDataset) -> QueryPredictions:
        return self.predict_ensemble([model], [1.0], dataset)

    @torch.no_grad()
    def predict_ensemble(self, models: list[nn.Module], weights: list[float],
                         dataset: QueryDataset) -> QueryPredictions:
        """Greedy decoding of every source, parsed into labels (module docstring); with
        several models each next token is argmax_c Σ_s w_s P_s(c | prefix) (Eq. 17)."""
        prepared = self.prepare(dataset, training=False)
        with evaluating(models, weights):
            return self._vote(models, weights, dataset, prepared)

    def _vote(self, models: list[nn.Module], weights: list[float], dataset: QueryDataset,
              prepared: PreparedPairs) -> QueryPredictions:
        """The body of :meth:`predict_ensemble`, with the members in eval mode."""
        texts: list[str] = []
        for batch in self.batches(prepared, 128, None):
            ids = greedy_decode(models, weights, batch["source"].to(device_of(models[0])),
                                self.config.max_target_tokens).cpu()
            texts += self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        intents, spell, ner = [], [], []
        for i, words in enumerate(dataset.tokens):
            intent_text, spell_text, ner_text = texts[3 * i:3 * i + 3]
            intents.append(parse_intent(intent_text))
            spell.append(spell_text.split())
            ner.append(parse_tags(ner_text, len(words)))
        return QueryPredictions(np.asarray(intents, dtype=np.int64), ner, spell)


def _shift_right(target: torch.Tensor, start: int) -> torch.Tensor:
    """Teacher-forcing decoder inputs: ``start`` then the target minus its last token."""
    shifted = torch.full_like(target, 0)
    shifted[:, 0] = start
    shifted[:, 1:] = target[:, :-1]
    return shifted.masked_fill(shifted == IGNORE, 0)


def greedy_decode(models: list[nn.Module], weights: list[float], source: torch.Tensor,
                  max_tokens: int) -> torch.Tensor:
    """Greedy decoding (no sampling, one beam) of ``source`` (R, S); the next token is the
    argmax of the weighted mean of the members' softmax distributions (one member: its
    logits' argmax). Rows stop at ``</s>``; the result excludes the start token."""
    mask = source != 0
    encoded = [m.get_encoder()(input_ids=source, attention_mask=mask) for m in models]
    config = models[0].config
    rows = source.shape[0]
    decoded = torch.full((rows, 1), config.decoder_start_token_id, dtype=torch.long,
                         device=source.device)
    caches: list = [None] * len(models)
    done = torch.zeros(rows, dtype=torch.bool, device=source.device)
    for _ in range(max_tokens):
        scores = None
        for s, model in enumerate(models):
            out = model(encoder_outputs=encoded[s], attention_mask=mask,
                        decoder_input_ids=decoded[:, -1:], cache=caches[s],
                        use_cache=True)
            caches[s] = out.cache
            step = out.logits[:, -1]
            step = step if len(models) == 1 else weights[s] * torch.softmax(step, -1)
            scores = step if scores is None else scores + step
        token = scores.argmax(-1).masked_fill(done, config.pad_token_id)
        decoded = torch.cat([decoded, token[:, None]], dim=1)
        done |= token == config.eos_token_id
        if bool(done.all()):
            break
    return decoded[:, 1:]
