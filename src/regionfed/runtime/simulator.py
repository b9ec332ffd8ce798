"""The in-process simulator: drives any transport-free :class:`Strategy` round by round.

Per round: the strategy samples and configures clients, each sampled client runs the
strategy's client step on its own data (with private persistent state), every update is
checked for NaN/inf, the strategy aggregates, and every ``eval_every`` rounds (and at the
end) all clients are evaluated on their validation split with the model the strategy
assigns them. The final models are scored on every client's test split.

Client batching (``training.client_batching``): the client steps of a window of
``max_batched_clients`` sampled clients run in lockstep (:mod:`.lockstep`), so every
client's ``train`` (plain or with a :class:`~regionfed.algorithms.base.Proximal` term) and
``gradient`` call is computed together with the others' — FedAvg's single step and Ditto's
or regionfed-plus's two trainings alike, with the strategies' code unchanged. Together means
``processes`` (``auto`` on a CPU with two or more threads): the calls are spread over this
process and worker processes, one torch thread each, each call computed as the sequential
loop computes it (:mod:`.client_processes`); or ``on``: one batched (vmap) computation per
kind (:mod:`.batched_training`, on any device), equal to the sequential loop up to float
summation order (tested), with frozen masks, mixtures and step caps batched too
(:class:`~.batched_training.ClientOptions`). A call with another extra loss (SCAFFOLD's
correction) runs one by one, as do tasks whose batches can't be stacked under ``on``; every
round's log says which (``client_batching``).
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from regionfed.algorithms.base import (
    EVALUATE,
    GRADIENT,
    TRAIN,
    ClientResult,
    Ensemble,
    FederationView,
    Strategy,
    TrainInstruction,
)
from regionfed.config import TrainingConfig
from regionfed.data.federation import ClientData, Federation, concat_splits
from regionfed.errors import PrivacyBudgetError
from regionfed.models.tasks import Task
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.batched_training import (
    ClientOptions,
    mean_gradients_batched,
    train_local_batched,
)
from regionfed.runtime.client_processes import ClientProcesses, compute_call
from regionfed.runtime.device import resolve_device
from regionfed.runtime.evaluation import FederationEvaluator, loggable
from regionfed.runtime.faults import faults_log, round_faults, screen
from regionfed.runtime.local_training import (
    EVAL_BATCH_SIZE,
    batch_losses,
    loss_sum,
    mean_gradient,
    steps_per_epoch,
    train_local,
)
from regionfed.runtime.lockstep import (
    GRADIENT_CALL,
    TRAIN_CALL,
    Lockstep,
    ParkedCall,
    active_lockstep,
    why_not_batchable,
)
from regionfed.runtime.params import declared_blocks, get_flat, set_flat
from regionfed.runtime.round_checkpoint import RoundCheckpoints

RoundCallback = Callable[[dict[str, Any]], None]


def derived_seed(*parts: int) -> int:
    """A deterministic 63-bit seed from integers (independent of call order)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0]
               >> np.uint64(1))


#: why a full-data gradient (regionfed-meta, APFL, SCAFFOLD option I) is not batched on a
#: CPU: one client at a time with ``gradient_batch_size`` examples a pass took 1.0 s for the
#: default workload's 80 clients at 2 threads, against 1.6 s batched (vmap, 32 a pass)
GRADIENTS_ONE_BY_ONE = "full-data gradients, faster one client at a time on a CPU"


class ClientRunner(Protocol):
    """What a client's compute needs from whoever hosts it: the in-process
    :class:`Simulator`, or one Flower node (:mod:`regionfed.runtime.flower.node`)."""

    task: Task
    model: nn.Module
    training: TrainingConfig
    seed: int


