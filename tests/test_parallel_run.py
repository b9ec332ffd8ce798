"""``regionfed run --jobs N``: methods × seeds trained in worker processes leave what one
process leaves (same results up to float summation order, same round logs, checkpoints and
``partial/`` records, the same methods found not applicable), and resume like it."""

import json

import torch
from safetensors.torch import load_file

from regionfed.cli import main

ARGS = ["run", "--methods", "majority,fedavg,regionfed-grad,fedtp", "--rounds", "2",
        "--eval-every", "1", "--num-queries", "480", "--regions", "2",
        "--clients-per-region", "2", "--optimizer", "sgd", "--lr", "0.5",
        "--sample-rate", "0.8", "--dp-sigma", "0.3", "--dp-clip", "1.0",
        "--set", "data.vocab_size=1000", "--set", "model.dim=32", "--set", "model.heads=2",
        "--set", "model.ngram_buckets=512", "--set", "dp.noise_seed=3", "--quiet"]


def results(folder):
    return json.loads((folder / "results.json").read_text())


def metric_rounds(folder):
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return sorted((e["method"], e["seed"], e["round"]) for e in map(json.loads, lines))


def checkpoint(folder, method):
    return load_file(str(folder / "checkpoints" / f"{method}-seed0.safetensors"))


def test_workers_leave_what_one_process_leaves_and_resume_like_it(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*ARGS, "--jobs", "1", "--out", str(one)]) == 0
    assert main([*ARGS, "--jobs", "2", "--out", str(two)]) == 0
    a, b = results(one), results(two)
    # fedtp has no DP guarantee: found not applicable in a worker as in one process
    assert set(a["not_applicable"]) == set(b["not_applicable"]) == {"fedtp"}
    assert list(a["methods"]) == list(b["methods"]) == ["majority", "fedavg",
                                                       "regionfed-grad"]
    for method in ("fedavg", "regionfed-grad"):
        for key in ("overall", "epsilon"):
            assert abs(a["methods"][method][key] - b["methods"][method][key]) < 0.02, key
        for name, value in checkpoint(one, method).items():
            assert torch.allclose(value, checkpoint(two, method)[name], atol=1e-4), name
    assert a["methods"]["majority"]["overall"] == b["methods"]["majority"]["overall"]
    assert metric_rounds(one) == metric_rounds(two)  # every round logged once
    assert sorted(p.name for p in (one / "partial").iterdir()) == \
        sorted(p.name for p in (two / "partial").iterdir())

    # an interrupted parallel run: one method's result missing, its round logs left behind
    (two / "partial" / "fedavg__seed0.json").unlink()
    (two / "results.json").unlink()
    assert main(["run", "--resume", str(two), "--jobs", "2", "--quiet"]) == 0
    assert metric_rounds(two) == metric_rounds(one)  # the stale lines were dropped
    resumed = results(two)
    assert abs(resumed["methods"]["fedavg"]["overall"] - a["methods"]["fedavg"]["overall"]) \
        < 0.02


def test_jobs_below_one_is_refused(tmp_path, capsys):
    assert main([*ARGS, "--jobs", "0", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--jobs must be at least 1" in err and err.count("error:") == 1
    assert not (tmp_path / "x").exists()


def test_the_pool_gets_the_runs_in_a_balanced_order(tmp_path, monkeypatch):
    """The pool receives every run once, in the order that balances the workers by the
    methods' cost estimates (pool_order): its estimated end is no later than longest-first's
    (interp, meta, …), and every trainable method has a cost estimate."""
    from regionfed import experiment
    from regionfed.algorithms.registry import METHODS, get_method
    from regionfed.runtime.workers import pool_makespan

    assert all(spec.cost > 0 for spec in METHODS.values() if spec.kind != "reference")
    submitted = []

    def record(function, jobs, workers, **kwargs):
        submitted.extend((job[2], job[3]) for job in jobs)
        return [None] * len(jobs)

    monkeypatch.setattr(experiment, "run_in_workers", record)
    methods = ["majority", "fedavg", "regionfed-interp", "local", "regionfed-meta",
               "regionfed-grad"]
    config = experiment.build_config({"methods": methods, "seeds": 2})
    experiment._train_in_workers(config, tmp_path, 2, progress=False, resume=False)
    runs = [(m, s) for m in methods if m != "majority" for s in range(2)]
    assert sorted(submitted) == sorted(runs)
    costs = {run: get_method(run[0]).cost for run in runs}
    longest_first = sorted(runs, key=lambda run: -costs[run])

    def end(order):
        return pool_makespan(range(len(order)), [costs[r] for r in order], 2)

    assert end(submitted) <= end(longest_first)
    assert end(submitted) < end(longest_first) or submitted == longest_first


def test_the_pool_leaves_out_the_runs_the_caller_reuses(tmp_path, monkeypatch):
    from regionfed import experiment

    submitted = []

    def record(function, jobs, workers, **kwargs):
        submitted.extend(job[2] for job in jobs)
        return [None] * len(jobs)

    monkeypatch.setattr(experiment, "run_in_workers", record)
    config = experiment.build_config({"methods": ["centralized", "centralized-rw", "fedavg"]})
    experiment._train_in_workers(config, tmp_path, 2, progress=False, resume=False,
                                 skip={"centralized-rw"})
    assert sorted(submitted) == ["centralized", "fedavg"]
