import json

import pytest
from test_cli import SMALL, run_cli

from regionfed.config import build_config
from regionfed.errors import ConfigError
from regionfed.tuning import TuningConfig, candidates, choose, final_validation_overall


def test_candidates_are_the_product_of_the_lr_and_key_grids():
    tuning = TuningConfig(lr=[0.1, 0.2], grids={"baselines.fedprox_mu": [0.0, 1.0]})
    assert candidates(tuning, "baselines.fedprox_mu") == [
        {"training.optimizer.lr": 0.1, "baselines.fedprox_mu": 0.0},
        {"training.optimizer.lr": 0.1, "baselines.fedprox_mu": 1.0},
        {"training.optimizer.lr": 0.2, "baselines.fedprox_mu": 0.0},
        {"training.optimizer.lr": 0.2, "baselines.fedprox_mu": 1.0}]
    assert candidates(tuning, None) == [{"training.optimizer.lr": 0.1},
                                        {"training.optimizer.lr": 0.2}]


def test_the_best_validation_score_wins_and_ties_go_to_the_first():
    assert choose([({"a": 1}, 0.5), ({"a": 2}, 0.7), ({"a": 3}, 0.6)]) == {"a": 2}
    assert choose([({"a": 1}, 0.7), ({"a": 2}, 0.7)]) == {"a": 1}
    assert final_validation_overall([{"val": {"overall": 0.2}}, {},
                                     {"val": {"overall": 0.4}}]) == 0.4
    with pytest.raises(ValueError, match="no validation"):
        final_validation_overall([{"round": 1}])


@pytest.mark.parametrize("tuning, fragment", [({"lr": []}, "tuning.lr"),
                                              ({"lr": [0.0]}, "tuning.lr"),
                                              ({"grids": {"x": []}}, "empty grid"),
                                              ({"bogus": 1}, "tuning.bogus")])
def test_bad_tuning_config_is_rejected(tuning, fragment):
    with pytest.raises(ConfigError, match=fragment):
        build_config({"tuning": tuning})


def test_compare_tunes_each_method_and_writes_both_privacy_settings(tmp_path, capsys):
    """A learning rate that can't learn anything (1e-9) must lose the search."""
    out, doc = tmp_path / "cmp", tmp_path / "results.md"
    code, stdout, _ = run_cli(
        capsys, "compare", *SMALL, "--methods", "majority,fedavg,fedprox,fedtp", "--seeds",
        "2", "--tune", "--set", "tuning.lr=[1e-9,0.01]", "--set",
        "tuning.grids={baselines.fedprox_mu: [0.0, 0.1]}", "--privacy", "both",
        "--dp-sigma", "0.5", "--dp-clip", "1", "--out", str(out), "--markdown", str(doc))
    assert code == 0
    markdown = doc.read_text()
    assert markdown == (out / "results.md").read_text()
    assert "regionfed compare --num-queries 480" in markdown  # the exact command
    assert "## Without DP" in markdown and "## With DP" in markdown
    for setting in ("no-dp", "dp"):
        results = json.loads((out / setting / "results.json").read_text())
        fedprox = results["methods"]["fedprox"]["tuning"]
        assert len(fedprox["candidates"]) == 4
        best = max(fedprox["candidates"], key=lambda c: c["val_overall"])
        assert fedprox["chosen"] == {k: v for k, v in best.items() if k != "val_overall"}
        assert "tuning" not in results["methods"]["majority"]
        assert len(results["methods"]["fedavg"]["seeds"]) == 2
        if setting == "no-dp":  # without noise, a rate that learns nothing can't win
            assert fedprox["chosen"]["training.optimizer.lr"] == 0.01
            assert results["methods"]["fedavg"]["tuning"]["chosen"] == {
                "training.optimizer.lr": 0.01}
    dp = json.loads((out / "dp" / "results.json").read_text())
    assert "fedtp" not in dp["methods"] and "DP" in dp["not_applicable"]["fedtp"]
    assert "fedtp" in json.loads((out / "no-dp" / "results.json").read_text())["methods"]
    assert "| fedtp" in markdown.split("## With DP")[1]  # an n/a row, with its reason
    assert "fedtp: n/a" in markdown


def test_compare_both_privacy_settings_needs_dp_settings(tmp_path, capsys):
    code, _, err = run_cli(capsys, "compare", *SMALL, "--methods", "fedavg", "--privacy",
                           "both", "--out", str(tmp_path / "x"))
    assert code == 2 and "--privacy both needs DP" in err