@dataclass
class SimulatedClient:
    """A client as the strategy sees it: its data stays behind ``train``. Used in-process
    and, one per node, on Flower — the same local computation in both runtimes."""

    client_id: str
    region: str
    index: int
    num_examples: int
    data: ClientData
    prepared_train: Any
    prepared_val: Any
    runner: ClientRunner
    state: dict[str, Any] = field(default_factory=dict)
    train_calls: dict[str, int] = field(default_factory=dict)  # per shuffling stream
    #: in process: scores of parameter vectors many clients are asked about, computed once
    #: per group of clients (:class:`SharedScores`)
    shared_scores: SharedScores | None = None

    def next_generator(self, stream: str = "main", repeatable: bool = False
                       ) -> torch.Generator:
        """The shuffling generator of this client's next local training on ``stream`` (one
        per seed, client, stream and call, so results don't depend on the order clients are
        trained in, and a second model trained on the device — Ditto's personal model —
        doesn't shift the main model's batches); ``repeatable``: the stream's first, every
        time (the call is not counted)."""
        calls = 0 if repeatable else self.train_calls.get(stream, 0)
        if not repeatable:
            self.train_calls[stream] = calls + 1
        parts = [self.runner.seed, self.index, calls]
        if stream != "main":
            parts.append(zlib.crc32(stream.encode()))
        return torch.Generator().manual_seed(derived_seed(*parts))

    def train(self, start: torch.Tensor, *, epochs: int | None = None,
              extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
              stream: str = "main", trainable: torch.Tensor | None = None,
              mixing: tuple[float, torch.Tensor] | None = None,
              max_steps: int | None = None, repeatable: bool = False
              ) -> tuple[torch.Tensor, float]:
        r = self.runner
        epochs = epochs or r.training.local_epochs
        generator = self.next_generator(stream, repeatable)
        lockstep = active_lockstep()
        if lockstep is not None:  # trained with the other clients' calls, when it can be
            why_not = why_not_batchable(extra_loss)
            if why_not is None:
                return lockstep.park(TRAIN_CALL, self, start=start, epochs=epochs,
                                     generator=generator, extra_loss=extra_loss,
                                     trainable=trainable, mixing=mixing, max_steps=max_steps)
            lockstep.note_one_by_one(why_not)
        return train_local(r.task, r.model, start, self.prepared_train,
                           epochs=epochs,
                           batch_size=r.training.batch_size, optimizer=r.training.optimizer,
                           generator=generator, extra_loss=extra_loss,
                           trainable=trainable, mixing=mixing, max_steps=max_steps)

    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.runner.task, self.prepared_train,
                               self.runner.training.batch_size)

    @property
    def learning_rate(self) -> float:
        return self.runner.training.optimizer.lr

    @property
    def local_epochs(self) -> int:
        return self.runner.training.local_epochs

    def gradient(self, params: torch.Tensor) -> torch.Tensor:
        r = self.runner
        lockstep = active_lockstep()
        if lockstep is not None:
            if lockstep.gradients:
                return lockstep.park(GRADIENT_CALL, self, params=params)
            lockstep.note_one_by_one(GRADIENTS_ONE_BY_ONE)
        return mean_gradient(r.task, r.model, params, self.prepared_train,
                             r.training.gradient_batch_size)

    def validation_loss(self, params: torch.Tensor) -> tuple[float, int]:
        r = self.runner
        return loss_sum(r.task, r.model, params, self.prepared_val)

    def validation_score(self, params: torch.Tensor) -> tuple[float, int]:
        r = self.runner
        n = len(self.data.val)
        if n == 0:
            return 0.0, 0
        if self.shared_scores is not None:
            hit = self.shared_scores.lookup(self, params)
            if hit is not None:
                return hit, n
        return r.task.evaluate(set_flat(r.model, params), self.data.val)["overall"] * n, n

    def validation_leave_one_out(self, params: torch.Tensor) -> np.ndarray:
        r = self.runner
        if len(self.data.val) < 2:
            return np.zeros(0)
        predictions = r.task.predict(set_flat(r.model, params), self.data.val)
        return r.task.leave_one_out_scores(predictions, self.data.val)

    def labels(self) -> tuple[np.ndarray, int]:
        return self.runner.task.labels(self.data.train), self.runner.task.num_classes


@dataclass
class FederatedRun:
    history: list[dict[str, Any]]
    test: dict[str, Any]
    final_params: torch.Tensor
    #: per region, the final model its clients are evaluated with, where it differs from
    #: ``final_params`` (:func:`regional_models`)
    regional_params: dict[str, torch.Tensor] = field(default_factory=dict)


class SharedScores:
    """Validation scores of parameter vectors that many clients are asked about in one
    exchange or evaluation (a region's served model, the global model): registered with the
    clients that receive them (:meth:`share`), scored on the first request in one pass over
    the group's pooled validation data and split back per client
    (:meth:`Simulator.pooled_scores`), so N clients cost one prediction pass, not N. Each
    score equals :meth:`SimulatedClient.validation_score`'s up to float summation order.
    Tensors are matched by identity and held until :meth:`clear` (their ids stay unique)."""

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator
        #: id(params) → (params, its groups: client id → the group's client ids)
        self._shared: dict[int, tuple[torch.Tensor, dict[str, tuple[str, ...]]]] = {}
        self._scores: dict[tuple[int, tuple[str, ...]], dict[str, float]] = {}

    def share(self, params: torch.Tensor, client_ids: Sequence[str]) -> None:
        """``params`` goes to every client of ``client_ids`` (one group)."""
        group = tuple(client_ids)
        if len(group) < 2:
            return
        _, groups = self._shared.setdefault(id(params), (params, {}))
        groups.update(dict.fromkeys(group, group))

    def lookup(self, client: SimulatedClient, params: torch.Tensor) -> float | None:
        """The client's score sum for ``params`` if it is shared with it, else ``None``."""
        entry = self._shared.get(id(params))
        if entry is None or entry[0] is not params or client.client_id not in entry[1]:
            return None
        group = entry[1][client.client_id]
        key = (id(params), group)
        if key not in self._scores:
            clients = [self.simulator.clients[c] for c in group]
            scores = self.simulator.pooled_scores(clients, params)
            if scores is None:
                return None
            self._scores[key] = dict(zip(group, scores, strict=True))
        return self._scores[key][client.client_id]

    def clear(self) -> None:
        self._shared.clear()
        self._scores.clear()


