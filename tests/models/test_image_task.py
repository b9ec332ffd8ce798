
import numpy as np
import pytest
import torch
from helpers import shared_data

from regionfed.algorithms.fedavg import FedAvg
from regionfed.config import TrainingConfig
from regionfed.data.femnist import load_femnist
from regionfed.data.images import ImageDataset
from regionfed.models.image_task import ImageClassificationTask
from regionfed.models.tasks import IGNORE
from regionfed.runtime.evaluation import FederationEvaluator
from regionfed.runtime.local_training import OptimizerConfig
from regionfed.runtime.simulator import Simulator

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


@pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} not present")
def test_fedavg_on_real_femnist_learns_far_above_chance():
    """20 real writers, 4 rounds × 2 epochs: chance is 1/62 = 1.6 %."""
    fed = load_femnist(path=str(SHARED / "femnist_leaf_sf05_subset.npz"), num_regions=4,
                       max_writers=20)
    task = ImageClassificationTask(62)
    training = TrainingConfig(rounds=4, local_epochs=2, batch_size=20, eval_every=4,
                              optimizer=OptimizerConfig(name="adamw", lr=3e-3))
    run = Simulator(fed, task, training, seed=0).run(FedAvg())
    evaluator = FederationEvaluator(task, fed)
    train = evaluator.pooled_split("train")
    majority = evaluator.evaluate("test", lambda c: task.reference_predictions(train, c.test))
    assert run.history[0]["client_batching"] == "batched"
    assert run.test["overall"] > 0.3  # measured 0.457
    assert run.test["overall"] > 3 * majority["overall"]
