"""FederationEvaluator: a task with additive score counts is scored once per client and its
counts summed; the numbers equal scoring the pooled predictions, as a task without counts
is still scored."""

import numpy as np
import pytest
import torch

from regionfed.models.query_task import QueryTask
from regionfed.runtime.evaluation import FederationEvaluator, scores_from_counts


def _predictions(task, federation, split):
    torch.manual_seed(0)
    model = task.build_model(3).eval()
    return {c.client_id: task.predict(model, c.split(split)) for c in federation.clients}


def test_summed_counts_equal_scoring_the_pooled_predictions(tiny_task, tiny_federation):
    task, fed = tiny_task, tiny_federation
    predictions = _predictions(task, fed, "test")
    got = FederationEvaluator(task, fed).evaluate("test", lambda c: predictions[c.client_id])
    for region in fed.regions:
        members = fed.clients_in(region)
        pooled = task.score(task.concat_predictions([predictions[c.client_id]
                                                     for c in members]),
                            type(members[0].test).concat([c.test for c in members]))
        assert got["per_region_metrics"][region] == pytest.approx(pooled, abs=1e-12)
        assert got["per_region"][region] == pytest.approx(pooled["overall"], abs=1e-12)
    everything = task.score(task.concat_predictions([predictions[c.client_id]
                                                    for c in fed.clients]),
                            type(fed.clients[0].test).concat([c.test for c in fed.clients]))
    assert {k: got[k] for k in everything} == pytest.approx(everything, abs=1e-12)
    assert got["per_client"] == pytest.approx(
        {c.client_id: task.score(predictions[c.client_id], c.test)["overall"]
         for c in fed.clients}, abs=1e-12)
    assert 0.0 < got["overall"] < 1.0  # an untrained model: neither all right nor all wrong


class _NoCounts(QueryTask):
    """The same task without additive statistics: the evaluator must pool predictions."""

    def score_counts(self, predictions, dataset):
        raise TypeError("no additive score statistics")

    def score(self, predictions, dataset):
        return self.score_from_counts(QueryTask.score_counts(self, predictions, dataset))


def test_a_task_without_counts_is_scored_on_pooled_predictions(tiny_task, tiny_federation):
    predictions = _predictions(tiny_task, tiny_federation, "val")
    plain = FederationEvaluator(tiny_task, tiny_federation).evaluate(
        "val", lambda c: predictions[c.client_id])
    no_counts = object.__new__(_NoCounts)
    no_counts.__dict__.update(tiny_task.__dict__)
    pooled = FederationEvaluator(no_counts, tiny_federation).evaluate(
        "val", lambda c: predictions[c.client_id])
    assert set(pooled) == set(plain)
    assert pooled["per_region"] == pytest.approx(plain["per_region"], abs=1e-12)
    assert pooled["overall"] == pytest.approx(plain["overall"], abs=1e-12)


def test_a_region_without_clients_scores_zero_counts(tiny_task):
    """Summed counts of no client are zeros (scored as an empty split is), not an error."""
    counts = {"a": {"examples": 4, "intent_correct": 2, "spell_correct": 4, "ner_tp": 3,
                    "ner_pred": 4, "ner_gold": 5, "entity_tp": 1, "entity_pred": 2,
                    "entity_gold": 2}}
    result = scores_from_counts(tiny_task, {"r1": ["a"], "empty": []}, counts)
    # what scoring an empty split gives (zero counts), not an error
    assert result["per_region_metrics"]["empty"] == tiny_task.score_from_counts(
        dict.fromkeys(counts["a"], 0))
    assert result["per_region_metrics"]["empty"]["intent"] == 0.0
    assert result["per_region_metrics"]["r1"]["intent"] == 0.5
    assert result["intent"] == 0.5 and result["spell"] == 1.0
    assert np.isclose(result["ner_f1"], 2 * 3 / (4 + 5))
