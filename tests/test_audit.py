"""The canary audit end to end (in-process): it detects a mechanism without noise and a
deliberately broken one."""

import pytest

import regionfed.privacy.mechanism as mechanism
from regionfed.audit import AuditSettings, run_audit
from regionfed.config import build_config
from regionfed.errors import ConfigError


def _config(sigma, methods=("fedavg",), **dp):
    return build_config({
        "methods": list(methods), "dataset": "esci-synth",
        "data": {"num_queries": 600, "num_regions": 2, "clients_per_region": 3,
                 "vocab_size": 1000},
        "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
        "training": {"rounds": 3, "sample_rate": 0.5, "eval_every": 3},
        "dp": {"mode": "user", "sigma": sigma, "clip": 1.0, **dp}})


def test_a_mechanism_without_noise_is_detected():
    """σ = 0 (clipping only): the canaries' cosines stand far above the held-out ones."""
    record = run_audit(_config(0.0), AuditSettings(canaries=40))["methods"]["fedavg"]
    assert record["epsilon_accounted"] is None  # ε = ∞
    assert record["epsilon_estimate_infinite"] or record["epsilon_estimate"] >= 3
    assert record["epsilon_lower_bound"] > 0.5
    assert set(record["per_region"]) == {"region_00", "region_01"}


def test_noise_scaled_down_behind_the_ledgers_back_is_caught(monkeypatch):
    """The ledger still says σ = 4, the code adds 1 % of that noise: the estimate exceeds
    the accounted ε."""
    original = mechanism._gaussian
    monkeypatch.setattr(mechanism, "_gaussian",
                        lambda like, std, generator: original(like, std * 0.01, generator))
    record = run_audit(_config(4.0), AuditSettings(canaries=40))["methods"]["fedavg"]
    assert record["epsilon_estimate_infinite"] or \
        record["epsilon_estimate"] > record["epsilon_accounted"]
    assert record["epsilon_lower_bound"] > 0


@pytest.mark.parametrize(("settings", "config", "message"), [
    (AuditSettings(canaries=0), _config(1.0), "--canaries"),
    (AuditSettings(confidence=1.0), _config(1.0), "--confidence"),
    (AuditSettings(region="mars"), _config(1.0), "unknown region"),
    (AuditSettings(), _config(1.0, mode="off"), "needs DP settings"),
    (AuditSettings(), _config(1.0, methods=("majority",)), "not a federated method")])
def test_bad_audit_settings_are_config_errors(settings, config, message):
    with pytest.raises(ConfigError, match=message):
        run_audit(config, settings)


def test_the_audit_command_prints_the_record_and_writes_its_report(tmp_path, capsys):
    import json

    from test_cli import SMALL, run_cli

    out = tmp_path / "audit"
    code, stdout, _ = run_cli(capsys, "audit", *SMALL, "--methods", "fedavg",
                              "--rounds", "2", "--dp-sigma", "0", "--dp-clip", "1",
                              "--canaries", "20", "--json", "--out", str(out))
    assert code == 0
    record = json.loads(stdout)["methods"]["fedavg"]
    assert {"epsilon_accounted", "epsilon_estimate", "epsilon_lower_bound", "confidence",
            "canaries", "per_region"} <= set(record)
    assert record["canaries"] == 20 and "scores_inserted" not in record
    assert {"audit.json", "audit.md", "audit.png"} <= {p.name for p in out.iterdir()}
    assert "| fedavg | global | ∞ |" in (out / "audit.md").read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--canaries", "0", "--dp-sigma", "1"], "--canaries"),
    (["--dp-mode", "off"], "needs DP settings"),
    (["--methods", "fedavg,nope", "--dp-sigma", "1"], "nope")])
def test_bad_audit_input_is_one_error_line(args, message, capsys):
    from test_cli import SMALL, run_cli

    code, _, err = run_cli(capsys, "audit", *SMALL, *args)
    assert code == 2 and err.startswith("error:") and message in err
    assert len(err.strip().splitlines()) == 1
