import numpy as np
import pytest
import torch
from helpers import small_task, toy_dataset
from learning_outcomes import query_toy_fits

from regionfed.data.queries import QueryDataset
from regionfed.models.query_task import IGNORE


def test_training_learns_all_three_tasks():
    # measured by tests/learning_outcomes.py over 5 seeds × {default kernels,
    # ATEN_CPU_CAPABILITY=default, OMP_NUM_THREADS=1}: untrained intent ≤ 0.225 and NER F1
    # ≤ 0.111; trained, all three 1.000 in every run
    scores = query_toy_fits(0)
    assert scores["before_intent"] < 0.6 and scores["before_ner_f1"] < 0.6
    assert scores["intent"] >= 0.95 and scores["ner_f1"] >= 0.95 and scores["spell"] >= 0.95
    assert scores["overall"] == pytest.approx((scores["intent"] + scores["spell"]
                                               + scores["ner_f1"]) / 3)


def test_gold_word_missing_from_candidates():
    task = small_task()
    # "xyzzy" has no vocabulary word within deletion distance 2, yet its target is "shoes"
    data = QueryDataset([["find", "xyzzy"]], [["find", "shoes"]], [["O", "B-PRODUCT"]],
                        np.array([0]))
    train = task.prepare(data, training=True)
    evaluation = task.prepare(data, training=False)
    assert evaluation.spell_gold[0, 1] == IGNORE  # never matchable at test time
    slot = int(train.spell_gold[0, 1])
    assert slot >= 0 and int(train.cand_forms[0, 1, slot]) != 0  # injected for the loss
    # such a query can never be an exact spell match, whatever the model predicts
    predictions = task.predict(task.build_model(0), data)
    assert task.score(predictions, data)["spell"] == 0.0


def test_majority_reference():
    task = small_task()
    train = toy_dataset(9)  # intents 0,1,2,5,0,1,2,5,0 → majority 0
    test = toy_dataset(8, seed=1)
    ref = task.reference_predictions(train, test)
    assert (ref.intent == 0).all()
    assert ref.spell == test.tokens and all(set(t) == {"O"} for t in ref.ner)
    scores = task.score(ref, test)
    assert scores["intent"] == 0.25 and scores["ner_f1"] == 0.0


def test_example_weights_reweight_the_loss():
    task, data = small_task(), toy_dataset(8)
    model = task.build_model(0)
    prepared = task.prepare(data, training=True)
    batch_all = task.make_batch(prepared, torch.arange(8))
    weights = torch.zeros(8)
    weights[0] = 1.0
    only_first = task.make_batch(task.weighted(prepared, weights), torch.arange(8))
    first = task.make_batch(prepared, torch.arange(1))
    assert torch.allclose(task.loss(model, only_first), task.loss(model, first), atol=1e-5)
    assert not torch.allclose(task.loss(model, batch_all), task.loss(model, first))
    with pytest.raises(ValueError):
        task.weighted(prepared, torch.ones(3))


def test_ensemble_vote_is_the_weighted_mean_of_probabilities():
    task, data = small_task(), toy_dataset(60)
    a, b = task.build_model(0), task.build_model(1)
    pa, pb = task.predict(a, data), task.predict(b, data)
    assert not np.array_equal(pa.intent, pb.intent)  # two genuinely different members
    only_a = task.predict_ensemble([a, b], [1.0, 0.0], data)
    assert np.array_equal(only_a.intent, pa.intent) and only_a.ner == pa.ner \
        and only_a.spell == pa.spell
    twice = task.predict_ensemble([a, a], [0.5, 0.5], data)
    assert np.array_equal(twice.intent, pa.intent) and twice.ner == pa.ner
    # a 50/50 vote: the intent is the argmax of the averaged softmax (Eq. 17)
    vote = task.predict_ensemble([a, b], [0.5, 0.5], data)
    batch = next(task.batches(task.prepare(data, False), 512, None))
    with torch.no_grad():
        mixed = 0.5 * torch.softmax(a.eval()(batch)["intent"], -1) \
            + 0.5 * torch.softmax(b.eval()(batch)["intent"], -1)
    assert np.array_equal(vote.intent, mixed.argmax(-1).numpy())
    with pytest.raises(ValueError, match="one weight per model"):
        task.predict_ensemble([a, b], [1.0], data)


def test_split_predictions_inverts_concat():
    task, data = small_task(), toy_dataset(30)
    whole = task.predict(task.build_model(0), data)
    parts = task.split_predictions(whole, [10, 0, 20])
    assert [len(p) for p in parts] == [10, 0, 20]
    again = task.concat_predictions(parts)
    assert np.array_equal(again.intent, whole.intent) and again.ner == whole.ner
    with pytest.raises(ValueError, match="sizes sum"):
        task.split_predictions(whole, [5])


def test_score_counts_summed_over_clients_equal_the_pooled_score(tiny_federation, tiny_task):
    """The additive statistics a distributed runtime sends instead of labels."""
    from regionfed.data.federation import concat_splits

    model = tiny_task.build_model(0)
    clients = tiny_federation.clients[:3]
    predictions = [tiny_task.predict(model, c.test) for c in clients]
    counts = [tiny_task.score_counts(p, c.test) for p, c in zip(predictions, clients, strict=True)]
    summed = {k: sum(c[k] for c in counts) for k in counts[0]}
    pooled = tiny_task.score(tiny_task.concat_predictions(predictions),
                             concat_splits([c.test for c in clients]))
    assert tiny_task.score_from_counts(summed) == pytest.approx(pooled)


def test_per_example_counts_sum_to_the_counts_and_leave_one_out_drops_one_query():
    """The jackknife's replicates are the scores of the split without each query — an
    Overall whose NER F1 is not a mean over queries included."""
    task, data = small_task(), toy_dataset(12)
    predictions = task.predict(task.build_model(0), data)
    per_example = task.example_score_counts(predictions, data)
    counts = task.score_counts(predictions, data)
    assert {k: float(v.sum()) for k, v in per_example.items()} == pytest.approx(counts)
    replicates = task.leave_one_out_scores(predictions, data)
    for i in (0, 5, 11):
        rest = [j for j in range(len(data)) if j != i]
        kept = task.split_predictions(predictions, [i, 1, len(data) - i - 1])
        without = task.score(task.concat_predictions([kept[0], kept[2]]), data.subset(rest))
        assert replicates[i] == pytest.approx(without["overall"])
    one = data.subset([0])
    assert len(task.leave_one_out_scores(task.predict(task.build_model(0), one), one)) == 0
    with pytest.raises(ValueError, match="predictions for"):
        task.example_score_counts(predictions, data.subset([0, 1]))
