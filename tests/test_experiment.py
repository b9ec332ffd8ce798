import json

import pytest
from test_cli import SMALL, run_cli

from regionfed.privacy.ledger import epsilon_pld


def test_regionfed_run_with_dp_records_privacy_and_regional_signals(tmp_path, capsys):
    out = tmp_path / "dp"
    code, stdout, _ = run_cli(capsys, "run", *SMALL, "--methods",
                              "fedavg,regionfed-grad,regionfed-meta,local", "--rounds", "2",
                              "--dp-sigma", "1.0", "--dp-clip", "1.0", "--sample-rate", "0.5",
                              "--out", str(out))
    assert code == 0
    privacy = json.loads((out / "privacy.json").read_text())["methods"]
    assert privacy["fedavg"]["mode"] == "user" and privacy["fedavg"]["rounds"] == 2
    # ε straight from dp-accounting: fedavg releases once a round; grad's regional update
    # and its private ρ selection (same σ and q) twice; meta adds its meta gradient
    assert privacy["fedavg"]["epsilon_pld"] == pytest.approx(epsilon_pld(1.0, 0.5, 2, 1e-5))
    assert privacy["regionfed-grad"]["epsilon_pld"] == pytest.approx(
        epsilon_pld(1.0, 0.5, 4, 1e-5))
    assert privacy["regionfed-meta"]["epsilon_pld"] == pytest.approx(
        epsilon_pld(1.0, 0.5, 6, 1e-5))
    assert privacy["local"]["epsilon_pld"] == 0.0  # nothing leaves the device
    assert all(p["unaccounted"] == [] and p["noise"] in ("OS entropy", "none")
               for p in privacy.values())
    assert "one user's" in privacy["fedavg"]["protects"]
    results = json.loads((out / "results.json").read_text())["methods"]
    assert results["regionfed-grad"]["epsilon"] == pytest.approx(
        privacy["regionfed-grad"]["epsilon_pld"])
    assert "∞" not in stdout.split("fedavg")[1].splitlines()[0]
    user = results["regionfed-grad"]["user_personalization"]
    assert {"overall_before", "overall_after", "mean_user_before", "mean_user_after",
            "users_improved"} <= set(user)
    # only a strategy with a user-level stage (the personalize_users hook) reports one
    assert "user_personalization" not in results["fedavg"]
    assert "user_personalization" not in results["local"]
    rounds = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    grad = [r for r in rounds if r["method"] == "regionfed-grad"]
    assert len(grad) == 2
    for r in grad:
        assert set(r["alpha"]) == set(r["rho"]) == set(r["conflict"]) == {"region_00",
                                                                           "region_01"}
        assert r["strategy"] == {"region_00": "grad", "region_01": "grad"}
        # under DP the log carries the noisy selection scores, never un-noised statistics
        assert set(r["val_loss_gain_noisy"]) == {"region_00", "region_01"}
        assert "val_accuracy" not in r and "train_loss" not in r
        assert r["epsilon"] > 0


def test_target_epsilon_stops_before_the_budget(tmp_path, capsys):
    out = tmp_path / "budget"
    target = epsilon_pld(1.0, 0.5, 3, 1e-5) + 1e-6  # exactly 3 rounds fit
    code, _, _ = run_cli(capsys, "run", *SMALL, "--methods", "fedavg", "--rounds", "10",
                         "--dp-sigma", "1.0", "--sample-rate", "0.5", "--target-epsilon",
                         str(target), "--out", str(out))
    assert code == 0
    privacy = json.loads((out / "privacy.json").read_text())["methods"]["fedavg"]
    assert privacy["rounds"] == 3 and privacy["epsilon_pld"] <= target
    code, _, err = run_cli(capsys, "run", *SMALL, "--methods", "fedavg",
                           "--target-epsilon", "1.0", "--out", str(tmp_path / "a"))
    assert code == 2 and "needs differential privacy" in err
    code, _, err = run_cli(capsys, "run", *SMALL, "--methods", "fedavg", "--dp-sigma", "0.3",
                           "--target-epsilon", "0.01", "--out", str(tmp_path / "b"))
    assert code == 2 and "exceeds target epsilon" in err
    # refused before anything is written: no half-made run folders
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_scaffold_epsilon_is_one_joint_release_per_round(tmp_path, capsys):
    """SCAFFOLD's Δy and Δc come from one Poisson sample: per round ONE subsampled Gaussian
    with noise multiplier σ/√2 (their joint sensitivity is √2·C), checked against
    dp-accounting directly (σ = 4, C = 1, q = 0.1, T = 50, δ = 1e-5: ε ≈ 1.045, where two
    independent releases at σ would claim 0.983)."""
    import math

    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    out = tmp_path / "scaffold"
    code, _, _ = run_cli(capsys, "run", *SMALL, "--methods", "scaffold", "--rounds", "50",
                         "--clients-per-region", "10", "--eval-every", "50",
                         "--dp-sigma", "4", "--dp-clip", "1", "--sample-rate", "0.1",
                         "--out", str(out))
    assert code == 0
    privacy = json.loads((out / "privacy.json").read_text())["methods"]["scaffold"]
    accountant = PLDAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        0.1, dp_accounting.GaussianDpEvent(4 / math.sqrt(2))), 50))
    expected = accountant.get_epsilon(1e-5)
    assert privacy["epsilon_pld"] == pytest.approx(expected, rel=0.005)
    assert privacy["epsilon_pld"] > epsilon_pld(4.0, 0.1, 100, 1e-5) * 1.03
    assert privacy["events"] == [{
        "what": "model update + control variate (joint)", "event": "PoissonSampled(Gaussian)",
        "sample_rate": 0.1, "noise_multiplier": pytest.approx(4 / math.sqrt(2)),
        "vectors": 2, "count": 50, "regions": 2}]


