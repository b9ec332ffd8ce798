"""``regionfed sweep``: every study's variants are valid configurations at both sizes, and a
study runs end to end (tiny), writes its CSV, plot and record, and resumes without redoing
finished work."""

import csv
import json
from pathlib import Path

import pytest
from helpers import TINY_SWEEP as TINY

from regionfed.cli import main
from regionfed.studies.registry import STUDIES, get_study
from regionfed.studies.runner import slug, variant_config


@pytest.mark.parametrize("name", list(STUDIES))
def test_every_variant_is_a_valid_configuration_at_both_sizes(name):
    study = STUDIES[name]
    labels = [slug(v.label) for v in study.variants]
    assert len(set(labels)) == len(labels)  # one folder per variant
    for full in (False, True):
        for variant in study.variants:
            config = variant_config(study, variant, full=full, seeds=None)
            assert config.seeds == (study.full_seeds if full else study.seeds)
            assert config.methods == list(variant.methods or study.methods)


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_published_esci_synth_studies_keep_the_split_they_were_run_with(name):
    # results/ was measured with each client's queries split at random: a sweep command
    # must reproduce it until the studies are rerun leak-free
    study = get_study(name)
    for full in (False, True):
        config = variant_config(study, study.variants[0], full=full, seeds=1)
        if config.dataset == "esci-synth":
            assert config.data.split == "random"


PUBLISHED = Path(__file__).resolve().parents[2] / "results"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in PUBLISHED.glob("*/study.json")))
def test_published_study_folders_hold_the_data_their_command_builds(folder):
    # `regionfed sweep <study> --out results/<study>` resumes a published folder only if its
    # saved configs equal what the registry builds now; the data must never drift from it
    from regionfed.config import build_config, load_config

    record = json.loads((PUBLISHED / folder / "study.json").read_text())
    study = get_study(record["study"])
    for variant in study.variants:
        saved = build_config(load_config(PUBLISHED / folder / slug(variant.label)
                                         / "config.yaml"))
        built = variant_config(study, variant, full=record["full"], seeds=1)
        assert saved.dataset == built.dataset
        assert saved.data.model_dump() == built.data.model_dump(), variant.label


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in PUBLISHED.glob("*/study.json")))
def test_published_rows_name_run_folders_inside_their_study(folder):
    # docs/results.md lists each row's run folder as where to read its config and results: it
    # must be the published one (results/<study>/<variant>), not the scratch folder it ran in
    record = json.loads((PUBLISHED / folder / "study.json").read_text())
    table = list(csv.DictReader((PUBLISHED / folder / f"{record['study']}.csv").open()))
    for row in record["rows"] + table:
        run = Path(row["run"])
        assert run.parent == Path("results") / folder, row["run"]
        assert (PUBLISHED.parent / run / "results.json").is_file(), row["run"]


def test_the_paper_size_is_the_papers_protocol():
    config = variant_config(get_study("heterogeneity"), get_study("heterogeneity").variants[2],
                            full=True, seeds=None)
    assert (config.data.num_regions, config.data.clients_per_region) == (8, 10)
    assert config.training.rounds == 50 and config.seeds == 5 and config.data.alpha_d == 0.1


