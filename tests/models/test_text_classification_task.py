"""TextClassificationTask: the tiny text classifier learns, batches neutrally, and trains the
same batched and sequentially."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers import assert_trained_alike
from learning_outcomes import TEXT_TINY as SMALL
from learning_outcomes import keyword_federation as build_keyword_federation
from learning_outcomes import text_classifier_fedavg

from regionfed.data.federation import concat_splits
from regionfed.data.text import TextDataset
from regionfed.models.registry import build_task
from regionfed.models.tasks import IGNORE
from regionfed.models.text_classification_task import TextClassificationTask
from regionfed.runtime.batched_training import stack_batches, train_local_batched
from regionfed.runtime.local_training import OptimizerConfig, train_local
from regionfed.runtime.params import get_flat, parameter_slices


@pytest.fixture(scope="module")
def keyword_federation(tmp_path_factory):
    """Reviews-like JSON lines whose rating is fixed by one keyword among filler words;
    3 categories × 60 reviews, 2 clients per category."""
    return build_keyword_federation(tmp_path_factory.mktemp("kw"))


@pytest.fixture(scope="module")
def task(keyword_federation):
    return build_task(SMALL, keyword_federation)


def test_registry_routes_text_data_to_the_text_classifier(task, keyword_federation):
    assert isinstance(task, TextClassificationTask)
    assert task.num_classes == 5 and task.max_len == 64
    model = task.build_model(0)
    groups = task.parameter_groups(model)
    names = {n for n, _ in model.named_parameters()}
    assert groups["head"] == ["head.weight", "head.bias"]
    assert len(groups["attention"]) == 6 and set(groups["attention"]) <= names  # q,k,v × w,b
    train = keyword_federation.clients[0].train
    assert task.labels(train).tolist() == train.label.tolist()


def test_fedavg_beats_the_majority_baseline(task, keyword_federation):
    # measured by tests/learning_outcomes.py over 5 seeds × {default kernels,
    # ATEN_CPU_CAPABILITY=default, OMP_NUM_THREADS=1}: majority 0.222, fedavg min 0.972,
    # gain over majority min 0.750
    scores = text_classifier_fedavg(0, task, keyword_federation)
    assert scores["majority"] < 0.4
    assert scores["gain_over_majority"] >= 0.4


def test_predictions_and_the_ensemble_vote(task, keyword_federation):
    data = keyword_federation.clients[0].test
    a, b = task.build_model(0), task.build_model(1)
    single = task.predict(a, data)
    assert single.shape == (len(data),) and single.dtype == np.int64
    assert np.array_equal(task.predict_ensemble([a, a], [0.3, 0.7], data), single)
    assert np.array_equal(task.predict_ensemble([a, b], [0.0, 1.0], data), task.predict(b, data))
    sizes = [2, len(data) - 2]
    assert [len(p) for p in task.split_predictions(single, sizes)] == sizes
    ref = task.reference_predictions(TextDataset([["x"]] * 3, [2, 2, 1]), data)
    assert set(ref.tolist()) == {2}
    long = TextDataset([["w"] * 100], [1])  # cut to max_len, not refused
    assert task.prepare(long, training=False).length.tolist() == [64]


# -- batching: mirrors tests/runtime/test_batched_training.py for the query task ----------

BATCH = 8
SIZES = (30, 21, 9, 4, 0)  # unequal clients and an empty one


def _slice(prepared, start, n):
    return dataclasses.replace(prepared, **{f.name: getattr(prepared, f.name)[start:start + n]
                                            for f in dataclasses.fields(prepared)})


@pytest.fixture(scope="module")
def clients(task, keyword_federation):
    """Consecutive slices of all training data, of unequal sizes (+ an empty client);
    client 1 carries non-uniform example weights."""
    pooled = task.prepare(concat_splits([c.train for c in keyword_federation.clients]),
                          training=True)
    out, offset = [], 0
    for i, n in enumerate(SIZES):
        prepared = _slice(pooled, offset, n)
        offset += n
        if i == 1:  # non-uniform example weights
            prepared = task.weighted(prepared, torch.rand(n, generator=torch.Generator()
                                                          .manual_seed(5)) + 0.5)
        out.append(prepared)
    return out


@torch.no_grad()
def test_padding_a_batch_leaves_the_loss_unchanged(task, clients):
    model = task.build_model(0)
    small = next(task.batches(clients[3], 4, torch.Generator().manual_seed(0)))
    big = next(task.batches(clients[0], 16, torch.Generator().manual_seed(1)))
    stacked, active = stack_batches([small, big, None], task.batch_fill_values)
    assert active.tolist() == [True, True, False]
    padded = {key: value[0] for key, value in stacked.items()}
    for key in ("label", "mask", "form_features"):  # really padded: rows, columns, forms
        assert padded[key].shape[0] > small[key].shape[0]
    assert (padded["label"][len(small["label"]):] == IGNORE).all()
    torch.testing.assert_close(task.loss(model, padded), task.loss(model, small),
                               rtol=1e-6, atol=1e-6)
    empty = {key: value[2] for key, value in stacked.items()}
    assert float(empty["weight"].sum()) == 0.0 and float(task.loss(model, empty)) == 0.0


@pytest.mark.parametrize("config", [
    OptimizerConfig(name="sgd", lr=0.05, momentum=0.9, weight_decay=0.01),
    OptimizerConfig(name="adamw", lr=3e-3, weight_decay=0.05),
], ids=["sgd", "adamw"])
def test_batched_training_equals_the_sequential_loop(task, clients, config):
    model = task.build_model(0)
    starts = [get_flat(task.build_model(seed)) for seed in range(len(SIZES))]

    def gens():
        return [torch.Generator().manual_seed(i) for i in range(len(SIZES))]

    sequential = [train_local(task, model, start, prepared, epochs=2, batch_size=BATCH,
                              optimizer=config, generator=gen)
                  for start, prepared, gen in zip(starts, clients, gens(), strict=True)]
    batched = train_local_batched(task, model, torch.stack(starts), clients, epochs=2,
                                  batch_size=BATCH, optimizer=config, generators=gens(),
                                  max_clients=3)
    # key biases get a zero gradient in exact arithmetic (softmax is shift-invariant)
    noise_only = [s for n, s in parameter_slices(model).items() if "k_proj.bias" in n]
    steps = 2 * -(-max(SIZES) // BATCH)
    for k, ((want, want_loss), (got, got_loss)) in enumerate(zip(sequential, batched,
                                                                 strict=True)):
        assert not torch.equal(got, starts[k]) or SIZES[k] == 0
        assert got_loss == pytest.approx(want_loss, rel=1e-5, abs=1e-6)
        assert_trained_alike(got, want, optimizer=config, steps=steps, noise_only=noise_only)
    assert torch.equal(batched[-1][0], starts[-1]) and batched[-1][1] == 0.0  # no data
