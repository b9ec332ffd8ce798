"""``regionfed run --dataset esci|reviews`` from the command line (fixtures and, where
present, the shared real ESCI data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import shared_data

from regionfed.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ESCI = FIXTURES / "esci" / "examples_with_product_text.csv"
REVIEWS = FIXTURES / "reviews" / "reviews.jsonl"
SHARED = shared_data("esci", "esci_examples_with_product_text.csv")
SMALL_MODEL = ["--set", "model.dim=32", "--set", "model.heads=2", "--set",
               "model.ngram_buckets=512", "--set", "model.layers=1"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _ran(out: Path, code: int, stdout: str, metric: str | None) -> dict:
    assert code == 0 and "| fedavg" in stdout
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["majority", "fedavg"]
    for summary in results["methods"].values():
        assert 0.0 <= summary["overall"] <= 1.0
        if metric is not None:
            assert summary[metric] is not None
    return results


def test_esci_fixture_runs_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "esci"
    code, stdout, _ = run_cli(capsys, "run", "--dataset", "esci", "--methods",
                              "majority,fedavg", "--rounds", "1", "--quiet", "--out", str(out),
                              "--set", f"data.path={ESCI}", *SMALL_MODEL)
    results = _ran(out, code, stdout, "ner_f1")
    assert set(results["methods"]["fedavg"]["per_region"]) == {"es", "us"}
    assert results["config"]["data"]["region_by"] == "product_locale"


@pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} not present")
def test_shared_esci_runs_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "real"  # the es locale has 2 queries: one client per region
    code, stdout, _ = run_cli(capsys, "run", "--dataset", "esci", "--methods",
                              "majority,fedavg", "--rounds", "1", "--quiet", "--out", str(out),
                              "--clients-per-region", "1", "--set", f"data.path={SHARED}",
                              *SMALL_MODEL)
    _ran(out, code, stdout, "ner_f1")


def test_reviews_fixture_runs_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "reviews"
    code, stdout, _ = run_cli(capsys, "run", "--dataset", "reviews", "--methods",
                              "majority,fedavg", "--rounds", "1", "--quiet", "--out", str(out),
                              "--clients-per-region", "2", "--set", f"data.path={REVIEWS}",
                              *SMALL_MODEL)
    results = _ran(out, code, stdout, None)
    assert results["methods"]["fedavg"]["ner_f1"] is None  # accuracy only
    assert set(results["methods"]["fedavg"]["per_region"]) == {"Books", "Electronics", "Home"}
    # the run says what it trained and tested on, and how the repeated texts were split
    sizes, repeats = results["data"]["split_sizes"], results["data"]["source"]["duplicate_texts"]
    assert (f"data: {sizes['train']:,} train / {sizes['val']:,} val / {sizes['test']:,} test "
            f"examples; {repeats:,} repeated text") in stdout
    assert "each in one split (leak-free)" in stdout


@pytest.mark.parametrize("argv, fragment", [
    (["--dataset", "esci", "--set", "data.path=/nonexistent/esci.csv"],
     "ESCI examples file not found at /nonexistent/esci.csv"),
    (["--dataset", "esci", "--set", "data.region_by=category_map"], "needs category_map"),
    (["--dataset", "esci", "--regions", "3"], "data.num_regions: unknown key"),
    (["--dataset", "reviews", "--set", "data.path=/nonexistent/r.jsonl"],
     "reviews file not found at /nonexistent/r.jsonl"),
    (["--dataset", "reviews"], "needs data.path"),
])
def test_bad_real_data_input_is_one_error_line_and_exit_2(tmp_path, capsys, argv, fragment):
    code, _, err = run_cli(capsys, "run", "--quiet", "--rounds", "1", "--methods",
                           "majority,fedavg", "--out", str(tmp_path / "x"), *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:")
    assert fragment in lines[0]
