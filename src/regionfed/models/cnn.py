"""``cnn``: the FEMNIST CNN of the paper (App. B.3; LEAF's reference model).

Conv 1→32 (5×5, "same" padding) → ReLU → 2×2 max-pool → Conv 32→64 (5×5, no padding) →
ReLU → 2×2 max-pool → FC 1600→512 → ReLU → FC 512→62. On 28×28 inputs the second block
leaves 64 × 5 × 5 = 1,600 features, the paper's FC input.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class CNNConfig(BaseModel):
    """Architecture of the ``cnn`` model."""

    model_config = ConfigDict(extra="forbid")

    name: str = "cnn"
    hidden: int = Field(512, gt=0)


class FemnistCNN(nn.Module):
    def __init__(self, num_classes: int, hidden: int = 512) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * 5 * 5, hidden)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        x = batch["image"].unsqueeze(1)  # (B, 1, 28, 28)
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.classifier(torch.relu(self.fc1(x.flatten(1))))

    def parameter_groups(self) -> dict[str, list[str]]:
        """``head``: the classifier; there is no attention (FedTP is n/a)."""
        return {"head": ["classifier.weight", "classifier.bias"]}
