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
        regional summary (``rrs``, ``worst_region``, ``region_std``).
        """
        fed, task = self.federation, self.task
        predictions = {c.client_id: predict(c) for c in fed.clients}
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


def loggable(result: dict[str, Any]) -> dict[str, Any]:
    """An evaluation result without its bulky per-region and per-client detail
    (what goes into ``metrics.jsonl`` each round)."""
    return {k: v for k, v in result.items() if k not in ("per_region_metrics", "per_client")}
