import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import shared_data

from regionfed.data.femnist import (
    FemnistConfig,
    class_histograms,
    cluster_regions,
    load_femnist,
    read_leaf_json,
    read_npz,
)
from regionfed.data.images import ImageDataset
from regionfed.errors import DataError

SHARED = shared_data("femnist")
needs_shared = pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} not present")


def _user(rng, n, classes):
    return {"x": rng.random((n, 784)).round(3).tolist(),
            "y": rng.choice(classes, size=n).tolist()}


def write_leaf(folder: Path, users: dict[str, tuple[int, int, list[int]]], gz: bool = True):
    """A LEAF-format folder: ``users`` maps writer → (n_train, n_test, classes)."""
    rng = np.random.default_rng(0)
    for split, k in (("train", 0), ("test", 1)):
        data = {"users": list(users), "num_samples": [u[k] for u in users.values()],
                "user_data": {w: _user(rng, u[k], u[2]) for w, u in users.items()}}
        (folder / split).mkdir(parents=True, exist_ok=True)
        path = folder / split / f"all_data_0_{split}.json{'.gz' if gz else ''}"
        opener = gzip.open if gz else open
        with opener(path, "wt") as handle:
            json.dump(data, handle)
    return folder


USERS = {"w0": (20, 5, [0, 1]), "w1": (20, 5, [0, 1]), "w2": (20, 5, [40, 41]),
         "w3": (20, 5, [40, 41]), "small": (3, 2, [5])}


@pytest.mark.parametrize("gz", [True, False])
def test_leaf_folder_becomes_writers_with_clustered_regions(tmp_path, gz):
    write_leaf(tmp_path, USERS, gz)
    fed = load_femnist(FemnistConfig(path=str(tmp_path), num_regions=2, val_fraction=0.25))
    assert [c.client_id for c in fed.clients] == ["w0", "w1", "w2", "w3"]  # "small" dropped
    region = {c.client_id: c.region for c in fed.clients}
    assert region["w0"] == region["w1"] != region["w2"] == region["w3"]  # same labels, same
    for client in fed.clients:
        assert (len(client.train), len(client.val), len(client.test)) == (15, 5, 5)
        assert client.train.pixels.dtype == np.uint8 and client.train.pixels.shape[1:] == (28, 28)
    # val and train are a partition of the writer's LEAF training images
    raw = read_leaf_json(tmp_path)["train"]["w0"]
    both = ImageDataset.concat([fed.clients[0].train, fed.clients[0].val])
    assert sorted(map(bytes, both.pixels)) == sorted(map(bytes, raw.pixels))


def test_cluster_regions_separates_distinct_label_profiles():
    hist = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 0, 1], [0, 0.1, 0.9], [0, 1, 0]])
    labels = cluster_regions(hist, 3)
    assert labels[0] == labels[1] and labels[2] == labels[3]
    assert len({labels[0], labels[2], labels[4]}) == 3
    assert labels.tolist() == cluster_regions(hist, 3).tolist()  # deterministic
    with pytest.raises(DataError, match="regions need"):
        cluster_regions(hist, 6)


@pytest.mark.parametrize("breakage, fragment", [
    (lambda d: d.pop("user_data"), "needs 'users' and 'user_data'"),
    (lambda d: d["user_data"]["w0"].pop("y"), "no 'x'/'y'"),
    (lambda d: d["user_data"]["w0"].update(x=[[0.5] * 10] * 20), "rows of 784"),
    (lambda d: d["user_data"]["w0"].update(y=[99] * 20), "labels must lie"),
    (lambda d: d["user_data"]["w0"]["x"][0].__setitem__(0, 3.0), r"\[0, 1\]"),
])
def test_malformed_leaf_files_are_refused_with_the_file_named(tmp_path, breakage, fragment):
    write_leaf(tmp_path, USERS, gz=False)
    path = tmp_path / "train" / "all_data_0_train.json"
    data = json.loads(path.read_text())
    breakage(data)
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match=fragment):
        load_femnist(path=str(tmp_path), num_regions=2)


def test_truncated_missing_and_wrong_files_are_refused(tmp_path):
    write_leaf(tmp_path, USERS)
    path = tmp_path / "train" / "all_data_0_train.json.gz"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DataError, match="not a readable LEAF json"):
        load_femnist(path=str(tmp_path))
    with pytest.raises(DataError, match="not found"):
        load_femnist(path=str(tmp_path / "nowhere"))
    empty = tmp_path / "empty"
    (empty / "train").mkdir(parents=True)
    with pytest.raises(DataError, match="no LEAF json files"):
        load_femnist(path=str(empty))
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((2, 784), np.uint8), y=np.zeros(2, np.uint8))
    with pytest.raises(DataError, match="lacks the array"):
        read_npz(bad)


@needs_shared
def test_real_json_and_npz_hold_the_same_writers(tmp_path):
    """Shard 0 of the real LEAF json equals the compact npz's shard-0 writers, bit for bit."""
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
        name = f"all_data_0_niid_05_keep_0_{split}_9.json.gz"
        (tmp_path / split / name).symlink_to(SHARED / "leaf_json" / split / name)
    from_json = read_leaf_json(tmp_path)
    from_npz = read_npz(SHARED / "femnist_leaf_sf05_subset.npz")
    assert from_json["train"]
    for split in ("train", "test"):
        for writer, images in from_json[split].items():
            other = from_npz[split][writer]
            assert np.array_equal(images.pixels, other.pixels)
            assert np.array_equal(images.labels, other.labels)


@needs_shared
def test_real_subset_federation():
    fed = load_femnist(path=str(SHARED / "femnist_leaf_sf05_subset.npz"), num_regions=4,
                       min_train_samples=2)
    assert len(fed.clients) == 105  # writers with train and test data (data README)
    assert fed.num_examples("train") + fed.num_examples("val") == 14708
    labels = np.concatenate([c.train.labels for c in fed.clients])
    assert len(np.unique(labels)) == 62
    hist = class_histograms([c.train for c in fed.clients])
    assert np.allclose(hist.sum(axis=1), 1.0)
    assert all(fed.clients_in(r) for r in fed.regions)
    small = load_femnist(path=str(SHARED / "femnist_leaf_sf05_subset.npz"), num_regions=4)
    assert len(small.clients) == 101  # the default drops writers with < 10 training images
