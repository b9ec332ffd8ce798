"""The Amazon-reviews loader (JSON lines → category regions, 5-class sentiment) and
TextDataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from regionfed.data.federation import Federation
from regionfed.data.reviews import ReviewsConfig, load_reviews, parse_review
from regionfed.data.text import TextDataset
from regionfed.errors import ConfigError, DataError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reviews" / "reviews.jsonl"


def everything(fed: Federation) -> TextDataset:
    return TextDataset.concat([c.split(s) for c in fed.clients for s in ("train", "val", "test")])


def write_lines(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "reviews.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps({"text": "fine", "rating": 4, "category": "Books"})


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
    first = load_reviews(path=str(FIXTURE), max_reviews=5, clients_per_region=1)
    assert first.regions == ["Books"] and len(everything(first)) == 5
    short = load_reviews(path=str(FIXTURE), max_tokens=3, clients_per_region=2)
    assert max(len(t) for t in everything(short).tokens) == 3


def test_empty_texts_are_skipped_and_counted(tmp_path):
    lines = [GOOD] * 3 + [json.dumps({"text": "   ", "rating": 1, "category": "Books"})]
    fed = load_reviews(path=str(write_lines(tmp_path, lines)), clients_per_region=1)
    assert len(everything(fed)) == 3 and fed.meta["source"]["empty"] == 1


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("line, fragment", [
    ("{not json", "line 2: invalid JSON"),
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    (json.dumps({"text": "x", "category": "Books"}), "line 2: missing field 'rating' "
     r"\(accepted names: rating, overall\)"),
    (json.dumps({"rating": 3, "category": "Books"}), "line 2: missing field 'text'"),
    (json.dumps({"text": "x", "rating": 3}), "line 2: missing field 'category'"),
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
    with pytest.raises(DataError, match="is not a file"):
        load_reviews(path=str(tmp_path))
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="binary.jsonl is not a readable utf-8 text file"):
        load_reviews(path=str(binary))
    empty = write_lines(tmp_path, [""])
    with pytest.raises(DataError, match="no usable review"):
        load_reviews(path=str(empty))


def test_too_few_reviews_and_unknown_regions_name_the_region(tmp_path):
    path = write_lines(tmp_path, [GOOD] * 6 + [GOOD.replace("Books", "Toys")] * 2)
    with pytest.raises(DataError, match="region \\(category\\) 'Toys' has 2 reviews, too few "
                       "for 2 clients"):
        load_reviews(path=str(path), clients_per_region=2)
    assert load_reviews(path=str(path), clients_per_region=2, regions=["Books"]).regions == [
        "Books"]
    with pytest.raises(DataError, match="category\\(ies\\) 'Garden'.*found: Books"):
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