class Simulator:
    """Runs one strategy on one federation with one seed."""

    def __init__(self, federation: Federation, task: Task, training: TrainingConfig,
                 seed: int, evaluator: FederationEvaluator | None = None) -> None:
        self.federation = federation
        self.task = task
        self.training = training
        self.seed = seed
        self.current_round = 0
        self.device = resolve_device(training.device)
        self.model = task.build_model(seed).to(self.device)
        self.evaluator = evaluator or FederationEvaluator(task, federation)
        self._pooled_val: dict[tuple[str, ...], Any] = {}
        self._region_keys = {tuple(c.client_id for c in federation.clients_in(r))
                             for r in federation.regions}
        self._member_models: list[nn.Module] = []  # scratch models for ensemble members
        #: seconds of the latest round by instruction kind, plus ``server`` (strategy code)
        self.last_round_seconds: dict[str, float] = {}
        self.view = FederationView(
            regions=tuple(federation.regions),
            client_region={c.client_id: c.region for c in federation.clients},
            num_examples={c.client_id: len(c.train) for c in federation.clients},
            parameter_groups=declared_blocks(task, self.model),
        )
        self.clients = {
            c.client_id: SimulatedClient(c.client_id, c.region, i, len(c.train), c,
                                         task.prepare(c.train, training=True),
                                         task.prepare(c.val, training=False), self)
            for i, c in enumerate(federation.clients)
        }
        self.shared_scores = SharedScores(self)
        for client in self.clients.values():
            client.shared_scores = self.shared_scores
        #: ``client_batching: processes``: the threads the run was given, and its workers
        #: (started at the first window that needs them, ended by :meth:`close`)
        self._run_threads = torch.get_num_threads()
        self._processes_mode = False
        self._processes: ClientProcesses | None = None

    def evaluate(self, strategy: Strategy, split: str) -> dict[str, Any]:
        """Every client on ``split`` with the model the strategy assigns it."""
        return self.evaluate_splits(strategy, (split,))[split]

    def evaluate_splits(self, strategy: Strategy, splits: tuple[str, ...]
                        ) -> dict[str, dict[str, Any]]:
        """:meth:`evaluate` of several splits in one pass: each client's model is asked of
        the strategy once (a model made on the client, e.g. fine-tuned before its
        evaluation, is made once for the final validation and test scores). A strategy
        that chooses on the client (:attr:`Strategy.evaluates_on_client`) may score the
        global model and what :meth:`Strategy.client_evaluation_arrays` names on each
        client's validation split: those scores come pooled (:class:`SharedScores`)."""
        if strategy.evaluates_on_client:
            for region in self.federation.regions:
                members = [c.client_id for c in self.federation.clients_in(region)]
                self.shared_scores.share(strategy.params, members)
                for arrays in strategy.client_evaluation_arrays(region).values():
                    self.shared_scores.share(arrays, members)

        def predict(client: ClientData) -> dict[str, Any]:
            params = strategy.eval_params(client.client_id, client.region,
                                          self.clients[client.client_id])
            return {split: self.predict(params, client.split(split)) for split in splits}

        try:
            return self.evaluator.evaluate_splits(splits, predict)
        finally:
            self.shared_scores.clear()

    def evaluate_with(self, params_of: Callable[[ClientData], torch.Tensor | Ensemble],
                      split: str) -> dict[str, Any]:
        """Every client on ``split`` with the parameters ``params_of(client)``."""
        return self.evaluator.evaluate(
            split, lambda c: self.predict(params_of(c), c.split(split)))

    def predict(self, params: torch.Tensor | Ensemble, dataset: Any) -> Any:
        """Predictions of one parameter vector, or the weighted vote of an :class:`Ensemble`."""
        if not isinstance(params, Ensemble):
            return self.task.predict(set_flat(self.model, params), dataset)
        while len(self._member_models) < len(params.members):
            self._member_models.append(self.task.build_model(self.seed).to(self.device))
        models = [set_flat(m, p) for m, p in zip(self._member_models[:len(params.members)],
                                                     params.members, strict=True)]
        return self.task.predict_ensemble(models, list(params.weights), dataset)

    def user_level_stage(self, strategy: Strategy, before: dict[str, Any]
                         ) -> dict[str, Any] | None:
        """The strategy's user-level stage after training
        (:meth:`Strategy.personalize_users`, e.g. RegionFed's paper Eq. 5/7): every user
        adapts on its device; per-user test Overall before (``before``: the test evaluation
        of the strategy's own models) and after (the personal models). ``None`` when the
        strategy has no such stage."""
        # one region's personal models at a time: only their predictions are kept (8,000
        # users × a full parameter vector would not fit in memory)
        predictions: dict[str, Any] = {}
        for region in self.federation.regions:
            members = self.federation.clients_in(region)
            thetas = strategy.personalize_users(
                region, {c.client_id: self.clients[c.client_id] for c in members})
            if thetas is None:
                return None
            for client in members:
                predictions[client.client_id] = self.predict(thetas[client.client_id],
                                                             client.split("test"))
            del thetas
        after = self.evaluator.evaluate("test", lambda client: predictions[client.client_id])
        users = list(before["per_client"])
        gains = [after["per_client"][u] - before["per_client"][u] for u in users]
        return {
            "overall_before": before["overall"], "overall_after": after["overall"],
            "rrs_after": after["rrs"], "worst_region_after": after["worst_region"],
            "mean_user_before": float(np.mean([before["per_client"][u] for u in users])),
            "mean_user_after": float(np.mean([after["per_client"][u] for u in users])),
            "users_improved": float(np.mean([g > 0 for g in gains])),
            "users_worse": float(np.mean([g < 0 for g in gains])),
            "per_user_after": after["per_client"],
        }

    def batching_mode(self, strategy: Strategy) -> str:
        """``batched``, ``processes (…)``, or ``sequential (<why>)``: how this strategy's
        clients are trained."""
        choice = self.training.client_batching
        if choice == "off":
            return "sequential (client_batching off)"
        if choice == "processes" and self.device.type != "cpu":
            return (f"sequential (client_batching processes is for the CPU; the model is on "
                    f"{self.device})")
        if self.device.type != "cpu" and choice != "on":
            return (f"sequential (batching on {self.device} is opt-in until measured there: "
                    "client_batching=on)")
        if choice == "auto" and torch.get_num_threads() < 2:
            return ("sequential (one torch thread: one core for this run, and batched "
                    "clients measured 4–20 % slower there; client_batching=on or processes "
                    "forces them)")
        if choice in ("auto", "processes"):
            # on a CPU: 80 default clients 1.95 s a round one by one (2 threads), 1.24–1.31 s
            # batched, 1.08–1.10 s over two processes (docs/performance.md)
            return (f"processes ({self.process_workers() + 1} processes, one torch thread "
                    "each)")
        if self.task.batch_fill_values is None:
            return f"sequential ({type(self.task).__name__} batches can't be stacked)"
        return "batched"

    @staticmethod
    def round_batching(mode: str, strategy: str, lockstep: Counter[str],
                       one_by_one: Counter[str]) -> str:
        """The round log's ``client_batching``: the run's :meth:`batching_mode`, qualified
        by the round's calls (``lockstep``: calls computed together; ``one_by_one``: calls
        a client step made that could not be batched, by reason)."""
        if not mode.startswith(("batched", "processes")) or not one_by_one:
            return mode
        reasons = ", ".join(sorted(one_by_one))
        if not lockstep:
            return f"sequential ({strategy}'s client step trains with {reasons})"
        total = sum(one_by_one.values()) + sum(lockstep.values())
        how = "batched" if mode == "batched" else "in processes"
        return (f"partly {how} ({sum(one_by_one.values())} of {total} calls one by one: "
                f"{reasons})")

    def _drive_round(self, strategy: Strategy, rnd: int
                     ) -> tuple[dict[str, Any], list[float]]:
        """Forward every exchange of the strategy's round to its clients; return its log and
        the training losses the first (training) exchange reported. Results are not kept
        beyond their exchange (thousands of clients' updates must not pile up)."""
        round_start = time.perf_counter()
        seconds: dict[str, float] = {}
        mode = self.batching_mode(strategy)
        batched_mode = mode == "batched" or mode.startswith("processes")
        self._processes_mode = mode.startswith("processes")
        calls: tuple[Counter[str], Counter[str]] = (Counter(), Counter())  # batched, one by one
        faults = round_faults(list(self.clients), self.training.dropout,
                              self.training.stragglers, self.seed, rnd)
        rejected: dict[str, str] = {}
        dim = strategy.params.numel()
        exchange = strategy.run_round(rnd)
        first: list[float] | None = None
        instructions = next(exchange)
        while True:
            start = time.perf_counter()
            self._share_instruction_params(instructions)
            shared = self._shared_validation_losses(instructions)
            results: list[ClientResult | None] = [shared.get(i) for i in range(len(instructions))]
            todo = [i for i, r in enumerate(results)
                    if r is None and instructions[i].client_id not in faults.dropped]
            # windows of at most max_batched_clients: only one window's batched results wait
            # in memory (8,000 clients × a full parameter vector would not fit otherwise)
            window = self.training.max_batched_clients if batched_mode else len(todo) or 1
            for lo in range(0, len(todo), window):
                part = todo[lo:lo + window]
                replies = self._handle_window(strategy, [instructions[i] for i in part],
                                              batched_mode, calls)
                for i, result in zip(part, replies, strict=True):
                    if screen(result, dim, rnd, rejected):
                        results[i] = result
            kinds = "+".join(sorted({ins.kind + ("-score" if ins.config.get("score") else "")
                                     for ins in instructions})) or "empty"
            seconds[kinds] = seconds.get(kinds, 0.0) + time.perf_counter() - start
            self.shared_scores.clear()
            # who reported in time: not the dropped, not the late, not the rejected
            absent = faults.absent
            results = [r for ins, r in zip(instructions, results, strict=True)
                       if r is not None and ins.client_id not in absent]
            if first is None:
                first = [r.metrics["train_loss"] for r in results if "train_loss" in r.metrics]
            try:
                instructions = exchange.send(results)
                del results
            except StopIteration as done:
                seconds["server"] = time.perf_counter() - round_start - sum(seconds.values())
                self.last_round_seconds = seconds
                log = dict(done.value)
                if (entry := faults_log(faults, rejected)) is not None:
                    log["faults"] = entry
                log["client_batching"] = self.round_batching(mode, strategy.name, *calls)
                return log, first

    def _handle_window(self, strategy: Strategy, window: list[TrainInstruction],
                       batched: bool, calls: tuple[Counter[str], Counter[str]]
                       ) -> list[ClientResult]:
        """Every instruction of the window carried out by its client (:meth:`Strategy.handle`);
        batched, the client steps run in lockstep (:mod:`.lockstep`) so that their training
        and gradient calls are computed together — unless a client appears twice (its calls
        must stay in the sequential order). ``calls`` counts the batched and the one-by-one
        calls (for the round log)."""
        steps = [partial(strategy.handle, ins, self.clients[ins.client_id]) for ins in window]
        if not batched or len(window) < 2 \
                or len({ins.client_id for ins in window}) != len(window):
            return [step() for step in steps]
        if not any(self._may_batch(ins) for ins in window):
            # nothing any step could park: no thread per step. Each lockstep step is a fresh
            # thread, and torch is slower on one (MKL's 64×64 product: 13 µs against 4.7 at
            # two threads): a full-data gradient took ~15 % longer there
            calls[1][GRADIENTS_ONE_BY_ONE] += sum(ins.kind == GRADIENT for ins in window)
            return [step() for step in steps]
        lockstep = Lockstep(self._compute_parked, gradients=self._parks_gradients)
        replies = lockstep.run(steps)
        calls[0].update(lockstep.batched)
        calls[1].update(lockstep.one_by_one)
        return replies

    def _may_batch(self, instruction: TrainInstruction) -> bool:
        """Whether carrying ``instruction`` out may make a call the lockstep batches: a
        training step's, or a full-data gradient on an accelerator (on a CPU those are
        computed one client at a time, see :data:`GRADIENTS_ONE_BY_ONE`)."""
        return instruction.kind == TRAIN or (instruction.kind == GRADIENT
                                             and self._parks_gradients)

    @property
    def _parks_gradients(self) -> bool:
        """Full-data gradients are computed together on an accelerator (batched) and in
        ``processes`` mode (spread over the processes); on a CPU otherwise one by one."""
        return self.device.type != "cpu" or self._processes_mode

    def process_workers(self) -> int:
        """Worker processes of ``client_batching: processes``: the run's torch threads
        (the cores it was given) less this process, at least one."""
        return max(1, self._run_threads - 1)

    def client_processes(self) -> ClientProcesses:
        """The worker processes of ``client_batching: processes``, started on first use (a
        run starts them with its first round; they take seconds to import torch, and until
        they are ready this process computes every call)."""
        if self._processes is None:
            self._processes = ClientProcesses(
                self.task, self.model, self.training.batch_size, self.training.optimizer,
                self.training.gradient_batch_size, self.process_workers())
        return self._processes

    def release_clients(self) -> None:
        """Drop the clients (with them every client's private state: personal models, one
        parameter vector per client). A client refers to its simulator as its runner, so a
        finished simulator and its clients form a cycle that only a full garbage collection
        frees: without this, the next seed's run of a multi-seed experiment holds two
        federations' personal models (8,000 clients × 205k parameters: 6.5 GB each)."""
        self.clients = {}

    def close(self) -> None:
        """End the client worker processes, if any were started (idempotent)."""
        if self._processes is not None:
            self._processes.close()
            self._processes = None

    def _batchable(self, instruction: TrainInstruction) -> bool:
        """Only clients with data are computed in a batch (not, e.g., an audit's canaries)."""
        return isinstance(self.clients[instruction.client_id], SimulatedClient)

    def _compute_parked(self, kind: str, calls: list[ParkedCall]) -> list[Any]:
        """The parked calls of one kind (:mod:`.lockstep`): ``train`` as
        :func:`train_local_batched`, ``gradient`` as :func:`mean_gradients_batched`; a
        single call as the sequential loop computes it."""
        if self._processes_mode:
            return self.client_processes().compute(kind, calls)
        if len(calls) == 1:
            call = calls[0]
            return [compute_call(kind, self.task, self.model, call.client.prepared_train,
                                 call.args, self.training.batch_size, self.training.optimizer,
                                 self.training.gradient_batch_size)]
        clients = [call.client for call in calls]
        if kind == GRADIENT_CALL:
            # (accelerators only, see GRADIENTS_ONE_BY_ONE) batched clients keep the
            # training batch size: K clients × 256 examples in one vmapped pass was no
            # faster (CPU, 2 threads) and took 2.5× the peak memory
            return mean_gradients_batched(
                self.task, self.model, [call.args["params"] for call in calls],
                [c.prepared_train for c in clients], self.training.batch_size,
                max_clients=self.training.max_batched_clients)
        args = [call.args for call in calls]  # train_local's own arguments
        return train_local_batched(
            self.task, self.model, [a["start"] for a in args],
            [c.prepared_train for c in clients], epochs=[a["epochs"] for a in args],
            batch_size=self.training.batch_size, optimizer=self.training.optimizer,
            generators=[a["generator"] for a in args],
            max_clients=self.training.max_batched_clients,
            options=[ClientOptions(
                proximal=None if a["extra_loss"] is None else
                (a["extra_loss"].anchor, a["extra_loss"].mu),
                trainable=a["trainable"], mixing=a["mixing"], max_steps=a["max_steps"])
                for a in args])

    def _share_instruction_params(self, instructions: list[TrainInstruction]) -> None:
        """Register every parameter tensor the exchange sends to several clients (e.g. a
        region's served model: regionfed-plus scores it on each client's validation split
        before anchoring the personal model on it)."""
        groups: dict[int, tuple[torch.Tensor, list[str]]] = {}
        for ins in instructions:
            if self._batchable(ins):
                groups.setdefault(id(ins.params), (ins.params, []))[1].append(ins.client_id)
        for params, members in groups.values():
            if len(set(members)) == len(members):
                self.shared_scores.share(params, members)

    def _pooled_validation(self, clients: list[SimulatedClient]
                           ) -> tuple[list[Any], Any]:
        """The clients' validation data concatenated: (its evaluation batches, dataset); a
        whole region's is kept (it recurs every round: the ρ search scores ~14 models a round
        on the same batches), other groups are built when asked."""
        key = tuple(c.client_id for c in clients)
        pooled = self._pooled_val.get(key)
        if pooled is None:
            prepared = self.task.concat_prepared([c.prepared_val for c in clients])
            pooled = (list(self.task.batches(prepared, EVAL_BATCH_SIZE, None)),
                      concat_splits([c.data.val for c in clients]))
            # whole regions recur every round; a Poisson sample of one (private model
            # selection) rarely does, and caching every sample would grow without bound
            if key in self._region_keys:
                self._pooled_val[key] = pooled
        return pooled

    def pooled_scores(self, clients: list[SimulatedClient], params: torch.Tensor
                      ) -> list[float] | None:
        """Each client's validation score sum (task score × examples) for ``params`` from
        one prediction pass over their pooled validation data; ``None`` if the task can't
        split predictions."""
        if type(self.task).split_predictions is Task.split_predictions:
            return None
        _, dataset = self._pooled_validation(clients)
        sizes = [len(c.data.val) for c in clients]
        predictions = self.task.split_predictions(
            self.task.predict(set_flat(self.model, params), dataset), sizes)
        return [self.task.score(pred, c.data.val)["overall"] * n if n else 0.0
                for pred, c, n in zip(predictions, clients, sizes, strict=True)]

    def _shared_validation_losses(self, instructions: list[TrainInstruction]
                                  ) -> dict[int, ClientResult]:
        """In-process shortcut for ``evaluate`` instructions that share one parameter tensor
        (RegionFed's ρ search and regional scoring send the same model to all clients of a
        region): one forward pass over those clients' pooled validation data (and, with
        ``score``, one prediction pass), split back per client. Each reply equals what
        :meth:`Strategy.handle` would return for that client, up to float summation order."""
        groups: dict[tuple[int, bool], list[int]] = {}
        for i, ins in enumerate(instructions):
            score = bool(ins.config.get("score"))
            if ins.kind == EVALUATE and set(ins.config) <= {"score", "tag"} \
                    and self._batchable(ins):
                groups.setdefault((id(ins.params), score), []).append(i)
        can_split = type(self.task).split_predictions is not Task.split_predictions
        out: dict[int, ClientResult] = {}
        for (_, score), members in groups.items():
            if len(members) < 2 or (score and not can_split):
                continue
            clients = [self.clients[instructions[i].client_id] for i in members]
            batches, _ = self._pooled_validation(clients)
            params = instructions[members[0]].params
            losses = batch_losses(self.task, self.model, params, batches)
            sizes = [self.task.num_examples(c.prepared_val) for c in clients]
            scores = self.pooled_scores(clients, params) if score else [None] * len(clients)
            offset = 0
            for i, client, n, s in zip(members, clients, sizes, scores, strict=True):
                metrics = {"loss_sum": float(losses[offset:offset + n].sum())}
                if score:
                    metrics["score_sum"] = s
                if "tag" in instructions[i].config:
                    metrics["tag"] = instructions[i].config["tag"]
                out[i] = ClientResult(client.client_id, client.region, None, n, metrics)
                offset += n
        return out

    def run(self, strategy: Strategy, on_round: RoundCallback | None = None,
            ledger: PrivacyLedger | None = None,
            checkpoints: RoundCheckpoints | None = None) -> FederatedRun:
        """Run ``training.rounds`` rounds; ``ledger`` (if given) records every round's
        releases and the round log carries the ε spent so far (PLD; ``None`` = ∞). With
        ``checkpoints``, the run continues from its last round checkpoint (if any) and
        writes one after every ``checkpoints.every`` rounds."""
        strategy.setup(get_flat(self.model), self.view,
                       np.random.default_rng(derived_seed(self.seed, 7919)))
        first_round, history, after_round = 1, None, None
        if checkpoints is not None:
            saved = checkpoints.load_into(strategy, self.clients, ledger)
            if saved is not None:
                first_round, history = saved[0] + 1, saved[1]

            def after_round(rnd: int, history: list[dict[str, Any]]) -> None:
                if checkpoints.due(rnd, self.training.rounds):
                    checkpoints.save(rnd, strategy, self.clients, ledger, history)

        def one_round(rnd: int) -> tuple[dict[str, Any], list[float]]:
            self.current_round = rnd
            return self._drive_round(strategy, rnd)

        try:
            if self.batching_mode(strategy).startswith("processes"):
                self.client_processes()  # workers import torch while the first round runs
            return drive_rounds(strategy, self.training, one_round, self.evaluate_splits,
                                on_round,
                                ledger, first_round=first_round, history=history,
                                after_round=after_round)
        finally:
            self.close()


