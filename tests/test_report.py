"""``regionfed report``: plots from a run's logs, and the combined report of several runs
with the privacy–utility plot."""

import pytest

from regionfed.cli import main
from regionfed.report_plots import (
    majority_reference,
    regionfed_trajectories,
    training_loss_curves,
    validation_curves,
)

PNG = b"\x89PNG\r\n\x1a\n"
SMALL = ["--num-queries", "480", "--regions", "2", "--clients-per-region", "2",
         "--rounds", "2", "--set", "data.vocab_size=1000", "--set", "model.dim=32",
         "--set", "model.heads=2", "--set", "model.ngram_buckets=512", "--quiet"]


def test_trajectories_are_read_per_method_seed_region_and_round():
    records = [
        {"method": "regionfed-dynamic", "seed": 0, "round": 1, "alpha": {"eu": 0.7, "us": 0.9},
         "rho": {"eu": 1.0, "us": 0.5}, "strategy": {"eu": "grad", "us": "meta"}},
        {"method": "regionfed-dynamic", "seed": 1, "round": 1, "alpha": {"eu": 0.1}},
        {"method": "fedavg", "seed": 0, "round": 1, "train_loss": 1.0},
        {"method": "regionfed-dynamic", "seed": 0, "round": 2, "alpha": {"eu": 0.8, "us": 0.9},
         "rho": {"eu": {"grad": 2.0, "meta": 0.1}, "us": 0.0},
         "strategy": {"eu": "interp", "us": "meta"}},
    ]
    series = regionfed_trajectories(records, "regionfed-dynamic")
    assert series["alpha"] == {"eu": {1: 0.7, 2: 0.8}, "us": {1: 0.9, 2: 0.9}}
    assert series["rho"]["eu"] == {1: 1.0, 2: 2.0}  # ensemble logs: the grad member's ρ
    assert series["strategy"]["eu"] == {1: "grad", 2: "interp"}
    assert regionfed_trajectories(records, "fedavg")["alpha"] == {}


def test_several_runs_with_different_sigma_get_a_privacy_utility_plot(tmp_path, capsys):
    runs = []
    for name, dp in (("off", []), ("s2", ["--dp-sigma", "2", "--sample-rate", "0.8"])):
        runs.append(tmp_path / name)
        assert main(["run", *SMALL, "--methods", "fedavg,regionfed-grad", *dp,
                     "--out", str(runs[-1])]) == 0
    capsys.readouterr()
    out = tmp_path / "combined"
    assert main(["report", *map(str, runs), "--out", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    assert (out / "privacy_utility.png").read_bytes()[:8] == PNG
    assert "Privacy–utility" in markdown and all(str(r) in markdown for r in runs)
    for run in runs:  # each run also got its own report
        assert (run / "report.md").exists() and (run / "convergence.png").exists()
    same = tmp_path / "same"
    assert main(["report", str(runs[0]), str(runs[0]), "--out", str(same)]) == 0
    assert not (same / "privacy_utility.png").exists()  # one σ: nothing to trade off


def test_run_with_report_writes_the_report_at_the_end(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *SMALL, "--methods", "majority,regionfed-grad", "--report",
                 "--out", str(out)]) == 0
    assert f"report: {out / 'report.md'}" in capsys.readouterr().out
    for png in ("convergence.png", "per_region.png", "trajectories-regionfed-grad.png"):
        assert (out / png).read_bytes()[:8] == PNG
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# run\n")  # the run's folder, not the config's name
    assert "training loss" in markdown


def test_curves_average_seeds_per_round_and_majority_is_the_reference():
    records = [{"method": "fedavg", "seed": 0, "round": 1, "train_loss": 2.0},
               {"method": "fedavg", "seed": 1, "round": 1, "train_loss": 1.0},
               {"method": "fedavg", "seed": 0, "round": 2, "train_loss": 0.5,
                "val": {"overall": 0.6}}]
    assert training_loss_curves(records) == {"fedavg": {1: 1.5, 2: 0.5}}
    assert validation_curves(records) == {"fedavg": {2: 0.6}}
    assert majority_reference({"methods": {"majority": {"overall": 0.4}}}) == 0.4
    assert majority_reference({"methods": {"fedavg": {"overall": 0.4}}}) is None


def test_a_report_of_an_unfinished_run_is_one_error_line(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    assert main(["report", str(tmp_path / "half"), str(tmp_path / "half"),
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not found" in err[0]


@pytest.mark.parametrize("content", ["[]", '{"methods": 3}'])
def test_a_results_file_of_the_wrong_shape_is_refused(tmp_path, capsys, content):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text(content)
    assert main(["report", str(tmp_path / "bad")]) == 2
    assert "not a regionfed results file" in capsys.readouterr().err
