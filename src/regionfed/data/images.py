"""Labelled images as a federation split (the dataset type of image benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from regionfed.errors import DataError


@dataclass(frozen=True)
class ImageDataset:
    """``pixels`` (N, H, W) uint8 (0 = black … 255 = white) and integer ``labels`` (N,)."""

    pixels: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        if self.pixels.ndim != 3 or self.pixels.dtype != np.uint8:
            raise DataError(f"images must be a (N, H, W) uint8 array, got {self.pixels.dtype} "
                            f"{self.pixels.shape}")
        if self.labels.shape != (len(self.pixels),):
            raise DataError(f"{len(self.pixels)} images but labels of shape "
                            f"{self.labels.shape}")

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: np.ndarray) -> ImageDataset:
        return ImageDataset(self.pixels[index], self.labels[index])

    @classmethod
    def concat(cls, parts: list[ImageDataset]) -> ImageDataset:
        return cls(np.concatenate([p.pixels for p in parts]),
                   np.concatenate([p.labels for p in parts]))
