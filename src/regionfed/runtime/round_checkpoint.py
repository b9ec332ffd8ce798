"""Round checkpoints: after every ``training.checkpoint_every`` rounds the whole state of one
method × seed — global model and everything else the strategy holds (regional models,
control variates, optimizer state, α/μ calibration, its random generators), every client's
private state and shuffling counters, the privacy ledger, the round logs and torch's global
RNG — goes into one safetensors file (tensors + a JSON tree in its metadata), written to a
temporary file and renamed over the previous one. A run killed at any moment resumes from
the last complete round and reaches exactly the result of an uninterrupted run. The file
also carries the run's training time up to that round, so a resumed run reports the time of
all its invocations (work lost after the last checkpoint is not counted).

A checkpoint records which run wrote it (method, seed, sha256 of the configuration); a
checkpoint of another run, or an unreadable one, is refused with a :class:`CheckpointError`,
never used.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from regionfed.algorithms.base import Strategy
from regionfed.io import save_checkpoint
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.state import CheckpointError, capture, capture_value, load_value, restore

FORMAT = "regionfed-round-checkpoint/1"


def run_identity(method: str, seed: int, config_yaml: str) -> dict[str, Any]:
    """What a checkpoint must match to be resumed."""
    return {"method": method, "seed": int(seed),
            "config_sha256": hashlib.sha256(config_yaml.encode()).hexdigest()}


class RoundCheckpoints:
    """The round checkpoint file of one method × seed."""

    def __init__(self, path: str | Path, identity: dict[str, Any], every: int = 1) -> None:
        self.path = Path(path)
        self.identity = identity
        self.every = every
        self.seconds_before_resume = 0.0  # run time recorded in the checkpoint resumed from
        self._clock = time.perf_counter()

    def elapsed_seconds(self) -> float:
        """Run time so far: the resumed checkpoint's, plus this invocation's since the
        object was made (or since it loaded the checkpoint)."""
        return self.seconds_before_resume + time.perf_counter() - self._clock

    def due(self, rnd: int, rounds: int) -> bool:
        return self.every > 0 and rnd < rounds and rnd % self.every == 0

    def save(self, rnd: int, strategy: Strategy, clients: dict[str, Any],
             ledger: PrivacyLedger | None, history: list[dict[str, Any]]) -> None:
        tensors: dict[str, torch.Tensor] = {}

        def part(prefix: str, captured: tuple[Any, dict[str, torch.Tensor]]) -> Any:
            tree, own = captured
            tensors.update({f"{prefix}.{k}": v for k, v in own.items()})
            return _prefixed(tree, prefix)

        tree = {
            "format": FORMAT, "identity": self.identity, "round": rnd,
            "strategy_type": type(strategy).__name__,
            "strategy": part("strategy", capture(strategy, "strategy")),
            "clients": part("clients", capture_value(
                {cid: {"state": c.state, "train_calls": c.train_calls}
                 for cid, c in clients.items()}, "clients")),
            "ledger": None if ledger is None else part("ledger", capture(ledger, "ledger")),
            "history": part("history", capture_value(history, "history")),
            "torch_rng": part("rng", capture_value(torch.get_rng_state(), "torch_rng")),
            "elapsed_seconds": self.elapsed_seconds(),
        }
        save_checkpoint(self.path, tensors, {"regionfed": json.dumps(tree, allow_nan=False)})

    def load_into(self, strategy: Strategy, clients: dict[str, Any],
                  ledger: PrivacyLedger | None) -> tuple[int, list[dict[str, Any]]] | None:
        """Restore the saved state into freshly set-up objects; (round, history) of the
        checkpoint, or ``None`` when there is none."""
        if not self.path.exists():
            return None
        tree, tensors = self._read(with_tensors=True)
        if tree.get("strategy_type") != type(strategy).__name__:
            raise CheckpointError(f"checkpoint {self.path} holds a {tree.get('strategy_type')}"
                                  f" strategy, not a {type(strategy).__name__}")
        try:
            restore(strategy, tree["strategy"], tensors, "strategy")
            saved_clients = load_value(tree["clients"], tensors, None, "clients")
            if set(saved_clients) != set(clients):
                raise CheckpointError(f"checkpoint {self.path} holds other clients than this "
                                      "federation")
            for cid, saved in saved_clients.items():
                clients[cid].state = saved["state"]
                clients[cid].train_calls = saved["train_calls"]
            if ledger is not None and tree["ledger"] is not None:
                restore(ledger, tree["ledger"], tensors, "ledger")
            history = load_value(tree["history"], tensors, None, "history")
            torch.set_rng_state(load_value(tree["torch_rng"], tensors, None, "torch_rng"))
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"checkpoint {self.path} is corrupt: {exc}") from None
        # checkpoints written before the field existed carry no time: count from here
        self.seconds_before_resume = float(tree.get("elapsed_seconds", 0.0))
        return int(tree["round"]), history

    def saved_round(self) -> int | None:
        """The round of the checkpoint on disk (checked: same run, readable), or ``None``."""
        if not self.path.exists():
            return None
        tree, _ = self._read(with_tensors=False)  # the metadata is enough
        return int(tree["round"])

    def _read(self, with_tensors: bool) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The checkpoint's tree (checked: readable, this format, this run) and, if asked,
        its tensors."""
        try:
            with safe_open(str(self.path), framework="pt") as handle:
                metadata = handle.metadata() or {}
                tensors = ({k: handle.get_tensor(k) for k in handle.keys()} if with_tensors
                           else {})
            tree = json.loads(metadata["regionfed"])
        except Exception as exc:  # noqa: BLE001 - any failure to read means corrupt
            raise CheckpointError(f"checkpoint {self.path} is corrupt or not a regionfed "
                                  f"round checkpoint ({type(exc).__name__})") from None
        if not isinstance(tree, dict) or tree.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint {self.path} is not a {FORMAT} file")
        if tree.get("identity") != self.identity:
            raise CheckpointError(
                f"checkpoint {self.path} belongs to another run ({_describe(tree)}; this run: "
                f"{self.identity['method']} seed {self.identity['seed']}, config "
                f"{self.identity['config_sha256'][:12]}); resume with the configuration that "
                "wrote it, or delete the file")
        return tree, tensors

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _prefixed(tree: Any, prefix: str) -> Any:
    """Tensor references renamed to ``prefix.name`` (one tensor map for all parts)."""
    if isinstance(tree, list):
        return [_prefixed(v, prefix) for v in tree]
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            if k in ("__tensor__", "__ndarray__", "__torch_generator__"):
                out[k] = f"{prefix}.{v}"
            else:
                out[k] = _prefixed(v, prefix)
        return out
    return tree


def _describe(tree: dict[str, Any]) -> str:
    identity = tree.get("identity") or {}
    return (f"{identity.get('method')} seed {identity.get('seed')}, config "
            f"{str(identity.get('config_sha256'))[:12]}")