def drive_rounds(strategy: Strategy, training: TrainingConfig,
                 one_round: Callable[[int], tuple[dict[str, Any], list[float]]],
                 evaluate: Callable[[Strategy, tuple[str, ...]], dict[str, dict[str, Any]]],
                 on_round: RoundCallback | None = None,
                 ledger: PrivacyLedger | None = None, *, first_round: int = 1,
                 history: list[dict[str, Any]] | None = None,
                 after_round: Callable[[int, list[dict[str, Any]]], None] | None = None,
                 validate_every_round: bool = True) -> FederatedRun:
    """The round loop every runtime shares (in-process, Flower): ``one_round(rnd)`` runs the
    strategy's exchanges and returns (round log, training losses); then the ledger records
    the round's releases, validation runs every ``eval_every`` rounds and at the end, and the
    final models are scored on the test splits. A resumed run starts at ``first_round`` with
    the earlier rounds' ``history``; ``after_round(rnd, history)`` runs after each round's
    log (round checkpoints).

    The ledger composes the release events the strategy's mechanism recorded in the round.
    With ``training.target_epsilon`` the loop stops before a round that could push ε past
    the target (:class:`RoundBudget`). ``validate_every_round=False`` skips the per-round
    validation of every client (a ground-truth diagnostic; the Flower runtimes skip it
    under DP, where it would send un-noised per-client scores to the server)."""
    history = [] if history is None else history
    budget = RoundBudget(training.target_epsilon, ledger, strategy)
    test: dict[str, Any] | None = None
    for rnd in range(first_round, training.rounds + 1):
        if budget.exhausted_before(rnd, history):
            break
        round_log, losses = one_round(rnd)
        log: dict[str, Any] = {"round": rnd, **round_log}
        if ledger is not None:
            budget.account(rnd, strategy.releases.drain())
            while strategy.ldp_reports:
                ledger.record_ldp(*strategy.ldp_reports.pop(0))
            for choice in strategy.unaccounted:
                ledger.note_unaccounted(choice)
            log["epsilon"] = ledger.epsilon() if ledger.is_private else None
        if losses and not strategy.dp.adds_noise:  # under DP clients do not send it; a
            log["train_loss"] = float(np.mean(losses))  # reply that does is not logged
        if validate_every_round and (rnd % training.eval_every == 0
                                     or rnd == training.rounds):
            # the last round's validation and the test scores come from one pass: the
            # strategy's models do not change between them
            splits = ("val", "test") if rnd == training.rounds else ("val",)
            scores = evaluate(strategy, splits)
            log["val"] = loggable(scores["val"])
            test = scores.get("test")
            if ledger is not None and ledger.is_private:
                log["val_note"] = GROUND_TRUTH_NOTE
        history.append(log)
        if on_round is not None:
            on_round(log)
        if after_round is not None:
            after_round(rnd, history)
    if test is None:
        test = evaluate(strategy, ("test",))["test"]
    return FederatedRun(history, test, strategy.params.clone(), regional_models(strategy))


