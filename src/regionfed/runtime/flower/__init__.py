"""Scale-out on Flower (``flwr``, the ``flower`` extra): the same transport-free strategies,
driven over Flower messages instead of in-process calls (docs/flower.md)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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


#: Flower and Ray state out of $HOME, no telemetry or update checks (docs/flower.md)
QUIET_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
             "RAY_USAGE_STATS_ENABLED": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}


#: the state folders Flower (and, in simulation, Ray and uv) write below
STATE_KEYS = ("FLWR_HOME", "RAY_TMPDIR", "UV_CACHE_DIR")


def flower_environment(env: dict[str, str] | None = None, prefix: str = "rf-flower-",
                       state_keys: tuple[str, ...] = STATE_KEYS) -> dict[str, str]:
    """Switch off Flower's and Ray's network calls in ``env`` (default ``os.environ``), put
    this interpreter's scripts folder on ``PATH``, and point the ``state_keys`` that are not
    set yet at one new folder in /tmp; returns ``env``."""
    env = os.environ if env is None else env
    for key, value in QUIET_ENV.items():
        env.setdefault(key, value)
    # Flower starts its helpers (flower-superexec, flwr-serverapp, …) by name: this
    # interpreter's scripts folder must be on PATH even when the venv is not activated
    scripts = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if scripts not in path.split(os.pathsep):
        env["PATH"] = scripts + (os.pathsep + path if path else "")
    missing = [key for key in state_keys if key not in env]
    if missing:
        # short: Ray's unix socket paths below it must stay under 107 bytes
        home = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        env.update(dict.fromkeys(missing, home))
    return env


@contextmanager
def flower_state() -> Iterator[None]:
    """:func:`flower_environment` for the duration of a block: a state folder it had to
    create is removed afterwards, and ``os.environ`` is restored."""
    before = dict(os.environ)
    flower_environment()
    created = next((os.environ[k] for k in STATE_KEYS if k not in before), None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
