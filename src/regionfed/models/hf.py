"""Offline access to Hugging Face ``transformers`` (the ``hf`` extra).

Nothing here may reach a model hub: every load is ``local_files_only`` and the hub client is
switched to offline mode before ``transformers`` is first imported. A missing extra or a
folder that holds no model is a :class:`~regionfed.errors.ConfigError` with a one-line fix.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from regionfed.errors import ConfigError

INSTALL_HINT = "pip install 'regionfed[hf]'"


def transformers_module() -> ModuleType:
    """``transformers``, imported offline and quiet (no hub calls, no progress bars)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise ConfigError(f"this model needs transformers: {INSTALL_HINT}") from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def local_model_dir(path: str | Path, what: str) -> Path:
    """``path`` if it is a folder with a ``config.json`` (a saved ``transformers`` model)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{what}: {folder} is not a folder")
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{what}: {folder} holds no config.json (not a saved "
                          "transformers model)")
    return folder
