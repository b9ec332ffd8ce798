"""SecAgg+ per region on Flower: the server learns each region's data-weighted mean update,
never a single client's update.

An exchange whose instructions produce updates (``train`` / ``gradient``) runs, for each
region, flwr's own SecAgg+ protocol (``SecAggPlusWorkflow`` on the server,
``secaggplus_mod`` on the nodes; Bell et al., CCS 2020): the region's sampled clients agree
on pairwise masks, each sends ``[w, w·Δ]`` quantized and masked (w = its example count),
and the server can unmask only the sum — also when clients drop out, as long as at least
the reconstruction threshold of each dropped client's neighbours answer. The strategy then
receives one result per region (its weighted mean update, the total example count, the
clients' plain scalar metrics averaged), instead of one per client.

That is exactly what a strategy gets to see when its every use of updates is a
data-weighted mean within a region (:attr:`Strategy.secure_aggregation`: fedavg, the
RegionFed family) and DP is off; other strategies, and DP (whose server-side clip and noise
need the individual updates, or client-side noise that is not built), are refused. A
region with fewer sampled clients than ``flower.secagg.min_clients``, or whose protocol
fails (too few replies), releases nothing that round (the round log's ``faults`` say so).
flwr's SecAgg+ exists only for its legacy strategy API, so each region's protocol runs with
a one-region legacy strategy standing in (:class:`OneRegion`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import GRADIENT, TRAIN, ClientResult, TrainInstruction
from regionfed.config import SECAGG_WITH_DP
from regionfed.errors import ConfigError
from regionfed.runtime.flower.codec import encode_fit_ins, fit_res_metrics

#: instruction kinds whose replies carry an update (what SecAgg+ masks)
UPDATE_KINDS = frozenset({TRAIN, GRADIENT})
#: metric of a region's secure result: how many clients its mean is over
CLIENTS_KEY = "secagg_clients"


def check_secure_aggregation(strategy: Any, dp: Any) -> None:
    """A :class:`ConfigError` unless ``strategy`` may run with SecAgg+ (module
    docstring)."""
    if dp.mode != "off":
        raise ConfigError(SECAGG_WITH_DP)
    if not strategy.secure_aggregation:
        raise ConfigError(f"flower.secagg.enabled: {strategy.name} uses individual client "
                          "updates, which secure aggregation hides; fedavg and the "
                          "regionfed methods support it")


class Exchanges:
    """The ``grid`` a SecAggPlusWorkflow talks to: its ``send_and_receive`` is ``send``
    (the driver's bounded exchange), and every reply passes ``spy`` (tests)."""

    def __init__(self, send: Callable[[list[Any]], list[Any]],
                 spy: Callable[[Any], None] | None = None) -> None:
        self.send, self.spy = send, spy

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Any]:
        replies = self.send(list(messages))
        if self.spy is not None:
            for reply in replies:
                self.spy(reply)
        return replies


def one_region_strategy(fit_ins: list[tuple[int, Any]]) -> Any:
    """A legacy flwr strategy that asks exactly ``fit_ins`` (node id, FitIns) and keeps
    what SecAgg+ hands its ``aggregate_fit`` (the unmasked mean as every result's
    parameters, each client's count and metrics)."""
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.strategy import Strategy as LegacyStrategy

    class OneRegion(LegacyStrategy):
        results: list[tuple[Any, Any]] | None = None

        def initialize_parameters(self, client_manager: Any) -> None:
            return None

        def configure_fit(self, server_round: int, parameters: Any, client_manager: Any
                          ) -> list[tuple[Any, Any]]:
            return [(GridClientProxy(node, None, 0), ins) for node, ins in fit_ins]

        def aggregate_fit(self, server_round: int, results: Any, failures: Any
                          ) -> tuple[None, dict]:
            self.results = list(results)
            return None, {}

        def configure_evaluate(self, *args: Any) -> list:
            return []

        def aggregate_evaluate(self, *args: Any) -> tuple[None, dict]:
            return None, {}

        def evaluate(self, *args: Any) -> None:
            return None

    return OneRegion()


def secure_region_result(send: Callable[[list[Any]], list[Any]],
                         instructions: list[TrainInstruction], node_of: dict[str, int],
                         max_weight: float, settings: Any, rnd: int, timeout: float | None,
                         spy: Callable[[Any], None] | None = None
                         ) -> tuple[ClientResult | None, str | None]:
    """One region's ``instructions`` through SecAgg+: (the region's result, None), or
    (None, why nothing was released). ``max_weight``: the largest example count among
    the clients (weights are quantized relative to it); ``settings``: ``flower.secagg``."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
    from flwr.common import parameters_to_ndarrays
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey

    region = instructions[0].region
    if len(instructions) < settings.min_clients:
        return None, (f"region {region}: {len(instructions)} sampled client(s), fewer than "
                      f"flower.secagg.min_clients ({settings.min_clients})")
    fit_ins = [(node_of[i.client_id], encode_fit_ins(i)) for i in instructions]
    strategy = one_region_strategy(fit_ins)
    context = LegacyContext(Context(run_id=0, node_id=0, node_config={}, state=RecordDict(),
                                    run_config={}), strategy=strategy)
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
        {WorkflowKey.CURRENT_ROUND: rnd})
    context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow = SecAggPlusWorkflow(
        num_shares=float(settings.num_shares),
        reconstruction_threshold=float(settings.reconstruction_threshold),
        max_weight=float(max_weight), clipping_range=settings.clipping_range,
        quantization_range=settings.quantization_range, timeout=timeout)
    workflow(Exchanges(send, spy), context)
    if not strategy.results:
        return None, (f"region {region}: secure aggregation failed (fewer replies than its "
                      "reconstruction threshold)")
    (mean,) = parameters_to_ndarrays(strategy.results[0][1].parameters)
    counts = [fit_res.num_examples for _, fit_res in strategy.results]
    metrics = [fit_res_metrics(fit_res) for _, fit_res in strategy.results]
    total = sum(counts)
    averaged = {key: sum(n * m[key] for n, m in zip(counts, metrics, strict=True)) / total
                for key in metrics[0]
                if all(isinstance(m.get(key), (int, float)) for m in metrics)}
    averaged[CLIENTS_KEY] = len(counts)
    update = torch.from_numpy(np.asarray(mean, dtype=np.float32).copy())
    return ClientResult(f"secagg:{region}", region, update, total, averaged), None
