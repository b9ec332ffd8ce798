"""The server side on Flower: drive a transport-free strategy over a Flower ``Grid``.

The same loop as the in-process simulator (:meth:`Simulator.run`): ``strategy.setup`` with
the same seeds, then per round the strategy's exchanges — every instruction becomes one
message to the node that holds its client, every reply goes back into the strategy — the
privacy ledger, and evaluation every ``eval_every`` rounds and at the end. Only the
transport differs, so a run with the same configuration and seed gives the same global
model as in-process (up to float summation order).

Regions are discovered, not configured on the server: a one-off ``query`` message asks every
node for its client (id, region, index, example count); the server never reads node configs
(in flwr 1.42 the ServerApp cannot see them). Evaluation sends each client the parameters
the strategy assigns it and pools the additive metric statistics (:meth:`Task.score_counts`)
per region and overall — no label leaves a node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import (
    ClientResult,
    Ensemble,
    FederationView,
    Strategy,
    TrainInstruction,
)
from regionfed.errors import MethodNotApplicableError
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.evaluation import scores_from_counts
from regionfed.runtime.faults import RoundFaults, faults_log, screen
from regionfed.runtime.flower.codec import decode_result, encode_instruction
from regionfed.runtime.flower.polling import Backoff
from regionfed.runtime.flower.secagg import CLIENTS_KEY as SECURE_CLIENTS_KEY
from regionfed.runtime.flower.secagg import (
    UPDATE_KINDS,
    check_secure_aggregation,
    secure_region_result,
)
from regionfed.runtime.params import declared_blocks, get_flat
from regionfed.runtime.simulator import FederatedRun, derived_seed, drive_rounds

INSTRUCTION_TYPE = "train.regionfed"
SCORE_TYPE = "evaluate.regionfed"


@dataclass(frozen=True)
class NodeInfo:
    node_id: int
    client_id: str
    region: str
    index: int
    num_examples: int
    canary: bool = False  # an audit's canary: trained like a client, never scored


#: first and longest pause between two pulls of replies, in seconds
FIRST_POLL_S, LONGEST_POLL_S = 0.02, 0.25


def exchange(grid: Any, messages: list[Any], timeout: float | None,
             sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> list[Any]:
    """Push ``messages`` through a Flower grid and pull their replies until every one is
    in or ``timeout`` seconds have passed (``None``: no limit); the replies that came.

    What ``Grid.send_and_receive`` does, with the public ``push_messages`` /
    ``pull_messages``, but polling from 20 ms, doubling per empty pull up to 0.25 s
    (:class:`~regionfed.runtime.flower.polling.Backoff`), instead of sleeping 3 s between
    pulls (flwr 1.42's grid): with warm nodes a reply comes within a few hundred ms
    (docs/flower.md, Cost)."""
    waiting = set(grid.push_messages(messages))
    deadline = None if timeout is None else clock() + timeout
    replies: list[Any] = []
    backoff = Backoff(FIRST_POLL_S, LONGEST_POLL_S, sleep=sleep, clock=clock)
    while waiting:
        got = list(grid.pull_messages(waiting))
        replies.extend(got)
        waiting.difference_update(r.metadata.reply_to_message_id for r in got)
        if not waiting or (deadline is not None and clock() >= deadline):
            break
        if got:
            backoff.reset()
        backoff.wait(None if deadline is None else deadline - clock())
    return replies


class FlowerDriver:
    """Runs one strategy over the nodes of a Flower grid."""

    def __init__(self, grid: Any, config: Any, task: Any, regions: list[str], seed: int,
                 timeout: float | None = 600.0) -> None:
        self.grid, self.config, self.task, self.seed = grid, config, task, seed
        self.training = config.training
        self.timeout = timeout
        self.secagg = config.flower.secagg
        #: sees every reply of a SecAgg+ exchange before the protocol does (tests)
        self.secagg_spy: Callable[[Any], None] | None = None
        self.model = task.build_model(seed)
        self.nodes = self.discover()
        present = {n.region for n in self.nodes}
        self.view = FederationView(
            regions=tuple(r for r in regions if r in present),
            client_region={n.client_id: n.region for n in self.nodes},
            num_examples={n.client_id: n.num_examples for n in self.nodes},
            parameter_groups=declared_blocks(task, self.model),
        )
        self.node_of = {n.client_id: n.node_id for n in self.nodes}
        canaries = {n.client_id for n in self.nodes if n.canary}
        # what is scored: the federation's clients, never an audit's canaries
        self.scored = [n for n in self.nodes if not n.canary]
        self.scored_view = replace(
            self.view,
            client_region={c: r for c, r in self.view.client_region.items()
                           if c not in canaries},
            num_examples={c: k for c, k in self.view.num_examples.items()
                          if c not in canaries})

    # -- messaging -----------------------------------------------------------------------
    def _send(self, messages: list[Any]) -> list[Any]:
        """Send, wait for every reply (bounded), return them in the order sent."""
        replies = {r.metadata.reply_to_message_id: r
                   for r in exchange(self.grid, messages, timeout=self.timeout)}
        out = []
        for m in messages:
            reply = replies.get(m.metadata.message_id)
            if reply is None:
                raise RuntimeError(f"node {m.metadata.dst_node_id} did not reply within "
                                   f"{self.timeout} s")
            if reply.has_error():
                raise RuntimeError(f"node {m.metadata.dst_node_id} failed: "
                                   f"{reply.error.reason}")
            out.append(reply)
        return out

    def discover(self) -> list[NodeInfo]:
        """Every node's client, ordered by its federation index (as the simulator's)."""
        from flwr.app import Message, MessageType, RecordDict

        node_ids = list(self.grid.get_node_ids())
        if not node_ids:
            raise RuntimeError("no Flower nodes are connected")
        replies = self._send([Message(RecordDict(), dst_node_id=n,
                                      message_type=MessageType.QUERY) for n in node_ids])
        nodes = []
        for node_id, reply in zip(node_ids, replies, strict=True):
            info = reply.content["client"]
            nodes.append(NodeInfo(node_id, str(info["client_id"]), str(info["region"]),
                                  int(info["index"]), int(info["num_examples"]),
                                  bool(info.get("canary", False))))
        clients = [n.client_id for n in nodes]
        if len(set(clients)) != len(clients):
            raise RuntimeError("two Flower nodes hold the same client; give each node its own "
                               "partition-id / client-index")
        return sorted(nodes, key=lambda n: n.index)

    # -- the round loop (Simulator.run over messages) ------------------------------------
    def run(self, strategy: Strategy, on_round: Callable[[dict[str, Any]], None] | None = None,
            ledger: PrivacyLedger | None = None) -> FederatedRun:
        if self.secagg.enabled:
            check_secure_aggregation(strategy, self.config.dp)
        strategy.setup(get_flat(self.model), self.view,
                       np.random.default_rng(derived_seed(self.seed, 7919)))

        def one_round(rnd: int) -> tuple[dict[str, Any], list[float]]:
            log, losses = self._round(strategy, rnd)
            return {**log, "client_batching": "flower"}, losses

        # per-round validation sends every client's un-noised scores to the server: under
        # DP it is not done here (the final test scores are the run's reported result)
        return drive_rounds(strategy, self.training, one_round, self.evaluate_splits, on_round,
                            ledger, validate_every_round=not strategy.dp.adds_noise)

    def _round(self, strategy: Strategy, rnd: int) -> tuple[dict[str, Any], list[float]]:
        from flwr.app import Message

        exchange = strategy.run_round(rnd)
        instructions = next(exchange)
        first: list[float] | None = None
        dim = strategy.params.numel()
        rejected: dict[str, str] = {}
        secured: dict[str, list[int]] = {}  # region → clients in each secure mean
        while True:
            if self.secagg.enabled and any(i.kind in UPDATE_KINDS for i in instructions):
                received = self._secure_results(instructions, rnd, rejected)
                for result in received:
                    secured.setdefault(result.region, []).append(
                        int(result.metrics[SECURE_CLIENTS_KEY]))
            else:
                replies = self._send([
                    Message(encode_instruction(ins), dst_node_id=self.node_of[ins.client_id],
                            message_type=INSTRUCTION_TYPE) for ins in instructions])
                received = [decode_result(r.content) for r in replies]
            # the in-process simulator's screen: a NaN/Inf or misshapen reply is dropped
            # and logged, the round goes on with the others
            results = [result for result in received if screen(result, dim, rnd, rejected)]
            if first is None:
                first = [r.metrics["train_loss"] for r in results if "train_loss" in r.metrics]
            try:
                instructions = exchange.send(results)
            except StopIteration as done:
                log = dict(done.value)
                if (entry := faults_log(RoundFaults(), rejected)) is not None:
                    log["faults"] = entry
                if secured:
                    log["secagg"] = secured
                return log, first

    def _secure_results(self, instructions: list[TrainInstruction], rnd: int,
                        rejected: dict[str, str]) -> list[ClientResult]:
        """One SecAgg+ protocol per region (:mod:`~regionfed.runtime.flower.secagg`): one
        result per region that released its mean; a region that could not is logged in
        ``rejected``."""
        if any(i.kind not in UPDATE_KINDS for i in instructions):
            raise RuntimeError("an exchange mixes update and score instructions; secure "
                               "aggregation cannot split it")
        results = []
        for region in self.view.regions:
            mine = [i for i in instructions if i.region == region]
            if not mine:
                continue
            result, why = secure_region_result(
                lambda messages: exchange(self.grid, messages, self.timeout), mine,
                self.node_of, max(self.view.num_examples[i.client_id] for i in mine),
                self.secagg, rnd, self.timeout, self.secagg_spy)
            if result is None:
                rejected[f"secagg:{region}"] = str(why)
            else:
                results.append(result)
        return results

    def evaluate_splits(self, strategy: Strategy, splits: tuple[str, ...]
                        ) -> dict[str, dict[str, Any]]:
        """:meth:`evaluate` of each of ``splits`` (one message round each)."""
        return {split: self.evaluate(strategy, split) for split in splits}

    def evaluate(self, strategy: Strategy, split: str) -> dict[str, Any]:
        """Every client scored on its own ``split`` with the parameters the strategy assigns
        it; counts pooled per region and overall (the in-process evaluator's result keys)."""
        from flwr.app import Message

        messages = [Message(evaluation_request(strategy, node.client_id, node.region, split),
                            dst_node_id=node.node_id, message_type=SCORE_TYPE)
                    for node in self.scored]
        counts = {node.client_id: dict(reply.content["counts"])
                  for node, reply in zip(self.scored, self._send(messages), strict=True)}
        return pooled_scores(self.task, self.scored_view, counts)


def evaluation_request(strategy: Strategy, client_id: str, region: str, split: str) -> Any:
    """The content of one client's evaluation message: the parameters it is scored with,
    or for a client-personalized strategy (whose model is made on the client's node from
    its private state) the global model and the server state that needs
    (:meth:`Strategy.client_evaluation_arrays`, e.g. the client's regional model)."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    if strategy.evaluates_on_client:
        arrays = {"params": strategy.params,
                  **{f"state.{k}": v
                     for k, v in strategy.client_evaluation_arrays(region).items()}}
    else:
        params = strategy.eval_params(client_id, region, None)
        if isinstance(params, Ensemble):
            raise MethodNotApplicableError(
                f"{strategy.name} evaluates with ensembles, which the Flower runtime does not "
                "send yet; use the in-process runtime")
        arrays = {"params": params}
    return RecordDict({
        "arrays": ArrayRecord(array_dict={k: Array(v.numpy()) for k, v in arrays.items()}),
        "meta": ConfigRecord({"split": split, "on_client": strategy.evaluates_on_client})})


def pooled_scores(task: Any, view: FederationView, counts: dict[str, dict[str, float]]
                  ) -> dict[str, Any]:
    """Per-region and overall metrics from per-client additive counts (the same keys as
    :meth:`FederationEvaluator.evaluate`)."""
    return scores_from_counts(task, {r: view.clients_in(r) for r in view.regions}, counts)


def params_tensor(content: Any) -> torch.Tensor:
    return torch.from_numpy(content["arrays"]["params"].numpy().copy())


def evaluation_state(content: Any) -> dict[str, torch.Tensor]:
    """The server state an evaluation request carries beside ``params``
    (:meth:`Strategy.client_evaluation_arrays`)."""
    arrays = content["arrays"]
    return {key.removeprefix("state."): torch.from_numpy(arrays[key].numpy().copy())
            for key in arrays if key.startswith("state.")}
