"""``regionfed predict`` (issue 9): a finished run answers typed queries with a region's
final model and the global model; bad input is one clear error."""

import json

import numpy as np
import pytest

from regionfed.cli import main
from regionfed.data.queries import INTENTS
from regionfed.errors import ConfigError, DataError
from regionfed.predict import predict_queries

ARGS = ["run", "--methods", "majority,fedavg,regionfed-grad", "--rounds", "2",
        "--num-queries", "480", "--regions", "2", "--clients-per-region", "2",
        "--set", "data.vocab_size=1000", "--set", "model.dim=32", "--set", "model.heads=2",
        "--set", "model.ngram_buckets=512", "--set", "regionfed.rho_search=false", "--quiet"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("predict") / "run"
    assert main([*ARGS, "--out", str(out)]) == 0
    return out


def region_test_queries(run, region):
    from regionfed.config import build_config, load_config
    from regionfed.data.registry import build_federation

    config = build_config(load_config(run / "config.yaml"))
    federation = build_federation(config.dataset, config.data)
    tests = [c.test for c in federation.clients if c.region == region]
    queries = [" ".join(t) for split in tests for t in split.tokens]
    intents = np.concatenate([split.intent for split in tests])
    return queries, intents


def test_a_regions_answers_reproduce_its_reported_test_accuracy(finished):
    """Typing a region's test queries gives its model's answers: their intent accuracy is
    the per-region intent accuracy the run reported."""
    results = json.loads((finished / "results.json").read_text())
    for region in ("region_00", "region_01"):
        queries, gold = region_test_queries(finished, region)
        answer = predict_queries(finished, region, queries, "regionfed-grad")
        assert answer.regional_model and answer.region == region
        predicted = np.array([INTENTS.index(a.intent) for a in answer.regional])
        reported = results["methods"]["regionfed-grad"]["seeds"][0]["per_region_metrics"]
        assert float(np.mean(predicted == gold)) == pytest.approx(
            reported[region]["intent"], abs=1e-9)
        for a, q in zip(answer.regional, queries, strict=True):
            assert [w for w, _ in a.tags] == q.split()
            assert len(a.corrected.split()) == len(q.split())


def test_a_global_method_answers_the_same_in_every_region(finished, capsys):
    answer = predict_queries(finished, "region_01", ["cheap runing shoes"], "fedavg")
    assert not answer.regional_model and answer.regional == answer.global_
    assert main(["predict", "--run", str(finished), "--region", "region_00", "--method",
                 "fedavg", "--json", "cheap runing shoes", "nike air max"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [a["query"] for a in data["global"]] == ["cheap runing shoes", "nike air max"]
    assert all(a["intent"] in INTENTS for a in data["regional"])


def test_the_default_is_the_best_method_with_regional_models(finished, capsys):
    assert main(["predict", "--run", str(finished), "--region", "region_00",
                 "red nike shoes"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("regionfed-grad (seed 0), region region_00")
    assert 'query: "red nike shoes"' in out and "regional" in out and "global" in out


@pytest.mark.parametrize("args, message", [
    (["--region", "atlantis", "shoes"], "unknown region 'atlantis'"),
    (["--region", "region_00", "--method", "majority", "shoes"], "reference"),
    (["--region", "region_00", "--method", "nope", "shoes"], "nope"),
    (["--region", "region_00", "--method", "fedprox", "shoes"], "checkpoint not found"),
    (["--region", "region_00", "  "], "empty query"),
    (["--region", "region_00", "--seed", "3", "shoes"], "checkpoint not found"),
])
def test_bad_predict_input_is_one_error_line(finished, capsys, args, message):
    assert main(["predict", "--run", str(finished), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_a_missing_run_or_a_damaged_checkpoint_is_refused(finished, tmp_path):
    with pytest.raises(ConfigError, match="not a run folder"):
        predict_queries(tmp_path / "nothing", "region_00", ["shoes"])
    damaged = tmp_path / "damaged"
    (damaged / "checkpoints").mkdir(parents=True)
    (damaged / "config.yaml").write_text((finished / "config.yaml").read_text())
    (damaged / "checkpoints" / "fedavg-seed0.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="unreadable"):
        predict_queries(damaged, "region_00", ["shoes"], "fedavg")
