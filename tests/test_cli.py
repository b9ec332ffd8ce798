import json
import subprocess
import sys

import pytest
import yaml

from regionfed.cli import main

SMALL = ["--num-queries", "480", "--regions", "2", "--clients-per-region", "3",
         "--rounds", "1", "--set", "data.vocab_size=1000", "--set", "model.dim=32",
         "--set", "model.heads=2", "--set", "model.ngram_buckets=512", "--quiet"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_writes_outputs_in_the_stable_schema(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, _ = run_cli(capsys, "run", *SMALL, "--methods",
                              "majority,centralized,fedavg", "--seeds", "2", "--out", str(out))
    assert code == 0
    assert "| fedavg" in stdout and "∞ (no DP)" in stdout
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["majority", "centralized", "fedavg"]
    for summary in results["methods"].values():
        for key in ("overall", "intent", "spell", "ner_f1", "rrs", "worst_region",
                    "region_std", "per_region", "seeds", "overall_std"):
            assert key in summary
        assert summary["epsilon"] is None
        assert 0.0 <= summary["overall"] <= 1.0
        assert len(summary["seeds"]) == 2
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["training"]["rounds"] == 1 and config["data"]["num_regions"] == 2
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert {(r["method"], r["seed"]) for r in lines} == {
        ("centralized", 0), ("centralized", 1), ("fedavg", 0), ("fedavg", 1)}
    assert (out / "checkpoints" / "fedavg-seed0.safetensors").exists()


def test_existing_output_is_never_overwritten_and_resume_skips_done_work(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(capsys, "run", *SMALL, "--methods", "majority", "--out", str(out))[0] == 0
    first = (out / "results.json").read_text()
    code, stdout, _ = run_cli(capsys, "run", *SMALL, "--methods", "majority", "--out", str(out))
    assert code == 0 and (tmp_path / "run-2" / "results.json").exists()
    assert (out / "results.json").read_text() == first
    (out / "results.json").unlink()
    assert run_cli(capsys, "run", "--resume", str(out), "--quiet")[0] == 0
    assert json.loads((out / "results.json").read_text()) == json.loads(first)


@pytest.mark.parametrize("argv, fragment", [
    (["--methods", "fedavg,nosuch"], "unknown method 'nosuch'"),
    (["--set", "training.bogus=1"], "training.bogus: unknown key"),
    (["--num-queries", "-5"], "num_queries"),
    (["--alpha-d", "0"], "alpha_d"),
    (["--alpha-d", "-1"], "alpha_d"),
    (["--clients-per-region", "-2"], "clients_per_region"),
    (["--concept-shift", "1.5"], "concept_shift"),
    (["--rounds", "0"], "rounds"),
    (["--set", "novalue"], "KEY=VALUE"),
    (["--config", "/nonexistent/x.yaml"], "config file not found"),
])
def test_bad_input_is_one_error_line_and_exit_2(capsys, argv, fragment):
    code, _, err = run_cli(capsys, "run", "--quiet", *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0]


def test_bad_config_files(tmp_path, capsys):
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("name: x\ntraining:\n  roundz: 3\n")
    code, _, err = run_cli(capsys, "run", "--config", str(unknown))
    assert code == 2 and "training.roundz: unknown key" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    code, _, err = run_cli(capsys, "run", "--config", str(broken))
    assert code == 2 and "not valid YAML" in err
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    code, _, err = run_cli(capsys, "run", "--config", str(listy))
    assert code == 2 and "mapping" in err


def test_argparse_errors_follow_the_contract(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--rounds", "many"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_help_from_the_module_entry_point():
    proc = subprocess.run([sys.executable, "-m", "regionfed", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "usage: regionfed" in proc.stdout and "example" in proc.stdout


@pytest.mark.parametrize("command", [["run"], ["compare"], ["privacy"], ["report"],
                                     ["sweep"], ["predict"], ["audit"]])
def test_help_for_every_subcommand(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: regionfed" in out and "example" in out


def test_privacy_json_contract(capsys):
    code, out, _ = run_cli(capsys, "privacy", "--sigma", "4", "--sample-rate", "0.1",
                           "--rounds", "50", "--delta", "1e-5", "--target-epsilon", "1",
                           "--json")
    assert code == 0
    report = json.loads(out)
    assert set(report) == {"epsilon_pld", "epsilon_rdp", "delta", "sigma", "sample_rate",
                           "rounds", "sigma_for_target"}
    assert report["epsilon_pld"] == pytest.approx(0.684, abs=0.01)
    assert report["epsilon_rdp"] == pytest.approx(0.758, abs=0.01)
    assert report["epsilon_pld"] < report["epsilon_rdp"]
    from regionfed.privacy.ledger import epsilon_pld
    reached = epsilon_pld(report["sigma_for_target"], 0.1, 50, 1e-5)
    assert reached == pytest.approx(1.0, rel=0.01) and reached <= 1.0


def test_privacy_without_noise_is_infinite_and_bad_rates_fail(capsys):
    code, out, _ = run_cli(capsys, "privacy", "--sigma", "0", "--sample-rate", "0.1",
                           "--rounds", "5", "--delta", "1e-5", "--json")
    assert code == 0 and json.loads(out)["epsilon_pld"] is None  # null = ∞
    code, _, err = run_cli(capsys, "privacy", "--sigma", "4", "--sample-rate", "1.5",
                           "--rounds", "5", "--delta", "1e-5")
    assert code == 2 and err.startswith("error:") and "sample rate" in err


def test_report_writes_markdown_and_curves(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(capsys, "run", *SMALL, "--methods", "majority,fedavg,regionfed-grad",
                   "--rounds", "2", "--out", str(out))[0] == 0
    code, stdout, _ = run_cli(capsys, "report", str(out))
    assert code == 0 and "| regionfed-grad" in stdout and "Users improved" in stdout
    assert (out / "report.md").read_text() == stdout.rstrip("\n") + "\n"
    for png in ("convergence.png", "per_region.png", "trajectories-regionfed-grad.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in stdout
    code, _, err = run_cli(capsys, "report", str(tmp_path / "missing"))
    assert code == 2 and err.startswith("error:") and "not found" in err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{not json")
    code, _, err = run_cli(capsys, "report", str(tmp_path / "bad"))
    assert code == 2 and "not a regionfed results file" in err


def test_femnist_with_the_cnn_runs_from_the_command_line(tmp_path, capsys):
    from helpers import shared_data

    npz = shared_data("femnist", "femnist_leaf_sf05_subset.npz")
    if not npz.exists():
        pytest.skip(f"{npz} not present")
    out = tmp_path / "fem"
    code, stdout, _ = run_cli(capsys, "run", "--dataset", "femnist", "--model", "cnn",
                              "--methods", "majority,fedavg", "--rounds", "1", "--regions",
                              "2", "--set", f"data.path={npz}", "--set", "data.max_writers=6",
                              "--quiet", "--out", str(out))
    assert code == 0 and "| fedavg" in stdout and "—" in stdout  # no NER for images
    results = json.loads((out / "results.json").read_text())
    assert results["methods"]["fedavg"]["ner_f1"] is None
    assert 0.0 <= results["methods"]["fedavg"]["overall"] <= 1.0


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset", "femnist", "--set", "data.path=/nonexistent.npz"], "FEMNIST data not found"),
    (["--dataset", "femnist", "--set", "data.num_queries=5"], "data.num_queries: unknown key"),
    (["--set", "model.name=resnet"], "unknown model 'resnet'"),
    (["--model", "cnn", "--methods", "fedavg"], "cnn model needs an image dataset"),
])
def test_bad_dataset_and_model_choices_get_one_line_errors(tmp_path, capsys, argv, fragment):
    code, _, err = run_cli(capsys, "run", "--quiet", "--rounds", "1", "--out",
                           str(tmp_path / "x"), *argv)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("item, section, key, expected", [
    ("training.client_batching=off", "training", "client_batching", "off"),
    ("dp.mode=off", "dp", "mode", "off"),
    ("regionfed.rho_search=off", "regionfed", "rho_search", False),  # bool fields still
    ("regionfed.rho_search=yes", "regionfed", "rho_search", True),   # read YAML 1.1 words
])
def test_set_values_reach_string_fields_as_typed(item, section, key, expected, tmp_path,
                                                 capsys):
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "run", *SMALL, "--methods", "majority", "--set", item,
                           "--out", str(out))
    assert code == 0, err
    assert yaml.safe_load((out / "config.yaml").read_text())[section][key] == expected


def test_a_run_refused_at_start_leaves_no_folder_and_the_retry_uses_the_name(tmp_path,
                                                                            capsys):
    out = tmp_path / "run"
    missing = tmp_path / "nope.jsonl"
    for command in ("run", "compare"):
        code, _, err = run_cli(capsys, command, "--dataset", "reviews", "--set",
                               f"data.path={missing}", "--methods", "majority", "--quiet",
                               "--out", str(out))
        assert code == 2 and "nope.jsonl" in err
        assert not out.exists()
    assert run_cli(capsys, "run", *SMALL, "--methods", "majority", "--out", str(out))[0] == 0
    assert (out / "results.json").exists() and not (tmp_path / "run-2").exists()


def test_a_failure_after_finished_work_keeps_the_folder_for_resume(tmp_path, capsys,
                                                                  monkeypatch):
    import regionfed.experiment as experiment

    calls = []
    real = experiment._run_and_record

    def fail_second(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(experiment, "_run_and_record", fail_second)
    out = tmp_path / "run"
    code, _, _ = run_cli(capsys, "run", *SMALL, "--methods", "majority,centralized",
                         "--out", str(out))
    assert code == 130
    assert (out / "partial" / "majority__seed0.json").exists()
