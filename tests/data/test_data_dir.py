"""``--data-dir DIR`` (SPEC §9.1): a real dataset's files are found in a folder by their
published names, and an empty, ambiguous or wrong folder is one clear error."""

import shutil

import numpy as np
import pytest
from helpers import FIXTURES

from regionfed.cli import build_parser, config_from_args, main
from regionfed.data.data_dir import data_dir_overrides
from regionfed.errors import DataError


def test_esci_finds_the_official_names_and_the_products_file(tmp_path):
    (tmp_path / "shopping_queries_dataset_examples.parquet").write_bytes(b"")
    (tmp_path / "shopping_queries_dataset_products.parquet").write_bytes(b"")
    (tmp_path / "other_examples.csv").write_text("")  # the official name wins
    assert data_dir_overrides("esci", tmp_path) == {
        "data.path": str(tmp_path / "shopping_queries_dataset_examples.parquet"),
        "data.products_path": str(tmp_path / "shopping_queries_dataset_products.parquet")}


def test_femnist_takes_a_leaf_folder_or_the_one_npz(tmp_path):
    leaf = tmp_path / "leaf"
    (leaf / "train").mkdir(parents=True)
    (leaf / "test").mkdir()
    assert data_dir_overrides("femnist", leaf) == {"data.path": str(leaf)}
    assert data_dir_overrides("femnist", tmp_path) == {"data.path": str(leaf)}
    np.savez(tmp_path / "subset.npz", x=np.zeros(1))
    with pytest.raises(DataError, match="several FEMNIST candidates"):
        data_dir_overrides("femnist", tmp_path)


@pytest.mark.parametrize(("dataset", "message"), [
    ("esci", "no ESCI examples file"), ("reviews", "no review file in this folder"),
    ("femnist", "no FEMNIST data"), ("esci-synth", "does not apply to esci-synth")])
def test_an_empty_folder_names_what_was_expected(tmp_path, dataset, message):
    with pytest.raises(DataError, match=message):
        data_dir_overrides(dataset, tmp_path)


def test_two_candidate_files_are_refused_not_guessed(tmp_path):
    for name in ("a_examples.csv", "b_examples.csv"):
        (tmp_path / name).write_text("")
    with pytest.raises(DataError, match=r"several candidates .*a_examples\.csv, b_examples"):
        data_dir_overrides("esci", tmp_path)


def test_the_run_flag_points_the_loader_at_the_folder(tmp_path):
    shutil.copy(FIXTURES / "reviews" / "reviews.jsonl", tmp_path / "reviews.jsonl")
    args = build_parser().parse_args(["run", "--dataset", "reviews", "--data-dir",
                                      str(tmp_path)])
    config = config_from_args(args)
    assert config.data.path == str(tmp_path)  # every review file in it is read


def test_a_missing_folder_is_one_error_line_and_exit_2(tmp_path, capsys):
    assert main(["run", "--dataset", "esci", "--data-dir", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "not a folder" in err[0]
