"""Federation-wide evaluation: per-client predictions pooled per region and overall.

Each client is scored with the model its method assigns to it (global, regional or personal)
on its own split; a region's metrics are computed on the union of its clients' examples, and
the overall metrics on the union of all clients' (paper §4.2). RRS, the worst region and the std
across regions come from the per-region Overall.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from regionfed import metrics
from regionfed.data.federation import ClientData, Federation, concat_splits
from regionfed.models.tasks import Task


class FederationEvaluator:
    def __init__(self, task: Task, federation: Federation) -> None:
        self.task = task
        self.federation = federation
        self._pooled: dict[tuple[str, str | None], Any] = {}

    def pooled_split(self, split: str, region: str | None = None) -> Any:
        """All clients' ``split`` (of ``region`` if given), concatenated once and cached."""
        key = (split, region)
        if key not in self._pooled:
            clients = self.federation.clients_in(region) if region else self.federation.clients
            self._pooled[key] = concat_splits([c.split(split) for c in clients])
        return self._pooled[key]

    def evaluate(self, split: str, predict: Callable[[ClientData], Any]) -> dict[str, Any]:
        """Metrics of ``predict(client)`` on every client's ``split``.

        Returns the overall metrics, ``per_region`` (region → Overall), ``per_region_metrics``
        (region → all metrics), ``per_client`` (client → Overall on its own split) and the
        regional summary (``rrs``, ``worst_region``, ``region_std``). A task with additive
        score statistics (:meth:`Task.score_counts`) scores each client once and sums its
        counts for the regions and the whole federation (the same numbers as scoring the
        pooled predictions, a third of the work); any other task is scored three times.
        """
        return self.evaluate_splits((split,), lambda c: {split: predict(c)})[split]

    def evaluate_splits(self, splits: tuple[str, ...],
                        predict: Callable[[ClientData], dict[str, Any]]
                        ) -> dict[str, dict[str, Any]]:
        """:meth:`evaluate` of several splits in one pass over the clients:
        ``predict(client)`` returns the client's predictions on each of ``splits`` (a
        client's model is made once for all of them)."""
        predictions: dict[str, dict[str, Any]] = {split: {} for split in splits}
        for client in self.federation.clients:
            mine = predict(client)
            for split in splits:
                predictions[split][client.client_id] = mine[split]
        return {split: self._score(split, predictions[split]) for split in splits}

    def _score(self, split: str, predictions: dict[str, Any]) -> dict[str, Any]:
        fed, task = self.federation, self.task
        try:
            counts = {c.client_id: task.score_counts(predictions[c.client_id], c.split(split))
                      for c in fed.clients}
        except TypeError:  # no additive statistics: score the pooled predictions
            counts = None
        if counts is not None:
            return scores_from_counts(
                task, {r: [c.client_id for c in fed.clients_in(r)] for r in fed.regions},
                counts)
        per_region_metrics = {}
        for region in fed.regions:
            parts = [predictions[c.client_id] for c in fed.clients_in(region)]
            per_region_metrics[region] = task.score(task.concat_predictions(parts),
                                                    self.pooled_split(split, region))
        everything = task.concat_predictions([predictions[c.client_id] for c in fed.clients])
        result: dict[str, Any] = dict(task.score(everything, self.pooled_split(split)))
        result["per_region"] = {r: m["overall"] for r, m in per_region_metrics.items()}
        result["per_region_metrics"] = per_region_metrics
        result["per_client"] = {c.client_id: task.score(predictions[c.client_id],
                                                         c.split(split))["overall"]
                                for c in fed.clients}
        result.update(metrics.regional_summary(result["per_region"]))
        return result


def scores_from_counts(task: Task, region_clients: dict[str, list[str]],
                       counts: dict[str, dict[str, float]]) -> dict[str, Any]:
    """What :meth:`FederationEvaluator.evaluate` returns, from per-client additive counts
    (:meth:`Task.score_counts`): a region's metrics are those of its clients' summed counts,
    the overall ones of everyone's (clients in ``region_clients`` order)."""
    keys = next(iter(counts.values())).keys()

    def total(clients: list[str]) -> dict[str, float]:
        return {k: sum(counts[c][k] for c in clients) for k in keys}

    everyone = [c for clients in region_clients.values() for c in clients]
    per_region_metrics = {r: task.score_from_counts(total(clients))
                          for r, clients in region_clients.items()}
    result: dict[str, Any] = dict(task.score_from_counts(total(everyone)))
    result["per_region"] = {r: m["overall"] for r, m in per_region_metrics.items()}
    result["per_region_metrics"] = per_region_metrics
    result["per_client"] = {c: task.score_from_counts(counts[c])["overall"] for c in everyone}
    result.update(metrics.regional_summary(result["per_region"]))
    return result


def loggable(result: dict[str, Any]) -> dict[str, Any]:
    """An evaluation result without its bulky per-region and per-client detail
    (what goes into ``metrics.jsonl`` each round)."""
    return {k: v for k, v in result.items() if k not in ("per_region_metrics", "per_client")}
