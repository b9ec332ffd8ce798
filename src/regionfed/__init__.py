"""regionfed: hierarchical, region-personalized, differentially private federated learning."""

from regionfed.errors import ConfigError, DataError, RegionFedError, UnknownMethodError

__version__ = "0.1.0"

__all__ = ["ConfigError", "DataError", "RegionFedError", "UnknownMethodError", "__version__"]
