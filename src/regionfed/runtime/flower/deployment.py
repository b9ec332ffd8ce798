"""``--runtime flower``: one method × seed on Flower's Deployment Engine.

The submitting side writes a minimal Flower app (a ``pyproject.toml`` whose components are
this package's :data:`~regionfed.runtime.flower.app.server_app` and ``client_app``), a named
SuperLink connection, and a run-config file carrying the run's YAML, method, seed and result
folder; then ``flwr run … --stream`` submits it and waits (bounded by
``flower.run_timeout_s``). The ServerApp runs on the SuperLink's machine and writes the
result there (:func:`save_result`): ``result.json`` (round logs, test metrics, privacy
ledger) and ``models.safetensors`` (the global model and the model each region is evaluated
with). The result folder is a fresh temporary folder, or one below ``flower.shared_dir``
when the SuperLink runs on another machine that shares that folder.

Both SuperLink and SuperNodes must have regionfed (with the flower extra) installed: the
SuperLink starts with ``--disable-runtime-dependency-installation`` (nothing is fetched) and
the app bundle holds only its ``pyproject.toml``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from regionfed.errors import ConfigError, DataError, DeploymentError
from regionfed.io import save_checkpoint, write_json
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.flower import flower_environment, require_flwr
from regionfed.runtime.flower.node import CONFIG_KEY, METHOD_KEY, SEED_KEY
from regionfed.runtime.runtimes import OnRound, Runtime, RuntimeRun
from regionfed.runtime.simulator import FederatedRun

#: run-config key of the folder the ServerApp writes its result to ("" = don't write)
OUT_KEY = "out-dir"
#: run-config key of the bound on waiting for one exchange's replies
REPLY_TIMEOUT_KEY = "reply-timeout-s"
APP_DIR = "regionfed_app"  # flwr requires a valid project name as the folder name
APP_PUBLISHER, APP_NAME = "regionfed", "regionfed-app"
#: the id Flower gives the app (publisher/name): what a warm node agrees to run
APP_ID = f"{APP_PUBLISHER}/{APP_NAME}"
CONNECTION = "regionfed"
RESULT_FILE, MODELS_FILE = "result.json", "models.safetensors"
GLOBAL_KEY, REGION_PREFIX = "global", "region."

APP_PYPROJECT = f"""\
# The Flower app of regionfed: its components live in the installed regionfed package.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{APP_NAME}"
version = "1.0.0"
description = "regionfed strategies on Flower's Deployment Engine"
license = "Apache-2.0"
dependencies = ["regionfed[flower]"]

[tool.flwr.app]
publisher = "{APP_PUBLISHER}"

[tool.flwr.app.components]
serverapp = "regionfed.runtime.flower.app:server_app"
clientapp = "regionfed.runtime.flower.app:client_app"

[tool.flwr.app.config]
{CONFIG_KEY} = ""
{METHOD_KEY} = "fedavg"
{SEED_KEY} = 0
{OUT_KEY} = ""
{REPLY_TIMEOUT_KEY} = 600.0
"""


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are a subset of TOML's)."""
    return json.dumps(value)


def write_app(folder: Path) -> Path:
    """The app folder ``flwr run`` bundles (only a ``pyproject.toml``)."""
    app = folder / APP_DIR
    app.mkdir(parents=True, exist_ok=True)
    (app / "pyproject.toml").write_text(APP_PYPROJECT)
    return app


def write_connection(flwr_home: Path, superlink: str) -> None:
    """A named, insecure SuperLink connection in ``$FLWR_HOME/config.toml``."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    (flwr_home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
        f"address = {toml_string(superlink)}\ninsecure = true\n")


def write_run_config(path: Path, config_yaml: str, method: str, seed: int, out_dir: Path,
                     reply_timeout_s: float) -> None:
    path.write_text(f"{toml_string(CONFIG_KEY)} = {toml_string(config_yaml)}\n"
                    f"{METHOD_KEY} = {toml_string(method)}\n{SEED_KEY} = {int(seed)}\n"
                    f"{toml_string(OUT_KEY)} = {toml_string(str(out_dir))}\n"
                    f"{toml_string(REPLY_TIMEOUT_KEY)} = {float(reply_timeout_s)!r}\n")


def flower_executable(name: str) -> str:
    """A Flower console script of this interpreter's environment (else from ``PATH``)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"{name} is not installed: pip install 'regionfed[flower]'")
    return found


# -- the ServerApp's side ------------------------------------------------------------------
def save_result(out_dir: str | Path, run: FederatedRun, ledger: PrivacyLedger) -> None:
    """What the submitting side reads back (module docstring); models first, so a present
    ``result.json`` means a complete result."""
    out = Path(out_dir)
    tensors = {GLOBAL_KEY: run.final_params}
    tensors.update({REGION_PREFIX + r: p for r, p in run.regional_params.items()})
    save_checkpoint(out / MODELS_FILE, tensors)
    write_json(out / RESULT_FILE, {"history": run.history, "test": run.test,
                                   "privacy": ledger.to_dict()})


