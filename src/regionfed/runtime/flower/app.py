"""The Flower ServerApp and ClientApp of regionfed.

Both read three run-config values (``regionfed-config``: the run's YAML, ``method``,
``seed``); :func:`make_apps` bakes defaults in for the simulation runtime, which ignores an
app's run config (flwr 1.42). ``server_app`` / ``client_app`` at module level are what
``flwr run`` loads on the Deployment Engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from regionfed.algorithms.base import Strategy
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.flower import require_flwr
from regionfed.runtime.flower.node import (
    CANARIES_KEY,
    build_node,
    evaluation_counts,
    handle_instruction,
    handle_secure_instruction,
    load_run_config,
    run_settings,
)
from regionfed.runtime.flower.server import FlowerDriver, evaluation_state, params_tensor
from regionfed.runtime.simulator import FederatedRun


def make_client_app(defaults: dict[str, Any] | None = None):  # -> flwr.clientapp.ClientApp
    require_flwr()
    from flwr.app import ConfigRecord, Message, RecordDict
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def node_of(context: Any):
        return build_node({**(defaults or {}), **context.run_config}, context.node_config)

    @app.query()
    def describe(message: Message, context: Any) -> Message:
        node = node_of(context)
        client = node.client
        info = ConfigRecord({"client_id": client.client_id, "region": client.region,
                             "index": client.index, "num_examples": client.num_examples,
                             "canary": node.is_canary})
        return Message(RecordDict({"client": info}), reply_to=message)

    @app.train("regionfed")
    def instruct(message: Message, context: Any) -> Message:
        content = handle_instruction(node_of(context), message.content, context.state)
        return Message(content, reply_to=message)

    @app.train(mods=[secaggplus_mod])
    def secure(message: Message, context: Any) -> Message:
        """The training step of a SecAgg+ exchange (flwr's mod runs the protocol's other
        stages itself and masks what this returns)."""
        content = handle_secure_instruction(node_of(context), message.content, context.state)
        return Message(content, reply_to=message)

    @app.evaluate("regionfed")
    def score(message: Message, context: Any) -> Message:
        meta = message.content["meta"]
        counts = evaluation_counts(node_of(context), params_tensor(message.content),
                                   str(meta["split"]), bool(meta.get("on_client", False)),
                                   context.state, evaluation_state(message.content))
        return Message(RecordDict({"counts": ConfigRecord(
            {k: float(v) for k, v in counts.items()})}), reply_to=message)

    return app


def make_server_app(defaults: dict[str, Any] | None = None,
                    on_result: Callable[[FederatedRun, Strategy, PrivacyLedger], None]
                    | None = None,
                    on_round: Callable[[dict[str, Any]], None] | None = None):
    """A ServerApp that runs the configured method with :class:`FlowerDriver`."""
    require_flwr()
    from flwr.serverapp import ServerApp

    from regionfed.algorithms.registry import build_strategy
    from regionfed.data.registry import build_federation
    from regionfed.models.registry import build_task
    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        import flwr.superlink.grid.http_grid as http_grid

        from regionfed.runtime.flower.deployment import (
            OUT_KEY,
            REPLY_TIMEOUT_KEY,
            save_result,
        )
        from regionfed.runtime.flower.polling import quick_object_pulls

        quick_object_pulls(http_grid, "pull_objects")  # replies' objects come in 10s of ms
        settings = {**(defaults or {}), **context.run_config}
        text, method, seed = run_settings(settings)
        config = load_run_config(text)
        # the server builds the public structure of the benchmark (regions, word list) to
        # make the same initial model as every node; client data stays on the nodes
        federation = build_federation(config.dataset, config.data)
        task = build_task(config.model, federation)
        driver = FlowerDriver(grid, config, task, federation.regions, seed,
                              timeout=float(settings.get(REPLY_TIMEOUT_KEY, 600.0)))
        strategy = build_strategy(method, config)
        ledger = PrivacyLedger(config.dp, config.training.sample_rate)
        run = driver.run(strategy, on_round=on_round or log_round, ledger=ledger)
        if settings.get(OUT_KEY):
            save_result(settings[OUT_KEY], run, ledger)
        if on_result is not None:
            on_result(run, strategy, ledger)

    return app


def log_round(entry: dict[str, Any]) -> None:
    """One line per round in the ServerApp's log (what ``flwr run --stream`` shows), with
    the Unix time the round ended (the stream delivers lines in batches)."""
    import time
    from logging import INFO

    from flwr.common.logger import log

    val = entry.get("val", {}).get("overall")
    log(INFO, "regionfed round %s: train loss %s, validation overall %s (at %.3f)",
        entry["round"], entry.get("train_loss"), "-" if val is None else f"{val:.4f}",
        time.time())


def make_apps(config_yaml: str, method: str, seed: int, canaries: str | None = None,
              **server_options: Any):
    """(ServerApp, ClientApp) with the run's settings baked in (simulation runtime);
    ``canaries``: an audit's :class:`~regionfed.runtime.canaries.CanaryLayout` as JSON."""
    defaults: dict[str, Any] = {"regionfed-config": config_yaml, "method": method,
                                "seed": seed}
    if canaries:
        defaults[CANARIES_KEY] = canaries
    return make_server_app(defaults, **server_options), make_client_app(defaults)


try:  # what `flwr run` loads (needs flwr; importing this module without it stays possible)
    server_app = make_server_app()
    client_app = make_client_app()
except Exception:  # noqa: BLE001 - flwr missing: the CLI reports it when a Flower runtime is asked for
    server_app = client_app = None
