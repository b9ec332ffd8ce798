"""CLI for the transformer models (issue 7): t5-tiny runs end to end; bad model input
(missing --init-from folder, a flag the model doesn't take, a model/dataset mismatch, a GPU
that isn't there) is one ``error:`` line and exit status 2."""

import json

import pytest
import torch

from regionfed.cli import main

SMALL = ["--num-queries", "480", "--regions", "2", "--clients-per-region", "2",
         "--rounds", "1", "--set", "data.vocab_size=1000", "--quiet"]
T5 = ["--model", "t5-tiny", "--set", "model.d_model=32", "--set", "model.d_ff=64",
      "--set", "model.num_heads=2", "--set", "model.vocab_size=2048"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_t5_tiny_run_writes_results(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, _ = run_cli(capsys, "run", *SMALL, *T5, "--methods", "majority,fedavg",
                              "--out", str(out))
    assert code == 0 and "| fedavg" in stdout
    results = json.loads((out / "results.json").read_text())
    assert 0.0 <= results["methods"]["fedavg"]["overall"] <= 1.0
    assert results["config"]["model"]["name"] == "t5-tiny"
    assert (out / "checkpoints" / "fedavg-seed0.safetensors").exists()


@pytest.mark.parametrize("argv, message", [
    ([*T5, "--init-from", "/nonexistent/t5"], "model.init_from"),
    (["--model", "tiny", "--init-from", "/tmp"], "model.init_from"),
    (["--model", "cnn"], "needs an image dataset"),
])
def test_bad_model_input_is_one_error_line(tmp_path, capsys, argv, message):
    code, _, err = run_cli(capsys, "run", *SMALL, *argv, "--methods", "fedavg",
                           "--out", str(tmp_path / "run"))
    assert code == 2
    assert err.startswith("error:") and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_asking_for_a_missing_gpu_is_an_error_not_a_silent_cpu_run(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", *SMALL, "--device", "cuda", "--methods", "fedavg",
                           "--out", str(tmp_path / "run"))
    assert code == 2 and "training.device" in err
