"""Image classification behind the :class:`Task` interface (FEMNIST with the ``cnn``).

Pixels are scaled to [0, 1] with ink = 1 (LEAF stores white = 1, so images are inverted:
the background is 0, as padding and max-pooling expect). The metric is accuracy, reported as
``overall`` (and ``accuracy``) so every table and strategy reads it like the query tasks'
Overall.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from regionfed.data.images import ImageDataset
from regionfed.models.cnn import CNNConfig, FemnistCNN
from regionfed.models.tasks import Batch, ClassificationTask, device_of, minibatch_indices


@dataclass(frozen=True)
class PreparedImages:
    image: torch.Tensor  # (N, H, W) float in [0, 1], ink = 1
    label: torch.Tensor  # (N,) long
    weight: torch.Tensor  # (N,) float

    def __len__(self) -> int:
        return len(self.label)


class ImageClassificationTask(ClassificationTask):

    def __init__(self, num_classes: int, config: CNNConfig | None = None) -> None:
        self.num_classes = num_classes
        self.config = config or CNNConfig()

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return FemnistCNN(self.num_classes, self.config.hidden)

    def prepare(self, dataset: ImageDataset, training: bool) -> PreparedImages:
        image = 1.0 - torch.from_numpy(dataset.pixels).to(torch.float32) / 255.0
        return PreparedImages(image, torch.from_numpy(dataset.labels).long(),
                              torch.ones(len(dataset)))

    def num_examples(self, prepared: PreparedImages) -> int:
        return len(prepared)

    def weighted(self, prepared: PreparedImages, weight: torch.Tensor) -> PreparedImages:
        if weight.shape != (len(prepared),):
            raise ValueError(f"need one weight per example ({len(prepared)})")
        return PreparedImages(prepared.image, prepared.label, weight.to(torch.float32))

    def concat_prepared(self, parts: list[PreparedImages]) -> PreparedImages:
        return PreparedImages(*(torch.cat([getattr(p, f) for p in parts])
                                for f in ("image", "label", "weight")))

    def batches(self, prepared: PreparedImages, batch_size: int,
                generator: torch.Generator | None) -> Iterator[Batch]:
        for index in minibatch_indices(len(prepared), batch_size, generator):
            yield {"image": prepared.image[index], "label": prepared.label[index],
                   "weight": prepared.weight[index]}

    @torch.no_grad()
    def predict(self, model: nn.Module, dataset: ImageDataset) -> np.ndarray:
        was_training = model.training
        model.eval()
        prepared = self.prepare(dataset, training=False)
        device = device_of(model)
        out = [model({"image": prepared.image[i:i + 512].to(device)}).argmax(-1).cpu()
               for i in range(0, len(prepared), 512)]
        model.train(was_training)
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.int64)

    def labels(self, dataset: ImageDataset) -> np.ndarray:
        return dataset.labels
