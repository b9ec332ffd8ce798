"""``--runtime flower-sim``: one method × seed on Flower's simulation runtime (Ray backend),
one SuperNode per client (partition-id = the client's federation index)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from regionfed.algorithms.base import Strategy
from regionfed.runtime.flower import require_flwr
from regionfed.runtime.simulator import FederatedRun

#: Flower and Ray state out of $HOME, no telemetry or update checks (FLOWER_NOTES)
QUIET_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
             "RAY_USAGE_STATS_ENABLED": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}


def flower_environment() -> None:
    """Set Flower's and Ray's state folders and switch off their network calls (keeps
    values a user already set)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    if "FLWR_HOME" not in os.environ or "RAY_TMPDIR" not in os.environ:
        # short: Ray's unix socket paths below it must stay under 107 bytes
        home = tempfile.mkdtemp(prefix="rf-flower-", dir="/tmp")
        for key in ("FLWR_HOME", "RAY_TMPDIR", "UV_CACHE_DIR"):
            os.environ.setdefault(key, home)


def run_flower_simulation(config: Any, method: str, seed: int, num_clients: int,
                          on_round: Callable[[dict[str, Any]], None] | None = None
                          ) -> tuple[FederatedRun, Strategy, Any]:
    """Run ``method`` with ``seed`` on ``num_clients`` simulated SuperNodes; returns the run,
    the server's strategy object and its privacy ledger."""
    require_flwr()
    flower_environment()
    from flwr.simulation import run_simulation

    from regionfed.runtime.flower.app import make_apps

    captured: dict[str, Any] = {}

    def keep(run: FederatedRun, strategy: Strategy, ledger: Any) -> None:
        captured.update(run=run, strategy=strategy, ledger=ledger)

    server, client = make_apps(config.to_yaml(), method, seed, on_result=keep,
                               on_round=on_round)
    run_simulation(server_app=server, client_app=client, num_supernodes=num_clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if "run" not in captured:
        raise RuntimeError("the Flower simulation ended without a result (see its log)")
    return captured["run"], captured["strategy"], captured["ledger"]
