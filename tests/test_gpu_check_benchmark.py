"""The GPU check runs on the CPU too (``--device cpu``): its steps report what they
measured, a missing data file is a skip that says so, and the shell wrapper runs each step
under its own time limit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_the_tiny_and_femnist_steps_report_their_numbers(tmp_path, capsys):
    bench = load_script("benchmarks/gpu_check.py")
    out = tmp_path / "gpu.jsonl"
    code = bench.main(["--device", "cpu", "--quick", "--step", "tiny", "--json", str(out)])
    assert code == 0
    tiny = json.loads(out.read_text().splitlines()[0])
    assert tiny["step"] == "tiny" and tiny["device"] == "cpu"
    for batching in ("auto", "on"):
        assert tiny[batching]["timed_rounds"] == 2 and tiny[batching]["seconds_per_round"] > 0
        assert "train" in tiny[batching]["breakdown"]
        assert 0.0 <= tiny[batching]["test_overall"] <= 1.0
    assert tiny["on"]["client_batching"] == "batched"
    # auto on a CPU: one by one at one thread, over processes with two or more
    if torch.get_num_threads() == 1:
        assert tiny["auto"]["client_batching"].startswith("sequential (one torch thread")
    else:
        assert tiny["auto"]["client_batching"].startswith("processes (")
    # the same training up to float summation order (SGD; vmap against the sequential loop)
    assert tiny["max_param_difference_on_vs_auto"] < 1e-5
    femnist = bench.run_step("cnn-femnist", "cpu", True, 1)
    if "skipped" in femnist:
        assert "not present" in femnist["skipped"]
    else:
        assert femnist["seconds_per_step"] > 0 and femnist["steps_per_round"] > 0
        assert femnist["hours_full_protocol"] == femnist["hours_per_fedavg_run"] \
            * femnist["runs_in_table"]


def test_a_step_that_fails_is_reported_and_sets_the_exit_status(tmp_path):
    script = ROOT / "benchmarks" / "gpu_check.sh"
    env = {**os.environ, "DEVICE": "cuda:7", "QUICK": "1", "STEPS": "tiny:60",
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(script), str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1  # no such GPU here: the step's error is recorded
    record = json.loads((tmp_path / "gpu_check.jsonl").read_text())
    assert "error" in record and "cuda:7" in record["error"]
    assert "step tiny: failed" in (tmp_path / "gpu_check.log").read_text()