#: the label of per-round validation scores in a DP run's log: computed by the simulator
#: from every client's true validation data, never used by the strategy
GROUND_TRUTH_NOTE = ("simulation diagnostic: un-noised validation scores of every client, "
                     "not private and not used by the method")


class RoundBudget:
    """``training.target_epsilon``: stop before a round that could exceed it.

    A round's cost is known only once its releases are recorded, so the check before round
    t assumes the costliest round so far (per release kind, the largest count any round
    had) — exact for every method whose rounds all release alike. A round that turns out
    costlier and passes the target (``regionfed-dynamic`` routing more regions to a second
    release) is an error: the run stops without publishing anything of it.
    """

    def __init__(self, target: float | None, ledger: PrivacyLedger | None,
                 strategy: Strategy) -> None:
        self.target = target
        self.ledger = ledger
        self.strategy = strategy
        #: release event → the largest number of it any round so far recorded
        self.costliest: Counter[Any] = Counter()

    def exhausted_before(self, rnd: int, history: list[dict[str, Any]]) -> bool:
        if self.target is None or self.ledger is None or not self.costliest:
            return False
        if self.ledger.would_exceed(self.target, list(self.costliest.elements())):
            if history:
                history[-1]["budget_stop"] = (f"target epsilon {self.target} reached: "
                                              f"round {rnd} would exceed it")
            return True
        return False

    def account(self, rnd: int, events: list[Any]) -> None:
        self.ledger.record_round(events)
        self.costliest |= Counter(events)  # | keeps the larger count of each event
        if self.target is not None and self.ledger.epsilon() > self.target:
            raise PrivacyBudgetError(
                f"round {rnd} of {self.strategy.name} would take epsilon to "
                f"{self.ledger.epsilon():.4g}, past training.target_epsilon {self.target} "
                f"(sigma {self.ledger.config.sigma}); nothing of it was published — raise "
                "sigma or the target")


