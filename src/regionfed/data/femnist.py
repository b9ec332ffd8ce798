"""FEMNIST (LEAF; Caldas et al., 2018) as a federation: writers are clients (paper B.3).

Sources: LEAF's json files (``{"users", "num_samples", "user_data": {user: {"x": [[784
floats in [0, 1]]], "y": [...]}}}``, plain or gzipped, in ``train/`` and ``test/`` folders),
or the lossless compact ``.npz`` (``x`` uint8 (N, 784), ``y``, ``writer_idx``, ``writers``,
``split`` 0 = train / 1 = test). Each writer keeps LEAF's own train/test split; a seeded
``val_fraction`` of its training images becomes its validation split. Only writers with
training and test data are used.

Regions (paper B.3): agglomerative clustering (Ward linkage, SciPy) of the writers'
normalised class histograms on their training data, cut into ``num_regions`` clusters.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from regionfed.data.federation import ClientData, Federation
from regionfed.data.images import ImageDataset
from regionfed.errors import DataError

NUM_CLASSES = 62
SIDE = 28


class FemnistConfig(BaseModel):
    """Where the FEMNIST data is and how it becomes a federation."""

    model_config = ConfigDict(extra="forbid")

    path: str = "../shared/data/femnist/femnist_leaf_sf05_subset.npz"
    num_regions: int = Field(4, ge=1)
    #: keep at most this many writers (the largest by training images); None = all
    max_writers: int | None = Field(None, ge=1)
    min_train_samples: int = Field(10, ge=2)
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    seed: int = 0


def _read_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as handle:
            data = json.load(handle)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not a readable LEAF json file ({exc})") from None
    if not isinstance(data, dict) or not {"users", "user_data"} <= set(data):
        raise DataError(f"{path} is not a LEAF file: needs 'users' and 'user_data' keys")
    return data


def _to_pixels(x: Any, where: str) -> np.ndarray:
    array = np.asarray(x, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != SIDE * SIDE:
        raise DataError(f"{where}: images must be rows of {SIDE * SIDE} values, got shape "
                        f"{array.shape}")
    if not np.isfinite(array).all() or array.min() < 0 or array.max() > 1:
        raise DataError(f"{where}: pixel values must lie in [0, 1]")
    return np.rint(array * 255).astype(np.uint8).reshape(-1, SIDE, SIDE)


def _to_labels(y: Any, n: int, where: str) -> np.ndarray:
    labels = np.asarray(y)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{where}: need {n} integer labels, got {labels.dtype} {labels.shape}")
    if n and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise DataError(f"{where}: labels must lie in 0..{NUM_CLASSES - 1}")
    return labels.astype(np.int64)


def read_leaf_json(folder: Path) -> dict[str, dict[str, ImageDataset]]:
    """``{"train": {writer: images}, "test": {…}}`` from LEAF's ``train/`` and ``test/``."""
    out: dict[str, dict[str, ImageDataset]] = {}
    for split in ("train", "test"):
        files = sorted(p for p in (folder / split).glob("*.json*")
                       if p.suffix in (".json", ".gz"))
        if not files:
            raise DataError(f"no LEAF json files in {folder / split}")
        writers: dict[str, list[ImageDataset]] = {}
        for path in files:
            data = _read_json(path)
            for user in data["users"]:
                record = data["user_data"].get(user)
                if not isinstance(record, dict) or not {"x", "y"} <= set(record):
                    raise DataError(f"{path}: user {user!r} has no 'x'/'y' data")
                where = f"{path.name}, user {user}"
                pixels = _to_pixels(record["x"], where)
                writers.setdefault(user, []).append(
                    ImageDataset(pixels, _to_labels(record["y"], len(pixels), where)))
        out[split] = {w: ImageDataset.concat(parts) for w, parts in writers.items()}
    return out