def load_result(out_dir: str | Path) -> tuple[FederatedRun, dict[str, Any]]:
    """(run, privacy ledger record) written by :func:`save_result`."""
    out = Path(out_dir)
    try:
        record = json.loads((out / RESULT_FILE).read_text())
        tensors = load_file(str(out / MODELS_FILE))
    except (OSError, ValueError) as exc:
        raise DataError(f"unreadable Flower result in {out}: {exc}") from None
    regional = {k.removeprefix(REGION_PREFIX): v for k, v in tensors.items()
                if k.startswith(REGION_PREFIX)}
    return (FederatedRun(record["history"], record["test"], tensors[GLOBAL_KEY], regional),
            record["privacy"])


# -- the submitting side -------------------------------------------------------------------
def run_flower_deployment(config: Any, method: str, seed: int,
                          on_round: Callable[[dict[str, Any]], None] | None = None,
                          log: Callable[[str], None] | None = None
                          ) -> tuple[FederatedRun, dict[str, Any]]:
    """Submit ``method`` with ``seed`` to the SuperLink at ``config.flower.superlink`` and
    wait for its result: (run, privacy ledger record). ``on_round`` gets
    the round logs once the run has finished; ``log`` gets Flower's streamed log lines."""
    require_flwr()
    settings = config.flower
    base = Path(settings.shared_dir) if settings.shared_dir else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rf-deploy-", dir=base))
    try:
        env = flower_environment({**os.environ, "FLWR_HOME": str(work / "home")},
                                 state_keys=("FLWR_HOME",))
        write_connection(work / "home", settings.superlink)
        app = write_app(work)
        run_config = work / "run-config.toml"
        write_run_config(run_config, config.to_yaml(), method, seed, work / "result",
                         settings.reply_timeout_s)
        command = [flower_executable("flwr"), "run", str(app), CONNECTION, "--stream",
                   "--run-config", str(run_config)]
        try:
            output = _stream(command, env, settings.run_timeout_s, log)
        except RunTimedOut as timed_out:
            stopped = stop_run(timed_out.output, env)
            raise DeploymentError(
                f"flwr run did not finish within {settings.run_timeout_s:g} s "
                f"(flower.run_timeout_s); {stopped}") from None
        if not (work / "result" / RESULT_FILE).exists():
            raise DeploymentError(f"the Flower run of {method} (seed {seed}) on "
                                  f"{settings.superlink} ended without a result: "
                                  f"{failure_reason(output)}")
        run, privacy = load_result(work / "result")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if on_round is not None:
        for entry in run.history:
            on_round(entry)
    return run, privacy


class FlowerDeploymentRuntime(Runtime):
    """``--runtime flower`` behind the one runtime seam: each run submitted to the
    SuperLink at ``config.flower.superlink``."""

    name = "flower"

    def __init__(self, config: Any) -> None:
        self.config = config

    def run(self, method: str, seed: int, on_round: OnRound | None = None) -> RuntimeRun:
        run, privacy = run_flower_deployment(self.config, method, seed, on_round)
        return RuntimeRun(run, run.test, privacy)


class RunTimedOut(Exception):
    """``flwr run`` outlived its timeout; ``output`` holds the lines it printed."""

    def __init__(self, output: list[str]) -> None:
        super().__init__("flwr run timed out")
        self.output = output


def started_run_id(output: list[str]) -> int | None:
    """The run id ``flwr run`` printed ("Successfully started run <id>"), if any."""
    for line in output:
        found = re.search(r"Successfully started run (\d+)", line)
        if found:
            return int(found.group(1))
    return None


def stop_run(output: list[str], env: dict[str, str]) -> str:
    """Ask the SuperLink to stop a run whose submitter gave up (killing ``flwr run`` only
    stops the log stream; the ServerApp would go on using the nodes). Returns what
    happened, for the error message."""
    run_id = started_run_id(output)
    if run_id is None:
        return "the run had not started, nothing to stop"
    try:
        done = subprocess.run([flower_executable("flwr"), "stop", str(run_id), CONNECTION],
                              env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"stopping run {run_id} on the SuperLink failed ({exc})"
    if done.returncode != 0:
        reason = failure_reason((done.stdout + done.stderr).splitlines())
        return f"stopping run {run_id} on the SuperLink failed ({reason})"
    return f"run {run_id} was stopped on the SuperLink"


def failure_reason(output: list[str]) -> str:
    """The most specific line of a failed run's log: the last exception line, else the
    last non-empty line."""
    lines = [line.strip() for line in output if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line):
            return line
    return lines[-1] if lines else "flwr run printed nothing"


def _stream(command: list[str], env: dict[str, str], timeout: float,
            log: Callable[[str], None] | None) -> list[str]:
    """Run ``command``; its output lines, each also passed to ``log``; killed (with a clear
    error) after ``timeout`` seconds."""
    import threading

    lines: list[str] = []
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def read() -> None:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if log is not None:
                log(lines[-1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        reader.join(timeout=5)
        raise RunTimedOut(lines) from None
    reader.join(timeout=5)
    return lines
