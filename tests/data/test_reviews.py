"""The Amazon-reviews loader (JSON lines → category regions, 5-class sentiment) and
TextDataset."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from regionfed.data.federation import Federation
from regionfed.data.reviews import (
    ReviewsConfig,
    category_from_file_name,
    load_reviews,
    parse_review,
    stratified_sample,
)
from regionfed.data.text import TextDataset
from regionfed.errors import ConfigError, DataError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reviews" / "reviews.jsonl"
#: UCSD Amazon Review Data files as published: 2018 5-core (one gzipped, one plain with a
#: byte-order mark and a review without ``reviewText``) and 2014 (``reviews_<Category>_5``)
UCSD = FIXTURE.parent / "ucsd"


def everything(fed: Federation) -> TextDataset:
    return TextDataset.concat([c.split(s) for c in fed.clients for s in ("train", "val", "test")])


def write_lines(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "reviews.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps({"text": "fine", "rating": 4, "category": "Books"})


def good(count: int, category: str = "Books") -> list[str]:
    """``count`` valid lines with distinct texts (equal texts would share one split)."""
    return [json.dumps({"text": f"fine {i}", "rating": 4, "category": category})
            for i in range(count)]


# ------------------------------------------------------------------------------ fixture


def test_fixture_becomes_category_regions_with_rating_labels():
    fed = load_reviews(path=str(FIXTURE), clients_per_region=2)
    assert fed.name == "reviews" and fed.regions == ["Books", "Electronics", "Home"]
    assert [c.client_id for c in fed.clients] == [f"{r}/c{j:03d}" for r in fed.regions
                                                  for j in range(2)]
    assert all(len(c.train) >= 1 for c in fed.clients)
    assert all(n > 0 for n in fed.region_sizes("test").values())
    data = everything(fed)
    assert len(data) == 18 and fed.meta["source"]["kept"] == 18  # the blank line is skipped
    assert fed.meta["num_classes"] == 5 and fed.meta["max_tokens"] == 64
    text = {" ".join(t): (int(y), c) for t, y, c in zip(data.tokens, data.label, data.category,
                                                        strict=True)}
    # both field-name styles: reviewText/overall (5.0 floats)/main_cat and text/rating/category
    assert text["stopped working after two days!"] == (0, "Electronics")
    assert text["best keyboard i have owned."] == (4, "Electronics")
    assert text["the lamp arrived broken."] == (0, "Home")
    for client in fed.clients:
        for split in ("train", "val", "test"):
            assert set(client.split(split).category) <= {client.region}


def test_loading_is_deterministic_in_the_seed():
    def snapshot(fed: Federation) -> list:
        return [(c.client_id, s, c.split(s).tokens, c.split(s).label.tolist())
                for c in fed.clients for s in ("train", "val", "test")]

    a = load_reviews(ReviewsConfig(path=str(FIXTURE), clients_per_region=2, seed=1))
    assert snapshot(a) == snapshot(load_reviews(path=str(FIXTURE), clients_per_region=2, seed=1))
    assert snapshot(a) != snapshot(load_reviews(path=str(FIXTURE), clients_per_region=2, seed=2))


def test_region_filter_max_reviews_and_max_tokens():
    fed = load_reviews(path=str(FIXTURE), regions=["Home", "Books"], clients_per_region=2)
    assert fed.regions == ["Books", "Home"] and fed.meta["source"]["filtered"] == 6
    sample = load_reviews(path=str(FIXTURE), max_reviews=9, clients_per_region=1)
    assert sample.regions == ["Books", "Electronics", "Home"] and len(everything(sample)) == 9
    source = sample.meta["source"]  # stratified: 6 / 6 / 6 usable → 3 / 3 / 3 kept
    assert source["available"] == {"Books": 6, "Electronics": 6, "Home": 6}
    assert source["kept_per_region"] == {"Books": 3, "Electronics": 3, "Home": 3}
    short = load_reviews(path=str(FIXTURE), max_tokens=3, clients_per_region=2)
    assert max(len(t) for t in everything(short).tokens) == 3


def test_empty_texts_are_skipped_and_counted(tmp_path):
    lines = good(3) + [json.dumps({"text": "   ", "rating": 1, "category": "Books"})]
    fed = load_reviews(path=str(write_lines(tmp_path, lines)), clients_per_region=1)
    assert len(everything(fed)) == 3 and fed.meta["source"]["empty"] == 1


def test_reviews_without_text_are_skipped_and_counted(tmp_path):
    lines = good(3) + [json.dumps({"rating": 5, "category": "Books"})]
    fed = load_reviews(path=str(write_lines(tmp_path, lines)), clients_per_region=1)
    assert len(everything(fed)) == 3 and fed.meta["source"]["no_text"] == 1


def test_a_line_without_category_takes_the_files_name(tmp_path):
    path = write_lines(tmp_path, good(2) + [json.dumps({"text": f"x {i}", "rating": 3})
                                            for i in range(2)])
    fed = load_reviews(path=str(path), clients_per_region=1)
    assert fed.regions == ["Books", "reviews"]
    assert fed.meta["source"]["category_from_file"] == 2


# ------------------------------------------------------------------------------ UCSD files


def test_ucsd_files_as_published_are_read_from_a_folder():
    fed = load_reviews(path=str(UCSD), clients_per_region=2)
    assert fed.regions == ["Digital_Music", "Musical_Instruments", "Toys_and_Games"]
    source = fed.meta["source"]
    assert source["no_text"] == 1  # one 2018 review has no reviewText
    assert source["available"] == {"Digital_Music": 10, "Musical_Instruments": 13,
                                   "Toys_and_Games": 8}
    assert source["category_from_file"] == source["lines"] == 32  # the blank line skipped
    data = everything(fed)
    text = {" ".join(t): (int(y), c)
            for t, y, c in zip(data.tokens, data.label, data.category, strict=True)}
    # the first line of the BOM file is read like any other
    assert text["this album is a masterpiece from the first track to the last."] == (
        4, "Digital_Music")
    assert text["pieces broke within an hour of play."] == (0, "Toys_and_Games")


def test_the_cli_trains_on_a_folder_of_ucsd_files_with_a_region_per_file(tmp_path):
    from regionfed.cli import main

    out = tmp_path / "run"
    assert main(["run", "--dataset", "reviews", "--data-dir", str(UCSD), "--methods",
                 "majority", "--set", "data.clients_per_region=2", "--quiet",
                 "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]["majority"]["per_region"]) == [
        "Digital_Music", "Musical_Instruments", "Toys_and_Games"]
    assert results["data"]["source"]["no_text"] == 1  # the run says what it skipped


def test_repeated_texts_never_reach_both_training_and_test(tmp_path):
    """200 reviews of 40 texts (5-core files repeat texts), over two categories that share
    texts: no text, as the model reads it, is in more than one split."""
    rng = np.random.default_rng(0)
    lines = [json.dumps({"reviewText": f"Great  product number {rng.integers(40)}",
                         "overall": 5.0, "category": ["Books", "Toys"][i % 2]})
             for i in range(200)]
    fed = load_reviews(path=str(write_lines(tmp_path, lines)), clients_per_region=2)
    texts = {s: {" ".join(t) for c in fed.clients for t in c.split(s).tokens}
             for s in ("train", "val", "test")}
    assert texts["test"] and not texts["test"] & (texts["train"] | texts["val"])
    assert not texts["train"] & texts["val"]
    assert fed.meta["source"]["duplicate_texts"] == 200 - len(set().union(*texts.values()))


def test_products_as_clients_keep_each_products_reviews_together():
    fed = load_reviews(path=str(UCSD), client_key="product", clients_per_region=3)
    asin: dict[str, set[str]] = {}  # text as the model reads it → its products
    for path in sorted(UCSD.iterdir()):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8-sig") as handle:
            for line in filter(str.strip, handle):
                record = json.loads(line)
                if "reviewText" in record:
                    text = " ".join(record["reviewText"].lower().split()[:64])
                    asin.setdefault(text, set()).add(record["asin"])  # a text can repeat
    # the largest 3 products of each category (Digital_Music and Toys_and_Games have 3)
    assert [c.client_id for c in fed.clients if c.region == "Musical_Instruments"] == [
        "Musical_Instruments/B00INSTR0", "Musical_Instruments/B00INSTR1",
        "Musical_Instruments/B00INSTR2"]
    for client in fed.clients:
        texts = [" ".join(t) for s in ("train", "val", "test") for t in client.split(s).tokens]
        assert all(client.client_id.split("/")[1] in asin[t] for t in texts)
        assert len(client.train) and len(client.test)
    assert fed.meta["source"]["clients_too_small"] == 0


def test_reviewers_as_clients_need_two_texts_and_an_id(tmp_path):
    with pytest.raises(DataError, match="no reviewer has two distinct review texts"):
        load_reviews(path=str(UCSD), client_key="reviewer")  # one review per reviewer there
    lines = [json.dumps({"text": f"fine {i}", "rating": 4, "category": "Books",
                         "reviewerID": f"R{i % 3}"}) for i in range(9)]
    fed = load_reviews(path=str(write_lines(tmp_path, lines)), client_key="reviewer")
    assert [c.client_id for c in fed.clients] == ["Books/R0", "Books/R1", "Books/R2"]
    path = write_lines(tmp_path, [*lines, json.dumps({"text": "x", "rating": 4,
                                                      "category": "Books"})])
    with pytest.raises(DataError, match="line 10: missing field 'reviewer'"):
        load_reviews(path=str(path), client_key="reviewer")


def test_a_misspelt_region_lists_the_valid_ones():
    with pytest.raises(DataError, match="'Musical_Instrument' \\(regions\\); the categories "
                       "are: Digital_Music, Musical_Instruments, Toys_and_Games"):
        load_reviews(path=str(UCSD), regions=["Musical_Instrument"])


def test_a_bad_line_in_a_gzipped_file_names_the_file_and_line(tmp_path):
    import gzip

    path = tmp_path / "Books_5.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(GOOD + "\n{oops\n")
    with pytest.raises(DataError, match="Books_5.json.gz, line 2: invalid JSON"):
        load_reviews(path=str(tmp_path))
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")  # a gzip header, then nothing valid
    with pytest.raises(DataError, match="Books_5.json.gz is not a readable gzip-compressed "
                       "utf-8 text file"):
        load_reviews(path=str(path))


@pytest.mark.parametrize("name, category", [
    ("Musical_Instruments_5.json.gz", "Musical_Instruments"),
    ("reviews_Toys_and_Games_5.json", "Toys_and_Games"),
    ("Books.jsonl", "Books"), ("Books_50.jsonl.gz", "Books_50"), ("_5.json", "_5.json")])
def test_the_category_of_a_file_name(name, category):
    assert category_from_file_name(Path(name)) == category


def test_a_stratified_sample_keeps_each_groups_share():
    groups = ["a"] * 60 + ["b"] * 30 + ["c"] * 10
    chosen = stratified_sample(groups, 10, seed=0)
    assert [groups[i] for i in chosen].count("a") == 6 and len(set(chosen.tolist())) == 10
    assert [groups[i] for i in stratified_sample(groups, 11, seed=0)].count("a") == 7
    assert chosen.tolist() == stratified_sample(groups, 10, seed=0).tolist()


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("line, fragment", [
    ("{not json", "line 2: invalid JSON"),
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    (json.dumps({"text": "x", "category": "Books"}), "line 2: missing field 'rating' "
     r"\(accepted names: rating, overall\)"),
    (json.dumps({"text": "x", "rating": 6, "category": "B"}), "line 2: rating 6 is not an "
     "integer in 1..5"),
    (json.dumps({"text": "x", "rating": 0, "category": "B"}), "line 2: rating 0"),
    (json.dumps({"text": "x", "rating": 4.5, "category": "B"}), "line 2: rating 4.5"),
    (json.dumps({"text": "x", "rating": "5", "category": "B"}), "line 2: rating must be a "
     "number"),
    (json.dumps({"text": "x", "rating": True, "category": "B"}), "line 2: rating must be a "
     "number, got True"),
    (json.dumps({"text": 7, "rating": 5, "category": "B"}), "line 2: text must be a string"),
    (json.dumps({"text": "x", "rating": 5, "category": ""}), "line 2: category must be a "
     "non-empty string"),
])
def test_malformed_lines_name_the_file_and_line(tmp_path, line, fragment):
    path = write_lines(tmp_path, [GOOD, line, GOOD])
    with pytest.raises(DataError, match=f"reviews.jsonl, {fragment}"):
        load_reviews(path=str(path), clients_per_region=1)


def test_missing_unreadable_and_unset_files(tmp_path):
    with pytest.raises(DataError, match="needs data.path"):
        load_reviews()
    with pytest.raises(DataError, match="reviews file not found at .*none.jsonl"):
        load_reviews(path=str(tmp_path / "none.jsonl"))
    with pytest.raises(DataError, match="no review file in this folder"):
        load_reviews(path=str(tmp_path))
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="binary.jsonl is not a readable utf-8 text file"):
        load_reviews(path=str(binary))
    empty = write_lines(tmp_path, [""])
    with pytest.raises(DataError, match="no usable review"):
        load_reviews(path=str(empty))


def test_too_few_reviews_and_unknown_regions_name_the_region(tmp_path):
    path = write_lines(tmp_path, good(6) + good(2, "Toys"))
    with pytest.raises(DataError, match="region \\(category\\) 'Toys' has 2 reviews, too few "
                       "for 2 clients"):
        load_reviews(path=str(path), clients_per_region=2)
    assert load_reviews(path=str(path), clients_per_region=2, regions=["Books"]).regions == [
        "Books"]
    with pytest.raises(DataError, match="category\\(ies\\) 'Garden'.*categories are: Books, "
                       "Toys"):
        load_reviews(path=str(path), clients_per_region=1, regions=["Books", "Garden"])


@pytest.mark.parametrize("overrides, fragment", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"regions": []}, "regions"),
    ({"alpha": 1}, "alpha: unknown key"),
])
def test_bad_config_is_a_config_error(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_reviews(path=str(FIXTURE), **overrides)


def test_parse_review_accepts_integral_floats():
    assert parse_review({"reviewText": "ok", "overall": 3.0, "main_cat": " Toys "}, "x") == (
        "ok", 2, "Toys")
    assert parse_review({"overall": 3.0}, "x", default_category="Toys") == (None, 2, "Toys")


# ------------------------------------------------------------------------------ TextDataset


def test_text_dataset_subset_concat_and_validation():
    data = TextDataset([["a"], ["b", "c"], ["d"]], np.array([0, 4, 2]), ["x", "y", "z"])
    part = data.subset([2, 0])
    assert part.tokens == [["d"], ["a"]] and part.label.tolist() == [2, 0]
    assert part.category == ["z", "x"]
    both = TextDataset.concat([part, data.subset([])])
    assert len(both) == 2 and both.label.dtype == np.int64
    assert TextDataset([["a"]], [1]).category == [""]
    with pytest.raises(DataError, match="field 'label' has 1 entries, expected 2"):
        TextDataset([["a"], ["b"]], [0])
    with pytest.raises(DataError, match="text 1 has no tokens"):
        TextDataset([["a"], []], [0, 1])
    with pytest.raises(DataError, match="non-negative"):
        TextDataset([["a"]], [-1])
