"""Pooled (non-federated) training for the ``centralized`` references (paper §4.3).

All clients' training data in one place — the privacy-violating upper bound. One "round"
is E epochs over the pooled data, so the budget of sample-gradients equals a federated run
with full participation. ``reweight_regions`` gives every example of region r the weight
N / (M · n_r), so each region contributes 1/M of the loss (``centralized-rw``).
"""

from __future__ import annotations

import torch

from regionfed.config import TrainingConfig
from regionfed.data.federation import Federation, concat_splits
from regionfed.models.tasks import Task
from regionfed.runtime.device import resolve_device
from regionfed.runtime.evaluation import FederationEvaluator, loggable
from regionfed.runtime.local_training import train_local
from regionfed.runtime.params import get_flat, set_flat
from regionfed.runtime.simulator import FederatedRun, RoundCallback, derived_seed


def region_balancing_weights(federation: Federation) -> torch.Tensor:
    """N / (M · n_r) for each pooled training example, in client order."""
    sizes = federation.region_sizes("train")
    total, m = sum(sizes.values()), len(sizes)
    return torch.cat([torch.full((len(c.train),), total / (m * sizes[c.region]))
                      for c in federation.clients])


def reweighting_is_identity(federation: Federation) -> bool:
    """Whether every region holds the same number of training examples: then every weight
    N / (M · n_r) is exactly 1 and the region-balanced run is the plain pooled run."""
    return bool((region_balancing_weights(federation) == 1.0).all())


def run_pooled(federation: Federation, task: Task, training: TrainingConfig, seed: int, *,
               reweight_regions: bool = False, evaluator: FederationEvaluator | None = None,
               on_round: RoundCallback | None = None) -> FederatedRun:
    evaluator = evaluator or FederationEvaluator(task, federation)
    model = task.build_model(seed).to(resolve_device(training.device))
    prepared = task.prepare(concat_splits([c.train for c in federation.clients]), training=True)
    if reweight_regions:
        prepared = task.weighted(prepared, region_balancing_weights(federation))
    params = get_flat(model)
    generator = torch.Generator().manual_seed(derived_seed(seed, 104729))
    history = []
    for rnd in range(1, training.rounds + 1):
        params, loss = train_local(task, model, params, prepared, epochs=training.local_epochs,
                                   batch_size=training.batch_size,
                                   optimizer=training.optimizer, generator=generator)
        log = {"round": rnd, "train_loss": loss}
        if rnd % training.eval_every == 0 or rnd == training.rounds:
            set_flat(model, params)
            val = evaluator.evaluate("val", lambda c: task.predict(model, c.val))
            log["val"] = loggable(val)
        history.append(log)
        if on_round is not None:
            on_round(log)
    set_flat(model, params)
    test = evaluator.evaluate("test", lambda c: task.predict(model, c.test))
    return FederatedRun(history, test, params)