def read_npz(path: Path) -> dict[str, dict[str, ImageDataset]]:
    """The same structure from the compact ``.npz``."""
    try:
        data = np.load(path, allow_pickle=False)
        x, y, idx, names, split = (data[k] for k in ("x", "y", "writer_idx", "writers",
                                                     "split"))
    except KeyError as exc:
        raise DataError(f"{path} lacks the array {exc} (need x, y, writer_idx, writers, "
                        "split)") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is not a readable npz file ({exc})") from None
    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != SIDE * SIDE:
        raise DataError(f"{path}: x must be uint8 (N, {SIDE * SIDE}), got {x.dtype} {x.shape}")
    n = len(x)
    if not (len(y) == len(idx) == len(split) == n):
        raise DataError(f"{path}: x, y, writer_idx and split must have the same length")
    if n and (idx.min() < 0 or idx.max() >= len(names)):
        raise DataError(f"{path}: writer_idx points outside writers")
    labels = _to_labels(y.astype(np.int64), n, str(path))
    pixels = x.reshape(n, SIDE, SIDE)
    out: dict[str, dict[str, ImageDataset]] = {"train": {}, "test": {}}
    for code, name in ((0, "train"), (1, "test")):
        rows = np.flatnonzero(split == code)
        for w in np.unique(idx[rows]):
            mine = rows[idx[rows] == w]
            out[name][str(names[w])] = ImageDataset(pixels[mine], labels[mine])
    return out


def class_histograms(datasets: list[ImageDataset]) -> np.ndarray:
    """Each dataset's normalised label histogram, (len(datasets), 62)."""
    counts = np.stack([np.bincount(d.labels, minlength=NUM_CLASSES) for d in datasets])
    return counts / counts.sum(axis=1, keepdims=True).clip(min=1)


def cluster_regions(histograms: np.ndarray, num_regions: int) -> np.ndarray:
    """Agglomerative (Ward) clustering into ``num_regions`` groups: a label 0..k−1 per row,
    numbered by first appearance (deterministic)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    if num_regions > len(histograms):
        raise DataError(f"{num_regions} regions need at least as many writers, got "
                        f"{len(histograms)}")
    if num_regions == 1:
        return np.zeros(len(histograms), dtype=int)
    raw = fcluster(linkage(histograms, method="ward"), t=num_regions, criterion="maxclust")
    order = {c: i for i, c in enumerate(dict.fromkeys(raw.tolist()))}
    return np.array([order[c] for c in raw])


def load_femnist(config: FemnistConfig | None = None, **overrides: Any) -> Federation:
    """The FEMNIST federation of ``config`` (see the module docstring)."""
    config = config or FemnistConfig()
    if overrides:
        config = config.model_copy(update=overrides)
    path = Path(config.path)
    if not path.exists():
        raise DataError(f"FEMNIST data not found at {path} (a LEAF folder with train/ and "
                        "test/, or the compact .npz)")
    splits = read_leaf_json(path) if path.is_dir() else read_npz(path)
    writers = [w for w in splits["train"]
               if w in splits["test"] and len(splits["train"][w]) >= config.min_train_samples]
    if not writers:
        raise DataError(f"{path}: no writer has both training (≥ {config.min_train_samples}) "
                        "and test images")
    writers.sort(key=lambda w: (-len(splits["train"][w]), w))
    if config.max_writers is not None:
        writers = writers[:config.max_writers]
    writers.sort()
    regions = cluster_regions(class_histograms([splits["train"][w] for w in writers]),
                              config.num_regions)
    names = [f"region_{r:02d}" for r in range(config.num_regions)]
    rng = np.random.default_rng(config.seed)
    clients = []
    for writer, region in zip(writers, regions, strict=True):
        train = splits["train"][writer]
        order = rng.permutation(len(train))
        n_val = max(1, int(round(config.val_fraction * len(train)))) if config.val_fraction else 0
        clients.append(ClientData(writer, names[region], train.subset(order[n_val:]),
                                  train.subset(order[:n_val]), splits["test"][writer]))
    return Federation("femnist", names, clients,
                      meta={"source": str(path), "writers": len(writers),
                            "num_classes": NUM_CLASSES})
