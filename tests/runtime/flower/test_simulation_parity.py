"""Flower's simulation runtime drives the same strategy objects as the in-process simulator:
same configuration and seed → the same global model and the same regional α (issue 8)."""

import shutil
import tempfile

import pytest
import torch

pytest.importorskip("flwr")
pytest.importorskip("ray")

from regionfed.config import build_config  # noqa: E402
from regionfed.data.registry import build_federation  # noqa: E402
from regionfed.experiment import build_strategy  # noqa: E402
from regionfed.models.registry import build_task  # noqa: E402
from regionfed.runtime.simulator import Simulator  # noqa: E402

CONFIG = {"data": {"num_queries": 480, "num_regions": 2, "clients_per_region": 2,
                   "vocab_size": 1000},
          "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
          # SGD: AdamW's normalised steps amplify float summation-order differences (each
          # node numbers its own word forms) to ~2e-4 in 2 rounds; SGD keeps them at ~1e-7
          "training": {"rounds": 2, "eval_every": 1, "client_batching": "off",
                       "optimizer": {"name": "sgd", "lr": 0.1}}}


@pytest.fixture(autouse=True)
def flower_env(monkeypatch):
    """Keep Flower and Ray state in a short tmp folder (Ray's socket paths must stay under
    107 bytes) and switch off their network calls."""
    home = tempfile.mkdtemp(prefix="rf-", dir="/tmp")
    for key, value in {"FLWR_HOME": home, "FLWR_TELEMETRY_ENABLED": "0",
                       "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0",
                       "RAY_TMPDIR": home, "UV_CACHE_DIR": home,
                       "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}.items():
        monkeypatch.setenv(key, value)
    yield
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("method", ["fedavg", "regionfed-grad"])
def test_flower_simulation_matches_the_in_process_simulator(method):
    from flwr.simulation import run_simulation

    from regionfed.runtime.flower.app import make_apps

    config = build_config({**CONFIG, "methods": [method]})
    captured = {}

    def keep(run, strategy, ledger):
        captured["run"], captured["strategy"] = run, strategy

    server, client = make_apps(config.to_yaml(), method, 0, on_result=keep)
    run_simulation(server_app=server, client_app=client, num_supernodes=4,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    federation = build_federation(config.dataset, config.data)
    task = build_task(config.model, federation)
    strategy = build_strategy(method, config)
    local = Simulator(federation, task, config.training, 0).run(strategy)
    flower = captured["run"]
    assert torch.allclose(flower.final_params, local.final_params, atol=1e-5)
    assert flower.test["overall"] == pytest.approx(local.test["overall"], abs=1e-3)
    assert set(flower.test["per_region"]) == set(federation.regions)
    if method == "regionfed-grad":
        for region in federation.regions:
            assert captured["strategy"].alpha[region] == pytest.approx(strategy.alpha[region],
                                                                       abs=1e-6)


def test_cli_runs_a_method_on_the_flower_simulation_runtime(tmp_path, capsys):
    import json

    from regionfed.cli import main

    out = tmp_path / "run"
    code = main(["run", "--runtime", "flower-sim", "--methods", "majority,regionfed-grad",
                 "--num-queries", "480", "--regions", "2", "--clients-per-region", "2",
                 "--rounds", "1", "--set", "data.vocab_size=1000", "--set", "model.dim=32",
                 "--set", "model.heads=2", "--set", "model.ngram_buckets=512", "--quiet",
                 "--out", str(out)])
    assert code == 0 and "| regionfed-grad" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["runtime"] == "flower-sim"
    assert 0.0 <= results["methods"]["regionfed-grad"]["overall"] <= 1.0
    rounds = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("client_batching") == "flower" for r in rounds)


def test_missing_flower_is_a_clear_error(monkeypatch):
    import builtins

    from regionfed.errors import ConfigError
    from regionfed.runtime.flower import require_flwr

    real_import = builtins.__import__

    def no_flwr(name, *args, **kwargs):
        if name == "flwr" or name.startswith("flwr."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_flwr)
    with pytest.raises(ConfigError, match=r"regionfed\[flower\]"):
        require_flwr()
