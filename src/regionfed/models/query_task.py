"""The multi-task query-understanding task (intent, spell, NER): what every model of it
shares (:class:`QueryUnderstanding`) and the ``tiny`` model's featurisation (:class:`QueryTask`).

Featurisation uses only public information (the benchmark's word list): hashed character
n-grams per word and spell candidates by deletion distance
(:mod:`regionfed.models.text_features`). A query's spell prediction is the arg-max candidate
per token; a token whose gold word is not among its candidates can never be right at test
time (it still counts). In training the gold word is put in the last candidate slot so the
loss is always defined.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from regionfed import metrics
from regionfed.data.queries import INTENTS, MAX_TOKENS, NER_TAGS, QueryDataset
from regionfed.errors import DataError
from regionfed.models.tasks import (
    IGNORE,
    Batch,
    PreparedCache,
    Task,
    device_of,
    evaluating,
    minibatch_indices,
    to_device,
)
from regionfed.models.text_features import (
    FormTable,
    SpellCandidates,
    deletion_distance,
    word_ngram_ids,
)
from regionfed.models.tiny import NUM_DISTANCE_BUCKETS, TinyConfig, TinyQueryModel

TAG_INDEX = {t: i for i, t in enumerate(NER_TAGS)}
QUERY_METRICS = ("overall", "intent", "spell", "ner_f1", "ner_entity_f1")
TASK_KEYS = ("intent", "spell", "ner_f1")


@dataclass
class QueryPredictions:
    intent: np.ndarray
    ner: list[list[str]]
    spell: list[list[str]]

    def __len__(self) -> int:
        return len(self.ner)


@dataclass
class PreparedQueries:
    length: torch.Tensor  # (N,)
    tok_forms: torch.Tensor  # (N, L) form ids, 0 = padding
    cand_forms: torch.Tensor  # (N, L, K)
    cand_dist: torch.Tensor  # (N, L, K) distance bucket
    spell_gold: torch.Tensor  # (N, L) candidate slot of the gold word, IGNORE if none/pad
    ner: torch.Tensor  # (N, L) tag ids, IGNORE on padding
    intent: torch.Tensor  # (N,)
    weight: torch.Tensor  # (N,) per-example loss weight

    def __len__(self) -> int:
        return int(self.length.shape[0])

    def with_weights(self, weight: torch.Tensor) -> PreparedQueries:
        return PreparedQueries(self.length, self.tok_forms, self.cand_forms, self.cand_dist,
                               self.spell_gold, self.ner, self.intent, weight)


class QueryUnderstanding(Task):
    """What every model of the query benchmark shares: its labels, metrics (paper §4.2), the
    ``majority`` reference and the prediction container; subclasses featurise and predict."""

    metric_names = QUERY_METRICS
    num_classes = len(INTENTS)

    def labels(self, dataset: QueryDataset) -> np.ndarray:
        """Intent labels: the histogram the ``dynamic`` router privatizes."""
        return np.asarray(dataset.intent)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Σ_tasks of the per-example mean losses, averaged with the example weights."""
        w = batch["weight"]
        return (self.example_losses(model, batch) * w).sum() / w.sum().clamp(min=1e-12)

    def score(self, predictions: QueryPredictions, dataset: QueryDataset) -> dict[str, float]:
        return self.score_from_counts(self.score_counts(predictions, dataset))

    def score_counts(self, predictions: QueryPredictions, dataset: QueryDataset
                     ) -> dict[str, float]:
        """Correct intents and spell queries, token and entity (tp, predicted, gold) counts."""
        if len(predictions) != len(dataset):
            raise ValueError(f"{len(predictions)} predictions for {len(dataset)} examples")
        tp, pred_pos, gold_pos = metrics.token_f1_counts(predictions.ner, dataset.ner)
        e_tp, e_pred, e_gold = metrics.entity_counts(predictions.ner, dataset.ner)
        return {
            "examples": len(dataset),
            "intent_correct": int(np.sum(np.asarray(predictions.intent) == dataset.intent)),
            "spell_correct": sum(list(p) == list(g)
                                 for p, g in zip(predictions.spell, dataset.targets,
                                                 strict=True)),
            "ner_tp": tp, "ner_pred": pred_pos, "ner_gold": gold_pos,
            "entity_tp": e_tp, "entity_pred": e_pred, "entity_gold": e_gold,
        }

    def example_score_counts(self, predictions: QueryPredictions, dataset: QueryDataset
                             ) -> dict[str, np.ndarray]:
        """:meth:`score_counts` of each query alone (one array entry per query)."""
        if len(predictions) != len(dataset):
            raise ValueError(f"{len(predictions)} predictions for {len(dataset)} examples")
        pairs = list(zip(predictions.ner, dataset.ner, strict=True))
        tokens = np.array([metrics.token_f1_counts([p], [g]) for p, g in pairs],
                          dtype=float).reshape(-1, 3)
        entities = np.array([metrics.entity_counts([p], [g]) for p, g in pairs],
                            dtype=float).reshape(-1, 3)
        return {
            "examples": np.ones(len(dataset)),
            "intent_correct": (np.asarray(predictions.intent) == dataset.intent).astype(float),
            "spell_correct": np.array([list(p) == list(g) for p, g in
                                       zip(predictions.spell, dataset.targets, strict=True)],
                                      dtype=float),
            "ner_tp": tokens[:, 0], "ner_pred": tokens[:, 1], "ner_gold": tokens[:, 2],
            "entity_tp": entities[:, 0], "entity_pred": entities[:, 1],
            "entity_gold": entities[:, 2],
        }

    def score_from_counts(self, counts: dict[str, float]) -> dict[str, float]:
        """Intent accuracy, spell exact match, NER token micro-F1 and entity F1, Overall."""
        n = counts["examples"]
        scores = {
            "intent": counts["intent_correct"] / n if n else 0.0,
            "spell": counts["spell_correct"] / n if n else 0.0,
            "ner_f1": metrics.token_f1_from_counts(counts["ner_tp"], counts["ner_pred"],
                                                   counts["ner_gold"]),
            "ner_entity_f1": metrics.entity_f1_from_counts(
                counts["entity_tp"], counts["entity_pred"], counts["entity_gold"]),
        }
        scores["overall"] = metrics.overall(scores, TASK_KEYS)
        return scores

    def concat_predictions(self, parts: list[QueryPredictions]) -> QueryPredictions:
        return QueryPredictions(
            np.concatenate([p.intent for p in parts]) if parts else np.zeros(0, np.int64),
            [s for p in parts for s in p.ner], [s for p in parts for s in p.spell])

    def split_predictions(self, predictions: QueryPredictions, sizes: list[int]
                          ) -> list[QueryPredictions]:
        if sum(sizes) != len(predictions):
            raise ValueError(f"sizes sum to {sum(sizes)}, predictions hold {len(predictions)}")
        bounds = np.cumsum([0, *sizes])
        return [QueryPredictions(predictions.intent[a:b], predictions.ner[a:b],
                                 predictions.spell[a:b])
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def reference_predictions(self, train: QueryDataset, dataset: QueryDataset
                              ) -> QueryPredictions:
        """``majority``: the most frequent training intent, the input echoed, all ``O``."""
        counts = np.bincount(train.intent, minlength=len(INTENTS))
        top = int(counts.argmax())
        return QueryPredictions(
            np.full(len(dataset), top, dtype=np.int64),
            [["O"] * len(t) for t in dataset.tokens],
            [list(t) for t in dataset.tokens])


class QueryTask(QueryUnderstanding):
    """Intent + spell + NER on :class:`QueryDataset` splits, solved by ``tiny``."""
    # stacking pads rows with weight 0 (neutral), token columns with IGNORE targets (not
    # counted as tokens, masked out of attention and pooling) and forms with all-zero
    # n-grams (the zero vector, referenced by no real token)
    batch_fill_values = {"ner": IGNORE, "spell_gold": IGNORE}

    def __init__(self, vocabulary: Sequence[str], config: TinyConfig | None = None,
                 max_len: int = MAX_TOKENS) -> None:
        if not vocabulary:
            raise DataError("the query task needs a non-empty vocabulary of clean words")
        self.config = config or TinyConfig()
        self.max_len = max_len
        self.candidates = SpellCandidates(vocabulary, k=self.config.spell_candidates)
        self.forms = FormTable(self.word_features, self.feature_width)
        self._cand_cache: dict[str, tuple[list[int], list[int], list[str]]] = {}
        self._prepared = PreparedCache()

    # -- featurisation -------------------------------------------------------------------
    @property
    def feature_width(self) -> int:
        """Length of every word's feature-id row (:meth:`word_features`)."""
        return self.config.max_ngrams

    def word_features(self, word: str) -> list[int]:
        """The ids the model embeds a word from (``tiny``: hashed character n-grams), padded
        with 0 to :attr:`feature_width`; row 0 of the table (all 0) is the padding word."""
        return word_ngram_ids(word, self.config.ngram_buckets, self.config.max_ngrams)

    def _candidates_of(self, form: str) -> tuple[list[int], list[int], list[str]]:
        hit = self._cand_cache.get(form)
        if hit is None:
            ranked = self.candidates(form)
            hit = ([self.forms.id(w) for w, _ in ranked], [d for _, d in ranked],
                   [w for w, _ in ranked])
            self._cand_cache[form] = hit
        return hit

    def prepare(self, dataset: QueryDataset, training: bool) -> PreparedQueries:
        hit = self._prepared.lookup(dataset, training)
        if hit is not None:
            return hit
        n, k, length = len(dataset), self.config.spell_candidates, self.max_len
        tok = np.zeros((n, length), np.int64)
        cand = np.zeros((n, length, k), np.int64)
        dist = np.zeros((n, length, k), np.int64)
        gold = np.full((n, length), IGNORE, np.int64)
        ner = np.full((n, length), IGNORE, np.int64)
        lens = np.zeros(n, np.int64)
        for i in range(n):
            words, targets, tags = dataset.tokens[i], dataset.targets[i], dataset.ner[i]
            if len(words) > length:
                raise DataError(f"query {i} has {len(words)} tokens; the model takes {length}")
            lens[i] = len(words)
            for j, (word, target, tag) in enumerate(zip(words, targets, tags, strict=True)):
                tok[i, j] = self.forms.id(word)
                ner[i, j] = TAG_INDEX[tag]
                ids, dists, names = self._candidates_of(word)
                slots = list(ids)
                dvals = list(dists)
                if target in names:
                    gold[i, j] = names.index(target)
                elif training:  # keep the loss defined: the gold word takes the last slot
                    slot = min(len(slots), k - 1)
                    slots = slots[:slot] + [self.forms.id(target)]
                    dvals = dvals[:slot] + [min(deletion_distance(word, target),
                                                NUM_DISTANCE_BUCKETS - 1)]
                    gold[i, j] = slot
                cand[i, j, :len(slots)] = slots
                dist[i, j, :len(dvals)] = dvals
        prepared = PreparedQueries(
            length=torch.from_numpy(lens), tok_forms=torch.from_numpy(tok),
            cand_forms=torch.from_numpy(cand), cand_dist=torch.from_numpy(dist),
            spell_gold=torch.from_numpy(gold), ner=torch.from_numpy(ner),
            intent=torch.as_tensor(dataset.intent, dtype=torch.long),
            weight=torch.ones(n))
        return self._prepared.store(dataset, training, prepared)

    def num_examples(self, prepared: PreparedQueries) -> int:
        return len(prepared)

    def concat_prepared(self, parts: list[PreparedQueries]) -> PreparedQueries:
        return PreparedQueries(*(torch.cat([getattr(p, f) for p in parts]) for f in
                                 PreparedQueries.__dataclass_fields__))

    def weighted(self, prepared: PreparedQueries, weight: torch.Tensor) -> PreparedQueries:
        if weight.shape != (len(prepared),):
            raise ValueError(f"need one weight per example ({len(prepared)})")
        return prepared.with_weights(weight.to(torch.float32))

    def make_batch(self, prepared: PreparedQueries, index: torch.Tensor) -> Batch:
        width = int(prepared.length[index].max()) if len(index) else 1
        tok = prepared.tok_forms[index, :width]
        cand = prepared.cand_forms[index, :width]
        # embed each distinct word of the batch once; position 0 of `forms` is the pad form
        forms, inverse = torch.unique(torch.cat([tok.reshape(-1), cand.reshape(-1)]),
                                      return_inverse=True)
        return {
            "mask": tok != 0,
            "form_features": self.forms.table[forms],
            "tok_form": inverse[:tok.numel()].view_as(tok),
            "cand_form": inverse[tok.numel():].view_as(cand),
            "cand_mask": cand != 0,
            "cand_dist": prepared.cand_dist[index, :width],
            "spell_gold": prepared.spell_gold[index, :width],
            "ner": prepared.ner[index, :width],
            "intent": prepared.intent[index],
            "weight": prepared.weight[index],
        }

    def batches(self, prepared: PreparedQueries, batch_size: int,
                generator: torch.Generator | None) -> Iterator[Batch]:
        for index in minibatch_indices(len(prepared), batch_size, generator):
            yield self.make_batch(prepared, index)

    # -- model, loss, prediction ---------------------------------------------------------
    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return TinyQueryModel(self.config, len(INTENTS), len(NER_TAGS), self.max_len)

    def batch_size_of(self, batch: Batch) -> int:
        return int(batch["intent"].shape[0])

    def example_losses(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Intent CE + mean token NER CE + mean token spell CE, per example."""
        out = model(batch)
        intent = F.cross_entropy(out["intent"], batch["intent"], reduction="none")
        return intent + _token_mean_ce(out["ner"], batch["ner"]) \
            + _token_mean_ce(out["spell"], batch["spell_gold"])

    def predict(self, model: nn.Module, dataset: QueryDataset) -> QueryPredictions:
        return self.predict_ensemble([model], [1.0], dataset)

    @torch.no_grad()
    def predict_ensemble(self, models: list[nn.Module], weights: list[float],
                         dataset: QueryDataset) -> QueryPredictions:
        """Eq. 17 per head (intent, every NER tag, every spell slot): the argmax of the
        weighted mean of the members' softmax probabilities (one member: its argmax)."""
        prepared = self.prepare(dataset, training=False)
        with evaluating(models, weights):
            return self._vote(models, weights, dataset, prepared)

    def _vote(self, models: list[nn.Module], weights: list[float], dataset: QueryDataset,
              prepared: PreparedQueries) -> QueryPredictions:
        """The body of :meth:`predict_ensemble`, with the members in eval mode."""
        intents, ner, spell = [], [], []
        offset = 0
        device = device_of(models[0])
        for batch in self.batches(prepared, 512, None):
            outs = [m(to_device(batch, device)) for m in models]
            if len(models) == 1:
                scores = outs[0]
            else:
                scores = {key: sum(w * torch.softmax(o[key], -1)
                                   for w, o in zip(weights, outs, strict=True))
                          for key in ("intent", "ner", "spell")}
            intents.append(scores["intent"].argmax(-1).cpu().numpy())
            ner_ids = scores["ner"].argmax(-1).cpu().numpy()
            slot = scores["spell"].argmax(-1).cpu().numpy()
            for b in range(ner_ids.shape[0]):
                words = dataset.tokens[offset + b]
                ner.append([NER_TAGS[t] for t in ner_ids[b, :len(words)]])
                spell.append([self._decode_spell(w, int(s)) for w, s in
                              zip(words, slot[b, :len(words)], strict=True)])
            offset += ner_ids.shape[0]
        return QueryPredictions(np.concatenate(intents) if intents else np.zeros(0, np.int64),
                                ner, spell)

    def _decode_spell(self, word: str, slot: int) -> str:
        names = self._candidates_of(word)[2]
        # no candidate at all: the model has nothing to choose, so it echoes the input
        return names[slot] if slot < len(names) else word

def _token_mean_ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-example mean token cross-entropy, ignoring padding (IGNORE) positions."""
    # classes as dim 1 of (b, c, n), not the last dim of (b·n, c): torch's AVX-512
    # log-softmax over a short last dim is the slow one (~2× here, fwd + bwd)
    ce = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=IGNORE,
                         reduction="none")
    valid = (target != IGNORE).to(ce.dtype)
    return (ce * valid).sum(1) / valid.sum(1).clamp(min=1.0)
