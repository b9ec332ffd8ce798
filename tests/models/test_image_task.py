
import numpy as np
import pytest
import torch
from helpers import shared_data
from learning_outcomes import femnist_fedavg

from regionfed.data.images import ImageDataset
from regionfed.models.image_task import ImageClassificationTask
from regionfed.models.tasks import IGNORE

SHARED = shared_data("femnist")


def images(n, seed=0):
    rng = np.random.default_rng(seed)
    return ImageDataset(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                        rng.integers(0, 62, n))


def test_cnn_is_the_papers_architecture():
    task = ImageClassificationTask(62)
    model = task.build_model(0)
    assert model.fc1.in_features == 1600 and model.fc1.out_features == 512
    assert model.classifier.out_features == 62
    batch = next(task.batches(task.prepare(images(5), training=True), 8, None))
    assert model(batch).shape == (5, 62)
    # conv 832 + 51,264; FC 819,712 + 31,806
    assert sum(p.numel() for p in model.parameters()) == 832 + 51264 + 819712 + 31806
    assert task.parameter_groups(model) == {"head": ["classifier.weight", "classifier.bias"]}


def test_padding_labels_leave_the_loss_unchanged():
    task = ImageClassificationTask(62)
    model = task.build_model(0)
    batch = next(task.batches(task.prepare(images(4), training=True), 8, None))
    padded = {"image": torch.cat([batch["image"], torch.zeros(2, 28, 28)]),
              "label": torch.cat([batch["label"], torch.full((2,), IGNORE)]),
              "weight": torch.cat([batch["weight"], torch.zeros(2)])}
    assert torch.allclose(task.loss(model, batch), task.loss(model, padded))


def test_scores_and_references():
    task = ImageClassificationTask(62)
    data = ImageDataset(np.zeros((4, 28, 28), np.uint8), np.array([3, 3, 5, 3]))
    assert task.score(np.array([3, 3, 3, 3]), data) == {"overall": 0.75, "accuracy": 0.75}
    assert task.reference_predictions(data, data).tolist() == [3, 3, 3, 3]
    parts = task.split_predictions(np.arange(5), [2, 3])
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3, 4]]
    # the jackknife's replicates: accuracy without each example in turn
    assert task.leave_one_out_scores(np.array([3, 3, 3, 3]), data).tolist() == \
        pytest.approx([2 / 3, 2 / 3, 1.0, 2 / 3])


@pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} not present")
def test_fedavg_on_real_femnist_learns_far_above_chance():
    """10 real writers, 4 rounds × 2 epochs: chance is 1/62 = 1.6 %, the majority class 5.9 %.

    Measured by tests/learning_outcomes.py over 5 seeds × {default kernels,
    ATEN_CPU_CAPABILITY=default, OMP_NUM_THREADS=1}: Overall min 0.223, mean 0.403, at
    least 3.8× the majority class; thresholds well below both."""
    scores = femnist_fedavg(0)
    assert scores["batched"] == 1.0  # the CNN's clients train as one batched computation
    assert scores["overall"] > 0.12
    assert scores["times_majority"] > 2.5
