"""Scale-out on Flower (``flwr``, the ``flower`` extra): the same transport-free strategies,
driven over Flower messages instead of in-process calls (SPEC §10)."""

from __future__ import annotations

from types import ModuleType

from regionfed.errors import ConfigError

INSTALL_HINT = "pip install 'regionfed[flower]'"


def require_flwr() -> ModuleType:
    """``flwr``, or a :class:`ConfigError` saying how to install it."""
    try:
        import flwr
    except ImportError:
        raise ConfigError(f"the Flower runtimes need flwr: {INSTALL_HINT}") from None
    return flwr
