"""``--data-dir DIR`` (docs/cli.md): find a real dataset's files in a folder, so users point at
where they unpacked the data instead of naming each file. The result is ordinary ``data.*``
config overrides; the loaders still validate the files themselves.

Conventions (the names the datasets are published under, or the one file of its kind):

* ``femnist``: a LEAF folder (``train/`` and ``test/``), a folder holding one, or one ``.npz``;
* ``esci``: ``shopping_queries_dataset_examples.parquet`` (the official name) or the one
  ``*examples*.parquet|.csv`` file; ``shopping_queries_dataset_products.parquet`` (or the one
  ``*products*`` file) becomes ``data.products_path`` when present;
* ``reviews``: the folder itself: every ``.json``, ``.jsonl``, ``.json.gz`` and
  ``.jsonl.gz`` file in it (e.g. the UCSD ``<Category>_5.json.gz`` files), a region per
  category.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from regionfed.errors import DataError


def data_dir_overrides(dataset: str, directory: str | Path) -> dict[str, Any]:
    """The ``data.*`` overrides that point ``dataset`` at its files in ``directory``."""
    folder = Path(directory)
    if not folder.is_dir():
        raise DataError(f"--data-dir {folder}: not a folder")
    if dataset == "esci-synth":
        raise DataError("--data-dir does not apply to esci-synth (it is generated); pick "
                        "--dataset femnist, esci or reviews")
    if dataset == "femnist":
        return {"data.path": str(_femnist(folder))}
    if dataset == "esci":
        overrides: dict[str, Any] = {"data.path": str(_esci_examples(folder))}
        products = _one_or_none(folder, ["shopping_queries_dataset_products.parquet"],
                                ["*products*.parquet", "*products*.csv"], "products file")
        if products is not None:
            overrides["data.products_path"] = str(products)
        return overrides
    if dataset == "reviews":
        from regionfed.data.reviews import review_files

        review_files(folder)  # at least one review file, or a DataError saying what is missing
        return {"data.path": str(folder)}
    raise DataError(f"--data-dir: unknown dataset {dataset!r}")


def _femnist(folder: Path) -> Path:
    def is_leaf(path: Path) -> bool:
        return (path / "train").is_dir() and (path / "test").is_dir()

    if is_leaf(folder):
        return folder
    leaf = sorted(p for p in folder.iterdir() if p.is_dir() and is_leaf(p))
    npz = sorted(folder.glob("*.npz"))
    if len(npz) == 1 and not leaf:
        return npz[0]
    if len(leaf) == 1 and not npz:
        return leaf[0]
    if not leaf and not npz:
        raise DataError(f"--data-dir {folder}: no FEMNIST data in it (a LEAF folder with "
                        "train/ and test/, or one .npz)")
    names = ", ".join(p.name for p in [*leaf, *npz])
    raise DataError(f"--data-dir {folder}: several FEMNIST candidates ({names}); set "
                    "data.path to the one to use")


def _esci_examples(folder: Path) -> Path:
    found = _one_or_none(folder, ["shopping_queries_dataset_examples.parquet"],
                         ["*examples*.parquet", "*examples*.csv"], "examples file")
    if found is None:
        raise DataError(f"--data-dir {folder}: no ESCI examples file in it "
                        "(shopping_queries_dataset_examples.parquet or *examples*.csv)")
    return found


def _one_or_none(folder: Path, official: list[str], patterns: list[str],
                 what: str) -> Path | None:
    """The official name if present, else the single file matching ``patterns``."""
    for name in official:
        if (folder / name).is_file():
            return folder / name
    matches = sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})
    if len(matches) > 1:
        names = ", ".join(p.name for p in matches)
        raise DataError(f"--data-dir {folder}: several candidates for the {what} ({names}); "
                        "set data.path to the one to use")
    return matches[0] if matches else None