def regional_models(strategy: Strategy, *, unchanged: bool = False
                    ) -> dict[str, torch.Tensor]:
    """Per region, the parameters its (first) client is evaluated with — the regional model
    of a region-personalized strategy — where they differ from the global model (every
    region with ``unchanged``; none for a strategy that serves every region the global
    model). Regions evaluated with an ensemble, or per client (a client-personalized
    strategy whose clients of one region get different models), are left out; a strategy
    that evaluates on the client gives the regional models its server keeps
    (:meth:`~regionfed.algorithms.base.Strategy.served_regional_params`)."""
    models: dict[str, torch.Tensor] = {}
    if strategy.evaluates_on_client:
        for region in strategy.view.regions:
            served = strategy.served_regional_params(region)
            if served is not None and (unchanged or not torch.equal(served, strategy.params)):
                models[region] = served.clone()
        return models
    if type(strategy).eval_params is Strategy.eval_params:
        return models
    for region in strategy.view.regions:
        clients = strategy.view.clients_in(region)
        params = [strategy.eval_params(c, region, None) for c in clients[:2]]
        if any(isinstance(p, Ensemble) for p in params):
            continue
        if len(params) == 2 and not torch.equal(params[0], params[1]):
            continue
        if unchanged or not torch.equal(params[0], strategy.params):
            models[region] = params[0].clone()
    return models
