"""Metrics (paper §4.2): per-task scores, Overall, and the regional summary (RRS, worst, std).

All values are fractions in [0, 1]. Every example counts: unparseable or missing predictions
are wrong, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

# seqeval is imported where spans are scored: it pulls in scikit-learn and scipy (~0.8 s),
# which a Flower client process that only trains never needs

OUTSIDE = "O"


def accuracy(predicted: Sequence[int] | np.ndarray, gold: Sequence[int] | np.ndarray) -> float:
    predicted, gold = np.asarray(predicted), np.asarray(gold)
    if predicted.shape != gold.shape:
        raise ValueError(f"prediction/gold shape mismatch: {predicted.shape} vs {gold.shape}")
    return float((predicted == gold).mean()) if gold.size else 0.0


def exact_match(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> float:
    """Fraction of sequences predicted exactly (spell correction: the whole clean query)."""
    if len(predicted) != len(gold):
        raise ValueError("prediction/gold length mismatch")
    if not gold:
        return 0.0
    return sum(list(p) == list(g) for p, g in zip(predicted, gold, strict=True)) / len(gold)


def token_micro_f1(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> float:
    """Token-level micro-F1 over non-``O`` tags (a token counts as correct on an exact tag)."""
    return token_f1_from_counts(*token_f1_counts(predicted, gold))


def entity_f1(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> float:
    """Entity-level (span) micro-F1 with the CoNLL convention, computed by ``seqeval``."""
    from seqeval.metrics import f1_score as seqeval_f1

    if not gold:
        return 0.0
    return float(seqeval_f1([list(g) for g in gold], [list(p) for p in predicted],
                            zero_division=0))


def token_f1_counts(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]
                    ) -> tuple[int, int, int]:
    """(true positives, predicted non-``O`` tokens, gold non-``O`` tokens): the additive
    statistics of :func:`token_micro_f1` (sums over clients give the pooled score)."""
    tp = pred_pos = gold_pos = 0
    for p_seq, g_seq in zip(predicted, gold, strict=True):
        if len(p_seq) != len(g_seq):
            raise ValueError("a predicted tag sequence differs in length from its gold one")
        for p, g in zip(p_seq, g_seq, strict=True):
            pred_pos += p != OUTSIDE
            gold_pos += g != OUTSIDE
            tp += p == g and g != OUTSIDE
    return tp, pred_pos, gold_pos


def token_f1_from_counts(tp: float, pred_pos: float, gold_pos: float) -> float:
    """Token micro-F1 from :func:`token_f1_counts` (1 when neither side tags anything)."""
    if pred_pos == 0 or gold_pos == 0:
        return 1.0 if pred_pos == gold_pos else 0.0
    return 0.0 if tp == 0 else 2 * tp / (pred_pos + gold_pos)


def entity_counts(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]
                  ) -> tuple[int, int, int]:
    """(true positive, predicted, gold) entity spans under the CoNLL convention (seqeval's
    span extraction per sequence): the additive statistics of :func:`entity_f1`."""
    from seqeval.metrics.sequence_labeling import get_entities

    tp = n_pred = n_gold = 0
    for p_seq, g_seq in zip(predicted, gold, strict=True):
        p_spans, g_spans = set(get_entities(list(p_seq))), set(get_entities(list(g_seq)))
        tp += len(p_spans & g_spans)
        n_pred += len(p_spans)
        n_gold += len(g_spans)
    return tp, n_pred, n_gold


def entity_f1_from_counts(tp: float, n_pred: float, n_gold: float) -> float:
    """Entity micro-F1 from :func:`entity_counts` (0 when there is nothing to match)."""
    return 0.0 if tp == 0 else 2 * tp / (n_pred + n_gold)


def overall(scores: Mapping[str, float], keys: Sequence[str]) -> float:
    """Unweighted mean of the task scores (paper §4: (Intent + Spell + NER-F1) / 3)."""
    return float(np.mean([scores[k] for k in keys]))


def regional_summary(per_region_overall: Mapping[str, float]) -> dict[str, float]:
    """RRS = mean of the regional Overall (paper §4), plus the worst region and the std."""
    values = np.array(list(per_region_overall.values()), dtype=float)
    return {
        "rrs": float(values.mean()),
        "worst_region": float(values.min()),
        "region_std": float(values.std()),
    }


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value) over seeds."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0
