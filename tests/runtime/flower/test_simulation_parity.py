"""Flower's simulation runtime drives the same strategy objects as the in-process simulator:
same configuration and seed → the same global model and the same regional α (issue 8)."""

import shutil
import tempfile

import pytest
import torch

pytest.importorskip("flwr")
pytest.importorskip("ray")

from regionfed.config import build_config  # noqa: E402

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


def test_an_audit_on_flower_sim_matches_the_in_process_audit():
    """fedavg and regionfed-plus through ``run_flower_simulation`` with an audit's canaries,
    each one more SuperNode running the ClientApp (RegionFed: through the CLI below): the
    same global model, canary scores and test score as in process, and no canary is scored;
    plus's regional models (kept by its server, chosen among on the clients' nodes) score
    the same too."""
    from regionfed.audit import AuditSettings, run_audit

    config = build_config({**CONFIG, "methods": ["fedavg", "regionfed-plus"],
                           "training": {**CONFIG["training"], "sample_rate": 0.5},
                           "dp": {"mode": "user", "sigma": 0.0, "clip": 1.0,
                                  "noise_seed": 0},  # σ = 0: nothing random but sampling
                           # the scale's search is 13 more exchanges a round on Flower
                           "regionfed_plus": {"validation_scale": False}})
    settings = AuditSettings(canaries=12)
    records = {runtime: run_audit(config.model_copy(update={"runtime": runtime}), settings)
               for runtime in ("flower-sim", "inprocess")}
    flower, local = (records[r]["methods"]["fedavg"] for r in ("flower-sim", "inprocess"))
    assert records["flower-sim"]["runtime"] == "flower-sim"
    assert flower["inserted"] == local["inserted"] > 0
    for key in ("scores_inserted", "scores_held_out"):
        assert flower[key] == pytest.approx(local[key], abs=1e-4)
    assert flower["test_overall"] == pytest.approx(local["test_overall"], abs=1e-3)
    assert flower["epsilon_estimate_point"] == "inf" or flower["epsilon_estimate_point"] > 3
    flower, local = (records[r]["methods"]["regionfed-plus"] for r in ("flower-sim", "inprocess"))
    assert set(flower["per_region"]) == set(local["per_region"]) == {"region_00", "region_01"}
    for region, entry in flower["per_region"].items():
        assert entry["scores_inserted"] == pytest.approx(
            local["per_region"][region]["scores_inserted"], abs=1e-4)
    assert flower["test_overall"] == pytest.approx(local["test_overall"], abs=1e-3)


def test_the_cli_runs_regionfed_on_flower_sim_like_in_process(tmp_path, capsys):
    """``regionfed run --runtime flower-sim`` end to end, and the same run in process: the
    same global model, regional α and scores (one Ray simulation serves both checks)."""
    import json

    from safetensors.torch import load_file

    from regionfed.cli import main

    training = CONFIG["training"]
    small = ["--num-queries", "480", "--regions", "2", "--clients-per-region", "2",
             "--rounds", str(training["rounds"]), "--eval-every", "1",
             "--set", "data.vocab_size=1000", "--set", "model.dim=32", "--set",
             "model.heads=2", "--set", "model.ngram_buckets=512", "--set",
             "training.client_batching=off", "--set", "training.optimizer.name=sgd",
             "--set", f"training.optimizer.lr={training['optimizer']['lr']}", "--quiet"]
    outs = {}
    for runtime in ("flower-sim", "inprocess"):
        outs[runtime] = tmp_path / runtime
        code = main(["run", "--runtime", runtime, "--methods", "majority,regionfed-grad",
                     *small, "--out", str(outs[runtime])])
        assert code == 0 and "| regionfed-grad" in capsys.readouterr().out

    def outputs(out):
        results = json.loads((out / "results.json").read_text())
        rounds = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        model = load_file(str(out / "checkpoints" / "regionfed-grad-seed0.safetensors"))
        return results, [r for r in rounds if r["method"] == "regionfed-grad"], model

    (results, rounds, model), (local, local_rounds, local_model) = map(outputs, outs.values())
    assert results["config"]["runtime"] == "flower-sim"
    assert all(r["client_batching"] == "flower" for r in rounds)
    assert set(model) == set(local_model)
    for name, tensor in model.items():
        assert torch.allclose(tensor, local_model[name], atol=1e-5), name
    assert results["methods"]["regionfed-grad"]["overall"] == pytest.approx(
        local["methods"]["regionfed-grad"]["overall"], abs=1e-3)
    assert len(rounds) == len(local_rounds) == training["rounds"]
    for mine, theirs in zip(rounds, local_rounds, strict=True):
        assert mine["alpha"] == pytest.approx(theirs["alpha"], abs=1e-6)


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
