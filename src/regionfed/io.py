"""Crash-safe file output: write to a temporary sibling, then rename over the target.

A reader never sees a half-written results file or checkpoint, and an interrupted run
leaves the previous version intact.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file


def write_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; results are for sharing
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line with one ``write`` on an ``O_APPEND`` descriptor: a crash can
    only lose the last line, and processes appending to the same file (parallel methods)
    interleave whole lines, never parts of them."""
    data = (json.dumps(record, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a full disk; never leave half a line unannounced
            raise OSError(f"{path}: wrote {written} of {len(data)} bytes of a log line")
    finally:
        os.close(fd)


def save_checkpoint(path: str | Path, tensors: dict[str, torch.Tensor],
                    metadata: dict[str, str] | None = None) -> None:
    """safetensors checkpoint (with optional string ``metadata``), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp),
                  metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
