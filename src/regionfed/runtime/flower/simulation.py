"""``--runtime flower-sim``: one method × seed on Flower's simulation runtime (Ray backend),
one SuperNode per client (partition-id = the client's federation index)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from regionfed.algorithms.base import Strategy
from regionfed.runtime.canaries import CanaryLayout
from regionfed.runtime.flower import flower_state, require_flwr
from regionfed.runtime.runtimes import OnRound, Runtime, RuntimeRun
from regionfed.runtime.simulator import FederatedRun


def run_flower_simulation(config: Any, method: str, seed: int, num_clients: int,
                          on_round: Callable[[dict[str, Any]], None] | None = None,
                          canaries: CanaryLayout | None = None
                          ) -> tuple[FederatedRun, Strategy, Any]:
    """Run ``method`` with ``seed`` on ``num_clients`` simulated SuperNodes (plus one per
    inserted canary of an audit's ``canaries``); returns the run, the server's strategy
    object and its privacy ledger."""
    require_flwr()
    from flwr.simulation import run_simulation

    from regionfed.runtime.flower.app import make_apps

    captured: dict[str, Any] = {}

    def keep(run: FederatedRun, strategy: Strategy, ledger: Any) -> None:
        captured.update(run=run, strategy=strategy, ledger=ledger)

    server, client = make_apps(config.to_yaml(), method, seed,
                               canaries=canaries.to_json() if canaries else None,
                               on_result=keep, on_round=on_round)
    nodes = num_clients + (len(canaries.indices) if canaries else 0)
    with flower_state():
        run_simulation(server_app=server, client_app=client, num_supernodes=nodes,
                       backend_config={"client_resources": {"num_cpus": 1,
                                                            "num_gpus": 0.0}})
    if "run" not in captured:
        raise RuntimeError("the Flower simulation ended without a result (see its log)")
    return captured["run"], captured["strategy"], captured["ledger"]


class FlowerSimRuntime(Runtime):
    """``--runtime flower-sim`` behind the one runtime seam: one SuperNode per client."""

    name = "flower-sim"

    def __init__(self, config: Any, num_clients: int) -> None:
        self.config, self.num_clients = config, num_clients

    def run(self, method: str, seed: int, on_round: OnRound | None = None) -> RuntimeRun:
        run, _, ledger = run_flower_simulation(self.config, method, seed, self.num_clients,
                                               on_round)
        return RuntimeRun(run, run.test, ledger.to_dict())
