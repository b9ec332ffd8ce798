"""The one runtime seam (issue 29): ``runtime_for(config, …)`` picks the runtime the
configuration names, and every runtime answers ``run(method, seed, on_round)`` with the run,
its test scores and its privacy record. The Flower runtimes behind it are exercised end to
end in tests/runtime/flower/."""

import pytest

from regionfed.config import build_config
from regionfed.runtime.evaluation import FederationEvaluator
from regionfed.runtime.runtimes import InProcessRuntime, Runtime, RuntimeRun, runtime_for

SMALL = {"training": {"rounds": 2, "eval_every": 1}}


def test_the_configured_runtime_is_picked(tiny_federation, tiny_task):
    pytest.importorskip("flwr")
    from regionfed.runtime.flower.deployment import FlowerDeploymentRuntime
    from regionfed.runtime.flower.simulation import FlowerSimRuntime

    evaluator = FederationEvaluator(tiny_task, tiny_federation)
    picked = {name: runtime_for(build_config({"runtime": name, "flower": {
        "superlink": "127.0.0.1:9093"}}), tiny_federation, tiny_task, evaluator)
        for name in ("inprocess", "flower-sim", "flower")}
    assert isinstance(picked["inprocess"], InProcessRuntime)
    assert isinstance(picked["flower-sim"], FlowerSimRuntime)
    assert picked["flower-sim"].num_clients == len(tiny_federation.clients)
    assert isinstance(picked["flower"], FlowerDeploymentRuntime)
    assert all(isinstance(r, Runtime) and r.name == name for name, r in picked.items())


def test_the_in_process_runtime_trains_and_accounts_one_method(tiny_federation, tiny_task):
    config = build_config({**SMALL, "dp": {"mode": "user", "sigma": 1.0, "clip": 1.0}})
    runtime = runtime_for(config, tiny_federation, tiny_task,
                          FederationEvaluator(tiny_task, tiny_federation))
    rounds = []
    trained = runtime.run("fedavg", 0, rounds.append)
    assert isinstance(trained, RuntimeRun)
    assert [r["round"] for r in rounds] == [1, 2] == [r["round"] for r in trained.run.history]
    assert 0.0 < trained.test["overall"] <= 1.0
    assert trained.test is trained.run.test  # fedavg has no diagnostics or user stage
    assert trained.privacy["rounds"] == 2 and not trained.privacy["epsilon_infinite"]


def test_strategy_hooks_reach_the_runs_test_record(tiny_federation, tiny_task):
    """regionfed-plus's on-device choices (its evaluation diagnostics) come back with the
    test scores, through the seam."""
    runtime = InProcessRuntime(build_config(SMALL), tiny_federation, tiny_task,
                               FederationEvaluator(tiny_task, tiny_federation))
    trained = runtime.run("regionfed-plus", 0)
    choices = trained.test["diagnostics"]["choices"]
    assert set(choices) == set(tiny_federation.regions)
    assert sum(sum(c.values()) for c in choices.values()) == len(tiny_federation.clients)


def test_a_finished_run_frees_its_clients_private_state_without_a_garbage_collection(
        tiny_federation, tiny_task, monkeypatch):
    """A client refers to its simulator: a finished simulator and its clients are a cycle
    that would keep every personal model of one seed alive into the next seed's run."""
    import gc
    import weakref

    from regionfed.runtime import simulator as simulator_module

    clients = []
    init = simulator_module.Simulator.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        clients.extend(weakref.ref(c) for c in self.clients.values())

    monkeypatch.setattr(simulator_module.Simulator, "__init__", recording_init)
    runtime = runtime_for(build_config(SMALL), tiny_federation, tiny_task,
                          FederationEvaluator(tiny_task, tiny_federation))
    gc.disable()
    try:
        runtime.run("ditto", 0)  # a personal model on every client
        assert clients and all(ref() is None for ref in clients)
    finally:
        gc.enable()