def test_a_study_runs_end_to_end_and_resumes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "concept"
    assert main(["sweep", "concept-shift", *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    study = get_study("concept-shift")
    rows = list(csv.DictReader((out / "concept-shift.csv").open()))
    assert len(rows) == len(study.variants) * len(study.methods)
    assert {r["variant"] for r in rows} == {v.label for v in study.variants}
    assert all(0.0 <= float(r["overall"]) <= 1.0 for r in rows)
    assert (out / "concept-shift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((out / "study.json").read_text())
    assert record["command"].startswith("regionfed sweep concept-shift")
    assert record["hardware"] and record["wall_seconds"] > 0 and record["jobs"] == 1
    assert record["run_seconds"] == pytest.approx(
        sum(float(r["seconds"]) * int(r["seeds"]) for r in rows), abs=0.1)
    assert "shift=1.0" in printed
    # a second call finds every variant finished: nothing is trained again
    partial = sorted((out / slug(study.variants[0].label) / "partial").glob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in partial]
    assert main(["sweep", "concept-shift", *TINY, "--out", str(out)]) == 0
    assert [p.stat().st_mtime_ns for p in partial] == stamps
    again = list(csv.DictReader((out / "concept-shift.csv").open()))
    assert [(r["variant"], r["method"], r["overall"]) for r in again] == \
        [(r["variant"], r["method"], r["overall"]) for r in rows]
    # a published study (a fresh clone: results.json kept, partial/ and weights ignored by
    # git) is not trained again either: its finished results.json is reused
    import shutil

    from regionfed.runtime.simulator import Simulator

    for variant in study.variants:
        for local in ("partial", "checkpoints", "metrics.jsonl"):
            target = out / slug(variant.label) / local
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    trained = []
    monkeypatch.setattr(Simulator, "_drive_round",
                        lambda self, strategy, rnd: trained.append(rnd))
    assert main(["sweep", "concept-shift", *TINY, "--out", str(out)]) == 0
    assert trained == []
    published = list(csv.DictReader((out / "concept-shift.csv").open()))
    assert [(r["variant"], r["method"], r["overall"]) for r in published] == \
        [(r["variant"], r["method"], r["overall"]) for r in rows]
    # the same folder under another configuration is refused, not mixed in
    changed = [*TINY, "--set", "training.local_epochs=2"]
    assert main(["sweep", "concept-shift", *changed, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another configuration" in err[0]


def test_variants_trained_in_worker_processes_match_the_in_process_study(tmp_path, capsys):
    """``--jobs 2``: two spawned workers, one torch thread each; rows stay in variant order
    and agree with the same study trained in this process."""
    import torch

    threads = torch.get_num_threads()
    # SGD: the workers compute with another thread count (cores / jobs), and AdamW would
    # turn the different summation order into lr-sized steps; SGD keeps it at float noise
    fast = ["--set", "methods=[fedavg, region-fedavg]", "--set", "training.optimizer.name=sgd",
            "--set", "training.optimizer.lr=0.1"]
    assert main(["sweep", "assignment", *TINY, *fast, "--out", str(tmp_path / "one")]) == 0
    tiny = [*TINY[:TINY.index("--jobs")], *TINY[TINY.index("--jobs") + 2:], *fast]
    assert main(["sweep", "assignment", *tiny, "--jobs", "2",
                 "--out", str(tmp_path / "two")]) == 0
    assert torch.get_num_threads() == threads  # the workers' setting stays in the workers
    one = json.loads((tmp_path / "one" / "study.json").read_text())["rows"]
    two_record = json.loads((tmp_path / "two" / "study.json").read_text())
    assert two_record["jobs"] == 2  # the wall time is read against it
    two = two_record["rows"]
    assert [(r["variant"], r["method"]) for r in two] == \
        [(v.label, m) for v in get_study("assignment").variants
         for m in ("fedavg", "region-fedavg")]
    for row in two:  # each row is its own variant's run, not a neighbour's
        results = json.loads((Path(row["run"]) / "results.json").read_text())
        assert row["overall"] == results["methods"][row["method"]]["overall"]
    # the same numbers up to the last bits that another thread count may change
    assert [r["overall"] for r in two] == pytest.approx([r["overall"] for r in one], abs=1e-3)
    # a worker's failure is the sweep's one error line: a variant folder of another
    # configuration is refused inside its worker
    changed = [*tiny, "--set", "training.local_epochs=2", "--jobs", "2"]
    assert main(["sweep", "assignment", *changed, "--out", str(tmp_path / "two")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another configuration" in err[0]


def test_the_ablation_scores_hierarchy_with_the_personalized_overall(tmp_path, capsys):
    out = tmp_path / "ablation"
    assert main(["sweep", "ablation", *TINY, "--out", str(out)]) == 0
    record = json.loads((out / "study.json").read_text())
    assert len(record["rows"]) == 8
    for row, variant in zip(record["rows"], get_study("ablation").variants, strict=True):
        results = json.loads((out / slug(variant.label) / "results.json").read_text())
        summary = results["methods"]["regionfed-grad"]
        expected = (summary["seeds"][0]["user_personalization"]["overall_after"]
                    if variant.metric == "personalized" else summary["overall"])
        assert row["overall"] == pytest.approx(expected)


@pytest.mark.parametrize("argv, message", [
    (["sweep", "astrology"], "STUDY"),
    (["sweep", "privacy", "--set", "training.rounds=0"], "training.rounds"),
    (["sweep", "privacy", "--jobs", "0"], "--jobs"),
])
def test_bad_sweep_input_is_one_error_line(argv, message, capsys, tmp_path):
    try:
        code = main([*argv, "--out", str(tmp_path / "s")])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("name", ["privacy", "privacy-large"])
def test_privacy_variants_differ_from_no_dp_only_in_the_noise(name):
    study = get_study(name)
    configs = [variant_config(study, v, full=False, seeds=None) for v in study.variants]
    assert [c.dp.sigma for c in configs] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert configs[0].dp.mode == "off" and {c.dp.mode for c in configs[1:]} == {"user"}
    assert len({c.training.sample_rate for c in configs}) == 1  # same cohort per round
    assert len({(c.training.rounds, c.data.clients_per_region) for c in configs}) == 1


def test_the_large_federation_has_a_thousand_clients_in_each_of_8_regions():
    for full in (False, True):
        config = variant_config(get_study("privacy-large"), get_study("privacy-large").variants[3],
                                full=full, seeds=None)
        assert config.data.num_regions == 8 and config.data.clients_per_region >= 1000
        # each round averages ~q·n_r = 100 clients per region, 20× the small federation's 5
        assert config.training.sample_rate * config.data.clients_per_region >= 100
