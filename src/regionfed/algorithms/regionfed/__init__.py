"""RegionFed (paper §3, Alg. 1–3; corrections: docs/architecture.md): hierarchical DP aggregation,
gradient conflict, adaptive α, regional adaptation strategies and golden-section ρ."""

from regionfed.algorithms.regionfed.config import RegionFedConfig
from regionfed.algorithms.regionfed.strategy import RegionFed, RegionFedAvg, RegionFedPersist

__all__ = ["RegionFed", "RegionFedAvg", "RegionFedConfig", "RegionFedPersist"]
