"""Kill and resume (issue 9): a run killed with SIGKILL — mid-method, or between a round's
log line and its checkpoint — and resumed with ``regionfed run --resume`` ends with exactly
the metrics and ε of an uninterrupted run (DP noise from a test ``dp.noise_seed``, so the
two can be compared; the noise generator's state is in every round checkpoint)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from regionfed.cli import main

ARGS = ["run", "--methods", "fedavg,regionfed-grad", "--rounds", "4", "--eval-every", "2",
        "--num-queries", "480", "--regions", "2", "--clients-per-region", "2",
        "--sample-rate", "0.8", "--dp-sigma", "1.0", "--dp-clip", "1.0",
        "--set", "data.vocab_size=1000", "--set", "model.dim=32", "--set", "model.heads=2",
        "--set", "model.ngram_buckets=512", "--set", "regionfed.rho_tolerance=0.2",
        # test noise: the resumed run must continue the saved noise stream, not restart it
        # from the seed (with OS-entropy noise two runs never agree, killed or not)
        "--set", "dp.noise_seed=3", "--quiet"]


def summary(folder):
    results = json.loads((folder / "results.json").read_text())
    return {m: {k: r[k] for k in ("overall", "per_region", "epsilon")} | {
        "per_client": [s["per_client"] for s in r["seeds"]],
        "privacy": [s["privacy"] for s in r["seeds"]]}
        for m, r in results["methods"].items()}


def metric_rounds(folder):
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return sorted((e["method"], e["round"]) for e in map(json.loads, lines))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "run"
    assert main([*ARGS, "--out", str(out)]) == 0
    return out


def kill_when(out, ready, timeout=240):
    """Start the run as a subprocess and SIGKILL it the moment ``ready(out)`` holds.

    It computes with this process's torch thread count: the resumed run is compared with
    the uninterrupted one exactly, and another thread count sums in another order."""
    import torch

    threads = str(torch.get_num_threads())
    process = subprocess.Popen([sys.executable, "-m", "regionfed", *ARGS, "--out", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "OMP_NUM_THREADS": threads})
    try:
        deadline = time.monotonic() + timeout
        while not ready(out):
            assert process.poll() is None, "the run ended before the kill point"
            assert time.monotonic() < deadline, "the kill point never came"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=30)


def state(out, method):
    return out / "state" / f"{method}-seed0.safetensors"


def saved_round(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return json.loads(handle.metadata()["regionfed"])["round"]


@pytest.mark.parametrize("kill_point", ["fedavg-round-2", "regionfed-grad-round-1"])
def test_a_killed_run_resumes_to_the_uninterrupted_result(kill_point, uninterrupted,
                                                          tmp_path, monkeypatch):
    from regionfed.runtime.simulator import Simulator

    trained = []  # (method, round) of every round the resumed process trains
    drive = Simulator._drive_round

    def counted(self, strategy, rnd):
        trained.append((strategy.name, rnd))
        return drive(self, strategy, rnd)

    monkeypatch.setattr(Simulator, "_drive_round", counted)
    out = tmp_path / "run"
    if kill_point == "fedavg-round-2":  # mid-way through the first method
        kill_when(out, lambda o: state(o, "fedavg").exists()
                  and (o / "metrics.jsonl").exists()
                  and (o / "metrics.jsonl").read_text().count('"round": 2') >= 1)
    else:  # the first method done, the second one checkpointed after its first round
        kill_when(out, lambda o: state(o, "regionfed-grad").exists())
    assert not (out / "results.json").exists()
    killed = "fedavg" if kill_point.startswith("fedavg") else "regionfed-grad"
    done = saved_round(state(out, killed))
    assert done >= 1
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    # the killed method continued after its checkpoint instead of starting over
    assert [r for m, r in trained if m == killed] == list(range(done + 1, 5))
    assert summary(out) == summary(uninterrupted)
    assert metric_rounds(out) == metric_rounds(uninterrupted)
    assert not list((out / "state").glob("*.safetensors"))  # finished runs leave no state


def test_resuming_with_a_foreign_checkpoint_is_refused(uninterrupted, tmp_path, capsys):
    out = tmp_path / "run"
    kill_when(out, lambda o: state(o, "fedavg").exists())
    config = (out / "config.yaml").read_text()
    (out / "config.yaml").write_text(config.replace("rounds: 4", "rounds: 5"))
    assert main(["run", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "belongs to another run" in err[0]
