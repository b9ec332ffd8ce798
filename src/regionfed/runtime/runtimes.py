"""One seam for every runtime: ``Runtime.run(method, seed)`` trains one federated method
with one seed and returns the run, its test scores and its privacy ledger record.

Each runtime builds the strategy and the privacy ledger where the server runs — in this
process (:class:`InProcessRuntime`: the simulator), in a Flower ServerApp
(:class:`~regionfed.runtime.flower.simulation.FlowerSimRuntime`, Ray; and
:class:`~regionfed.runtime.flower.deployment.FlowerDeploymentRuntime`, a SuperLink) — and the
strategy's own hooks do the rest (evaluation diagnostics, the user-level stage).
``experiment.py`` only picks one (:func:`runtime_for`) and keeps the run folders.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from regionfed.runtime.simulator import FederatedRun

OnRound = Callable[[dict[str, Any]], None]


@dataclass
class RuntimeRun:
    """What a runtime hands back for one method × seed."""

    run: FederatedRun
    #: the test scores (plus ``diagnostics`` / ``user_personalization`` where computed)
    test: dict[str, Any]
    #: the privacy ledger's record (:meth:`PrivacyLedger.to_dict`)
    privacy: dict[str, Any]


class Runtime(ABC):
    """Trains federated methods; one implementation per runtime (module docstring)."""

    name: str

    @abstractmethod
    def run(self, method: str, seed: int, on_round: OnRound | None = None) -> RuntimeRun:
        """Train ``method`` with ``seed``; ``on_round`` gets each round's log."""


class InProcessRuntime(Runtime):
    """The in-process simulator (:class:`~regionfed.runtime.simulator.Simulator`), resuming
    from and writing ``checkpoints`` (round checkpoints) when given."""

    name = "inprocess"

    def __init__(self, config: Any, federation: Any, task: Any, evaluator: Any,
                 checkpoints: Any = None) -> None:
        self.config, self.federation, self.task = config, federation, task
        self.evaluator, self.checkpoints = evaluator, checkpoints

    def run(self, method: str, seed: int, on_round: OnRound | None = None) -> RuntimeRun:
        from regionfed.algorithms.registry import build_strategy
        from regionfed.privacy.ledger import PrivacyLedger
        from regionfed.runtime.simulator import Simulator

        strategy = build_strategy(method, self.config)
        ledger = PrivacyLedger(self.config.dp, self.config.training.sample_rate)
        simulator = Simulator(self.federation, self.task, self.config.training, seed,
                              self.evaluator)
        run = simulator.run(strategy, on_round=on_round, ledger=ledger,
                            checkpoints=self.checkpoints)
        test = run.test
        if diagnostics := strategy.evaluation_diagnostics():
            test = {**test, "diagnostics": diagnostics}
        if (stage := simulator.user_level_stage(strategy, test)) is not None:
            test = {**test, "user_personalization": stage}
        simulator.release_clients()
        return RuntimeRun(run, test, ledger.to_dict())


def runtime_for(config: Any, federation: Any, task: Any, evaluator: Any,
                checkpoints: Any = None) -> Runtime:
    """The runtime ``config.runtime`` names (round checkpoints: in-process only)."""
    if config.runtime == "flower-sim":
        from regionfed.runtime.flower.simulation import FlowerSimRuntime

        return FlowerSimRuntime(config, len(federation.clients))
    if config.runtime == "flower":
        from regionfed.runtime.flower.deployment import FlowerDeploymentRuntime

        return FlowerDeploymentRuntime(config)
    return InProcessRuntime(config, federation, task, evaluator, checkpoints)