def test_deterministic_test_noise_is_labelled_wherever_epsilon_appears(tmp_path, capsys):
    out = tmp_path / "seeded"
    code, stdout, _ = run_cli(capsys, "run", *SMALL, "--methods", "fedavg", "--dp-sigma", "1",
                              "--sample-rate", "0.5", "--set", "dp.noise_seed=4",
                              "--out", str(out))
    assert code == 0
    record = json.loads((out / "privacy.json").read_text())["methods"]["fedavg"]
    assert record["noise"].startswith("deterministic noise — not private")
    assert record["protects"].startswith("nothing yet")
    summary = json.loads((out / "results.json").read_text())["methods"]["fedavg"]
    assert summary["epsilon_note"] == "deterministic noise — not private"
    assert "deterministic noise — not private" in stdout  # the printed table
    from regionfed.report import write_report

    assert "deterministic noise — not private" in write_report(out)


@pytest.mark.parametrize(("setting", "message"), [
    ("dp.noise_seed=-1", "dp.noise_seed"),
    ("dp.selection_sigma=0", "dp.selection_sigma"),
    ("dp.selection_clip=-1", "dp.selection_clip"),
    ("regionfed.rho_selection=best", "regionfed.rho_selection"),
    ("regionfed.rho_grid_points=0", "regionfed.rho_grid_points"),
    ("regionfed.selection_margin=nan", "regionfed.selection_margin")])
def test_bad_privacy_settings_give_one_error_line(setting, message, tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", *SMALL, "--methods", "regionfed-grad",
                           "--set", setting, "--out", str(tmp_path / "x"))
    assert code == 2 and err.startswith("error:") and message in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_golden_section_under_dp_needs_an_explicit_override(tmp_path, capsys):
    args = [*SMALL, "--methods", "regionfed-grad", "--dp-sigma", "1", "--sample-rate", "0.5",
            "--set", "regionfed.rho_selection=golden"]
    code, _, err = run_cli(capsys, "run", *args, "--out", str(tmp_path / "refused"))
    assert code == 2 and "dp.allow_unaccounted" in err and len(err.strip().splitlines()) == 1
    out = tmp_path / "allowed"
    code, stdout, _ = run_cli(capsys, "run", *args, "--set", "dp.allow_unaccounted=true",
                              "--out", str(out))
    assert code == 0
    record = json.loads((out / "privacy.json").read_text())["methods"]["regionfed-grad"]
    assert record["unaccounted"] == ["ρ search (un-noised validation data)"]
    assert "does not cover ρ search" in stdout


@pytest.fixture
def trained(monkeypatch):
    """The methods run_experiment trains, in order (run_method calls)."""
    from regionfed import experiment

    calls = []
    real = experiment.run_method

    def counting(method, *args, **kwargs):
        calls.append(method)
        return real(method, *args, **kwargs)

    monkeypatch.setattr(experiment, "run_method", counting)
    return calls


def test_centralized_rw_on_equal_regions_is_the_centralized_run(tmp_path, capsys, trained):
    """Equal-sized regions weigh every example 1: centralized-rw is not trained again; its
    record, round logs and checkpoint are centralized's (the same computation, bit for
    bit), marked as reused and said so under the table."""
    out = tmp_path / "rw"
    code, stdout, _ = run_cli(capsys, "run", *SMALL, "--methods", "centralized-rw,centralized",
                              "--rounds", "2", "--jobs", "1", "--out", str(out))
    assert code == 0 and trained == ["centralized"]
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["centralized-rw", "centralized"]  # as configured
    rw, plain = results["methods"]["centralized-rw"], results["methods"]["centralized"]
    assert {k: v for k, v in rw.items() if k != "seeds"} == \
        {k: v for k, v in plain.items() if k != "seeds"}
    assert [{k: v for k, v in r.items() if not k.startswith("reused_")}
            for r in rw["seeds"]] == plain["seeds"]
    assert results["reused"]["centralized-rw"]["from"] == "centralized"
    assert "exactly 1" in results["reused"]["centralized-rw"]["because"]
    record = json.loads((out / "partial" / "centralized-rw__seed0.json").read_text())
    assert record["reused_from"] == "centralized"
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    copied = [{**x, "method": "centralized"} for x in logs if x["method"] == "centralized-rw"]
    assert len(copied) == 2 and copied == [x for x in logs if x["method"] == "centralized"]
    checkpoints = out / "checkpoints"
    assert (checkpoints / "centralized-rw-seed0.safetensors").read_bytes() == \
        (checkpoints / "centralized-seed0.safetensors").read_bytes()
    assert "- centralized-rw: the centralized run, not trained twice" in stdout


def test_centralized_rw_trains_where_the_weights_are_not_all_one(tmp_path, capsys,
                                                                 monkeypatch, trained):
    from regionfed import experiment

    monkeypatch.setattr(experiment, "reweighting_is_identity", lambda federation: False)
    out = tmp_path / "rw"
    code, stdout, _ = run_cli(capsys, "run", *SMALL, "--methods", "centralized-rw,centralized",
                              "--jobs", "1", "--out", str(out))
    assert code == 0 and trained == ["centralized-rw", "centralized"]
    results = json.loads((out / "results.json").read_text())
    assert "reused" not in results and "not trained twice" not in stdout
