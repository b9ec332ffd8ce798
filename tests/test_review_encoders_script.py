import json

from helpers import load_script

SCRIPT = "experiments/review_encoders.py"


def test_review_files_carry_sentiment_in_rare_adjectives_and_negations(tmp_path):
    module = load_script(SCRIPT)
    written = module.write_reviews(tmp_path, per_category=200, adjectives=40, negation=0.3,
                                   positive_share=0.6, seed=0)
    from regionfed.data.reviews import load_reviews

    fed = load_reviews(path=str(tmp_path), clients_per_region=2)
    assert sorted(fed.regions) == sorted(written["categories"])  # one region per file
    lines = [json.loads(x) for f in sorted(tmp_path.glob("*_5.json"))
             for x in f.read_text().splitlines()]
    positive = {ln["reviewText"] for ln in lines if ln["overall"] == 5.0}
    negated = [t for t in positive if " not " in f" {t} "]
    assert 0.2 < len(negated) / len(positive) < 0.4
    # a negated positive review uses a negative adjective: no word decides alone
    negative = set(module.NEGATIVE[:40])
    assert all(negative & set(t.replace(".", " ").split()) for t in negated)


def test_the_script_compares_the_encoders_with_majority(tmp_path):
    module = load_script(SCRIPT)
    out = tmp_path / "re"
    assert module.main(["--models", "tiny", "--per-category", "30", "--rounds", "1",
                        "--seeds", "1", "--out", str(out)]) == 0
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["tiny"]
    assert 0.0 <= rows[0]["fedavg"]["mean"] <= 1.0 and len(rows[0]["majority"]["seeds"]) == 1
    assert "| tiny |" in (out / "review_encoders.md").read_text()
